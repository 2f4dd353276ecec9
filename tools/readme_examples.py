#!/usr/bin/env python3
"""Regenerates the example output blocks of README.md by running their commands.

    tools/readme_examples.py [--build DIR] [--readme FILE]     rewrite the blocks
    tools/readme_examples.py --check [--build DIR]             exit 1 if README would change

A block is a fenced code block between <!-- example:NAME --> and <!-- /example -->; this
script owns everything between the two markers. Each block is the README's commands with
what they print, run from the source tree against the build's binaries:

    worked   verl-reward-server on the llama_gqa fixture, curl POST /v1/score (flat and
             batch), verl-reward-score (a line per form), a short verl-reward-bench
    python   RewardClient.score and HttpRewardClient.score against the same server
    trainer  verl-trainer --check on docs/examples/device_map_8gpu.yaml
    comm     verl-trainer --comm-check on docs/examples/ppo_comm_check.yaml

The commands are shown as a user types them (the server on port 8080 and shm name
verl_reward_shm); the script runs them on a free port and a unique shm name so that it
can run beside other servers (tests, ctest -j), and substitutes nothing else.

What --check compares. Scores, ids, messages, device maps and table layout are the same
on every run (the cpu backend gives the same bits), so they are compared exactly. Numbers
that measure this run (queue_us/compute_us, the bench's rates and latencies, the comm
check's timings and bandwidths, temporary directory names) differ per run and per machine:
they are compared by shape, every number (or a '-' percentile the sample was too small for)
standing for any number; the comm check's lines come from several processes and are compared
as a set. The rewritten README shows the real output of the run that wrote it.
Exit status: 0 (written, or --check: up to date), 1 (--check: README would change; the
diff is printed), 2 (a command failed).
"""
import argparse
import difflib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FIXTURE = "tests/fixtures/models/llama_gqa"
SHOWN_PORT, SHOWN_SHM = "8080", "verl_reward_shm"

BLOCK = re.compile(r"(<!-- example:(?P<name>[a-z]+) -->\n```(?P<lang>[a-z]*)\n)(?P<body>.*?)(```\n<!-- /example -->)",
                   re.S)
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.])")


class Failed(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(args, stdin=None, env=None, merge=False, timeout=120):
    """stdout (merge: stdout and stderr interleaved as a terminal shows them); raises Failed
    on a non-zero exit."""
    p = subprocess.run(args, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge else subprocess.PIPE,
                       text=True, cwd=SRC, env=env, timeout=timeout)
    if p.returncode != 0:
        raise Failed("%s exited with %d:\n%s%s" % (" ".join(args), p.returncode, p.stdout, p.stderr or ""))
    return p.stdout


class Server:
    def __init__(self, build):
        self.port = str(free_port())
        self.shm = "vr_readme_%d" % os.getpid()
        self.log = open(os.path.join(os.environ.get("TMPDIR", "/tmp"), self.shm + ".log"), "w+")
        self.proc = subprocess.Popen([os.path.join(build, "bin", "verl-reward-server"), "--model", FIXTURE,
                                      "--device", "cpu", "--port", self.port, "--shm-name", self.shm,
                                      "--lanes", "8", "--arena-mb", "1"],
                                     cwd=SRC, stdout=self.log, stderr=subprocess.STDOUT)
        end = time.monotonic() + 60
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                break
            try:
                with urllib.request.urlopen("http://127.0.0.1:%s/ready" % self.port, timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.05)
        self.stop()
        self.log.seek(0)
        raise Failed("verl-reward-server did not get ready:\n" + self.log.read()[-3000:])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        os.unlink(self.log.name)


def shown(cmd):
    """A command line as the README shows it."""
    return "$ " + cmd + "\n"


def block_worked(build, srv):
    b = "build/bin"
    out = shown("%s/verl-reward-server --model %s --device cpu --port 8080 &" % (b, FIXTURE))
    bodies = [('{"input_ids": [[14, 91, 71], [88, 28]]}', "a batch: a list of token-id lists"),
              ('{"input_ids": [14, 91, 71]}', "one sequence: a flat list (still a list of one score)")]
    for body, what in bodies:
        out += shown("curl -s localhost:8080/v1/score -d '%s'    # %s" % (body, what))
        out += run(["curl", "-s", "localhost:%s/v1/score" % srv.port, "-d", body])
    lines = '{"input_ids": [14, 91, 71]}\n[88, 28]\n[[14, 91, 71], [88, 28]]\n'
    out += shown("printf '%s' | \\\n       %s/verl-reward-score --model %s"
                 % (lines.replace("\n", "\\n"), b, FIXTURE))
    out += run([os.path.join(build, "bin", "verl-reward-score"), "--model", FIXTURE], stdin=lines)
    bench = ["--transport", "shm,http", "--concurrency", "1,4", "--batch", "4", "--lengths", "uniform:8-48",
             "--duration", "1", "--warmup", "0.5"]
    out += shown("%s/verl-reward-bench %s    # the table on stdout, progress on stderr" % (b, " ".join(bench)))
    out += run([os.path.join(build, "bin", "verl-reward-bench"), *bench, "--shm-name", srv.shm,
                "--url", "127.0.0.1:" + srv.port], timeout=300)
    out += "$ kill %1    # SIGTERM: finishes in-flight work, frees the name verl_reward_shm, exits 0\n"
    return out


PY_SNIPPET = '''from verl_reward import RewardClient, HttpRewardClient
with RewardClient("verl_reward_shm") as rc:
    print(rc.score([[14, 91, 71], [88, 28]]))   # a batch
    print(rc.score([14, 91, 71]))               # one sequence
print(HttpRewardClient("localhost:8080").score([88, 28]))'''


def block_python(build, srv):
    code = PY_SNIPPET.replace('"verl_reward_shm"', '"%s"' % srv.shm).replace("localhost:8080",
                                                                            "localhost:" + srv.port)
    env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"), PYTHONDONTWRITEBYTECODE="1")
    out = shown("PYTHONPATH=build/python python3 -c '\n%s'" % PY_SNIPPET)
    return out + run([sys.executable, "-c", code], env=env)


def block_trainer(build, srv):
    cmd = ["--device-map", "docs/examples/device_map_8gpu.yaml", "--check", "--gpus", "8"]
    return shown("build/bin/verl-trainer " + " ".join(cmd)) + \
        run([os.path.join(build, "bin", "verl-trainer"), *cmd], merge=True)


def block_comm(build, srv):
    cmd = ["--config", "docs/examples/ppo_comm_check.yaml", "--comm-check"]
    return shown("build/bin/verl-trainer " + " ".join(cmd)) + \
        run([os.path.join(build, "bin", "verl-trainer"), *cmd], merge=True, timeout=300)


BLOCKS = {"worked": block_worked, "python": block_python, "trainer": block_trainer, "comm": block_comm}


def shape(name, text):
    """What --check compares (see the top of the file)."""
    lines = text.splitlines()
    out = []
    in_bench = False
    for line in lines:
        if line.startswith("$ "):
            in_bench = "verl-reward-bench" in line
            out.append(line)
        elif name == "comm" or in_bench:
            if line.startswith("-: too few samples"):
                continue  # printed only when some percentile is hidden: depends on the run's counts
            line = re.sub(r"/tmp/verl-trainer-\w+", "/tmp/verl-trainer-#", line)
            # the machine's own GPU story ("none (built without CUDA)", "none (CUDA driver ...)",
            # "cuda") depends on the build and the host, not on the code the README shows
            line = re.sub(r"^\[INFO\] topology \((?:none \([^)]*\)|cuda)\):", "[INFO] topology (#):", line)
            out.append(" ".join("#" if t == "-" else NUMBER.sub("#", t) for t in line.split()))
        else:
            out.append(re.sub(r'"(queue_us|compute_us)":\d+', r'"\1":#', line))
    return sorted(out) if name == "comm" else out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if README.md would change")
    ap.add_argument("--build", default=os.path.join(SRC, "build"), help="the build directory (default build/)")
    ap.add_argument("--readme", default=os.path.join(SRC, "README.md"))
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    with open(a.readme) as f:
        text = f.read()
    found = [m.group("name") for m in BLOCK.finditer(text)]
    unknown = [n for n in found if n not in BLOCKS]
    missing = [n for n in BLOCKS if n not in found]
    if unknown or missing:
        print("%s: blocks unknown to this script: %s; blocks it expects but README lacks: %s"
              % (a.readme, unknown, missing), file=sys.stderr)
        return 2
    try:
        srv = Server(build)
        try:
            new = {n: BLOCKS[n](build, srv) for n in found}
        finally:
            srv.stop()
    except (Failed, OSError, subprocess.TimeoutExpired) as e:
        print("readme_examples: %s" % e, file=sys.stderr)
        return 2
    if a.check:
        stale = []
        for m in BLOCK.finditer(text):
            n = m.group("name")
            old_s, new_s = shape(n, m.group("body")), shape(n, new[n])
            if old_s != new_s:
                stale.append(n)
                sys.stdout.writelines(difflib.unified_diff([l + "\n" for l in old_s], [l + "\n" for l in new_s],
                                                           "README.md (%s)" % n, "now (%s)" % n))
        if stale:
            print("README.md is out of date in %s. HINT: tools/readme_examples.py --build %s" % (stale, a.build))
            return 1
        print("README.md examples up to date (%d blocks: %s)" % (len(found), ", ".join(found)))
        return 0
    out = BLOCK.sub(lambda m: m.group(1) + new[m.group("name")] + m.group(5), text)
    with open(a.readme, "w") as f:
        f.write(out)
    print("README.md: %d blocks written (%s)" % (len(found), ", ".join(found)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
