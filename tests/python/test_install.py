"""`pip install ./python --target DIR --no-build-isolation --no-index` works offline
and the installed package finds the client library: bundled (VERL_REWARD_LIB set
at install time) or through VERL_REWARD_LIB at run time; without either it says
where it looked. Each installed copy scores against a real checksum server."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import vr_testlib
from vr_testlib import Server, checksum_score

SCORE_SNIPPET = r"""
import sys, verl_reward, verl_reward._lib as L
lib = L.load_library()
print("LOADED", lib.vr_loaded_from)
print("FILE", verl_reward.__file__)
with verl_reward.RewardClient(sys.argv[1]) as rc:
    print("SCORES", repr(rc.score([[1, 2, 3], [4]])))
"""


TEXT_SNIPPET = r"""
import sys, verl_reward, verl_reward.text as T
lib = T.load_text_library()
print("LOADED", lib.vr_loaded_from)
tok = T.load(sys.argv[2])
print("IDS", repr(tok.encode(sys.argv[3])))
with verl_reward.RewardClient(sys.argv[1], tokenizer=tok) as rc:
    print("SCORES", repr(rc.score_text([sys.argv[3]])))
"""


def _can_build(py):
    """True when `py -m pip` exists and its setuptools can build a wheel offline."""
    code = ("import setuptools, pip\n"
            "try:\n import wheel\nexcept ImportError:\n"
            " from setuptools.command import bdist_wheel\n")
    try:
        return subprocess.run([py, "-c", code], capture_output=True, timeout=60).returncode == 0
    except OSError:
        return False


def pip_python():
    for py in (sys.executable, "/usr/bin/python3", shutil.which("python3")):
        if py and os.path.exists(py) and _can_build(py):
            return py
    return None


class InstallTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        vr_testlib.need_client_lib()
        cls.py = pip_python()
        if cls.py is None:   # a missing test dependency fails, it does not skip the suite
            raise AssertionError("no python3 with pip + setuptools + wheel. HINT: apt-get install python3-pip "
                                 "python3-setuptools python3-wheel (tools/test.sh installs them)")
        cls.tmp = tempfile.mkdtemp(prefix="vr_py_install_")
        cls.server = Server("checksum", tag="inst")

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def env(self, **kv):
        env = dict(os.environ)
        for k in ("PYTHONPATH", "VERL_REWARD_LIB"):
            env.pop(k, None)
        env.update(kv)
        return env

    def install(self, target, **env):
        # Build from a fresh copy: pip builds in place, and its build/ folder must neither land
        # in the source tree nor carry a bundled library from one install to the next.
        src = target + "-src"
        shutil.copytree(os.path.join(vr_testlib.SOURCE_DIR, "python"), src,
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.so"))
        r = subprocess.run([self.py, "-m", "pip", "install", src, "--target", target,
                            "--no-build-isolation", "--no-index", "--no-deps", "-q",
                            "--disable-pip-version-check"],
                           env=self.env(**env), capture_output=True, text=True, timeout=240)
        self.assertEqual(r.returncode, 0, "pip install failed:\n%s\n%s" % (r.stdout, r.stderr))

    def run_installed(self, target, **env):
        return subprocess.run([self.py, "-c", SCORE_SNIPPET, self.server.shm_name],
                              env=self.env(PYTHONPATH=target, **env), cwd=self.tmp,
                              capture_output=True, text=True, timeout=60)

    def check_scores(self, r, target, lib_path):
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("LOADED %s" % lib_path, r.stdout)
        self.assertIn("FILE %s" % os.path.join(target, "verl_reward", "__init__.py"), r.stdout)
        self.assertIn("SCORES %r" % ([checksum_score([1, 2, 3]), checksum_score([4])],), r.stdout)

    def test_bundled_library(self):
        target = os.path.join(self.tmp, "bundled")
        self.install(target, VERL_REWARD_LIB=vr_testlib.CLIENT_LIB)
        bundled = os.path.join(target, "verl_reward", "libverl_reward_client.so")
        self.assertTrue(os.path.isfile(bundled))
        self.check_scores(self.run_installed(target), target, bundled)

    def test_bundled_text_library(self):
        """libverl_reward_text.so (texts over shm) is bundled from beside VERL_REWARD_LIB's library
        and gives verl-tokenize's ids; scored by the checksum server (vocab 0: not checked)."""
        target = os.path.join(self.tmp, "bundled_text")
        self.install(target, VERL_REWARD_LIB=vr_testlib.CLIENT_LIB)
        bundled = os.path.join(target, "verl_reward", "libverl_reward_text.so")
        self.assertTrue(os.path.isfile(bundled))
        tok_dir = os.path.join(vr_testlib.SOURCE_DIR, "tests", "fixtures", "server_tokenizer")
        text = "the cat sat in a hat"
        ref = subprocess.run([os.path.join(vr_testlib.BIN_DIR, "verl-tokenize"), "--tokenizer", tok_dir],
                             input='{"text": "%s"}\n' % text, capture_output=True, text=True, timeout=60)
        self.assertEqual(ref.returncode, 0, ref.stderr)
        ids = json.loads(ref.stdout)["input_ids"]
        r = subprocess.run([self.py, "-c", TEXT_SNIPPET, self.server.shm_name, tok_dir, text],
                           env=self.env(PYTHONPATH=target), cwd=self.tmp, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("LOADED %s" % bundled, r.stdout)
        self.assertIn("IDS %r" % (ids,), r.stdout)
        self.assertIn("SCORES %r" % ([checksum_score(ids)],), r.stdout)

    def test_library_from_env(self):
        target = os.path.join(self.tmp, "plain")
        self.install(target)
        self.assertFalse(os.path.exists(os.path.join(target, "verl_reward", "libverl_reward_client.so")))
        self.check_scores(self.run_installed(target, VERL_REWARD_LIB=vr_testlib.CLIENT_LIB), target,
                          vr_testlib.CLIENT_LIB)
        # a directory works too
        self.check_scores(self.run_installed(target, VERL_REWARD_LIB=vr_testlib.LIB_DIR), target,
                          vr_testlib.CLIENT_LIB)
        # without it: an error naming every place tried (the system path has no copy here)
        r = self.run_installed(target)
        if r.returncode == 0:
            self.skipTest("a system-wide libverl_reward_client.so exists: %s" % r.stdout)
        self.assertIn("cannot load libverl_reward_client.so; looked in:", r.stderr)
        self.assertIn("next to the package: %s" % os.path.join(target, "verl_reward", "libverl_reward_client.so"),
                      r.stderr)
        self.assertIn("system path:", r.stderr)


if __name__ == "__main__":
    unittest.main()
