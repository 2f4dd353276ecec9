/* verl-trainer: runs actor / critic / rollout / reference role groups on their own devices and
 * treats reward as an external service (ARCHITECTURE.md, "The trainer").
 *
 *   verl-trainer --device-map FILE --check [--gpus N | --topology FILE] [--strict-topology]
 *       validates the device map (against N GPUs, a planned topology, or this machine) and
 *       prints the "Device mapping resolved" block and the topology check; touches no GPU
 *       unless neither --gpus nor --topology is given. Exit 0, or 2 on any problem. With --config
 *       the config is checked too (every key; verl's keys it does not use are listed; with RL
 *       sections what the RL loop needs of the map, unless --comm-check is given too).
 *   verl-trainer --config ppo.yaml [--device-map FILE] --comm-check [--steps N] ...
 *       starts the run: without a launcher around it (no mpirun/srun environment) it runs
 *       `mpirun -np 1+W` on itself (W = one worker per device of the map) and supervises it;
 *       under mpirun/srun rank 0 is the controller and ranks 1..W the workers. --comm-check
 *       runs the groups' communication check for total_training_steps steps: per step an
 *       all-reduce in every role group, the actor -> rollout weight-sync broadcast and a
 *       data-parallel control round trip, every result checked for its values, with
 *       timing_s/... and bandwidths per step.
 *   verl-trainer --config ppo.yaml [--device-map FILE] [--steps N] [--metrics FILE]
 *       the RL loop (PPO / GRPO / RLOO / REINFORCE++, vr_ppo.h) when the config has its sections
 *       (data, actor_rollout_ref, critic, algorithm): rewards from verl-reward-server over shm,
 *       checkpoints in trainer.default_local_dir, SIGTERM/SIGINT save and exit 0.
 *
 * Exit status: 0 success, 1 a run-time failure (a worker died, timed out, a collective gave
 * wrong values), 2 bad configuration, device map or command line.
 * Environment: VERL_COMM_PROFILE=1 (+ VERL_COMM_PROFILE_PATH) writes the communication trace
 * (vr_commprof.h); NCCL_NVLS_ENABLE=0 is set for every process the launcher starts;
 * VR_TRAINER_HOST names this process's host for the node check (under a launcher of your own:
 * one host standing in for several nodes of the map, each with its own CUDA_VISIBLE_DEVICES). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <mpi.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef VR_HAVE_NCCL
#include <cuda_runtime_api.h>
#endif

#include "vr_cli.h"
#include "vr_comm.h"
#include "vr_commprof.h"
#include "vr_control.h"
#include "vr_devmap.h"
#include "vr_generate.h"
#include "vr_ppo.h"
#include "vr_rlwork.h"
#include "vr_tcmd.h"
#include "vr_tconfig.h"
#include "vr_tmetrics.h"
#include "vr_topology.h"

#define ERRBUF (64 * 1024)

typedef struct vr_targs {
  const char *config, *device_map, *topology, *mpirun, *run_dir, *metrics, *fault;
  long crash_in_save; /* tests: --crash-in-save N (the controller _exit(9)s inside step N's save) */
  long hold_save;     /* tests: --hold-save N (step N's checkpoint files wait for .release files) */
  int gpus;          /* -1: not given */
  int check, comm_check, strict_topology, steps;
  double timeout_s;  /* 0: from the config */
  char **argv;
  int argc;
} vr_targs_t;

/* Commands of the communication check (vr_ctl_msg_t.cmd; 0 is stop). */
enum { CMD_STOP = 0, CMD_ALLREDUCE = 1, CMD_SYNC = 2, CMD_ECHO = 3, CMD_COPY = 4, CMD_COUNT };
static const char *const vr_cmd_names[CMD_COUNT] = {"stop", "all_reduce check", "weight_sync check",
                                                    "dp_split echo", "device copy rate"};

static void usage(FILE *f) {
  fprintf(f,
          "usage: verl-trainer --device-map FILE --check [--gpus N | --topology FILE] [--strict-topology]\n"
          "       verl-trainer --config ppo.yaml [--device-map FILE] --check [--gpus N | ...]   (the config too)\n"
          "       verl-trainer --config ppo.yaml [--device-map FILE] [--steps N] [--metrics FILE]   (the RL loop)\n"
          "       verl-trainer --config ppo.yaml [--device-map FILE] --comm-check [--steps N] [--timeout S]\n"
          "                    [--metrics FILE] [--run-dir DIR] [--mpirun PATH] [--strict-topology]\n"
          "       verl-trainer logprobs --model DIR [--device cpu|cuda] [--temperature T] < ids.jsonl\n"
          "       verl-trainer sft --model DIR --data FILE --save DIR2 --steps N --lr X [...]\n"
          "       verl-trainer generate --model DIR [--max-new-tokens N --temperature T --n N ...] < ids.jsonl\n"
          "       verl-trainer --version | --help   (verl-trainer logprobs|sft|generate --help for theirs)\n"
          "Tests of the failure paths: --inject-fault hang|exit:RANK:STEP, --crash-in-save N, --hold-save N.\n"
          "Exit status: 0 ok, 1 run-time failure, 2 bad configuration. See docs/operations.md, \"verl-trainer\".\n");
}


static int parse_args(int argc, char **argv, vr_targs_t *a) {
  memset(a, 0, sizeof *a);
  a->gpus = -1;
  a->argc = argc;
  a->argv = argv;
  enum { O_CHECK = 256, O_COMM_CHECK, O_STRICT, O_GPUS, O_TOPO, O_STEPS, O_TIMEOUT, O_MPIRUN, O_RUNDIR, O_METRICS,
         O_FAULT, O_VERSION, O_CRASH, O_HOLD };
  static const struct option lo[] = {{"config", required_argument, 0, 'c'},
                                     {"device-map", required_argument, 0, 'd'},
                                     {"check", no_argument, 0, O_CHECK},
                                     {"comm-check", no_argument, 0, O_COMM_CHECK},
                                     {"strict-topology", no_argument, 0, O_STRICT},
                                     {"gpus", required_argument, 0, O_GPUS},
                                     {"topology", required_argument, 0, O_TOPO},
                                     {"steps", required_argument, 0, O_STEPS},
                                     {"timeout", required_argument, 0, O_TIMEOUT},
                                     {"mpirun", required_argument, 0, O_MPIRUN},
                                     {"run-dir", required_argument, 0, O_RUNDIR},
                                     {"metrics", required_argument, 0, O_METRICS},
                                     {"inject-fault", required_argument, 0, O_FAULT},
                                     {"crash-in-save", required_argument, 0, O_CRASH},
                                     {"hold-save", required_argument, 0, O_HOLD},
                                     {"version", no_argument, 0, O_VERSION},
                                     {"help", no_argument, 0, 'h'},
                                     {0, 0, 0, 0}};
  opterr = 0;
  int c;
  uint64_t v;
  while ((c = getopt_long(argc, argv, ":c:d:h", lo, NULL)) != -1) {
    switch (c) {
      case 'c': a->config = optarg; break;
      case 'd': a->device_map = optarg; break;
      case O_CHECK: a->check = 1; break;
      case O_COMM_CHECK: a->comm_check = 1; break;
      case O_STRICT: a->strict_topology = 1; break;
      case O_GPUS:
        if (vr_cli_parse_u64("verl-trainer", "--gpus", optarg, 0, VR_TOPO_MAX_GPUS, &v)) return 2;
        a->gpus = (int)v;
        break;
      case O_TOPO: a->topology = optarg; break;
      case O_STEPS:
        if (vr_cli_parse_u64("verl-trainer", "--steps", optarg, 1, 100000000, &v)) return 2;
        a->steps = (int)v;
        break;
      case O_TIMEOUT:
        if (vr_cli_parse_u64("verl-trainer", "--timeout", optarg, 1, 86400, &v)) return 2;
        a->timeout_s = (double)v;
        break;
      case O_MPIRUN: a->mpirun = optarg; break;
      case O_RUNDIR: a->run_dir = optarg; break;
      case O_METRICS: a->metrics = optarg; break;
      case O_FAULT: a->fault = optarg; break;
      case O_CRASH:
        if (vr_cli_parse_u64("verl-trainer", "--crash-in-save", optarg, 1, 100000000, &v)) return 2;
        a->crash_in_save = (long)v;
        break;
      case O_HOLD:
        if (vr_cli_parse_u64("verl-trainer", "--hold-save", optarg, 1, 100000000, &v)) return 2;
        a->hold_save = (long)v;
        break;
      case O_VERSION: {
        char rt[64];
        vr_cli_version(stdout, "verl-trainer", vr_topology_runtime(rt, sizeof rt));
        return 0;
      }
      case 'h': usage(stdout); return 0;
      default: return vr_cli_getopt_error("verl-trainer", c, argv, optind, optopt);
    }
  }
  if (optind != argc) {
    fprintf(stderr, "verl-trainer: unexpected argument \"%s\"\n", argv[optind]);
    usage(stderr);
    return 2;
  }
  if (a->gpus >= 0 && a->topology) {
    fprintf(stderr, "verl-trainer: --gpus and --topology both describe the machine; give one\n");
    return 2;
  }
  if (a->check) {
    if (!a->device_map && !a->config) {
      fprintf(stderr, "verl-trainer: --check needs --device-map FILE (or --config with trainer.device_map)\n");
      return 2;
    }
  } else if (!a->config) {
    usage(stderr);
    return 2;
  }
  return -1; /* go on */
}

/* ---- fault injection (tests of the failure path) ----------------------------------------- */

typedef struct vr_fault {
  int kind; /* 0 none, 1 hang, 2 exit */
  int rank, step;
} vr_fault_t;

static int parse_fault(const char *s, vr_fault_t *f) {
  memset(f, 0, sizeof *f);
  if (!s) return 0;
  char kind[16];
  int rank, step, n = 0;
  if (sscanf(s, "%15[a-z]:%d:%d%n", kind, &rank, &step, &n) != 3 || s[n] || rank < 1 || step < 1 ||
      (strcmp(kind, "hang") && strcmp(kind, "exit"))) {
    fprintf(stderr, "verl-trainer: --inject-fault takes hang:RANK:STEP or exit:RANK:STEP (RANK >= 1), not \"%s\"\n", s);
    return -1;
  }
  f->kind = strcmp(kind, "hang") == 0 ? 1 : 2;
  f->rank = rank;
  f->step = step;
  return 0;
}

/* ---- configuration ------------------------------------------------------------------------- */

static int load_topology(const vr_targs_t *a, vr_topology_t *t, int quiet) {
  char err[ERRBUF];
  if (a->topology) {
    if (vr_topology_load(a->topology, t, err, sizeof err) != 0) {
      if (!quiet) fprintf(stderr, "%s", err);
      return 2;
    }
  } else if (a->gpus >= 0) {
    vr_topology_gpus(a->gpus, t);
  } else {
    vr_topology_local(t);
  }
  return 0;
}

/* Loads config + device map (+ topology). quiet: another rank reports. Returns 0 or 2. */
static int load_all(const vr_targs_t *a, vr_tconfig_t *cfg, vr_devmap_t *map, vr_topology_t *topo, int quiet) {
  char err[ERRBUF];
  vr_tconfig_defaults(cfg);
  if (a->config && vr_tconfig_load(a->config, cfg, err, sizeof err) != 0) {
    if (!quiet) fprintf(stderr, "%s", err);
    return 2;
  }
  const char *mp = a->device_map ? a->device_map : cfg->device_map;
  if (!mp || !*mp) {
    if (!quiet)
      fprintf(stderr, "verl-trainer: no device map. HINT: --device-map device_map.yaml, or trainer.device_map in %s\n",
              a->config);
    return 2;
  }
  /* ranks other than 0 skip the machine: rank 0 has checked the same files against it */
  memset(&topo->shape, 0, sizeof topo->shape);
  if (!quiet && load_topology(a, topo, quiet)) return 2;
  if (vr_devmap_load(mp, topo->shape.n_nodes > 0 ? &topo->shape : NULL, map, err, sizeof err) != 0) {
    if (!quiet) fprintf(stderr, "%s", err);
    return 2;
  }
  if (!quiet && err[0]) fprintf(stderr, "%s", err); /* warnings */
  int n_nodes = 0, max_gpus = 0;
  for (int i = 0; i < map->n_workers; i++) {
    if (map->workers[i].node + 1 > n_nodes) n_nodes = map->workers[i].node + 1;
    if (map->workers[i].kind == VR_DEVICE_GPU && map->workers[i].index + 1 > max_gpus)
      max_gpus = map->workers[i].index + 1;
  }
  if (cfg->nnodes > 0 && n_nodes > cfg->nnodes) {
    if (!quiet)
      fprintf(stderr, "%s: error: trainer.nnodes is %d but the device map %s uses %d nodes. HINT: make them agree\n",
              cfg->path, cfg->nnodes, map->path, n_nodes);
    return 2;
  }
  /* the RL loop's needs of the map (a critic for gae, ...): also under --check, unless the config
   * is checked for --comm-check (which reads only the trainer section) */
  if (!a->comm_check && cfg->rl.present && vr_ppo_check(cfg, map, err, sizeof err) != 0) {
    if (!quiet) fprintf(stderr, "%s", err);
    return 2;
  }
  if (cfg->n_gpus_per_node > 0 && max_gpus > cfg->n_gpus_per_node) {
    if (!quiet)
      fprintf(stderr,
              "%s: error: trainer.n_gpus_per_node is %d but the device map %s uses GPU %d. HINT: make them agree\n",
              cfg->path, cfg->n_gpus_per_node, map->path, max_gpus - 1);
    return 2;
  }
  return 0;
}

static void print_resolved(const vr_devmap_t *map, FILE *f) {
  char buf[16384];
  vr_devmap_describe(map, buf, sizeof buf);
  fprintf(f, "[INFO] %s", buf);
  vr_devmap_json(map, buf, sizeof buf);
  fprintf(f, "[INFO] device_map %s\n", buf);
}

/* What a topology check without warnings says: that the links fit only where they were known. */
static const char *verdict_ok(const vr_topology_t *t, const vr_devmap_t *m) {
  if (m->n_workers > 0 && m->workers[0].kind == VR_DEVICE_CPU) return "cpu slots: no GPU links to check";
  if (strncmp(t->source, "--gpus", 6) == 0)
    return "links not known, not checked (--topology FILE or the machine itself checks them)";
  return "every all-reducing group fits its links";
}

/* Topology verdict; returns 2 when --strict-topology turns warnings into an error. */
static int topology_verdict(const vr_targs_t *a, const vr_topology_t *t, const vr_devmap_t *m, FILE *f) {
  char buf[ERRBUF];
  int n = vr_topology_check(t, m, buf, sizeof buf);
  fprintf(f, "[INFO] topology (%s): %s\n", t->source, n ? "see warnings" : verdict_ok(t, m));
  if (n) fprintf(f, "%s", buf);
  if (n && a->strict_topology) {
    fprintf(stderr, "verl-trainer: error: %d pair(s) of GPUs in all-reducing groups lack NVLink and "
                    "--strict-topology is set. HINT: regroup the roles along NVLink domains\n", n);
    return 2;
  }
  return 0;
}

/* ---- launcher (no mpirun/srun around us) --------------------------------------------------- */

static int under_launcher(void) {
  return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK") || getenv("SLURM_PROCID");
}

static volatile sig_atomic_t g_child_pid; /* the mpirun child, for the signal forwarder */
static char g_ctl_pidfile[1100];          /* <run_dir>/controller.pid: the RL controller's pid */

/* SIGINT/SIGTERM: to the RL controller when it has said where it is (it saves a checkpoint and
 * stops the workers; mpirun itself would abort the job), else to mpirun. Async-signal-safe:
 * open/read/close/kill only. */
static void forward_signal(int sig) {
  int fd = g_ctl_pidfile[0] ? open(g_ctl_pidfile, O_RDONLY) : -1;
  if (fd >= 0) {
    char b[24];
    ssize_t n = read(fd, b, sizeof b - 1);
    close(fd);
    long pid = 0;
    for (ssize_t i = 0; i < n && b[i] >= '0' && b[i] <= '9'; i++) pid = pid * 10 + (b[i] - '0');
    if (pid > 1 && kill((pid_t)pid, sig) == 0) return;
  }
  if (g_child_pid > 0) kill((pid_t)g_child_pid, sig);
}

/* After a failed run: names the rank mpirun reported (or every rank not done) from the
 * workers' status files. */
static void report_failure(const char *run_dir, int culprit, int world) {
  for (int r = 1; r < world; r++) {
    if (culprit > 0 && r != culprit) continue;
    char path[1200], line[600] = "";
    snprintf(path, sizeof path, "%s/rank-%d.status", run_dir, r);
    FILE *f = fopen(path, "r");
    if (f) {
      if (!fgets(line, sizeof line, f)) line[0] = 0;
      fclose(f);
    }
    line[strcspn(line, "\n")] = 0;
    if (culprit > 0 || !strstr(line, "state done"))
      fprintf(stderr, "verl-trainer: worker rank %d %s: %s\n", r, culprit > 0 ? "died" : "did not finish",
              line[0] ? line : "(no status: it did not start)");
  }
}

static int launch(const vr_targs_t *a, const vr_tconfig_t *cfg, const vr_devmap_t *map) {
  char run_dir[1024];
  if (a->run_dir || cfg->run_dir[0]) {
    snprintf(run_dir, sizeof run_dir, "%s", a->run_dir ? a->run_dir : cfg->run_dir);
    if (mkdir(run_dir, 0755) != 0 && errno != EEXIST) {
      fprintf(stderr, "verl-trainer: cannot create --run-dir %s: %s\n", run_dir, strerror(errno));
      return 2;
    }
  } else {
    const char *tmp = getenv("TMPDIR");
    snprintf(run_dir, sizeof run_dir, "%s/verl-trainer-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(run_dir)) {
      fprintf(stderr, "verl-trainer: cannot create a run directory under %s: %s\n", tmp ? tmp : "/tmp", strerror(errno));
      return 1;
    }
  }
  setenv("VR_TRAINER_RUN_DIR", run_dir, 1);
  snprintf(g_ctl_pidfile, sizeof g_ctl_pidfile, "%s/controller.pid", run_dir);
  unlink(g_ctl_pidfile);
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  char np[16], self[4096];
  const int world = 1 + map->n_workers;
  snprintf(np, sizeof np, "%d", world);
  ssize_t sl = readlink("/proc/self/exe", self, sizeof self - 1);
  if (sl <= 0) {
    fprintf(stderr, "verl-trainer: cannot find its own executable (/proc/self/exe)\n");
    return 1;
  }
  self[sl] = 0;
  const char *mpirun = a->mpirun ? a->mpirun : "mpirun";
  char **av = calloc((size_t)a->argc + 32, sizeof *av);
  int k = 0;
  av[k++] = (char *)mpirun;
  av[k++] = "-np";
  av[k++] = np;
  av[k++] = "--oversubscribe";
  av[k++] = "--bind-to";
  av[k++] = "none";
  if (geteuid() == 0) av[k++] = "--allow-run-as-root";
  const char *exports[] = {"VR_TRAINER_RUN_DIR", "NCCL_NVLS_ENABLE", "VERL_COMM_PROFILE", "VERL_COMM_PROFILE_PATH",
                           "LD_LIBRARY_PATH", "NCCL_DEBUG", "CUDA_VISIBLE_DEVICES"};
  for (size_t i = 0; i < sizeof exports / sizeof *exports; i++)
    if (getenv(exports[i])) {
      av[k++] = "-x";
      av[k++] = (char *)exports[i];
    }
  av[k++] = self;
  for (int i = 1; i < a->argc; i++) av[k++] = a->argv[i];
  av[k] = NULL;

  /* a reused run directory: an earlier run's status files must not be mistaken for this one's */
  for (int r = 0; r < world; r++) {
    char path[1200];
    snprintf(path, sizeof path, "%s/rank-%d.status", run_dir, r);
    unlink(path);
    snprintf(path, sizeof path, "%s/rank-%d.status.tmp", run_dir, r);
    unlink(path);
  }
  int errpipe[2];
  if (pipe(errpipe) != 0) return 1;
  /* forward SIGINT/SIGTERM to mpirun; installed (signals blocked) before the fork so none can
   * kill us and orphan it in between; SA_RESTART keeps the stderr forwarder reading */
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = forward_signal;
  sa.sa_flags = SA_RESTART;
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigaddset(&block, SIGTERM);
  sigprocmask(SIG_BLOCK, &block, &old);
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  fprintf(stderr, "[INFO] verl-trainer: starting %d processes (1 controller + %d workers) with %s; status files in %s\n",
          world, map->n_workers, mpirun, run_dir);
  pid_t pid = fork();
  if (pid < 0) {
    sigprocmask(SIG_SETMASK, &old, NULL);
    return 1;
  }
  if (pid == 0) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    sigprocmask(SIG_SETMASK, &old, NULL);
    /* a process group of its own: a terminal's Ctrl-C reaches only this launcher, which forwards
     * it (to the RL controller, which saves and stops cleanly; else to mpirun). No stdin: a
     * background group must not read the terminal, and no rank reads it. */
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* outside our group, mpirun must still end with us */
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0), close(devnull);
    dup2(errpipe[1], 2);
    close(errpipe[0]);
    close(errpipe[1]);
    execvp(mpirun, av);
    fprintf(stderr, "verl-trainer: cannot run %s: %s. HINT: apt-get install openmpi-bin, or --mpirun PATH\n", mpirun,
            strerror(errno));
    _exit(127);
  }
  free(av);
  close(errpipe[1]);
  g_child_pid = pid;
  sigprocmask(SIG_SETMASK, &old, NULL);
  /* forward mpirun's stderr, remembering the rank it says failed */
  int culprit = 0;
  FILE *ef = fdopen(errpipe[0], "r");
  char line[4096];
  for (;;) {
    if (!ef) break;
    if (!fgets(line, sizeof line, ef)) {
      if (ferror(ef) && errno == EINTR) { /* a forwarded signal; keep reading */
        clearerr(ef);
        continue;
      }
      break;
    }
    fputs(line, stderr);
    /* Open MPI 4 names the failed process as "process rank N with PID ..." (a signal) or
     * "Process name: [[job,1],N]" (a non-zero exit) */
    const char *p = strstr(line, "process rank "), *q = strstr(line, "Process name: [[");
    int r, j1, j2;
    if (p && culprit == 0 && sscanf(p, "process rank %d", &r) == 1 && r > 0) culprit = r;
    if (q && culprit == 0 && sscanf(q, "Process name: [[%d,%d],%d]", &j1, &j2, &r) == 3 && r > 0) culprit = r;
  }
  if (ef) fclose(ef);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  g_child_pid = 0;
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code != 0) {
    report_failure(run_dir, culprit, world);
    fprintf(stderr, "verl-trainer: the run failed (mpirun exit status %d)\n", code);
    return code == 2 ? 2 : 1;
  }
  unlink(g_ctl_pidfile);
  if (!a->run_dir && !cfg->run_dir[0]) {
    for (int r = 0; r < world; r++) {
      char path[1200];
      snprintf(path, sizeof path, "%s/rank-%d.status", run_dir, r);
      unlink(path);
    }
    rmdir(run_dir);
  }
  return 0;
}

/* ---- workers: the communication check ------------------------------------------------------ */

static float ar_value(size_t i, uint64_t step) { return (float)((i % 7) + (step % 3) + 1); }
static unsigned char sync_byte(size_t i, uint64_t step) { return (unsigned char)((i * 31u + step * 7u) & 0xffu); }

static void hang_forever(void) {
  for (;;) pause();
}

static void worker_loop(vr_world_t *w, vr_ctl_t *c, const vr_fault_t *fault) {
  vr_ctl_status(c, "idle", NULL);
  for (;;) {
    vr_ctl_msg_t m;
    void *payload = NULL;
    if (vr_ctl_recv(c, &m, &payload) != 0) vr_world_abort(w, 1, "malformed command from the controller");
    double val[4] = {0};
    if (m.cmd == CMD_STOP) {
      vr_ctl_status(c, "done", &m);
      vr_ctl_reply(c, &m, 0, NULL, NULL, 0);
      free(payload);
      return;
    }
    if (fault->kind && fault->rank == w->rank && m.arg[1] == (uint64_t)fault->step) {
      fprintf(stderr, "verl-trainer: rank %d: injected fault (%s at step %d)\n", w->rank,
              fault->kind == 1 ? "hang" : "exit", fault->step);
      fflush(stderr);
      if (fault->kind == 1) hang_forever();
      _exit(3);
    }
    vr_group_t *g = m.group < VR_GROUP_COUNT ? w->groups[m.group] : NULL;
    int32_t st = 0;
    void *reply = NULL;
    size_t reply_bytes = 0;
    if (!g) {
      st = -1;
    } else if (m.cmd == CMD_ALLREDUCE) {
      size_t n = (size_t)m.arg[0];
      float *host = malloc(n * sizeof *host), *dev = vr_group_alloc(g, n * sizeof(float));
      if (!host || !dev) {
        st = -2;
      } else {
        float mine = (float)(vr_group_rank(g) + 1);
        for (size_t i = 0; i < n; i++) host[i] = mine * ar_value(i, m.arg[1]);
        st = vr_group_upload(g, dev, host, n * sizeof *host);
        if (st == 0) st = vr_group_barrier(w, g);
        double t0 = vr_commprof_now_us();
        if (st == 0) st = vr_group_allreduce_f32(w, g, dev, n);
        double t1 = vr_commprof_now_us();
        if (st == 0) {
          vr_group_download(g, host, dev, n * sizeof *host);
          int k = vr_group_size(g);
          float tri = (float)(k * (k + 1) / 2);
          for (size_t i = 0; i < n; i++)
            if (host[i] != tri * ar_value(i, m.arg[1])) {
              fprintf(stderr, "verl-trainer: rank %d: %s all-reduce: element %zu is %g, want %g\n", w->rank,
                      vr_group_name(m.group), i, host[i], tri * ar_value(i, m.arg[1]));
              st = -3;
              break;
            }
          val[0] = (t1 - t0) * 1e-6;
        }
      }
      if (st == VR_COMM_ETIMEDOUT) {
        /* the timed-out collective may still write into its buffers: leave them (the
         * controller ends the run) */
        fprintf(stderr, "verl-trainer: rank %d: %s all-reduce timed out waiting for its peers\n", w->rank,
                vr_group_name(m.group));
      } else {
        free(host);
        vr_group_free_buf(g, dev);
      }
    } else if (m.cmd == CMD_SYNC) {
      size_t n = (size_t)m.arg[0];
      unsigned char *host = malloc(n ? n : 1), *dev = vr_group_alloc(g, n);
      if (!host || !dev) {
        st = -2;
      } else {
        int root = vr_group_rank(g) == 0;
        for (size_t i = 0; i < n; i++) host[i] = root ? sync_byte(i, m.arg[1]) : 0;
        st = vr_group_upload(g, dev, host, n);
        if (st == 0) st = vr_group_barrier(w, g);
        double t0 = vr_commprof_now_us();
        if (st == 0) st = vr_group_bcast(w, g, dev, n, 0);
        double t1 = vr_commprof_now_us();
        if (st == 0) {
          vr_group_download(g, host, dev, n);
          for (size_t i = 0; i < n; i++)
            if (host[i] != sync_byte(i, m.arg[1])) {
              fprintf(stderr, "verl-trainer: rank %d: weight sync: byte %zu is %u, want %u\n", w->rank, i, host[i],
                      sync_byte(i, m.arg[1]));
              st = -3;
              break;
            }
          val[0] = (t1 - t0) * 1e-6;
        }
      }
      if (st == VR_COMM_ETIMEDOUT) {
        fprintf(stderr, "verl-trainer: rank %d: weight-sync broadcast timed out waiting for its peers\n", w->rank);
      } else {
        free(host);
        vr_group_free_buf(g, dev);
      }
    } else if (m.cmd == CMD_ECHO) {
      size_t n = (size_t)(m.payload_bytes / sizeof(int64_t));
      int64_t *x = payload;
      for (size_t i = 0; i < n; i++) x[i] = x[i] * 2 + 1;
      reply = payload;
      reply_bytes = n * sizeof(int64_t);
      val[0] = vr_group_rank(g);
    } else if (m.cmd == CMD_COPY) {
      /* the device's own copy rate: the ceiling a weight sync inside one device can reach */
      size_t n = (size_t)m.arg[0];
      void *a = vr_group_alloc(g, n), *b = vr_group_alloc(g, n);
      if (!a || !b) {
        st = -2;
      } else {
#ifdef VR_HAVE_NCCL
        if (vr_group_is_device(g)) {
          int ok = cudaMemset(a, 1, n) == cudaSuccess && cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice) == cudaSuccess &&
                   cudaDeviceSynchronize() == cudaSuccess;
          double t0 = vr_commprof_now_us();
          for (int it = 0; it < 5 && ok; it++) ok = cudaMemcpy(b, a, n, cudaMemcpyDeviceToDevice) == cudaSuccess;
          ok = ok && cudaDeviceSynchronize() == cudaSuccess;
          val[0] = (vr_commprof_now_us() - t0) * 1e-6 / 5;
          if (!ok) {
            fprintf(stderr, "verl-trainer: rank %d: device copy on %s failed: %s\n", w->rank, w->peers[w->rank].device,
                    cudaGetErrorString(cudaGetLastError()));
            st = VR_COMM_EFAIL;
          }
        } else
#endif
        {
          memset(a, 1, n);
          memcpy(b, a, n);
          double t0 = vr_commprof_now_us();
          for (int it = 0; it < 5; it++) memcpy(b, a, n);
          val[0] = (vr_commprof_now_us() - t0) * 1e-6 / 5;
          val[1] = ((volatile unsigned char *)b)[n / 2]; /* keep the copies */
        }
      }
      vr_group_free_buf(g, a);
      vr_group_free_buf(g, b);
    } else {
      st = -1;
    }
    if (vr_ctl_reply(c, &m, st, val, reply, reply_bytes) != 0) vr_world_abort(w, 1, "cannot reply to the controller");
    free(payload);
  }
}

/* ---- controller ------------------------------------------------------------------------------ */

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Checks replies; on a failed member ends the run naming it. */
static void expect_ok(vr_world_t *w, const char *what, const vr_ctl_reply_t *r, int n) {
  for (int k = 0; k < n; k++)
    if (r[k].status != 0) {
      const vr_peer_t *p = &w->peers[r[k].rank];
      vr_world_abort(w, 1, "%s failed on worker rank %d (device %s, host %s): status %d", what, r[k].rank, p->device,
                     p->host, r[k].status);
    }
}

static int controller(vr_world_t *w, vr_ctl_t *c, const vr_tconfig_t *cfg, const vr_targs_t *a) {
  vr_tmetrics_t tm;
  const char *mf = a->metrics ? a->metrics : cfg->metrics_file;
  const int steps = a->steps ? a->steps : cfg->total_training_steps;
  if (vr_tm_open(&tm, mf, stdout, steps) != 0) {
    fprintf(stderr, "verl-trainer: cannot open the metrics file %s: %s. HINT: trainer.metrics_file or --metrics names "
                    "a writable path (\"\" for none)\n", mf, strerror(errno));
    return 2;
  }
  const uint64_t ar_n = cfg->allreduce_bytes / sizeof(float), sync_n = cfg->sync_bytes;
  vr_ctl_reply_t rep[VR_DEVMAP_MAX_DEVICES];
  /* once: each worker's device copy rate, the ceiling for a weight sync within one device */
  {
    uint64_t arg[4] = {sync_n, 0, 0, 0};
    int n = vr_ctl_dispatch(c, VR_GROUP_WEIGHT_SYNC, VR_DISPATCH_ONE_TO_ALL, CMD_COPY, arg, NULL, 0, 0, NULL, 0, NULL,
                            rep, VR_DEVMAP_MAX_DEVICES);
    expect_ok(w, "device copy", rep, n);
    for (int k = 0; k < n; k++)
      if (rep[k].value[0] > 0)
        printf("[INFO] %s: device copy %.2f GB/s (%llu bytes, read + write counted once)\n",
               w->peers[rep[k].rank].device, (double)sync_n / rep[k].value[0] / 1e9, (unsigned long long)sync_n);
  }
  int64_t *echo = NULL, *echo_back = NULL;
  const size_t echo_n = 4096;
  echo = malloc(echo_n * sizeof *echo);
  echo_back = malloc(echo_n * sizeof *echo_back);
  for (int s = 1; s <= steps; s++) {
    const double t_step = mono_s();
    /* all-reduce per role group */
    for (int g = 0; g < VR_ROLE_COUNT; g++) {
      if (!w->map->roles[g].present) continue;
      uint64_t arg[4] = {ar_n, (uint64_t)s, 0, 0};
      const double t0 = mono_s();
      int n = vr_ctl_dispatch(c, (vr_group_id_t)g, VR_DISPATCH_ONE_TO_ALL, CMD_ALLREDUCE, arg, NULL, 0, 0, NULL, 0,
                              NULL, rep, VR_DEVMAP_MAX_DEVICES);
      expect_ok(w, "all-reduce check", rep, n);
      char name[64];
      snprintf(name, sizeof name, "allreduce_%s", vr_role_name((vr_role_t)g));
      vr_tm_time(&tm, name, mono_s() - t0);
      double slowest = 0;
      for (int k = 0; k < n; k++) slowest = rep[k].value[0] > slowest ? rep[k].value[0] : slowest;
      if (slowest > 0 && n > 1) { /* a one-rank all-reduce moves nothing: no bandwidth */
        double alg = (double)(ar_n * sizeof(float)) / slowest / 1e9;
        snprintf(name, sizeof name, "comm/%s/allreduce_busbw_gbps", vr_role_name((vr_role_t)g));
        vr_tm_set(&tm, name, alg * vr_commprof_bus_factor(VR_PROF_ALLREDUCE, n));
      }
    }
    /* weight sync actor -> rollout */
    {
      uint64_t arg[4] = {sync_n, (uint64_t)s, 0, 0};
      const double t0 = mono_s();
      int n = vr_ctl_dispatch(c, VR_GROUP_WEIGHT_SYNC, VR_DISPATCH_ONE_TO_ALL, CMD_SYNC, arg, NULL, 0, 0, NULL, 0,
                              NULL, rep, VR_DEVMAP_MAX_DEVICES);
      expect_ok(w, "weight-sync check", rep, n);
      vr_tm_time(&tm, "sync_weights", mono_s() - t0);
      double slowest = 0;
      for (int k = 0; k < n; k++) slowest = rep[k].value[0] > slowest ? rep[k].value[0] : slowest;
      /* one rank (actor and rollout on one device) broadcasts to nobody: no bandwidth; the
       * device copy rate printed at start is that layout's ceiling */
      if (slowest > 0 && n > 1) vr_tm_set(&tm, "comm/weight_sync/busbw_gbps", (double)sync_n / slowest / 1e9);
      vr_tm_set(&tm, "comm/weight_sync/ranks", n);
    }
    /* control round trip: DP split to the actor group, gathered back */
    {
      for (size_t i = 0; i < echo_n; i++) echo[i] = (int64_t)(i + (size_t)s * 1000003u);
      uint64_t arg[4] = {0, (uint64_t)s, 0, 0};
      size_t got = 0;
      const double t0 = mono_s();
      int n = vr_ctl_dispatch(c, VR_GROUP_ACTOR, VR_DISPATCH_DP_SPLIT, CMD_ECHO, arg, echo, sizeof *echo, echo_n,
                              echo_back, echo_n * sizeof *echo_back, &got, rep, VR_DEVMAP_MAX_DEVICES);
      expect_ok(w, "control round trip", rep, n);
      if (got != echo_n * sizeof *echo_back)
        vr_world_abort(w, 1, "control round trip: gathered %zu bytes, want %zu", got, echo_n * sizeof *echo_back);
      for (size_t i = 0; i < echo_n; i++)
        if (echo_back[i] != echo[i] * 2 + 1)
          vr_world_abort(w, 1, "control round trip: element %zu came back as %lld, want %lld", i,
                         (long long)echo_back[i], (long long)(echo[i] * 2 + 1));
      for (int k = 0; k < n; k++)
        if ((int)rep[k].value[0] != k)
          vr_world_abort(w, 1, "control round trip: reply %d came from group rank %d", k, (int)rep[k].value[0]);
      vr_tm_time(&tm, "control", mono_s() - t0);
    }
    vr_tm_time(&tm, "step", mono_s() - t_step);
    if (vr_tm_end_step(&tm, s) != 0) fprintf(stderr, "verl-trainer: writing the metrics file failed\n");
  }
  free(echo);
  free(echo_back);
  vr_tm_close(&tm);
  return 0;
}

/* ---- the RL loop ------------------------------------------------------------------------------ */

static volatile sig_atomic_t g_stop; /* SIGTERM/SIGINT on the controller: save and leave after the step */

static void on_stop_signal(int sig) {
  (void)sig;
  g_stop = 1;
}

/* Workers build their engines (every rank learns whether all did), then the controller runs
 * the loop while the workers serve it. Only the controller reacts to SIGTERM/SIGINT (mpirun
 * forwards them to every rank): it finishes the step, saves, and stops the workers. */
static int run_rl(vr_world_t *w, vr_ctl_t *c, const vr_tconfig_t *cfg, const vr_targs_t *a) {
  vr_rlworker_t *wk = NULL;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = w->rank == 0 ? on_stop_signal : SIG_IGN;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  int rc = w->rank == 0 ? 0 : vr_rlworker_init(w, cfg, &wk), any = 0;
  rc = rc != 0;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (any) {
    if (w->rank == 0) fprintf(stderr, "verl-trainer: a worker could not build its engines (see above)\n");
    vr_rlworker_free(wk);
    return 2;
  }
  c->cmd_names = vr_rlc_names;
  c->n_cmd_names = VR_RLC_COUNT;
  if (w->rank == 0) {
    /* where the launcher sends SIGTERM/SIGINT (forward_signal) */
    const char *rd = getenv("VR_TRAINER_RUN_DIR");
    if (rd && *rd) {
      char path[1100];
      snprintf(path, sizeof path, "%s/controller.pid", rd);
      FILE *pf = fopen(path, "w");
      if (pf) fprintf(pf, "%d\n", (int)getpid()), fclose(pf);
    }
    vr_ppo_args_t pa = {a->metrics, a->steps, &g_stop, a->crash_in_save, a->hold_save};
    rc = vr_ppo_run(w, c, cfg, &pa);
    vr_ctl_stop(c);
  } else {
    rc = vr_rlworker_loop(wk, c);
    vr_rlworker_free(wk);
  }
  return rc;
}

/* Gathers every rank's profile events on rank 0 and writes the trace there. */
static void write_profile(vr_world_t *w, vr_commprof_t *p) {
  size_t n = 0;
  const vr_commprof_event_t *ev = vr_commprof_events(p, &n);
  /* MPI counts and displacements are ints: each rank sends at most its share of 2 GiB (the
   * first events), and says when it had more */
  const size_t cap = (size_t)INT_MAX / (size_t)w->size / sizeof *ev;
  if (n > cap) {
    fprintf(stderr, "verl-trainer: rank %d: %zu profile events, only the first %zu go into the trace. HINT: profile "
                    "fewer steps\n", w->rank, n, cap);
    n = cap;
  }
  int cnt = (int)(n * sizeof *ev);
  int *counts = NULL, *displs = NULL;
  char *all = NULL, (*labels)[128] = NULL;
  char mine[128];
  snprintf(mine, sizeof mine, "%s", vr_commprof_label(p));
  if (w->rank == 0) {
    counts = calloc((size_t)w->size, sizeof *counts);
    displs = calloc((size_t)w->size, sizeof *displs);
    labels = calloc((size_t)w->size, sizeof *labels);
  }
  MPI_Gather(&cnt, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Gather(mine, 128, MPI_CHAR, labels, 128, MPI_CHAR, 0, MPI_COMM_WORLD);
  long total = 0;
  if (w->rank == 0) {
    for (int r = 0; r < w->size; r++) {
      displs[r] = (int)total;
      total += counts[r];
    }
    all = malloc(total ? (size_t)total : 1);
  }
  MPI_Gatherv(ev, cnt, MPI_BYTE, all, counts, displs, MPI_BYTE, 0, MPI_COMM_WORLD);
  if (w->rank == 0) {
    const char **lp = calloc((size_t)w->size, sizeof *lp);
    for (int r = 0; r < w->size; r++) lp[r] = labels[r];
    if (vr_commprof_write(vr_commprof_dir(p), (const vr_commprof_event_t *)all,
                          (size_t)total / sizeof(vr_commprof_event_t), lp, w->size, stdout) != 0)
      fprintf(stderr, "verl-trainer: cannot write the communication profile under %s: %s\n", vr_commprof_dir(p),
              strerror(errno));
    else
      printf("[INFO] communication profile: %s/nccl_trace.json (%ld events)\n", vr_commprof_dir(p),
             total / (long)sizeof(vr_commprof_event_t));
    free(lp);
  }
  free(counts), free(displs), free(all), free(labels);
}

/* What a process reads before it starts: the config, the device map, the machine (the topology
 * is 256 KiB: on the heap). */
typedef struct vr_loaded {
  vr_tconfig_t cfg;
  vr_devmap_t map;
  vr_topology_t topo;
} vr_loaded_t;

/* FNV-1a over what decides the processes and groups: the workers, their roles, each role's
 * devices and backend (not the path: nodes may keep the file elsewhere). */
static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static uint64_t devmap_hash(const vr_devmap_t *m) {
  uint64_t h = 0xcbf29ce484222325ull;
  h = fnv(h, &m->n_workers, sizeof m->n_workers);
  h = fnv(h, m->workers, (size_t)m->n_workers * sizeof m->workers[0]);
  h = fnv(h, m->worker_roles, (size_t)m->n_workers * sizeof m->worker_roles[0]);
  for (int r = 0; r < VR_ROLE_COUNT; r++) {
    const vr_role_map_t *rm = &m->roles[r];
    h = fnv(h, &rm->present, sizeof rm->present);
    h = fnv(h, &rm->backend, sizeof rm->backend);
    h = fnv(h, &rm->n_devices, sizeof rm->n_devices);
    h = fnv(h, rm->devices, (size_t)rm->n_devices * sizeof rm->devices[0]);
  }
  return h;
}

static int run_under_mpi(const vr_targs_t *a) {
  int provided = 0;
  if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    fprintf(stderr, "verl-trainer: MPI_Init failed\n");
    return 1;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  vr_loaded_t *L = calloc(1, sizeof *L);
  if (!L) {
    fprintf(stderr, "verl-trainer: rank %d: out of memory\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  int rc = load_all(a, &L->cfg, &L->map, &L->topo, rank != 0);
  vr_fault_t fault;
  if (rc == 0 && parse_fault(a->fault, &fault) != 0) rc = 2;
  const int rl_run = !a->comm_check && L->cfg.rl.present;
  if (rc == 0 && !a->comm_check && !rl_run) {
    if (rank == 0)
      fprintf(stderr, "verl-trainer: %s has no RL sections (data, actor_rollout_ref, algorithm): nothing to train. "
                      "HINT: see docs/operations.md \"RL loop\", or --comm-check for the communication check\n",
              a->config);
    rc = 2;
  }
  if (rc == 0 && rank == 0) {
    print_resolved(&L->map, stdout);
    if (L->cfg.unused[0]) printf("[INFO] config %s: not used by this build: %s\n", L->cfg.path, L->cfg.unused);
    rc = topology_verdict(a, &L->topo, &L->map, stdout);
    fflush(stdout);
  }
  /* every rank must have loaded the same map (on several nodes the files are each node's own):
   * one failure or one different map stops everyone, before any communicator exists */
  uint64_t h = rc == 0 ? devmap_hash(&L->map) : 0, hmin = 0, hmax = 0;
  int rc_any = 0;
  MPI_Allreduce(&rc, &rc_any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hmin, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hmax, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  if (rc_any == 0 && hmin != hmax) {
    if (h != hmin || rank == 0)
      fprintf(stderr, "verl-trainer: rank %d: its device map %s resolves differently from another rank's (the "
                      "files differ between nodes?). HINT: give every node the same config and device map\n",
              rank, L->map.path);
    rc_any = 2;
  }
  if (rc_any != 0) {
    if (rc != 0 && rank != 0) /* rank 0 printed its own problem; say which rank failed too */
      fprintf(stderr, "verl-trainer: rank %d could not load the config or device map (see above)\n", rank);
    MPI_Finalize();
    free(L);
    return rc_any;
  }
  /* the profile is on for all ranks or none (its gather is collective): rank 0 decides */
  const char *pe = getenv("VERL_COMM_PROFILE");
  int prof_on = pe && *pe && strcmp(pe, "0") != 0;
  MPI_Bcast(&prof_on, 1, MPI_INT, 0, MPI_COMM_WORLD);
  vr_commprof_t *prof = prof_on ? vr_commprof_new(getenv("VERL_COMM_PROFILE_PATH"), rank) : NULL;
  if (prof_on && !prof) {
    fprintf(stderr, "verl-trainer: rank %d: out of memory for the communication profile\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  vr_world_t w;
  /* VR_TRAINER_HOST: this process's host name for the node check (one machine simulating several) */
  rc = vr_world_init(&w, &L->map, a->timeout_s > 0 ? a->timeout_s : L->cfg.comm_timeout_s, prof,
                     getenv("VR_TRAINER_HOST"));
  if (rc != 0) {
    MPI_Abort(MPI_COMM_WORLD, rc == -2 ? 2 : 1);
    return 1;
  }
  vr_ctl_t c;
  const char *rd = getenv("VR_TRAINER_RUN_DIR");
  if (vr_ctl_init(&c, &w, rd ? rd : (a->run_dir ? a->run_dir : L->cfg.run_dir), vr_cmd_names, CMD_COUNT) != 0)
    vr_world_abort(&w, 1, "out of memory");
  if (rl_run) {
    rc = run_rl(&w, &c, &L->cfg, a);
  } else if (w.rank == 0) {
    rc = controller(&w, &c, &L->cfg, a);
    vr_ctl_stop(&c);
  } else {
    worker_loop(&w, &c, &fault);
  }
  if (prof) write_profile(&w, prof);
  vr_ctl_free(&c);
  vr_world_free(&w);
  vr_commprof_free(prof);
  MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
  MPI_Finalize();
  free(L);
  return rc;
}

/* Subcommands: `verl-trainer NAME ...` runs NAME's handler with argv starting at NAME. */
static const struct {
  const char *name;
  int (*run)(int argc, char **argv);
} vr_subcommands[] = {
    {"logprobs", vr_tcmd_logprobs},
    {"sft", vr_tcmd_sft},
    {"generate", vr_generate_main},
};

int main(int argc, char **argv) {
  for (size_t i = 0; argc > 1 && i < sizeof vr_subcommands / sizeof vr_subcommands[0]; i++)
    if (strcmp(argv[1], vr_subcommands[i].name) == 0) return vr_subcommands[i].run(argc - 1, argv + 1);
  vr_targs_t a;
  int rc = parse_args(argc, argv, &a);
  if (rc >= 0) return rc;
  if (a.check) {
    vr_loaded_t *L = calloc(1, sizeof *L);
    if (!L) return 1;
    rc = load_all(&a, &L->cfg, &L->map, &L->topo, 0) ? 2 : 0;
    if (rc == 0) {
      print_resolved(&L->map, stdout);
      if (L->cfg.unused[0]) printf("[INFO] config %s: not used by this build: %s\n", L->cfg.path, L->cfg.unused);
      rc = topology_verdict(&a, &L->topo, &L->map, stdout);
    }
    free(L);
    return rc;
  }
  if (under_launcher()) return run_under_mpi(&a);
  /* no launcher: validate here (errors once, exit 2), then run mpirun on ourselves */
  vr_loaded_t *L = calloc(1, sizeof *L);
  if (!L) return 1;
  if (load_all(&a, &L->cfg, &L->map, &L->topo, 0)) {
    free(L);
    return 2;
  }
  vr_fault_t fault;
  if (parse_fault(a.fault, &fault) != 0 || (!a.comm_check && !L->cfg.rl.present)) {
    if (!a.comm_check && !L->cfg.rl.present)
      fprintf(stderr, "verl-trainer: %s has no RL sections (data, actor_rollout_ref, algorithm): nothing to train. "
                      "HINT: see docs/operations.md \"RL loop\", or --comm-check for the communication check\n",
              a.config);
    free(L);
    return 2;
  }
  rc = launch(&a, &L->cfg, &L->map);
  free(L);
  return rc;
}
