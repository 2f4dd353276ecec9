"""verl_reward against a real verl-reward-server on the CPU backend.

Checksum model: every score is known exactly (vr_testlib.checksum_score), so
each answer is checked against the request that was sent. Fixture model
(tests/fixtures/models/llama_gqa): scores match transformers' golden scores and
verl-reward-score's within vr_testlib.TRANSFORMERS_REL_TOL. Also: submits from
several threads, limits -> RequestTooLarge, server killed -> ServerGone (bounded,
not a hang), HTTP client == shm client, the verl adapter end to end."""

import json
import os
import random
import sys
import threading
import time
import unittest

import vr_testlib
from vr_testlib import Server, checksum_score
import verl_reward
from verl_reward import (ConnectFailed, HttpRewardClient, InvalidRequest, RequestTooLarge,
                         RewardClient, SequenceTooLong, ServerGone, VerlRewardError, verl_adapter)
from verl_standin import make_batch

try:
    import torch
except ImportError:
    torch = None
try:
    import numpy
except ImportError:   # tools/deps.sh installs Debian's python3-numpy; another interpreter may lack it
    numpy = None


def random_seqs(rng, n, max_len, vocab=1000):
    return [[rng.randrange(vocab) for _ in range(rng.randint(1, max_len))] for _ in range(n)]


class ChecksumServerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        vr_testlib.need_client_lib()
        cls.server = Server("checksum", tag="ck")
        cls.rc = RewardClient(cls.server.shm_name, timeout_s=30)

    @classmethod
    def tearDownClass(cls):
        cls.rc.close()
        cls.server.stop()

    def test_scores_are_the_checksums(self):
        rng = random.Random(1)
        seqs = random_seqs(rng, 64, 200)
        self.assertEqual(self.rc.score(seqs), [checksum_score(s) for s in seqs])
        res = self.rc.score_with_info(seqs[:3])
        self.assertEqual(res.scores, [checksum_score(s) for s in seqs[:3]])
        self.assertGreaterEqual(res.queue_us, 0)
        self.assertEqual(self.rc.score([]), [])

    @unittest.skipIf(numpy is None, "numpy not importable by %s (HINT: apt-get install python3-numpy)"
                     % sys.executable)
    def test_numpy_input(self):
        a = numpy.array([[3, 1, 4, 1], [5, 9, 2, 6]], dtype=numpy.int64)
        self.assertEqual(self.rc.score(a), [checksum_score([3, 1, 4, 1]), checksum_score([5, 9, 2, 6])])
        self.assertEqual(self.rc.score([a[0], a[1][:2]]), [checksum_score([3, 1, 4, 1]), checksum_score([5, 9])])

    @unittest.skipIf(torch is None, "torch not importable")
    def test_torch_input(self):
        t = torch.tensor([[3, 1, 4], [1, 5, 9]])
        self.assertEqual(self.rc.score(t), [checksum_score([3, 1, 4]), checksum_score([1, 5, 9])])

    def test_extras_travel(self):
        seqs = [[1, 2, 3], [4, 5]]
        extras = [{"data_source": "openai/gsm8k", "solution_str": "#### 3", "ground_truth": "3",
                   "extra_info": {"index": 0, "tags": ["a", 1.5, None]}}, None]
        # No rule rewards configured: the extras are parsed and the total is the model's score.
        self.assertEqual(self.rc.score(seqs, extras), [checksum_score(s) for s in seqs])

    def test_submit_from_threads(self):
        errors, done = [], []

        def worker(k):
            rng = random.Random(100 + k)
            try:
                for _ in range(15):
                    pend = [(s, self.rc.submit(s)) for s in (random_seqs(rng, rng.randint(1, 8), 64),
                                                             random_seqs(rng, 3, 16))]
                    for seqs, p in pend:
                        got = p.result()
                        self.assertTrue(p.done())
                        self.assertEqual(got.scores, [checksum_score(s) for s in seqs])
                        self.assertEqual(p.result().scores, got.scores)   # cached outcome
                done.append(k)
            except Exception as e:   # reported to the main thread
                errors.append("thread %d: %r" % (k, e))

        threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        self.assertFalse(any(t.is_alive() for t in threads), "threads hung")
        self.assertEqual(errors, [])
        self.assertEqual(sorted(done), list(range(6)))

    def test_done_polls_without_blocking(self):
        p = self.rc.submit([[7, 7, 7]])
        deadline = time.monotonic() + 60   # a hang guard only: the answer takes microseconds
        while not p.done():
            self.assertLess(time.monotonic(), deadline, "request never completed")
            time.sleep(0.001)
        self.assertEqual(p.scores(), [checksum_score([7, 7, 7])])

    def test_limits_and_too_large(self):
        lim = self.rc.limits()
        for k in ("max_seq_len", "max_seqs_per_request", "arena_bytes", "max_inflight", "n_lanes"):
            self.assertGreater(lim[k], 0, k)
        with self.assertRaises(SequenceTooLong) as cm:
            self.rc.score([[1] * (lim["max_seq_len"] + 1)])
        self.assertIsInstance(cm.exception, RequestTooLarge)
        with self.assertRaises(RequestTooLarge):
            self.rc.score([[1]] * (lim["max_seqs_per_request"] + 1))
        n_tokens = lim["arena_bytes"] // 4 + 1             # more int32 ids than the lane's arena holds
        per = max(1, min(lim["max_seq_len"], n_tokens))
        seqs = [[2] * per for _ in range((n_tokens + per - 1) // per)]
        if len(seqs) <= lim["max_seqs_per_request"]:
            with self.assertRaises(RequestTooLarge) as cm:
                self.rc.score(seqs)
            self.assertIn(cm.exception.name, ("VR_ERR_TOO_LARGE", "VR_ERR_SEQ_TOO_LONG"))
        # the client is still usable afterwards
        self.assertEqual(self.rc.score([[9]]), [checksum_score([9])])

    def test_invalid_requests(self):
        with self.assertRaises(InvalidRequest) as cm:
            self.rc.score([[1, 2], []])
        self.assertEqual(cm.exception.code, verl_reward.errors.STATUS_VALUES["VR_ERR_EMPTY_SEQ"])
        self.assertEqual(self.rc.score([[1, 2]]), [checksum_score([1, 2])])

    def test_http_equals_shm(self):
        rng = random.Random(7)
        seqs = random_seqs(rng, 40, 100)
        with HttpRewardClient(self.server.url, timeout_s=30) as hc:
            self.assertTrue(hc.ready())
            via_http = hc.score(seqs)
            self.assertEqual(via_http, self.rc.score(seqs))
            self.assertEqual(via_http, [checksum_score(s) for s in seqs])
            pend = [hc.submit(seqs[i:i + 5]) for i in range(0, 40, 5)]
            self.assertEqual(sum((p.scores() for p in pend), []), via_http)
            with self.assertRaises(InvalidRequest):
                hc.score([[1], []])

    def test_connect_errors(self):
        with self.assertRaises(ConnectFailed) as cm:
            RewardClient("vr_py_no_such_segment_%d" % os.getpid())
        self.assertEqual(cm.exception.name, "VR_ERR_NOT_FOUND")
        with self.assertRaises(ServerGone):
            HttpRewardClient("http://127.0.0.1:%d" % vr_testlib.free_port(), timeout_s=5).score([[1]])
        # a server of another uid than the expected one is refused (issue 18: SO_PEERCRED)
        with self.assertRaises(ConnectFailed) as cm:
            RewardClient(self.server.shm_name, expected_server_uid=os.geteuid() + 1)
        self.assertEqual(cm.exception.name, "VR_ERR_PERM")
        with RewardClient(self.server.shm_name, expected_server_uid=os.geteuid()) as c:
            self.assertEqual(c.score([[1, 2, 3]]), [checksum_score([1, 2, 3])])

    def test_context_manager_and_close(self):
        with RewardClient(self.server.shm_name) as c:
            p = c.submit([[4, 2]])
            self.assertEqual(c.score([[1, 2, 3]]), [checksum_score([1, 2, 3])])
        self.assertTrue(c.closed)
        with self.assertRaises(VerlRewardError) as cm:
            c.score([[1]])
        self.assertEqual(cm.exception.name, "VR_ERR_CANCELLED")
        with self.assertRaises(VerlRewardError):
            p.result()
        c.close()   # idempotent

    def test_compute_score_batch_function(self):
        infos = [{"input_ids": [5, 6, 7], "index": 0}, {"prompt_ids": [1], "response_ids": [2, 3]}]
        got = verl_adapter.compute_score(["a", "b"], ["s", "t"], ["1", "2"], infos,
                                         shm_name=self.server.shm_name)
        self.assertEqual(got, [checksum_score([5, 6, 7]), checksum_score([1, 2, 3])])
        got_http = verl_adapter.compute_score(["a", "b"], ["s", "t"], ["1", "2"], infos,
                                              service_url=self.server.url)
        self.assertEqual(got_http, got)

    def test_reward_manager_end_to_end(self):
        prompts = [[11, 12, 13], [21], [31, 32, 33, 34]]
        responses = [[51, 52], [61, 62, 63, 64, 65], [71]]
        for side in ("left", "right"):
            with self.subTest(prompt_padding=side):
                data = make_batch(prompts, responses, 4, 5, prompt_side=side,
                                  non_tensor_batch={"data_source": ["x"] * 3,
                                                    "reward_model": [{"ground_truth": "1"}] * 3,
                                                    "extra_info": [{"i": i} for i in range(3)]})
                mgr = verl_adapter.VerlRewardManager(shm_name=self.server.shm_name)
                out = mgr(data)
                for i, (p, r) in enumerate(zip(prompts, responses)):
                    want = [0.0] * 5
                    want[len(r) - 1] = checksum_score(p + r)
                    self.assertEqual(out[i], want)


class RulesServerTest(unittest.TestCase):
    """A server mixing the checksum model with a rule reward: extras reach the rule and
    components come back, through both transports and the reward manager."""

    @classmethod
    def setUpClass(cls):
        vr_testlib.need_client_lib()
        cls.server = Server("checksum", tag="rules", extra_args=["--reward", "model:1,gsm8k:0.5"])
        cls.rc = RewardClient(cls.server.shm_name, timeout_s=30)

    @classmethod
    def tearDownClass(cls):
        cls.rc.close()
        cls.server.stop()

    SEQS = [[1, 2, 3], [4, 5], [6]]
    EXTRAS = [{"data_source": "openai/gsm8k", "solution_str": "so #### 42", "ground_truth": "42"},
              {"data_source": "openai/gsm8k", "solution_str": "#### 41", "ground_truth": "42",
               "extra_info": {"index": 1, "tags": ["a", 1.5, None]}},
              {"data_source": "openai/gsm8k", "solution_str": "#### 7", "ground_truth": 7}]

    def check(self, res):
        self.assertEqual(set(res.components), {"model", "gsm8k"})
        self.assertEqual(res.components["model"], [checksum_score(s) for s in self.SEQS])
        self.assertEqual(res.components["gsm8k"], [1.0, 0.0, 1.0])
        for total, m, g in zip(res.scores, res.components["model"], res.components["gsm8k"]):
            self.assertAlmostEqual(total, m + 0.5 * g, delta=1e-6)

    def test_components_shm_and_http(self):
        self.check(self.rc.score_with_info(self.SEQS, self.EXTRAS))
        with HttpRewardClient(self.server.url) as hc:
            self.check(hc.score_with_info(self.SEQS, self.EXTRAS))
        # raw msgpack bytes are passed through as they are
        packed = [verl_reward.msgpack.packb(e) for e in self.EXTRAS]
        self.check(self.rc.score_with_info(self.SEQS, packed))

    def test_malformed_extras_name_the_sequence(self):
        bad = [self.EXTRAS[0], {"ground_truth": {"not": "text"}}, None]
        with self.assertRaises(InvalidRequest) as cm:
            self.rc.score(self.SEQS, bad)
        self.assertEqual(cm.exception.bad_seq, 1)
        with self.assertRaises(InvalidRequest):
            self.rc.score([[1]], [b"\xc1"])
        with HttpRewardClient(self.server.url) as hc:
            with self.assertRaises(InvalidRequest) as cm:
                hc.score(self.SEQS, bad)
            self.assertEqual(cm.exception.bad_seq, 1)
        self.assertEqual(self.rc.score_with_info(self.SEQS, self.EXTRAS).components["gsm8k"], [1.0, 0.0, 1.0])

    def test_reward_manager_sends_extras(self):
        class Tok:                       # decodes a response to the text the rule reads
            def decode(self, ids, skip_special_tokens=True):
                return "#### %d" % sum(ids)

        prompts, responses = [[1, 2], [3]], [[40, 2], [5, 5]]
        data = make_batch(prompts, responses, 2, 2,
                          non_tensor_batch={"data_source": ["openai/gsm8k"] * 2,
                                            "reward_model": [{"ground_truth": "42"}, {"ground_truth": "11"}],
                                            "extra_info": [{"index": 0}, {"index": 1}]})
        mgr = verl_adapter.VerlRewardManager(tokenizer=Tok(), shm_name=self.server.shm_name)
        res = mgr(data, return_dict=True)
        self.assertEqual(res["reward_extra_info"]["gsm8k"], [1.0, 0.0])
        self.assertEqual(res["reward_extra_info"]["model"], [checksum_score(p + r) for p, r in zip(prompts, responses)])
        self.assertAlmostEqual(res["reward_tensor"][0][1], checksum_score([1, 2, 40, 2]) + 0.5, delta=1e-6)


class ServerLifecycleTest(unittest.TestCase):
    # The client's timeout in the two tests below is long (CLIENT_TIMEOUT_S): a client that
    # noticed the death returns well before it, one that only timed out does not. The bound
    # is half of it, so a slow machine has plenty of room.
    CLIENT_TIMEOUT_S = 120

    def test_killed_server_raises_server_gone(self):
        vr_testlib.need_client_lib()
        server = Server("checksum", tag="kill")
        try:
            rc = RewardClient(server.shm_name, timeout_s=self.CLIENT_TIMEOUT_S)
            self.assertEqual(rc.score([[1, 2]]), [checksum_score([1, 2])])
            server.kill()
            t0 = time.monotonic()
            with self.assertRaises(ServerGone) as cm:
                rc.score([[3, 4]])
            self.assertLess(time.monotonic() - t0, self.CLIENT_TIMEOUT_S / 2,
                            "waited for the timeout: %s" % cm.exception)
            with self.assertRaises(ServerGone):
                rc.submit([[5]]).result()
            rc.close()
            with self.assertRaises(ServerGone):
                HttpRewardClient(server.url, timeout_s=5).score([[1]])
        finally:
            server.stop()

    def test_socket_dir_and_path_names(self):
        # --shm-socket-dir: clients find the socket with socket_dir=, or by its path as the name
        vr_testlib.need_client_lib()
        import tempfile
        d = tempfile.mkdtemp(prefix="vr_py_sockdir_")  # 0700, ours: the server accepts it
        name = vr_testlib.unique_shm_name("sockdir")
        path = os.path.join(d, name + ".sock")
        server = Server("checksum", shm_name=path)  # the path form (its log goes into d as well)
        try:
            with RewardClient(path) as c:
                self.assertEqual(c.score([[5, 6]]), [checksum_score([5, 6])])
            with RewardClient(name, socket_dir=d) as c:
                self.assertEqual(c.score([[7]]), [checksum_score([7])])
            with self.assertRaises(ConnectFailed) as cm:
                RewardClient(name)  # not in the default directory
            self.assertEqual(cm.exception.name, "VR_ERR_NOT_FOUND")
        finally:
            server.stop()
        self.assertFalse(os.path.exists(path), "the socket is removed at a clean stop")
        os.rmdir(d)

    def test_restart_under_the_same_name(self):
        vr_testlib.need_client_lib()
        first = Server("checksum", tag="restart")
        name, second = first.shm_name, None
        try:
            rc = RewardClient(name, timeout_s=20)
            infos = [{"input_ids": [4, 5, 6]}]
            self.assertEqual(verl_adapter.compute_score(["d"], ["s"], ["g"], infos, shm_name=name),
                             [checksum_score([4, 5, 6])])
            first.kill()                 # a crash: the stale segment stays for the next server
            second = Server("checksum", shm_name=name)
            # the old client learns the server is gone or restarted, never scores silently
            with self.assertRaises(ServerGone) as cm:
                rc.score([[1]])
            print("old client after restart: %s" % cm.exception)
            rc.close()
            # the adapter's cached client reconnects once by itself
            self.assertEqual(verl_adapter.compute_score(["d"], ["s"], ["g"], infos, shm_name=name),
                             [checksum_score([4, 5, 6])])
        finally:
            if second is not None:
                second.stop()
            first.stop()

    def test_timeout_leaves_request_pending(self):
        # The short timeouts only ever run out while the server is stopped (SIGSTOP), so
        # they expire on any machine; the answers expected with it running get a hang guard.
        vr_testlib.need_client_lib()
        server = Server("checksum", tag="stall")
        try:
            with RewardClient(server.shm_name, timeout_s=0.3) as rc:
                self.assertEqual(rc.submit([[1]]).result(timeout=60).scores, [checksum_score([1])])
                server.pause()
                p = rc.submit([[6, 6]])
                with self.assertRaises(verl_reward.Timeout):
                    p.result(timeout=0.2)
                self.assertFalse(p.done())
                with self.assertRaises(verl_reward.Timeout):
                    rc.score([[2]])                  # the client's timeout_s bounds score()
                server.resume()
                self.assertEqual(p.result(timeout=60).scores, [checksum_score([6, 6])])
                self.assertTrue(p.done())
                self.assertEqual(rc.submit([[3]]).result(timeout=60).scores, [checksum_score([3])])
        finally:
            server.resume()
            server.stop()

    def test_pending_request_fails_when_server_dies(self):
        vr_testlib.need_client_lib()
        server = Server("checksum", tag="kill2")
        try:
            with RewardClient(server.shm_name, timeout_s=self.CLIENT_TIMEOUT_S) as rc:
                self.assertEqual(rc.score([[1]]), [checksum_score([1])])
                server.pause()                       # SIGSTOP: the request stays queued
                p = rc.submit([[8, 9]])
                server.kill()
                t0 = time.monotonic()
                with self.assertRaises(ServerGone):
                    p.result()
                self.assertLess(time.monotonic() - t0, self.CLIENT_TIMEOUT_S / 2, "waited for the timeout")
        finally:
            server.stop()


class FixtureModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        vr_testlib.need_client_lib()
        with open(os.path.join(vr_testlib.FIXTURE_MODEL, "golden.json")) as f:
            golden = json.load(f)
        cls.seqs = golden["sequences"]
        cls.golden_scores = golden["scores"]
        cls.vocab = golden["vocab_size"]
        cls.max_len = golden["max_seq_len"]
        cls.server = Server(vr_testlib.FIXTURE_MODEL, tag="fx")
        cls.rc = RewardClient(cls.server.shm_name, timeout_s=60)

    @classmethod
    def tearDownClass(cls):
        cls.rc.close()
        cls.server.stop()

    def test_equals_transformers_golden(self):
        # the fixture's scores from Hugging Face transformers (tools/make_fixtures.py)
        vr_testlib.assert_scores_close(self, self.rc.score(self.seqs), self.golden_scores, what="shm")

    def test_equals_score_tool(self):
        want = vr_testlib.score_tool(vr_testlib.FIXTURE_MODEL, self.seqs)
        # bit-identical: the cpu backend's scores do not depend on batch or threads
        vr_testlib.assert_scores_identical(self, self.rc.score(self.seqs), want, what="shm vs verl-reward-score")
        with HttpRewardClient(self.server.url, timeout_s=60) as hc:
            vr_testlib.assert_scores_identical(self, hc.score(self.seqs), want, what="http vs verl-reward-score")

    def test_token_out_of_vocabulary(self):
        with self.assertRaises(InvalidRequest) as cm:
            self.rc.score([[1, 2], [self.vocab]])
        self.assertEqual(cm.exception.name, "VR_ERR_TOKEN_RANGE")

    def test_adapter_positions_with_model_scores(self):
        rng = random.Random(3)
        prompts = [[rng.randrange(1, self.vocab) for _ in range(rng.randint(1, 6))] for _ in range(5)]
        responses = [[rng.randrange(1, self.vocab) for _ in range(rng.randint(1, 8))] for _ in range(5)]
        full = [p + r for p, r in zip(prompts, responses)]
        want = vr_testlib.score_tool(vr_testlib.FIXTURE_MODEL, full)
        for ps, rs in (("left", "right"), ("right", "right"), ("left", "left")):
            with self.subTest(prompt=ps, response=rs):
                data = make_batch(prompts, responses, 6, 8, prompt_side=ps, response_side=rs)
                out = verl_adapter.VerlRewardManager(shm_name=self.server.shm_name, send_extras=False)(data)
                mask = data.batch["attention_mask"].tolist()
                cols = [max(t for t, m in enumerate(mask[i]) if m) - 6 for i in range(5)]
                for i in range(5):
                    self.assertEqual([c for c, v in enumerate(out[i]) if v != 0.0], [cols[i]])
                vr_testlib.assert_scores_close(self, [out[i][cols[i]] for i in range(5)], want, what="adapter")


if __name__ == "__main__":
    unittest.main()
