#!/usr/bin/env python3
"""Black-box tests of verl-reward-server: the real binary, real shm, real sockets.

Run by ctest (tests/server/CMakeLists.txt), one TestCase class per ctest test:
    python3 test_server.py TestHttpErrors
Env: VR_BIN_DIR (verl-reward-server, verl-reward-score), VR_TEST_BIN (vr_test_shm_client),
VR_FIXTURES (tests/fixtures), VR_SANITIZE ("ON" for the ASan build: fewer requests in the RSS test).
Every server a test starts gets a unique shm name and port and is killed in cleanup; its
segment is vr_testlib.TEST_SEGMENT_ARGS' size unless the test gives --lanes / --arena-mb.
"""
import asyncio
import http.client
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from vr_testlib import (CUDA_TRANSFORMERS_REL_TOL, TEST_LANES, assert_scores_close,  # noqa: E402
                        checksum_score, free_port, norm_rel_err, shm_name_exists, with_test_segment)

BIN = os.environ.get("VR_BIN_DIR", "build/bin")
TEST_BIN = os.environ.get("VR_TEST_BIN", "build/tests")
FIXTURES = os.environ.get("VR_FIXTURES", "tests/fixtures")
SANITIZE = os.environ.get("VR_SANITIZE", "OFF").upper() in ("ON", "1", "TRUE")
SERVER = os.path.join(BIN, "verl-reward-server")
SHM_CLIENT = os.path.join(TEST_BIN, "vr_test_shm_client")
_counter = [0]

def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def f32s(xs):
    """Scores travel as "%.9g" text: round back to the float32 the server computed."""
    return [None if x is None else f32(x) for x in xs]


def double_score_weight(model_dir):
    """Doubles the fp32 score head of model_dir/model.safetensors in place (written aside, then
    renamed over the file), so a reloaded model's scores are exactly twice the old ones."""
    path = os.path.join(model_dir, "model.safetensors")
    with open(path, "rb") as f:
        blob = bytearray(f.read())
    h = struct.unpack("<Q", blob[:8])[0]
    t = json.loads(blob[8:8 + h])["score.weight"]
    b, e = (8 + h + o for o in t["data_offsets"])
    vals = struct.unpack(f"<{(e - b) // 4}f", blob[b:e])
    blob[b:e] = struct.pack(f"<{len(vals)}f", *(2 * v for v in vals))
    with open(path + ".new", "wb") as f:
        f.write(blob)
    os.replace(path + ".new", path)


def rss_bytes(pid):
    """Anonymous resident memory (heap, stacks): what a leak grows."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):  # shm pages the server touches count in RssShmem
                return int(line.split()[1]) * 1024
    return 0


class Server:
    """One verl-reward-server process; stop() checks a clean exit."""

    def __init__(self, tc, *args, env=None, http=True, shm=True, name=None):
        _counter[0] += 1
        self.name = name or (f"vrtest_{os.getpid()}_{_counter[0]}" if shm else "")
        self.port = free_port() if http else 0
        self.tmp = tempfile.mkdtemp(prefix="vrsrv_")
        self.pid_file = os.path.join(self.tmp, "server.pid")
        self.log_path = os.path.join(self.tmp, "server.log")
        self.args = [SERVER, "--shm-name", self.name, "--port", str(self.port), "--pid-file", self.pid_file,
                     *with_test_segment(args)]
        e = dict(os.environ)
        if env:
            e.update(env)
        self.log = open(self.log_path, "w+")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT, env=e)
        tc.addCleanup(self.kill)
        self.tc = tc

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()

    def logtext(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def wait_ready(self, timeout=120):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.logtext()}")
            if self.port:
                try:
                    st, _, _ = self.request("GET", "/ready")
                    if st == 200:
                        return self
                except OSError:
                    pass
            elif "ready:" in self.logtext():
                return self
            time.sleep(0.05)
        raise AssertionError(f"server not ready after {timeout}s:\n{self.logtext()}")

    def request(self, method, path, body=None, ctype="application/json", headers=None, timeout=60):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            h = {"Content-Type": ctype} if body is not None else {}
            h.update(headers or {})
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            return r.status, r.read(), r.getheader("Content-Type")
        finally:
            c.close()

    def score(self, body):
        st, data, _ = self.request("POST", "/v1/score", json.dumps(body))
        return st, json.loads(data)

    def shm_score(self, body):
        p = subprocess.run([SHM_CLIENT, "score", self.name], input=json.dumps(body), capture_output=True,
                           text=True, timeout=60)
        if p.returncode != 0:
            raise AssertionError(f"shm client failed ({p.returncode}): {p.stdout} {p.stderr}")
        return json.loads(p.stdout)

    def metrics(self):
        st, data, ctype = self.request("GET", "/metrics")
        assert st == 200, st
        assert ctype.startswith("text/plain"), ctype
        return data.decode()

    def stop(self, sig=signal.SIGTERM, timeout=60):
        self.proc.send_signal(sig)
        rc = self.proc.wait(timeout=timeout)
        self.tc.assertEqual(rc, 0, f"server exit status {rc}:\n{self.logtext()}")
        if self.name:
            self.tc.assertFalse(shm_name_exists(self.name), "segment not unlinked")
        self.tc.assertFalse(os.path.exists(self.pid_file), "pid file not removed")
        return rc


# A strict reader of the Prometheus text format (0.0.4) and of the naming rules
# (https://prometheus.io/docs/instrumenting/writing_exporters/, .../practices/naming/):
# every line parses; each family has one HELP and one TYPE line before its samples, and its
# samples are contiguous; counters end in _total; histogram buckets are cumulative, ordered by
# le and end in le="+Inf" equal to _count, with a _sum beside; no series twice.
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(r'^(' + _NAME + r')(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*"'
                     r'(?:,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*")*)?\})? '
                     r'(-?[0-9.eE+-]+|NaN|\+Inf|-Inf)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\.)*)"')
_HIST_SUFFIX = re.compile(r"_(bucket|sum|count)$")


def _family_of(name, types):
    if name in types:
        return name
    base = _HIST_SUFFIX.sub("", name)
    return base if types.get(base) in ("histogram", "summary") else None


def _check_histograms(samples, types):
    for fam, kind in types.items():
        if kind != "histogram":
            continue
        series = {}
        for (name, labels), v in samples.items():  # dicts keep the exposition's order
            if name == fam + "_bucket":
                d = dict(labels)
                assert "le" in d, f"{fam}_bucket without le"
                rest = frozenset((k, x) for k, x in labels if k != "le")
                series.setdefault(rest, []).append((d["le"], v))
        assert series, f"histogram {fam} has no buckets"
        for rest, buckets in series.items():
            les = [float(le) for le, _ in buckets]
            assert les == sorted(les) and len(set(les)) == len(les), f"{fam}{set(rest)}: le out of order {les}"
            assert buckets[-1][0] == "+Inf", f"{fam}{set(rest)}: last bucket is not +Inf"
            counts = [v for _, v in buckets]
            assert all(a <= b for a, b in zip(counts, counts[1:])), f"{fam}{set(rest)}: buckets not cumulative"
            assert (fam + "_count", rest) in samples and (fam + "_sum", rest) in samples, f"{fam}: no _count/_sum"
            assert samples[(fam + "_count", rest)] == counts[-1], f"{fam}{set(rest)}: +Inf bucket != _count"


def parse_prometheus(text, with_types=False):
    """Returns {(name, frozenset(labels)): value} (and {family: type} with_types); raises on any
    line or family that breaks the rules above."""
    samples, types, helps, done = {}, {}, set(), set()
    current = None  # the family whose samples are being read
    assert text.endswith("\n"), "exposition must end with a newline"
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("# HELP "):
            parts = line.split(" ", 3)
            assert len(parts) == 4 and re.fullmatch(_NAME, parts[2]) and parts[3].strip(), f"bad HELP: {line}"
            assert parts[2] not in helps, f"duplicate HELP {parts[2]}"
            assert parts[2] not in types, f"HELP after TYPE for {parts[2]}"
            helps.add(parts[2])
            continue
        if line.startswith("# TYPE "):
            parts = line.split()
            assert len(parts) == 4 and parts[3] in ("counter", "gauge", "histogram", "summary", "untyped"), line
            fam = parts[2]
            assert re.fullmatch(_NAME, fam), f"bad metric name {fam!r}"
            assert fam not in types, f"duplicate TYPE {fam}"
            assert fam in helps, f"TYPE without HELP before it: {fam}"
            assert fam not in done, f"TYPE after samples of {fam}"
            if parts[3] == "counter":
                assert fam.endswith("_total"), f"counter {fam} does not end in _total"
            else:
                assert not fam.endswith("_total"), f"{parts[3]} {fam} ends in _total"
            types[fam] = parts[3]
            continue
        assert not line.startswith("#"), f"bad comment: {line}"
        m = _SAMPLE.match(line)
        assert m, f"malformed sample line: {line!r}"
        name, pairs = m.group(1), _LABEL.findall(m.group(3) or "")
        labels = frozenset(pairs)
        assert len({k for k, _ in pairs}) == len(pairs), f"label twice: {line}"
        assert not any(k.startswith("__") for k, _ in pairs), f"reserved label name: {line}"
        fam = _family_of(name, types)
        assert fam, f"sample without TYPE: {name}"
        if types[fam] == "histogram":
            assert name != fam, f"histogram {fam} sample without _bucket/_sum/_count"
            assert ("le" in dict(pairs)) == name.endswith("_bucket"), f"le on a non-bucket or missing: {line}"
        if fam != current:
            assert fam not in done, f"samples of {fam} are not contiguous"
            if current:
                done.add(current)
            current = fam
        key = (name, labels)
        assert key not in samples, f"duplicate sample {line}"
        samples[key] = float(m.group(4))
    _check_histograms(samples, types)
    return (samples, types) if with_types else samples


def metric(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


def reference_scores(model_dir, seqs):
    """verl-reward-score on the same model: the cpu backend's scores (float32)."""
    lines = "".join(json.dumps({"input_ids": q}) + "\n" for q in seqs)
    p = subprocess.run([os.path.join(BIN, "verl-reward-score"), "--model", model_dir, "--log-level", "warn"],
                       input=lines, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise AssertionError(f"verl-reward-score failed: {p.stderr}")
    return [f32(json.loads(line)["score"]) for line in p.stdout.splitlines()]


def load_golden(model_dir):
    """The fixture's sequences and transformers' scores for them (tools/make_fixtures.py)."""
    with open(os.path.join(model_dir, "golden.json")) as f:
        golden = json.load(f)
    return golden["sequences"], golden["scores"]


def nan_model(tc, token=None):
    """A scratch copy of the llama_gqa fixture with NaN weights: every F32 tensor (token None)
    or only the token embedding's row `token` (only sequences containing it score NaN)."""
    src = os.path.join(FIXTURES, "models", "llama_gqa")
    dst = os.path.join(tempfile.mkdtemp(prefix="vrnan_"), "llama_gqa_nan")
    tc.addCleanup(shutil.rmtree, os.path.dirname(dst), True)
    shutil.copytree(src, dst)
    path = os.path.join(dst, "model.safetensors")
    with open(path, "rb") as f:
        blob = bytearray(f.read())
    h = struct.unpack("<Q", blob[:8])[0]
    header = json.loads(blob[8:8 + h])
    nan = struct.pack("<f", float("nan"))
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        b, e = (8 + h + o for o in t["data_offsets"])
        if token is not None:
            if "embed_tokens" not in name:
                continue
            row = t["shape"][1] * 4
            b, e = b + token * row, b + (token + 1) * row
        blob[b:e] = nan * ((e - b) // 4)
    with open(path, "wb") as f:
        f.write(blob)
    return dst


class TestNonfinite(unittest.TestCase):
    """NaN weights (issue 18): a model whose warm-up score is NaN is refused at start (exit 1,
    an ERROR naming the model); at run time a NaN score is its sequence's VR_ERR_NONFINITE on
    HTTP (200 with per-sequence errors, the good scores kept) and shm (bad_seq), the requests sent beside it (a 200 ms batch window makes them share batches;
    not asserted) keep their normal scores, and /metrics counts it."""

    NAN_TOKEN = 50  # not among the warm-up's token ids 0..7

    def test_all_nan_refused_at_start(self):
        model = nan_model(self)
        s = Server(self, "--model", model, "--device", "cpu", "--threads", "1")
        self.assertEqual(s.proc.wait(timeout=120), 1, s.logtext())
        log = s.logtext()
        self.assertIn(f"model {model} produced non-finite scores (NaN/Inf)", log)
        self.assertIn("the weights are probably corrupt. HINT: ", log)
        self.assertNotIn("ready:", log)
        self.assertFalse(shm_name_exists(s.name), "no segment for a refused model")

    def test_nan_sequence_is_its_own_error(self):
        model = nan_model(self, self.NAN_TOKEN)
        good_seqs = [[1, 2, 3], [4, 6, 7, 8], [9, 10]]
        bad_seq = [11, self.NAN_TOKEN, 12]
        want = reference_scores(os.path.join(FIXTURES, "models", "llama_gqa"), good_seqs)
        # a long batch window: the concurrent requests below are likely to share batches
        s = Server(self, "--model", model, "--device", "cpu", "--threads", "1",
                   "--max-wait-us", "200000").wait_ready()
        results, errors = {}, []

        def http_worker(key, body):
            try:
                results[key] = s.request("POST", "/v1/score", json.dumps(body))
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        th = [threading.Thread(target=http_worker, args=(i, {"input_ids": [q]})) for i, q in enumerate(good_seqs)]
        th.append(threading.Thread(target=http_worker, args=("bad", {"input_ids": [good_seqs[0], bad_seq]})))
        for t in th:
            t.start()
        shm_bad = s.shm_score({"input_ids": [good_seqs[1], bad_seq]})
        shm_good = s.shm_score({"input_ids": good_seqs})
        for t in th:
            t.join()
        self.assertEqual(errors, [])
        for i in range(len(good_seqs)):
            st, body, _ = results[i]
            self.assertEqual(st, 200, body)
            self.assertEqual(f32s(json.loads(body)["scores"]), [want[i]], f"http sequence {i}")
        st, body, _ = results["bad"]
        # per-sequence errors (issue 18): 200, the good sequence's score kept, the bad one null
        # with its error at its index of "errors"
        self.assertEqual(st, 200, body)
        out = json.loads(body)
        self.assertEqual(f32s(out["scores"]), [want[0], None])
        self.assertIsNone(out["errors"][0])
        self.assertEqual((out["errors"][1]["code"], out["errors"][1]["status"]), ("VR_ERR_NONFINITE", -29), out)
        self.assertIn("score is not finite (NaN/Inf)", out["errors"][1]["message"])
        st, body, ctype = s.request("POST", "/v1/score", json.dumps({"input_ids": [bad_seq, good_seqs[2]]}),
                                    headers={"Accept": "application/msgpack"})
        self.assertEqual((st, ctype), (200, "application/msgpack"))
        self.assertNotIn(b"errors", s.request("POST", "/v1/score", json.dumps({"input_ids": [good_seqs[2]]}))[1])
        self.assertEqual(shm_bad["status"], "VR_ERR_NONFINITE", shm_bad)
        self.assertEqual(shm_bad["bad_seq"], 1, shm_bad)
        self.assertEqual(shm_good["status"], "VR_OK", shm_good)
        self.assertEqual(f32s(shm_good["scores"]), want)
        samples = parse_prometheus(s.metrics())
        for transport in ("http", "shm"):
            want_n = 2 if transport == "http" else 1  # HTTP: also the msgpack request above
            self.assertEqual(metric(samples, "verl_reward_requests_total", transport=transport,
                                    status="nonfinite"), want_n, transport)
            self.assertEqual(metric(samples, "verl_reward_sequences_total", transport=transport,
                                    status="nonfinite"), 2 * want_n, transport)
        s.stop()


class TestModel(unittest.TestCase):
    """Fixture models on the cpu backend: shm and HTTP clients at the same time get
    transformers' golden scores (within vr_testlib.TRANSFORMERS_REL_TOL) and exactly the scores
    verl-reward-score gives (the batches the server forms differ from one run to the next, the
    bits do not); real-vocabulary errors."""

    MODELS = ("llama_gqa", "bert", "qwen2")

    def test_scores_match_transformers(self):
        for name in self.MODELS:
            with self.subTest(name):
                model_dir = os.path.join(FIXTURES, "models", name)
                s = Server(self, "--model", model_dir, "--device", "cpu", "--threads", "1",
                           "--max-wait-us", "300").wait_ready()
                info = json.loads(s.request("GET", "/v1/model")[1])
                with open(os.path.join(model_dir, "config.json")) as f:
                    cfg = json.load(f)
                self.assertEqual(info["vocab_size"], cfg["vocab_size"])
                self.assertEqual(info["architecture"], cfg["architectures"][0])
                self.assertEqual(info["device"], "cpu")
                seqs, want = load_golden(model_dir)
                got, errors = {}, []

                def http_worker(k):
                    try:
                        part = list(range(k, len(seqs), 4))
                        st, out = s.score({"input_ids": [seqs[i] for i in part]})
                        assert st == 200, out
                        for i, v in zip(part, f32s(out["scores"])):
                            got[("http", i)] = v
                    except Exception as e:  # noqa: BLE001
                        errors.append(e)

                th = [threading.Thread(target=http_worker, args=(k,)) for k in range(4)]
                for t in th:
                    t.start()
                out = s.shm_score({"input_ids": seqs})
                for t in th:
                    t.join()
                self.assertEqual(errors, [])
                self.assertEqual(out["status"], "VR_OK", out)
                assert_scores_close(self, f32s(out["scores"]), want, what=f"{name} shm vs transformers")
                assert_scores_close(self, [got[("http", i)] for i in range(len(seqs))], want,
                                    what=f"{name} http vs transformers")
                # and bit-identical to verl-reward-score (all cores, one batch) although the server
                # runs one thread and cuts its own batches (docs/protocol.md, "What a score depends on")
                ref = reference_scores(model_dir, seqs)
                self.assertEqual(f32s(out["scores"]), f32s(ref), f"{name} shm vs verl-reward-score")
                self.assertEqual([got[("http", i)] for i in range(len(seqs))], f32s(ref),
                                 f"{name} http vs verl-reward-score")
                # the real vocabulary and position limits
                st, data, _ = s.request("POST", "/v1/score", json.dumps({"input_ids": [[1], [1, info["vocab_size"]]]}))
                self.assertEqual(st, 400)
                self.assertIn(f"sequence 1: token id {info['vocab_size']} at position 1 is outside the vocabulary",
                              json.loads(data)["error"]["message"])
                st, data, _ = s.request("POST", "/v1/score",
                                        json.dumps({"input_ids": [[1] * (info["max_seq_len"] + 1)]}))
                self.assertEqual(st, 400)
                self.assertIn("more than max_seq_len", json.loads(data)["error"]["message"])
                bad = s.shm_score({"input_ids": [[1, 2], [info["vocab_size"] + 5]]})
                self.assertEqual(bad["status"], "VR_ERR_TOKEN_RANGE", bad)  # the client library checks first
                self.assertIn("sequence 1", bad["message"])
                assert_scores_close(self, f32s(s.shm_score({"input_ids": seqs[:3]})["scores"]), want[:3],
                                    what=f"{name} shm, 3 sequences vs transformers")
                s.stop()


class TestGpu(unittest.TestCase):
    """Label gpu: the server on --device cuda:0 for every fixture model. Sequences go through
    shm (one request of all of them) and HTTP (4 threads at once, so batches queue behind each
    other and the pipelined submit/collect path of the batcher runs); scores must agree with
    the transformers golden scores and with the cpu backend within
    vr_testlib.CUDA_TRANSFORMERS_REL_TOL (bf16)."""

    def test_fixtures_on_cuda(self):
        models = sorted(d for d in os.listdir(os.path.join(FIXTURES, "models"))
                        if os.path.exists(os.path.join(FIXTURES, "models", d, "golden.json")))
        self.assertGreater(len(models), 0)
        for name in models:
            with self.subTest(name):
                model_dir = os.path.join(FIXTURES, "models", name)
                seqs, want = load_golden(model_dir)
                s = Server(self, "--model", model_dir, "--device", "cuda:0").wait_ready()
                info = json.loads(s.request("GET", "/v1/model")[1])
                self.assertTrue(info["device"].startswith("cuda"), info)
                out = s.shm_score({"input_ids": seqs})
                self.assertEqual(out["status"], "VR_OK", out)
                got_http, errors = {}, []

                def http_worker(k):
                    try:
                        for _ in range(5):
                            part = list(range(k, len(seqs), 4))
                            st, o = s.score({"input_ids": [seqs[i] for i in part]})
                            assert st == 200, o
                            for i, v in zip(part, o["scores"]):
                                got_http[i] = v
                    except Exception as e:  # noqa: BLE001
                        errors.append(e)

                th = [threading.Thread(target=http_worker, args=(k,)) for k in range(4)]
                for t in th:
                    t.start()
                for t in th:
                    t.join()
                self.assertEqual(errors, [])
                http_scores = [got_http[i] for i in range(len(seqs))]
                cpu = reference_scores(model_dir, seqs)
                for label, got in (("shm", out["scores"]), ("http", http_scores)):
                    self.assertLessEqual(norm_rel_err(got, want), CUDA_TRANSFORMERS_REL_TOL,
                                         f"{name} {label} vs transformers")
                    self.assertLessEqual(norm_rel_err(got, cpu), CUDA_TRANSFORMERS_REL_TOL,
                                         f"{name} {label} vs cpu backend")
                s.stop()


class TestHttpErrors(unittest.TestCase):
    """Bad requests get a 4xx naming the problem; the server keeps serving."""

    def test_errors(self):
        s = Server(self, "--model", "checksum", "--max-body-bytes", "65536", "--max-seq-len", "64",
                   "--max-seqs-per-request", "16").wait_ready()
        good = {"input_ids": [[1, 2, 3]]}
        cases = [
            ("malformed JSON", b'{"input_ids": [[1, 2', 400, "malformed JSON"),
            ("trailing garbage", b'{"input_ids": [[1]]} x', 400, "trailing data"),
            ("a NUL after the body", b'{"input_ids": [[1]]}\x00', 400, "trailing data at byte 20"),
            ("two objects", b'{"input_ids": [[1]]}{"input_ids": [[2]]}', 400, "trailing data at byte 20"),
            ("not an object", b"[1, 2]", 400, "JSON object"),
            ("input_ids wrong type", b'{"input_ids": "abc"}', 400, "wrong type"),
            ("sequence wrong type", b'{"input_ids": [[5], 6]}', 400, "input_ids[1] must be a list"),
            ("flat token wrong type", b'{"input_ids": [5, [6]]}', 400, "input_ids[1] is not an integer"),
            ("token wrong type", b'{"input_ids": [[1, "a"]]}', 400, "input_ids[0][1] is not an integer"),
            ("token not integral", b'{"input_ids": [[1, 2.5]]}', 400, "not a 32-bit integer"),
            ("token too large", b'{"input_ids": [[1, 4294967296]]}', 400, "not a 32-bit integer"),
            ("extras wrong type", b'{"input_ids": [[1]], "extras": 3}', 400, "\"extras\" must be a list"),
            ("extras count", b'{"input_ids": [[1]], "extras": [{}, {}]}', 400, "has 2 entries"),
            ("missing input_ids", b'{"foo": 1}', 400, "missing \"input_ids\""),
            ("empty batch", b'{"input_ids": []}', 400, "empty batch"),
            ("empty sequence", b'{"input_ids": [[1], []]}', 400, "sequence 1 is empty"),
            ("out of vocabulary", b'{"input_ids": [[1, -5]]}', 400, "token id -5 at position 1 is outside the vocabulary"),
            ("too many tokens", json.dumps({"input_ids": [[1] * 65]}).encode(), 400, "65 tokens, more than max_seq_len 64"),
            ("too many sequences", json.dumps({"input_ids": [[1]] * 17}).encode(), 413, "17 sequences"),
        ]
        for what, body, code, needle in cases:
            with self.subTest(what):
                st, data, ctype = s.request("POST", "/v1/score", body)
                self.assertEqual(st, code, data)
                err = json.loads(data)["error"]
                self.assertIn(needle, err["message"])
                self.assertTrue(err["code"].startswith("VR_ERR_"))
                st, out = s.score(good)  # still serving
                self.assertEqual(st, 200, out)
        # named sequence in the error object
        st, data, _ = s.request("POST", "/v1/score", b'{"input_ids": [[1], [2], []]}')
        self.assertEqual(json.loads(data)["error"]["sequence"], 2)
        # body over --max-body-bytes: 413 from the HTTP layer
        big = json.dumps({"input_ids": [[1] * 8] * 4000}).encode()
        self.assertGreater(len(big), 65536)
        st, data, _ = s.request("POST", "/v1/score", big)
        self.assertEqual(st, 413, data)
        self.assertIn(b"Too Large", data)
        # msgpack: malformed, wrong type, truncated container count
        for what, body, needle in [("truncated", b"\x81\xa9input_ids\x92", "malformed msgpack"),
                                   ("huge count", b"\xdd\xff\xff\xff\xff", "malformed msgpack"),
                                   ("not a map", b"\x93\x01\x02\x03", "msgpack map"),
                                   ("token type", b"\x81\xa9input_ids\x91\x91\xa1x", "not an integer")]:
            with self.subTest("msgpack " + what):
                st, data, _ = s.request("POST", "/v1/score", body, ctype="application/msgpack")
                self.assertEqual(st, 400, data)
                self.assertIn(needle, json.loads(data)["error"]["message"])
        # endpoints and methods
        self.assertEqual(s.request("GET", "/nope")[0], 404)
        self.assertEqual(s.request("GET", "/v1/score")[0], 405)
        self.assertEqual(s.request("POST", "/metrics", b"{}")[0], 405)
        self.assertEqual(s.request("GET", "/health")[0], 200)
        st, out = s.score(good)
        self.assertEqual(st, 200)
        self.assertEqual(f32s(out["scores"]), [checksum_score([1, 2, 3])])
        s.stop()


class TestScores(unittest.TestCase):
    """shm and HTTP clients at the same time get the same (correct) scores."""

    def test_concurrent_shm_and_http_checksum(self):
        s = Server(self, "--model", "checksum", "--max-wait-us", "500").wait_ready()
        seqs = [[(i * 7919 + j * 104729) % 50000 for j in range(1 + (i * 13) % 97)] for i in range(64)]
        want = [checksum_score(q) for q in seqs]
        errors = []

        def http_worker(k):
            try:
                for r in range(10):
                    part = seqs[(k + r) % 8::8]
                    st, out = s.score({"input_ids": part})
                    assert st == 200, out
                    assert f32s(out["scores"]) == [checksum_score(q) for q in part], "http mismatch"
                    assert out["queue_us"] >= 0 and out["compute_us"] >= 0
                    assert "components" not in out
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        th = [threading.Thread(target=http_worker, args=(k,)) for k in range(4)]
        for t in th:
            t.start()
        for r in range(6):
            out = s.shm_score({"input_ids": seqs})
            self.assertEqual(out["status"], "VR_OK", out)
            self.assertEqual(f32s(out["scores"]), want)
        flood = subprocess.run([SHM_CLIENT, "flood", s.name, "3", "8", "200", "4", "33"], capture_output=True,
                               text=True, timeout=120)
        for t in th:
            t.join()
        self.assertEqual(errors, [])
        self.assertEqual(flood.returncode, 0, flood.stderr)
        res = json.loads(flood.stdout)
        self.assertEqual(res["ok"], 600, res)
        self.assertEqual(res["mismatch"], 0, res)
        # msgpack over HTTP gives the same floats
        body = b"\x81\xa9input_ids\x92\x93\x01\x02\x03\x92\x04\x05"
        st, data, ctype = s.request("POST", "/v1/score", body, ctype="application/msgpack")
        self.assertEqual(st, 200)
        self.assertEqual(ctype, "application/msgpack")
        self.assertEqual(data[:9], b"\x83\xa6scores\x92")
        self.assertEqual(data[9], 0xCA)
        vals = [struct.unpack(">f", data[10 + 5 * i:14 + 5 * i])[0] for i in range(2)]
        self.assertEqual(vals, [checksum_score([1, 2, 3]), checksum_score([4, 5])])
        s.stop()


TOKENIZE = os.path.join(BIN, "verl-tokenize")


def text_model(tc, with_tokenizer=True):
    """llama_gqa (vocab 97) in a temporary directory, with the small SentencePiece-style BPE
    tokenizer of tests/fixtures/server_tokenizer (89 ids, Llama-2 chat template) beside it."""
    d = tempfile.mkdtemp(prefix="vrtext_")
    tc.addCleanup(shutil.rmtree, d, True)
    src = os.path.join(FIXTURES, "models", "llama_gqa")
    for f in ("config.json", "model.safetensors"):
        os.symlink(os.path.abspath(os.path.join(src, f)), os.path.join(d, f))
    if with_tokenizer:
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(FIXTURES, "server_tokenizer", f), d)
    return d


def tokenize(model_dir, lines):
    """The tokenizer's own encode (verl-tokenize, checked against transformers in tests/tokenizer)."""
    p = subprocess.run([TOKENIZE, "--tokenizer", model_dir], input="".join(json.dumps(x) + "\n" for x in lines),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return [json.loads(x) for x in p.stdout.splitlines()]


def mp_pack(o):
    """A small msgpack encoder (str, int, bool, None, list, dict) for request bodies."""
    if o is None:
        return b"\xc0"
    if o is True or o is False:
        return b"\xc3" if o else b"\xc2"
    if isinstance(o, int):
        return struct.pack(">Bq", 0xD3, o)
    if isinstance(o, str):
        b = o.encode()
        return struct.pack(">BI", 0xDB, len(b)) + b
    if isinstance(o, list):
        return struct.pack(">BI", 0xDD, len(o)) + b"".join(mp_pack(x) for x in o)
    if isinstance(o, dict):
        return struct.pack(">BI", 0xDF, len(o)) + b"".join(mp_pack(k) + mp_pack(v) for k, v in o.items())
    raise TypeError(type(o))


def mp_scores(data):
    """The "scores" float32 array of a msgpack reply."""
    i = data.index(b"\xa6scores") + 7
    n = data[i] & 0x0F
    return [struct.unpack(">f", data[i + 2 + 5 * k:i + 6 + 5 * k])[0] for k in range(n)]


class TestText(unittest.TestCase):
    """{"text": ...} and {"messages": ...} requests: the model directory's tokenizer and chat
    template give exactly the ids the tokenizer's own encode gives (scores equal to those of
    the same ids sent as input_ids), JSON and msgpack; bad shapes are 400 naming the field."""

    CONV = [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "the answer is in a hat!"}]
    CONV2 = [{"role": "system", "content": "Be nice"}, {"role": "user", "content": "What is it?"}]

    def test_text_and_messages(self):
        d = text_model(self)
        s = Server(self, "--model", d).wait_ready()
        st, data, _ = s.request("GET", "/v1/model")
        info = json.loads(data)
        self.assertEqual(st, 200)
        self.assertTrue(info["text_input"], info)
        self.assertTrue(info["chat_template"], info)
        texts = ["the cat sat in a hat", "In the end, a tie.", "x"]
        ref = tokenize(d, [{"text": t} for t in texts])
        st, by_ids = s.score({"input_ids": [r["input_ids"] for r in ref]})
        self.assertEqual(st, 200, by_ids)
        st, by_text = s.score({"text": texts})
        self.assertEqual(st, 200, by_text)
        self.assertEqual(by_text["scores"], by_ids["scores"])
        self.assertEqual(ref[0]["input_ids"][0], 1, "add_special_tokens: BOS first")
        # one text as a plain string; add_special_tokens false drops the BOS
        st, one = s.score({"text": texts[0]})
        self.assertEqual((st, one["scores"]), (200, by_ids["scores"][:1]))
        st, nobos = s.score({"text": [texts[0]], "add_special_tokens": False})
        st2, want = s.score({"input_ids": [ref[0]["input_ids"][1:]]})
        self.assertEqual((st, nobos["scores"]), (st2, want["scores"]))
        # conversations: the chat template renders them (BOS written by the template, once)
        for agp in (False, True):
            ref = tokenize(d, [{"messages": c, "add_generation_prompt": agp} for c in (self.CONV, self.CONV2)])
            self.assertEqual(ref[0]["input_ids"].count(1), 1, ref[0])
            st, by_ids = s.score({"input_ids": [r["input_ids"] for r in ref]})
            self.assertEqual(st, 200, by_ids)
            body = {"messages": [self.CONV, self.CONV2]}
            if agp:
                body["add_generation_prompt"] = True
            st, by_msgs = s.score(body)
            self.assertEqual(st, 200, by_msgs)
            self.assertEqual(by_msgs["scores"], by_ids["scores"], agp)
        # one conversation (flat form) and msgpack bodies
        ref = tokenize(d, [{"messages": self.CONV}])
        st, want = s.score({"input_ids": ref[0]["input_ids"]})
        st, flat = s.score({"messages": self.CONV})
        self.assertEqual(flat["scores"], want["scores"])
        st, data, ctype = s.request("POST", "/v1/score", mp_pack({"messages": [self.CONV]}), ctype="application/msgpack")
        self.assertEqual((st, ctype), (200, "application/msgpack"), data)
        self.assertEqual(mp_scores(data), f32s(want["scores"]))
        st, data, _ = s.request("POST", "/v1/score", mp_pack({"text": texts[:2]}), ctype="application/msgpack")
        self.assertEqual(st, 200, data)
        self.assertEqual(mp_scores(data), f32s(by_text["scores"][:2]))
        # extras still pair with the items
        st, out = s.score({"text": texts[:2], "extras": [None, None]})
        self.assertEqual((st, out["scores"]), (200, by_text["scores"][:2]))
        s.stop()

    def test_errors(self):
        d = text_model(self)
        s = Server(self, "--model", d).wait_ready()
        cases = [
            ({"messages": [[{"content": "x"}]]}, "VR_ERR_MALFORMED", "messages[0][0].role is missing"),
            ({"messages": [[{"role": 3, "content": "x"}]]}, "VR_ERR_MALFORMED", "messages[0][0].role must be a string"),
            ({"messages": [["hello"]]}, "VR_ERR_MALFORMED", "messages[0][0] must be an object"),
            ({"messages": [[]]}, "VR_ERR_MALFORMED", "messages[0] is an empty conversation"),
            ({"messages": "hi"}, "VR_ERR_MALFORMED", "\"messages\" must be a list"),
            ({"messages": [[{"role": "user", "content": 5}]]}, "VR_ERR_MALFORMED", "messages[0][0].content"),
            ({"text": ["ok", 5]}, "VR_ERR_MALFORMED", "text[1] must be a string"),
            ({"text": []}, "VR_ERR_MALFORMED", "\"text\" is empty"),
            ({"text": ["a"], "input_ids": [[1, 2]]}, "VR_ERR_MALFORMED", "give one of"),
            ({"text": ["a"], "messages": [self.CONV]}, "VR_ERR_MALFORMED", "give one of"),
            ({"text": ["a"], "add_generation_prompt": True}, "VR_ERR_MALFORMED", "go with \"messages\""),
            ({"messages": [self.CONV], "add_generation_prompt": 1}, "VR_ERR_MALFORMED", "must be a boolean"),
            ({"text": ["a", "b"], "extras": [None]}, "VR_ERR_MALFORMED", "\"extras\" has 1 entries"),
            # the Llama-2 template's raise_exception: roles must alternate
            ({"messages": [[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]]}, "VR_ERR_INVAL",
             "template raised: Conversation roles must alternate"),
        ]
        for body, code, needle in cases:
            st, out = s.score(body)
            self.assertEqual(st, 400, (body, out))
            self.assertEqual(out["error"]["code"], code, (body, out))
            self.assertIn(needle, out["error"]["message"], (body, out))
        # the template error names the conversation
        st, out = s.score({"messages": [self.CONV, [{"role": "assistant", "content": "first"}]]})
        self.assertEqual((st, out["error"].get("sequence")), (400, 1), out)
        # a conversation that renders too long for the model is the usual length error
        st, out = s.score({"text": ["the " * 3000]})
        self.assertEqual(st, 400, out)
        self.assertEqual(out["error"]["code"], "VR_ERR_SEQ_TOO_LONG", out)
        st, out = s.score({"text": ["fine"]})
        self.assertEqual(st, 200, out)
        s.stop()

    def test_score_tool(self):
        """verl-reward-score takes the same text / messages lines, with the same ids."""
        d = text_model(self)
        texts = ["the cat sat in a hat", "In the end, a tie."]
        refs = tokenize(d, [{"text": t} for t in texts] + [{"messages": self.CONV}, {"messages": self.CONV2, "add_generation_prompt": True}])
        lines = [{"text": texts[0]}, {"text": texts}, {"messages": self.CONV}, {"messages": [self.CONV2], "add_generation_prompt": True},
                 {"text": [texts[0]], "add_special_tokens": False},
                 {"input_ids": refs[0]["input_ids"]}, {"input_ids": [r["input_ids"] for r in refs[:2]]},
                 {"input_ids": refs[2]["input_ids"]}, {"input_ids": [refs[3]["input_ids"]]}, {"input_ids": [refs[0]["input_ids"][1:]]},
                 {"messages": [[{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]]}, {"text": [1]}]
        p = subprocess.run([os.path.join(BIN, "verl-reward-score"), "--model", d], input="".join(json.dumps(x) + "\n" for x in lines),
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 1, p.stderr)  # the two bad lines
        out = [json.loads(x) for x in p.stdout.splitlines()]
        self.assertEqual(len(out), len(lines), p.stdout)
        for a, b in ((0, 5), (1, 6), (2, 7), (3, 8), (4, 9)):
            self.assertEqual(out[a], out[b], (lines[a], out[a], out[b]))
        self.assertIn("template raised: Conversation roles must alternate", out[10]["error"])
        self.assertIn("text[0] must be a string", out[11]["error"])
        p = subprocess.run([os.path.join(BIN, "verl-reward-score"), "--model", text_model(self, with_tokenizer=False)],
                           input='{"text": "x"}\n', capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, 1)
        self.assertIn("no tokenizer.json", json.loads(p.stdout)["error"])

    def test_sigterm_with_text_in_flight(self):
        """Text requests queued on the text worker are answered on SIGTERM (200 or 503), the
        server exits 0 (the worker is joined), nothing is dropped."""
        d = text_model(self)
        s = Server(self, "--model", d, "--max-wait-us", "2000").wait_ready()
        results, lock = [], threading.Lock()
        texts = ["the cat sat in a hat " * 2, "In the end, a tie."] * 8

        def worker(k):
            for r in range(6):
                try:
                    body = {"messages": [self.CONV, self.CONV2]} if (k + r) % 2 else {"text": texts}
                    st, out = s.score(body)
                except ConnectionRefusedError:
                    st, out = "refused", None
                except (ConnectionResetError, http.client.RemoteDisconnected) as ex:
                    st, out = "dropped", str(ex)
                with lock:
                    results.append((st, out))

        th = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
        for t in th:
            t.start()
        time.sleep(0.05)
        s.stop()
        for t in th:
            t.join()
        bad = [(st, out) for st, out in results if st not in (200, 503, "refused")]
        self.assertEqual(bad, [])
        self.assertTrue(any(st == 200 for st, _ in results), results[:3])

    def test_no_tokenizer(self):
        d = text_model(self, with_tokenizer=False)
        s = Server(self, "--model", d).wait_ready()
        st, data, _ = s.request("GET", "/v1/model")
        info = json.loads(data)
        self.assertFalse(info["text_input"], info)
        self.assertIn("no tokenizer.json", info["tokenizer"])
        for body in ({"text": ["hello"]}, {"messages": [self.CONV]}):
            st, out = s.score(body)
            self.assertEqual(st, 400, out)
            self.assertEqual(out["error"]["code"], "VR_ERR_UNSUPPORTED", out)
            self.assertIn("no tokenizer.json", out["error"]["message"])
            self.assertIn("input_ids", out["error"]["message"])
        st, out = s.score({"input_ids": [[1, 5, 7]]})
        self.assertEqual(st, 200, out)
        s.stop()


# The longest batching wait the server takes (--max-wait-us): it keeps requests queued,
# whatever the machine's speed, until the test lets them go (SIGTERM, or a refused request).
MAX_WAIT_S = 60


class TestSigterm(unittest.TestCase):
    """SIGTERM with 1,000 requests in flight across shm and HTTP: every one answered.
    Timing: the batching wait (MAX_WAIT_S) holds all 1,000 queued until SIGTERM, so the
    stop must come before that wait could have let the first ones go; the drain deadline
    of the 'finishes in flight' case is two minutes, a hang guard (draining takes
    milliseconds)."""

    N_SHM_CLIENTS, SHM_INFLIGHT, N_HTTP = 8, 60, 520  # 480 + 520 = 1000

    def _run(self, drain_ms):
        s = Server(self, "--model", "checksum", "--max-wait-us", str(MAX_WAIT_S * 1000000),
                   "--max-batch-tokens", "16777216", "--max-queue", "4096", "--drain-ms", str(drain_ms)).wait_ready()
        t_first = time.monotonic()  # no request is older than this
        ready_file = os.path.join(s.tmp, "shm_submitted")
        flood = subprocess.Popen([SHM_CLIENT, "flood", s.name, str(self.N_SHM_CLIENTS), str(self.SHM_INFLIGHT),
                                  str(self.SHM_INFLIGHT), "1", "16", ready_file], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: flood.poll() is None and flood.kill())
        results = {}

        async def one(i):
            r, w = await asyncio.open_connection("127.0.0.1", s.port)
            body = json.dumps({"input_ids": [[i, i + 1, i + 2]]}).encode()
            w.write(b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await w.drain()
            data = await asyncio.wait_for(r.read(), 120)
            w.close()
            head, _, payload = data.partition(b"\r\n\r\n")
            status = int(head.split()[1]) if head else 0
            results[i] = (status, payload)

        async def all_http():
            await asyncio.gather(*(one(i) for i in range(self.N_HTTP)))

        loop_thread = threading.Thread(target=lambda: asyncio.run(all_http()))
        loop_thread.start()
        # wait until all 1000 are queued in the server
        end = t_first + MAX_WAIT_S
        depth = 0
        while time.monotonic() < end:
            depth = metric(parse_prometheus(s.metrics()), "verl_reward_queue_depth")
            if depth >= self.N_SHM_CLIENTS * self.SHM_INFLIGHT + self.N_HTTP and os.path.exists(ready_file):
                break
            time.sleep(0.1)
        self.assertEqual(depth, 1000, s.logtext())
        s.stop(timeout=drain_ms / 1000 + 60)
        # stopped before the batching wait ran out for the oldest request: SIGTERM, not the
        # timer, let them go (a machine too slow for this could not have queued all 1,000)
        self.assertLess(time.monotonic() - t_first, MAX_WAIT_S, "the stop waited for the batching timer")
        out, err = flood.communicate(timeout=60)
        loop_thread.join(120)
        self.assertEqual(flood.returncode, 0, err)
        shm = json.loads(out)
        self.assertEqual(shm["unanswered"], 0, shm)
        self.assertEqual(shm["other"] + shm["mismatch"] + shm["overloaded"], 0, shm)
        self.assertEqual(shm["ok"] + shm["shutting_down"], 480, shm)
        self.assertEqual(len(results), self.N_HTTP)
        codes = {}
        for i, (st, payload) in results.items():
            codes[st] = codes.get(st, 0) + 1
            if st == 200:
                self.assertEqual(f32s(json.loads(payload)["scores"]), [checksum_score([i, i + 1, i + 2])])
            else:
                self.assertEqual(st, 503, payload)
                self.assertEqual(json.loads(payload)["error"]["code"], "VR_ERR_SHUTTING_DOWN")
        return shm, codes

    def test_sigterm_finishes_in_flight(self):
        shm, codes = self._run(drain_ms=120000)
        self.assertEqual(shm["ok"], 480, shm)  # all were accepted before SIGTERM: all scored
        self.assertEqual(codes, {200: self.N_HTTP})

    def test_sigterm_drain_deadline_answers_shutting_down(self):
        shm, codes = self._run(drain_ms=0)
        self.assertEqual(shm["shutting_down"], 480, shm)
        self.assertEqual(codes, {503: self.N_HTTP})


class TestHardening(unittest.TestCase):
    """Issue 18 at the level of the real server binary."""

    def test_model_file_changed_under_the_server(self):
        # case 8: the cpu backend used f32 weights in place from the file mapping: overwriting
        # model.safetensors changed the scores silently, truncating it killed the server (SIGBUS)
        src = os.path.join(FIXTURES, "models", "llama_gqa")
        dst = os.path.join(tempfile.mkdtemp(prefix="vrmf_"), "llama_gqa")
        self.addCleanup(shutil.rmtree, os.path.dirname(dst), True)
        shutil.copytree(src, dst)
        seqs = [[1, 2, 3], [4, 6, 7, 8], [9, 10]]
        s = Server(self, "--model", dst, "--device", "cpu", "--threads", "1").wait_ready()
        st, before = s.score({"input_ids": seqs})
        self.assertEqual(st, 200, before)
        path = os.path.join(dst, "model.safetensors")
        size = os.path.getsize(path)
        with open(path, "r+b") as f:  # rewritten in place: every weight now 0x7f7f7f7f
            f.write(b"\x7f" * size)
        st, after = s.score({"input_ids": seqs})
        self.assertEqual((st, after["scores"]), (200, before["scores"]), "scores changed with the file")
        os.truncate(path, 0)
        st, after = s.score({"input_ids": seqs})
        self.assertIsNone(s.proc.poll(), f"server died with the file truncated:\n{s.logtext()}")
        self.assertEqual((st, after["scores"]), (200, before["scores"]))
        s.stop()

    def test_reload_switches_model_or_keeps_the_old(self):
        # SIGHUP / POST /admin/reload: the model directory is loaded again beside the serving
        # model and switched in; a model that fails its warm-up (NaN) is refused, the old one
        # keeps serving
        src = os.path.join(FIXTURES, "models", "llama_gqa")
        dst = os.path.join(tempfile.mkdtemp(prefix="vrrl_"), "llama_gqa")
        self.addCleanup(shutil.rmtree, os.path.dirname(dst), True)
        shutil.copytree(src, dst)
        token = "t0ken-" + "x" * 20
        tok_file = os.path.join(os.path.dirname(dst), "admin.token")
        with open(tok_file, "w") as f:
            f.write(token + "\n")
        seqs = [[1, 2, 3], [4, 6, 7, 8], [9, 10]]
        cfg = os.path.join(os.path.dirname(dst), "server.yaml")
        with open(cfg, "w") as f:
            f.write("max-wait-us: 0\n")
        s = Server(self, "--config", cfg, "--model", dst, "--device", "cpu", "--threads", "1",
                   "--admin-token-file", tok_file).wait_ready()
        st, before = s.score({"input_ids": seqs})
        self.assertEqual(st, 200, before)
        path = os.path.join(dst, "model.safetensors")

        def rewrite(fn):  # a new file renamed over the old one, as a deployment would
            with open(path, "rb") as f:
                blob = bytearray(f.read())
            h = struct.unpack("<Q", blob[:8])[0]
            header = json.loads(blob[8:8 + h])
            for name, t in header.items():
                if name != "__metadata__":
                    fn(name, t, blob, 8 + h)
            with open(path + ".new", "wb") as f:
                f.write(blob)
            os.replace(path + ".new", path)

        def double_score_head(name, t, blob, base):
            if name == "score.weight":
                b, e = (base + o for o in t["data_offsets"])
                vals = struct.unpack(f"<{(e - b) // 4}f", blob[b:e])
                blob[b:e] = struct.pack(f"<{len(vals)}f", *(2 * v for v in vals))

        def wait_log(text, n=1):
            end = time.monotonic() + 120
            while s.logtext().count(text) < n and time.monotonic() < end and s.proc.poll() is None:
                time.sleep(0.05)
            self.assertGreaterEqual(s.logtext().count(text), n, s.logtext())

        rewrite(double_score_head)
        with open(cfg, "w") as f:  # a batching setting changes with it
            f.write("max-wait-us: 300000\n")
        s.proc.send_signal(signal.SIGHUP)
        wait_log("reload (SIGHUP): now serving")
        st, after = s.score({"input_ids": seqs})
        self.assertEqual(st, 200, after)
        self.assertEqual(f32s(after["scores"]), [f32(2 * x) for x in f32s(before["scores"])])
        self.assertGreaterEqual(after["queue_us"], 250000, "the new --max-wait-us is not in force")
        # a setting a reload cannot change refuses it, naming the flag
        with open(cfg, "w") as f:
            f.write("max-wait-us: 300000\nspin-us: 7\n")
        s.proc.send_signal(signal.SIGHUP)
        wait_log("reload: --spin-us changed")
        wait_log("reload (SIGHUP) failed")
        with open(cfg, "w") as f:
            f.write("max-wait-us: 0\n")

        def nan_all(name, t, blob, base):
            if t["dtype"] == "F32":
                b, e = (base + o for o in t["data_offsets"])
                blob[b:e] = struct.pack("<f", float("nan")) * ((e - b) // 4)

        rewrite(nan_all)
        st, _, _ = s.request("POST", "/admin/reload", b"", headers={"Authorization": "Bearer wrong"})
        self.assertEqual(st, 401)
        st, body, _ = s.request("POST", "/admin/reload", b"", headers={"Authorization": "Bearer " + token})
        self.assertEqual(st, 202, body)
        wait_log("reload (POST /admin/reload) failed")
        self.assertEqual(s.logtext().count("reload (SIGHUP) failed"), 1)
        self.assertIn("produced non-finite scores", s.logtext())
        st, kept = s.score({"input_ids": seqs})
        self.assertEqual((st, kept["scores"]), (200, after["scores"]), "the failed reload changed the model")
        s.stop()

    def test_sighup_does_not_end_the_server(self):
        # case 11: SIGHUP ended the server by its default action (exit 129) and left the
        # segment behind; now it is logged and the server carries on, then stops cleanly
        s = Server(self, "--model", "checksum").wait_ready()
        s.proc.send_signal(signal.SIGHUP)
        end = time.monotonic() + 60
        while "SIGHUP" not in s.logtext() and time.monotonic() < end and s.proc.poll() is None:
            time.sleep(0.05)
        self.assertIsNone(s.proc.poll(), f"server ended on SIGHUP:\n{s.logtext()}")
        self.assertIn("SIGHUP", s.logtext())
        self.assertEqual(s.request("GET", "/ready")[0], 200)
        self.assertEqual(f32s(s.shm_score({"input_ids": [[1, 2, 3]]})["scores"]), [checksum_score([1, 2, 3])])
        self.assertEqual(s.request("POST", "/admin/reload", b"")[0], 404)  # no --admin-token-file
        s.stop()


class TestHttpHardening(unittest.TestCase):
    """Issue 18 cases 6 and 7: one large body, a trickling client, a connection flood and the
    fd limit must not stop /health or the server."""

    def _health_ms(self, s):
        t0 = time.monotonic()
        st, _, _ = s.request("GET", "/health", timeout=120)
        self.assertEqual(st, 200)
        return (time.monotonic() - t0) * 1000

    def test_big_body_does_not_block_health(self):
        # case 6: a large JSON body was parsed on the event loop: /health stalled for the whole
        # parse (9 s for 63 MB). Now the parse runs beside the loop; /health is measured during
        # it, against the big request's own time (no wall-clock constant).
        s = Server(self, "--model", "checksum", "--max-seqs-per-request", "1024").wait_ready()
        n_seq, n_tok = (128, 2000) if SANITIZE else (1024, 4000)
        body = json.dumps({"input_ids": [[(i * 7 + t) % 30000 for t in range(n_tok)] for i in range(n_seq)]})
        rss0 = rss_bytes(s.proc.pid)
        result = {}

        def big():
            t0 = time.monotonic()
            st, data, _ = s.request("POST", "/v1/score", body, timeout=300)
            result["ms"] = (time.monotonic() - t0) * 1000
            result["st"], result["n"] = st, len(json.loads(data).get("scores", []))

        th = threading.Thread(target=big)
        th.start()
        lat = []
        while th.is_alive():
            lat.append(self._health_ms(s))
            time.sleep(0.02)
        th.join()
        self.assertEqual((result["st"], result["n"]), (200, n_seq))
        worst = max(lat) if lat else 0.0
        print(f"\n{len(body) / 1e6:.1f} MB body answered in {result['ms']:.0f} ms; /health during it: "
              f"{len(lat)} probes, worst {worst:.1f} ms; RSS {rss0 / 2**20:.0f} -> {rss_bytes(s.proc.pid) / 2**20:.0f} MiB")
        self.assertGreaterEqual(len(lat), 1)
        self.assertLess(worst, max(result["ms"] / 4, 50.0), "/health waited for the parse")
        # the parse's memory went back (malloc_trim): well below the body's JSON-tree size
        self.assertLess(rss_bytes(s.proc.pid) - rss0, max(len(body), 64 << 20))
        s.stop()

    def test_body_limit_derived_from_request_limits(self):
        # 2 sequences x (10 tokens x 12 + 1024) + 64 KiB = 67824 bytes, known before any parse
        s = Server(self, "--model", "checksum", "--max-seqs-per-request", "2", "--max-seq-len", "10").wait_ready()
        self.assertIn("max body 67824 bytes", s.logtext())
        ok = json.dumps({"input_ids": [[1, 2, 3]], "pad": "x" * 60000})
        self.assertEqual(s.request("POST", "/v1/score", ok)[0], 200)
        big = json.dumps({"input_ids": [[1, 2, 3]], "pad": "x" * 70000})
        self.assertEqual(s.request("POST", "/v1/score", big)[0], 413)
        s.stop()

    def test_trickling_client_is_cut(self):
        # case 7: one byte per 30 s kept a connection past the 120 s timeout forever (the timeout
        # is per read); now a request must be complete within --request-timeout-s
        s = Server(self, "--model", "checksum", "--request-timeout-s", "2").wait_ready()
        c = socket.create_connection(("127.0.0.1", s.port))
        c.sendall(b"POST /v1/score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n")
        t0, closed = time.monotonic(), False
        c.settimeout(0.3)
        while time.monotonic() - t0 < 30 and not closed:  # hang guard: the deadline is 2 s
            try:
                c.sendall(b"1")
                closed = c.recv(1) == b""
            except socket.timeout:
                pass
            except OSError:
                closed = True
        c.close()
        took = time.monotonic() - t0
        self.assertTrue(closed, "the trickling connection was never closed")
        self.assertGreaterEqual(took, 1.5)
        self.assertLess(self._health_ms(s), 10000)
        self.assertIn("completed no request within 2 s", s.logtext())
        s.stop()

    def test_connection_cap(self):
        s = Server(self, "--model", "checksum", "--max-connections", "4").wait_ready()
        conns = [socket.create_connection(("127.0.0.1", s.port)) for _ in range(8)]
        time.sleep(1.5)  # three sweeps
        closed = 0
        for c in conns:
            c.settimeout(0.5)
            try:
                closed += c.recv(1) == b""
            except socket.timeout:
                pass
            except OSError:
                closed += 1
        for c in conns:
            c.close()
        self.assertGreaterEqual(closed, 4, "connections over the cap were left open")
        time.sleep(1.0)
        self.assertLess(self._health_ms(s), 10000)
        self.assertIn("over the cap (--max-connections 4)", s.logtext())
        s.stop()

    def test_fd_limit_backs_off(self):
        # case 7: at the fd limit accept() failed ~460k times a second, each failure a log line,
        # and /health timed out. Now the listener pauses 100 ms per failure, one line per 10 s.
        s = Server(self, "--model", "checksum", "--max-connections", "100000", "--lanes", "2")
        s.wait_ready()
        subprocess.run(["prlimit", f"--pid={s.proc.pid}", "--nofile=48:"], check=True)  # soft limit only
        conns = []
        for _ in range(80):  # more than the server has fds for
            try:
                conns.append(socket.create_connection(("127.0.0.1", s.port), timeout=2))
            except OSError:
                break
        time.sleep(2.0)
        for c in conns:
            c.close()
        subprocess.run(["prlimit", f"--pid={s.proc.pid}", "--nofile=1024:"], check=True)
        time.sleep(1.0)
        self.assertLess(self._health_ms(s), 10000)
        log = s.logtext()
        lines = [line for line in log.splitlines() if "HTTP accept()" in line]
        print(f"\n{len(conns)} connections opened at a 48-fd limit; {len(lines)} accept log lines")
        self.assertGreaterEqual(len(lines), 1)
        self.assertLessEqual(len(lines), 2)
        s.stop()


class TestFairness(unittest.TestCase):
    """Issue 18 case 9: one client's 64 queued maximum-size requests delayed another client's
    one-sequence request by 7.6 s (FIFO). Clients are served round-robin now: the light
    client's wait is bounded by a few batch times, measured in the same run (the server's own
    compute_us of a flood-sized request), not by a wall-clock constant."""

    SEQS, LEN = 64, 48  # one flood request = one batch (--max-batch-tokens 3072)

    def test_flood_beside_a_light_client(self):
        s = Server(self, "--model", os.path.join(FIXTURES, "models", "llama_gqa"), "--device", "cpu",
                   "--threads", "1", "--max-batch-tokens", str(self.SEQS * self.LEN)).wait_ready()
        big = {"input_ids": [[(i + t) % 97 for t in range(self.LEN)] for i in range(self.SEQS)]}
        batch_us = []
        for _ in range(3):
            st, out = s.score(big)
            self.assertEqual(st, 200, out)
            batch_us.append(out["compute_us"])
        batch = max(max(batch_us), 1)
        ready = os.path.join(s.tmp, "flood_ready")
        flood = subprocess.Popen([SHM_CLIENT, "flood", s.name, "1", "64", "192", str(self.SEQS), str(self.LEN), ready],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: flood.poll() is None and flood.kill())
        end = time.monotonic() + 60
        while not os.path.exists(ready) and time.monotonic() < end:
            time.sleep(0.005)
        self.assertTrue(os.path.exists(ready), "the flood never got its 64 requests in flight")
        waits = []
        for _ in range(5):
            depth = metric(parse_prometheus(s.metrics()), "verl_reward_queue_depth")
            st, out = s.score({"input_ids": [[1, 2, 3]]})
            self.assertEqual(st, 200, out)
            waits.append((out["queue_us"], depth))
        out, err = flood.communicate(timeout=300)
        self.assertEqual(flood.returncode, 0, err)
        print(f"\nbatch {batch} us (of {batch_us}); light client's queue_us with the flood's queue depth: {waits}")
        self.assertTrue(any(d >= 8 for _, d in waits), f"the flood did not keep a backlog: {waits}")
        worst = max(w for w, _ in waits)
        # FIFO: behind the flood's backlog (up to 63 batches); round-robin: the batch running, its own
        self.assertLess(worst, 4 * batch + 20000, f"the light client waited behind the flood: {waits}")
        s.stop()

    def test_per_client_queue_limit(self):
        # one client may hold at most --max-queue-per-client queued requests; the excess is its
        # own VR_ERR_OVERLOADED, while another client is still served
        s = Server(self, "--model", "checksum", "--max-queue-per-client", "4",
                   "--max-wait-us", "300000", "--batch-linger-us", "0").wait_ready()
        flood = subprocess.run([SHM_CLIENT, "flood", s.name, "1", "32", "32", "1", "8"], capture_output=True,
                               text=True, timeout=120)
        self.assertEqual(flood.returncode, 0, flood.stderr)
        counts = json.loads(flood.stdout)
        self.assertGreater(counts["overloaded"], 0, counts)
        self.assertGreater(counts["ok"], 0, counts)
        st, out = s.score({"input_ids": [[1, 2, 3]]})
        self.assertEqual((st, f32s(out["scores"])), (200, [checksum_score([1, 2, 3])]))
        s.stop()


class TestSplit(unittest.TestCase):
    """Issue 24 (packed throughput): a request larger than what is left of a batch is split at
    sequence boundaries over consecutive batches of at most --max-batch-tokens tokens (it used to
    be taken whole into one oversized batch), and answered once, in order, when its last part
    is scored."""

    def batches(self, s):
        m = parse_prometheus(s.metrics())
        return (metric(m, "verl_reward_batch_tokens_count"), metric(m, "verl_reward_batch_tokens_sum"),
                metric(m, "verl_reward_batch_sequences_count"))

    def test_one_request_over_several_batches(self):
        s = Server(self, "--model", "checksum", "--max-batch-tokens", "100", "--batch-linger-us", "0").wait_ready()
        seqs = [[(7 * i + t) % 1000 for t in range(30)] for i in range(10)]
        out = s.shm_score({"input_ids": seqs})
        self.assertEqual(out["status"], "VR_OK", out)
        self.assertEqual(f32s(out["scores"]), [checksum_score(q) for q in seqs])
        # 3 sequences (90 tokens) fit a batch: 3 + 3 + 3 + 1
        self.assertEqual(self.batches(s), (4, 300, 4))
        # over HTTP too, and a sequence longer than the budget still goes alone
        st, o = s.score({"input_ids": [[1] * 20, [2] * 90, [3] * 20, [4] * 150, [5]]})
        self.assertEqual(st, 200, o)
        self.assertEqual(f32s(o["scores"]), [checksum_score(q) for q in
                                              ([1] * 20, [2] * 90, [3] * 20, [4] * 150, [5])])
        # 20 | 90 | 20 | 150 | 1: each next sequence would pass 100 tokens
        self.assertEqual(self.batches(s), (4 + 5, 300 + 281, 4 + 5))
        s.stop()

    def test_split_requests_from_clients_in_rounds(self):
        # four lanes, each with requests larger than a batch, in flight together: every score
        # in its place (the rounds tool of bench_vs_transformers.py's service path)
        s = Server(self, "--model", "checksum", "--max-batch-tokens", "128").wait_ready()
        seqs = [[(13 * i + 5 * t) % 997 for t in range(1 + (i * 37) % 60)] for i in range(41)]
        path = os.path.join(s.tmp, "w.seq")
        with open(path, "wb") as f:
            f.write(b"VRSEQ1\0\0" + struct.pack("<I", len(seqs)) + struct.pack(f"<{len(seqs)}I", *map(len, seqs)))
            for q in seqs:
                f.write(struct.pack(f"<{len(q)}i", *q))
        p = subprocess.run([SHM_CLIENT, "rounds", s.name, path, "4", "3", "1", "3"], capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(p.returncode, 0, p.stderr)
        res = json.loads(p.stdout)
        self.assertEqual((res["failed"], res["n_seqs"], len(res["rounds_ms"])), (0, 41, 3), res)
        self.assertEqual(f32s(res["scores"]), [checksum_score(q) for q in seqs])
        n, tok, _ = self.batches(s)
        self.assertEqual(tok, 4 * sum(map(len, seqs)))
        self.assertGreaterEqual(n, 4 * -(-sum(map(len, seqs)) // 128))
        flood = subprocess.run([SHM_CLIENT, "flood", s.name, "3", "4", "50", "4", "33"], capture_output=True,
                               text=True, timeout=120)  # 132 tokens a request: every one split
        self.assertEqual(flood.returncode, 0, flood.stderr)
        res = json.loads(flood.stdout)
        self.assertEqual((res["ok"], res["mismatch"]), (150, 0), res)
        s.stop()

    def test_reload_never_mixes_models_in_a_request(self):
        # a reload (SIGHUP) while split requests are in flight: the switch waits for the rest of
        # every request already begun, so each answer comes wholly from the old model or wholly
        # from the new one (whose score head is doubled)
        dst = os.path.join(tempfile.mkdtemp(prefix="vrsplit_"), "llama_gqa")
        self.addCleanup(shutil.rmtree, os.path.dirname(dst), True)
        shutil.copytree(os.path.join(FIXTURES, "models", "llama_gqa"), dst)
        s = Server(self, "--model", dst, "--device", "cpu", "--threads", "1", "--max-batch-tokens", "48",
                   "--batch-linger-us", "0").wait_ready()
        seqs = [[(5 * i + t) % 90 + 3 for t in range(40)] for i in range(12)]  # one sequence a batch
        st, before = s.score({"input_ids": seqs})
        self.assertEqual(st, 200, before)
        old = f32s(before["scores"])
        new = [f32(2 * x) for x in old]
        double_score_weight(dst)
        got, errors, stop = [], [], threading.Event()

        def client():
            try:
                while not stop.is_set():
                    st, o = s.score({"input_ids": seqs})
                    assert st == 200, o
                    got.append(f32s(o["scores"]))
            except Exception as ex:  # noqa: BLE001 - reported below
                errors.append(ex)

        th = [threading.Thread(target=client) for _ in range(3)]
        for x in th:
            x.start()
        time.sleep(0.2)
        s.proc.send_signal(signal.SIGHUP)
        end = time.monotonic() + 120
        while "reload (SIGHUP): now serving" not in s.logtext() and time.monotonic() < end:
            time.sleep(0.02)
        time.sleep(0.2)
        stop.set()
        for x in th:
            x.join()
        self.assertEqual(errors, [])
        self.assertIn("reload (SIGHUP): now serving", s.logtext())
        mixed = [g for g in got if g != old and g != new]
        self.assertEqual(mixed, [], "a request scored partly by each model")
        self.assertIn(old, got)
        self.assertIn(new, got)
        s.stop()


class TestOverload(unittest.TestCase):
    """A full queue refuses at once (HTTP 429, shm VR_ERR_OVERLOADED) instead of growing.
    "At once" is an order, not a time: the batching wait (MAX_WAIT_S) holds the 4 queued
    requests until SIGTERM, so the refusals must come while all 4 are still unanswered."""

    def test_queue_bound(self):
        s = Server(self, "--model", "checksum", "--max-queue", "4", "--max-wait-us", str(MAX_WAIT_S * 1000000),
                   "--max-batch-tokens", "16777216").wait_ready()
        t_first = time.monotonic()
        results = []
        th = [threading.Thread(target=lambda i=i: results.append(s.score({"input_ids": [[i, 1]]})))
              for i in range(4)]
        for t in th:
            t.start()
        while time.monotonic() < t_first + MAX_WAIT_S and \
                metric(parse_prometheus(s.metrics()), "verl_reward_queue_depth") < 4:
            time.sleep(0.05)
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=MAX_WAIT_S)
        c.request("POST", "/v1/score", body=b'{"input_ids": [[9]]}', headers={"Content-Type": "application/json"})
        r = c.getresponse()
        body = json.loads(r.read())
        self.assertEqual(r.status, 429, body)
        self.assertEqual(r.getheader("Retry-After"), "1")
        self.assertEqual(body["error"]["code"], "VR_ERR_OVERLOADED")
        out = s.shm_score({"input_ids": [[9]]})
        self.assertEqual(out["status"], "VR_ERR_OVERLOADED", out)
        # refused while the queue was full: none of the 4 had an answer yet
        self.assertEqual(results, [])
        self.assertLess(time.monotonic() - t_first, MAX_WAIT_S, "the batching timer let the queue go first")
        m = parse_prometheus(s.metrics())
        self.assertEqual(metric(m, "verl_reward_requests_total", transport="http", status="overloaded"), 1)
        self.assertEqual(metric(m, "verl_reward_requests_total", transport="shm", status="overloaded"), 1)
        self.assertEqual(metric(m, "verl_reward_queue_capacity"), 4)
        self.assertEqual(metric(m, "verl_reward_queue_depth"), 4)
        s.stop()  # SIGTERM drains the queue: the 4 are scored
        for t in th:
            t.join(60)
        self.assertEqual(sorted(st for st, _ in results), [200] * 4)


class TestLifecycle(unittest.TestCase):
    def test_help_config_and_stale_segment(self):
        p = subprocess.run([SERVER, "--help"], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0)
        for flag in ("--model", "--model_name_or_path", "--shm-name", "--shared_mem_name", "--port", "--host",
                     "--device", "--dtype", "--max-batch-tokens", "--max-wait-us", "--max-seq-len", "--truncate",
                     "--spin-us", "--lanes", "--shm-mode", "--log-level", "--pid-file", "--config", "--reward",
                     "--max-body-bytes", "--max-queue", "--threads", "--allow-uid", "--allow-gid"):
            self.assertIn(flag + " ", p.stdout)
        self.assertIn("(default: 8080)", p.stdout)
        self.assertIn("(default: verl_reward_shm)", p.stdout)
        p = subprocess.run([SERVER, "--port", "99999"], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2)
        self.assertIn("port", p.stderr)
        p = subprocess.run([SERVER, "--bogus", "1"], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2)
        self.assertIn("unknown option --bogus", p.stderr)
        # --config with both syntaxes; flags override the file
        tmp = tempfile.mkdtemp(prefix="vrcfg_")
        cfg = os.path.join(tmp, "server.yaml")
        with open(cfg, "w") as f:
            f.write("# test config\nmodel_name_or_path: checksum\nmax-seq-len = 100\ntruncate: \"left\"\n"
                    "log-level: warn  # quiet\nmax_seq_len: 77\n")
        s = Server(self, "--config", cfg, "--max-seq-len", "50").wait_ready()
        st, data, _ = s.request("GET", "/v1/model")
        info = json.loads(data)
        self.assertEqual((info["architecture"], info["max_seq_len"], info["truncate"]), ("checksum", 50, "left"))
        # truncate left keeps the last 50 tokens
        ids = list(range(1, 81))
        st, out = s.score({"input_ids": [ids]})
        self.assertEqual(f32s(out["scores"]), [checksum_score(ids[-50:])])
        # SIGKILL leaves nothing behind (the kernel frees the socket name); the next server
        # takes the name at once, even with a junk file where v1 kept its segment
        s.proc.kill()
        s.proc.wait()
        self.assertFalse(shm_name_exists(s.name))
        junk = f"/dev/shm/{s.name}"
        with open(junk, "wb") as f:
            f.write(b"not a verl-reward segment" + bytes(300))
        self.addCleanup(lambda: os.path.exists(junk) and os.unlink(junk))
        s2 = Server(self, "--model", "checksum", name=s.name).wait_ready()
        self.assertEqual(f32s(s2.shm_score({"input_ids": [[1, 2]]})["scores"]), [checksum_score([1, 2])])
        s2.stop()
        with open(cfg, "w") as f:
            f.write("port: lots\n")
        p = subprocess.run([SERVER, "--config", cfg], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2)
        self.assertIn("server.yaml:1: --port 'lots'", p.stderr)


class NotifyListener:
    """A supervisor's end of sd_notify: an AF_UNIX datagram socket, its address for NOTIFY_SOCKET
    (a path, or "@name" for the abstract namespace). messages() returns each datagram as a dict."""

    def __init__(self, tc, abstract=False):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = f"vrtest_notify_{os.getpid()}_{id(self)}"
            self.sock.bind("\0" + name)
            self.address = "@" + name
        else:
            d = tempfile.mkdtemp(prefix="vrnotify_")
            self.address = os.path.join(d, "notify.sock")
            self.sock.bind(self.address)
            tc.addCleanup(shutil.rmtree, d, True)
        tc.addCleanup(self.sock.close)
        self.got = []

    def messages(self):
        self.sock.setblocking(False)
        try:
            while True:
                data = self.sock.recv(65536).decode()
                self.got.append(dict(line.split("=", 1) for line in data.split("\n") if line))
        except BlockingIOError:
            pass
        return self.got

    def wait_for(self, key, timeout=60):
        """The first message carrying key (hang guard only)."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for m in self.messages():
                if key in m:
                    return m
            time.sleep(0.02)
        raise AssertionError(f"no {key} notification; got {self.got}")


def fifo_model(tc):
    """A model directory whose config.json is a FIFO: the loader blocks in open() until the test
    opens it for writing, so the server stays in its "starting" state for as long as the test
    needs (a load that is slow by construction, not by machine speed). Opening it then fails the
    load (a FIFO is not a regular file): the failed-load path."""
    d = tempfile.mkdtemp(prefix="vrfifo_")
    tc.addCleanup(shutil.rmtree, d, True)
    src = os.path.join(FIXTURES, "models", "roberta")
    for f in os.listdir(src):
        if f != "config.json":
            shutil.copy(os.path.join(src, f), d)
    os.mkfifo(os.path.join(d, "config.json"))
    return d


class TestStartup(unittest.TestCase):
    """Issue 23: HTTP answers while the model loads; --ready-file and sd_notify for supervisors."""

    def wait_http(self, s, timeout=60):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            self.assertIsNone(s.proc.poll(), s.logtext())
            try:
                return s.request("GET", "/health")
            except OSError:
                time.sleep(0.02)
        raise AssertionError(f"HTTP never answered:\n{s.logtext()}")

    def test_starting_state_then_failed_load(self):
        model = fifo_model(self)
        n = NotifyListener(self)
        ready_file = os.path.join(tempfile.mkdtemp(prefix="vrready_"), "ready")
        s = Server(self, "--model", model, "--ready-file", ready_file, env={"NOTIFY_SOCKET": n.address})
        st, body, ctype = self.wait_http(s)
        self.assertEqual((st, json.loads(body)), (200, {"status": "starting"}))
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
        c.request("GET", "/ready")
        r = c.getresponse()
        self.assertEqual((r.status, json.loads(r.read())), (503, {"ready": False, "state": "starting"}))
        c.request("POST", "/v1/score", body=json.dumps({"input_ids": [[0, 5, 2]]}),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        err = json.loads(r.read())["error"]
        self.assertEqual((r.status, r.getheader("Retry-After"), err["code"]), (503, "1", "VR_ERR_AGAIN"))
        self.assertIn("starting", err["message"])
        c.close()
        st, body, _ = s.request("GET", "/v1/model")
        self.assertEqual((st, json.loads(body)["error"]["code"]), (503, "VR_ERR_AGAIN"))
        self.assertRegex(s.metrics(), r"(?m)^verl_reward_ready 0$")
        self.assertFalse(os.path.exists(ready_file))
        self.assertEqual(n.wait_for("STATUS")["STATUS"], f"loading {model}")
        self.assertFalse(any("READY" in m for m in n.messages()))
        # the load fails now: exit status 1 and the reason in the log, as before HTTP was bound early
        # (opening the FIFO for writing releases the loader's open(); it then refuses the FIFO and
        # closes it, so nothing is written: a write could only meet a closed pipe)
        os.close(os.open(os.path.join(model, "config.json"), os.O_WRONLY))
        self.assertEqual(s.proc.wait(timeout=60), 1)
        log = s.logtext()
        self.assertIn("config.json: not a regular file", log)
        self.assertIn("exiting: ", log)
        self.assertFalse(os.path.exists(ready_file))
        self.assertFalse(any("READY" in m for m in n.messages()))
        self.assertFalse(shm_name_exists(s.name), "no segment before ready")

    def test_sigterm_while_loading(self):
        model = fifo_model(self)
        n = NotifyListener(self, abstract=True)
        s = Server(self, "--model", model, env={"NOTIFY_SOCKET": n.address})
        self.wait_http(s)
        n.wait_for("STATUS")
        s.proc.send_signal(signal.SIGTERM)
        # ends by SIGTERM's default action (nothing to drain), without waiting for the load
        self.assertEqual(s.proc.wait(timeout=60), -signal.SIGTERM)
        self.assertIn("SIGTERM while loading the model: exiting now", s.logtext())
        self.assertEqual(n.wait_for("STOPPING")["STOPPING"], "1")
        self.assertFalse(any("READY" in m for m in n.messages()))

    def test_ready_file_and_notify(self):
        n = NotifyListener(self)
        d = tempfile.mkdtemp(prefix="vrready_")
        self.addCleanup(shutil.rmtree, d, True)
        ready_file = os.path.join(d, "ready")
        with open(ready_file, "w") as f:
            f.write("pid=1\n")  # left by a dead process: removed before anything else
        s = Server(self, "--model", os.path.join(FIXTURES, "models", "roberta"), "--ready-file", ready_file,
                   env={"NOTIFY_SOCKET": n.address})
        # the file exists exactly while /ready answers 200: never before it, always once it does
        # (both change in one event-loop callback, between two requests)
        # (the stale file is removed before HTTP binds: "before" counts once HTTP has answered)
        end = time.monotonic() + 120
        seen = []
        while True:
            self.assertLess(time.monotonic(), end, f"not ready:\n{s.logtext()}")
            self.assertIsNone(s.proc.poll(), s.logtext())
            before = bool(seen) and os.path.exists(ready_file)
            try:
                st, body, _ = s.request("GET", "/ready")
            except OSError:
                continue
            after = os.path.exists(ready_file)
            seen.append(st)
            if before:
                self.assertEqual(st, 200, "ready file present while /ready said 503")
            if st == 200:
                self.assertTrue(after, "/ready said 200 without the ready file")
                break
            self.assertEqual(json.loads(body), {"ready": False, "state": "starting"})
        self.assertEqual(json.loads(s.request("GET", "/health")[1]), {"status": "ok"})
        with open(ready_file) as f:
            self.assertEqual(f.read(), f"pid={s.proc.pid}\nhttp=http://127.0.0.1:{s.port}\nshm={s.name}\n")
        self.assertFalse(os.path.exists(ready_file + ".tmp"))
        ready = n.wait_for("READY")
        self.assertEqual((ready["READY"], ready["MAINPID"]), ("1", str(s.proc.pid)))
        self.assertTrue(ready["STATUS"].startswith("ready: "), ready)
        self.assertFalse(any("STOPPING" in m for m in n.messages()))
        s.stop()
        self.assertFalse(os.path.exists(ready_file), "ready file not removed at exit")
        msgs = n.messages()
        keys = [k for m in msgs for k in ("READY", "STOPPING") if k in m]
        self.assertEqual(keys, ["READY", "STOPPING"], msgs)
        self.assertEqual(msgs[0]["STATUS"], "loading " + os.path.join(FIXTURES, "models", "roberta"))

    def test_bad_notify_socket_and_unwritable_ready_file(self):
        # a malformed NOTIFY_SOCKET is reported and ignored; the server still serves
        s = Server(self, "--model", "checksum", env={"NOTIFY_SOCKET": "relative/path"}).wait_ready()
        self.assertIn("NOTIFY_SOCKET=\"relative/path\" is neither", s.logtext())
        s.stop()
        # a ready file that cannot be written stops start-up (whoever waits on it would wait forever)
        s = Server(self, "--model", "checksum", "--ready-file", "/nonexistent-dir/ready")
        self.assertEqual(s.proc.wait(timeout=60), 1)
        self.assertIn("cannot write ready file /nonexistent-dir/ready.tmp", s.logtext())


class TestMetrics(unittest.TestCase):
    def test_counters_match(self):
        s = Server(self, "--model", "checksum").wait_ready()
        for i in range(7):
            st, _ = s.score({"input_ids": [[1] * 10, [2] * 10, [3 + i] * 10]})
            self.assertEqual(st, 200)
        for body in (b"{", b'{"input_ids": [[]]}'):
            self.assertEqual(s.request("POST", "/v1/score", body)[0], 400)
        for i in range(5):
            self.assertEqual(s.shm_score({"input_ids": [[i, 1], [i, 2, 3]]})["status"], "VR_OK")
        m = parse_prometheus(s.metrics())
        self.assertEqual(metric(m, "verl_reward_requests_total", transport="http", status="ok"), 7)
        self.assertEqual(metric(m, "verl_reward_sequences_total", transport="http", status="ok"), 21)
        self.assertEqual(metric(m, "verl_reward_tokens_total", transport="http"), 210)
        self.assertEqual(metric(m, "verl_reward_requests_total", transport="http", status="parse"), 1)
        self.assertEqual(metric(m, "verl_reward_requests_total", transport="http", status="empty_seq"), 1)
        self.assertEqual(metric(m, "verl_reward_requests_total", transport="shm", status="ok"), 5)
        self.assertEqual(metric(m, "verl_reward_sequences_total", transport="shm", status="ok"), 10)
        self.assertEqual(metric(m, "verl_reward_tokens_total", transport="shm"), 25)
        self.assertEqual(metric(m, "verl_reward_request_latency_seconds_count", transport="http"), 9)
        self.assertEqual(metric(m, "verl_reward_request_latency_seconds_count", transport="shm"), 5)
        self.assertEqual(metric(m, "verl_reward_request_latency_seconds_bucket", transport="shm", le="+Inf"), 5)
        self.assertEqual(metric(m, "verl_reward_batch_sequences_count"), metric(m, "verl_reward_batches_total"))
        self.assertGreaterEqual(metric(m, "verl_reward_batch_sequences_sum"), 31)
        self.assertEqual(metric(m, "verl_reward_queue_depth"), 0)
        self.assertEqual(metric(m, "verl_reward_lanes"), TEST_LANES)
        self.assertEqual(metric(m, "verl_reward_ready"), 1)
        self.assertEqual(metric(m, "verl_reward_component_scores_total", component="model", reason="ok"), 31)
        self.assertGreater(metric(m, "process_resident_memory_bytes"), 0)
        s.stop()

    def test_rules_reject_bad_expositions(self):
        """The checker in parse_prometheus fails on each rule it states (so the tests below can fail)."""
        ok = "# HELP a_total A.\n# TYPE a_total counter\na_total 1\n"
        h = ("# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 2\n"
             "h_sum 3\nh_count 2\n")
        parse_prometheus(ok + h)
        bad = {
            "no TYPE": "# HELP a_total A.\na_total 1\n",
            "no HELP": "# TYPE a_total counter\na_total 1\n",
            "TYPE after samples": "# HELP g G.\n# TYPE g gauge\ng 1\n# HELP g_x X.\n# TYPE g_x gauge\ng_x 1\n"
                                  "# TYPE g gauge\n",
            "counter without _total": "# HELP a A.\n# TYPE a counter\na 1\n",
            "gauge with _total": "# HELP a_total A.\n# TYPE a_total gauge\na_total 1\n",
            "bad name": "# HELP 1a A.\n# TYPE 1a gauge\n1a 1\n",
            "bad label": ok + "# HELP g G.\n# TYPE g gauge\ng{x=1} 1\n",
            "label twice": ok + "# HELP g G.\n# TYPE g gauge\ng{x=\"1\",x=\"2\"} 1\n",
            "duplicate series": ok + "a_total 2\n",
            "not contiguous": ok + "# HELP g G.\n# TYPE g gauge\ng 1\na_total{x=\"1\"} 1\n",
            "bucket not cumulative": h.replace('le=\"1\"} 1', 'le=\"1\"} 5'),
            "+Inf != _count": h.replace("h_count 2", "h_count 3"),
            "no +Inf": h.replace('h_bucket{le=\"+Inf\"} 2\n', ""),
            "le out of order": h.replace('h_bucket{le=\"1\"} 1', 'h_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} 1'),
            "no _sum": h.replace("h_sum 3\n", ""),
            "no final newline": ok[:-1],
        }
        for what, text in bad.items():
            with self.subTest(what), self.assertRaises(AssertionError):
                parse_prometheus(text)

    def test_traffic_moves_counters(self):
        """Known traffic moves each counter and histogram by what it should: responses under their
        real codes, one batch per request of a sequential client, queue wait = the queue_us answered."""
        s = Server(self, "--model", "checksum", "--max-seqs-per-request", "4").wait_ready()
        m0 = parse_prometheus(s.metrics())
        n, seqs, toks, queue_s = 6, 0, 0, 0.0
        for i in range(n):
            ids = [[7, i + 1] * (i + 1)] * (1 + i % 3)
            st, out = s.score({"input_ids": ids})
            self.assertEqual(st, 200, out)
            seqs, toks, queue_s = seqs + len(ids), toks + sum(map(len, ids)), queue_s + out["queue_us"] / 1e6
        self.assertEqual(s.request("POST", "/v1/score", b'{"input_ids": [[1, 2')[0], 400)
        self.assertEqual(s.request("POST", "/v1/score", json.dumps({"input_ids": [[1]] * 5}))[0], 413)
        self.assertEqual(s.request("GET", "/nope")[0], 404)
        m1 = parse_prometheus(s.metrics())

        def d(name, **labels):
            return metric(m1, name, **labels) - metric(m0, name, **labels)

        self.assertEqual(d("verl_reward_requests_total", transport="http", status="ok"), n)
        self.assertEqual(d("verl_reward_requests_total", transport="http", status="parse"), 1)
        self.assertEqual(d("verl_reward_requests_total", transport="http", status="too_large"), 1)
        self.assertEqual(d("verl_reward_http_responses_total", code="200"), n + 1)  # + the first scrape
        self.assertEqual(d("verl_reward_http_responses_total", code="400"), 1)
        self.assertEqual(d("verl_reward_http_responses_total", code="413"), 1)
        self.assertEqual(d("verl_reward_http_responses_total", code="404"), 1)
        self.assertEqual(d("verl_reward_http_responses_total", code="503"), 0)
        self.assertNotIn(("verl_reward_http_responses_total", frozenset({("code", "2xx")})), m1)
        self.assertEqual(d("verl_reward_request_latency_seconds_count", transport="http"), n + 2)
        # a sequential client: each request is a batch of its own
        self.assertEqual(d("verl_reward_batches_total"), n)
        for h in ("verl_reward_batch_sequences", "verl_reward_batch_tokens", "verl_reward_batch_compute_seconds"):
            self.assertEqual(d(h + "_count"), n, h)
            self.assertEqual(d(h + "_bucket", le="+Inf"), n, h)
        self.assertEqual(d("verl_reward_batch_sequences_sum"), seqs)
        self.assertEqual(d("verl_reward_batch_tokens_sum"), toks)
        self.assertEqual(d("verl_reward_batch_sequences_bucket", le="1"), 2)  # requests 0 and 3 had one sequence
        self.assertEqual(d("verl_reward_batch_sequences_bucket", le="2"), 4)
        self.assertEqual(d("verl_reward_request_queue_wait_seconds_count", transport="http"), n)
        self.assertEqual(d("verl_reward_request_queue_wait_seconds_count", transport="shm"), 0)
        self.assertAlmostEqual(d("verl_reward_request_queue_wait_seconds_sum", transport="http"), queue_s, delta=1e-6)
        out = s.shm_score({"input_ids": [[1, 2, 3], [4]]})
        self.assertEqual(out["status"], "VR_OK", out)
        m2 = parse_prometheus(s.metrics())
        self.assertEqual(metric(m2, "verl_reward_request_queue_wait_seconds_count", transport="shm"), 1)
        self.assertAlmostEqual(metric(m2, "verl_reward_request_queue_wait_seconds_sum", transport="shm"),
                               out["queue_us"] / 1e6, delta=1e-9)
        s.stop()

    def test_process_metrics(self):
        """The process_* collectors agree with what /proc says about the server from outside."""
        t_spawn = time.time()
        s = Server(self, "--model", "checksum").wait_ready()
        for i in range(20):
            self.assertEqual(s.score({"input_ids": [[i, 1, 2]]})[0], 200)
        tck = os.sysconf("SC_CLK_TCK")

        def stat():
            with open(f"/proc/{s.proc.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()  # [0] is field 3

        before = stat()
        text = s.metrics()
        after = stat()
        m, types = parse_prometheus(text, with_types=True)
        self.assertEqual({k: v for k, v in types.items() if k.startswith("process_")},
                         {"process_cpu_seconds_total": "counter", "process_resident_memory_bytes": "gauge",
                          "process_virtual_memory_bytes": "gauge", "process_start_time_seconds": "gauge",
                          "process_open_fds": "gauge", "process_max_fds": "gauge"})
        cpu = metric(m, "process_cpu_seconds_total")
        self.assertLessEqual((int(before[11]) + int(before[12])) / tck - 0.0005, cpu)
        self.assertLessEqual(cpu, (int(after[11]) + int(after[12])) / tck + 0.0005)
        with open("/proc/stat") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        start = metric(m, "process_start_time_seconds")
        self.assertAlmostEqual(start, btime + int(after[19]) / tck, delta=0.002)
        self.assertGreater(start, time.time() - 86400)  # plausibility: started today, not at the epoch
        self.assertLess(t_spawn - 2, start)  # btime is whole seconds
        rss, vsz = metric(m, "process_resident_memory_bytes"), metric(m, "process_virtual_memory_bytes")
        self.assertGreater(rss, 0)
        self.assertGreaterEqual(vsz, rss)
        # the mapping moves between the scrape and the read of /proc (a thread's stack, an arena):
        # the same order of magnitude, not the same byte count
        self.assertLess(abs(vsz - int(after[20])), 0.05 * int(after[20]))
        fds, max_fds = metric(m, "process_open_fds"), metric(m, "process_max_fds")
        self.assertGreater(fds, 2)  # stdio at least, plus the listening socket and the segment
        self.assertLessEqual(fds, max_fds)
        with open(f"/proc/{s.proc.pid}/limits") as f:
            soft = next(line.split()[3] for line in f if line.startswith("Max open files"))
        self.assertEqual(max_fds, float(soft))
        self.assertGreaterEqual(metric(parse_prometheus(s.metrics()), "process_cpu_seconds_total"), cpu)
        for old in ("verl_reward_uptime_seconds", "verl_reward_resident_memory_bytes"):
            self.assertNotIn(old, types)
        s.stop()

    def test_build_info(self):
        """verl_reward_build_info: one series, value 1, the project's version, a commit of this
        checkout, the device and architecture /v1/model reports."""
        s = Server(self, "--model", os.path.join(FIXTURES, "models", "llama_gqa"), "--device", "cpu").wait_ready()
        m = parse_prometheus(s.metrics())
        info = [dict(k[1]) for k in m if k[0] == "verl_reward_build_info"]
        self.assertEqual(len(info), 1, info)
        info = info[0]
        self.assertEqual(metric(m, "verl_reward_build_info", **info), 1)
        self.assertEqual(set(info), {"version", "commit", "device", "model"})
        model = json.loads(s.request("GET", "/v1/model")[1])
        self.assertEqual(info["device"], model["device"])
        self.assertEqual(info["model"], model["architecture"])
        self.assertEqual(info["model"], "LlamaForSequenceClassification")
        src = os.environ.get("VR_SOURCE_DIR", ".")
        with open(os.path.join(src, "CMakeLists.txt")) as f:
            version = re.search(r"project\(verl_reward VERSION ([0-9.]+)", f.read()).group(1)
        self.assertEqual(info["version"], version)
        git = subprocess.run(["git", "-C", src, "rev-parse", "--git-dir"], capture_output=True)
        if git.returncode != 0:
            self.assertEqual(info["commit"], "unknown")
        else:
            h = re.fullmatch(r"(?:.*-g)?([0-9a-f]{7,40})(?:-dirty)?", info["commit"])
            self.assertTrue(h, info["commit"])
            self.assertEqual(subprocess.run(["git", "-C", src, "cat-file", "-e", h.group(1) + "^{commit}"]).returncode,
                             0, f"{info['commit']} is not a commit of {src}")
        s.stop()

    def test_promtool(self):
        """promtool check metrics (Debian's prometheus package) on a scrape after traffic."""
        promtool = os.environ.get("VR_PROMTOOL") or shutil.which("promtool")
        if not promtool:
            self.skipTest("promtool not installed (apt-get install prometheus); parse_prometheus's rules still apply")
        s = Server(self, "--model", "checksum").wait_ready()
        s.score({"input_ids": [[1, 2, 3]]})
        s.request("POST", "/v1/score", b"{")
        p = subprocess.run([promtool, "check", "metrics"], input=s.metrics(), capture_output=True, text=True,
                           timeout=60)
        self.assertEqual((p.returncode, p.stdout + p.stderr), (0, ""))
        s.stop()


class TestRss(unittest.TestCase):
    """Resident memory stays flat over 100,000 requests (20,000 under ASan)."""

    def test_rss_flat(self):
        total = 20000 if SANITIZE else 100000
        env = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1:quarantine_size_mb=4"}
        s = Server(self, "--model", "checksum", env=env).wait_ready()

        def flood(n):
            p = subprocess.run([SHM_CLIENT, "flood", s.name, "2", "16", str(n // 2), "2", "24"], capture_output=True,
                               text=True, timeout=600)
            self.assertEqual(p.returncode, 0, p.stderr)
            r = json.loads(p.stdout)
            self.assertEqual((r["ok"], r["mismatch"]), (n // 2 * 2, 0), r)

        warm = total // 2 if SANITIZE else total // 10  # ASan: allocator caches and quarantine fill first
        flood(warm)
        for i in range(200):
            self.assertEqual(s.score({"input_ids": [[i, 1, 2]]})[0], 200)
        rss0 = rss_bytes(s.proc.pid)
        flood(total - warm - 2000)
        c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)  # keep-alive
        for i in range(1800):
            c.request("POST", "/v1/score", body=json.dumps({"input_ids": [[i, 2, 3]]}),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            r.read()
            self.assertEqual(r.status, 200)
        c.close()
        rss1 = rss_bytes(s.proc.pid)
        growth = rss1 - rss0
        print(f"RSS after {warm + 200} requests: {rss0 / 2**20:.1f} MiB; after {total}: {rss1 / 2**20:.1f} MiB",
              file=sys.stderr)
        # 4 MiB over 90,000 requests: a leak of 50 bytes per request fails; LSan (ASan pass) sees smaller ones
        self.assertLess(growth, (12 if SANITIZE else 4) << 20, f"RSS grew by {growth / 2**20:.1f} MiB")
        m = parse_prometheus(s.metrics())
        served = metric(m, "verl_reward_requests_total", transport="shm", status="ok") + \
            metric(m, "verl_reward_requests_total", transport="http", status="ok")
        self.assertEqual(served, total)
        s.stop()


class TestRules(unittest.TestCase):
    EXTRAS = [{"data_source": "openai/gsm8k", "solution_str": "so the answer is #### 72", "ground_truth": "72"},
              {"data_source": "openai/gsm8k", "solution_str": "#### 1,000", "ground_truth": "999"},
              {"solution_str": "no answer here", "ground_truth": "5"}]

    def test_rules_only_server(self):
        s = Server(self, "--reward", "gsm8k").wait_ready()
        st, out = s.score({"extras": self.EXTRAS})
        self.assertEqual(st, 200, out)
        self.assertEqual(out["scores"], [1.0, 0.0, 0.0])
        self.assertEqual(out["components"], {"gsm8k": [1.0, 0.0, 0.0]})
        st, out = s.score({"input_ids": [[1, 2], [3], [4]], "extras": self.EXTRAS})
        self.assertEqual(out["scores"], [1.0, 0.0, 0.0])
        out = s.shm_score({"input_ids": [[1, 2], [3], [4]], "extras": self.EXTRAS})
        self.assertEqual(out["status"], "VR_OK", out)
        self.assertEqual(out["scores"], [1.0, 0.0, 0.0])
        self.assertEqual(out["components"], {"gsm8k": [1.0, 0.0, 0.0]})
        st, data, _ = s.request("GET", "/v1/model")
        self.assertEqual(json.loads(data)["components"], ["gsm8k"])
        st, data, _ = s.request("POST", "/v1/score", json.dumps({"extras": [{"solution_str": 5}]}))
        self.assertEqual(st, 400)
        self.assertIn("extras[0]", data.decode())
        m = parse_prometheus(s.metrics())
        self.assertEqual(metric(m, "verl_reward_component_scores_total", component="gsm8k", reason="ok"), 3)
        self.assertEqual(metric(m, "verl_reward_component_scores_total", component="gsm8k", reason="mismatch"), 3)
        self.assertEqual(metric(m, "verl_reward_component_scores_total", component="gsm8k", reason="no_answer"), 3)
        s.stop()

    def test_mixed_server_total_is_weighted_sum(self):
        s = Server(self, "--model", "checksum", "--reward", "model:0.7,gsm8k:0.3").wait_ready()
        ids = [[5, 6, 7], [8, 9], [10]]
        for out in (s.score({"input_ids": ids, "extras": self.EXTRAS})[1],
                    s.shm_score({"input_ids": ids, "extras": self.EXTRAS})):
            self.assertEqual(set(out["components"]), {"model", "gsm8k"})
            self.assertEqual(f32s(out["components"]["model"]), [checksum_score(q) for q in ids])
            self.assertEqual(out["components"]["gsm8k"], [1.0, 0.0, 0.0])
            for i in range(3):
                want = f32(0.7) * f32(out["components"]["model"][i]) + f32(0.3) * out["components"]["gsm8k"][i]
                self.assertAlmostEqual(out["scores"][i], want, places=6)
        # msgpack body with msgpack extras
        body = (b"\x82\xa9input_ids\x91\x91\x05\xa6extras\x91\x82\xacsolution_str\xa6#### 3"
                b"\xacground_truth\xa13")
        st, data, ctype = s.request("POST", "/v1/score", body, ctype="application/msgpack")
        self.assertEqual(st, 200, data)
        self.assertIn(b"\xa5gsm8k\x91\xca\x3f\x80\x00\x00", data)  # gsm8k component 1.0
        s.stop()


_PROM_NAME = re.compile(r"\b((?:verl_reward|process)_[a-z_]+)")
_RATE_ARG = re.compile(r"\b(?:rate|irate|increase)\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)")


def dashboard_exprs(dash):
    """Every PromQL string of a Grafana dashboard: the panels' targets (rows' panels too) and the
    query variables of its templating."""
    exprs, panels = [], list(dash.get("panels", []))
    while panels:
        p = panels.pop()
        panels.extend(p.get("panels", []))
        exprs.extend(t["expr"] for t in p.get("targets", []) if "expr" in t)
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            qv = v.get("query")
            exprs.append(qv["query"] if isinstance(qv, dict) else qv)
    return exprs


def dashboard_problems(dash, types):
    """What is wrong with the dashboard's metric names given a server's {family: type}: a name the
    server does not export, a histogram used without _bucket/_sum/_count, a _bucket of a
    non-histogram, rate() over a gauge. Returns (problems, families used)."""
    problems, used = [], set()
    for e in dashboard_exprs(dash):
        for name in _PROM_NAME.findall(e):
            base = _HIST_SUFFIX.sub("", name)
            fam = name if name in types else base if base in types else None
            if not fam:
                problems.append(f"{name} (in {e}) is not exported")
                continue
            used.add(fam)
            if types[fam] == "histogram" and name == fam:
                problems.append(f"histogram {fam} used without a suffix in {e}")
            if name.endswith("_bucket") and types[fam] != "histogram":
                problems.append(f"{name} of a {types[fam]} in {e}")
        for name in _RATE_ARG.findall(e):
            fam = name if name in types else _HIST_SUFFIX.sub("", name)
            if types.get(fam) == "gauge":
                problems.append(f"rate() over the gauge {name} in {e}")
    return problems, used


class TestDashboard(unittest.TestCase):
    """docs/grafana/verl-reward.json uses only metrics a live server exports (after traffic, so
    every family is present), each as its type allows; and it and the docs' Metrics table cover
    every family the server exports."""
    SRC = os.environ.get("VR_SOURCE_DIR", ".")

    def scrape_types(self):
        s = Server(self, "--model", "checksum").wait_ready()
        self.assertEqual(s.score({"input_ids": [[1, 2, 3]]})[0], 200)
        self.assertEqual(s.shm_score({"input_ids": [[4, 5]]})["status"], "VR_OK")
        _, types = parse_prometheus(s.metrics(), with_types=True)
        s.stop()
        return types

    def test_dashboard_names(self):
        with open(os.path.join(self.SRC, "docs", "grafana", "verl-reward.json")) as f:
            dash = json.load(f)
        types = self.scrape_types()
        exprs = dashboard_exprs(dash)
        self.assertGreater(len(exprs), 20)
        problems, used = dashboard_problems(dash, types)
        self.assertEqual(problems, [])
        self.assertEqual(set(types) - used, set(), "families the dashboard does not show")
        # the checker can fail: an unknown name, a bare histogram, rate() of a gauge
        bad = {"panels": [{"targets": [{"expr": "rate(verl_reward_nope_total[5m])"},
                                       {"expr": "verl_reward_request_latency_seconds"},
                                       {"expr": "rate(verl_reward_queue_depth[5m])"},
                                       {"expr": "verl_reward_ready_bucket"}]}]}
        self.assertEqual(len(dashboard_problems(bad, types)[0]), 4)
        # Grafana's shape: unique panel ids, a grid position, a refId per target, the data source variable
        ids = [p["id"] for p in dash["panels"]]
        self.assertEqual(len(ids), len(set(ids)))
        names = {v["name"] for v in dash["templating"]["list"]}
        for p in dash["panels"]:
            self.assertEqual(set(p["gridPos"]), {"x", "y", "w", "h"}, p["title"])
            self.assertLessEqual(p["gridPos"]["x"] + p["gridPos"]["w"], 24, p["title"])
            refs = [t["refId"] for t in p["targets"]]
            self.assertEqual(len(refs), len(set(refs)), p["title"])
            for var in re.findall(r"\$\{?([a-z_]+)", json.dumps(p)):
                self.assertTrue(var in names or var.startswith("__"), f"{p['title']}: ${var} undefined")

    def test_docs_list_every_metric(self):
        """docs/operations.md's Metrics table names exactly the families the server exports."""
        with open(os.path.join(self.SRC, "docs", "operations.md")) as f:
            text = f.read()
        section = text[text.index("### Metrics (`GET /metrics`)"):text.index("### Stopping")]
        table = "\n".join(line for line in section.splitlines() if line.startswith("| `"))
        types = self.scrape_types()
        documented = {n if n in types else _HIST_SUFFIX.sub("", n)
                      for n in re.findall(r"`((?:verl_reward|process)_[a-z_]+)`", table)}
        self.assertEqual(documented, set(types))


if __name__ == "__main__":
    unittest.main(verbosity=2)
