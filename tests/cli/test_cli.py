#!/usr/bin/env python3
"""Every binary's command line, from one table (issue 23): what a user types and what comes back.

For each binary: --version prints the shared format and exits 0; --help exits 0; an unknown flag
exits 2 and names it (never "needs a value"); a flag without its value exits 2 with "needs a
value"; each bad value exits 2 naming the flag and the value. For verl-reward-server the bad
values come with a real --model directory and must be refused before it loads: the model's
"loaded ..." log line and the "starting" line are absent. Then the accepted spellings (bfloat16,
float32, cuda:0) and the hints of load failures (an unsupported architecture, a config.json that
disagrees with the weights, missing weights).

Env: VR_BIN_DIR (the binaries), VR_FIXTURES (tests/fixtures), VR_CUDA (ON when the CUDA backend
is built).
"""
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

BIN = os.environ.get("VR_BIN_DIR", "build/bin")
FIXTURES = os.environ.get("VR_FIXTURES", "tests/fixtures")
CUDA = os.environ.get("VR_CUDA", "OFF").upper() in ("ON", "1", "TRUE")
MODEL = os.path.join(FIXTURES, "models", "llama_gqa")

VERSION_RE = re.compile(r"^(?P<prog>[a-z-]+) \d+\.\d+\.\d+ \(commit [0-9A-Za-z._-]+, [A-Za-z]+, "
                        r"(cpu only|CUDA \d+\.\d+( / cuBLAS \d+\.\d+)?)\)\nbuilt with .+\n$")

# binary -> (a flag that takes a value, [(args, substrings the error must hold)])
BAD_VALUES = {
    "verl-reward-server": ("--port", [
        (["--model", MODEL, "--device", "gpu"], ["--device 'gpu'", "HINT: --device cuda"]),
        (["--model", MODEL, "--device", "cuda:x"], ["--device 'cuda:x'"]),
        (["--model", MODEL, "--dtype", "int8"], ["--dtype 'int8'"]),
        (["--model", MODEL, "--dtype", "float16"], ["--dtype 'float16'", "f16"]),
        (["--model", MODEL, "--device", "cpu", "--dtype", "bfloat16"], ["--dtype bf16 with --device cpu"]),
        (["--model", MODEL, "--shm-name", "@a/b"], ["--shm-name '@a/b'", "must not contain '/'"]),
        (["--model", MODEL, "--port", "99999"], ["--port '99999'"]),
        (["--model", MODEL, "--max-batch-tokens", "0"], ["--max-batch-tokens '0'"]),
        (["--model", MODEL, "--cpu-gemm", "avx512"], ["--cpu-gemm 'avx512'"]),
        (["--model", MODEL, "--reward", "gsm9k"], ["--reward 'gsm9k'", "unknown component"]),
        (["--model", MODEL, "--cuda-graphs", "maybe"], ["cuda-graphs", "'maybe'"]),
        (["--model", MODEL, "--ring-slots", "48"], ["--ring-slots 48"]),
        (["--model", MODEL, "--truncate", "middle"], ["--truncate 'middle'"]),
        (["--model", MODEL, "--log-level", "loud"], ["--log-level 'loud'"]),
        (["--model", MODEL, "--config", "/nonexistent/vr.yaml"], ["/nonexistent/vr.yaml"]),
        (["--model", "/nonexistent/model"], ["--model '/nonexistent/model'", "HINT:"]),
        (["--model", FIXTURES], ["has no readable config.json"]),
        (["--model", "checksum", "--device", "cuda"], ["--device", "cuda"]),
        (["--reward", "model"], ["needs a model"]),
        (["--model", MODEL, "--pid-file", "/nonexistent/dir/vr.pid"], ["--pid-file '/nonexistent/dir/vr.pid'"]),
        (["--model", MODEL, "positional"], ["unexpected argument 'positional'"]),
    ]),
    "verl-reward-score": ("--device", [
        (["--model", MODEL, "--device", "gpu"], ["--device 'gpu'"]),
        (["--model", MODEL, "--dtype", "int8"], ["--dtype 'int8'"]),
        (["--model", MODEL, "--device", "cpu", "--dtype", "bf16"], ["--dtype bf16 with --device cpu"]),
        (["--model", MODEL, "--threads", "-1"], ["--threads '-1'"]),
        (["--model", MODEL, "--max-seqs", "x"], ["--max-seqs 'x'"]),
        (["--model", MODEL, "--max-batch-tokens", "0"], ["--max-batch-tokens '0'"]),
        (["--model", MODEL, "--cpu-gemm", "avx512"], ["--cpu-gemm 'avx512'"]),
        (["--model", MODEL, "--cuda-residual", "f64"], ["cuda-residual", "'f64'"]),
        (["--model", MODEL, "--log-level", "loud"], ["--log-level 'loud'"]),
        (["--model", MODEL, "--input", "/nonexistent/in.jsonl"], ["--input '/nonexistent/in.jsonl'"]),
        (["--model", "/nonexistent/model"], ["--model '/nonexistent/model'"]),
        (["--device", "cpu"], ["--model DIR is required"]),
    ]),
    "verl-reward-bench": ("--duration", [
        (["--duration", "soon"], ["--duration 'soon'"]),
        (["--concurrency", "0"], ["--concurrency '0'"]),
        (["--rate", "1,x"], ["--rate '1,x'"]),
        (["--transport", "carrier-pigeon"], ["--transport 'carrier-pigeon'"]),
        (["--lengths", "fixed:0"], ["--lengths 'fixed:0'"]),
        (["--arrival", "bursty"], ["--arrival 'bursty'"]),
        (["--shm-name", "@a/b"], ["--shm-name '@a/b'"]),
        (["--log-level", "loud"], ["--log-level 'loud'"]),
    ]),
    "verl-shm-bench": ("--samples", [
        (["--samples", "10"], ["--samples '10'"]),
        (["--seconds", "x"], ["--seconds 'x'"]),
        (["--max-clients", "17"], ["--max-clients '17'"]),
    ]),
    "verl-reward-rules-bench": ("--chars", [
        (["--chars", "many"], ["--chars 'many'"]),
        (["--seconds", "-1"], ["--seconds '-1'"]),
    ]),
    "verl-trainer": ("--gpus", [
        (["--device-map", "x.yaml", "--check", "--gpus", "lots"], ["--gpus", "lots"]),
        (["--config", "x.yaml", "--steps", "0"], ["--steps", "0"]),
    ]),
    "verl-tokenize": ("--tokenizer", [
        (["--tokenizer", "x", "--threads", "many"], ["--threads 'many'"]),
        (["--tokenizer", "x", "--repeat", "0"], ["--repeat '0'"]),
        (["--decode"], ["--tokenizer DIR is required"]),
        (["--tokenizer", "x", "positional"], ["unexpected argument 'positional'"]),
    ]),
}


def run(prog, *args, stdin=""):
    p = subprocess.run([os.path.join(BIN, prog), *args], capture_output=True, text=True, timeout=120,
                       input=stdin)
    return p.returncode, p.stdout, p.stderr


def model_loaded(err):
    """The model's load log line or the server's start-up line: nothing may get that far."""
    return re.search(r"\] loaded |verl-reward-server starting", err) is not None


class TestEveryBinary(unittest.TestCase):
    def test_version(self):
        for prog in BAD_VALUES:
            with self.subTest(prog=prog):
                rc, out, err = run(prog, "--version")
                self.assertEqual(rc, 0, err)
                m = VERSION_RE.match(out)
                self.assertIsNotNone(m, out)
                self.assertEqual(m.group("prog"), prog)
                # binaries that run models say which CUDA/cuBLAS they run with in a CUDA build
                if CUDA and prog in ("verl-reward-server", "verl-reward-score"):
                    self.assertIn("cuBLAS", out)
                if not CUDA:
                    self.assertIn("cpu only", out)

    def test_help(self):
        for prog in BAD_VALUES:
            with self.subTest(prog=prog):
                rc, out, err = run(prog, "--help")
                self.assertEqual(rc, 0, err)
                self.assertIn("usage:", out)
                self.assertIn("--version", out)

    def test_unknown_flag(self):
        for prog in BAD_VALUES:
            for arg in ("--frobnicate", "--frobnicate=1"):
                with self.subTest(prog=prog, arg=arg):
                    rc, out, err = run(prog, arg)
                    self.assertEqual(rc, 2, err)
                    self.assertIn(f"unknown option --frobnicate. HINT: {prog} --help", err)
                    self.assertNotIn("needs a value", err)

    def test_missing_value(self):
        for prog, (flag, _) in BAD_VALUES.items():
            with self.subTest(prog=prog, flag=flag):
                rc, out, err = run(prog, flag)
                self.assertEqual(rc, 2, err)
                self.assertIn(f"{flag} needs a value", err)
                self.assertNotIn("unknown option", err)

    def test_bad_values(self):
        for prog, (_, cases) in BAD_VALUES.items():
            for args, want in cases:
                with self.subTest(prog=prog, args=args):
                    rc, out, err = run(prog, *args)
                    self.assertEqual(rc, 2, err)
                    self.assertRegex(err, rf"(?m)^{prog}: ")  # the usage line (a parser may log details first)
                    for w in want:
                        self.assertIn(w, err)
                    self.assertFalse(model_loaded(err), err)


class TestServerSpecific(unittest.TestCase):
    def test_flag_value_that_is_a_flag(self):
        # "--model --port 0": --model's value is missing, not "--port"
        rc, out, err = run("verl-reward-server", "--model", "--port", "0")
        self.assertEqual(rc, 2, err)
        self.assertIn("--model needs a value", err)

    def test_config_file_keys(self):
        tmp = tempfile.mkdtemp(prefix="vr_cli_")
        self.addCleanup(shutil.rmtree, tmp)
        cfg = os.path.join(tmp, "server.yaml")
        for text, want in (("frobnicate: 1\n", "server.yaml:1: unknown key 'frobnicate'"),
                           (f"model: {MODEL}\ndtype: half\n", "server.yaml:2: --dtype 'half'"),
                           (f"model: {MODEL}\nshm_name: /x/\n", "server.yaml:2: --shm-name '/x/'")):
            with open(cfg, "w") as f:
                f.write(text)
            with self.subTest(text=text):
                rc, out, err = run("verl-reward-server", "--config", cfg)
                self.assertEqual(rc, 2, err)
                self.assertIn(want, err)
                self.assertFalse(model_loaded(err), err)


def broken_model(tc, edit=None, drop=None):
    """A copy of the llama fixture with config.json edited or a file removed."""
    tmp = tempfile.mkdtemp(prefix="vr_cli_model_")
    tc.addCleanup(shutil.rmtree, tmp)
    d = os.path.join(tmp, "m")
    shutil.copytree(MODEL, d)
    if edit:
        path = os.path.join(d, "config.json")
        with open(path) as f:
            cfg = json.load(f)
        cfg.update(edit)
        with open(path, "w") as f:
            json.dump(cfg, f)
    if drop:
        os.unlink(os.path.join(d, drop))
    return d


class TestSpellingsAndLoadHints(unittest.TestCase):
    def test_hf_spellings(self):
        # float32 / fp32 on the cpu, auto: scored (empty input = no lines, exit 0)
        for dtype in ("float32", "fp32", "f32", "auto"):
            with self.subTest(dtype=dtype):
                rc, out, err = run("verl-reward-score", "--model", MODEL, "--device", "cpu", "--dtype", dtype)
                self.assertEqual(rc, 0, err)
        # cuda:0 is a device (in a cpu-only build it is refused for the build, not the spelling)
        rc, out, err = run("verl-reward-server", "--model", MODEL, "--device", "cuda:0", "--dtype", "float32")
        self.assertEqual(rc, 2, err)
        self.assertNotIn("is not a device", err)
        self.assertIn("no CUDA backend" if not CUDA else "--dtype f32 with --device cuda:0", err)

    def load_fails(self, model, want):
        """verl-reward-server and verl-reward-score: exit status, the cause, its hint."""
        rc, out, err = run("verl-reward-server", "--model", model, "--device", "cpu", "--port", "0",
                           "--shm-name", "")
        self.assertEqual(rc, 1, err)  # start-up failure, not usage
        self.assertIn("cannot load model", err)
        for w in want:
            self.assertIn(w, err)
        self.assertNotIn("ready:", err)
        rc, out, err = run("verl-reward-score", "--model", model, "--device", "cpu")
        self.assertEqual(rc, 2, err)  # documented: a model that does not load exits 2
        for w in want:
            self.assertIn(w, err)

    def test_unsupported_architecture(self):
        d = broken_model(self, edit={"architectures": ["GPT2ForSequenceClassification"], "model_type": "gpt2"})
        self.load_fails(d, ["GPT2ForSequenceClassification", "HINT: verl-reward serves",
                            "LlamaForSequenceClassification"])

    def test_num_labels_disagrees(self):
        d = broken_model(self, edit={"num_labels": 2, "id2label": {"0": "A", "1": "B"}})
        self.load_fails(d, ["num_labels 2", "does not match config.json"])

    def test_missing_weights(self):
        d = broken_model(self, drop="model.safetensors")
        self.load_fails(d, ["neither model.safetensors", "HINT: --model takes a Hugging Face directory"])

    def test_generic_hint_is_gone(self):
        # the one-size hint is given for missing files only
        d = broken_model(self, edit={"architectures": ["GPT2ForSequenceClassification"], "model_type": "gpt2"})
        rc, out, err = run("verl-reward-server", "--model", d, "--device", "cpu", "--port", "0", "--shm-name", "")
        self.assertNotIn("--model takes a Hugging Face directory", err)


if __name__ == "__main__":
    unittest.main()
