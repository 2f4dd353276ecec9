/* vr_bench_workload.h: what the bench sends: K sequences per request, lengths
 * from a distribution (or real token ids from a JSONL corpus), token ids drawn
 * uniformly inside the server's vocabulary.
 *
 * A vr_workload_t is read-only once built and shared by all clients; every
 * client owns a vr_reqbuf_t (its buffers, its RNG, its corpus position).
 * Not thread-safe per reqbuf; the workload itself may be shared. */
#ifndef VR_BENCH_WORKLOAD_H
#define VR_BENCH_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

typedef enum vr_len_kind {
  VR_LEN_FIXED = 0,     /* fixed:L */
  VR_LEN_UNIFORM = 1,   /* uniform:A-B (inclusive) */
  VR_LEN_LOGNORMAL = 2, /* lognormal:MEAN,SIGMA (MEAN tokens on average, SIGMA of log length) */
} vr_len_kind_t;

typedef struct vr_len_dist {
  vr_len_kind_t kind;
  uint32_t a, b;        /* fixed: a; uniform: [a, b] */
  double mean, sigma;   /* lognormal */
} vr_len_dist_t;

/* Parses "fixed:L", "uniform:A-B", "lognormal:MEAN,SIGMA". 0 or VR_ERR_PARSE
 * (logged with what was wrong). Lengths must be >= 1. */
int vr_len_dist_parse(const char *s, vr_len_dist_t *out);
/* Human-readable form of d into buf (for reports). */
void vr_len_dist_format(const vr_len_dist_t *d, char *buf, size_t n);

typedef struct vr_workload {
  uint32_t batch;        /* sequences per request (K >= 1) */
  vr_len_dist_t len;
  uint32_t vocab;        /* token ids drawn in [0, vocab) */
  uint32_t max_seq_len;  /* generated lengths are clamped to it (0 = no clamp) */
  /* corpus (--input): n_seqs sequences, seq i = ids[off[i] .. off[i+1]) */
  uint64_t corpus_n;
  uint64_t *corpus_off;
  int32_t *corpus_ids;
} vr_workload_t;

/* Loads a JSONL file: one sequence per line, either a JSON array of integers
 * or an object with "input_ids" (an array of integers, or an array of such
 * arrays, each one a sequence). Blank lines are skipped. Every id must be in
 * [0, vocab) when vocab > 0 and every sequence non-empty and at most
 * max_seq_len (when > 0): violations fail with the line number.
 * Returns 0, VR_ERR_IO, VR_ERR_PARSE, VR_ERR_TOKEN_RANGE or VR_ERR_NOMEM. */
int vr_workload_load_jsonl(vr_workload_t *w, const char *path);
void vr_workload_free(vr_workload_t *w);

/* One client's request buffer. */
typedef struct vr_reqbuf {
  uint32_t n_seqs;
  uint64_t n_tokens;
  int32_t *ids;          /* n_tokens */
  uint32_t *cu;          /* n_seqs + 1 */
  size_t ids_cap, cu_cap;
  uint64_t rng;          /* xorshift state */
  uint64_t corpus_pos;
} vr_reqbuf_t;

/* seed distinguishes clients (same seed = same request stream). */
void vr_reqbuf_init(vr_reqbuf_t *r, uint64_t seed);
void vr_reqbuf_free(vr_reqbuf_t *r);
/* Fills r with the next request. 0 or VR_ERR_NOMEM. */
int vr_workload_next(const vr_workload_t *w, vr_reqbuf_t *r);

/* Uniform double in [0, 1) and exponential(1) draws from a reqbuf-style state. */
double vr_rng_uniform(uint64_t *state);
double vr_rng_exp(uint64_t *state);

#endif
