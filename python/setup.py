"""Packaging for verl_reward (see pyproject.toml). Metadata lives here so that the
setuptools shipped with Debian 12 (66.x) and older pip front ends build it alike.

The shared library is bundled when it can be found at build time: $VERL_REWARD_LIB
(a file, or a directory holding it), else verl_reward/libverl_reward_client.so
already in the tree (the build tree's copy). Without it the package still installs
and looks for the library at run time (VERL_REWARD_LIB, next to the package, system path).
libverl_reward_text.so (verl_reward.text: texts over shared memory) is bundled the same way
from $VERL_REWARD_TEXT_LIB, else from beside the client library given in VERL_REWARD_LIB
when it is there (it is optional: without it only score_text / score_messages over shm fail).
"""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

LIB = "libverl_reward_client.so"
TEXT_LIB = "libverl_reward_text.so"


def _named(env, name, required):
    """$env as a file path (a directory: name inside it); None when unset or (not required) absent."""
    src = os.environ.get(env)
    if src and os.path.isdir(src):
        src = os.path.join(src, name)
    if src and not os.path.isfile(src):
        if required:
            raise SystemExit("setup.py: %s=%s does not name %s" % (env, src, name))
        return None
    return src or None


class BuildPyWithLib(build_py):
    def run(self):
        super().run()
        src = _named("VERL_REWARD_LIB", LIB, True)
        text = _named("VERL_REWARD_TEXT_LIB", TEXT_LIB, True)
        if text is None and src:
            beside = os.path.join(os.path.dirname(os.path.abspath(src)), TEXT_LIB)
            text = beside if os.path.isfile(beside) else None
        for s, name in ((src, LIB), (text, TEXT_LIB)):
            if s:
                dst = os.path.join(self.build_lib, "verl_reward", name)
                shutil.copyfile(s, dst)
                os.chmod(dst, 0o755)
                print("setup.py: bundled %s" % s)


setup(
    name="verl_reward",
    version="0.1.0",
    description="Client of verl-reward-server (shared memory via ctypes, or HTTP) and verl adapter",
    python_requires=">=3.8",
    packages=["verl_reward"],
    package_data={"verl_reward": [LIB, TEXT_LIB]},
    cmdclass={"build_py": BuildPyWithLib},
    zip_safe=False,
)
