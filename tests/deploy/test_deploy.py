#!/usr/bin/env python3
"""deploy/ checked without a cluster or an image build (issue 23).

TestSystemd: `systemd-analyze verify` on deploy/systemd/verl-reward-server.service (ExecStart
pointed at the built binary, since verify checks that it exists), then that ExecStart run the
way systemd runs a Type=notify unit: NOTIFY_SOCKET set, READY=1 expected, SIGTERM answered with
STOPPING=1 and exit 0 within TimeoutStopSec.
TestKubernetes: the fields of deploy/kubernetes/verl-reward.yaml that make the pod work.
TestContainerfile: deploy/Containerfile's runtime packages cover every shared library the built
binary links (dpkg -S), its build stage has every -dev package tools/deps.sh installs, non-root.
Env: VR_BIN_DIR, VR_SOURCE_DIR, VR_SYSTEMD_ANALYZE (set by tests/deploy/CMakeLists.txt).
"""
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import sys
import time
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from vr_testlib import shm_name_exists  # noqa: E402

import yaml

SRC = os.environ.get("VR_SOURCE_DIR", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BIN = os.environ.get("VR_BIN_DIR", os.path.join(SRC, "build", "bin"))
SERVER = os.path.join(BIN, "verl-reward-server")
ANALYZE = os.environ.get("VR_SYSTEMD_ANALYZE") or "systemd-analyze"
UNIT = os.path.join(SRC, "deploy", "systemd", "verl-reward-server.service")
MANIFEST = os.path.join(SRC, "deploy", "kubernetes", "verl-reward.yaml")
CONTAINERFILE = os.path.join(SRC, "deploy", "Containerfile")


def unit_settings(text):
    """{(section, key): [values]} of a unit file (comments and blank lines skipped)."""
    out, section = {}, None
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        k, v = line.split("=", 1)
        out.setdefault((section, k.strip()), []).append(v.strip())
    return out


def flag_values(args):
    """--key=value / --key value pairs of an argument list."""
    out, i = {}, 0
    while i < len(args):
        a = args[i]
        if a.startswith("--") and "=" in a:
            k, v = a[2:].split("=", 1)
        elif a.startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            k, v = a[2:], args[i + 1]
            i += 1
        else:
            k, v = a.lstrip("-"), ""
        out[k] = v
        i += 1
    return out


class TestSystemd(unittest.TestCase):
    def setUp(self):
        with open(UNIT) as f:
            self.text = f.read()
        self.s = unit_settings(self.text)
        self.tmp = tempfile.mkdtemp(prefix="vrunit_")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def test_verify(self):
        self.assertEqual(self.s[("Service", "Type")], ["notify"])
        exec_start = self.s[("Service", "ExecStart")]
        self.assertEqual(len(exec_start), 1)
        self.assertEqual(shlex.split(exec_start[0])[0], "/usr/local/bin/verl-reward-server")
        unit = os.path.join(self.tmp, "verl-reward-server.service")
        with open(unit, "w") as f:
            f.write(self.text.replace("/usr/local/bin/verl-reward-server", os.path.abspath(SERVER)))
        p = subprocess.run([ANALYZE, "verify", unit], capture_output=True, text=True, timeout=120)
        # verify only warns about unknown keys or bad values: any line about our unit fails
        ours = [l for l in (p.stdout + p.stderr).splitlines() if "verl-reward-server" in l]
        self.assertEqual((p.returncode, ours), (0, []), p.stdout + p.stderr)
        # a broken unit is caught (the check can fail)
        with open(unit, "w") as f:
            f.write(self.text.replace("Type=notify", "Type=notify\nTypo=1").replace(
                "/usr/local/bin/verl-reward-server", os.path.abspath(SERVER)))
        p = subprocess.run([ANALYZE, "verify", unit], capture_output=True, text=True, timeout=120)
        self.assertIn("Unknown key", p.stdout + p.stderr)

    def test_socket_directory(self):
        # the default socket directory of a non-root server: systemd makes /run/verl-reward for
        # the unit's User=, 0755 (trainers of the group must reach the socket); no shm flag in
        # ExecStart points elsewhere
        self.assertEqual(self.s[("Service", "RuntimeDirectory")], ["verl-reward"])
        self.assertEqual(self.s[("Service", "RuntimeDirectoryMode")], ["0755"])
        flags = flag_values(shlex.split(self.s[("Service", "ExecStart")][0])[1:])
        self.assertNotIn("shm-socket-dir", flags)

    def test_exec_start_as_type_notify(self):
        args = shlex.split(self.s[("Service", "ExecStart")][0])
        flags = flag_values(args[1:])
        self.assertIn("config", flags)
        cfg = os.path.join(self.tmp, "server.yaml")
        name = f"vrunit_{os.getpid()}"
        with open(cfg, "w") as f:  # what /etc/verl-reward/server.yaml would hold, with the test scorer
            f.write(f"model: checksum\nport: 0\nshm-name: {name}\nlanes: 2\narena-mb: 1\n")
        argv = [SERVER] + [cfg if a == flags["config"] else a for a in args[1:]]
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        addr = os.path.join(self.tmp, "notify")
        sock.bind(addr)
        self.addCleanup(sock.close)
        log = open(os.path.join(self.tmp, "log"), "w+")
        self.addCleanup(log.close)
        p = subprocess.Popen(argv, env=dict(os.environ, NOTIFY_SOCKET=addr), stdout=log, stderr=subprocess.STDOUT)

        def cleanup():
            if p.poll() is None:
                p.kill()
                p.wait()
        self.addCleanup(cleanup)
        sock.settimeout(120)  # hang guard (TimeoutStartSec's role)
        msgs = []
        while not any(m.startswith("READY=1") for m in msgs):
            msgs.append(sock.recv(4096).decode())
        self.assertIn(f"MAINPID={p.pid}", msgs[-1])
        self.assertTrue(shm_name_exists(name), "READY=1 before the segment exists")
        log.flush()
        with open(log.name) as f:
            self.assertIn("access mode 0660", f.read(), "--shm-mode from ExecStart")
        p.send_signal(signal.SIGTERM)  # KillSignal
        self.assertTrue(sock.recv(4096).decode().startswith("STOPPING=1"))
        stop = int(self.s[("Service", "TimeoutStopSec")][0])
        self.assertGreaterEqual(stop, 10 + 5, "TimeoutStopSec below --drain-ms (10 s) + the hard stop (5 s)")
        self.assertEqual(p.wait(timeout=stop), 0)


class TestKubernetes(unittest.TestCase):
    def setUp(self):
        with open(MANIFEST) as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        self.assertEqual(len(docs), 1)
        self.job = docs[0]
        self.pod = self.job["spec"]["template"]["spec"]
        every = self.pod.get("initContainers", []) + self.pod["containers"]
        self.c = {c["name"]: c for c in every}

    def test_kind_and_pod(self):
        self.assertEqual((self.job["apiVersion"], self.job["kind"]), ("batch/v1", "Job"))
        self.assertTrue(self.pod["shareProcessNamespace"], "pid liveness checks need one pid namespace")
        self.assertTrue(self.pod["securityContext"]["runAsNonRoot"])
        self.assertNotEqual(self.pod["securityContext"]["runAsUser"], 0)
        self.assertEqual(self.pod["restartPolicy"], "Never")
        self.assertEqual(set(self.c), {"reward-server", "trainer"})
        # the server is a native sidecar: the trainer starts after its startupProbe
        server = [c for c in self.pod["initContainers"] if c["name"] == "reward-server"][0]
        self.assertEqual(server["restartPolicy"], "Always")
        for c in self.c.values():
            self.assertFalse(c.get("securityContext", {}).get("allowPrivilegeEscalation", True), c["name"])
            self.assertNotEqual(c.get("securityContext", {}).get("runAsUser", 1), 0, c["name"])

    def test_shared_dev_shm(self):
        vols = {v["name"]: v for v in self.pod["volumes"]}
        mem = [n for n, v in vols.items() if v.get("emptyDir", {}).get("medium") == "Memory"]
        self.assertEqual(len(mem), 1, vols)
        for c in self.c.values():
            mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
            self.assertEqual(mounts.get("/dev/shm"), mem[0], f"{c['name']} does not mount the memory emptyDir at /dev/shm")
            self.assertFalse(any(m.get("readOnly") for m in c["volumeMounts"] if m["mountPath"] == "/dev/shm"))

    def test_socket_dir_shared(self):
        # the shm name is a socket path; its directory's parent is one volume mounted in both
        # containers (the server makes the last level itself: it refuses a world-writable one)
        name = flag_values(self.c["reward-server"]["args"])["shm-name"]
        self.assertTrue(name.startswith("/"), "a socket path, reachable by both containers")
        parent = os.path.dirname(os.path.dirname(name))
        vols = {v["name"]: v for v in self.pod["volumes"]}
        for c in self.c.values():
            mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
            self.assertIn(parent, mounts, f"{c['name']} does not mount {parent}")
            self.assertIn("emptyDir", vols[mounts[parent]])

    def test_probes_and_shm_name(self):
        s = self.c["reward-server"]
        flags = flag_values(s["args"])
        port = int(flags["port"])
        self.assertEqual(flags.get("host"), "0.0.0.0", "the kubelet probes the pod IP, not 127.0.0.1")
        named = {p["name"]: p["containerPort"] for p in s["ports"]}
        for probe, path in (("startupProbe", "/ready"), ("readinessProbe", "/ready"), ("livenessProbe", "/health")):
            g = s[probe]["httpGet"]
            self.assertEqual(g["path"], path, probe)
            self.assertEqual(named.get(g["port"], g["port"]), port, probe)
        # a cold 8B load takes tens of seconds: the startup budget covers minutes
        st = s["startupProbe"]
        self.assertGreaterEqual(st["periodSeconds"] * st["failureThreshold"], 300)
        env = {e["name"]: e["value"] for e in self.c["trainer"]["env"]}
        self.assertEqual(env["VERL_REWARD_SHM_NAME"], flags["shm-name"])
        grace = self.pod["terminationGracePeriodSeconds"]
        self.assertGreaterEqual(grace, 15, "grace below --drain-ms + 5 s")

    def test_server_args_accepted(self):
        # the manifest's flags parse (the model and device swapped for the test scorer)
        args = [a for a in self.c["reward-server"]["args"] if not a.startswith(("--model", "--device"))]
        name = f"vrk8s_{os.getpid()}"
        args = [a if not a.startswith("--shm-name") else f"--shm-name={name}" for a in args]
        args = [a if not a.startswith("--port") else "--port=0" for a in args]
        p = subprocess.Popen([SERVER, "--model=checksum", "--lanes=2", "--arena-mb=1", *args],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        try:
            for line in p.stdout:  # hang guard: ctest's TIMEOUT
                if " ready: " in line:
                    break
            else:
                self.fail(f"server exited with {p.wait()} before ready")
            p.send_signal(signal.SIGTERM)
            p.stdout.read()
            self.assertEqual(p.wait(timeout=60), 0)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()


def containerfile_stages(text):
    """[(from_line, [apt packages installed], [other lines])] per FROM stage (continuations joined)."""
    text = re.sub(r"\\\n", " ", text)
    stages = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("FROM "):
            stages.append([line, [], []])
        elif stages:
            m = re.search(r"apt-get install ((?:-\S+\s+)*)(.*?)(?:&&|$)", line)
            if m:
                stages[-1][1] += [w for w in m.group(2).split() if not w.startswith("-")]
            stages[-1][2].append(line)
    return stages


class TestContainerfile(unittest.TestCase):
    def setUp(self):
        with open(CONTAINERFILE) as f:
            self.text = f.read()
        self.stages = containerfile_stages(self.text)
        self.args = dict(re.findall(r"^ARG (\w+)=(\S+)", self.text, re.M))

    def test_base_and_user(self):
        self.assertEqual(len(self.stages), 2)
        self.assertEqual((self.args["BUILD_BASE"], self.args["RUN_BASE"]), ("debian:12", "debian:12-slim"))
        users = [l for l in self.stages[1][2] if l.startswith("USER ")]
        self.assertEqual(len(users), 1)
        uid = users[0].split()[1].split(":")[0]
        self.assertTrue(uid.isdigit() and int(uid) != 0, "USER must be numeric and not root (runAsNonRoot)")
        self.assertIn('ENTRYPOINT ["/usr/local/bin/verl-reward-server"]', self.stages[1][2])

    def test_runtime_packages_cover_the_binary(self):
        p = subprocess.run(["ldd", SERVER], capture_output=True, text=True, timeout=60, check=True)
        libs = re.findall(r"=> (/\S+)", p.stdout)
        need = set()
        for lib in libs:
            if os.path.realpath(lib).startswith("/usr/local/cuda"):
                # a CUDA build of the tests' binary: the Containerfile builds the cpu server (its CUDA
                # variant takes these from the nvidia/cuda base image), so they are not Debian's to own
                continue
            q = subprocess.run(["dpkg", "-S", os.path.realpath(lib)], capture_output=True, text=True, timeout=60)
            if q.returncode != 0:  # e.g. a sanitizer build's runtime from a path dpkg does not know
                q = subprocess.run(["dpkg", "-S", lib], capture_output=True, text=True, timeout=60)
            self.assertEqual(q.returncode, 0, f"no Debian package owns {lib}")
            need.add(q.stdout.split(":")[0])
        need -= {"libc6", "libasan8", "libubsan1", "libgcc-s1", "libstdc++6"}  # base image / sanitizer build
        self.assertTrue(need, libs)
        missing = need - set(self.stages[1][1])
        self.assertEqual(missing, set(), "runtime stage lacks packages for libraries the server links")

    def test_build_stage_has_the_dev_packages(self):
        with open(os.path.join(SRC, "tools", "deps.sh")) as f:
            deps = re.search(r"VR_DEB_PACKAGES=\(([^)]*)\)", f.read()).group(1).split()
        dev = {d for d in deps if d.endswith("-dev") and d != "libcmocka-dev"}  # cmocka: tests only
        self.assertEqual(dev - set(self.stages[0][1]), set())
        for d in ("cmake", "gcc", "pkg-config", "openmpi-bin"):
            self.assertIn(d, self.stages[0][1])
        build = " ".join(self.stages[0][2])
        self.assertIn("-DVR_BUILD_TESTS=OFF", build)
        self.assertIn("--target verl-reward-server", build)


if __name__ == "__main__":
    unittest.main()
