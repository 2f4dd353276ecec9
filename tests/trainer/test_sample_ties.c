/* test_sample_ties.c: the sampling rule (trainer/vr_sample.h) on tied logits, and the CUDA
 * sampler's algorithm (trainer/cuda_rollout/vr_cuda_roll_sample.cu) against it on the CPU:
 *  - hand cases: groups of n equal maxima under top-p with p * n an integer (the cut falls exactly
 *    on a boundary: exactly ceil(p * n) of them stay, the highest ids), ties at the top-k
 *    threshold all kept, at several temperatures;
 *  - H12's row: row 50 of test_cuda_rollout's tied rows when the generator was shifted by the
 *    kernel tests of commit 5638935 (18 maxima, T 0.7, top-k 5, top-p 0.5): the GPU drew 884,
 *    the CPU 787 because its running double sum of 1/18 passed 0.5 one term early;
 *  - emu_roll_sample(), a plain C transcription of the kernel's steps (the radix selects on
 *    32-bit keys, top-p on 2^32 fixed-point masses with the tie group cut by count, the inverse
 *    CDF over 1024 per-thread id ranges scanned in order), against vr_sample_row on the tied rows
 *    of tests/common/vr_test_tie_rows.h (the rows test_cuda_rollout runs on the GPU with the same
 *    seed) and on rows like test_cuda_rollout's random ones. With V <= 1024 every range is one id,
 *    so the kernel adds in the CPU's order and the tokens must be equal; for larger V only draws
 *    within 1e-6 of a boundary of the cumulative distribution may differ;
 *  - greedy rows as vr_cuda_roll_sample_ws splits them (chunks of 8192 ids, each its maximum and
 *    lowest argmax, merged by value then id): the one-block kernel's token on every greedy draw;
 *  - the ends of the inverse CDF (u = 0, u within 2^-45 of 1) on rows with -inf heads and tails:
 *    never a token of weight 0.
 * The transcription must follow the kernel: change both together. Inputs from fixed seeds
 * (VR_TEST_SEED replaces them). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "vr_sample.h"
#include "vr_test_seed.h"
#include "vr_test_tie_rows.h"

/* ---- the CUDA kernel's algorithm, step for step (vr_cuda_roll_sample.cu) ---------------------- */

enum { EMU_NT = 1024 }; /* VR_ROLL_SAMPLE_THREADS */

static uint32_t emu_fkey(float f) {
  if (f == 0.f) f = 0.f;
  uint32_t u;
  memcpy(&u, &f, 4);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
static uint64_t emu_fixed32(double e) { return (uint64_t)(e * 4294967296.0); }

/* The kernel's radix_kth: the key of the k-th largest among the elements with sel, by 8-bit
 * digits from bit 24 down. keys[i] holds element i's key; sel NULL selects all, else sel_key is
 * matched against zkeys[i]. */
static uint32_t emu_radix_kth(int V, int k, const uint32_t *keys, const uint32_t *zkeys, int use_sel, uint32_t sel_key) {
  uint32_t prefix = 0, mask = 0, cnt[256];
  int rem = k;
  for (int shift = 24; shift >= 0; shift -= 8) {
    memset(cnt, 0, sizeof cnt);
    for (int i = 0; i < V; ++i)
      if (!use_sel || zkeys[i] == sel_key)
        if ((keys[i] & mask) == prefix) cnt[(keys[i] >> shift) & 255u]++;
    uint32_t d = 255;
    for (; d > 0; --d) {
      if ((int)cnt[d] >= rem) break;
      rem -= (int)cnt[d];
    }
    prefix |= d << shift;
    mask |= 255u << shift;
  }
  return prefix;
}

/* The kernel's token for one row (u = the row's uniform), -1 for a non-finite row. Scratch: ws
 * holds 2 * V uint32. */
static int emu_roll_sample(const float *l, int V, float temperature, int top_k, float top_p, double u, uint32_t *ws) {
  const int greedy = temperature == 0.f;
  const float T = greedy ? 1.f : temperature;
  uint32_t *zk = ws, *ids = ws + V;
  /* (A) */
  float m = -INFINITY;
  int am = 0x7fffffff, bad = 0, any = 0;
  for (int i = 0; i < V; ++i) {
    const float v = l[i];
    if (isnan(v) || v == INFINITY) bad = 1;
    any |= v > -INFINITY;
    const float z = v / T;
    if (z > m || (z == m && i < am)) m = z, am = i;
    zk[i] = emu_fkey(z);
    ids[i] = (uint32_t)i;
  }
  if (bad || !any) return -1;
  if (greedy) return am;
  uint32_t kmin = 0;
  int id_min = 0;
  /* (C) */
  if (top_k > 0 && top_k < V) kmin = emu_radix_kth(V, top_k, zk, zk, 0, 0);
  /* (D) */
  if (top_p < 1.f) {
    uint64_t tot = 0;
    for (int i = 0; i < V; ++i)
      if (zk[i] >= kmin) tot += emu_fixed32(exp((double)(l[i] / T) - (double)m));
    const double P = (double)top_p * (double)tot;
    uint32_t prefix = 0, mask = 0, cnt[256];
    uint64_t above = 0, mass[256];
    int keep = 0, dropn = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      memset(cnt, 0, sizeof cnt);
      memset(mass, 0, sizeof mass);
      for (int i = 0; i < V; ++i)
        if (zk[i] >= kmin && (zk[i] & mask) == prefix) {
          const uint32_t d = (zk[i] >> shift) & 255u;
          cnt[d]++;
          mass[d] += emu_fixed32(exp((double)(l[i] / T) - (double)m));
        }
      uint64_t acc = above, chosen_acc = above;
      int chosen = -1;
      for (int d = 255; d >= 0; --d) {
        if (cnt[d] == 0) continue;
        if (!((double)acc < P)) break;
        chosen = d, chosen_acc = acc;
        acc += mass[d];
      }
      if (chosen < 0) chosen = 255;
      above = chosen_acc;
      prefix |= (uint32_t)chosen << shift;
      if (shift == 0) {
        const uint64_t c = cnt[chosen], e = mass[chosen] / c;
        uint64_t kp = c;
        if (e > 0) {
          kp = 0;
          while (kp < c && (double)(chosen_acc + kp * e) < P) ++kp;
        }
        keep = (int)kp;
        dropn = (int)(c - kp);
      }
      mask |= 255u << shift;
    }
    kmin = prefix;
    if (dropn > 0) id_min = (int)emu_radix_kth(V, keep, ids, zk, 1, kmin);
  }
  /* (E) */
  const int chunk = (V + EMU_NT - 1) / EMU_NT;
  double loc[EMU_NT], start[EMU_NT], run = 0.0;
  int last_here[EMU_NT], last = -1, found = 0x7fffffff;
  for (int t = 0; t < EMU_NT; ++t) {
    const int i0 = t * chunk < V ? t * chunk : V, i1 = i0 + chunk < V ? i0 + chunk : V;
    loc[t] = 0.0;
    last_here[t] = -1;
    for (int i = i0; i < i1; ++i)
      if (zk[i] > kmin || (zk[i] == kmin && i >= id_min)) {
        const double e = exp((double)(l[i] / T) - (double)m);
        if (e > 0.0) loc[t] += e, last_here[t] = i;
      }
  }
  for (int t = 0; t < EMU_NT; ++t) start[t] = run, run += loc[t];
  const double target = u * run;
  for (int t = 0; t < EMU_NT; ++t) {
    if (last_here[t] > last) last = last_here[t];
    if (last_here[t] < 0 || !(start[t] + loc[t] > target)) continue;
    const int i0 = t * chunk, i1 = i0 + chunk < V ? i0 + chunk : V;
    double cum = start[t];
    int tok = -1;
    for (int i = i0; i < i1 && tok < 0; ++i)
      if (zk[i] > kmin || (zk[i] == kmin && i >= id_min)) {
        const double e = exp((double)(l[i] / T) - (double)m);
        cum += e;
        if (e > 0.0 && cum > target) tok = i;
      }
    if (tok < 0) tok = last_here[t];
    if (tok < found) found = tok;
  }
  return found == 0x7fffffff ? last : found;
}

/* Greedy rows over blocks (k_roll_greedy_part + greedy_merge): -1 for a row holding NaN / +Inf or
 * only -inf, else the lowest id among the maxima. */
enum { EMU_PCH = 8192 };
static int emu_greedy_chunks(const float *l, int V) {
  float m = -INFINITY;
  int am = 0x7fffffff;
  for (int c0 = 0; c0 < V; c0 += EMU_PCH) {
    float mc = -INFINITY;
    int ac = 0x7fffffff;
    for (int i = c0; i < V && i < c0 + EMU_PCH; ++i) {
      if (isnan(l[i]) || l[i] == INFINITY) return -1;
      if (l[i] > mc) mc = l[i], ac = i;
    }
    if (mc > m || (mc == m && ac < am)) m = mc, am = ac;
  }
  return m == -INFINITY ? -1 : am;
}

/* ---- helpers ------------------------------------------------------------------------------------- */

/* 1 when u lies within 1e-6 of a boundary of the cumulative distribution next to token a or b. */
static int near_cdf_edge(const double *probs, int a, int b, double u) {
  const int t[2] = {a, b};
  for (int j = 0; j < 2; ++j) {
    double before = 0;
    for (int i = 0; i < t[j]; ++i) before += probs[i];
    if (fabs(before - u) < 1e-6 || fabs(before + probs[t[j]] - u) < 1e-6) return 1;
  }
  return 0;
}

typedef struct {
  int draws, differ, edge;
} cmp_t;

/* One draw: the emulated kernel against vr_sample_row. exact: V <= 1024, no edge allowed. */
static void compare_draw(const float *l, int V, const vr_sample_req_t *q, void *ws, uint32_t *ews, double *probs,
                         cmp_t *c, const char *what, int r) {
  int32_t ht;
  float hlp;
  const int rc = vr_sample_row(l, V, &q->p, q->key, q->stream, q->position, ws, &ht, &hlp);
  const double u = vr_sample_uniform(q->key, q->stream, q->position);
  const int g = emu_roll_sample(l, V, q->p.temperature, q->p.top_k, q->p.top_p, u, ews);
  c->draws++;
  if (q->p.temperature == 0.f && emu_greedy_chunks(l, V) != g) {
    printf("  %s row %d: greedy over chunks %d, one block %d\n", what, r, emu_greedy_chunks(l, V), g);
    c->differ++;
    return;
  }
  if (rc != 0) {
    if (g != -1) {
      printf("  %s row %d: non-finite, emulated kernel %d\n", what, r, g);
      c->differ++;
    }
    return;
  }
  if (g == ht) return;
  vr_sample_probs(l, V, &q->p, ws, probs);
  if (V > EMU_NT && g >= 0 && g < V && probs[g] > 0 && near_cdf_edge(probs, g, ht, u)) {
    c->edge++;
    return;
  }
  int kept = 0;
  for (int i = 0; i < V; ++i) kept += probs[i] > 0;
  if (c->differ < 8)
    printf("  %s row %d (T %.2f k %d p %.6g u %.6f): emulated kernel %d, vr_sample_row %d (kept %d)\n", what, r,
           q->p.temperature, q->p.top_k, q->p.top_p, u, g, ht, kept);
  c->differ++;
}

/* ---- tests --------------------------------------------------------------------------------------- */

/* n equal maxima and top-p p: exactly ceil(p * n) stay (the mass above the j-th from the top is j
 * of n, dropped iff j >= p * n), the highest ids, with equal probabilities; the same whether the
 * rest is cut by top-k (its threshold inside the maxima or exactly at n) or is -inf. */
static void test_tie_cut_hand(void **st) {
  (void)st;
  enum { V = 300 };
  static const int ns[] = {2, 3, 4, 8, 12, 16, 18, 20, 24, 32, 64, 100};
  static const float ps[] = {0.5f, 0.25f, 0.75f, 0.125f, 0.875f, 0.0625f, 0.9375f, 0.9f, 0.7f, 0.05f, 0.999f};
  static const float temps[] = {0.3f, 0.7f, 1.0f, 1.7f};
  float l[V];
  double pr[V];
  void *ws = malloc(VR_SAMPLE_SCRATCH_BYTES(V));
  int cases = 0;
  for (size_t a = 0; a < sizeof ns / sizeof ns[0]; ++a)
    for (size_t b = 0; b < sizeof ps / sizeof ps[0]; ++b)
      for (int mode = 0; mode < 3; ++mode) {
        const int n = ns[a];
        /* the maxima at ids 7, 7 + 2, ... (others between and after them) */
        for (int i = 0; i < V; ++i) l[i] = mode == 2 ? -INFINITY : 1.0f - 0.25f * (float)(i % 9);
        for (int j = 0; j < n; ++j) l[7 + 2 * j] = 4.5f;
        int want = 0;
        while (want < n && (double)want < (double)ps[b] * n) ++want;
        for (size_t t = 0; t < sizeof temps / sizeof temps[0]; ++t) {
          const vr_sample_params_t sp = {temps[t], mode == 0 ? n : mode == 1 ? 1 + (int)(b % (size_t)n) : 0, ps[b]};
          vr_sample_probs(l, V, &sp, ws, pr);
          int kept = 0, lowest = V;
          for (int i = 0; i < V; ++i)
            if (pr[i] > 0) {
              ++kept;
              if (i < lowest) lowest = i;
              if (l[i] != 4.5f || fabs(pr[i] - 1.0 / want) > 1e-12) fail_msg("token %d kept with %g", i, pr[i]);
            }
          if (kept != want || lowest != 7 + 2 * (n - want))
            fail_msg("%d maxima, top-p %.9g, T %.2f, mode %d: kept %d (lowest id %d), want %d", n, ps[b], temps[t],
                     mode, kept, lowest, want);
          ++cases;
        }
      }
  /* ties at the top-k threshold all stay, top-p off: k 2 of values 5 5 5 4 -> the three 5s */
  const float k3[5] = {5, 4, 5, 1, 5};
  const vr_sample_params_t sk = {0.8f, 2, 1.0f};
  vr_sample_probs(k3, 5, &sk, ws, pr);
  assert_true(fabs(pr[0] - 1.0 / 3) < 1e-12 && fabs(pr[2] - 1.0 / 3) < 1e-12 && fabs(pr[4] - 1.0 / 3) < 1e-12);
  assert_true(pr[1] == 0 && pr[3] == 0);
  /* a tie group below the maximum, cut inside it: masses 1 | w w w w (w = e^-1 at T 1); p such
   * that p * (1 + 4w) lies between 1 + w and 1 + 2w: the maximum and the 2 highest ids of the
   * group stay */
  const float g4[6] = {3, 4, 3, 0, 3, 3};
  const double w = exp(-1.0), pmid = (1 + 1.5 * w) / (1 + 4 * w);
  const vr_sample_params_t sg = {1.0f, 0, (float)pmid};
  vr_sample_probs(g4, 6, &sg, ws, pr);
  assert_true(pr[0] == 0 && pr[2] == 0 && pr[3] == 0 && pr[1] > 0 && pr[4] > 0 && pr[5] > 0);
  free(ws);
  printf("tie cuts: %d cases\n", cases);
}

/* H12's report (vr_test_h12_row): the 9 highest ids of the 18 maxima stay, u picks 884. */
static void test_h12_row50(void **st) {
  (void)st;
  enum { V = VR_TEST_H12_V };
  float l[V];
  vr_sample_req_t q;
  vr_test_h12_row(l, &q);
  const double u = vr_sample_uniform(q.key, q.stream, q.position);
  assert_true(fabs(u - 0.470215) < 1e-6);
  int top = 0;
  for (int i = 0; i < V; ++i) top += l[i] == 6.0f;
  assert_int_equal(top, 18);
  double pr[V];
  void *ws = malloc(VR_SAMPLE_SCRATCH_BYTES(V));
  vr_sample_probs(l, V, &q.p, ws, pr);
  int kept = 0, lowest = V;
  for (int i = 0; i < V; ++i)
    if (pr[i] > 0) ++kept, lowest = i < lowest ? i : lowest;
  assert_int_equal(kept, 9);
  assert_int_equal(lowest, 669);
  int32_t tok;
  float lp;
  assert_int_equal(vr_sample_row(l, V, &q.p, q.key, q.stream, q.position, ws, &tok, &lp), 0);
  uint32_t ews[2 * V];
  assert_int_equal(emu_roll_sample(l, V, q.p.temperature, q.p.top_k, q.p.top_p, u, ews), VR_TEST_H12_TOKEN);
  assert_int_equal(tok, VR_TEST_H12_TOKEN);
  free(ws);
}

/* The emulated kernel against vr_sample_row on the tied rows test_cuda_rollout runs on the GPU
 * (same default seed): 240 rows of V 1000 with 16 draws each (equal tokens required), 6 rows of
 * V 151936 (Qwen2's vocabulary) with 4 draws (CDF edges allowed). */
static void test_kernel_tied_rows(void **st) {
  (void)st;
  const uint64_t seed = vr_test_seed("test_sample_ties", 20261201);
  static const struct { int V, rows, draws; } sets[] = {{1000, 240, 16}, {151936, 6, 4}};
  for (int s = 0; s < 2; ++s) {
    const int V = sets[s].V;
    const uint64_t sd = seed + (uint64_t)s; /* test_cuda_rollout's test_sample_tied(seed + s, ...) */
    uint64_t rs = vr_test_tie_state(sd);
    float *l = malloc(sizeof(float) * V);
    double *probs = malloc(sizeof(double) * V);
    uint32_t *ews = malloc(sizeof(uint32_t) * 2 * V);
    void *ws = malloc(VR_SAMPLE_SCRATCH_BYTES(V));
    cmp_t c = {0, 0, 0};
    for (int r = 0; r < sets[s].rows; ++r) {
      vr_sample_params_t p;
      vr_test_tie_row(&rs, r, V, l, &p);
      for (int d = 0; d < sets[s].draws; ++d) {
        const vr_sample_req_t q = vr_test_tie_req(sd, r, d, &p);
        compare_draw(l, V, &q, ws, ews, probs, &c, "tied", r);
      }
    }
    printf("tied rows V %d: %d draws, %d differ, %d at a CDF edge\n", V, c.draws, c.differ, c.edge);
    assert_int_equal(c.differ, 0);
    assert_true(c.edge <= c.draws / 100 + 1);
    free(l);
    free(probs);
    free(ews);
    free(ws);
  }
}

/* The emulated kernel against vr_sample_row on test_cuda_rollout's kind of random rows (its
 * parameter cycle), tied (multiples of 0.25) and not, from 4 generator states each. */
static void test_kernel_random_rows(void **st) {
  (void)st;
  enum { V = 1000, B = 400 };
  const uint64_t seed = vr_test_seed("test_sample_ties random rows", 7);
  static const float temps[] = {0.f, 1.f, 0.7f, 1.3f};
  static const int topks[] = {0, 1, 5, 50, 100000};
  static const float topps[] = {1.f, 0.9f, 0.5f, 0.999f, 0.05f};
  float *l = malloc(sizeof(float) * V);
  double *probs = malloc(sizeof(double) * V);
  uint32_t *ews = malloc(sizeof(uint32_t) * 2 * V);
  void *ws = malloc(VR_SAMPLE_SCRATCH_BYTES(V));
  cmp_t c = {0, 0, 0};
  for (int rep = 0; rep < 8; ++rep) {
    uint64_t rs = seed + (uint64_t)rep * 0x632be59bd9b4e019ull;
    for (int b = 0; b < B; ++b) {
      vr_test_random_logits(&rs, l, V, rep % 2 ? 0.25f : 0.f);
      if (b == 1) l[3] = NAN; /* non-finite rows: the kernel's -1 */
      if (b == 2)
        for (int i = 0; i < V; ++i) l[i] = -INFINITY;
      vr_sample_req_t q;
      q.row = (uint32_t)b;
      q.p = (vr_sample_params_t){temps[b % 4], topks[(b / 4) % 5], topps[(b / 20) % 5]};
      q.key = vr_sample_prompt_key(1234, (uint64_t)(b % 3));
      q.stream = (uint32_t)(b % 5);
      q.position = (uint32_t)(b * 7);
      compare_draw(l, V, &q, ws, ews, probs, &c, rep % 2 ? "random tied" : "random", b);
    }
  }
  printf("random rows: %d draws, %d differ\n", c.draws, c.differ);
  assert_int_equal(c.differ, 0);
  free(l);
  free(probs);
  free(ews);
  free(ws);
}

/* The emulated kernel at the ends of the inverse CDF (vr_test_tie_rows.h's VR_TEST_U_ENDS) on rows
 * with -inf heads and tails (64 of V 1000, 24 of V 151936; test_cuda_rollout runs the first 12 of
 * those): never a token of weight 0 (the kernel once returned a range's last survivor, -inf or
 * not, when its walk's sums rounded below the scan's). */
static void test_kernel_u_ends(void **st) {
  (void)st;
  const uint64_t seed = vr_test_seed("test_sample_ties u ends", 20261201);
  static const double us[] = VR_TEST_U_ENDS;
  static const int Vs[] = {1000, 151936};
  int bad = 0, n = 0;
  for (int s = 0; s < 2; ++s) {
    const int V = Vs[s];
    uint64_t rs = seed + 11 + (uint64_t)s; /* test_cuda_rollout's test_sample_u_ends(seed + 11 + s, ...) */
    float *l = malloc(sizeof(float) * V);
    double *probs = malloc(sizeof(double) * V);
    uint32_t *ews = malloc(sizeof(uint32_t) * 2 * V);
    void *ws = malloc(VR_SAMPLE_SCRATCH_BYTES(V));
    for (int r = 0; r < (V > EMU_NT ? 24 : 64); ++r) {
      vr_sample_params_t p;
      vr_test_u_ends_row(&rs, r, V, l, &p);
      vr_sample_probs(l, V, &p, ws, probs);
      for (size_t k = 0; k < sizeof us / sizeof us[0]; ++k, ++n) {
        const int t = emu_roll_sample(l, V, p.temperature, p.top_k, p.top_p, us[k], ews);
        if (!vr_test_u_ends_ok(probs, V, us[k], t)) {
          if (bad < 8) printf("  V %d row %d u %.17g: emulated kernel %d (p %g)\n", V, r, us[k], t, t >= 0 ? probs[t] : -1.0);
          ++bad;
        }
      }
    }
    free(l);
    free(probs);
    free(ews);
    free(ws);
  }
  printf("u ends: %d draws, %d bad\n", n, bad);
  assert_int_equal(bad, 0);
}

/* Greedy over chunks on Qwen2's vocabulary with the maxima placed across chunk boundaries: equal
 * maxima in two chunks (the lower id wins), a row of one value, a -inf row, a NaN in the last chunk,
 * a larger value in a later chunk; each against vr_sample_row's greedy token. */
static void test_greedy_chunks(void **st) {
  (void)st;
  enum { V = 151936 };
  float *l = malloc(sizeof(float) * V);
  void *ws = malloc(VR_SAMPLE_SCRATCH_BYTES(V));
  const vr_sample_params_t p = {0.f, 0, 1.f};
  static const int places[][2] = {{8191, 8192}, {8192, 8191}, {20000, 9000}, {151935, 0}, {16384, 16383}};
  for (int k = 0; k < 9; ++k) {
    for (int i = 0; i < V; ++i) l[i] = (float)((i * 37) % 1001) * 1e-3f - 0.5f;
    int want;
    if (k < 5) {
      l[places[k][0]] = l[places[k][1]] = 3.f;
      want = places[k][0] < places[k][1] ? places[k][0] : places[k][1];
    } else if (k == 5) {
      for (int i = 0; i < V; ++i) l[i] = 1.f;
      want = 0;
    } else if (k == 6) {
      for (int i = 0; i < V; ++i) l[i] = -INFINITY;
      want = -1;
    } else if (k == 7) {
      l[V - 5] = NAN;
      want = -1;
    } else {
      l[9000] = 3.f, l[140000] = 3.5f;
      want = 140000;
    }
    int32_t ht = -1;
    float hlp;
    const int rc = vr_sample_row(l, V, &p, 1, 0, 0, ws, &ht, &hlp);
    assert_int_equal(emu_greedy_chunks(l, V), want);
    if (want >= 0) assert_int_equal(rc == 0 ? ht : -2, want);
    else assert_true(rc != 0);
  }
  free(l);
  free(ws);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_tie_cut_hand),
      cmocka_unit_test(test_h12_row50),
      cmocka_unit_test(test_kernel_tied_rows),
      cmocka_unit_test(test_kernel_random_rows),
      cmocka_unit_test(test_kernel_u_ends),
      cmocka_unit_test(test_greedy_chunks),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
