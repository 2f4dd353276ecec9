/* vr_tcmd.c: verl-trainer's training-engine commands (vr_tcmd.h):
 *
 *   verl-trainer logprobs --model DIR [--device cpu|cuda] [--temperature T] [--input FILE]
 *                         [--max-tokens N] [--threads N]
 *       reads {"input_ids": [...]} lines (stdin or --input) and writes one {"logprobs": [...]}
 *       line per input line: log p(token i | tokens < i) for i = 1..n-1 at temperature T.
 *   verl-trainer sft --model DIR --data FILE --save DIR2 --steps N --lr X [--weight-decay W]
 *                    [--betas B1,B2] [--eps E] [--clip C] [--micro-batch-tokens N] [--device ...]
 *       N AdamW steps on loss = token-mean over the whole file of -log p(token i | tokens < i),
 *       i = 1..n-1 of every sequence (one batch, accumulated over micro-batches of at most N
 *       tokens), one {"step", "loss", "grad_norm"} line per step on stdout, then saves DIR2 as
 *       a Hugging Face checkpoint (vr_lm_save) plus the optimizer state (DIR2/optimizer.vrad).
 *   verl-trainer sft --resume DIR --data FILE --save DIR2 --steps N --lr X [...]
 *       continues from a checkpoint sft saved: parameters from DIR (the model), AdamW moments and
 *       the step count K from DIR/optimizer.vrad, then steps K+1..N (N is the total, as
 *       transformers' max_steps) with the same flags: equal bit for bit to one run of N steps.
 *
 * Exit status: 0 ok, 1 a run-time failure, 2 a bad command line, model or input file. */
#include "vr_tcmd.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "verl_reward/status.h"
#include "vr_cli.h"
#include "vr_lm.h"
#include "vr_log.h"
#include "vr_model.h"
#include "vr_tids.h"
#include "vr_train.h"

#define PROG "verl-trainer"

typedef struct vr_tcmd_args {
  const char *model, *device, *input, *data, *save, *cpu_gemm, *resume, *gemm_tune;
  double temperature, lr, wd, beta1, beta2, eps, clip;
  uint64_t steps, max_tokens, threads;
} vr_tcmd_args_t;

static void vr_tcmd_usage(FILE *f, const char *cmd) {
  if (strcmp(cmd, "logprobs") == 0)
    fprintf(f, "usage: verl-trainer logprobs --model DIR [--device cpu|cuda] [--temperature T] [--input FILE]\n"
               "                             [--max-tokens N] [--threads N] [--cpu-gemm auto|generic|avx2+fma]\n"
               "                             [--cuda-gemm-tune off|same-bits|any]\n"
               "Reads {\"input_ids\": [...]} lines (stdin, or --input FILE); writes one {\"logprobs\": [...]} line each:\n"
               "log p(token i | tokens before it) for i = 1..n-1 at temperature T (default 1).\n");
  else
    fprintf(f, "usage: verl-trainer sft --model DIR --data FILE --save DIR2 --steps N --lr X [--weight-decay W]\n"
               "                        [--betas B1,B2] [--eps E] [--clip C] [--micro-batch-tokens N] [--device cpu|cuda]\n"
               "                        [--threads N] [--cpu-gemm auto|generic|avx2+fma] [--cuda-gemm-tune off|same-bits|any]\n"
               "       verl-trainer sft --resume DIR (a checkpoint sft saved, instead of --model) ...: steps K+1..N after\n"
               "                        its K steps (parameters, AdamW moments, step count), same flags as the first run\n"
               "N AdamW steps (torch.optim.AdamW; defaults weight decay 0.01, betas 0.9,0.999, eps 1e-8, no clipping)\n"
               "on the token-mean of -log p over every token after the first of every sequence in FILE (one batch),\n"
               "then saves DIR2 (safetensors + config.json + generation_config.json + optimizer.vrad).\n");
  fprintf(f, "Exit status: 0 ok, 1 run-time failure, 2 bad command line, model or input. See docs/operations.md, \"Training engine\".\n");
}

static int vr_tcmd_parse(int argc, char **argv, const char *cmd, vr_tcmd_args_t *a) {
  memset(a, 0, sizeof *a);
  a->device = "cpu";
  a->temperature = 1.0;
  a->wd = 0.01, a->beta1 = 0.9, a->beta2 = 0.999, a->eps = 1e-8, a->lr = -1;
  a->max_tokens = 8192;
  enum { O_MODEL = 256, O_DEVICE, O_TEMP, O_INPUT, O_DATA, O_SAVE, O_STEPS, O_LR, O_WD, O_BETAS, O_EPS, O_CLIP, O_TUNE,
         O_MAXTOK, O_THREADS, O_GEMM, O_RESUME };
  static const struct option lo[] = {{"model", required_argument, 0, O_MODEL},
                                     {"device", required_argument, 0, O_DEVICE},
                                     {"temperature", required_argument, 0, O_TEMP},
                                     {"input", required_argument, 0, O_INPUT},
                                     {"data", required_argument, 0, O_DATA},
                                     {"save", required_argument, 0, O_SAVE},
                                     {"steps", required_argument, 0, O_STEPS},
                                     {"lr", required_argument, 0, O_LR},
                                     {"weight-decay", required_argument, 0, O_WD},
                                     {"betas", required_argument, 0, O_BETAS},
                                     {"eps", required_argument, 0, O_EPS},
                                     {"clip", required_argument, 0, O_CLIP},
                                     {"max-tokens", required_argument, 0, O_MAXTOK},
                                     {"micro-batch-tokens", required_argument, 0, O_MAXTOK},
                                     {"threads", required_argument, 0, O_THREADS},
                                     {"cpu-gemm", required_argument, 0, O_GEMM},
                                     {"resume", required_argument, 0, O_RESUME},
                                     {"cuda-gemm-tune", required_argument, 0, O_TUNE},
                                     {"help", no_argument, 0, 'h'},
                                     {0, 0, 0, 0}};
  const int lp = strcmp(cmd, "logprobs") == 0;
  opterr = 0;
  optind = 1;
  int c;
  while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
    int bad = 0;
    switch (c) {
      case O_MODEL: a->model = optarg; break;
      case O_DEVICE: a->device = optarg; break;
      case O_TUNE:
        if (strcmp(optarg, "off") && strcmp(optarg, "same-bits") && strcmp(optarg, "any"))
          return vr_cli_usage_error(PROG, "--cuda-gemm-tune '%s': expected off, same-bits or any", optarg);
        a->gemm_tune = optarg;
        break;
      case O_INPUT: a->input = optarg; break;
      case O_DATA: a->data = optarg; break;
      case O_SAVE: a->save = optarg; break;
      case O_GEMM: a->cpu_gemm = optarg; break;
      case O_RESUME: a->resume = optarg; break;
      case O_TEMP: bad = vr_cli_parse_double(PROG, "--temperature", optarg, 1e-6, 1e6, &a->temperature); break;
      case O_LR: bad = vr_cli_parse_double(PROG, "--lr", optarg, 0, 10, &a->lr); break;
      case O_WD: bad = vr_cli_parse_double(PROG, "--weight-decay", optarg, 0, 10, &a->wd); break;
      case O_EPS: bad = vr_cli_parse_double(PROG, "--eps", optarg, 0, 1, &a->eps); break;
      case O_CLIP: bad = vr_cli_parse_double(PROG, "--clip", optarg, 0, 1e9, &a->clip); break;
      case O_STEPS: bad = vr_cli_parse_u64(PROG, "--steps", optarg, 1, 100000000, &a->steps); break;
      case O_MAXTOK: bad = vr_cli_parse_u64(PROG, lp ? "--max-tokens" : "--micro-batch-tokens", optarg, 1, 1u << 24, &a->max_tokens); break;
      case O_THREADS: bad = vr_cli_parse_u64(PROG, "--threads", optarg, 0, 4096, &a->threads); break;
      case O_BETAS: {
        char *comma = strchr(optarg, ',');
        char b1[64];
        if (!comma || strchr(comma + 1, ',') || (size_t)(comma - optarg) >= sizeof b1)
          return vr_cli_usage_error(PROG, "--betas '%s': expected B1,B2 (e.g. 0.9,0.999)", optarg);
        memcpy(b1, optarg, (size_t)(comma - optarg));
        b1[comma - optarg] = 0;
        bad = vr_cli_parse_double(PROG, "--betas (B1)", b1, 0, 0.999999999, &a->beta1) ||
              vr_cli_parse_double(PROG, "--betas (B2)", comma + 1, 0, 0.999999999, &a->beta2);
        break;
      }
      case 'h': vr_tcmd_usage(stdout, cmd); return 0;
      default: return vr_cli_getopt_error(PROG, c, argv, optind, optopt);
    }
    if (bad) return VR_EXIT_USAGE;
  }
  if (optind != argc) return vr_cli_usage_error(PROG, "%s: unexpected argument \"%s\"", cmd, argv[optind]);
  if (a->resume && lp) return vr_cli_usage_error(PROG, "--resume is an sft flag");
  if (a->resume && a->model)
    return vr_cli_usage_error(PROG, "sft: --resume DIR loads the model from DIR; drop --model %s", a->model);
  if (a->resume) a->model = a->resume;
  if (!a->model) return vr_cli_usage_error(PROG, "%s needs --model DIR", cmd);
  if (!lp && (!a->data || !a->save || a->steps == 0 || a->lr < 0))
    return vr_cli_usage_error(PROG, "sft needs --data FILE, --save DIR, --steps N and --lr X");
  char canon[32], err[256];
  if (vr_model_device_parse(a->device, canon, sizeof canon, err, sizeof err) != 0 &&
      strncmp(a->device, "cuda", 4) != 0)
    return vr_cli_usage_error(PROG, "--device: %s", err);
  if (vr_model_dir_check(a->model, err, sizeof err) != 0) {
    fprintf(stderr, PROG ": %s\n", err);
    return VR_EXIT_USAGE;
  }
  return -1;
}

/* Loads the model and builds the engine (forward_only: log-probs alone, no gradient or optimizer
 * memory); 0 or an exit status. */
static int vr_tcmd_engine(const vr_tcmd_args_t *a, int forward_only, vr_lm_t **lm, vr_train_t **t) {
  int rc = vr_lm_load(a->model, NULL, lm);
  if (rc != 0) {
    fprintf(stderr, PROG ": cannot load %s as a causal LM: %s\n", a->model, vr_strerror(rc));
    return rc == VR_ERR_NOMEM ? VR_EXIT_FAIL : VR_EXIT_USAGE;
  }
  vr_train_options_t o;
  vr_train_options_init(&o);
  o.device = a->device;
  o.n_threads = (int)a->threads;
  o.cpu_gemm = a->cpu_gemm;
  o.cuda_gemm_tune = a->gemm_tune;
  o.forward_only = forward_only;
  /* a micro-batch holds at least one whole sequence (vr_train_split) */
  int max_pos = vr_lm_config(*lm)->max_position_embeddings;
  o.max_tokens = a->max_tokens > (uint64_t)max_pos ? (uint32_t)a->max_tokens : (uint32_t)max_pos;
  rc = vr_train_init(*lm, &o, t);
  if (rc != 0) {
    fprintf(stderr, PROG ": cannot start the training engine on %s: %s\n", a->device, vr_strerror(rc));
    return rc == VR_ERR_UNSUPPORTED || rc == VR_ERR_INVAL ? VR_EXIT_USAGE : VR_EXIT_FAIL;
  }
  return 0;
}

/* Reads the token-id lines of path (NULL or "-": stdin). */
static int vr_tcmd_read(const char *path, const vr_lm_t *lm, vr_tids_t *ids) {
  char why[1200];
  FILE *f = vr_tids_open(path, why, sizeof why);
  if (!f) {
    fprintf(stderr, PROG ": %s\n", why);
    return VR_EXIT_USAGE;
  }
  const vr_lm_config_t *c = vr_lm_config(lm);
  int rc = vr_tids_read(f, f == stdin ? "<stdin>" : path, c->vocab_size, c->max_position_embeddings, ids);
  if (f != stdin) fclose(f);
  return rc == 0 ? 0 : rc == VR_ERR_NOMEM || rc == VR_ERR_IO ? VR_EXIT_FAIL : VR_EXIT_USAGE;
}

/* Micro-batch k of the split (starts): its sequences with cu_seqlens rebased into cu (room for
 * ids->n + 1 entries, on the heap: a micro-batch may hold millions of one-token sequences). */
static vr_train_batch_t vr_tcmd_micro(const vr_tids_t *ids, const uint32_t *starts, uint32_t k, uint32_t *cu) {
  uint32_t q0 = starts[k], q1 = starts[k + 1], base = ids->cu[q0];
  for (uint32_t q = q0; q <= q1; q++) cu[q - q0] = ids->cu[q] - base;
  vr_train_batch_t b = {ids->ids + base, cu, q1 - q0, NULL};
  return b;
}

int vr_tcmd_logprobs(int argc, char **argv) {
  vr_tcmd_args_t a;
  int rc = vr_tcmd_parse(argc, argv, "logprobs", &a);
  if (rc >= 0) return rc;
  vr_lm_t *lm = NULL;
  vr_train_t *t = NULL;
  vr_tids_t ids = {0};
  float *lp = NULL;
  uint32_t *starts = NULL, *cu = NULL;
  rc = vr_tcmd_engine(&a, 1, &lm, &t);
  if (rc == 0) rc = vr_tcmd_read(a.input, lm, &ids);
  if (rc == 0 && ids.n > 0) {
    lp = malloc(ids.T * sizeof *lp);
    starts = malloc((ids.n + 1) * sizeof *starts), cu = malloc((ids.n + 1) * sizeof *cu);
    if (!lp || !starts || !cu) rc = VR_EXIT_FAIL;
  }
  uint32_t nb = rc == 0 && ids.n > 0 ? vr_train_split(ids.cu, ids.n, (uint32_t)a.max_tokens, starts) : 0;
  for (uint32_t k = 0; k < nb && rc == 0; k++) {
    uint32_t q0 = starts[k], q1 = starts[k + 1], base = ids.cu[q0];
    vr_train_batch_t b = vr_tcmd_micro(&ids, starts, k, cu);
    int e = vr_train_forward(t, &b, (float)a.temperature, lp + base, NULL, 0);
    if (e != 0) {
      fprintf(stderr, PROG ": forward failed at line %u: %s\n", ids.line[q0], vr_strerror(e));
      rc = VR_EXIT_FAIL;
      break;
    }
    for (uint32_t q = q0; q < q1; q++) {
      fputs("{\"logprobs\": [", stdout);
      for (uint32_t i = ids.cu[q] + 1; i < ids.cu[q + 1]; i++)
        printf("%s%.9g", i > ids.cu[q] + 1 ? ", " : "", lp[i]);
      fputs("]}\n", stdout);
    }
  }
  if (fflush(stdout) != 0 && rc == 0) rc = VR_EXIT_FAIL;
  free(lp);
  free(starts);
  free(cu);
  vr_tids_free(&ids);
  vr_train_free(t);
  vr_lm_free(lm);
  return rc;
}

/* One optimizer step of sft: loss and gradients over every micro-batch, then AdamW. */
static int vr_tcmd_sft_step(vr_train_t *t, const vr_tids_t *ids, const uint32_t *starts, uint32_t nb, uint32_t *cu,
                            float *lp, float *d, const vr_adamw_t *h, float clip, double *loss, double *norm) {
  const uint64_t N = ids->T - ids->n; /* predicted tokens */
  int rc = vr_train_zero_grad(t);
  double l = 0;
  for (uint32_t k = 0; k < nb && rc == 0; k++) {
    uint32_t q0 = starts[k], q1 = starts[k + 1], base = ids->cu[q0];
    vr_train_batch_t b = vr_tcmd_micro(ids, starts, k, cu);
    rc = vr_train_forward(t, &b, 1.0f, lp + base, NULL, 1);
    for (uint32_t q = q0; q < q1 && rc == 0; q++)
      for (uint32_t i = ids->cu[q] + 1; i < ids->cu[q + 1]; i++) l -= lp[i], d[i] = -1.0f / (float)N;
    if (rc == 0) rc = k + 1 == nb ? vr_train_backward_last(t, d + base, NULL) : vr_train_backward(t, d + base, NULL);
  }
  *loss = l / (double)N;
  if (rc == 0) rc = vr_train_step(t, h, clip, norm);
  return rc;
}

/* --save DIR must take the checkpoint before the first step (not after N steps of work): it is
 * created if absent, must be a directory, and a file must be creatable in it (a probe, removed;
 * access() says yes to root on any directory); the probe's name is as long as the longest name
 * vr_lm_save writes (generation_config.json.tmp), so a path it would refuse is refused here.
 * 0 or VR_EXIT_USAGE with the reason. */
static int vr_tcmd_save_check(const char *dir) {
  char probe[4096];
  struct stat sb;
  if (snprintf(probe, sizeof probe, "%s/.verl-trainer-probe-XXXXXX", dir) >= (int)sizeof probe)
    return vr_cli_usage_error(PROG, "--save: the path is too long (%zu bytes)", strlen(dir));
  if (mkdir(dir, 0755) != 0 && errno != EEXIST)
    return vr_cli_usage_error(PROG, "--save %s: cannot create the directory: %s", dir, strerror(errno));
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
    return vr_cli_usage_error(PROG, "--save %s: not a directory", dir);
  int fd = mkstemp(probe);
  if (fd < 0) return vr_cli_usage_error(PROG, "--save %s: cannot write there: %s", dir, strerror(errno));
  close(fd);
  unlink(probe);
  return 0;
}

int vr_tcmd_sft(int argc, char **argv) {
  vr_tcmd_args_t a;
  int rc = vr_tcmd_parse(argc, argv, "sft", &a);
  if (rc >= 0) return rc;
  if (vr_tcmd_save_check(a.save) != 0) return VR_EXIT_USAGE;
  vr_lm_t *lm = NULL;
  vr_train_t *t = NULL;
  vr_tids_t ids = {0};
  float *lp = NULL, *d = NULL;
  uint32_t *starts = NULL, *cu = NULL;
  rc = vr_tcmd_engine(&a, 0, &lm, &t);
  if (rc == 0) rc = vr_tcmd_read(a.data, lm, &ids);
  if (rc == 0 && ids.T <= ids.n) {
    fprintf(stderr, PROG ": %s has no token to train on (every sequence needs at least 2 tokens)\n", a.data);
    rc = VR_EXIT_USAGE;
  }
  if (rc == 0) {
    lp = malloc(ids.T * sizeof *lp), d = calloc(ids.T, sizeof *d), starts = malloc((ids.n + 1) * sizeof *starts);
    cu = malloc((ids.n + 1) * sizeof *cu);
    if (!lp || !d || !starts || !cu) rc = VR_EXIT_FAIL;
  }
  uint64_t done = 0; /* steps already taken (a resumed checkpoint's) */
  if (rc == 0 && a.resume) {
    char path[4096];
    int e = snprintf(path, sizeof path, "%s/optimizer.vrad", a.resume) >= (int)sizeof path ? VR_ERR_INVAL
                                                                                            : vr_train_load_optimizer(t, path);
    if (e != 0) {
      fprintf(stderr, PROG ": cannot resume from %s: %s\n", path, vr_strerror(e));
      rc = e == VR_ERR_NOMEM || e == VR_ERR_IO ? VR_EXIT_FAIL : VR_EXIT_USAGE;
    } else if ((done = (uint64_t)vr_train_step_count(t)) >= a.steps) {
      fprintf(stderr, PROG ": %s is at step %llu; --steps %llu (the total) leaves nothing to do\n", a.resume,
              (unsigned long long)done, (unsigned long long)a.steps);
      rc = VR_EXIT_USAGE;
    }
  }
  uint32_t nb = rc == 0 ? vr_train_split(ids.cu, ids.n, (uint32_t)a.max_tokens, starts) : 0;
  vr_adamw_t h = {(float)a.lr, (float)a.beta1, (float)a.beta2, (float)a.eps, (float)a.wd};
  for (uint64_t s = done + 1; s <= a.steps && rc == 0; s++) {
    double loss = 0, norm = 0;
    int e = vr_tcmd_sft_step(t, &ids, starts, nb, cu, lp, d, &h, (float)a.clip, &loss, &norm);
    if (e != 0) {
      fprintf(stderr, PROG ": sft step %llu failed: %s\n", (unsigned long long)s, vr_strerror(e));
      rc = VR_EXIT_FAIL;
      break;
    }
    printf("{\"step\": %llu, \"loss\": %.9g, \"grad_norm\": %.9g}\n", (unsigned long long)s, loss, norm);
    fflush(stdout);
  }
  if (rc == 0) {
    char path[4096];
    int e = vr_train_get_params(t, vr_lm_params(lm), vr_lm_n_floats(lm));
    if (e == 0) e = vr_lm_save(lm, a.save);
    if (e == 0 && snprintf(path, sizeof path, "%s/optimizer.vrad", a.save) >= (int)sizeof path) e = VR_ERR_INVAL;
    if (e == 0) e = vr_train_save_optimizer(t, path);
    if (e != 0) {
      fprintf(stderr, PROG ": cannot save %s: %s\n", a.save, vr_strerror(e));
      rc = VR_EXIT_FAIL;
    } else {
      fprintf(stderr, PROG ": saved %s after %llu steps\n", a.save, (unsigned long long)a.steps);
    }
  }
  free(lp);
  free(d);
  free(starts);
  free(cu);
  vr_tids_free(&ids);
  vr_train_free(t);
  vr_lm_free(lm);
  return rc;
}
