#!/usr/bin/env python3
"""The framework request shapes on the real server (issue 17): vLLM POST /classify, SGLang
POST /v1/classify and /v1/embeddings, OpenRLHF POST /get_reward, TEI POST /predict and
GET /info, GET /v1/models. Requests are the bodies the frameworks send (see
tests/server/test_http_compat.c for the source files and commits they follow); each answer is
checked against POST /v1/score on the same server (same batcher, same scores) and against the
checksum model's Python twin.

    python3 test_compat.py -v TestCompat
"""
import json
import math
import os
import sys
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_server import Server, f32, metric, parse_prometheus, text_model, tokenize  # noqa: E402
from vr_testlib import checksum_score  # noqa: E402


def sigmoid32(x):
    return f32(1.0 / (1.0 + math.exp(-x)))


class TestCompat(unittest.TestCase):
    IDS = [[5, 6, 7], [8, 9], [10]]

    def post(self, s, path, body):
        st, data, ctype = s.request("POST", path, body if isinstance(body, (bytes, str)) else json.dumps(body))
        self.assertEqual(ctype, "application/json", (path, data))
        return st, json.loads(data)

    def assert_error(self, s, path, body, status, code, needle):
        st, out = self.post(s, path, body)
        self.assertEqual(st, status, out)
        self.assertEqual(out["error"]["code"], code, out)
        self.assertIn(needle, out["error"]["message"])
        return out

    def test_classify_and_embeddings(self):
        s = Server(self, "--model", "checksum").wait_ready()
        raw = [checksum_score(q) for q in self.IDS]
        st, ref = s.score({"input_ids": self.IDS})
        self.assertEqual(st, 200)
        self.assertEqual([f32(x) for x in ref["scores"]], raw)
        for path in ("/classify", "/v1/classify"):
            # vLLM's default (use_activation unset): sigmoid of the one logit
            st, out = self.post(s, path, {"model": "my-rm", "input": self.IDS})
            self.assertEqual(st, 200, out)
            self.assertEqual(set(out), {"id", "object", "created", "model", "data", "usage"})
            self.assertRegex(out["id"], r"^classify-[0-9a-f]{32}$")
            self.assertEqual(out["object"], "list")
            self.assertIsInstance(out["created"], int)
            self.assertEqual(out["model"], "my-rm")
            self.assertEqual([d["index"] for d in out["data"]], [0, 1, 2])
            self.assertEqual({d["label"] for d in out["data"]}, {"LABEL_0"})
            self.assertEqual({d["num_classes"] for d in out["data"]}, {1})
            self.assertEqual([f32(d["probs"][0]) for d in out["data"]], [sigmoid32(x) for x in raw])
            self.assertEqual(out["usage"], {"prompt_tokens": 6, "total_tokens": 6, "completion_tokens": 0,
                                            "prompt_tokens_details": None})
            # verl >= 0.7.1 sends use_activation: false, verl 0.7.0 activation: false; it reads
            # data[-1]["probs"][-1]: the raw score, equal to /v1/score's
            for flag in ("use_activation", "activation"):
                st, out = self.post(s, path, {"model": "/models/rm", "input": self.IDS[0], flag: False})
                self.assertEqual(st, 200, out)
                self.assertEqual(out["data"][-1]["probs"][-1], ref["scores"][0])
                self.assertEqual(out["usage"]["prompt_tokens"], 3)
        # SGLang /v1/embeddings: verl reads data[-1]["embedding"][-1], the raw score
        st, out = self.post(s, "/v1/embeddings", {"model": "/models/rm", "input": self.IDS})
        self.assertEqual(st, 200, out)
        self.assertEqual(set(out), {"data", "model", "object", "usage"})
        self.assertEqual([d["embedding"][-1] for d in out["data"]], ref["scores"])
        self.assertEqual([(d["index"], d["object"]) for d in out["data"]], [(0, "embedding"), (1, "embedding"),
                                                                          (2, "embedding")])
        # without "model" the server's --model is echoed
        st, out = self.post(s, "/v1/embeddings", {"input": [1]})
        self.assertEqual(out["model"], "checksum")
        # GET /v1/models and /info
        st, data, _ = s.request("GET", "/v1/models")
        self.assertEqual(st, 200)
        m = json.loads(data)
        self.assertEqual(m["object"], "list")
        self.assertEqual([(c["id"], c["object"]) for c in m["data"]], [("checksum", "model")])
        st, data, _ = s.request("GET", "/info")
        self.assertEqual(st, 200)
        info = json.loads(data)
        self.assertEqual(info["model_id"], "checksum")
        self.assertEqual(info["model_type"], {"classifier": {"id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}}})
        self.assertEqual(info["max_client_batch_size"], 1024)
        # every answer above went through the batcher and the HTTP counters
        m = parse_prometheus(s.metrics())
        self.assertEqual(metric(m, "verl_reward_requests_total", transport="http", status="ok"), 1 + 2 * 3 + 2)
        s.stop()

    def test_errors(self):
        s = Server(self, "--model", "checksum", "--max-seqs-per-request", "4").wait_ready()
        # what verl sends today (text): a 400 (verl does not retry 4xx) naming the field
        self.assert_error(s, "/classify", {"model": "/models/rm", "input": "<s>hi", "use_activation": False},
                          400, "VR_ERR_UNSUPPORTED", "\"input\": text input needs the reward model's tokenizer")
        self.assert_error(s, "/v1/embeddings", {"model": "/models/rm", "input": ["a", "b"]}, 400,
                          "VR_ERR_UNSUPPORTED", "\"input\"")
        self.assert_error(s, "/predict", {"inputs": "What is Deep Learning?"}, 400, "VR_ERR_UNSUPPORTED", "\"inputs\"")
        self.assert_error(s, "/predict", {"inputs": ["q", "a"]}, 400, "VR_ERR_UNSUPPORTED", "text pairs")
        self.assert_error(s, "/get_reward", {"query": ["a"], "prompts": [""], "labels": [None]}, 400,
                          "VR_ERR_UNSUPPORTED", "\"query\"")
        out = self.assert_error(s, "/classify", {"input": [[1], [2, "x"]]}, 400, "VR_ERR_MALFORMED",
                                "input[1][1] is not an integer")
        self.assertEqual(out["error"]["sequence"], 1)
        self.assert_error(s, "/classify", {"input": [[1]] * 5}, 413, "VR_ERR_TOO_LARGE", "5 sequences")
        self.assert_error(s, "/classify", {"input": [[1], []]}, 400, "VR_ERR_EMPTY_SEQ", "sequence 1 is empty")
        self.assert_error(s, "/classify", b"{\"input\": [1]", 400, "VR_ERR_PARSE", "malformed JSON")
        # one JSON value per body: text, a NUL or a second object after it is a 400, not dropped
        for body, at in ((b'{"input": [1]} x', 15), (b'{"input": [1]}\x00', 14), (b'{"input": [1]}{"input": [2]}', 14)):
            self.assert_error(s, "/classify", body, 400, "VR_ERR_PARSE", "trailing data at byte %d" % at)
        self.assert_error(s, "/classify", {"input": [1], "use_activation": "no"}, 400, "VR_ERR_MALFORMED",
                          "\"use_activation\" must be true or false")
        for path in ("/classify", "/v1/classify", "/v1/embeddings", "/get_reward", "/predict"):
            st, data, _ = s.request("GET", path)
            self.assertEqual(st, 405, (path, data))
        st, data, _ = s.request("POST", "/v1/models", "{}")
        self.assertEqual(st, 405, data)
        st, data, _ = s.request("GET", "/v2/classify")
        self.assertEqual(st, 404, data)
        # the server still answers (and counted the refusals as HTTP errors)
        st, out = self.post(s, "/classify", {"input": [1]})
        self.assertEqual(st, 200, out)
        s.stop()

    def test_get_reward(self):
        # OpenRLHF's body, labels -> ground_truth, query minus prompt -> solution_str (rules-only server)
        s = Server(self, "--reward", "gsm8k").wait_ready()
        body = {"query": ["Q: 36+36? A: so the answer is #### 72", "Q: 2+2? A: #### 5", "no answer"],
                "prompts": ["Q: 36+36? A:", "Q: 2+2? A:", "x"], "labels": ["72", 4, None]}
        st, out = self.post(s, "/get_reward", body)
        self.assertEqual(st, 200, out)
        self.assertEqual(out, {"rewards": [1.0, 0.0, 0.0], "scores": [1.0, 0.0, 0.0],
                               "extra_logs": {"gsm8k": [1.0, 0.0, 0.0]}})
        s.stop()
        # a model server: the queries' token ids in the "input_ids" extension, same as /v1/score
        s = Server(self, "--model", "checksum", "--reward", "model:0.7,gsm8k:0.3").wait_ready()
        st, out = self.post(s, "/get_reward", dict(body, input_ids=self.IDS))
        self.assertEqual(st, 200, out)
        extras = [{"solution_str": " so the answer is #### 72", "ground_truth": "72"},
                  {"solution_str": " #### 5", "ground_truth": "4"}, {"solution_str": "no answer"}]
        st, ref = s.score({"input_ids": self.IDS, "extras": extras})
        self.assertEqual(out["rewards"], ref["scores"])
        self.assertEqual(out["scores"], ref["scores"])
        self.assertEqual(out["extra_logs"], ref["components"])
        s.stop()

    def test_concurrent_classify_joins_batches(self):
        """64 concurrent /classify and /v1/score requests on one batcher: every answer right."""
        s = Server(self, "--model", "checksum", "--max-wait-us", "2000").wait_ready()
        errors = []

        def worker(k):
            ids = [[k, k + 1, k + 2]]
            try:
                if k % 2:
                    st, out = self.post(s, "/classify", {"input": ids, "use_activation": False})
                    got = out["data"][0]["probs"][0]
                else:
                    st, out = s.score({"input_ids": ids})
                    got = out["scores"][0]
                if st != 200 or f32(got) != checksum_score(ids[0]):
                    errors.append((k, st, out))
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append((k, repr(e)))

        ts = [threading.Thread(target=worker, args=(k,)) for k in range(64)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        self.assertEqual(errors, [])
        m = parse_prometheus(s.metrics())
        self.assertEqual(metric(m, "verl_reward_requests_total", transport="http", status="ok"), 64)
        s.stop()


class TestCompatText(unittest.TestCase):
    """Text on the framework routes, on a model directory with a tokenizer: encoded by the
    server as POST /v1/score {"text"} encodes it (vLLM: special tokens unless
    "add_special_tokens": false; OpenRLHF queries without; TEI texts with)."""
    TEXTS = ["the cat sat in a hat", "In the end, a tie."]

    def post(self, s, path, body):
        st, data, _ = s.request("POST", path, json.dumps(body))
        return st, json.loads(data)

    def test_text_routes(self):
        d = text_model(self)
        s = Server(self, "--model", d, "--reward", "model:1,gsm8k:0.5").wait_ready()
        ref = tokenize(d, [{"text": t} for t in self.TEXTS])
        ids = [r["input_ids"] for r in ref]
        self.assertEqual(ids[0][0], 1, "BOS first with special tokens")
        st, want = s.score({"input_ids": ids})
        st2, want_nobos = s.score({"input_ids": [x[1:] for x in ids]})
        self.assertEqual((st, st2), (200, 200))
        # verl's vLLM payload (text, use_activation false) and its SGLang one: the raw score
        for path in ("/classify", "/v1/classify"):
            st, out = self.post(s, path, {"model": d, "input": self.TEXTS[0], "use_activation": False})
            self.assertEqual(st, 200, out)
            self.assertEqual(out["data"][-1]["probs"][-1], want["scores"][0])
            self.assertEqual(out["usage"]["prompt_tokens"], len(ids[0]))
            st, out = self.post(s, path, {"input": self.TEXTS, "add_special_tokens": False, "use_activation": False})
            self.assertEqual([x["probs"][0] for x in out["data"]], want_nobos["scores"])
            self.assertEqual(out["usage"]["prompt_tokens"], sum(len(x) - 1 for x in ids))
        # vLLM's chat form of /classify: one conversation through the chat template
        conv = [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "the answer is in a hat!"}]
        for agp in (False, True):
            st, ref_c = s.score({"messages": [conv], "add_generation_prompt": agp})
            st2, out = self.post(s, "/classify", {"model": d, "messages": conv, "add_generation_prompt": agp,
                                                  "use_activation": False})
            self.assertEqual((st, st2), (200, 200), out)
            self.assertEqual(out["data"][0]["probs"][0], ref_c["scores"][0])
        st, out = self.post(s, "/v1/embeddings", {"model": d, "input": self.TEXTS[1]})
        self.assertEqual((st, out["data"][-1]["embedding"][-1]), (200, want["scores"][1]))
        # OpenRLHF: queries encoded without special tokens, labels -> ground truth
        body = {"query": [self.TEXTS[0] + " #### 7", self.TEXTS[1]], "prompts": [self.TEXTS[0], None],
                "labels": ["7", "1"]}
        st, out = self.post(s, "/get_reward", body)
        self.assertEqual(st, 200, out)
        q_ids = [r["input_ids"][1:] for r in tokenize(d, [{"text": q} for q in body["query"]])]
        st, ref_q = s.score({"input_ids": q_ids, "extras": [{"solution_str": " #### 7", "ground_truth": "7"},
                                                              {"solution_str": self.TEXTS[1], "ground_truth": "1"}]})
        self.assertEqual(out["rewards"], ref_q["scores"])
        self.assertEqual(out["extra_logs"], ref_q["components"])
        self.assertEqual(out["extra_logs"]["gsm8k"], [1.0, 0.0])
        # TEI: one text, [text], a batch; sigmoid unless raw_scores
        st, out = self.post(s, "/predict", {"inputs": self.TEXTS[0], "raw_scores": True})
        self.assertEqual((st, out), (200, [{"score": want["scores"][0], "label": "LABEL_0"}]))
        st, out = self.post(s, "/predict", {"inputs": [self.TEXTS[1]]})
        self.assertEqual(f32(out[0]["score"]), sigmoid32(f32(want["scores"][1])))
        st, out = self.post(s, "/predict", {"inputs": [[t] for t in self.TEXTS], "raw_scores": True})
        self.assertEqual(out, [[{"score": x, "label": "LABEL_0"}] for x in want["scores"]])
        st, out = self.post(s, "/predict", {"inputs": self.TEXTS})     # TEI reads [a, b] as one pair
        self.assertEqual((st, out["error"]["code"]), (400, "VR_ERR_UNSUPPORTED"))
        s.stop()

    def test_no_tokenizer_names_the_reason(self):
        d = text_model(self, with_tokenizer=False)
        s = Server(self, "--model", d).wait_ready()
        st, out = self.post(s, "/classify", {"input": "hi"})
        self.assertEqual((st, out["error"]["code"]), (400, "VR_ERR_UNSUPPORTED"))
        self.assertIn("\"input\": text input needs the reward model's tokenizer", out["error"]["message"])
        self.assertIn("no tokenizer.json", out["error"]["message"])
        s.stop()


if __name__ == "__main__":
    unittest.main()
