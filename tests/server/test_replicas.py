#!/usr/bin/env python3
"""Several model replicas in one server (issue 24): `--device cpu,cpu` (cuda:0,cuda:0 on the GPU)
runs one replica per entry behind one shm segment and one port; one fair queue feeds whichever
replica is free.

    python3 test_replicas.py -v TestReplicas        # cpu (ctest server_Replicas)
    python3 test_replicas.py -v TestReplicasGpu     # label gpu (ctest server_ReplicasGpu)

Reuses test_server.py's Server (the real binary, unique shm name and port per server).
"""
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import FIXTURES, SERVER, Server, double_score_weight, f32, f32s, metric, parse_prometheus  # noqa: E402
from vr_testlib import norm_rel_err  # noqa: E402

LLAMA = os.path.join(FIXTURES, "models", "llama_gqa")  # vocab 97, 48 positions


def random_seqs(n, seed, lo=1, hi=48, vocab=97):
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(rng.randint(lo, hi))] for _ in range(n)]


def replica_counts(s, family):
    """{replica index: value} of one verl_reward_replica_* family."""
    out = {}
    for (name, labels), v in parse_prometheus(s.metrics()).items():
        if name == family:
            out[int(dict(labels)["replica"])] = v
    return out


def score_concurrently(tc, s, requests, threads):
    """POSTs every request (a list of sequences) from `threads` client threads at once; returns
    the scores of each request, in request order (float32)."""
    out = [None] * len(requests)
    errors = []

    def work(k):
        try:
            for i in range(k, len(requests), threads):
                st, body = s.score({"input_ids": requests[i]})
                if st != 200:
                    errors.append((i, st, body))
                    return
                out[i] = f32s(body["scores"])
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append((k, repr(e)))

    ts = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    tc.assertEqual(errors, [], s.logtext()[-3000:])
    return out


class TestReplicas(unittest.TestCase):
    """cpu replicas: the cpu backend promises the same bits whatever the batch (docs/protocol.md),
    so every score must equal a one-replica server's bit for bit."""

    def test_scores_equal_one_replica_and_every_replica_works(self):
        seqs = random_seqs(240, seed=24)
        requests = [seqs[i:i + 6] for i in range(0, len(seqs), 6)]  # 40 requests of 6 sequences
        # a small token budget: a request (~150 tokens) is larger than one forward, so the
        # replicas are busy long enough for concurrent clients to need both
        common = ("--threads", "1", "--max-batch-tokens", "64", "--max-wait-us", "0")
        one = Server(self, "--model", LLAMA, "--device", "cpu", *common).wait_ready()
        want = [f32s(one.score({"input_ids": r})[1]["scores"]) for r in requests]
        shm_want = f32s(one.shm_score({"input_ids": requests[0]})["scores"])
        one.stop()
        for devices in ("cpu,cpu", "cpu,cpu,cpu"):
            with self.subTest(devices=devices):
                n = devices.count(",") + 1
                s = Server(self, "--model", LLAMA, "--device", devices, *common).wait_ready()
                st, info, _ = s.request("GET", "/v1/model")
                info = json.loads(info)
                self.assertEqual(info["device"], devices)
                self.assertEqual([r["device"] for r in info["replicas"]], ["cpu"] * n)
                self.assertEqual([r["replica"] for r in info["replicas"]], list(range(n)))
                self.assertIn(f"replicas={n}", s.logtext())
                rounds = 0
                for rounds in range(1, 4):  # rounds until every replica has had work (normally the first)
                    got = score_concurrently(self, s, requests, threads=2 * n + 2)
                    self.assertEqual(got, want, "a replica scored other bits than the one-replica server")
                    batches = replica_counts(s, "verl_reward_replica_batches_total")
                    if len(batches) == n and min(batches.values()) > 0:
                        break
                self.assertEqual(sorted(batches), list(range(n)))
                self.assertGreater(min(batches.values()), 0, f"a replica got no work: {batches}")
                seqs_by = replica_counts(s, "verl_reward_replica_sequences_total")
                toks_by = replica_counts(s, "verl_reward_replica_tokens_total")
                busy = replica_counts(s, "verl_reward_replica_busy_seconds_total")
                samples = parse_prometheus(s.metrics())
                # every sequence counted once, on the replica that scored it
                self.assertEqual(sum(seqs_by.values()), rounds * len(seqs))
                self.assertEqual(sum(toks_by.values()), rounds * sum(len(q) for q in seqs))
                self.assertTrue(all(busy[r] > 0 for r in range(n)), busy)
                self.assertEqual(sum(batches.values()), metric(samples, "verl_reward_batches_total"))
                # the shm transport shares the queue and the replicas
                self.assertEqual(f32s(s.shm_score({"input_ids": requests[0]})["scores"]), shm_want)
                s.stop()

    def _small_while_big(self, devices):
        """Client A sends big requests (1024 sequences of 48 tokens, one forward each), client B
        single small ones in a closed loop meanwhile. Returns how many of B's requests were
        answered while A's requests ran, and the per-replica sequence counts."""
        s = Server(self, "--model", LLAMA, "--device", devices, "--threads", "1", "--max-batch-tokens", "49152",
                   "--max-wait-us", "0").wait_ready()
        big = random_seqs(1024, seed=7, lo=48, hi=48)
        small = [[1, 2, 3]]
        st, ref = s.score({"input_ids": small})
        self.assertEqual(st, 200, ref)
        done = threading.Event()
        big_scores = []

        def client_a():
            try:
                for _ in range(3):
                    st, body = s.score({"input_ids": big})
                    big_scores.append((st, f32s(body.get("scores", []))))
            finally:
                done.set()

        th = threading.Thread(target=client_a)
        th.start()
        n_small = 0
        while not done.is_set():
            st, body = s.score({"input_ids": small})
            self.assertEqual((st, body["scores"]), (200, ref["scores"]))
            n_small += not done.is_set()
        th.join()
        self.assertEqual([b[0] for b in big_scores], [200] * 3)
        self.assertEqual(big_scores[0][1], big_scores[2][1], "the same big request scored differently")
        seqs_by = replica_counts(s, "verl_reward_replica_sequences_total")
        s.stop()
        return n_small, seqs_by

    def test_a_busy_replica_does_not_stall_the_other(self):
        # one replica: B's requests wait behind each big forward (about one per big request);
        # two: the free replica answers B while the other computes
        n_one, _ = self._small_while_big("cpu")
        n_two, seqs_by = self._small_while_big("cpu,cpu")
        self.assertGreaterEqual(n_two, max(20, 10 * n_one),
                                f"small requests answered during the big ones: {n_two} with two replicas, "
                                f"{n_one} with one")
        self.assertGreater(min(seqs_by.values()), 0, seqs_by)

    def test_sigterm_drains_every_replica(self):
        s = Server(self, "--model", LLAMA, "--device", "cpu,cpu", "--threads", "1", "--max-batch-tokens", "49152",
                   "--max-wait-us", "0", "--drain-ms", "120000").wait_ready()
        big = random_seqs(1024, seed=8, lo=48, hi=48)
        results = []

        def client():
            st, body = s.score({"input_ids": big})
            results.append((st, len(body.get("scores", [])), f32s(body.get("scores", []))[:4]))

        ts = [threading.Thread(target=client) for _ in range(6)]
        for t in ts:
            t.start()
        end = time.monotonic() + 60  # both replicas computing, the other four queued: then SIGTERM
        while time.monotonic() < end:
            infl = replica_counts(s, "verl_reward_replica_inflight_batches")
            queued = metric(parse_prometheus(s.metrics()), "verl_reward_queue_depth")
            if sum(infl.values()) == 2 and queued == 4:
                break
            time.sleep(0.002)
        self.assertEqual((sum(infl.values()), queued), (2, 4), infl)
        s.proc.send_signal(signal.SIGTERM)
        for t in ts:
            t.join()
        self.assertEqual(s.proc.wait(timeout=120), 0, s.logtext()[-3000:])
        self.assertEqual(sorted(r[:2] for r in results), [(200, 1024)] * 6, "an accepted request was not scored")
        self.assertEqual(len({tuple(r[2]) for r in results}), 1, "replicas scored the same request differently")
        self.assertIn("drain: batcher idle", s.logtext())

    def test_reload_switches_every_replica(self):
        dst = os.path.join(tempfile.mkdtemp(prefix="vrrr_"), "llama_gqa")
        self.addCleanup(shutil.rmtree, os.path.dirname(dst), True)
        shutil.copytree(LLAMA, dst)
        seqs = random_seqs(48, seed=9)
        requests = [seqs[i:i + 4] for i in range(0, len(seqs), 4)]
        s = Server(self, "--model", dst, "--device", "cpu,cpu", "--threads", "1", "--max-batch-tokens", "48",
                   "--max-wait-us", "0").wait_ready()
        before = score_concurrently(self, s, requests, threads=6)
        double_score_weight(dst)  # scores double
        b0 = replica_counts(s, "verl_reward_replica_batches_total")
        s.proc.send_signal(signal.SIGHUP)
        end = time.monotonic() + 120
        while "reload (SIGHUP): now serving" not in s.logtext() and time.monotonic() < end:
            self.assertIsNone(s.proc.poll(), s.logtext())
            time.sleep(0.05)
        self.assertIn("reload (SIGHUP): now serving", s.logtext())
        self.assertEqual(s.logtext().count("warm-up forward on cpu"), 4, "the reload warms up both replicas")
        for _ in range(3):
            after = score_concurrently(self, s, requests, threads=6)
            self.assertEqual(after, [[f32(2 * x) for x in r] for r in before], "a replica kept the old model")
            b1 = replica_counts(s, "verl_reward_replica_batches_total")
            if all(b1[r] > b0[r] for r in (0, 1)):
                break
        self.assertTrue(all(b1[r] > b0[r] for r in (0, 1)), (b0, b1))
        # a model that fails its warm-up (NaN weights) is refused on every replica: the old set serves
        path = os.path.join(dst, "model.safetensors")
        with open(path, "rb") as f:
            blob = bytearray(f.read())
        h = struct.unpack("<Q", blob[:8])[0]
        for name, t in json.loads(blob[8:8 + h]).items():
            if name != "__metadata__" and t["dtype"] == "F32":
                b, e = (8 + h + o for o in t["data_offsets"])
                blob[b:e] = struct.pack("<f", float("nan")) * ((e - b) // 4)
        with open(path + ".new", "wb") as f:
            f.write(blob)
        os.replace(path + ".new", path)
        s.proc.send_signal(signal.SIGHUP)
        end = time.monotonic() + 120
        while "reload (SIGHUP) failed" not in s.logtext() and time.monotonic() < end:
            self.assertIsNone(s.proc.poll(), s.logtext())
            time.sleep(0.05)
        self.assertIn("reload (SIGHUP) failed", s.logtext())
        self.assertIn("produced non-finite scores", s.logtext())
        b2 = replica_counts(s, "verl_reward_replica_batches_total")
        for _ in range(3):
            kept = score_concurrently(self, s, requests, threads=6)
            self.assertEqual(kept, after, "the failed reload changed a replica's model")
            b3 = replica_counts(s, "verl_reward_replica_batches_total")
            if all(b3[r] > b2[r] for r in (0, 1)):
                break
        self.assertTrue(all(b3[r] > b2[r] for r in (0, 1)), (b2, b3))
        s.stop()

    def test_bad_device_lists_fail_at_start(self):
        for devices, want in (("cpu,,cpu", "entry 2 is empty"), ("cuda:0,,1", "entry 2 is empty"),
                              ("cpu,", "entry 2 is empty"), ("cpu,gpu", "entry 2 'gpu'"),
                              ("cpu,cuda:9", "cuda:9"), ("cuda,cuda", "cuda"), ("cpu," * 16 + "cpu", "more than 16")):
            with self.subTest(devices=devices):
                p = subprocess.run([SERVER, "--model", LLAMA, "--device", devices, "--port", "0", "--shm-name", ""],
                                   capture_output=True, text=True, timeout=60)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn(want, p.stderr)
                self.assertIn(f"'{devices}'", p.stderr)
        # the checksum scorer runs replicas too (a worker each): same answers
        s = Server(self, "--model", "checksum", "--device", "cpu,cpu").wait_ready()
        st, body = s.score({"input_ids": [[1, 2, 3]]})
        self.assertEqual(st, 200, body)
        self.assertEqual(len(replica_counts(s, "verl_reward_replica_batches_total")), 2)
        s.stop()


class TestReplicasGpu(unittest.TestCase):
    """Two replicas on one GPU (label gpu). The cuda backend promises the same bits for the same
    batch (docs/protocol.md): with every request exactly one batch (its tokens = the token
    budget), each replica must give a one-replica server's bits; both replicas must get work."""

    def test_two_replicas_on_one_gpu(self):
        # 4 sequences of 36 tokens = 144 tokens = --max-batch-tokens: one request per batch (the
        # roberta fixture takes 40 positions)
        rng = random.Random(25)
        requests = [[[rng.randrange(97) for _ in range(36)] for _ in range(4)] for _ in range(48)]
        common = ("--max-batch-tokens", "144", "--max-wait-us", "0", "--cuda-autotune", "off")
        for name in ("llama_gqa", "roberta"):
            model = os.path.join(FIXTURES, "models", name)
            vocab = json.load(open(os.path.join(model, "config.json")))["vocab_size"]
            reqs = [[[t % vocab for t in q] for q in r] for r in requests]
            with self.subTest(model=name):
                one = Server(self, "--model", model, "--device", "cuda:0", *common).wait_ready()
                want = [f32s(one.score({"input_ids": r})[1]["scores"]) for r in reqs]
                one.stop()
                s = Server(self, "--model", model, "--device", "cuda:0,cuda:0", *common).wait_ready()
                info = json.loads(s.request("GET", "/v1/model")[1])
                self.assertEqual(info["device"], "cuda:0,cuda:0")
                self.assertEqual(len(info["replicas"]), 2)
                self.assertTrue(all(r["device_memory_bytes"] > 0 for r in info["replicas"]), info)
                for _ in range(3):
                    got = score_concurrently(self, s, reqs, threads=8)
                    self.assertEqual(got, want, "a replica scored other bits than the one-replica server "
                                     "(relative L2 %.3g)" % norm_rel_err(sum(got, []), sum(want, [])))
                    batches = replica_counts(s, "verl_reward_replica_batches_total")
                    if min(batches.values()) > 0:
                        break
                self.assertGreater(min(batches.values()), 0, batches)
                mem = replica_counts(s, "verl_reward_replica_device_memory_bytes")
                self.assertTrue(all(v > 0 for v in mem.values()), mem)
                busy = replica_counts(s, "verl_reward_replica_busy_seconds_total")
                self.assertTrue(all(v > 0 for v in busy.values()), busy)
                s.stop()

    def test_model_too_large_for_one_gpu(self):
        # the weight files alone (a sparse model.safetensors twice the GPU's memory) refuse the
        # start before the load, with the memory needed
        total = int(subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits",
                                    "-i", "0"], capture_output=True, text=True, check=True).stdout.split()[0]) << 20
        d = tempfile.mkdtemp(prefix="vrbig_")
        self.addCleanup(shutil.rmtree, d, True)
        shutil.copy(os.path.join(LLAMA, "config.json"), d)
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.truncate(4 * total)  # >= 2 x total in bf16 even if the files were f32
        p = subprocess.run([SERVER, "--model", d, "--device", "cuda:0", "--port", "0", "--shm-name", ""],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("is too large for one GPU", p.stdout + p.stderr)
        self.assertIn("%.2f GiB on the GPU in bf16" % (2 * total / 2**30), p.stdout + p.stderr)

    def test_missing_gpu_named_at_start(self):
        p = subprocess.run([SERVER, "--model", LLAMA, "--device", "cuda:0,cuda:1000", "--port", "0", "--shm-name", ""],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("entry 2 'cuda:1000' is not a GPU of this machine", p.stdout + p.stderr)


if __name__ == "__main__":
    unittest.main()
