#!/usr/bin/env python3
"""Text over shared memory, tokenised on the client side (include/verl_reward/text.h,
python/verl_reward/text.py): a real verl-reward-server over real shm with the llama_gqa fixture
and the tests/fixtures/server_tokenizer tokenizer (Llama-2 chat template, BOS added by the
post-processor and written by the template).

Every score must equal the server's HTTP text path ({"text"} / {"messages"}) and the ids path
with verl-tokenize's ids; every id list must equal verl-tokenize's. Errors are checked by code
and message. Run by ctest (tests/client_text/CMakeLists.txt): TestCText (the C library through
vr_test_text_client) and TestPyText (RewardClient.score_text / score_messages, RmTokenizer).
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
from test_server import TEST_BIN, Server, f32s, text_model, tokenize  # noqa: E402

TEXT_CLIENT = os.path.join(TEST_BIN, "vr_test_text_client")
TEXTS = ["the cat sat in a hat", "In the end, a tie.", "x", "ünïcödé and 数字 42\n\tend"]
CONV = [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "the answer is in a hat!"}]
CONV2 = [{"role": "system", "content": "Be nice"}, {"role": "user", "content": "What is it?"}]
ALTERNATE = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]


def big_vocab_tokenizer(tc):
    """The fixture tokenizer plus an added token with id 150: more ids than llama_gqa's 97."""
    d = tempfile.mkdtemp(prefix="vrtok_big_")
    tc.addCleanup(shutil.rmtree, d, True)
    src = os.path.join(os.environ.get("VR_FIXTURES", "tests/fixtures"), "server_tokenizer")
    shutil.copy(os.path.join(src, "tokenizer_config.json"), d)
    with open(os.path.join(src, "tokenizer.json")) as f:
        tj = json.load(f)
    tj.setdefault("added_tokens", []).append({"id": 150, "content": "<extra_150>", "single_word": False,
                                              "lstrip": False, "rstrip": False, "normalized": False,
                                              "special": True})
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tj, f)
    return d


class Fixture:
    """One server with a tokenizer-carrying model dir, and the reference scores."""

    def setUp(self):
        self.dir = text_model(self)
        self.srv = Server(self, "--model", self.dir).wait_ready()

    def http(self, body):
        """The HTTP scores ("%.9g" text) as the float32 values the server computed."""
        st, out = self.srv.score(body)
        self.assertEqual(st, 200, (body, out))
        return f32s(out["scores"])

    def refs(self, lines):
        """verl-tokenize's ids for these lines and the HTTP scores of those ids."""
        ref = tokenize(self.dir, lines)
        ids = [r["input_ids"] for r in ref]
        return ids, self.http({"input_ids": ids}), ref

    def cases(self):
        """(shm request line, the equivalent HTTP body, the verl-tokenize lines of its items)"""
        return [
            ({"text": TEXTS}, {"text": TEXTS}, [{"text": t} for t in TEXTS]),
            ({"text": TEXTS[:2], "add_special_tokens": False}, {"text": TEXTS[:2], "add_special_tokens": False},
             None),
            ({"messages": [CONV, CONV2]}, {"messages": [CONV, CONV2]}, [{"messages": c} for c in (CONV, CONV2)]),
            ({"messages": [CONV, CONV2], "add_generation_prompt": True},
             {"messages": [CONV, CONV2], "add_generation_prompt": True},
             [{"messages": c, "add_generation_prompt": True} for c in (CONV, CONV2)]),
        ]


class TestCText(Fixture, unittest.TestCase):
    def run_client(self, lines, tok_dir=None, raw=None):
        data = raw if raw is not None else "".join(json.dumps(x) + "\n" for x in lines).encode()
        p = subprocess.run([TEXT_CLIENT, self.srv.name, tok_dir or self.dir], input=data, capture_output=True,
                           timeout=120)
        out = [json.loads(x) for x in p.stdout.decode().splitlines()]
        for o in out:
            if "scores" in o:
                o["scores"] = f32s(o["scores"])
        return p.returncode, out, p.stderr.decode()

    def test_matches_http_and_ids(self):
        cases = self.cases()
        rc, out, err = self.run_client([c[0] for c in cases])
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(out), len(cases), out)
        for (line, body, tok_lines), got in zip(cases, out):
            self.assertNotIn("error", got, (line, got))
            self.assertEqual(got["scores"], self.http(body), line)
            if tok_lines is None:    # add_special_tokens false: the BOS-less ids
                ids = [r["input_ids"][1:] for r in tokenize(self.dir, [{"text": t} for t in body["text"]])]
                self.assertEqual(got["input_ids"], ids)
                continue
            ids, by_ids, _ = self.refs(tok_lines)
            self.assertEqual(got["input_ids"], ids, line)
            self.assertEqual(got["scores"], by_ids, line)
        self.assertEqual(out[0]["input_ids"][0][0], 1, "add_special_tokens: BOS first")
        self.assertEqual(out[2]["input_ids"][0].count(1), 1, "a conversation has one BOS (the template's)")
        # render = verl-tokenize's rendered text
        rc, out, err = self.run_client([{"render": CONV}, {"render": CONV2, "add_generation_prompt": True}])
        ref = tokenize(self.dir, [{"messages": CONV}, {"messages": CONV2, "add_generation_prompt": True}])
        self.assertEqual([o.get("text") for o in out], [r["text"] for r in ref], out)
        self.srv.stop()

    def test_errors(self):
        lines = [
            {"messages": ["[{\"role\": \"user\", "]},                           # not JSON
            {"messages": [json.dumps(CONV) + " []"]},                           # trailing bytes
            {"messages": [[{"content": "x"}]]},
            {"messages": [CONV, [{"role": 3, "content": "x"}]]},
            {"messages": [[]]},
            {"messages": [["hello"]]},
            {"messages": [ALTERNATE]},
            {"raw_text_hex": "6869ff"},                                          # "hi" + an invalid byte
            {"messages": ['[{"role": 3, "role": "user", "content": "x"}]']},    # a repeated key: its last counts
            {"text": ["fine"]},
        ]
        want = [
            ("VR_ERR_MALFORMED", "messages[0]: not valid JSON"),
            ("VR_ERR_MALFORMED", "messages[0]: not valid JSON (bytes after the conversation at offset"),
            ("VR_ERR_MALFORMED", "messages[0][0].role is missing"),
            ("VR_ERR_MALFORMED", "messages[1][0].role must be a string"),
            ("VR_ERR_MALFORMED", "messages[0] is an empty conversation"),
            ("VR_ERR_MALFORMED", "messages[0][0] must be an object"),
            ("VR_ERR_INVAL", "template raised: Conversation roles must alternate"),
            ("VR_ERR_INVAL", "text[0]: text is not valid UTF-8 (byte 2: 0xFF)"),
            (None, {"messages": [[{"role": "user", "content": "x"}]]}),       # scored as the HTTP path scores it
            (None, None),
        ]
        rc, out, err = self.run_client(lines)
        self.assertEqual(rc, 0, err)
        self.assertEqual(len(out), len(lines), out)
        for line, got, (code, needle) in zip(lines, out, want):
            if code is None:
                self.assertEqual(got.get("scores"), self.http(needle or {"text": ["fine"]}), (line, got))
                continue
            self.assertEqual(got.get("error"), code, (line, got))
            self.assertIn(needle, got["message"], (line, got))
            self.assertEqual(got["bad_item"], 1 if "messages[1]" in needle else 0, (line, got))
        # the same shapes give the same messages on the HTTP path (one conversation check)
        st, o = self.srv.score({"messages": [[{"content": "x"}]]})
        self.assertIn("messages[0][0].role is missing", o["error"]["message"])
        # a sequence too long for the server: the request's error from vr_client_score
        rc, out, _ = self.run_client([{"text": ["the " * 3000]}])
        self.assertEqual(out[0]["error"], "VR_ERR_SEQ_TOO_LONG", out)
        # no tokenizer in the directory
        empty = tempfile.mkdtemp(prefix="vrtok_none_")
        self.addCleanup(shutil.rmtree, empty, True)
        rc, out, _ = self.run_client([{"text": ["x"]}], tok_dir=empty)
        self.assertEqual(rc, 2)
        self.assertEqual(out[0]["error"], "VR_ERR_NOT_FOUND", out)
        self.assertIn("%s: no tokenizer.json" % empty, out[0]["message"])
        # not a tokenizer
        with open(os.path.join(empty, "tokenizer.json"), "w") as f:
            f.write("{\"model\": 5}")
        rc, out, _ = self.run_client([{"text": ["x"]}], tok_dir=empty)
        self.assertEqual(rc, 2)
        self.assertIn("tokenizer.json", out[0]["message"])
        # a tokenizer with more ids than the served model: refused before anything is sent
        big = big_vocab_tokenizer(self)
        rc, out, _ = self.run_client([{"text": ["x"]}], tok_dir=big)
        self.assertEqual(out[0]["error"], "VR_ERR_INVAL", out)
        self.assertIn("the tokenizer has 151 ids but the server's model has a vocabulary of 97", out[0]["message"])
        self.srv.stop()


class TestPyText(Fixture, unittest.TestCase):
    def test_client(self):
        from verl_reward import RewardClient, RmTokenizer, text
        tok = text.load(self.dir)
        self.assertIs(text.load(self.dir), tok)
        self.assertIsInstance(tok, RmTokenizer)
        self.assertEqual(len(tok), 89)
        self.assertEqual(tok.bos_token, "<s>")
        with RewardClient(self.srv.name, tokenizer=self.dir, connect_timeout_s=10) as rc:
            for line, body, tok_lines in self.cases():
                if "text" in line:
                    got = rc.score_text(line["text"], add_special_tokens=line.get("add_special_tokens", True))
                else:
                    got = rc.score_messages(line["messages"], add_generation_prompt=line.get("add_generation_prompt",
                                                                                             False))
                self.assertEqual(got, self.http(body), line)
                if tok_lines:
                    ids, by_ids, ref = self.refs(tok_lines)
                    self.assertEqual(got, by_ids, line)
                    if "text" in line:
                        self.assertEqual([tok.encode(t) for t in line["text"]], ids)
                    else:
                        agp = line.get("add_generation_prompt", False)
                        self.assertEqual([tok.apply_chat_template(c, add_generation_prompt=agp) for c in line["messages"]],
                                         ids)
                        self.assertEqual([tok.apply_chat_template(c, add_generation_prompt=agp, tokenize=False)
                                          for c in line["messages"]], [r["text"] for r in ref])
            # extras pair with the items; bytes are taken as UTF-8
            self.assertEqual(rc.score_text([TEXTS[0].encode(), TEXTS[1]], extras=[None, None]),
                             self.http({"text": TEXTS[:2]}))
            self.assertEqual(rc.score_text([]), [])
        # the adapters' path: rm_tokenizer_dir selects this tokenizer (no transformers)
        from verl_reward.service import RewardService, rm_tokenizer_from
        self.assertIs(rm_tokenizer_from("ignored-hf-name", self.dir), tok)
        svc = RewardService(shm_name=self.srv.name, rm_tokenizer=rm_tokenizer_from(None, self.dir),
                            add_special_tokens=True)
        self.assertEqual(svc.score_batch("text", TEXTS).scores, self.http({"text": TEXTS}))
        self.srv.stop()

    def test_errors(self):
        from verl_reward import InvalidRequest, RewardClient, RmTokenizer, VerlRewardError
        with RewardClient(self.srv.name, tokenizer=self.dir, connect_timeout_s=10) as rc:
            cases = [
                (lambda: rc.score_messages(["[{"]), "VR_ERR_MALFORMED", "messages[0]: not valid JSON"),
                (lambda: rc.score_messages([CONV, [{"content": "x"}]]), "VR_ERR_MALFORMED",
                 "messages[1][0].role is missing"),
                (lambda: rc.score_messages([ALTERNATE]), "VR_ERR_INVAL", "template raised: Conversation roles must"),
                (lambda: rc.score_text([b"hi\xff"]), "VR_ERR_INVAL", "text[0]: text is not valid UTF-8 (byte 2: 0xFF)"),
                (lambda: rc.score_text(["ok", 5]), "VR_ERR_INVAL", "text[1] must be a str or bytes"),
                (lambda: rc.score_text(["the " * 3000]), "VR_ERR_SEQ_TOO_LONG", ""),
            ]
            for fn, code, needle in cases:
                with self.assertRaises(VerlRewardError) as cm:
                    fn()
                self.assertEqual(cm.exception.name, code, str(cm.exception))
                self.assertIn(needle, str(cm.exception))
            self.assertEqual(rc.score_text(["fine"]), self.http({"text": ["fine"]}))
            for fn in (lambda: rc.score_messages([CONV, [{"content": "x"}]]), lambda: rc.score_text(["ok", b"\xff"])):
                with self.assertRaises(VerlRewardError) as cm:
                    fn()
                self.assertEqual(cm.exception.bad_seq, 1, str(cm.exception))
        with RewardClient(self.srv.name, connect_timeout_s=10) as rc:
            with self.assertRaises(InvalidRequest) as cm:
                rc.score_text(["x"])
            self.assertIn("give tokenizer=", str(cm.exception))
        empty = tempfile.mkdtemp(prefix="vrtok_none_")
        self.addCleanup(shutil.rmtree, empty, True)
        with self.assertRaises(VerlRewardError) as cm:
            RmTokenizer(empty)
        self.assertEqual(cm.exception.name, "VR_ERR_NOT_FOUND")
        self.assertIn("%s: no tokenizer.json" % empty, str(cm.exception))
        # a tokenizer without tokenizer_config.json has no chat template: texts only
        shutil.copy(os.path.join(self.dir, "tokenizer.json"), empty)
        with RewardClient(self.srv.name, tokenizer=empty, connect_timeout_s=10) as rc:
            self.assertEqual(len(rc.score_text(["x"])), 1)
            with self.assertRaises(VerlRewardError) as cm:
                rc.score_messages([CONV])
            self.assertEqual(cm.exception.name, "VR_ERR_NOT_FOUND")
            self.assertIn("%s: tokenizer_config.json has no chat template" % empty, str(cm.exception))
        with RewardClient(self.srv.name, tokenizer=big_vocab_tokenizer(self), connect_timeout_s=10) as rc:
            with self.assertRaises(InvalidRequest) as cm:
                rc.score_text(["x"])
            self.assertIn("the tokenizer has 151 ids but the server's model has a vocabulary of 97", str(cm.exception))
        self.srv.stop()


if __name__ == "__main__":
    unittest.main()
