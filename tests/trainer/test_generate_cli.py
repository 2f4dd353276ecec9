#!/usr/bin/env python3
"""verl-trainer generate as users run it (trainer/vr_generate.c), on the causal-LM fixtures:

  - greedy output of the golden prompts equals transformers' generate (tests/fixtures/lm_gen,
    token for token while the top-1/top-2 margin exceeds 1e-3, log-probs within 2e-5), one line
    per prompt in input order, blank lines skipped, finish_reason "stop" exactly when the EOS of
    generation_config.json ended the response;
  - --n 3 writes 3 lines per prompt in order; --seed reproduces, another seed differs; --input and
    --output files; --stop-token-ids ends a response at that token (included); --ignore-eos;
  - bad input lines are all named "FILE:LINE: problem", exit 1, nothing written;
  - command-line errors exit 2 (missing --model, --top-p 0, --device cuda in a build without the
    cuda rollout backend), a directory that is not a model exits 1.
Env: VR_BIN_DIR (verl-trainer), VR_SOURCE_DIR (fixtures)."""
import json
import os
import subprocess
import tempfile
import unittest

from cli_util import model_copy, peak_rss

BIN = os.path.join(os.environ.get("VR_BIN_DIR", "build/bin"), "verl-trainer")
SRC = os.environ.get("VR_SOURCE_DIR", ".")
FIX = os.path.join(SRC, "tests", "fixtures")


def gen(args, stdin="", check=True):
    p = subprocess.run([BIN, "generate"] + args, input=stdin, capture_output=True, text=True, timeout=120)
    if check and p.returncode != 0:
        raise AssertionError("exit %d: %s" % (p.returncode, p.stderr))
    return p


def lines(text):
    return [json.loads(l) for l in text.splitlines()]


class Generate(unittest.TestCase):
    def golden(self, name):
        with open(os.path.join(FIX, "lm_gen", name + ".json")) as f:
            return json.load(f)

    def prompts_text(self, g, blank=True):
        out = []
        for c in g["cases"]:
            out.append(json.dumps({"input_ids": c["prompt"], "other": "ignored"}))
            if blank:
                out.append("")
        return "\n".join(out) + "\n"

    def test_rope_and_scratch_follow_the_input(self):
        # max_position_embeddings 2^24 (the loader's limit) and the default max_model_len: the
        # cpu backend's RoPE tables and attention scratch cover the longest context seen, not 2^24
        # positions (512 MiB of tables at head_dim 8 before any prompt); the outputs are the original's
        src = os.path.join(FIX, "lm", "llama_lm")
        g = self.golden("llama_lm")
        args = ["--temperature", "0", "--max-new-tokens", str(g["max_new_tokens"]), "--kv-cache-bytes", "1048576"]
        want = gen(["--model", src] + args, self.prompts_text(g)).stdout
        with tempfile.TemporaryDirectory() as tmp:
            model_copy(src, tmp, max_position_embeddings=1 << 24)
            rc, kib, out, err = peak_rss([BIN, "generate", "--model", tmp] + args, self.prompts_text(g))
            self.assertEqual(rc, 0, err)
            print(f"generate with max_position_embeddings 2^24: peak RSS {kib / 1024:.0f} MiB")
            self.assertLess(kib, 256 << 10)
            self.assertEqual(out, want)

    def test_greedy_equals_transformers(self):
        for name in ("llama_lm", "qwen2_lm", "mistral_lm"):
            g = self.golden(name)
            p = gen(["--model", os.path.join(FIX, "lm", name), "--temperature", "0", "--max-new-tokens",
                     str(g["max_new_tokens"]), "--stats"], self.prompts_text(g))
            got = lines(p.stdout)
            self.assertEqual(len(got), len(g["cases"]))
            self.assertIn("new tokens in", p.stderr)
            compared = 0
            for c, o in zip(g["cases"], got):
                for t, (want, m) in enumerate(zip(c["output_ids"], c["margins"])):
                    if m <= 1e-3:
                        break
                    self.assertEqual(o["output_ids"][t], want, "%s prompt %s token %d" % (name, c["prompt"], t))
                    self.assertAlmostEqual(o["logprobs"][t], c["logprobs_t1"][t], delta=2e-5)
                    compared += 1
                else:
                    self.assertEqual(o["output_ids"], c["output_ids"])
                    eos = c["output_ids"][-1] in g["eos_token_id"]
                    self.assertEqual(o["finish_reason"], "stop" if eos else "length")
                self.assertEqual(len(o["logprobs"]), len(o["output_ids"]))
            self.assertGreater(compared, 150)

    def test_n_seed_files_stops(self):
        model = os.path.join(FIX, "lm", "llama_lm")
        text = '{"input_ids": [5, 6, 7]}\n{"input_ids": [9]}\n'
        base = ["--model", model, "--max-new-tokens", "12", "--temperature", "0.8", "--top-p", "0.9", "--top-k", "50",
                "--n", "3"]
        a = lines(gen(base + ["--seed", "1"], text).stdout)
        self.assertEqual(len(a), 6)
        with tempfile.TemporaryDirectory() as d:
            inp, outp = os.path.join(d, "in.jsonl"), os.path.join(d, "out.jsonl")
            with open(inp, "w") as f:
                f.write(text)
            p = gen(base + ["--seed", "1", "--input", inp, "--output", outp])
            self.assertEqual(p.stdout, "")
            with open(outp) as f:
                self.assertEqual(lines(f.read()), a)  # reproduces
        b = lines(gen(base + ["--seed", "2"], text).stdout)
        self.assertNotEqual([o["output_ids"] for o in a], [o["output_ids"] for o in b])
        # the 3 responses of a prompt are not copies of each other
        self.assertGreater(len({tuple(o["output_ids"]) for o in a[:3]}), 1)
        # the second prompt alone: its responses do not depend on the first being there
        alone = lines(gen(base + ["--seed", "1"], '{"input_ids": [5, 6, 7]}\n').stdout)
        self.assertEqual(alone, a[:3])
        # stop token ids: greedy output cut at the 4th token's first occurrence, stop token included
        g = lines(gen(["--model", model, "--max-new-tokens", "12", "--temperature", "0", "--ignore-eos"],
                      '{"input_ids": [5, 6, 7]}\n').stdout)[0]
        stop = g["output_ids"][3]
        first = g["output_ids"].index(stop)
        s = lines(gen(["--model", model, "--max-new-tokens", "12", "--temperature", "0", "--stop-token-ids",
                       "250,%d" % stop], '{"input_ids": [5, 6, 7]}\n').stdout)[0]
        self.assertEqual(s["output_ids"], g["output_ids"][:first + 1])
        self.assertEqual(s["finish_reason"], "stop")

    def test_bad_input(self):
        model = os.path.join(FIX, "lm", "qwen2_lm")
        text = ('{"input_ids": [1, 2]}\n'
                '{"input_ids": [1, 257]}\n'
                'not json\n'
                '\n'
                '{"ids": [1]}\n'
                '{"input_ids": []}\n'
                '{"input_ids": [1, "a"]}\n'
                '{"input_ids": 5}\n'
                '{"input_ids": [%s]}\n' % ", ".join(["3"] * 64))
        p = gen(["--model", model], text, check=False)
        self.assertEqual(p.returncode, 2, p.stderr)  # bad input, as logprobs / sft
        self.assertEqual(p.stdout, "")
        for ln, frag in ((2, "input_ids[1] = 257 is outside the vocabulary [0, 257)"), (3, "malformed JSON"), (5, "no \"input_ids\" list"),
                         (6, "input_ids is empty"), (7, "input_ids[1] is not an integer token id"), (8, "no \"input_ids\" list"),
                         (9, "64 input ids leave no room for a response (max_model_len 64)")):
            self.assertIn("<stdin>:%d: %s" % (ln, frag), p.stderr)
        self.assertNotIn("<stdin>:1:", p.stderr)
        self.assertIn("7 bad input lines; nothing generated", p.stderr)

    def test_command_line(self):
        model = os.path.join(FIX, "lm", "llama_lm")
        self.assertEqual(gen([], check=False).returncode, 2)
        p = gen(["--model", model, "--top-p", "0"], check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--top-p", p.stderr)
        p = gen(["--model", model, "--frobnicate"], check=False)
        self.assertEqual(p.returncode, 2)
        version = subprocess.run([BIN, "--version"], capture_output=True, text=True).stdout
        if "cpu only" in version:  # a build without CUDA refuses the device before loading anything
            p = gen(["--model", model, "--device", "cuda"], "{\"input_ids\": [1]}\n", check=False)
            self.assertEqual(p.returncode, 2)
            self.assertIn("no cuda rollout backend", p.stderr)
        p = gen(["--model", FIX], "{\"input_ids\": [1]}\n", check=False)
        self.assertEqual(p.returncode, 2, p.stderr)  # a directory that is not a model: bad input
        self.assertIn("cannot load the model", p.stderr)
        p = gen(["--model", model, "--gemm-tune", "maybe"], check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--gemm-tune 'maybe': on or off", p.stderr)
        p = gen(["--model", model, "--gemm-cache", ""], check=False)
        self.assertEqual(p.returncode, 2)
        # accepted on cpu (nothing to tune there: no file is made)
        with tempfile.TemporaryDirectory() as tmp:
            cache = os.path.join(tmp, "c", "gemm-tune.json")
            p = gen(["--model", model, "--max-new-tokens", "2", "--gemm-tune", "off", "--gemm-cache", cache],
                    "{\"input_ids\": [1]}\n")
            self.assertFalse(os.path.exists(cache))
        p = gen(["--help"])
        self.assertIn("--max-new-tokens", p.stdout)
        self.assertIn("--gemm-cache", p.stdout)

    def test_bad_flag_values(self):
        model = os.path.join(FIX, "lm", "llama_lm")
        for flag, value in (("--max-new-tokens", "0"), ("--max-new-tokens", "99999999999"), ("--max-new-tokens", "-1"),
                            ("--temperature", "-1"), ("--temperature", "nan"), ("--top-p", "2"), ("--top-p", "0"),
                            ("--n", "0"), ("--n", "1.5"), ("--top-k", "-2"), ("--seed", "x")):
            p = gen(["--model", model, flag, value], "{\"input_ids\": [1]}\n", check=False)
            self.assertEqual(p.returncode, 2, (flag, value, p.stderr))
            self.assertIn("%s '%s'" % (flag, value), p.stderr)
            self.assertEqual(p.stdout, "")

    def test_files_that_cannot_be_used(self):
        """A directory as --input is named (fopen takes one; its first read failed as 'read error');
        an --output that cannot be opened is found before generating (it was opened only after the
        whole generation, which was then lost), and a bad input leaves an old --output alone."""
        model = os.path.join(FIX, "lm", "llama_lm")
        with tempfile.TemporaryDirectory() as tmp:
            p = gen(["--model", model, "--input", tmp], check=False)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("--input: cannot open %s: Is a directory" % tmp, p.stderr)
            inp = os.path.join(tmp, "in.jsonl")
            with open(inp, "w") as f:
                f.write("{\"input_ids\": [1, 2]}\n")
            for outp, why in ((os.path.join(tmp, "no", "out.jsonl"), "No such file or directory"),
                              (tmp, "Is a directory")):
                p = gen(["--model", model, "--input", inp, "--output", outp, "--stats"], check=False)
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn("--output %s: cannot open: %s" % (outp, why), p.stderr)
                self.assertNotIn("new tokens in", p.stderr)  # --stats: nothing was generated
            old = os.path.join(tmp, "old.jsonl")
            with open(old, "w") as f:
                f.write("kept\n")
            with open(inp, "w") as f:
                f.write("{\"input_ids\": [1, 2]} trailing\n")
            p = gen(["--model", model, "--input", inp, "--output", old], check=False)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("in.jsonl:1: text after the JSON value at byte 23", p.stderr)
            with open(old) as f:
                self.assertEqual(f.read(), "kept\n")


if __name__ == "__main__":
    unittest.main()
