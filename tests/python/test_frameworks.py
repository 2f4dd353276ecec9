"""Framework drop-ins against a real verl-reward-server (checksum model + gsm8k rule):
verl's reward loop (our manager inside stand-ins of verl 0.7.0 / 0.7.1 / 0.9.0, see
verl_loop_standin.py), per-sample compute_score (sync and async), the micro-batcher
(requests counted by the server's /metrics), the OpenRLHF bridge and reward_func, the
vLLM/SGLang/TEI shapes, and the TRL reward function."""

import asyncio
import concurrent.futures
import json
import math
import os
import re
import sys
import threading
import time
import unittest
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import vr_testlib
from vr_testlib import Server, checksum_score, f32
from verl_standin import make_batch
import verl_loop_standin as standin

import verl_reward
from verl_reward import InvalidRequest, RewardClient, ScoreResult
from verl_reward import service as service_mod
from verl_reward import verl_reward_loop as vrl
from verl_reward.batcher import MicroBatcher
from verl_reward.openrlhf_bridge import Bridge
from verl_reward.service import RewardService, render_chat
from verl_reward.trl import VerlRewardFunction

PKG_DIR = os.path.dirname(verl_reward.__file__)


class CharTok:
    """A tokenizer double with the transformers methods the adapters call: one id per
    character (ord), "<s>" = 1 added in front when add_special_tokens, a chat template
    that starts with "<s>"."""
    bos_token, eos_token = "<s>", "</s>"

    def encode(self, text, add_special_tokens=True):
        if text.startswith(self.bos_token):
            text = text[len(self.bos_token):]
            return [1] + [ord(c) for c in text]
        return ([1] if add_special_tokens else []) + [ord(c) for c in text]

    def decode(self, ids, skip_special_tokens=False):
        return "".join(("" if skip_special_tokens else self.eos_token) if t == 2 else
                       ("" if skip_special_tokens else self.bos_token) if t == 1 else chr(t) for t in ids)

    def apply_chat_template(self, messages, add_generation_prompt=False, tokenize=False):
        assert tokenize is False
        text = self.bos_token + "".join("<|%s|>%s\n" % (m["role"], m["content"]) for m in messages)
        return text + ("<|assistant|>" if add_generation_prompt else "")


def gsm8k(solution, truth):
    """The server's gsm8k rule for these tests' strings: the number after '####'."""
    m = re.findall(r"#### (\-?[0-9\.\,]+)", solution)
    return 1.0 if m and m[-1].replace(",", "") == str(truth) else 0.0


def sigmoid32(x):
    """vLLM's / TEI's activation for one label, as the server computes it (double, then float32)."""
    return f32(1.0 / (1.0 + math.exp(-x)))


def expected(ids, solution=None, truth=None):
    return checksum_score(ids) + (0.5 * gsm8k(solution, truth) if truth is not None else 0.0)


def requests_total(server, transport="shm"):
    with urllib.request.urlopen(server.url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(r'verl_reward_requests_total\{transport="%s",status="ok"\} (\d+)' % transport, text)
    return int(m.group(1))


def settled_count(server, transport, before, expect, timeout=5.0):
    """The server's request count since `before`: the counter moves once the answer is
    out, so it may trail the client by a moment; read until it reaches `expect` (or the
    timeout: then the test sees the smaller number and fails)."""
    deadline = time.monotonic() + timeout
    while True:
        n = requests_total(server, transport) - before
        if n >= expect or time.monotonic() > deadline:
            return n
        time.sleep(0.01)


def post(url, doc, raw=None):
    body = raw if raw is not None else json.dumps(doc).encode()
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


SERVER = None


def setUpModule():
    global SERVER
    vr_testlib.need_client_lib()
    SERVER = Server("checksum", tag="fw", extra_args=["--reward", "model:1,gsm8k:0.5"])


def tearDownModule():
    SERVER.stop()


def fresh_service(**kw):
    """A service of its own (not the per-process cache) so batch counts are per test."""
    kw.setdefault("shm_name", SERVER.shm_name)
    return RewardService(**kw)


# ---------------------------------------------------------------------------
class MicroBatcherTest(unittest.TestCase):
    def test_bad_item_fails_alone_and_batches_respect_max(self):
        calls = []

        def score_fn(items, extras):
            calls.append(list(items))
            for i, it in enumerate(items):
                if it == "bad":
                    raise InvalidRequest(-22, "bad one", i)
            return ScoreResult([float(len(it)) for it in items], {"c": [1.0] * len(items)}, 0, 0)

        b = MicroBatcher(score_fn, max_batch=3, linger_s=0.2, max_inflight=1)
        futs = [b.submit(x) for x in ["a", "bb", "bad", "cccc", "ddddd"]]
        self.assertEqual(futs[0].result(5), (1.0, {"c": 1.0}))
        self.assertEqual(futs[1].result(5)[0], 2.0)
        with self.assertRaises(InvalidRequest):
            futs[2].result(5)
        self.assertEqual([f.result(5)[0] for f in futs[3:]], [4.0, 5.0])
        self.assertTrue(all(len(c) <= 3 for c in calls), calls)
        self.assertEqual(calls[0], ["a", "bb", "bad"])      # a full batch leaves at once
        self.assertEqual(calls[1], ["a", "bb"])             # resent without the bad one
        b.close()
        with self.assertRaises(verl_reward.VerlRewardError):
            b.submit("x")

    def test_cancelled_coroutine_does_not_spoil_its_batch(self):
        b = MicroBatcher(lambda items, ex: ScoreResult([float(x) for x in items], {}, 0, 0), max_batch=10,
                         linger_s=0.05)

        async def main():
            tasks = [asyncio.create_task(b.score_async(i)) for i in range(4)]
            await asyncio.sleep(0.001)
            tasks[1].cancel()
            return await asyncio.gather(*tasks, return_exceptions=True)

        out = asyncio.run(main())
        self.assertIsInstance(out[1], asyncio.CancelledError)
        self.assertEqual([out[i][0] for i in (0, 2, 3)], [0.0, 2.0, 3.0])
        self.assertEqual(b.items_sent, 3)
        b.close()

    def test_linger_sends_a_lone_item(self):
        b = MicroBatcher(lambda items, ex: ScoreResult([7.0] * len(items), {}, 0, 0), max_batch=100,
                         linger_s=0.01)
        self.assertEqual(b.submit("x").result(5), (7.0, {}))
        self.assertEqual(b.batches_sent, 1)
        b.close()

    def test_settings_checked(self):
        for kw in ({"max_batch": 0}, {"linger_s": -1}, {"max_inflight": 0}):
            with self.assertRaises(ValueError):
                MicroBatcher(lambda i, e: None, **kw)


# ---------------------------------------------------------------------------
def _loop_config(version, reward_kwargs, source="register"):
    if tuple(int(x) for x in version.split(".")[:3] if x.isdigit()) >= (0, 7, 1):
        rm = {"source": source, "name": "verl_reward", "module": {"path": None, "name": "custom_reward_manager"}}
        if source == "importlib":
            rm = {"source": "importlib", "name": "VerlRewardLoopManager",
                  "module": {"path": "pkg://verl_reward.verl_reward_loop", "name": "custom_reward_manager"}}
        return standin.Config.of({"reward": {"reward_manager": rm, "reward_kwargs": reward_kwargs,
                                             "custom_reward_function": {
                                                 "path": os.path.join(PKG_DIR, "verl_custom_reward.py"),
                                                 "name": "compute_score"}}})
    rmc = {"reward_manager": "verl_reward", "reward_loop_source": source, "reward_kwargs": reward_kwargs}
    if source == "importlib":
        rmc.update(reward_manager="naive", reward_loop_module_path="pkg://verl_reward.verl_reward_loop",
                   reward_loop_class_name="VerlRewardLoopManager")
    return standin.Config.of({"reward_model": rmc, "custom_reward_function": {
        "path": os.path.join(PKG_DIR, "verl_custom_reward.py"), "name": "compute_score"}})


PROMPTS = [[11, 12, 13], [21], [31, 32, 33, 34], [41, 42]]
RESPONSES = [[51, 52], [61, 62, 63, 64, 65], [71], [81, 82, 83]]


def loop_batch(n, with_truth=True):
    prompts = [PROMPTS[i % 4] for i in range(n)]
    responses = [RESPONSES[i % 4] + [100 + i] for i in range(n)]
    ntb = {"data_source": ["openai/gsm8k"] * n, "reward_model": [{"ground_truth": str(i % 2)} for i in range(n)],
           "extra_info": [{"index": i} for i in range(n)]}
    data = make_batch(prompts, responses, 4, 6, non_tensor_batch=ntb if with_truth else {})
    return standin.loop_data(data), prompts, responses


class SolTok:
    """Policy tokenizer double for run_single's solution_str: '#### <(last id - 100) % 3>'."""
    eos_token = "</s>"

    def decode(self, ids, skip_special_tokens=True):
        return "#### %d" % ((list(ids)[-1] - 100) % 3)


class VersionSelectionTest(unittest.TestCase):
    VERSIONS = ("0.7.0", "0.7.1", "0.8.0.dev", "0.9.0")

    def test_each_version_builds_registers_and_constructs(self):
        for v in self.VERSIONS:
            with self.subTest(verl=v):
                s = standin.VerlStandIn(v).install()
                try:
                    self.assertEqual(vrl.verl_version()[:2], s.vt[:2])
                    for source in ("register", "importlib"):
                        cfg = _loop_config(v, {"shm_name": "x", "max_batch": 8})
                        cfg = _loop_config(v, {"shm_name": "x", "max_batch": 8}, source)
                        mgr = s.make_manager(cfg, SolTok())
                        self.assertIsInstance(mgr, s.base)
                        self.assertEqual(type(mgr).__name__, "VerlRewardLoopManager")
                        self.assertEqual(len(s.base_init_calls[-1]), 3 if s.vt >= (0, 7, 1) else 2)
                        self.assertTrue(callable(mgr.compute_score))       # verl's custom fn, kept
                        self.assertEqual(mgr.service.max_batch, 8)
                    # the file verl loads registered both names in this process
                    from verl_reward.verl_adapter import VerlRewardManager
                    self.assertIs(s.legacy_registry["verl_reward"], VerlRewardManager)
                    self.assertIs(s.loop_registry["verl_reward"], vrl.VerlRewardLoopManager)
                finally:
                    s.uninstall()

    def test_legacy_driver_manager_takes_the_loop_settings(self):
        """verl 0.6 / 0.7.0's driver: load_reward_manager builds the registered legacy class as
        cls(tokenizer=, num_examine=, compute_score=, reward_fn_key=, **reward_model.reward_kwargs)
        (verl/trainer/ppo/reward.py at v0.6.0, v0.7.0); the loop-only keys must not break it."""
        s = standin.VerlStandIn("0.7.0").install()
        try:
            fn = standin.load_extern_object(os.path.join(PKG_DIR, "verl_custom_reward.py"), "compute_score")
            cls = s.modules["verl.workers.reward_manager"].get_reward_manager_cls("verl_reward")
            mgr = cls(tokenizer=None, num_examine=0, compute_score=fn, reward_fn_key="data_source",
                      shm_name=SERVER.shm_name, max_batch=8, linger_ms=2, input="ids", send_extras=False)
            data = make_batch(PROMPTS, RESPONSES, 4, 5)
            rows = mgr(data)
            for i, (p, r) in enumerate(zip(PROMPTS, RESPONSES)):
                self.assertEqual(f32(rows[i][len(r) - 1]), f32(checksum_score(p + r)))
        finally:
            s.uninstall()

    def test_without_verl(self):
        for n in standin.VerlStandIn.NAMES:
            self.assertNotIn(n, sys.modules)
        self.assertIsNone(vrl.verl_version())
        with self.assertRaises(ImportError) as cm:
            vrl.VerlRewardLoopManager({}, None)
        self.assertIn("RewardManagerBase", str(cm.exception))
        spec_mod = standin.load_extern_object(os.path.join(PKG_DIR, "verl_custom_reward.py"), "REGISTERED")
        self.assertEqual(spec_mod, {"legacy": False, "reward_loop": False})

    def test_bad_input_form_is_named(self):
        s = standin.VerlStandIn("0.9.0").install()
        try:
            with self.assertRaises(InvalidRequest) as cm:
                s.make_manager(_loop_config("0.9.0", {"input": "tokens"}), SolTok())
            self.assertIn("reward_kwargs.input", str(cm.exception))
        finally:
            s.uninstall()


class RewardLoopServerTest(unittest.TestCase):
    def run_loop(self, version, reward_kwargs, n=64, tokenizer=None, transport="shm", data=None):
        s = standin.VerlStandIn(version).install()
        try:
            mgr = s.make_manager(_loop_config(version, reward_kwargs), tokenizer or SolTok())
            mgr.service = fresh_service(rm_tokenizer=service_mod.rm_tokenizer_from(reward_kwargs.get("rm_tokenizer"),
                                                                                   reward_kwargs.get("rm_tokenizer_dir")),
                                        **{k: reward_kwargs[k] for k in vrl.SERVICE_KEYS if k in reward_kwargs})
            if data is None:
                data, prompts, responses = loop_batch(n)
            before = requests_total(SERVER, transport)
            outputs = asyncio.run(standin.compute_score_batch(mgr, data))
            ours = sum(b for b, _ in mgr.service.stats().values())
            return mgr, data, outputs, settled_count(SERVER, transport, before, ours)
        finally:
            s.uninstall()

    def test_per_sample_calls_reach_the_server_as_batches(self):
        for version in ("0.7.0", "0.7.1", "0.9.0"):
            with self.subTest(verl=version):
                mgr, data, outputs, sent = self.run_loop(
                    version, {"shm_name": SERVER.shm_name, "max_batch": 16, "linger_ms": 50})
                _, prompts, responses = loop_batch(64)
                want = [f32(expected(p + r, "#### %d" % ((r[-1] - 100) % 3), str(i % 2)))
                        for i, (p, r) in enumerate(zip(prompts, responses))]
                self.assertEqual([f32(o["reward_score"]) for o in outputs], want)
                self.assertEqual(mgr.service.stats()["ids"][1], 64)
                self.assertLessEqual(sent, 6, "64 run_single calls took %d requests" % sent)
                self.assertEqual(sent, mgr.service.stats()["ids"][0])
                rows, info = standin.place_scores(data, outputs)
                self.assertEqual(sorted(info), ["gsm8k", "model", "score"])
                for i, (row, r) in enumerate(zip(rows, responses)):
                    self.assertEqual(row.index(outputs[i]["reward_score"]), len(r) - 1)
                    self.assertEqual(info["model"][i], f32(checksum_score(prompts[i] + r)))

    def test_score_component_and_extra_components(self):
        _, _, outputs, _ = self.run_loop("0.9.0", {"shm_name": SERVER.shm_name, "score_component": "gsm8k",
                                                   "extra_components": ["model"]}, n=6)
        _, _, responses = loop_batch(6)
        want = [gsm8k("#### %d" % ((r[-1] - 100) % 3), str(i % 2)) for i, r in enumerate(responses)]
        self.assertIn(1.0, want)
        self.assertIn(0.0, want)
        self.assertEqual([o["reward_score"] for o in outputs], want)
        self.assertEqual(sorted(outputs[0]["reward_extra_info"]), ["model", "score"])

    def test_http_transport(self):
        mgr, _, outputs, sent = self.run_loop("0.7.1", {"service_url": SERVER.url, "max_batch": 32,
                                                       "linger_ms": 50}, n=32, transport="http")
        _, prompts, responses = loop_batch(32)
        self.assertEqual([f32(o["reward_extra_info"]["model"]) for o in outputs],
                         [f32(checksum_score(p + r)) for p, r in zip(prompts, responses)])
        self.assertLessEqual(sent, 3)

    def test_chat_input_with_the_rm_tokenizer(self):
        tok = CharTok()
        service_mod._tokenizers["test-chartok"] = tok
        data, prompts, responses = loop_batch(4)
        data.non_tensor_batch["raw_prompt"] = [[{"role": "user", "content": "q%d" % i}] for i in range(4)]
        # the policy tokenizer decodes the response ids as characters
        _, _, outputs, _ = self.run_loop("0.9.0", {"shm_name": SERVER.shm_name, "input": "chat",
                                                   "rm_tokenizer": "test-chartok", "send_extras": False},
                                         tokenizer=tok, data=data)
        for i, r in enumerate(responses):
            conv = [{"role": "user", "content": "q%d" % i}, {"role": "assistant", "content": tok.decode(r)}]
            ids = render_chat(tok, conv)
            self.assertEqual(ids[0], 1)                       # one BOS, from the tokenizer
            self.assertEqual(ids.count(1), 1)
            self.assertEqual(f32(outputs[i]["reward_score"]), f32(checksum_score(ids)))

    def test_chat_input_with_rm_tokenizer_dir(self):
        """reward_kwargs.rm_tokenizer_dir: the project's own tokenizer (verl_reward.text, no
        transformers) renders and encodes the conversations over shm."""
        from verl_reward import text
        tok_dir = os.path.join(vr_testlib.SOURCE_DIR, "tests", "fixtures", "server_tokenizer")
        rm = text.load(tok_dir)
        data, prompts, responses = loop_batch(4)
        data.non_tensor_batch["raw_prompt"] = [[{"role": "user", "content": "q%d" % i}] for i in range(4)]
        kw = {"shm_name": SERVER.shm_name, "input": "chat", "rm_tokenizer_dir": tok_dir, "send_extras": False}
        s = standin.VerlStandIn("0.9.0").install()
        try:
            self.assertIs(s.make_manager(_loop_config("0.9.0", kw), CharTok()).service.rm_tokenizer, rm)
        finally:
            s.uninstall()
        pol = CharTok()
        _, _, outputs, _ = self.run_loop("0.9.0", kw, tokenizer=pol, data=data)
        for i, r in enumerate(responses):
            conv = [{"role": "user", "content": "q%d" % i}, {"role": "assistant", "content": pol.decode(r)}]
            ids = rm.apply_chat_template(conv)      # = verl's render (BOS text dropped, re-added)
            self.assertEqual(render_chat(rm, conv), ids)
            self.assertEqual(ids.count(1), 1)
            self.assertEqual(f32(outputs[i]["reward_score"]), f32(checksum_score(ids)))

    def test_chat_over_shm_without_tokenizer_is_refused(self):
        data, _, _ = loop_batch(2)
        data.non_tensor_batch["raw_prompt"] = [[{"role": "user", "content": "q"}]] * 2
        with self.assertRaises(InvalidRequest) as cm:
            self.run_loop("0.9.0", {"shm_name": SERVER.shm_name, "input": "chat"}, tokenizer=CharTok(), data=data)
        self.assertIn("rm_tokenizer", str(cm.exception))


# ---------------------------------------------------------------------------
class ComputeScoreTest(unittest.TestCase):
    KW = None

    def setUp(self):
        self.kw = {"shm_name": SERVER.shm_name, "max_batch": 64, "linger_ms": 30}

    def sample(self, i):
        ids = [5, 6, 7, 100 + i]
        return dict(data_source="openai/gsm8k", solution_str="#### %d" % (i % 2), ground_truth="1",
                    extra_info={"input_ids": ids, "index": i}), ids

    def test_sync_from_threads_is_batched(self):
        n = 48
        before = requests_total(SERVER)
        with concurrent.futures.ThreadPoolExecutor(n) as ex:
            futs = [ex.submit(vrl.compute_score, **self.sample(i)[0], **self.kw) for i in range(n)]
            got = [f.result() for f in futs]
        sent = settled_count(SERVER, "shm", before, 1)
        self.assertEqual([f32(g) for g in got],
                         [f32(expected(self.sample(i)[1], "#### %d" % (i % 2), "1")) for i in range(n)])
        self.assertLess(sent, n // 4, "%d calls took %d requests" % (n, sent))

    def test_async_gather(self):
        async def main():
            return await asyncio.gather(*[vrl.compute_score_async(**self.sample(i)[0], **self.kw, return_dict=True,
                                                                  reward_router_address=None)
                                          for i in range(20)])
        got = asyncio.run(main())
        for i, g in enumerate(got):
            self.assertEqual(f32(g["model"]), f32(checksum_score(self.sample(i)[1])))
            self.assertEqual(g["gsm8k"], 1.0 if i % 2 == 1 else 0.0)
            self.assertEqual(sorted(g), ["gsm8k", "model", "score"])

    def test_batch_form_by_keywords(self):
        samples = [self.sample(i)[0] for i in range(3)]
        got = vrl.compute_score(data_sources=[s["data_source"] for s in samples],
                                solution_strs=[s["solution_str"] for s in samples],
                                ground_truths=[s["ground_truth"] for s in samples],
                                extra_infos=[s["extra_info"] for s in samples], shm_name=SERVER.shm_name)
        self.assertIsInstance(got, list)
        self.assertEqual([f32(g) for g in got],
                         [f32(expected(self.sample(i)[1], "#### %d" % (i % 2), "1")) for i in range(3)])

    def test_no_ids_names_the_fix(self):
        with self.assertRaises(InvalidRequest) as cm:
            vrl.compute_score(data_source="x", solution_str="y", ground_truth="1", extra_info={},
                              shm_name=SERVER.shm_name)
        self.assertIn("input_ids", str(cm.exception))


# ---------------------------------------------------------------------------
class BridgeTest(unittest.TestCase):
    """The tokenizing bridge in front of the server's own framework routes: texts become
    token ids of the RM tokenizer, the rest is the server's answer, unchanged."""

    @classmethod
    def setUpClass(cls):
        cls.tok = CharTok()
        cls.bridge = Bridge(SERVER.url, rm_tokenizer=cls.tok, port=0, data_source="openai/gsm8k")
        cls.plain = Bridge(SERVER.url, port=0)          # no tokenizer: a pure forwarder

    @classmethod
    def tearDownClass(cls):
        cls.bridge.close()
        cls.plain.close()

    def test_openrlhf_get_reward(self):
        queries = ["<s>Q: 6*7? A: #### 42</s>", "<s>Q: 1+1? A: #### 3", "no prompt #### 5"]
        prompts = ["<s>Q: 6*7? A:", "<s>Q: 1+1? A:", "other"]
        labels = ["42", "2", "5"]
        code, doc = post(self.bridge.url + "/get_reward", {"query": queries, "prompts": prompts, "labels": labels})
        self.assertEqual(code, 200, doc)
        self.assertEqual(sorted(doc), ["extra_logs", "rewards", "scores"])
        want = [expected(self.tok.encode(q, add_special_tokens=False),
                         q[len(p):] if q.startswith(p) else q, lab) for q, p, lab in zip(queries, prompts, labels)]
        self.assertEqual([f32(x) for x in doc["rewards"]], [f32(x) for x in want])
        self.assertEqual(doc["scores"], doc["rewards"])
        self.assertEqual(doc["extra_logs"]["gsm8k"], [1.0, 0.0, 1.0])
        # the same body straight to the server (no tokenizer there): 400 naming the field
        code, doc = post(SERVER.url + "/get_reward", {"query": queries, "prompts": prompts, "labels": labels})
        self.assertEqual(code, 400, doc)
        self.assertEqual(doc["error"]["code"], "VR_ERR_UNSUPPORTED")
        self.assertIn("\"query\"", doc["error"]["message"])

    def test_errors_are_the_servers(self):
        for body, raw, code_want, name in (({"query": "not a list"}, None, 400, "VR_ERR_MALFORMED"),
                                           ({"query": ["a"], "labels": ["1", "2"]}, None, 400, "VR_ERR_MALFORMED"),
                                           (None, b"{", 400, "VR_ERR_PARSE")):
            code, doc = post(self.bridge.url + "/get_reward", body, raw=raw)
            direct = post(SERVER.url + "/get_reward", body, raw=raw)
            self.assertEqual((code, doc["error"]["code"]), (code_want, name), doc)
            self.assertEqual(direct[0], code)
        code, doc = post(self.bridge.url + "/nope", {})
        self.assertEqual(code, 404)
        code, doc = post(self.plain.url + "/classify", {"input": "hello"})
        self.assertEqual(code, 400)
        self.assertIn("\"input\": text input needs the reward model's tokenizer", doc["error"]["message"])

    def test_reward_func_file(self):
        service_mod._tokenizers["test-chartok"] = self.tok
        os.environ.update(VERL_REWARD_SHM_NAME=SERVER.shm_name, VERL_REWARD_RM_TOKENIZER="test-chartok",
                          VERL_REWARD_DATA_SOURCE="openai/gsm8k")
        try:
            fn = standin.load_extern_object(os.path.join(PKG_DIR, "openrlhf_reward_func.py"), "reward_func")
            # OpenRLHF calls it from threads, one query each
            with concurrent.futures.ThreadPoolExecutor(8) as ex:
                outs = list(ex.map(lambda i: fn(["P%d #### %d" % (i, i)], ["P%d" % i], [str(i % 2)]), range(8)))
        finally:
            for k in ("VERL_REWARD_SHM_NAME", "VERL_REWARD_RM_TOKENIZER", "VERL_REWARD_DATA_SOURCE"):
                os.environ.pop(k)
        for i, o in enumerate(outs):
            q = "P%d #### %d" % (i, i)
            self.assertEqual(len(o["rewards"]), 1)
            self.assertEqual(f32(o["rewards"][0]), f32(expected(self.tok.encode(q, False), q[len("P%d" % i):],
                                                                str(i % 2))))
        with self.assertRaises(InvalidRequest):
            fn(["a"], ["a", "b"], [None])

    def test_vllm_sglang_classify_and_embeddings(self):
        seqs = [[1, 2, 3], [4, 5]]
        with RewardClient(SERVER.shm_name) as rc:
            direct = rc.score(seqs)
            text_direct = rc.score([self.tok.encode("hello")])     # vLLM's default: special tokens added
        for path in ("/classify", "/v1/classify"):
            code, doc = post(self.bridge.url + path, {"model": "m", "input": seqs})
            self.assertEqual(code, 200, doc)
            self.assertEqual(doc["object"], "list")
            self.assertEqual(doc["model"], "m")
            self.assertEqual([f32(d["probs"][0]) for d in doc["data"]], [sigmoid32(x) for x in direct])
            self.assertEqual([(d["index"], d["num_classes"]) for d in doc["data"]], [(0, 1), (1, 1)])
            self.assertEqual(doc["usage"], {"prompt_tokens": 5, "total_tokens": 5, "completion_tokens": 0,
                                            "prompt_tokens_details": None})
            self.assertTrue(isinstance(doc["created"], int) and doc["id"])
            # verl's payload: text, use_activation false -> the raw score of the RM tokenizer's ids
            code, doc = post(self.bridge.url + path, {"model": "m", "input": "hello", "use_activation": False})
            self.assertEqual(f32(doc["data"][-1]["probs"][-1]), text_direct[0])
        code, doc = post(self.bridge.url + "/classify", {"input": ["hello"], "add_special_tokens": False,
                                                         "use_activation": False})
        with RewardClient(SERVER.shm_name) as rc:
            self.assertEqual(f32(doc["data"][0]["probs"][0]), rc.score([self.tok.encode("hello", False)])[0])
        code, doc = post(self.bridge.url + "/v1/embeddings", {"model": "m", "input": "hello"})
        self.assertEqual(code, 200, doc)
        self.assertEqual(f32(doc["data"][-1]["embedding"][-1]), text_direct[0])     # what verl reads from SGLang
        code, doc = post(self.bridge.url + "/classify", {"input": [1.5]})
        self.assertEqual(code, 400)

    def test_tei_predict_info_models(self):
        with RewardClient(SERVER.shm_name) as rc:
            want = rc.score([self.tok.encode(t) for t in ("ab", "cde")])
        code, doc = post(self.bridge.url + "/predict", {"inputs": "ab"})
        self.assertEqual(code, 200, doc)
        self.assertEqual(doc[0]["label"], "LABEL_0")
        self.assertEqual(f32(doc[0]["score"]), sigmoid32(want[0]))
        code, doc = post(self.bridge.url + "/predict", {"inputs": [["ab"], ["cde"]], "raw_scores": True})
        self.assertEqual([[{"score": f32(d[0]["score"]), "label": d[0]["label"]}] for d in doc],
                         [[{"score": w, "label": "LABEL_0"}] for w in want])
        code, doc = post(self.bridge.url + "/predict", {"inputs": ["ab", "cde"]})    # TEI: a pair
        self.assertEqual(code, 400)
        self.assertIn("text pairs", doc["error"]["message"])
        with urllib.request.urlopen(self.bridge.url + "/info") as r:
            self.assertEqual(json.loads(r.read())["model_id"], "checksum")
        with urllib.request.urlopen(self.bridge.url + "/v1/models") as r:
            self.assertEqual(json.loads(r.read())["data"][0]["id"], "checksum")


class _Recorder(BaseHTTPRequestHandler):
    """An HTTP peer that records /v1/score bodies and answers like the server."""
    bodies = []

    def log_message(self, *a):
        pass

    def do_POST(self):
        raw = self.rfile.read(int(self.headers["Content-Length"]))
        # the client sends msgpack when the msgpack package is importable, else JSON
        doc = verl_reward.msgpack.unpackb(raw) if "msgpack" in self.headers["Content-Type"] else json.loads(raw)
        _Recorder.bodies.append(doc)
        n = len(doc.get("text") or doc.get("messages") or doc.get("input_ids"))
        body = json.dumps({"scores": [0.5] * n, "queue_us": 1, "compute_us": 2, "components": {}}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class AsyncClientTest(unittest.TestCase):
    """64 concurrent coroutines on one client, every answer back and right (0 lost)."""

    def check(self, client):
        async def one(i):
            seqs = [[i, 1, 2], [i]]
            return seqs, await client.score_async(seqs)

        async def main():
            return await asyncio.gather(*[one(i) for i in range(64)])

        for seqs, res in asyncio.run(main()):
            self.assertEqual(res.scores, [f32(checksum_score(s)) for s in seqs])

    def test_shm(self):
        with RewardClient(SERVER.shm_name) as rc:
            self.check(rc)

    def test_http(self):
        with verl_reward.HttpRewardClient(SERVER.url, max_workers=8) as hc:
            self.check(hc)


class HttpKeepAliveTest(unittest.TestCase):
    def test_one_connection_per_thread_reused(self):
        with verl_reward.HttpRewardClient(SERVER.url) as hc:
            socks = set()
            for i in range(5):
                self.assertEqual(hc.score([[1, 2, i]]), [f32(checksum_score([1, 2, i]))])
                socks.add(id(hc._local.conn.sock))
            self.assertEqual(len(socks), 1, "a new connection per request")
            hc._local.conn.sock.close()          # a dead keep-alive connection is replaced once
            self.assertEqual(hc.score([[3]]), [f32(checksum_score([3]))])


class TextFormsOverHttpTest(unittest.TestCase):
    """Without an rm_tokenizer, texts and conversations go to /v1/score as {"text"} and
    {"messages"} for the server's own tokenizer (the server side is a separate change)."""

    def test_request_shapes(self):
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
        t = threading.Thread(target=httpd.serve_forever, daemon=True)
        t.start()
        try:
            svc = RewardService(service_url="http://127.0.0.1:%d" % httpd.server_address[1])
            conv = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
            self.assertEqual(svc.submit("messages", conv).result(10), (0.5, {}))
            self.assertEqual(svc.submit("text", "plain").result(10), (0.5, {}))
            fn = VerlRewardFunction(service_url="http://127.0.0.1:%d" % httpd.server_address[1], input="text")
            self.assertEqual(fn(prompts=["a"], completions=["b"], completion_ids=[[1]]), [0.5])
            self.assertEqual(_Recorder.bodies, [{"messages": [conv], "add_generation_prompt": False},
                                                {"text": ["plain"]}, {"text": ["ab"]}])
            with self.assertRaises(InvalidRequest):
                svc.submit("messages", [{"role": "user"}]).result(10)
        finally:
            httpd.shutdown()
            httpd.server_close()


# ---------------------------------------------------------------------------
class TrlTest(unittest.TestCase):
    def test_token_ids_and_ground_truth(self):
        tok = CharTok()
        fn = VerlRewardFunction(shm_name=SERVER.shm_name, tokenizer=tok)
        self.assertEqual(fn.__name__, "verl_reward")
        prompts = ["Q1 ", "Q2 "]
        completions = ["#### 4", "#### 5"]
        cids = [[ord(c) for c in s] for s in completions]
        got = fn(prompts=prompts, completions=completions, completion_ids=cids, ground_truth=["4", "6"],
                 trainer_state=None, log_extra=None, log_metric=None)
        self.assertIsInstance(got, list)
        want = [expected(tok.encode(p, add_special_tokens=False) + c, s, g)
                for p, c, s, g in zip(prompts, cids, completions, ["4", "6"])]
        self.assertEqual([f32(x) for x in got], [f32(x) for x in want])
        # conversational prompt: rendered with the generation prompt, as TRL renders it
        conv = [{"role": "user", "content": "hi"}]
        got = fn(prompts=[conv], completions=[[{"role": "assistant", "content": "x"}]], completion_ids=[[120]])
        ids = tok.encode(tok.apply_chat_template(conv, add_generation_prompt=True), False) + [120]
        self.assertEqual(f32(got[0]), f32(checksum_score(ids)))

    def test_text_with_rm_tokenizer(self):
        tok = CharTok()
        fn = VerlRewardFunction(shm_name=SERVER.shm_name, input="text", rm_tokenizer=tok, name="rm")
        self.assertEqual(fn.__name__, "rm")
        got = fn(prompts=["ab"], completions=["cd"], completion_ids=[[0]])
        self.assertEqual(f32(got[0]), f32(checksum_score(tok.encode("abcd", add_special_tokens=False))))
        conv = [{"role": "user", "content": "u"}]
        got = fn(prompts=[conv], completions=[[{"role": "assistant", "content": "a"}]])
        self.assertEqual(f32(got[0]), f32(checksum_score(render_chat(tok, conv + [
            {"role": "assistant", "content": "a"}]))))

    def test_misuse(self):
        with self.assertRaises(ValueError):
            VerlRewardFunction(shm_name=SERVER.shm_name, input="tokens")
        fn = VerlRewardFunction(shm_name=SERVER.shm_name)
        with self.assertRaises(InvalidRequest):
            fn(prompts=["a"], completions=["b"], completion_ids=[[1]])     # no tokenizer for prompts
        with self.assertRaises(InvalidRequest):
            fn(prompts=["a", "b"], completions=["b"], completion_ids=[[1]])


if __name__ == "__main__":
    unittest.main()
