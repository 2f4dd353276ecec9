#!/usr/bin/env python3
"""tools/check_docs.py passes on the docs as they are, and fails (exit 1, naming file, line and
what) on docs that name a flag or a config key the programs do not have."""
import os
import subprocess
import sys
import tempfile
import unittest

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("VR_BIN_DIR", os.path.join(SRC, "build", "bin"))
TOOL = os.path.join(SRC, "tools", "check_docs.py")


def check(*docs):
    p = subprocess.run([sys.executable, TOOL, "--bin", BIN, "--docs", *docs], capture_output=True, text=True,
                       timeout=100)
    return p.returncode, p.stdout + p.stderr


class CheckDocs(unittest.TestCase):
    def test_docs_are_true(self):
        rc, out = check("README.md", "docs/operations.md", "docs/protocol.md", "docs/training.md",
                        "docs/benchmarks.md")
        self.assertEqual(rc, 0, out)

    def test_wrong_names_fail(self):
        bad = """# a doc

```sh
build/bin/verl-reward-server --model DIR --no-such-flag 1
build/bin/verl-trainer sft --model DIR --port 8
```

Prose may say `verl-reward-score --maxi-batch 4` or just `--frobnicate-docs`.

### Flags

| flag | default | meaning |
|---|---|---|
| `--lanes N` | 32 | a real one |
| `--removed-flag N` | 1 | a flag the server no longer has |

```yaml
trainer:
  total_training_steps: 2
  reward_timeout: 5
```

Set `actor_rollout_ref.rollout.top_kk` for fewer tokens.

| key | default |
|---|---|
| `...rollout.nn` | 1 |
"""
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "bad.md")
            with open(path, "w") as f:
                f.write(bad)
            rc, out = check(path)
        self.assertEqual(rc, 1, out)
        for what in ("bad.md:4: verl-reward-server has no flag --no-such-flag",
                     "bad.md:5: verl-trainer sft has no flag --port",
                     "bad.md:8: verl-reward-score has no flag --maxi-batch",
                     "bad.md:8: no program of ours has a flag --frobnicate-docs",
                     "bad.md:15: verl-reward-server has no flag --removed-flag",
                     "unknown key 'reward_timeout' in trainer. HINT: did you mean 'reward_timeout_s'?",
                     "bad.md:23: actor_rollout_ref.rollout.top_kk: verl-trainer says unknown key 'top_kk'",
                     "bad.md:27: no trainer config key ends in rollout.nn"):
            self.assertIn(what, out)
        self.assertNotIn("--lanes", out)


if __name__ == "__main__":
    unittest.main()
