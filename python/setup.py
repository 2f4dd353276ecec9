"""Packaging for verl_reward (see pyproject.toml). Metadata lives here so that the
setuptools shipped with Debian 12 (66.x) and older pip front ends build it alike.

The shared library is bundled when it can be found at build time: $VERL_REWARD_LIB
(a file, or a directory holding it), else verl_reward/libverl_reward_client.so
already in the tree (the build tree's copy). Without it the package still installs
and looks for the library at run time (VERL_REWARD_LIB, next to the package, system path).
"""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py

LIB = "libverl_reward_client.so"


class BuildPyWithLib(build_py):
    def run(self):
        super().run()
        src = os.environ.get("VERL_REWARD_LIB")
        if src and os.path.isdir(src):
            src = os.path.join(src, LIB)
        if src:
            if not os.path.isfile(src):
                raise SystemExit("setup.py: VERL_REWARD_LIB=%s does not name %s" % (src, LIB))
            dst = os.path.join(self.build_lib, "verl_reward", LIB)
            shutil.copyfile(src, dst)
            os.chmod(dst, 0o755)
            print("setup.py: bundled %s" % src)


setup(
    name="verl_reward",
    version="0.1.0",
    description="Client of verl-reward-server (shared memory via ctypes, or HTTP) and verl adapter",
    python_requires=">=3.8",
    packages=["verl_reward"],
    package_data={"verl_reward": [LIB]},
    cmdclass={"build_py": BuildPyWithLib},
    zip_safe=False,
)
