"""The RL loop end to end (issue 22): `verl-trainer --config ppo.yaml` under its own mpirun (3
processes: the controller and two cpu workers) with rewards from a rules-only verl-reward-server
over shared memory (rule contains_word).

The task: a prompt [1, k] names a token k in 3..10 of a 16-token vocabulary; a response of up to 4
tokens scores 1 when it contains k (solution_str is the response's ids as decimal words; the
ground truth is "k"). A random-init policy (tools/fixtures/make_lm_random.py: Llama, 1 layer,
hidden 64) scores about 0.3 by chance; it has to learn to say the token it is shown.

  TestLearning   GRPO (actor data parallel over both workers, weight sync to two rollout
                 engines) and PPO with a critic (gae): the mean score of the last 10 of 150 steps
                 is >= 0.9 and the first 10 below 0.5; with lr 0 it stays at chance (< 0.5).
  TestCheckpoint a crash inside step 20's save (--crash-in-save: the controller _exit(9)s after
                 the files are written, before the rename) leaves the tracker at 10 and
                 global_step_20.tmp; the rerun resumes from 10 and its metrics for steps 11..30 are
                 bit-identical to an uninterrupted run's (timings aside); kill -9 of the
                 controller while it saves every step leaves the tracker naming a complete
                 checkpoint; SIGTERM to verl-trainer saves a checkpoint and exits 0; max_ckpt_to_keep;
                 async_save: a step runs to its end while a save's files are still unwritten
                 (--hold-save), and the held save completes afterwards.
  TestReward     the reward server restarted mid-run: the run retries and completes; a server
                 that never answers (SIGSTOP) ends the run after trainer.reward_timeout_s, as
                 does one that is not there (after saying it waits); a
                 worker killed mid-run ends it (exit 1) naming the rank.
  TestData       chat-message prompts rendered with the model's chat template (Llama-2 template
                 of tests/fixtures/server_tokenizer) give the ids verl-tokenize gives, decoded
                 responses go to the rules; truncation; bad rows and config keys exit 2 naming them;
                 actor.optim.zero1 (ZeRO-1) equals the replicated run bit for bit, with the
                 optimizer files sharded; reward/requests and reward/server_ms per step.
Env: VR_BIN_DIR, VR_SOURCE_DIR."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

BIN_DIR = os.environ.get("VR_BIN_DIR", "build/bin")
SRC = os.environ.get("VR_SOURCE_DIR", ".")
TRAINER = os.path.join(BIN_DIR, "verl-trainer")
SERVER = os.path.join(BIN_DIR, "verl-reward-server")
TOKENIZE = os.path.join(BIN_DIR, "verl-tokenize")
GUARD_S = 300  # a hang guard, not a timing assert

GRPO_MAP = """\
actor:     {device_group: [cpu:0, cpu:1]}
rollout:   {device_group: [cpu:0, cpu:1]}
reference: {device_group: [cpu:1]}
reward:    {shared_mem_name: SHM}
colocate:  [actor, rollout, reference]
"""
PPO_MAP = """\
actor:     {device_group: [cpu:0]}
rollout:   {device_group: [cpu:0]}
critic:    {device_group: [cpu:1]}
reward:    {shared_mem_name: SHM}
colocate:  [actor, rollout]
"""


def env():
    e = dict(os.environ)
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", NCCL_NVLS_ENABLE="0",
             OMPI_MCA_btl_vader_single_copy_mechanism="none", OMPI_MCA_mca_base_component_disable_dlclose="1")
    for k in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID", "VERL_COMM_PROFILE"):
        e.pop(k, None)
    return e


def make_model(d, vocab=16, hidden=64):
    subprocess.run([sys.executable, os.path.join(SRC, "tools/fixtures/make_lm_random.py"), "--out", d, "--vocab",
                    str(vocab), "--hidden", str(hidden), "--layers", "1", "--heads", "2", "--kv-heads", "1",
                    "--intermediate", str(2 * hidden), "--max-pos", "64", "--seed", "1"], check=True,
                   capture_output=True)


def config(steps=150, lr=0.01, est="grpo", bs=16, save_freq=-1, extra_trainer="", data_extra="", actor_extra=""):
    return f"""\
data:
  train_files: prompts.jsonl
  train_batch_size: {bs}
  max_prompt_length: 8
  max_response_length: 4
  seed: 7
{data_extra}actor_rollout_ref:
  model: {{path: model}}
  actor:
    ppo_mini_batch_size: {bs}
    ppo_micro_batch_size_per_gpu: 16
    optim: {{lr: {lr}, weight_decay: 0.0}}
{actor_extra}  rollout: {{n: 4, temperature: 1.0}}
critic:
  ppo_mini_batch_size: {bs}
  ppo_micro_batch_size_per_gpu: 16
  optim: {{lr: {lr}}}
algorithm:
  adv_estimator: {est}
trainer:
  device_map: device_map.yaml
  total_training_steps: {steps}
  metrics_file: metrics.jsonl
  save_freq: {save_freq}
  comm_timeout_s: 60
{extra_trainer}"""


class Rl(unittest.TestCase):
    """A fresh directory with the model, the prompts and a server of its own."""

    @classmethod
    def setUpClass(cls):
        cls.model = tempfile.mkdtemp(prefix="vr-rl-model-")
        make_model(cls.model)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.model, ignore_errors=True)

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="vr-rl-")
        self.shm = "vr_rl_test_%d_%d" % (os.getpid(), int(time.monotonic() * 1000) % 100000)
        shutil.copytree(self.model, os.path.join(self.dir, "model"))
        with open(os.path.join(self.dir, "prompts.jsonl"), "w") as f:
            for _ in range(2):
                for k in range(3, 11):
                    f.write(json.dumps({"input_ids": [1, k], "data_source": "synthetic/say_token",
                                        "reward_model": {"ground_truth": str(k), "style": "rule"},
                                        "extra_info": {"k": k, "note": "x" * 40}}) + "\n")
        self.server = None
        try:
            self.start_server()
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise

    def tearDown(self):
        self.stop_server()
        shutil.rmtree(self.dir, ignore_errors=True)

    def start_server(self):
        log = os.path.join(self.dir, "server.log")
        self.server_log_size = os.path.getsize(log) if os.path.exists(log) else 0
        with open(log, "a") as lf:
            self.server = subprocess.Popen([SERVER, "--reward", "contains_word", "--shm-name", self.shm, "--lanes",
                                            "4", "--arena-mb", "1", "--port", "0"], stdout=lf, stderr=lf)
        deadline = time.monotonic() + 30
        start = self.server_log_size
        while True:  # the server logs "ready:" once its segment takes clients
            with open(log) as lf:
                lf.seek(start)
                if "] ready: " in lf.read():
                    break
            if self.server.poll() is not None or time.monotonic() > deadline:
                self.stop_server()  # setUp's failure skips tearDown: leave no server behind
                with open(log) as lf:
                    self.fail("verl-reward-server did not start: " + lf.read())
            time.sleep(0.02)

    def stop_server(self):
        if self.server and self.server.poll() is None:
            self.server.send_signal(signal.SIGTERM)
            try:
                self.server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait()
        self.server = None

    def write(self, name, text):
        with open(os.path.join(self.dir, name), "w") as f:
            f.write(text.replace("SHM", self.shm))

    def fresh(self):
        """Forget earlier runs: their checkpoints would be resumed, their metrics appended to."""
        shutil.rmtree(os.path.join(self.dir, "checkpoints"), ignore_errors=True)
        if os.path.exists(os.path.join(self.dir, "metrics.jsonl")):
            os.remove(os.path.join(self.dir, "metrics.jsonl"))

    def start_and_wait_for_steps(self, args, stdout):
        """verl-trainer --config ppo.yaml ARGS in the background, once its metrics file has a few steps."""
        p = subprocess.Popen([TRAINER, "--config", "ppo.yaml", *args], cwd=self.dir, env=env(), stdout=stdout,
                             stderr=subprocess.PIPE, text=True)
        mf = os.path.join(self.dir, "metrics.jsonl")
        deadline = time.monotonic() + GUARD_S
        while (not os.path.exists(mf) or os.path.getsize(mf) < 2000) and time.monotonic() < deadline:
            if p.poll() is not None:
                self.fail("verl-trainer ended before its first steps: " + p.stderr.read()[-2000:])
            time.sleep(0.02)
        return p

    def run_trainer(self, args=(), timeout=GUARD_S):
        p = subprocess.run([TRAINER, "--config", "ppo.yaml", *args], cwd=self.dir, env=env(), capture_output=True,
                           text=True, timeout=timeout)
        return p.returncode, p.stdout, p.stderr

    def ckdir(self, *p):
        return os.path.join(self.dir, "checkpoints", *p)

    def metrics(self, name="metrics.jsonl"):
        """The last record of every step (a resumed run appends its steps again)."""
        out = {}
        with open(os.path.join(self.dir, name)) as f:
            for line in f:
                r = json.loads(line)
                out[r["step"]] = r
        return out

    def scores(self):
        m = self.metrics()
        return [m[s]["critic/score/mean"] for s in sorted(m)]


class TestLearning(Rl):
    def learn(self, est, mp, lr=0.01):
        self.write("device_map.yaml", mp)
        self.write("ppo.yaml", config(lr=lr, est=est))
        t0 = time.monotonic()
        rc, out, err = self.run_trainer()
        self.assertEqual(rc, 0, err[-3000:])
        s = self.scores()
        self.assertEqual(len(s), 150)
        first, last = sum(s[:10]) / 10, sum(s[-10:]) / 10
        print(f"\n{est} lr {lr}: mean score first 10 steps {first:.3f}, last 10 {last:.3f}, "
              f"{time.monotonic() - t0:.1f} s", file=sys.stderr)
        m = self.metrics()[150]
        for k in ("actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/entropy", "actor/grad_norm",
                  "critic/score/mean", "critic/rewards/mean", "critic/advantages/mean", "response_length/mean",
                  "timing_s/gen", "timing_s/reward", "timing_s/old_log_prob", "timing_s/adv", "timing_s/update_actor",
                  "timing_s/update_weights", "timing_s/step", "perf/throughput"):
            self.assertIn(k, m)
        self.assertIn("[####################] step 150/150", out)
        return first, last, m

    def test_grpo_learns(self):
        first, last, _ = self.learn("grpo", GRPO_MAP)
        self.assertLess(first, 0.5)
        self.assertGreaterEqual(last, 0.9)

    def test_ppo_with_critic_learns(self):
        first, last, m = self.learn("gae", PPO_MAP)
        for k in ("critic/vf_loss", "critic/values/mean", "critic/vf_explained_var", "timing_s/values",
                  "timing_s/update_critic"):
            self.assertIn(k, m)
        self.assertLess(first, 0.5)
        self.assertGreaterEqual(last, 0.9)

    def test_lr0_stays_at_chance(self):
        first, last, m = self.learn("grpo", GRPO_MAP, lr=0.0)
        self.assertLess(last, 0.5)
        self.assertGreater(m["actor/grad_norm"], 0)  # gradients flowed; lr 0 kept the policy where it was


class TestCheckpoint(Rl):
    def setUp(self):
        super().setUp()
        self.write("device_map.yaml", PPO_MAP)

    def tracker(self):
        with open(self.ckdir("latest_checkpointed_iteration.txt")) as f:
            return int(f.read())

    def test_crash_in_save_then_resume_is_bit_exact(self):
        self.write("ppo.yaml", config(steps=30, est="gae", save_freq=10,
                                      extra_trainer="  default_local_dir: uninterrupted\n"))
        rc, _, err = self.run_trainer()
        self.assertEqual(rc, 0, err[-2000:])
        ref = self.metrics()
        os.rename(os.path.join(self.dir, "metrics.jsonl"), os.path.join(self.dir, "ref.jsonl"))
        # the interrupted run saves asynchronously: the same checkpoints, written on threads
        self.write("ppo.yaml", config(steps=30, est="gae", save_freq=10,
                                      actor_extra="    checkpoint: {async_save: true}\n"))
        rc, _, err = self.run_trainer(["--crash-in-save", "20"])
        self.assertEqual(rc, 1, err[-2000:])
        self.assertEqual(self.tracker(), 10)
        self.assertTrue(os.path.isdir(self.ckdir("global_step_20.tmp")))
        self.assertFalse(os.path.exists(self.ckdir("global_step_20")))
        rc, out, err = self.run_trainer()
        self.assertEqual(rc, 0, err[-2000:])
        self.assertIn("resumed from", out)
        self.assertIn("global_step_10 (global step 10)", out)
        self.assertEqual(self.tracker(), 30)
        self.assertFalse(os.path.exists(self.ckdir("global_step_20.tmp")))
        got = self.metrics()
        self.assertEqual(sorted(got), list(range(1, 31)))
        n = 0
        for s in range(11, 31):
            for k, v in ref[s].items():
                if k.startswith(("timing_s/", "perf/time", "reward/server_ms/")) or k == "perf/throughput":
                    continue
                self.assertEqual(got[s].get(k), v, f"step {s} {k}")
                n += 1
        self.assertGreater(n, 20 * 30)
        # the checkpoint is Hugging Face layout: config.json + model.safetensors, one optimizer file per rank
        for sub in ("actor", "critic"):
            for f in ("config.json", "model.safetensors", "optim_rank_0.bin"):
                self.assertTrue(os.path.exists(self.ckdir("global_step_30", sub, f)), (sub, f))
        with open(self.ckdir("global_step_30", "data.json")) as f:
            st = json.load(f)
        self.assertEqual(st["global_step"], 30)
        self.assertEqual(st["dataloader"]["seed"], 7)

    def test_kill9_while_saving(self):
        # a save every step (async_save: the model files written on the workers' threads, the
        # finish on the controller's); the controller is SIGKILLed at some point: whatever the
        # moment, the tracker names a complete checkpoint and the rerun resumes from it
        self.write("ppo.yaml", config(steps=100000, est="gae", save_freq=1,
                                      extra_trainer="  run_dir: rundir\n  max_actor_ckpt_to_keep: 3\n",
                                      actor_extra="    checkpoint: {async_save: true}\n"))
        p = subprocess.Popen([TRAINER, "--config", "ppo.yaml"], cwd=self.dir, env=env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        pidfile = os.path.join(self.dir, "rundir", "controller.pid")
        deadline = time.monotonic() + GUARD_S
        while not os.path.exists(self.ckdir("global_step_5")) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        with open(pidfile) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        p.communicate(timeout=GUARD_S)
        self.assertNotEqual(p.returncode, 0)
        step = self.tracker()
        self.assertGreaterEqual(step, 5)
        done = self.ckdir("global_step_%d" % step)
        for f in ("data.json", "actor/model.safetensors", "actor/config.json", "actor/optim_rank_0.bin",
                  "critic/model.safetensors"):
            self.assertTrue(os.path.exists(os.path.join(done, f)), f)
        self.assertFalse(os.path.exists(os.path.join(done, "actor/.rank_0_complete")))
        kept = [d for d in os.listdir(self.ckdir()) if d.startswith("global_step_") and not d.endswith(".tmp")]
        self.assertLessEqual(len(kept), 3 + 1)  # the pruning of the newest save may not have run yet
        self.write("ppo.yaml", config(steps=step + 2, est="gae", save_freq=1))
        rc, out, err = self.run_trainer()
        self.assertEqual(rc, 0, err[-2000:])
        self.assertIn("(global step %d)" % step, out)
        self.assertEqual(self.tracker(), step + 2)

    def test_async_save_does_not_hold_the_step(self):
        # step 2's checkpoint files wait for .release files (--hold-save 2), so that save is in
        # progress for as long as the test says: step 3 must still run to its end (its metrics
        # record written) while none of step 2's files exists; step 4's save then waits for step 2's
        # finish. Released, the run ends with both checkpoints complete. Event order, not time.
        self.write("ppo.yaml", config(steps=4, est="gae", save_freq=2,
                                      actor_extra="    checkpoint: {async_save: true}\n"))
        p = subprocess.Popen([TRAINER, "--config", "ppo.yaml", "--hold-save", "2"], cwd=self.dir, env=env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        tmp = self.ckdir("global_step_2.tmp")

        def logged():
            try:
                with open(os.path.join(self.dir, "metrics.jsonl")) as f:
                    return {json.loads(line)["step"] for line in f if line.endswith("\n")}
            except FileNotFoundError:
                return set()
        deadline = time.monotonic() + GUARD_S
        while 3 not in logged() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        try:
            self.assertEqual(logged(), {1, 2, 3})
            for sub in ("actor", "critic"):
                for f in ("optim_rank_0.bin", "model.safetensors", ".rank_0_complete"):
                    self.assertFalse(os.path.exists(os.path.join(tmp, sub, f)), (sub, f))
            self.assertFalse(os.path.exists(self.ckdir("global_step_2")))
        finally:
            for sub in ("actor", "critic"):
                open(os.path.join(tmp, sub, ".release"), "w").close()
        out, err = p.communicate(timeout=GUARD_S)
        self.assertEqual(p.returncode, 0, err[-2000:])
        self.assertEqual(self.tracker(), 4)
        for step in (2, 4):
            for sub in ("actor", "critic"):
                for f in ("config.json", "model.safetensors", "optim_rank_0.bin"):
                    self.assertTrue(os.path.exists(self.ckdir("global_step_%d" % step, sub, f)), (step, sub, f))
                for f in (".release", ".rank_0_complete"):
                    self.assertFalse(os.path.exists(self.ckdir("global_step_%d" % step, sub, f)), (step, sub, f))

    def test_sigterm_saves_and_exits_cleanly(self):
        self.stop_run(lambda p: p.send_signal(signal.SIGTERM))

    def test_ctrl_c_saves_and_exits_cleanly(self):
        # a terminal's Ctrl-C: SIGINT to verl-trainer's whole process group (mpirun has its own)
        self.stop_run(lambda p: os.killpg(p.pid, signal.SIGINT))

    def stop_run(self, stop):
        self.write("ppo.yaml", config(steps=100000, est="gae", save_freq=-1,
                                      extra_trainer="  max_actor_ckpt_to_keep: 1\n"))
        p = subprocess.Popen([TRAINER, "--config", "ppo.yaml"], cwd=self.dir, env=env(), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.monotonic() + GUARD_S
        mf = os.path.join(self.dir, "metrics.jsonl")
        while (not os.path.exists(mf) or os.path.getsize(mf) < 10000) and time.monotonic() < deadline:
            time.sleep(0.02)
        stop(p)
        out, err = p.communicate(timeout=GUARD_S)
        self.assertEqual(p.returncode, 0, err[-2000:])
        self.assertIn("stopped by a signal", out)
        step = self.tracker()
        self.assertEqual(max(self.metrics()), step)
        self.assertTrue(os.path.exists(self.ckdir("global_step_%d" % step, "data.json")))


class TestReward(Rl):
    def test_server_restart_is_retried(self):
        self.write("device_map.yaml", GRPO_MAP)
        self.write("ppo.yaml", config(steps=100000, est="grpo"))
        p = subprocess.Popen([TRAINER, "--config", "ppo.yaml", "--steps", "100000"], cwd=self.dir, env=env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        mf = os.path.join(self.dir, "metrics.jsonl")
        deadline = time.monotonic() + GUARD_S
        while (not os.path.exists(mf) or os.path.getsize(mf) < 5000) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.stop_server()
        time.sleep(0.3)
        self.start_server()
        n0 = max(self.metrics())
        while max(self.metrics()) < n0 + 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=GUARD_S)
        self.assertEqual(p.returncode, 0, err[-2000:])
        self.assertIn("reconnecting", err)
        m = self.metrics()
        self.assertGreaterEqual(m[max(m)]["reward/restarts"], 1)

    def test_unanswered_request_times_out(self):
        """A server that takes the requests and never answers (SIGSTOP: alive, its segment
        there): the run ends after trainer.reward_timeout_s with the shm and the key named,
        exit 1, instead of waiting for ever (the bound was a fixed 120 s, the message "failed")."""
        self.write("device_map.yaml", GRPO_MAP)
        self.write("ppo.yaml", config(steps=100000, est="grpo", extra_trainer="  reward_timeout_s: 2\n"))
        p = self.start_and_wait_for_steps([], subprocess.PIPE)
        self.server.send_signal(signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            out, err = p.communicate(timeout=GUARD_S)
            waited = time.monotonic() - t0
        finally:
            self.server.send_signal(signal.SIGCONT)
        self.assertEqual(p.returncode, 1, err[-2000:])
        self.assertIn('verl-reward-server at shm "%s" did not answer a request' % self.shm, err)
        self.assertIn("within 2 s (trainer.reward_timeout_s)", err)
        self.assertLess(waited, 100)  # a hang guard well under the old fixed bound, not a timing assert

    def test_absent_server_is_waited_for_with_a_word_then_named(self):
        """No server at the shm name: the run says at once that it waits (it was silent for 120 s,
        like a hang), waits trainer.reward_timeout_s, then ends with exit 1 and the HINT."""
        self.stop_server()
        self.write("device_map.yaml", GRPO_MAP)
        self.write("ppo.yaml", config(steps=1, est="grpo", extra_trainer="  reward_timeout_s: 2\n"))
        t0 = time.monotonic()
        rc, _, err = self.run_trainer()
        self.assertEqual(rc, 1, err[-2000:])
        self.assertIn('verl-reward-server at shm "%s" is not there yet' % self.shm, err)
        self.assertIn("waiting up to 2 s (trainer.reward_timeout_s)", err)
        self.assertIn("HINT: start verl-reward-server --shm-name %s" % self.shm, err)
        self.assertLess(time.monotonic() - t0, 100)  # a hang guard under the old fixed 120 s, not a timing assert

    def test_worker_killed_mid_run_is_named(self):
        """kill -9 of an actor/rollout worker while the loop runs: the run ends with exit 1 (not a
        controller waiting on a collective for ever), naming the rank and what it was doing."""
        self.write("device_map.yaml", GRPO_MAP)
        self.write("ppo.yaml", config(steps=100000, est="grpo"))
        run_dir = os.path.join(self.dir, "run")
        p = self.start_and_wait_for_steps(["--run-dir", run_dir], subprocess.DEVNULL)
        with open(os.path.join(run_dir, "rank-2.status")) as f:
            words = f.read().split()
        pid = int(words[words.index("pid") + 1])
        os.kill(pid, signal.SIGKILL)
        t0 = time.monotonic()
        _, err = p.communicate(timeout=GUARD_S)
        self.assertEqual(p.returncode, 1, err[-2000:])
        self.assertLess(time.monotonic() - t0, 100, "the run did not end after its worker was killed")
        self.assertRegex(err, r"worker rank 2 died: rank 2 pid %d host \S+ device cpu:1 roles \S+ state \S+" % pid)


class TestData(Rl):
    def test_chat_prompts_and_decoded_responses(self):
        tok = os.path.join(SRC, "tests/fixtures/server_tokenizer")
        model = os.path.join(self.dir, "model")
        shutil.rmtree(model)
        make_model(model, vocab=96, hidden=32)
        for f in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(tok, f), model)
        msgs = [[{"role": "user", "content": "say hello"}],
                [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there, how are you?"}]]
        with open(os.path.join(self.dir, "prompts.jsonl"), "w") as f:
            for m in msgs:
                f.write(json.dumps({"prompt": m, "data_source": "chat", "reward_model": {"ground_truth": "hello"}})
                        + "\n")
        want = []
        for m in msgs:
            p = subprocess.run([TOKENIZE, "--tokenizer", model], input=json.dumps(
                {"messages": m, "add_generation_prompt": True}) + "\n", capture_output=True, text=True, check=True)
            want.append(len(json.loads(p.stdout)["input_ids"]))
        self.write("device_map.yaml", GRPO_MAP)
        self.write("ppo.yaml", config(steps=2, bs=2).replace("max_prompt_length: 8", "max_prompt_length: 64"))
        rc, out, err = self.run_trainer()
        self.assertEqual(rc, 0, err[-2000:])
        m = self.metrics()
        self.assertEqual(m[1]["prompt_length/mean"], sum(want) / 2)
        self.assertEqual(m[1]["prompt_length/max"], max(want))
        # truncation: left keeps the last tokens, error refuses naming the line
        self.write("ppo.yaml", config(steps=1, bs=2, data_extra="  truncation: left\n").replace(
            "max_prompt_length: 8", "max_prompt_length: 5"))
        self.fresh()
        rc, out, err = self.run_trainer()
        self.assertEqual(rc, 0, err[-2000:])
        self.assertEqual(self.metrics()[1]["prompt_length/max"], 5)
        self.assertIn("(2 truncated)", out)
        self.write("ppo.yaml", config(steps=1, bs=2).replace("max_prompt_length: 8", "max_prompt_length: 5"))
        rc, out, err = self.run_trainer()
        self.assertEqual(rc, 2)
        self.assertIn("prompts.jsonl:1: the prompt has", err)
        self.assertIn("data.truncation", err)
        # rows the chat template cannot take: each named by line and field
        self.write("ppo.yaml", config(steps=1, bs=2).replace("max_prompt_length: 8", "max_prompt_length: 64"))
        for row, frag in ((json.dumps({"prompt": "say hello"}), '"prompt": not a list of chat messages'),
                          (json.dumps({"prompt": [{"role": "user", "content": 5}]}), "'int object' has no attribute 'strip'"),
                          (json.dumps({"prompt": [{"content": "hi"}]}), "Conversation roles must alternate"),
                          (json.dumps({"prompt": []}), "cannot apply chat template to an empty conversation"),
                          (json.dumps({"prompt": ["hi"]}), "Conversation roles must alternate")):
            with open(os.path.join(self.dir, "prompts.jsonl"), "w") as f:
                f.write(json.dumps({"prompt": msgs[0]}) + "\n" + row + "\n")
            rc, out, err = self.run_trainer()
            self.assertEqual(rc, 2, err[-2000:])
            self.assertIn('prompts.jsonl:2: "prompt": ', err)
            self.assertIn(frag, err)

    def test_every_option_runs(self):
        """The paths the learning runs leave out: KL in the reward with the adaptive controller,
        KL loss with a straight-through estimator, entropy bonus, several mini-batches and
        epochs (so the update is off-policy and the clip acts), each loss_agg_mode, RLOO,
        REINFORCE++, critic warm-up, and a reference on its own worker."""
        mp = PPO_MAP.replace("critic:    {device_group: [cpu:1]}",
                             "critic:    {device_group: [cpu:1]}\nreference: {device_group: [cpu:1]}").replace(
                                 "colocate:  [actor, rollout]", "colocate:  [[actor, rollout], [critic, reference]]")
        self.write("device_map.yaml", mp)
        runs = [("gae", "token-mean", "  use_kl_in_reward: true\n  kl_penalty: low_var_kl\n"
                 "  kl_ctrl: {type: adaptive, kl_coef: 0.2, target_kl: 0.01, horizon: 100}\n  gamma: 0.99\n  lam: 0.95\n"),
                ("rloo", "seq-mean-token-sum", ""), ("reinforce_plus_plus", "seq-mean-token-mean", "  gamma: 0.9\n"),
                ("grpo", "seq-mean-token-sum-norm", "  norm_adv_by_std_in_grpo: false\n")]
        for est, agg, alg in runs:
            with self.subTest(est=est):
                self.fresh()
                actor = (f"    ppo_epochs: 2\n    loss_agg_mode: {agg}\n    use_kl_loss: true\n"
                         "    kl_loss_type: k3+\n    kl_loss_coef: 0.1\n    entropy_coeff: 0.01\n    clip_ratio_high: 0.28\n")
                text = config(steps=6, lr=0.05, est=est, actor_extra=actor,
                              extra_trainer="  critic_warmup: 2\n" if est == "gae" else "")
                text = text.replace("ppo_mini_batch_size: 16", "ppo_mini_batch_size: 4").replace(
                    "adv_estimator: " + est, "adv_estimator: " + est + "\n" + alg)
                self.write("ppo.yaml", text)
                rc, out, err = self.run_trainer()
                self.assertEqual(rc, 0, err[-3000:])
                m = self.metrics()
                self.assertEqual(sorted(m), list(range(1, 7)))
                last = m[6]
                for k in ("actor/kl_loss", "actor/kl_coef", "timing_s/ref", "actor/pg_clipfrac"):
                    self.assertIn(k, last)
                self.assertGreater(max(m[s]["actor/pg_clipfrac"] for s in m if "actor/pg_clipfrac" in m[s]), 0)
                self.assertGreater(max(m[s]["actor/ppo_kl"] for s in m if "actor/ppo_kl" in m[s]) , 0)
                for r in m.values():
                    for k, v in r.items():
                        self.assertTrue(v == v and abs(v) < 1e30, (k, v))  # finite
                if est == "gae":
                    # critic warm-up 2: verl updates the actor once critic_warmup <= global step
                    self.assertNotIn("actor/pg_loss", m[1])
                    self.assertIn("actor/pg_loss", m[2])
                    coefs = [m[s]["actor/reward_kl_penalty_coeff"] for s in sorted(m)]
                    self.assertEqual(coefs[0], 0.2)
                    self.assertNotEqual(coefs[-1], 0.2)  # the adaptive controller moved it

    def test_zero1_actor_equals_replicated(self):
        """actor.optim.zero1 over the two-rank actor group: the AdamW moments are sharded (each rank's
        optimizer file holds its half of the buffer) and every metric equals the replicated run's
        bit for bit (the group's gradients are all-reduced either way; AdamW is elementwise)."""
        self.write("device_map.yaml", GRPO_MAP)
        runs = {}
        for z in (False, True):
            self.fresh()
            self.write("ppo.yaml", config(steps=4, lr=0.05, save_freq=4).replace(
                "optim: {lr: 0.05, weight_decay: 0.0}", "optim: {lr: 0.05, weight_decay: 0.0, zero1: %s}" %
                str(z).lower(), 1))
            rc, out, err = self.run_trainer()
            self.assertEqual(rc, 0, err[-3000:])
            m = self.metrics()
            for r in m.values():  # one reward request per step, timed by the server
                self.assertEqual(r["reward/requests"], 1)
                self.assertGreaterEqual(r["reward/server_ms/max"], r["reward/server_ms/mean"])
                self.assertGreater(r["reward/server_ms/max"], 0)
            runs[z] = {s: {k: v for k, v in r.items() if not k.startswith(("timing_s/", "perf/", "reward/server_ms/"))}
                       for s, r in m.items()}
            spans = []
            for rank in (0, 1):
                with open(self.ckdir("global_step_4", "actor", "optim_rank_%d.bin" % rank), "rb") as f:
                    head = f.read(40)
                self.assertEqual(head[:4], b"VRAD")
                n, lo, hi = (int.from_bytes(head[16 + 8 * i:24 + 8 * i], "little") for i in range(3))
                spans.append((n, lo, hi))
            n = spans[0][0]
            if z:
                self.assertEqual(spans[0][1], 0)
                self.assertEqual(spans[0][2], spans[1][1])  # two halves that meet
                self.assertEqual(spans[1][2], n)
                self.assertLess(spans[0][2], n)
            else:
                self.assertEqual(spans, [(n, 0, n), (n, 0, n)])
        self.assertEqual(sorted(runs[True]), [1, 2, 3, 4])
        self.assertEqual(runs[True], runs[False])

    def test_plot_metrics(self):
        self.write("device_map.yaml", GRPO_MAP)
        self.write("ppo.yaml", config(steps=3))
        rc, _, err = self.run_trainer()
        self.assertEqual(rc, 0, err[-2000:])
        tool = os.path.join(SRC, "tools/plot_metrics.py")
        p = subprocess.run([sys.executable, tool, "metrics.jsonl", "--summary"], cwd=self.dir, capture_output=True,
                           text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("critic/score/mean", p.stdout)
        self.assertIn("timing_s/gen", p.stdout)
        p = subprocess.run([sys.executable, tool, "metrics.jsonl", "-o", "run.png"], cwd=self.dir,
                           capture_output=True, text=True)
        if p.returncode == 3:  # no matplotlib here: the message says what to install
            self.assertIn("python3-matplotlib", p.stderr)
        else:
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(os.path.join(self.dir, "run.png"), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_bad_rows_and_keys(self):
        self.write("device_map.yaml", GRPO_MAP)
        with open(os.path.join(self.dir, "prompts.jsonl"), "a") as f:
            f.write('{"input_ids": [1, 99]}\n')
        self.write("ppo.yaml", config(steps=1))
        rc, _, err = self.run_trainer()
        self.assertEqual(rc, 2)
        self.assertIn("prompts.jsonl:17: token 1 is 99, outside the vocabulary (16)", err)
        self.write("ppo.yaml", config(steps=1).replace("adv_estimator", "adv_estimatr"))
        rc, _, err = self.run_trainer()
        self.assertEqual(rc, 2)
        self.assertIn("unknown key 'adv_estimatr' in algorithm", err)
        self.assertIn("did you mean 'adv_estimator'", err)
        self.write("ppo.yaml", config(steps=1, actor_extra="    clip_ratio_c: 0.5\n"))
        rc, _, err = self.run_trainer()
        self.assertEqual(rc, 2)
        self.assertIn("actor_rollout_ref.actor.clip_ratio_c must be a number", err)
        self.write("ppo.yaml", config(steps=1, est="gae"))  # gae needs a critic: GRPO_MAP has none
        rc, _, err = self.run_trainer()
        self.assertEqual(rc, 2)
        self.assertIn("gae needs a critic", err)
        self.write("ppo.yaml", config(steps=1, est="ppo_gae"))
        rc, _, err = self.run_trainer()
        self.assertEqual(rc, 2)
        self.assertIn("algorithm.adv_estimator: \"ppo_gae\" is not built", err)


if __name__ == "__main__":
    unittest.main()
