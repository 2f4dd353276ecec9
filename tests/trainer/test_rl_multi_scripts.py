#!/usr/bin/env python3
"""tools/rl_h200_x2.sh and rl_h200_x8.sh (issues 25, 26), on a machine without GPUs: what can be
checked before the day their machines are lent.

  TestScripts.test_syntax       bash -n and shellcheck -x of both scripts, rl_h200_grpo.sh (which
                                shares the library), tools/rl_multi_lib.sh and
                                rl_multi_pack.sh;
                                every embedded Python program compiles
  TestScripts.test_dry_run      DRY=1: every config the runs use passes verl-trainer --config
                                --check (keys, device map, what the RL loop needs of it), every
                                part's commands are printed, nothing else runs
  TestLib.test_steps_on_cpu     the library's steps for real on cpu slots: a reward server (the
                                llama_gqa fixture), an RL run with VERL_COMM_PROFILE through rl_run,
                                /metrics scraped, the tables of rl_multi_report.py, a step that
                                overruns its timeout recorded as 124 while the script goes on
  TestReport.test_dp_verdict    the DP comparison says OUTSIDE when the gradient norms differ
Env: VR_BIN_DIR (verl-trainer, verl-reward-server), VR_SOURCE_DIR."""
import json
import os
import re
import socket
import shutil
import subprocess
import sys
import tempfile
import unittest

BIN_DIR = os.path.abspath(os.environ.get("VR_BIN_DIR", "build/bin"))
SRC = os.path.abspath(os.environ.get("VR_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", "..")))
SCRIPTS = [os.path.join(SRC, "tools", n) for n in ("rl_h200_x2.sh", "rl_h200_x8.sh", "rl_h200_grpo.sh", "rl_multi_lib.sh",
                                                          "rl_multi_pack.sh")]
REPORT = os.path.join(SRC, "tools", "rl_multi_report.py")
GUARD_S = 300


def env(**kw):
    e = dict(os.environ)
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", NCCL_NVLS_ENABLE="0",
             OMPI_MCA_btl_vader_single_copy_mechanism="none", OMPI_MCA_mca_base_component_disable_dlclose="1")
    for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID", "VERL_COMM_PROFILE", "DRY", "PARTS"):
        e.pop(k, None)
    e.update(kw)
    return e


class TestScripts(unittest.TestCase):
    def test_syntax(self):
        for s in SCRIPTS:
            p = subprocess.run(["bash", "-n", s], capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stderr)
        sc = shutil.which("shellcheck")
        self.assertIsNotNone(sc, "shellcheck not installed (apt-get install shellcheck; tools/deps.sh)")
        p = subprocess.run([sc, "-x", *SCRIPTS], capture_output=True, text=True, cwd=SRC)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        n = 0
        for s in SCRIPTS:
            with open(s) as f:
                text = f.read()
            for m in re.finditer(r"python3 - [^\n]*<<'EOF'\n(.*?)\nEOF\n", text, re.S):
                compile(m.group(1), f"{s}:python@{text[:m.start()].count(chr(10)) + 1}", "exec")
                n += 1
        self.assertGreaterEqual(n, 2)  # the models and the P2P probe

    def dry(self, script, gpus_checked):
        out = tempfile.mkdtemp(prefix="vr-multi-dry-")
        try:
            p = subprocess.run(["bash", os.path.join(SRC, "tools", script), os.path.dirname(BIN_DIR), out],
                               env=env(DRY="1"), capture_output=True, text=True, timeout=GUARD_S)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            checked = [l for l in p.stdout.splitlines() if l.startswith("[checked] ")]
            self.assertEqual(len(checked), gpus_checked, p.stdout)
            for l in checked:
                self.assertTrue(l.endswith(": exit 0"), l)
            self.assertIn("# DRY=1: nothing below runs on a GPU", p.stdout)
            self.assertFalse([f for f in os.listdir(out) if f.endswith(".metrics.jsonl")])  # nothing ran
            return p.stdout, out
        except BaseException:
            shutil.rmtree(out, ignore_errors=True)
            raise

    def test_dry_run(self):
        o2, d2 = self.dry("rl_h200_x2.sh", 4)
        o8, d8 = self.dry("rl_h200_x8.sh", 3)
        try:
            for name in ("topo", "check_local", "p2p", "commcheck_2gpu", "server_x2_ppo", "x2_ppo", "x1_ppo",
                         "dp_grads", "dp1_grpo", "dp2_grpo", "bench_cuda_0", "bench_cuda_0_1"):
                self.assertRegex(o2, r"\[dry\] %s \(" % re.escape(name))
            self.assertIn("VERL_COMM_PROFILE=1", o2)
            self.assertIn("--device cuda:0,1 --reward model", o2)
            self.assertIn("--concurrency 32,64", o2)
            for name in ("topo", "check_local", "p2p", "commcheck_seed", "server_x8_ppo", "dmon_x8_ppo", "x8_ppo",
                         "x8_colo_ppo", "trap_local", "trap_planned", "trap_strict", "commcheck_trap", "node2_comm",
                         "node2_comm_hostid", "node2_ppo"):
                self.assertRegex(o8, r"\[dry\] %s \(" % re.escape(name))
            self.assertIn("--device cuda:4", o8)
            self.assertIn("mpirun -np 9", o8)
            with open(os.path.join(d2, "configs", "dp2_grpo.yaml")) as f:
                self.assertIn("zero1: true", f.read())
            with open(os.path.join(d8, "configs", "x8_ppo.yaml")) as f:
                t = f.read()
            self.assertIn("adv_estimator: gae", t)
            self.assertIn("device_map: device_map_8gpu.yaml", t)
            self.assertTrue(os.path.exists(os.path.join(d8, "configs", "device_map_8gpu.yaml")))
            # PARTS picks the parts
            p = subprocess.run(["bash", os.path.join(SRC, "tools", "rl_h200_x2.sh"), os.path.dirname(BIN_DIR), d2],
                               env=env(DRY="1", PARTS="bench"), capture_output=True, text=True, timeout=GUARD_S)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("[dry] bench_cuda_0 (", p.stdout)
            self.assertNotIn("[dry] x2_ppo (", p.stdout)
        finally:
            shutil.rmtree(d2, ignore_errors=True)
            shutil.rmtree(d8, ignore_errors=True)


LIB_SMOKE = r"""
set -u
BUILD=$1 OUT=$2 SRC=$3 SHM=$4 PORT=$5
. "$SRC/tools/rl_multi_lib.sh"
mlib_init
python3 "$SRC/tools/fixtures/make_lm_random.py" --out "$W/policy" --vocab 97 --hidden 64 --layers 1 --heads 2 \
  --kv-heads 1 --intermediate 128 --max-pos 64 --seed 1 > /dev/null
cp -r "$SRC/tests/fixtures/models/llama_gqa" "$W/rm"
for k in $(seq 3 18); do
  echo "{\"input_ids\": [1, $k], \"data_source\": \"openai/gsm8k\", \"reward_model\": {\"ground_truth\": \"$k\"}}"
done > "$W/prompts.jsonl"
mkdir -p "$OUT/configs"
printf 'actor: {device_group: [cpu:0, cpu:1]}\ncritic: {device_group: [cpu:1]}\nrollout: {device_group: [cpu:2]}\nreference: {device_group: [cpu:2]}\nreward: {shared_mem_name: %s}\ncolocate: [[actor, critic], [rollout, reference]]\n' "$SHM" > "$OUT/configs/map.yaml"
write_config smoke map.yaml gae 4 16 16 16 true
sed -i 's/max_prompt_length: 256/max_prompt_length: 8/; s/max_response_length: 256/max_response_length: 4/; s/kv_cache_bytes: 8589934592, //' "$OUT/configs/smoke.yaml"
check_config smoke --gpus 0
echo 1000 > "$W/n_params"
MLIB_SHM=$SHM run_with_server smoke cpu "$PORT" 120 VERL_COMM_PROFILE=1 VERL_COMM_PROFILE_PATH="$OUT/comm_profile" || exit 3
step sleeper 1 sleep 30
report_calls
report_rl smoke no_comm_check "The smoke run"
echo "ran to the end"
"""


def summary_of(out):
    with open(os.path.join(out, "summary.md")) as f:
        return f.read()


class TestLib(unittest.TestCase):
    def test_steps_on_cpu(self):
        out = tempfile.mkdtemp(prefix="vr-multi-lib-")
        shm = "vr_multi_test_%d" % os.getpid()
        try:
            with socket.socket() as so:  # a free port for the server's /metrics
                so.bind(("127.0.0.1", 0))
                port = so.getsockname()[1]
            p = subprocess.run(["bash", "-c", LIB_SMOKE, "smoke", os.path.dirname(BIN_DIR), out, SRC, shm, str(port)],
                               env=env(),
                               capture_output=True, text=True, timeout=GUARD_S)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertIn("ran to the end", p.stdout)
            with open(os.path.join(out, "steps.tsv")) as f:
                steps = {l.split("\t")[0]: int(l.split("\t")[1]) for l in f if l.strip()}
            self.assertEqual(steps, {"check_smoke": 0, "smoke": 0, "sleeper": 124})
            summary = summary_of(out)
            self.assertIn("### Steps of this call", summary)
            self.assertIn("sleeper\t124\t", summary)
            rows = [l for l in summary.splitlines() if re.match(r"\| [1-4] \| ", l)]
            self.assertEqual(len(rows), 4, summary)  # one row per step
            self.assertIn("| `timing_s/update_weights` (mean of steps 2..N) |", summary)
            self.assertRegex(summary, r"\| profile weight_sync broadcast \(3 ranks, 4 calls/rank")
            self.assertIn("`timing_s/reward` as the trainer waited (4 steps", summary)
            self.assertIn("the step's slowest of 4 requests in all) over the steps | p50 ", summary)
            self.assertRegex(summary, r"reward requests over shm, server side intake to answer \(4 requests\) \| p50 <= ")
            self.assertRegex(summary, r"reward server device memory over the run|reward server \(pid \d+\) device memory")
            self.assertIn("Device mapping resolved:", summary)
            self.assertIn("  Critic: cpu:1 (colocated with actor)", summary)
            self.assertTrue(os.path.exists(os.path.join(out, "comm_profile", "nccl_trace.json")))
            self.assertRegex(summary, r"\| communication trace: \d+ events on 4 ranks over ")
            self.assertRegex(summary, r"\| weight_sync broadcast on rank 1 cpu:0 \| 4 \| ")
            with open(os.path.join(out, "server_smoke.log")) as f:
                self.assertIn("] ready: ", f.read())
        finally:
            shutil.rmtree(out, ignore_errors=True)


class TestReport(unittest.TestCase):
    def test_dp_verdict(self):
        d = tempfile.mkdtemp(prefix="vr-multi-report-")
        try:
            base = {"step": 1, "actor/grad_norm": 2.0, "actor/pg_loss": 0.1, "critic/score/mean": 0.5,
                    "actor/entropy": 3.0, "timing_s/update_actor": 1.0, "timing_s/step": 2.0,
                    "perf/total_num_tokens": 1000}
            for name, g in (("a", 2.0), ("b", 2.001), ("c", 2.5)):
                with open(os.path.join(d, name), "w") as f:
                    for s in (1, 2):
                        f.write(json.dumps(dict(base, step=s, **{"actor/grad_norm": g})) + "\n")
            run = lambda x, y: subprocess.run([sys.executable, REPORT, "dp", "--dp1", os.path.join(d, x), "--dp2",  # noqa: E731
                                               os.path.join(d, y)], capture_output=True, text=True)
            p = run("a", "b")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("relative difference 5.00e-04, within the tolerance 0.01", p.stdout)
            self.assertIn("| update_actor tokens/s | 1,000 | 1,000 | scaling 1.00x |", p.stdout)
            p = run("a", "c")
            self.assertIn("relative difference 2.50e-01, OUTSIDE the tolerance", p.stdout)
            p = run("a", "missing")
            self.assertEqual(p.returncode, 1)
            self.assertIn("a run is missing", p.stdout)
        finally:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    unittest.main()
