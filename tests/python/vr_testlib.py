"""Shared helpers of the Python suites: paths from ctest's environment, the
checksum model's reference function, the score tolerances, and a real
verl-reward-server process that is always killed (tearDown / atexit), with a
unique shm name and port."""

import atexit
import fcntl
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import urllib.request

SOURCE_DIR = os.environ.get("VR_SOURCE_DIR", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BIN_DIR = os.environ.get("VR_BIN_DIR", os.path.join(SOURCE_DIR, "build", "bin"))
LIB_DIR = os.environ.get("VR_LIB_DIR", os.path.join(SOURCE_DIR, "build", "lib"))
FIXTURES = os.environ.get("VR_FIXTURES", os.path.join(SOURCE_DIR, "tests", "fixtures"))
TESTS_BIN = os.environ.get("VR_TESTS_DIR", os.path.join(SOURCE_DIR, "build", "tests"))
SERVER = os.path.join(BIN_DIR, "verl-reward-server")
SCORE_TOOL = os.path.join(BIN_DIR, "verl-reward-score")
CLIENT_LIB = os.path.join(LIB_DIR, "libverl_reward_client.so")
FIXTURE_MODEL = os.path.join(FIXTURES, "models", "llama_gqa")

_M64 = (1 << 64) - 1

# Score tolerances, stated once for every Python suite (the C tests' twins are in
# tests/model/model_test_util.h). Only the checksum model promises exact floats.
# The cpu backend (float32) against the transformers golden scores of tests/fixtures/models
# (tools/make_fixtures.py, float32 torch), per sequence:
#     |ours - golden| <= TRANSFORMERS_REL_TOL * max(1, |golden|)
TRANSFORMERS_REL_TOL = 1e-4
# The cuda backend (bf16 compute) against the same golden scores, over a batch:
#     ||cuda - golden|| / ||golden|| <= CUDA_TRANSFORMERS_REL_TOL
CUDA_TRANSFORMERS_REL_TOL = 1e-2


def assert_scores_close(tc, got, want, tol=TRANSFORMERS_REL_TOL, what="scores"):
    """Per-sequence check |got - want| <= tol * max(1, |want|) (NaN never passes); on failure
    the message lists every sequence outside it as (index, got, want)."""
    tc.assertEqual(len(got), len(want), "%s: %d scores for %d sequences" % (what, len(got), len(want)))
    bad = [(i, g, w) for i, (g, w) in enumerate(zip(got, want)) if not abs(g - w) <= tol * max(1.0, abs(w))]
    tc.assertEqual(bad, [], "%s: %d of %d outside %g relative" % (what, len(bad), len(want), tol))


def norm_rel_err(got, want):
    """||got - want|| / ||want|| over a batch (the cuda tolerance's measure)."""
    num = sum((a - b) ** 2 for a, b in zip(got, want)) ** 0.5
    return num / ((sum(b * b for b in want) ** 0.5) or 1.0)


def checksum_score(ids):
    """Python twin of common/vr_checksum.h vr_checksum_score (exact float value)."""
    h = (0x9E3779B97F4A7C15 ^ len(ids)) & _M64
    for t in ids:
        h = ((h ^ ((t & 0xFFFFFFFF) + 1)) * 0x100000001B3) & _M64
    h ^= h >> 30
    h = (h * 0xBF58476D1CE4E5B9) & _M64
    h ^= h >> 27
    h = (h * 0x94D049BB133111EB) & _M64
    h ^= h >> 31
    return (h >> 40) / 16777216.0


# verl-reward-server's default segment (32 lanes with 4 MiB arenas, every page allocated at
# start) takes about 130 MiB of memory (a memfd). The tests' servers take 16 lanes of 1 MiB, so
# that several at once (ctest -j) stay small; a test that needs more passes its own --lanes /
# --arena-mb.
TEST_LANES = 16
TEST_SEGMENT_ARGS = ("--lanes", str(TEST_LANES), "--arena-mb", "1")


def shm_socket_candidates(name):
    """Where name's rendezvous socket is listed in /proc/net/unix (docs/protocol.md, "Where
    the name resolves"): "@verl-reward/NAME" for "@NAME", the path for a name with a '/',
    else NAME.sock in /run/verl-reward or /run/user/UID/verl-reward."""
    if name.startswith("@"):
        return ["@verl-reward/" + name[1:]]
    if "/" in name:
        return [name]
    return ["/run/verl-reward/%s.sock" % name, "/run/user/%d/verl-reward/%s.sock" % (os.geteuid(), name)]


def shm_name_exists(name):
    """True while a server listens on name's rendezvous socket (listed in /proc/net/unix);
    the segment itself has no file."""
    want = set(shm_socket_candidates(name))
    with open("/proc/net/unix") as f:
        return any(line.split()[-1] in want for line in f if len(line.split()) >= 8)


def with_test_segment(args):
    """args plus TEST_SEGMENT_ARGS' flags that args does not set itself."""
    args = list(args)
    for flag, value in zip(TEST_SEGMENT_ARGS[::2], TEST_SEGMENT_ARGS[1::2]):
        if flag not in args:
            args += [flag, value]
    return args


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_counter = [0]
_live = []


def unique_shm_name(tag):
    _counter[0] += 1
    return "vr_py_%s_%d_%d" % (tag, os.getpid(), _counter[0])


class Server:
    """A verl-reward-server child process on the CPU backend."""

    def __init__(self, model="checksum", tag="t", extra_args=(), ready_timeout=60.0, shm_name=None):
        if not os.access(SERVER, os.X_OK):
            raise AssertionError("verl-reward-server not built at %s" % SERVER)
        self.shm_name = shm_name or unique_shm_name(tag)
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log_path = os.path.join(os.environ.get("TMPDIR", "/tmp"), self.shm_name + ".log")
        self.log = open(self.log_path, "wb")
        args = [SERVER, "--model", model, "--shm-name", self.shm_name, "--port", str(self.port),
                "--device", "cpu"] + with_test_segment(extra_args)
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        _live.append(self)
        self._wait_ready(ready_timeout)

    def _wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("server exited with %s before ready:\n%s" % (self.proc.returncode, self.log_text()))
            try:
                with urllib.request.urlopen(self.url + "/ready", timeout=1.0) as r:
                    if r.status == 200 and shm_name_exists(self.shm_name):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise AssertionError("server not ready within %.0f s:\n%s" % (timeout, self.log_text()))

    def log_text(self):
        self.log.flush()
        with open(self.log_path, "rb") as f:
            return f.read()[-4000:].decode("utf-8", "replace")

    def pause(self):
        """SIGSTOP, returning once the kernel reports the process stopped."""
        self.proc.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with open("/proc/%d/stat" % self.proc.pid) as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            if state in ("T", "t"):
                return
            time.sleep(0.001)
        raise AssertionError("server did not stop on SIGSTOP")

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)

    def kill(self):
        """SIGKILL (no cleanup: the segment stays behind, as after a crash)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        if not self.log.closed:
            self.log.close()
        if self.proc.poll() is not None and not self.shm_name.startswith("@"):
            # what a killed server left behind (a clean stop removes it itself); not while
            # another server (a restart under the same name) holds the lock
            for p in shm_socket_candidates(self.shm_name):
                try:
                    fd = os.open(p + ".lock", os.O_RDWR)
                except OSError:
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    for ext in ("", ".info", ".lock"):
                        try:
                            os.unlink(p + ext)
                        except OSError:
                            pass
                except OSError:
                    pass
                finally:
                    os.close(fd)
        if self in _live:
            _live.remove(self)
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


@atexit.register
def _kill_leftovers():
    for s in list(_live):
        s.stop()


def f32(x):
    """Round a score back to the float32 the server computed (scores travel as text/doubles)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def assert_scores_identical(tc, got, want, what="scores"):
    """The cpu backend's promise (docs/protocol.md): the same float32 bits, whatever the batch,
    the threads or the transport."""
    tc.assertEqual([f32(x) for x in got], [f32(x) for x in want], what)


def score_tool(model_dir, seqs):
    """verl-reward-score --model DIR on JSONL input -> list of floats."""
    if not os.access(SCORE_TOOL, os.X_OK):
        raise AssertionError("verl-reward-score not built at %s" % SCORE_TOOL)
    inp = "".join(json.dumps({"input_ids": s}) + "\n" for s in seqs)
    r = subprocess.run([SCORE_TOOL, "--model", model_dir], input=inp.encode(), capture_output=True,
                       timeout=120)
    if r.returncode != 0:
        raise AssertionError("verl-reward-score failed (%d): %s" % (r.returncode, r.stderr.decode()[-2000:]))
    out = [json.loads(line)["score"] for line in r.stdout.decode().splitlines() if line.strip()]
    if len(out) != len(seqs):
        raise AssertionError("verl-reward-score printed %d scores for %d sequences" % (len(out), len(seqs)))
    return out


def python_env(**extra):
    env = dict(os.environ)
    env.update(extra)
    return env


def need_client_lib():
    if not os.path.exists(CLIENT_LIB):
        raise AssertionError("libverl_reward_client.so not built at %s" % CLIENT_LIB)


sys.dont_write_bytecode = True
