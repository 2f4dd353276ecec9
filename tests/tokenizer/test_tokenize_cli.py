"""verl-tokenize end to end: JSON lines in, JSON lines out, equal to the goldens of
tests/fixtures/tokenizers (transformers 5.17); decode; the chat-template form when built with
tokenizer/jinja; bad input exits non-zero naming the line / file, the component and the reason."""
import json
import os
import subprocess
import tempfile
import unittest

BIN = os.path.join(os.environ["VR_BIN_DIR"], "verl-tokenize")
TOKS = os.environ["VR_TOK_DIR"]  # build/tokenizers (unpacked fixtures)
FIX = os.path.join(os.environ["VR_FIXTURES"], "tokenizers")
HAVE_CHAT = os.environ.get("VR_TOK_CHAT") == "1"


def run(args, stdin):
    p = subprocess.run([BIN] + args, input=stdin.encode() if isinstance(stdin, str) else stdin,
                       capture_output=True, timeout=120)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


class TestTokenizeCli(unittest.TestCase):
    def golden(self, name):
        with open(os.path.join(FIX, name, "golden.json"), encoding="utf-8") as f:
            return json.load(f)

    def test_encode_matches_golden(self):
        for name in ("qwen3", "llama3_1", "bert_uncased", "t5_unigram"):
            cases = [c for c in self.golden(name)["cases"] if "error" not in c and "\x00" not in c["text"]]
            lines = "".join(json.dumps({"text": c["text"]}) + "\n" for c in cases)
            for special, key in ((True, "ids"), (False, "ids_ns")):
                rc, out, err = run(["--tokenizer", os.path.join(TOKS, name)] + ([] if special else ["--no-special-tokens"]),
                                   lines)
                self.assertEqual(rc, 0, err)
                got = [json.loads(l)["input_ids"] for l in out.split("\n") if l]
                self.assertEqual(len(got), len(cases))
                for c, g in zip(cases, got):
                    self.assertEqual(g, c[key], f"{name}: {c['text'][:60]!r}")

    def test_decode_matches_golden(self):
        g = self.golden("qwen3")
        cases = [c for c in g["cases"] if "error" not in c and "\x00" not in c["text"]]
        lines = "".join(json.dumps({"input_ids": c["ids"]}) + "\n" for c in cases)
        for skip, key in ((False, "dec"), (True, "dec_skip")):
            rc, out, err = run(["--tokenizer", os.path.join(TOKS, "qwen3"), "--decode"] +
                               (["--skip-special-tokens"] if skip else []), lines)
            self.assertEqual(rc, 0, err)
            got = [json.loads(l)["text"] for l in out.split("\n") if l]
            self.assertEqual(got, [c[key] for c in cases])

    def test_bad_lines(self):
        d = os.path.join(TOKS, "qwen3")
        rc, out, err = run(["--tokenizer", d], b'{"text": "ok"}\n{"text": "bad \xff byte"}\n')
        self.assertEqual(rc, 1)
        self.assertEqual(len([l for l in out.split("\n") if l]), 1)  # the good line was answered first
        self.assertIn("<stdin>:2: text: text is not valid UTF-8", err)
        rc, out, err = run(["--tokenizer", d], '{"text": "ok"}\nnot json\n')
        self.assertEqual(rc, 1)
        self.assertIn("<stdin>:2: not a JSON object", err)
        rc, out, err = run(["--tokenizer", d, "--decode"], '{"input_ids": [1, 99999999]}\n')
        self.assertEqual(rc, 1)
        self.assertIn("<stdin>:1: decode: id 99999999 (position 1) is not in the vocabulary", err)

    def test_one_object_per_line(self):
        """A line is exactly one JSON object (cJSON took the first value and dropped the rest), with
        no control byte (cJSON skipped them as blanks), and a key read given twice is refused
        (Python keeps the last, cJSON found the first)."""
        d = os.path.join(TOKS, "qwen3")
        for line, frag in ((b'{"text": "a"} {"text": "b"}', "text after the JSON value at byte 15"),
                           (b'{"text": "a"}\x00junk', "text after the JSON value at byte 14"),
                           (b'{"text": "a"}{"text": "b"}', "text after the JSON value at byte 14"),
                           (b'{"text":\x0c"a"}', "a control byte in the JSON at byte 9 (one JSON object per line)"),
                           (b'{"text": "a\tb"}', "a control byte in the JSON at byte 12"),
                           (b'{"text": "a", "text": "b"}', "\"text\" appears more than once")):
            with self.subTest(line=line):
                rc, out, err = run(["--tokenizer", d], b'{"text": "ok"}\n' + line + b"\n")
                self.assertEqual(rc, 1, err)
                self.assertEqual(len([l for l in out.split("\n") if l]), 1)  # the good line was answered
                self.assertIn("<stdin>:2: " + frag, err)
        # blanks after the object and a CRLF ending are fine
        rc, out, err = run(["--tokenizer", d], b'{"text": "ok"}  \t\r\n')
        self.assertEqual(rc, 0, err)
        with tempfile.NamedTemporaryFile("wb", suffix=".jsonl") as f:  # --bench reads its file the same way
            f.write(b'{"text": "ok"}\n\n{"text": "a"} x\n')
            f.flush()
            rc, out, err = run(["--tokenizer", d, "--bench", f.name], "")
            self.assertEqual(rc, 1, err)
            self.assertIn(f.name + ":3: text after the JSON value at byte 15", err)

    def test_tokenizer_files_read_as_hf_reads_them(self):
        """tokenizer.json (serde) and tokenizer_config.json (json.load): text after the value is
        refused naming the file and the offset; a key repeated in tokenizer.json is refused (serde's
        structs refuse it, its maps keep the last), one in tokenizer_config.json counts as its
        last (json.load)."""
        src = os.path.join(TOKS, "llama3_1")
        with open(os.path.join(src, "tokenizer.json"), "rb") as f:
            tj = f.read().rstrip()
        with open(os.path.join(src, "tokenizer_config.json"), "rb") as f:
            tc = f.read().rstrip()
        with tempfile.TemporaryDirectory() as t:
            def put(name, data):
                with open(os.path.join(t, name), "wb") as f:
                    f.write(data)
            put("tokenizer_config.json", tc)
            for bad, frag in ((tj + b"\n}", "tokenizer.json: not a tokenizer: text after the JSON value at byte offset %d" % (len(tj) + 1)),
                              (tj + b"\x00", "tokenizer.json: not a tokenizer: text after the JSON value at byte offset %d" % len(tj)),
                              (b'{"version": "1.0", ' + tj[1:], "key \"version\" appears more than once")):
                put("tokenizer.json", bad)
                rc, out, err = run(["--tokenizer", t], '{"text": "x"}\n')
                self.assertEqual(rc, 1, err)
                self.assertIn(frag, err)
            put("tokenizer.json", tj)
            put("tokenizer_config.json", tc + b" []")
            rc, out, err = run(["--tokenizer", t], '{"text": "x"}\n')
            self.assertEqual(rc, 1, err)
            self.assertIn("tokenizer_config.json: text after the JSON value at byte offset %d" % (len(tc) + 1), err)
            key = b'"clean_up_tokenization_spaces"'
            for first, last, ok in ((b'"yes"', b"false", True), (b"false", b'"yes"', False)):
                put("tokenizer_config.json", tc[:-1] + b", " + key + b": " + first + b", " + key + b": " + last + b"}")
                rc, out, err = run(["--tokenizer", t], '{"text": "x"}\n')
                self.assertEqual(rc, 0 if ok else 1, err)  # only the last value is read (it must be a boolean)
                if not ok:
                    self.assertIn("clean_up_tokenization_spaces is not a boolean", err)

    def test_bad_tokenizers(self):
        with tempfile.TemporaryDirectory() as t:
            rc, out, err = run(["--tokenizer", t], '{"text": "x"}\n')
            self.assertEqual(rc, 1)
            self.assertIn(os.path.join(t, "tokenizer.json") + ": no such file", err)
            with open(os.path.join(t, "tokenizer.json"), "w") as f:
                f.write('{"hello": "this is not a tokenizer"}')
            rc, out, err = run(["--tokenizer", t], '{"text": "x"}\n')
            self.assertEqual(rc, 1)
            self.assertIn("tokenizer.json: not a tokenizer: no \"model\" object", err)
            with open(os.path.join(t, "tokenizer.json"), "w") as f:
                json.dump({"model": {"type": "WordPiece", "unk_token": "u", "vocab": {"u": 0}},
                           "pre_tokenizer": {"type": "UnicodeScripts"}}, f)
            rc, out, err = run(["--tokenizer", t], '{"text": "x"}\n')
            self.assertEqual(rc, 1)
            self.assertIn("tokenizer.json: pre_tokenizer UnicodeScripts is not supported", err)

    def test_usage(self):
        rc, out, err = run([], "")
        self.assertEqual(rc, 2)
        self.assertIn("--tokenizer DIR is required", err)

    @unittest.skipUnless(HAVE_CHAT, "built without tokenizer/jinja (the messages form is then an error, tested below)")
    def test_messages(self):
        msg = {"messages": [{"role": "user", "content": "Hi!"}], "add_generation_prompt": True}
        rc, out, err = run(["--tokenizer", os.path.join(TOKS, "qwen3")], json.dumps(msg) + "\n")
        self.assertEqual(rc, 0, err)
        o = json.loads(out)
        self.assertEqual(o["text"], "<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n")
        rc, out2, err = run(["--tokenizer", os.path.join(TOKS, "qwen3"), "--no-special-tokens"],
                            json.dumps({"text": o["text"]}) + "\n")
        self.assertEqual(json.loads(out2)["input_ids"], o["input_ids"])
        rc, out, err = run(["--tokenizer", os.path.join(TOKS, "gemma")], json.dumps(msg) + "\n")
        self.assertEqual(rc, 1)
        self.assertIn("has no chat_template", err)

    @unittest.skipIf(HAVE_CHAT, "built with tokenizer/jinja")
    def test_messages_without_engine(self):
        msg = {"messages": [{"role": "user", "content": "Hi!"}], "add_generation_prompt": True}
        rc, out, err = run(["--tokenizer", os.path.join(TOKS, "qwen3")], json.dumps(msg) + "\n")
        self.assertEqual(rc, 1)
        self.assertIn("no chat-template engine", err)


if __name__ == "__main__":
    unittest.main()
