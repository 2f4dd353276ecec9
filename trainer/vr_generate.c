/* vr_generate.c: `verl-trainer generate` (vr_generate.h). */
#define _GNU_SOURCE /* getline */
#include "vr_generate.h"

#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_cli.h"
#include "vr_lm.h"
#include "vr_log.h"
#include "vr_gencfg.h"
#include "vr_line.h"
#include "vr_rollout_lm.h"
#include "vr_tids.h"

#define PROG "verl-trainer generate"
#define VR_GEN_MAX_STOP 64
#define VR_GEN_MAX_REPORTED 20 /* bad input lines reported before "and N more" */

typedef struct vr_gen_args {
  const char *model, *device, *input, *output, *cpu_gemm, *gemm_cache;
  vr_gen_params_t gp;
  vr_rollout_options_t opt;
  int32_t stop[VR_GEN_MAX_STOP];
  uint32_t n_stop;
  int ignore_eos, stats;
} vr_gen_args_t;

static void vr_gen_usage(FILE *f) {
  fprintf(f,
          "usage: verl-trainer generate --model DIR [--device cpu|cuda] [--max-new-tokens N] [--temperature T]\n"
          "         [--top-p P] [--top-k K] [--n N] [--seed S] [--stop-token-ids A,B,..] [--ignore-eos]\n"
          "         [--kv-cache-bytes B] [--block-size N] [--max-seqs N] [--max-batch-tokens N] [--max-model-len N]\n"
          "         [--threads N] [--cpu-gemm auto|generic|avx2+fma] [--gemm-tune on|off] [--gemm-cache FILE|off]\n"
          "         [--input FILE] [--output FILE] [--stats]\n"
          "Reads {\"input_ids\": [...]} lines, writes n {\"output_ids\": [...], \"logprobs\": [...], \"finish_reason\": ...}\n"
          "lines per prompt. Defaults: --max-new-tokens 16, --temperature 1 (0 = greedy), --top-p 1, --top-k -1 (off),\n"
          "--n 1, --seed 0, --kv-cache-bytes 268435456, --gemm-tune on (cuda: GEMM algorithms timed at warm-up and\n"
          "kept in --gemm-cache, default $VERL_GEMM_CACHE or ${XDG_CACHE_HOME:-$HOME/.cache}/verl-reward/gemm-tune.json,\n"
          "so later runs choose the same). See docs/operations.md, \"Rollout / generate\".\n");
}

/* "1,2,3" into the stop list. */
static int vr_gen_parse_stops(vr_gen_args_t *a, const char *text) {
  const char *p = text;
  while (*p) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 0 || v > INT32_MAX || (*end && *end != ',') || a->n_stop >= VR_GEN_MAX_STOP)
      return vr_cli_usage_error(PROG, "--stop-token-ids '%s': a comma-separated list of at most %d token ids", text,
                                VR_GEN_MAX_STOP);
    a->stop[a->n_stop++] = (int32_t)v;
    p = *end ? end + 1 : end;
  }
  return 0;
}

/* 0: go on; >= 0 exit status otherwise returned as rc (-1 = go on). */
static int vr_gen_parse(int argc, char **argv, vr_gen_args_t *a) {
  memset(a, 0, sizeof *a);
  vr_gen_params_init(&a->gp);
  a->gp.sample.temperature = 1.0f;
  vr_rollout_options_init(&a->opt);
  a->opt.kv_cache_bytes = 256ull << 20;
  a->device = "cpu";
  enum { O_MODEL = 256, O_DEVICE, O_MNT, O_TEMP, O_TOPP, O_TOPK, O_N, O_SEED, O_STOP, O_NOEOS, O_KV, O_BLOCK, O_SEQS,
         O_MBT, O_MML, O_THREADS, O_GEMM, O_IN, O_OUT, O_STATS, O_GTUNE, O_GCACHE };
  static const struct option lo[] = {
      {"model", required_argument, 0, O_MODEL},       {"device", required_argument, 0, O_DEVICE},
      {"max-new-tokens", required_argument, 0, O_MNT}, {"temperature", required_argument, 0, O_TEMP},
      {"top-p", required_argument, 0, O_TOPP},         {"top-k", required_argument, 0, O_TOPK},
      {"n", required_argument, 0, O_N},                {"seed", required_argument, 0, O_SEED},
      {"stop-token-ids", required_argument, 0, O_STOP}, {"ignore-eos", no_argument, 0, O_NOEOS},
      {"kv-cache-bytes", required_argument, 0, O_KV},  {"block-size", required_argument, 0, O_BLOCK},
      {"max-seqs", required_argument, 0, O_SEQS},      {"max-batch-tokens", required_argument, 0, O_MBT},
      {"max-model-len", required_argument, 0, O_MML},  {"threads", required_argument, 0, O_THREADS},
      {"cpu-gemm", required_argument, 0, O_GEMM},      {"input", required_argument, 0, O_IN},
      {"output", required_argument, 0, O_OUT},         {"stats", no_argument, 0, O_STATS},
      {"gemm-tune", required_argument, 0, O_GTUNE},    {"gemm-cache", required_argument, 0, O_GCACHE},
      {"help", no_argument, 0, 'h'},                   {0, 0, 0, 0}};
  opterr = 0;
  optind = 1;
  int c;
  uint64_t u;
  double d;
  while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
    switch (c) {
      case O_MODEL: a->model = optarg; break;
      case O_DEVICE: a->device = optarg; break;
      case O_MNT:
        if (vr_cli_parse_u64(PROG, "--max-new-tokens", optarg, 1, 1u << 24, &u)) return VR_EXIT_USAGE;
        a->gp.max_new_tokens = (uint32_t)u;
        break;
      case O_TEMP:
        if (vr_cli_parse_double(PROG, "--temperature", optarg, 0.0, 1e6, &d)) return VR_EXIT_USAGE;
        a->gp.sample.temperature = (float)d;
        break;
      case O_TOPP:
        if (vr_cli_parse_double(PROG, "--top-p", optarg, 1e-9, 1.0, &d)) return VR_EXIT_USAGE;
        a->gp.sample.top_p = (float)d;
        break;
      case O_TOPK:
        if (strcmp(optarg, "-1") == 0) {
          a->gp.sample.top_k = -1;
        } else {
          if (vr_cli_parse_u64(PROG, "--top-k", optarg, 0, INT32_MAX, &u)) return VR_EXIT_USAGE;
          a->gp.sample.top_k = (int32_t)u;
        }
        break;
      case O_N:
        if (vr_cli_parse_u64(PROG, "--n", optarg, 1, 4096, &u)) return VR_EXIT_USAGE;
        a->gp.n = (uint32_t)u;
        break;
      case O_SEED:
        if (vr_cli_parse_u64(PROG, "--seed", optarg, 0, UINT64_MAX, &u)) return VR_EXIT_USAGE;
        a->gp.seed = u;
        break;
      case O_STOP:
        if (vr_gen_parse_stops(a, optarg)) return VR_EXIT_USAGE;
        break;
      case O_NOEOS: a->ignore_eos = 1; break;
      case O_KV:
        if (vr_cli_parse_u64(PROG, "--kv-cache-bytes", optarg, 1, UINT64_MAX, &u)) return VR_EXIT_USAGE;
        a->opt.kv_cache_bytes = u;
        break;
      case O_BLOCK:
        if (vr_cli_parse_u64(PROG, "--block-size", optarg, 1, 4096, &u)) return VR_EXIT_USAGE;
        a->opt.block_size = (uint32_t)u;
        break;
      case O_SEQS:
        if (vr_cli_parse_u64(PROG, "--max-seqs", optarg, 1, 1u << 20, &u)) return VR_EXIT_USAGE;
        a->opt.max_seqs = (uint32_t)u;
        break;
      case O_MBT:
        if (vr_cli_parse_u64(PROG, "--max-batch-tokens", optarg, 1, 1u << 24, &u)) return VR_EXIT_USAGE;
        a->opt.max_batch_tokens = (uint32_t)u;
        break;
      case O_MML:
        if (vr_cli_parse_u64(PROG, "--max-model-len", optarg, 2, 1u << 24, &u)) return VR_EXIT_USAGE;
        a->opt.max_model_len = (uint32_t)u;
        break;
      case O_THREADS:
        if (vr_cli_parse_u64(PROG, "--threads", optarg, 0, 4096, &u)) return VR_EXIT_USAGE;
        a->opt.n_threads = (int)u;
        break;
      case O_GEMM: a->cpu_gemm = optarg; break;
      case O_IN: a->input = optarg; break;
      case O_OUT: a->output = optarg; break;
      case O_STATS: a->stats = 1; break;
      case O_GTUNE:
        if (strcmp(optarg, "on") && strcmp(optarg, "off"))
          return vr_cli_usage_error(PROG, "--gemm-tune '%s': on or off", optarg);
        a->opt.gemm_tune = strcmp(optarg, "on") ? -1 : 1;
        break;
      case O_GCACHE:
        if (!optarg[0]) return vr_cli_usage_error(PROG, "--gemm-cache: a file, or off");
        a->gemm_cache = optarg;
        break;
      case 'h': vr_gen_usage(stdout); return VR_EXIT_OK;
      default: return vr_cli_getopt_error(PROG, c, argv, optind, optopt);
    }
  }
  if (optind != argc) return vr_cli_usage_error(PROG, "unexpected argument \"%s\"", argv[optind]);
  if (!a->model) return vr_cli_usage_error(PROG, "--model DIR is required");
  if (strcmp(a->device, "cpu") != 0 && strncmp(a->device, "cuda", 4) != 0)
    return vr_cli_usage_error(PROG, "--device '%s': cpu or cuda[:N]", a->device);
  a->opt.device = a->device;
  a->opt.cpu_gemm = a->cpu_gemm;
  a->opt.gemm_cache = a->gemm_cache;
  return -1;
}

/* Reads every line (vr_tids: the trainer's token-id JSON lines) and reports EVERY bad one as
 * "name:LINE: problem" before giving up; a prompt must leave room for one new token. 0,
 * VR_EXIT_USAGE for bad lines (bad input, as logprobs / sft), VR_EXIT_FAIL when memory ran out or
 * the read failed. */
static int vr_gen_read(FILE *f, const char *name, int vocab, uint32_t max_len, vr_tids_t *in) {
  char *line = NULL, why[256];
  size_t cap = 0, len = 0;
  unsigned long lineno = 0, bad = 0;
  int r;
  while ((r = vr_line_read(f, VR_TIDS_MAX_LINE, &line, &cap, &len)) != VR_LINE_EOF) {
    lineno++;
    size_t i = 0;
    while (r == 0 && i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r' || line[i] == '\n')) i++;
    if (r == 0 && i == len) continue;
    int rc = r == VR_LINE_NOMEM      ? VR_ERR_NOMEM
             : r == VR_LINE_TOO_LONG ? VR_ERR_PARSE
                                     : vr_tids_parse_line(line, len, vocab, INT32_MAX, (uint32_t)lineno, in, why,
                                                          sizeof why);
    if (r == VR_LINE_NOMEM) snprintf(why, sizeof why, "out of memory");
    if (r == VR_LINE_TOO_LONG) snprintf(why, sizeof why, "line of %zu bytes is longer than %u", len, VR_TIDS_MAX_LINE);
    if (rc == 0 && in->cu[in->n] - in->cu[in->n - 1] >= max_len) { /* no room for a response: take it back */
      snprintf(why, sizeof why, "%u input ids leave no room for a response (max_model_len %u)",
               in->cu[in->n] - in->cu[in->n - 1], max_len);
      in->n--;
      in->T = in->cu[in->n];
      rc = VR_ERR_SEQ_TOO_LONG;
    }
    if (rc != 0 && ++bad <= VR_GEN_MAX_REPORTED) fprintf(stderr, PROG ": %s:%lu: %s\n", name, lineno, why);
    if (rc == VR_ERR_NOMEM) break;
  }
  free(line);
  if (r != VR_LINE_EOF) return VR_EXIT_FAIL; /* out of memory, said above */
  if (ferror(f)) {
    fprintf(stderr, PROG ": %s: read error: %s\n", name, strerror(errno));
    return VR_EXIT_FAIL;
  }
  if (bad > VR_GEN_MAX_REPORTED)
    fprintf(stderr, PROG ": %s: %lu more bad lines not shown\n", name, bad - VR_GEN_MAX_REPORTED);
  if (bad) {
    fprintf(stderr, PROG ": %s: %lu bad input line%s; nothing generated. HINT: one {\"input_ids\": [...]} object per line\n",
            name, bad, bad == 1 ? "" : "s");
    return VR_EXIT_USAGE;
  }
  return 0;
}

static void vr_gen_write(FILE *f, const vr_gen_output_t *o) {
  for (uint32_t r = 0; r < o->n_resp; r++) {
    fputs("{\"output_ids\": [", f);
    for (uint32_t i = o->cu[r]; i < o->cu[r + 1]; i++) fprintf(f, i > o->cu[r] ? ", %d" : "%d", o->tokens[i]);
    fputs("], \"logprobs\": [", f);
    for (uint32_t i = o->cu[r]; i < o->cu[r + 1]; i++) fprintf(f, i > o->cu[r] ? ", %.9g" : "%.9g", o->logprobs[i]);
    fprintf(f, "], \"finish_reason\": \"%s\"}\n", o->finish[r] == VR_FINISH_STOP ? "stop" : "length");
  }
}

int vr_generate_main(int argc, char **argv) {
  vr_gen_args_t a;
  int rc = vr_gen_parse(argc, argv, &a);
  if (rc >= 0) return rc;
#ifndef VR_HAVE_CUDA_ROLLOUT
  /* the cuda rollout backend (trainer/cuda, VR_HAVE_CUDA_ROLLOUT) registers in vr_rollout.c once wired */
  if (strncmp(a.device, "cuda", 4) == 0) {
    fprintf(stderr, PROG ": --device %s: this build has no cuda rollout backend yet. HINT: --device cpu\n", a.device);
    return VR_EXIT_USAGE;
  }
#endif
  vr_lm_t *lm = NULL;
  /* a model directory that does not load is bad input (exit 2, as logprobs / sft); running out
   * of memory is a run-time failure (exit 1) */
  int lrc = vr_lm_load(a.model, NULL, &lm);
  if (lrc != 0) {
    fprintf(stderr, PROG ": cannot load the model in %s: %s (the log above says why)\n", a.model, vr_strerror(lrc));
    return lrc == VR_ERR_NOMEM ? VR_EXIT_FAIL : VR_EXIT_USAGE;
  }
  const vr_lm_config_t *lc = vr_lm_config(lm);
  int32_t stops[2 * VR_GEN_MAX_STOP];
  uint32_t n_stop = 0;
  if (!a.ignore_eos && (lrc = vr_gencfg_eos_ids(a.model, lc->vocab_size, stops, VR_GEN_MAX_STOP, &n_stop)) != 0) {
    vr_lm_free(lm);
    return lrc == VR_ERR_NOMEM ? VR_EXIT_FAIL : VR_EXIT_USAGE;
  }
  memcpy(stops + n_stop, a.stop, a.n_stop * sizeof *stops);
  n_stop += a.n_stop;
  a.gp.stop_ids = stops;
  a.gp.n_stop = n_stop;
  vr_rollout_lm_t view;
  vr_rollout_t *r = NULL;
  rc = vr_rollout_from_lm(lm, &a.opt, &view, &r);
  if (rc != 0) {
    fprintf(stderr, PROG ": cannot build the rollout engine: %s\n", vr_strerror(rc));
    vr_lm_free(lm);
    return VR_EXIT_FAIL;
  }
  vr_rollout_info_t info;
  vr_rollout_get_info(r, &info);
  char why[1200];
  FILE *in = vr_tids_open(a.input, why, sizeof why), *of = NULL;
  if (!in) {
    fprintf(stderr, PROG ": --input: %s\n", why);
    rc = VR_EXIT_USAGE;
    goto out;
  }
  vr_tids_t prompts = {0};
  rc = vr_gen_read(in, a.input ? a.input : "<stdin>", lc->vocab_size, info.max_model_len, &prompts);
  if (in != stdin) fclose(in);
  /* the output is opened once the input is good (a bad input leaves an old file alone) and before
   * generating (a bad --output must not cost the whole generation) */
  if (rc == 0 && !(of = a.output ? fopen(a.output, "w") : stdout)) {
    fprintf(stderr, PROG ": --output %s: cannot open: %s\n", a.output, strerror(errno));
    rc = VR_EXIT_USAGE;
  }
  if (rc == 0) {
    vr_gen_output_t o;
    int g = vr_rollout_generate(r, prompts.ids, prompts.cu, prompts.n, &a.gp, &o);
    if (g != 0) {
      fprintf(stderr, PROG ": generation failed: %s\n", vr_strerror(g));
      rc = VR_EXIT_FAIL;
    } else {
      vr_gen_write(of, &o);
      int e = of != stdout ? fclose(of) : fflush(of);
      of = NULL;
      if (e != 0) {
        fprintf(stderr, PROG ": writing %s failed: %s\n", a.output ? a.output : "<stdout>", strerror(errno));
        rc = VR_EXIT_FAIL;
      }
      if (a.stats) {
        const vr_gen_stats_t *s = &o.stats;
        fprintf(stderr,
                PROG ": %u prompts, %u responses, %llu new tokens in %.3f s (%.1f tokens/s); prefill %llu tokens in "
                "%.3f s (%llu calls), decode %llu tokens in %.3f s (%llu steps, %llu launched ahead, %llu dropped), "
                "sampling %.3f s; %llu preemptions, "
                "%llu copy-on-write blocks, peak %u running, peak %u of %u blocks\n",
                prompts.n, o.n_resp, (unsigned long long)o.cu[o.n_resp], s->total_s,
                s->total_s > 0 ? o.cu[o.n_resp] / s->total_s : 0.0, (unsigned long long)s->prefill_tokens, s->prefill_s,
                (unsigned long long)s->prefill_calls, (unsigned long long)s->decode_tokens, s->decode_s,
                (unsigned long long)s->decode_calls, (unsigned long long)s->decode_ahead,
                (unsigned long long)s->decode_dropped, s->sample_s, (unsigned long long)s->preemptions,
                (unsigned long long)s->cow_copies, s->peak_running, s->peak_blocks, info.num_blocks);
      }
      vr_gen_output_free(&o);
    }
  }
  vr_tids_free(&prompts);
  if (of && of != stdout) fclose(of);
out:
  vr_rollout_free(r);
  vr_rollout_lm_view_free(&view);
  vr_lm_free(lm);
  return rc;
}
