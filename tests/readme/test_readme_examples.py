#!/usr/bin/env python3
"""README.md's example blocks against what their commands print now (tools/readme_examples.py).

The real README must pass --check; a copy whose score was changed must fail it (and the
diff must name the line), a copy whose timings differ must pass (they are compared by shape).
Env: VR_BUILD_DIR (the build whose binaries run; default build/)."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(SRC, "tools", "readme_examples.py")
BUILD = os.environ.get("VR_BUILD_DIR", os.path.join(SRC, "build"))


def check(readme):
    return subprocess.run([sys.executable, SCRIPT, "--check", "--build", BUILD, "--readme", readme],
                          capture_output=True, text=True, timeout=500)


class ReadmeExamplesTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="vr_readme_")
        self.addCleanup(shutil.rmtree, self.tmp)
        with open(os.path.join(SRC, "README.md")) as f:
            self.text = f.read()

    def copy(self, text):
        p = os.path.join(self.tmp, "README.md")
        with open(p, "w") as f:
            f.write(text)
        return p

    def test_readme_is_current(self):
        r = check(os.path.join(SRC, "README.md"))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("4 blocks", r.stdout)

    def test_drifted_score_fails_changed_timing_passes(self):
        m = re.search(r'\{"score": (-?[0-9.]+)\}', self.text)
        self.assertIsNotNone(m, "README shows no verl-reward-score output")
        drifted = self.text.replace(m.group(0), '{"score": %s1}' % m.group(1), 1)
        r = check(self.copy(drifted))
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn('-{"score": %s1}' % m.group(1), r.stdout)
        # the timings of the HTTP answer and of the bench table are the run's own
        t = re.sub(r'"queue_us":\d+', '"queue_us":123456', self.text)
        t = re.sub(r"(?m)^(shm +c1 +)\d+", r"\g<1>99999", t)
        self.assertNotEqual(t, self.text)
        r = check(self.copy(t))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
