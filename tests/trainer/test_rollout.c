/* test_rollout.c: the rollout engine on tiny random models built in memory (no files):
 *  - Philox known answers; the sampling rule on hand-computed cases (top-k ties, top-p cut);
 *    chi-square of 200,000 draws against an independent implementation of vLLM's formula;
 *  - the block manager: fork, copy on write, release, all-or-nothing growth;
 *  - the engine against a naive dense double-precision forward (greedy tokens and log-probs), for
 *    llama (GQA), qwen2 (qkv bias), mistral (sliding window shorter than the sequences) and tied
 *    embeddings;
 *  - paged continuous batching with a cache so small that sequences wait and get preempted gives
 *    bit-identical tokens and log-probs to one prompt at a time with a big cache;
 *  - seeded sampling reproduces, is independent of batch composition, and n > 1 responses differ;
 *  - stop ids end a response (stop token included); a weight update equals a fresh engine on the
 *    new weights; bad inputs fail with the right status and generate nothing. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "rollout_test_util.h"
#include "verl_reward/status.h"
#include "vr_gencfg.h"
#include "vr_kvcache.h"
#include "vr_rollout.h"
#include "vr_sample.h"
#include "vr_test_seed.h"

/* ---- sampling --------------------------------------------------------------------------------------- */

static void test_philox_kat(void **st) {
  (void)st;
  /* Random123's kat_vectors for philox4x32_10 */
  const uint32_t c0[4] = {0, 0, 0, 0}, k0[2] = {0, 0}, e0[4] = {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8};
  const uint32_t c1[4] = {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, k1[2] = {0xffffffff, 0xffffffff},
                 e1[4] = {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd};
  const uint32_t c2[4] = {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, k2[2] = {0xa4093822, 0x299f31d0},
                 e2[4] = {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1};
  uint32_t o[4];
  vr_philox4x32(c0, k0, o);
  assert_memory_equal(o, e0, sizeof o);
  vr_philox4x32(c1, k1, o);
  assert_memory_equal(o, e1, sizeof o);
  vr_philox4x32(c2, k2, o);
  assert_memory_equal(o, e2, sizeof o);
  double u = vr_sample_uniform(1, 2, 3);
  assert_true(u >= 0.0 && u < 1.0);
  assert_true(vr_sample_uniform(1, 2, 3) == u);
  assert_true(vr_sample_uniform(1, 2, 4) != u && vr_sample_uniform(1, 3, 3) != u && vr_sample_uniform(2, 2, 3) != u);
}

static void probs_of(const float *l, int V, float T, int k, float p, double *out) {
  vr_sample_params_t sp = {.temperature = T, .top_k = k, .top_p = p};
  void *ws = malloc(VR_SAMPLE_SCRATCH_BYTES(V));
  vr_sample_probs(l, V, &sp, ws, out);
  free(ws);
}

static void test_sample_hand_cases(void **st) {
  (void)st;
  double pr[8];
  /* top-k 3 of 1..5: ids 2, 3, 4 with softmax weights e^3, e^4, e^5 */
  const float a[5] = {1, 2, 3, 4, 5};
  probs_of(a, 5, 1.0f, 3, 1.0f, pr);
  double s = exp(3) + exp(4) + exp(5);
  assert_true(pr[0] == 0 && pr[1] == 0);
  assert_true(fabs(pr[2] - exp(3) / s) < 1e-12 && fabs(pr[4] - exp(5) / s) < 1e-12);
  /* top-k ties at the threshold are all kept (vLLM keeps logits >= the k-th largest) */
  const float b[4] = {1, 3, 3, 2};
  probs_of(b, 4, 1.0f, 1, 1.0f, pr);
  assert_true(fabs(pr[1] - 0.5) < 1e-12 && fabs(pr[2] - 0.5) < 1e-12 && pr[0] == 0 && pr[3] == 0);
  /* top-p 0.65 on probabilities .1 .2 .3 .4: ascending cumsum .1 .3 (<= .35: dropped) .6 1.0 */
  const float c[4] = {0.0f, logf(2.0f), logf(3.0f), logf(4.0f)};
  probs_of(c, 4, 1.0f, -1, 0.65f, pr);
  assert_true(pr[0] == 0 && pr[1] == 0);
  assert_true(fabs(pr[2] - 3.0 / 7) < 1e-6 && fabs(pr[3] - 4.0 / 7) < 1e-6);
  /* top-p tiny: only the largest survives */
  probs_of(c, 4, 1.0f, -1, 1e-6f, pr);
  assert_true(pr[3] == 1.0);
  /* temperature scales before the softmax */
  const float d[2] = {0.0f, 1.0f};
  probs_of(d, 2, 0.5f, -1, 1.0f, pr);
  assert_true(fabs(pr[1] - exp(2) / (1 + exp(2))) < 1e-12);
  /* greedy: lowest id among equal maxima; log-prob at temperature 1 */
  const float e[4] = {0.5f, 2.0f, 2.0f, -1.0f};
  vr_sample_params_t g = {.temperature = 0, .top_k = -1, .top_p = 1};
  void *ws = malloc(VR_SAMPLE_SCRATCH_BYTES(4));
  int32_t tok;
  float lp;
  assert_int_equal(vr_sample_row(e, 4, &g, 1, 0, 0, ws, &tok, &lp), 0);
  assert_int_equal(tok, 1);
  double z = exp(0.5) + 2 * exp(2.0) + exp(-1.0);
  assert_true(fabs(lp - (2.0 - log(z))) < 1e-6);
  /* the log-prob is of the temperature-scaled distribution before truncation */
  vr_sample_params_t t = {.temperature = 2.0f, .top_k = 1, .top_p = 1};
  assert_int_equal(vr_sample_row(e, 4, &t, 7, 0, 0, ws, &tok, &lp), 0);
  assert_true(tok == 1 || tok == 2);
  z = exp(0.25) + 2 * exp(1.0) + exp(-0.5);
  assert_true(fabs(lp - (1.0 - log(z))) < 1e-6);
  /* NaN in the row */
  const float n[3] = {0.0f, NAN, 1.0f};
  assert_int_equal(vr_sample_row(n, 3, &t, 7, 0, 0, ws, &tok, &lp), VR_ERR_NONFINITE);
  free(ws);
  char err[64];
  vr_sample_params_t bad = {.temperature = -1, .top_k = 0, .top_p = 1};
  assert_int_equal(vr_sample_check(&bad, err, sizeof err), VR_ERR_INVAL);
  bad.temperature = 1, bad.top_p = 0;
  assert_int_equal(vr_sample_check(&bad, err, sizeof err), VR_ERR_INVAL);
  assert_non_null(strstr(err, "top_p"));
}

/* vLLM's apply_top_k_top_p written out independently: O(V^2), no sorting library. */
static void formula(const float *l, int V, float T, int k, float p, double *out) {
  double z[64];
  int keep[64];
  for (int i = 0; i < V; i++) z[i] = (double)(l[i] / T), keep[i] = 1;
  if (k > 0 && k < V) {
    for (int i = 0; i < V; i++) {
      int larger = 0;
      for (int j = 0; j < V; j++) larger += z[j] > z[i];
      keep[i] = larger < k; /* z[i] >= the k-th largest value */
    }
  }
  double mx = -INFINITY, tot = 0;
  for (int i = 0; i < V; i++)
    if (keep[i] && z[i] > mx) mx = z[i];
  for (int i = 0; i < V; i++) tot += keep[i] ? exp(z[i] - mx) : 0;
  if (p < 1.0f) {
    int drop[64] = {0};
    for (int i = 0; i < V; i++) {
      if (!keep[i]) continue;
      /* mass at or below i in ascending (value, id) order */
      double below = 0;
      int is_max = 1;
      for (int j = 0; j < V; j++) {
        if (!keep[j]) continue;
        int before = z[j] < z[i] || (z[j] == z[i] && j <= i);
        if (before) below += exp(z[j] - mx) / tot;
        if (z[j] > z[i] || (z[j] == z[i] && j > i)) is_max = 0;
      }
      drop[i] = below <= 1.0 - p && !is_max;
    }
    for (int i = 0; i < V; i++) keep[i] = keep[i] && !drop[i];
  }
  double s = 0;
  for (int i = 0; i < V; i++) s += keep[i] ? exp(z[i] - mx) : 0;
  for (int i = 0; i < V; i++) out[i] = keep[i] ? exp(z[i] - mx) / s : 0;
}

static void test_sample_chi_square(void **st) {
  (void)st;
  uint64_t seed = vr_test_seed("test_sample_chi_square", 21);
  uint64_t rs = seed;
  enum { V = 12, N = 200000 };
  /* chi-square critical values at p = 1e-6 for 1..11 degrees of freedom */
  static const double crit[12] = {0, 23.93, 27.63, 30.66, 33.38, 35.89, 38.26, 40.52, 42.70, 44.81, 46.86, 48.85};
  const struct { float T; int k; float p; } cases[] = {{1.0f, -1, 1.0f}, {0.7f, 7, 1.0f}, {1.3f, -1, 0.8f}, {0.8f, 9, 0.9f}, {1.0f, 3, 0.5f}};
  void *ws = malloc(VR_SAMPLE_SCRATCH_BYTES(V));
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    float l[V];
    for (int i = 0; i < V; i++) l[i] = (float)vr_test_rand(&rs, 4000) / 1000.0f - 2.0f;
    l[3] = l[5]; /* a tie */
    double want[V], mine[V];
    formula(l, V, cases[c].T, cases[c].k, cases[c].p, want);
    probs_of(l, V, cases[c].T, cases[c].k, cases[c].p, mine);
    for (int i = 0; i < V; i++) assert_true(fabs(want[i] - mine[i]) < 1e-9);
    long cnt[V] = {0};
    vr_sample_params_t sp = {.temperature = cases[c].T, .top_k = cases[c].k, .top_p = cases[c].p};
    for (uint32_t n = 0; n < N; n++) {
      int32_t tok;
      float lp;
      assert_int_equal(vr_sample_row(l, V, &sp, seed + c, n % 7, n, ws, &tok, &lp), 0);
      cnt[tok]++;
    }
    double chi = 0;
    int df = -1;
    for (int i = 0; i < V; i++) {
      if (want[i] == 0) {
        assert_int_equal(cnt[i], 0); /* a truncated token is never drawn */
        continue;
      }
      df++;
      double e = want[i] * N;
      chi += (cnt[i] - e) * (cnt[i] - e) / e;
    }
    printf("case %zu: T %.2f top_k %d top_p %.2f: chi2 %.2f with %d dof (critical %.2f)\n", c, cases[c].T, cases[c].k,
           cases[c].p, chi, df, df > 0 ? crit[df] : 0.0);
    if (df > 0) assert_true(chi < crit[df]);
  }
  free(ws);
}

/* ---- block manager ----------------------------------------------------------------------------------- */

static void test_kvcache(void **st) {
  (void)st;
  vr_kvcache_t c;
  assert_int_equal(vr_kvcache_init(&c, 4, 4), 0);
  int32_t a[4], b[4];
  uint32_t na = 0, nb = 0, from, to;
  assert_int_equal(vr_kvcache_grow(&c, a, &na, 6), 0); /* 2 blocks */
  assert_int_equal(na, 2);
  assert_int_equal(vr_kvcache_n_free(&c), 2);
  vr_kvcache_fork(&c, a, b, na);
  nb = na;
  assert_int_equal(vr_kvcache_need(&c, b, nb, 6, 7), 1); /* shared partial block */
  assert_int_equal(vr_kvcache_cow(&c, b, 6, &from, &to), 1);
  assert_int_equal(from, (uint32_t)a[1]);
  assert_int_not_equal(b[1], a[1]);
  assert_int_equal(b[0], a[0]);
  assert_int_equal(vr_kvcache_cow(&c, a, 6, &from, &to), 0); /* a's block is private now */
  assert_int_equal(vr_kvcache_n_free(&c), 1);
  assert_int_equal(vr_kvcache_grow(&c, a, &na, 16), VR_ERR_NOSPACE); /* needs 2, 1 free: nothing taken */
  assert_int_equal(na, 2);
  assert_int_equal(vr_kvcache_n_free(&c), 1);
  vr_kvcache_release(&c, a, &na);
  assert_int_equal(vr_kvcache_n_free(&c), 2); /* block 0 still held by b */
  vr_kvcache_release(&c, b, &nb);
  assert_int_equal(vr_kvcache_n_free(&c), 4);
  assert_int_equal(c.peak_used, 3);
  vr_kvcache_free(&c);
}

/* ---- the engine ---------------------------------------------------------------------------------------- */

static const rt_shape_t shape_llama = {.vocab = 61, .hidden = 32, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 8,
                                       .inter = 48, .max_pos = 96};

/* An engine with the decode pipeline mode pipe (vr_rollout_options_t.decode_pipeline). */
static vr_rollout_t *engine_pipe(const rt_model_t *m, uint64_t kv_bytes, uint32_t block, uint32_t max_seqs, uint32_t mbt,
                                 int pipe) {
  vr_rollout_options_t o;
  vr_rollout_options_init(&o);
  o.decode_pipeline = pipe;
  o.n_threads = 2;
  o.kv_cache_bytes = kv_bytes;
  o.block_size = block;
  o.max_seqs = max_seqs;
  o.max_batch_tokens = mbt;
  vr_rollout_t *r = NULL;
  assert_int_equal(vr_rollout_init(&m->cfg, m->params, m->n_params, &m->w, &o, &r), 0);
  return r;
}

static vr_rollout_t *engine(const rt_model_t *m, uint64_t kv_bytes, uint32_t block, uint32_t max_seqs, uint32_t mbt) {
  return engine_pipe(m, kv_bytes, block, max_seqs, mbt, 0);
}

/* n_prompts prompts of lengths 1..maxlen drawn from rs. */
static void make_prompts(uint64_t *rs, int V, uint32_t n, uint32_t maxlen, int32_t *ids, uint32_t *cu) {
  cu[0] = 0;
  for (uint32_t p = 0; p < n; p++) {
    uint32_t len = 1 + vr_test_rand(rs, maxlen);
    for (uint32_t t = 0; t < len; t++) ids[cu[p] + t] = (int32_t)vr_test_rand(rs, (uint32_t)V);
    cu[p + 1] = cu[p] + len;
  }
}

static void check_against_reference(const rt_shape_t *sh, uint64_t seed) {
  rt_model_t m;
  rt_model_random(&m, sh, seed, 0.35f);
  vr_rollout_t *r = engine(&m, 1 << 20, 4, 8, 64);
  uint64_t rs = seed;
  int32_t ids[256];
  uint32_t cu[9];
  make_prompts(&rs, sh->vocab, 8, 20, ids, cu);
  vr_gen_params_t gp;
  vr_gen_params_init(&gp);
  gp.max_new_tokens = 24;
  vr_gen_output_t out;
  assert_int_equal(vr_rollout_generate(r, ids, cu, 8, &gp, &out), 0);
  const int V = sh->vocab;
  double worst = 0;
  int compared = 0;
  for (uint32_t p = 0; p < 8; p++) {
    const uint32_t plen = cu[p + 1] - cu[p], n = out.cu[p + 1] - out.cu[p];
    assert_int_equal(n, 24);
    assert_int_equal(out.finish[p], VR_FINISH_LENGTH);
    int32_t seq[128];
    memcpy(seq, ids + cu[p], plen * sizeof *seq);
    memcpy(seq + plen, out.tokens + out.cu[p], n * sizeof *seq);
    double *lg = malloc((size_t)(plen + n) * V * sizeof *lg);
    rt_ref_logits(&m, seq, (int)(plen + n), lg);
    for (uint32_t i = 0; i < n; i++) {
      const double *row = lg + (size_t)(plen - 1 + i) * V;
      int best = 0, second = -1;
      for (int v = 1; v < V; v++)
        if (row[v] > row[best]) best = v;
      for (int v = 0; v < V; v++)
        if (v != best && (second < 0 || row[v] > row[second])) second = v;
      double mx = row[best], s = 0;
      for (int v = 0; v < V; v++) s += exp(row[v] - mx);
      const int32_t tok = out.tokens[out.cu[p] + i];
      const double lp = row[tok] - mx - log(s), d = fabs(lp - out.logprobs[out.cu[p] + i]);
      worst = d > worst ? d : worst;
      assert_true(d < 1e-4);
      if (row[best] - row[second] > 1e-3) { /* greedy token equal while the margin is clear */
        assert_int_equal(tok, best);
        compared++;
      } else {
        break; /* a near tie: the continuation may legitimately differ */
      }
    }
    free(lg);
  }
  printf("arch %d sw %d tied %d: %d tokens equal to the dense reference, worst log-prob diff %.2e\n", m.cfg.arch,
         sh->sliding_window, sh->tied, compared, worst);
  assert_true(compared > 100);
  vr_gen_output_free(&out);
  vr_rollout_free(r);
  rt_model_free(&m);
}

static void test_reference_llama(void **st) {
  (void)st;
  check_against_reference(&shape_llama, 5);
}
static void test_reference_qwen2(void **st) {
  (void)st;
  rt_shape_t s = shape_llama;
  s.qkv_bias = 1, s.kv_heads = 1;
  check_against_reference(&s, 6);
}
static void test_reference_mistral(void **st) {
  (void)st;
  rt_shape_t s = shape_llama;
  s.sliding_window = 7;
  check_against_reference(&s, 7);
}
static void test_reference_tied(void **st) {
  (void)st;
  rt_shape_t s = shape_llama;
  s.tied = 1, s.kv_heads = 4;
  check_against_reference(&s, 8);
}

static void expect_same(const vr_gen_output_t *a, const vr_gen_output_t *b) {
  assert_int_equal(a->n_resp, b->n_resp);
  assert_memory_equal(a->cu, b->cu, (a->n_resp + 1) * sizeof *a->cu);
  assert_memory_equal(a->tokens, b->tokens, a->cu[a->n_resp] * sizeof *a->tokens);
  assert_memory_equal(a->logprobs, b->logprobs, a->cu[a->n_resp] * sizeof *a->logprobs);
  assert_memory_equal(a->finish, b->finish, a->n_resp);
}

/* Concatenates one-at-a-time outputs (prompt p alone) in order. */
static void one_at_a_time(vr_rollout_t *r, const int32_t *ids, const uint32_t *cu, uint32_t np, const vr_gen_params_t *gp0,
                          const uint64_t *keys, vr_gen_output_t *all) {
  memset(all, 0, sizeof *all);
  all->cu = calloc((size_t)np * gp0->n + 1, sizeof *all->cu);
  all->tokens = malloc(4096 * sizeof *all->tokens);
  all->logprobs = malloc(4096 * sizeof *all->logprobs);
  all->finish = malloc((size_t)np * gp0->n);
  for (uint32_t p = 0; p < np; p++) {
    vr_gen_params_t gp = *gp0;
    gp.seeds = &keys[p];
    uint32_t c1[2] = {0, cu[p + 1] - cu[p]};
    vr_gen_output_t o;
    assert_int_equal(vr_rollout_generate(r, ids + cu[p], c1, 1, &gp, &o), 0);
    for (uint32_t j = 0; j < gp.n; j++) {
      uint32_t k = all->n_resp++, n = o.cu[j + 1] - o.cu[j];
      assert_true(all->cu[k] + n <= 4096);
      memcpy(all->tokens + all->cu[k], o.tokens + o.cu[j], n * sizeof(int32_t));
      memcpy(all->logprobs + all->cu[k], o.logprobs + o.cu[j], n * sizeof(float));
      all->finish[k] = o.finish[j];
      all->cu[k + 1] = all->cu[k] + n;
    }
    vr_gen_output_free(&o);
  }
}

static void test_paged_equals_one_at_a_time(void **st) {
  (void)st;
  uint64_t seed = vr_test_seed("test_paged_equals_one_at_a_time", 11), rs = seed;
  rt_model_t m;
  rt_model_random(&m, &shape_llama, seed, 0.35f);
  enum { NP = 24 };
  int32_t ids[NP * 30];
  uint32_t cu[NP + 1];
  make_prompts(&rs, shape_llama.vocab, NP, 30, ids, cu);
  uint64_t keys[NP];
  for (int p = 0; p < NP; p++) keys[p] = 1000 + p;
  const uint64_t bb = vr_rollout_block_bytes(&m.cfg, 4, 4);
  vr_rollout_t *big = engine(&m, 4096 * bb, 4, 256, 2048);
  /* 24 blocks of 4 tokens: at most a few sequences fit at once; max 5 per forward; 16-token prefills */
  vr_rollout_t *tiny = engine(&m, 24 * bb, 4, 5, 16);
  for (int mode = 0; mode < 2; mode++) {
    vr_gen_params_t gp;
    vr_gen_params_init(&gp);
    gp.max_new_tokens = 40;
    if (mode == 1) {
      gp.n = 3;
      gp.sample.temperature = 0.9f;
      gp.sample.top_k = 20;
      gp.sample.top_p = 0.95f;
    }
    vr_gen_output_t ref, o;
    one_at_a_time(big, ids, cu, NP, &gp, keys, &ref);
    gp.seeds = keys;
    assert_int_equal(vr_rollout_generate(tiny, ids, cu, NP, &gp, &o), 0);
    printf("mode %d: %u responses, %llu preemptions, %llu copy-on-write blocks, %llu prefill calls, %llu decode calls, peak %u running\n",
           mode, o.n_resp, (unsigned long long)o.stats.preemptions, (unsigned long long)o.stats.cow_copies,
           (unsigned long long)o.stats.prefill_calls, (unsigned long long)o.stats.decode_calls, o.stats.peak_running);
    assert_true(o.stats.preemptions > 0);
    if (mode == 1) assert_true(o.stats.cow_copies > 0);
    expect_same(&ref, &o);
    /* the big engine with everything at once: same again */
    vr_gen_output_t o2;
    assert_int_equal(vr_rollout_generate(big, ids, cu, NP, &gp, &o2), 0);
    assert_int_equal(o2.stats.preemptions, 0);
    expect_same(&ref, &o2);
    vr_gen_output_free(&o2);
    vr_gen_output_free(&o);
    vr_gen_output_free(&ref);
  }
  vr_rollout_free(big);
  vr_rollout_free(tiny);
  rt_model_free(&m);
}

/* Random schedules: block sizes 1..8, caches from the smallest that fits one sequence up, 1..6
 * sequences per step, prefill budgets from 1 token, n 1..3, greedy or sampled, stop ids: every
 * configuration gives exactly the one-at-a-time outputs (nothing dropped, nothing changed). */
static void test_scheduler_random(void **st) {
  (void)st;
  uint64_t seed = vr_test_seed("test_scheduler_random", 31), rs = seed;
  rt_model_t m;
  rt_model_random(&m, &shape_llama, seed, 0.35f);
  enum { NP = 10 };
  const uint64_t big_bb = vr_rollout_block_bytes(&m.cfg, 16, 4);
  vr_rollout_t *big = engine(&m, 1024 * big_bb, 16, 256, 2048);
  uint64_t total_preempt = 0;
  for (int it = 0; it < 12; it++) {
    int32_t ids[NP * 24];
    uint32_t cu[NP + 1];
    make_prompts(&rs, shape_llama.vocab, NP, 24, ids, cu);
    uint64_t keys[NP];
    for (int p = 0; p < NP; p++) keys[p] = rs + (uint64_t)p * 7;
    vr_gen_params_t gp;
    vr_gen_params_init(&gp);
    gp.n = 1 + vr_test_rand(&rs, 3);
    gp.max_new_tokens = 1 + vr_test_rand(&rs, 30);
    if (vr_test_rand(&rs, 2)) {
      gp.sample.temperature = 0.5f + (float)vr_test_rand(&rs, 100) / 100.0f;
      gp.sample.top_k = vr_test_rand(&rs, 2) ? -1 : 1 + (int)vr_test_rand(&rs, 30);
      gp.sample.top_p = vr_test_rand(&rs, 2) ? 1.0f : 0.5f + (float)vr_test_rand(&rs, 50) / 100.0f;
    }
    int32_t stop[2] = {(int32_t)vr_test_rand(&rs, 61), (int32_t)vr_test_rand(&rs, 61)};
    gp.stop_ids = stop;
    gp.n_stop = vr_test_rand(&rs, 3);
    const uint32_t bs = 1 + vr_test_rand(&rs, 8);
    const uint32_t need = (24 + gp.max_new_tokens + bs - 1) / bs; /* one longest sequence */
    const uint32_t blocks = need + vr_test_rand(&rs, 3 * need);
    vr_rollout_t *r = engine(&m, blocks * vr_rollout_block_bytes(&m.cfg, bs, 4), bs, 1 + vr_test_rand(&rs, 6),
                             1 + vr_test_rand(&rs, 40));
    vr_gen_output_t ref, o;
    one_at_a_time(big, ids, cu, NP, &gp, keys, &ref);
    gp.seeds = keys;
    assert_int_equal(vr_rollout_generate(r, ids, cu, NP, &gp, &o), 0);
    expect_same(&ref, &o);
    total_preempt += o.stats.preemptions;
    vr_gen_output_free(&o);
    vr_gen_output_free(&ref);
    vr_rollout_free(r);
  }
  printf("12 random schedules equal one at a time (%llu preemptions in all)\n", (unsigned long long)total_preempt);
  assert_true(total_preempt > 0);
  vr_rollout_free(big);
  rt_model_free(&m);
}

/* The one-step-late decode pipeline against the plain scheduler (decode_pipeline -1) on random
 * schedules (as test_scheduler_random: small caches that preempt, 1..6 sequences per step, n 1..3,
 * greedy or sampled, 0..2 stop ids): mode 1 (the default: pipelined without stop ids) and mode 2
 * (always: a stop drops the step launched after it) give the plain outputs bit for bit, finish
 * reasons included, and the same schedule (prefill and kept decode steps, preemptions, copies;
 * schedule 17 of seed 41 admits a prompt at once after a stop only if the dropped step's blocks
 * were given back: vr_gen_unfollow). */
static void test_pipeline_equals_plain(void **st) {
  (void)st;
  uint64_t seed = vr_test_seed("test_pipeline_equals_plain", 41), rs = seed;
  rt_model_t m;
  rt_model_random(&m, &shape_llama, seed, 0.35f);
  enum { NP = 10 };
  uint64_t ahead[3] = {0}, dropped[3] = {0}, stops = 0;
  for (int it = 0; it < 20; it++) {
    int32_t ids[NP * 24];
    uint32_t cu[NP + 1];
    make_prompts(&rs, shape_llama.vocab, NP, 24, ids, cu);
    vr_gen_params_t gp;
    vr_gen_params_init(&gp);
    gp.seed = rs;
    gp.n = 1 + vr_test_rand(&rs, 3);
    gp.max_new_tokens = 1 + vr_test_rand(&rs, 40);
    if (vr_test_rand(&rs, 2)) {
      gp.sample.temperature = 0.5f + (float)vr_test_rand(&rs, 100) / 100.0f;
      gp.sample.top_k = vr_test_rand(&rs, 2) ? -1 : 1 + (int)vr_test_rand(&rs, 30);
    }
    int32_t stop[2] = {(int32_t)vr_test_rand(&rs, 61), (int32_t)vr_test_rand(&rs, 61)};
    gp.stop_ids = stop;
    gp.n_stop = it < 4 ? 0 : vr_test_rand(&rs, 3);
    const uint32_t bs = 1 + vr_test_rand(&rs, 8);
    const uint32_t need = (24 + gp.max_new_tokens + bs - 1) / bs;
    const uint64_t kvb = (need + vr_test_rand(&rs, 4 * need)) * vr_rollout_block_bytes(&m.cfg, bs, 4);
    const uint32_t ms = 1 + vr_test_rand(&rs, 8), mbt = 1 + vr_test_rand(&rs, 60);
    vr_gen_output_t o[3];
    static const int modes[3] = {-1, 1, 2};
    for (int k = 0; k < 3; k++) {
      vr_rollout_t *r = engine_pipe(&m, kvb, bs, ms, mbt, modes[k]);
      assert_int_equal(vr_rollout_generate(r, ids, cu, NP, &gp, &o[k]), 0);
      vr_rollout_free(r);
      ahead[k] += o[k].stats.decode_ahead;
      dropped[k] += o[k].stats.decode_dropped;
    }
    for (uint32_t i = 0; i < o[0].n_resp; i++) stops += o[0].finish[i] == VR_FINISH_STOP;
    for (int k = 1; k < 3; k++) {
      expect_same(&o[0], &o[k]);
      assert_int_equal(o[k].stats.prefill_calls, o[0].stats.prefill_calls);
      assert_int_equal(o[k].stats.decode_calls, o[0].stats.decode_calls);
      assert_int_equal(o[k].stats.decode_tokens, o[0].stats.decode_tokens);
      assert_int_equal(o[k].stats.preemptions, o[0].stats.preemptions);
      assert_int_equal(o[k].stats.cow_copies, o[0].stats.cow_copies);
    }
    for (int k = 0; k < 3; k++) vr_gen_output_free(&o[k]);
  }
  printf("20 schedules: plain == pipelined; steps launched ahead %llu (mode 1) / %llu (mode 2), dropped after a stop "
         "%llu (mode 2), %llu responses stopped\n",
         (unsigned long long)ahead[1], (unsigned long long)ahead[2], (unsigned long long)dropped[2],
         (unsigned long long)stops);
  assert_true(ahead[0] == 0 && dropped[0] == 0 && dropped[1] == 0);
  assert_true(ahead[1] > 0 && ahead[2] > ahead[1] && dropped[2] > 0 && stops > 0);
  rt_model_free(&m);
}

static void test_seeded_sampling(void **st) {
  (void)st;
  rt_model_t m;
  rt_model_random(&m, &shape_llama, 3, 0.2f);
  vr_rollout_t *r = engine(&m, 1 << 20, 8, 16, 128);
  const int32_t ids[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const uint32_t cu[] = {0, 3, 6, 9};
  vr_gen_params_t gp;
  vr_gen_params_init(&gp);
  gp.n = 4;
  gp.max_new_tokens = 30;
  gp.sample.temperature = 1.0f;
  gp.seed = 77;
  vr_gen_output_t a, b, c;
  assert_int_equal(vr_rollout_generate(r, ids, cu, 3, &gp, &a), 0);
  assert_int_equal(vr_rollout_generate(r, ids, cu, 3, &gp, &b), 0);
  expect_same(&a, &b); /* reproduces */
  /* the 4 responses of a prompt differ from each other */
  assert_true(memcmp(a.tokens + a.cu[0], a.tokens + a.cu[1], 30 * sizeof(int32_t)) != 0);
  /* prompt 1 alone, with prompt 1's key: the same 4 responses as inside the batch */
  uint64_t k1 = vr_sample_prompt_key(77, 1);
  gp.seeds = &k1;
  const uint32_t cu1[] = {0, 3};
  assert_int_equal(vr_rollout_generate(r, ids + 3, cu1, 1, &gp, &c), 0);
  assert_memory_equal(c.tokens, a.tokens + a.cu[4], (a.cu[8] - a.cu[4]) * sizeof(int32_t));
  assert_memory_equal(c.logprobs, a.logprobs + a.cu[4], (a.cu[8] - a.cu[4]) * sizeof(float));
  vr_gen_output_free(&c);
  /* another seed, other responses */
  gp.seeds = NULL;
  gp.seed = 78;
  assert_int_equal(vr_rollout_generate(r, ids, cu, 3, &gp, &c), 0);
  assert_true(c.cu[12] != a.cu[12] || memcmp(c.tokens, a.tokens, a.cu[12] * sizeof(int32_t)) != 0);
  vr_gen_output_free(&a), vr_gen_output_free(&b), vr_gen_output_free(&c);
  vr_rollout_free(r);
  rt_model_free(&m);
}

static void test_stop_ids(void **st) {
  (void)st;
  rt_model_t m;
  rt_model_random(&m, &shape_llama, 9, 0.35f);
  vr_rollout_t *r = engine(&m, 1 << 20, 4, 8, 64);
  const int32_t ids[] = {5, 9, 11};
  const uint32_t cu[] = {0, 3};
  vr_gen_params_t gp;
  vr_gen_params_init(&gp);
  gp.max_new_tokens = 20;
  vr_gen_output_t a, b;
  assert_int_equal(vr_rollout_generate(r, ids, cu, 1, &gp, &a), 0);
  /* stop at the 6th generated token's id: the response ends at its first occurrence, included */
  int32_t stop[2] = {1000, a.tokens[5]};
  uint32_t first = 0;
  while (a.tokens[first] != stop[1]) first++;
  gp.stop_ids = stop;
  gp.n_stop = 2;
  assert_int_equal(vr_rollout_generate(r, ids, cu, 1, &gp, &b), 0);
  assert_int_equal(b.cu[1], first + 1);
  assert_int_equal(b.finish[0], VR_FINISH_STOP);
  assert_memory_equal(b.tokens, a.tokens, (first + 1) * sizeof(int32_t));
  vr_gen_output_free(&a), vr_gen_output_free(&b);
  /* max_model_len ends a response too */
  vr_rollout_options_t o;
  vr_rollout_options_init(&o);
  o.max_model_len = 10;
  vr_rollout_t *r10;
  assert_int_equal(vr_rollout_init(&m.cfg, m.params, m.n_params, &m.w, &o, &r10), 0);
  gp.n_stop = 0;
  assert_int_equal(vr_rollout_generate(r10, ids, cu, 1, &gp, &a), 0);
  assert_int_equal(a.cu[1], 7);
  assert_int_equal(a.finish[0], VR_FINISH_LENGTH);
  vr_gen_output_free(&a);
  vr_rollout_free(r10);
  vr_rollout_free(r);
  rt_model_free(&m);
}

static void test_weight_update(void **st) {
  (void)st;
  rt_model_t m1, m2;
  rt_model_random(&m1, &shape_llama, 21, 0.35f);
  rt_model_random(&m2, &shape_llama, 22, 0.35f);
  const int32_t ids[] = {3, 1, 4, 1, 5, 9, 2, 6};
  const uint32_t cu[] = {0, 5, 8};
  vr_gen_params_t gp;
  vr_gen_params_init(&gp);
  gp.max_new_tokens = 25;
  gp.n = 2;
  gp.sample.temperature = 0.8f;
  vr_rollout_t *r = engine(&m1, 1 << 20, 4, 8, 64), *fresh = engine(&m2, 1 << 20, 4, 8, 64);
  vr_gen_output_t a, b, c;
  assert_int_equal(vr_rollout_generate(r, ids, cu, 2, &gp, &a), 0);
  double secs = -1;
  /* m2's parameters in a buffer of the same layout: the view of m2 points into m2.params */
  assert_int_equal(vr_rollout_set_weights(r, m2.params, m2.n_params, &m2.w, &secs), 0);
  assert_true(secs >= 0);
  assert_int_equal(vr_rollout_generate(r, ids, cu, 2, &gp, &b), 0);
  assert_int_equal(vr_rollout_generate(fresh, ids, cu, 2, &gp, &c), 0);
  expect_same(&b, &c);
  assert_true(memcmp(a.tokens, b.tokens, (a.cu[4] < b.cu[4] ? a.cu[4] : b.cu[4]) * sizeof(int32_t)) != 0);
  /* a buffer of another size is refused and changes nothing */
  assert_int_equal(vr_rollout_set_weights(r, m2.params, m2.n_params - 1, &m2.w, NULL), VR_ERR_INVAL);
  vr_gen_output_free(&a), vr_gen_output_free(&b), vr_gen_output_free(&c);
  vr_rollout_free(r), vr_rollout_free(fresh);
  rt_model_free(&m1), rt_model_free(&m2);
}

static void test_bad_inputs(void **st) {
  (void)st;
  rt_model_t m;
  rt_model_random(&m, &shape_llama, 1, 0.3f);
  const uint64_t bb = vr_rollout_block_bytes(&m.cfg, 4, 4);
  vr_rollout_t *r = engine(&m, 6 * bb, 4, 8, 64); /* 6 blocks = 24 tokens */
  vr_gen_params_t gp;
  vr_gen_params_init(&gp);
  vr_gen_output_t o;
  int32_t ids[200] = {1, 2, 3};
  uint32_t cu[3] = {0, 3, 3};
  assert_int_equal(vr_rollout_generate(r, ids, cu, 2, &gp, &o), VR_ERR_EMPTY_SEQ);
  assert_null(o.tokens);
  ids[1] = 61;
  cu[2] = 4;
  assert_int_equal(vr_rollout_generate(r, ids, cu, 2, &gp, &o), VR_ERR_TOKEN_RANGE);
  ids[1] = -1;
  assert_int_equal(vr_rollout_generate(r, ids, cu, 2, &gp, &o), VR_ERR_TOKEN_RANGE);
  ids[1] = 2;
  uint32_t cul[2] = {0, 96};
  assert_int_equal(vr_rollout_generate(r, ids, cul, 1, &gp, &o), VR_ERR_SEQ_TOO_LONG);
  uint32_t cum[2] = {0, 20};
  assert_int_equal(vr_rollout_generate(r, ids, cum, 1, &gp, &o), VR_ERR_TOO_LARGE); /* 20 + 16 > 24 */
  gp.n = 0;
  assert_int_equal(vr_rollout_generate(r, ids, cu, 1, &gp, &o), VR_ERR_INVAL);
  gp.n = 1;
  gp.sample.top_p = 1.5f;
  assert_int_equal(vr_rollout_generate(r, ids, cu, 1, &gp, &o), VR_ERR_INVAL);
  gp.sample.top_p = 1.0f;
  /* still works afterwards; zero prompts is an empty result */
  assert_int_equal(vr_rollout_generate(r, ids, cu, 1, &gp, &o), 0);
  assert_int_equal(o.cu[1], 16);
  vr_gen_output_free(&o);
  assert_int_equal(vr_rollout_generate(r, ids, cu, 0, &gp, &o), 0);
  assert_int_equal(o.n_resp, 0);
  vr_gen_output_free(&o);
  vr_rollout_free(r);
  /* a budget below one block */
  vr_rollout_options_t op;
  vr_rollout_options_init(&op);
  op.kv_cache_bytes = bb - 1;
  op.block_size = 4;
  vr_rollout_t *none = NULL;
  assert_int_equal(vr_rollout_init(&m.cfg, m.params, m.n_params, &m.w, &op, &none), VR_ERR_NOMEM);
  assert_null(none);
  op.kv_cache_bytes = 1 << 20;
  op.device = "cuda";
  assert_int_not_equal(vr_rollout_init(&m.cfg, m.params, m.n_params, &m.w, &op, &none), 0);
  rt_model_free(&m);
}

static int eos(const char *json, int32_t *ids, uint32_t *n) {
  return vr_gencfg_eos_parse(json, strlen(json), "t.json", 100, ids, 4, n);
}

static void write_file(const char *dir, const char *name, const char *text) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", dir, name);
  FILE *f = fopen(p, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void test_gencfg(void **st) {
  (void)st;
  int32_t ids[4];
  uint32_t n;
  assert_int_equal(eos("{\"eos_token_id\": 2}", ids, &n), 1);
  assert_int_equal(n, 1);
  assert_int_equal(ids[0], 2);
  assert_int_equal(eos("{\"eos_token_id\": [7, 150, 9, 3, 4, 5]}", ids, &n), 1); /* 150 skipped, capped at 4 */
  assert_int_equal(n, 4);
  assert_int_equal(ids[0], 7);
  assert_int_equal(ids[1], 9);
  assert_int_equal(ids[3], 4);
  assert_int_equal(eos("{\"eos_token_id\": null}", ids, &n), 0);
  assert_int_equal(eos("{\"pad_token_id\": 0}", ids, &n), 0);
  assert_int_equal(n, 0);
  assert_int_equal(eos("{\"eos_token_id\": \"2\"}", ids, &n), VR_ERR_MODEL_FORMAT);
  assert_int_equal(eos("{\"eos_token_id\": [1, 2.5]}", ids, &n), VR_ERR_MODEL_FORMAT);
  assert_int_equal(n, 0);
  assert_int_equal(eos("{\"eos_token_id\": [1, [2]]}", ids, &n), VR_ERR_MODEL_FORMAT);
  assert_int_equal(eos("[2]", ids, &n), VR_ERR_MODEL_FORMAT);
  assert_int_equal(eos("{\"eos_token_id\": 2", ids, &n), VR_ERR_MODEL_FORMAT);
  /* one JSON value (json.load: "Extra data"; cJSON dropped the rest), a repeated key is its last */
  assert_int_equal(eos("{\"eos_token_id\": 2} {\"eos_token_id\": 3}", ids, &n), VR_ERR_MODEL_FORMAT);
  assert_int_equal(eos("{\"eos_token_id\": 2}\n\n", ids, &n), 1);
  assert_int_equal(eos("{\"eos_token_id\": 2, \"eos_token_id\": [3, 4]}", ids, &n), 1);
  assert_true(n == 2 && ids[0] == 3 && ids[1] == 4);
  /* generation_config.json first, config.json when it names none, nothing when neither exists */
  char dir[] = "/tmp/vr_gencfg_XXXXXX";
  assert_non_null(mkdtemp(dir));
  assert_int_equal(vr_gencfg_eos_ids(dir, 100, ids, 4, &n), 0);
  assert_int_equal(n, 0);
  write_file(dir, "config.json", "{\"eos_token_id\": 5}");
  assert_int_equal(vr_gencfg_eos_ids(dir, 100, ids, 4, &n), 0);
  assert_true(n == 1 && ids[0] == 5);
  write_file(dir, "generation_config.json", "{\"eos_token_id\": [8, 9]}");
  assert_int_equal(vr_gencfg_eos_ids(dir, 100, ids, 4, &n), 0);
  assert_true(n == 2 && ids[0] == 8 && ids[1] == 9);
  write_file(dir, "generation_config.json", "{\"do_sample\": true}");
  assert_int_equal(vr_gencfg_eos_ids(dir, 100, ids, 4, &n), 0);
  assert_true(n == 1 && ids[0] == 5);
  write_file(dir, "generation_config.json", "{not json");
  assert_int_equal(vr_gencfg_eos_ids(dir, 100, ids, 4, &n), VR_ERR_MODEL_FORMAT);
  assert_int_equal(n, 0);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  assert_int_equal(system(cmd), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_philox_kat),
      cmocka_unit_test(test_sample_hand_cases),
      cmocka_unit_test(test_sample_chi_square),
      cmocka_unit_test(test_kvcache),
      cmocka_unit_test(test_reference_llama),
      cmocka_unit_test(test_reference_qwen2),
      cmocka_unit_test(test_reference_mistral),
      cmocka_unit_test(test_reference_tied),
      cmocka_unit_test(test_paged_equals_one_at_a_time),
      cmocka_unit_test(test_scheduler_random),
      cmocka_unit_test(test_pipeline_equals_plain),
      cmocka_unit_test(test_seeded_sampling),
      cmocka_unit_test(test_stop_ids),
      cmocka_unit_test(test_weight_update),
      cmocka_unit_test(test_bad_inputs),
      cmocka_unit_test(test_gencfg),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
