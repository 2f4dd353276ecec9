/* test_cuda_rollout.c: the rollout engine's CUDA kernels (trainer/cuda_rollout/) against plain
 * host computations: K/V appended into the paged cache (the layout of vr_cuda_roll_ops.h, bit
 * for bit), the fused RoPE + append against vr_cuda_rope then vr_cuda_roll_kv_append, the Hopper
 * decode GEMM against a double product and cuBLASLt (and its bits against themselves), decode attention over random block tables (GQA 1/4/7/8/16, head dims 8..256,
 * lengths 1..5000, split and unsplit partitions, sliding window, padding rows) against a
 * double-precision softmax, and the sampler against the CPU engine's (trainer/vr_sample.c:
 * sorting and sequential sums where the GPU uses radix descents and scans) on random rows and on
 * tests/common/vr_test_tie_rows.h's tied rows (their own generator state), plus chi-square
 * tests of the sampled distribution against vr_sample_probs on a small vocabulary. Inputs from a fixed seed (VR_TEST_SEED
 * replaces it). Exit code: 0 pass, 1 fail, 77 no GPU (ctest: skipped). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vr_cuda_check.h"
#include "vr_cuda_ops.h"
#include "vr_cuda_roll_ops.h"
#include "rollout_test_model.h"
#include "vr_cuda_roll_backend.h"
#include "vr_rollout.h"
#include "vr_rollout_lm.h"
#include "vr_sample.h"
#include "vr_test_seed.h"
#include "vr_test_tie_rows.h"

#define CK(call) VR_CUDA_CHECK(call)

static int g_fail = 0;
static uint64_t g_rng;
static unsigned g_dgemm = VR_CUDA_ROLL_DGEMM_DEFAULT; /* the cuda engines' decode GEMMs (vr_cuda_roll_use_dgemm) */
static int g_graph_io = -1; /* the cuda engines' step I/O form (vr_cuda_roll_graph_io); -1: the default */

static uint32_t irand(uint32_t n) { return vr_test_rand(&g_rng, n); }
static float frand(void) { return (float)vr_test_rand(&g_rng, 1u << 30) / (float)(1u << 29) - 1.f; } /* [-1, 1) */

static uint16_t f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static float bf2f(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static void *dalloc(size_t n) {
  void *p = NULL;
  CK(cudaMalloc(&p, n));
  CK(cudaMemset(p, 0xFF, n)); /* poison: NaN in bf16 and fp32 */
  return p;
}
static void *todev(const void *h, size_t n) {
  void *p = dalloc(n);
  CK(cudaMemcpy(p, h, n, cudaMemcpyHostToDevice));
  return p;
}
static void tohost(void *h, const void *d, size_t n) {
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost));
}
static void report(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#include <stdarg.h>
static void report(int ok, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  printf("%-4s ", ok ? "ok" : "FAIL");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  fflush(stdout);
  if (!ok) g_fail = 1;
}

/* ------------------------------------------------------------ paged cache + decode attention */

/* One batch: n sequences of lens[i] cached tokens (0 = padding row), H query heads, Hkv kv
 * heads, head dim D, keys in blocks placed at random in a pool; part 0 = the engine's pick. */
static void test_decode_impl(int H, int Hkv, int D, const int *lens, int n, int window, int part, unsigned flags) {
  const int ld = (H + 2 * Hkv) * D, koff = H * D, voff = (H + Hkv) * D;
  int total = 0, max_len = 0, max_blocks = 1;
  for (int i = 0; i < n; ++i) {
    total += lens[i];
    if (lens[i] > max_len) max_len = lens[i];
    const int nb = (lens[i] + VR_ROLL_BLOCK - 1) / VR_ROLL_BLOCK;
    if (nb > max_blocks) max_blocks = nb;
  }
  int pool = 0;
  for (int i = 0; i < n; ++i) pool += (lens[i] + VR_ROLL_BLOCK - 1) / VR_ROLL_BLOCK;
  pool += 3; /* unused blocks too */
  /* a random permutation of the pool's blocks, handed out in order */
  int32_t *perm = malloc(sizeof(int32_t) * pool);
  for (int i = 0; i < pool; ++i) perm[i] = i;
  for (int i = pool - 1; i > 0; --i) {
    const int j = (int)irand((uint32_t)i + 1), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  int32_t *bt = malloc(sizeof(int32_t) * (size_t)n * max_blocks);
  int used = 0;
  for (int i = 0; i < n; ++i)
    for (int k = 0; k < max_blocks; ++k)
      bt[i * max_blocks + k] = k * VR_ROLL_BLOCK < lens[i] ? perm[used++] : -1;
  /* the cached tokens' K/V rows (total, ld) and their slots */
  const size_t T = total > 0 ? (size_t)total : 1;
  uint16_t *kv = malloc(T * ld * 2);
  int32_t *slots = malloc(T * 4);
  for (size_t i = 0; i < T * ld; ++i) kv[i] = f2bf(frand());
  size_t t = 0;
  for (int i = 0; i < n; ++i)
    for (int p = 0; p < lens[i]; ++p, ++t)
      slots[t] = bt[i * max_blocks + p / VR_ROLL_BLOCK] * VR_ROLL_BLOCK + p % VR_ROLL_BLOCK;
  const size_t cache_elems = (size_t)pool * Hkv * VR_ROLL_BLOCK * D;
  uint16_t *kc_d = dalloc(cache_elems * 2), *vc_d = dalloc(cache_elems * 2);
  uint16_t *kv_d = todev(kv, T * ld * 2);
  int32_t *slots_d = todev(slots, T * 4);
  vr_cuda_roll_kv_append(kc_d, vc_d, kv_d, ld, koff, voff, slots_d, total, Hkv, D, 0);
  /* the layout, bit for bit, on every appended element */
  uint16_t *kc = malloc(cache_elems * 2), *vc = malloc(cache_elems * 2);
  tohost(kc, kc_d, cache_elems * 2);
  tohost(vc, vc_d, cache_elems * 2);
  size_t bad_layout = 0;
  for (size_t r = 0; r < (size_t)total; ++r) {
    const size_t blk = (size_t)slots[r] / VR_ROLL_BLOCK, off = (size_t)slots[r] % VR_ROLL_BLOCK;
    for (int hk = 0; hk < Hkv; ++hk)
      for (int d = 0; d < D; ++d) {
        const size_t head = blk * Hkv + hk;
        const size_t ki = ((head * (D / 8) + d / 8) * VR_ROLL_BLOCK + off) * 8 + d % 8;
        const size_t vi = (head * VR_ROLL_BLOCK + off) * D + d;
        bad_layout += kc[ki] != kv[r * ld + koff + hk * D + d];
        bad_layout += vc[vi] != kv[r * ld + voff + hk * D + d];
      }
  }
  /* queries (n, ld), only the q columns matter */
  uint16_t *q = malloc((size_t)n * ld * 2);
  for (size_t i = 0; i < (size_t)n * ld; ++i) q[i] = f2bf(frand() * 2.f);
  uint16_t *q_d = todev(q, (size_t)n * ld * 2);
  int32_t *bt_d = todev(bt, sizeof(int32_t) * (size_t)n * max_blocks);
  int32_t *lens_d = todev(lens, sizeof(int32_t) * n);
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  if (part <= 0) part = vr_cuda_roll_pick_part(n, H, Hkv, D, sms);
  const int max_parts = (max_len + part - 1) / part > 0 ? (max_len + part - 1) / part : 1;
  float *po = dalloc((size_t)n * H * max_parts * D * 4), *pml = dalloc((size_t)n * H * max_parts * 2 * 4);
  const int ld_out = H * D;
  uint16_t *out_d = dalloc((size_t)n * ld_out * 2);
  const float scale = 1.f / sqrtf((float)D);
  vr_cuda_roll_decode_attention(out_d, ld_out, q_d, ld, 0, kc_d, vc_d, bt_d, max_blocks, NULL, lens_d, n, H, Hkv, D, window,
                                scale, part, max_parts, po, pml, flags, 0);
  uint16_t *out = malloc((size_t)n * ld_out * 2), *out2 = malloc((size_t)n * ld_out * 2);
  tohost(out, out_d, (size_t)n * ld_out * 2);
  /* again on a poisoned output and scratch: the same bits */
  CK(cudaMemset(out_d, 0x7f, (size_t)n * ld_out * 2));
  CK(cudaMemset(po, 0x7f, (size_t)n * H * max_parts * D * 4));
  vr_cuda_roll_decode_attention(out_d, ld_out, q_d, ld, 0, kc_d, vc_d, bt_d, max_blocks, NULL, lens_d, n, H, Hkv, D, window,
                                scale, part, max_parts, po, pml, flags, 0);
  tohost(out2, out_d, (size_t)n * ld_out * 2);
  size_t rerun_diff = 0;
  for (size_t i = 0; i < (size_t)n * ld_out; ++i) rerun_diff += out[i] != out2[i];
  free(out2);
  /* reference: double softmax over the sequence's own rows of kv */
  double maxd = 0, num = 0, den = 0;
  size_t nonfinite = 0;
  double *sc = malloc(sizeof(double) * (max_len > 0 ? max_len : 1));
  size_t row0 = 0;
  const int G = H / Hkv;
  for (int i = 0; i < n; ++i) {
    const int L = lens[i], kb = window > 0 && L > window ? L - window : 0;
    for (int h = 0; h < H; ++h) {
      const int hk = h / G;
      double m = -INFINITY, z = 0;
      for (int j = kb; j < L; ++j) {
        double s = 0;
        for (int d = 0; d < D; ++d)
          s += (double)bf2f(q[(size_t)i * ld + h * D + d]) * bf2f(kv[(row0 + j) * ld + koff + hk * D + d]);
        sc[j] = s * scale;
        if (sc[j] > m) m = sc[j];
      }
      for (int j = kb; j < L; ++j) z += exp(sc[j] - m);
      for (int d = 0; d < D; ++d) {
        double o = 0;
        for (int j = kb; j < L; ++j) o += exp(sc[j] - m) / z * bf2f(kv[(row0 + j) * ld + voff + hk * D + d]);
        const float g = bf2f(out[(size_t)i * ld_out + h * D + d]);
        if (!isfinite(g)) {
          ++nonfinite;
          continue;
        }
        const double df = fabs(g - o);
        if (df > maxd) maxd = df;
        num += df * df;
        den += o * o;
      }
    }
    row0 += (size_t)L;
  }
  const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
  char lens_s[96];
  int off = 0;
  for (int i = 0; i < n && off < 80; ++i) off += snprintf(lens_s + off, sizeof lens_s - off, "%s%d", i ? "," : "", lens[i]);
  const unsigned kind = vr_cuda_roll_attn_kernel(G, D, flags);
  report(bad_layout == 0 && nonfinite == 0 && rerun_diff == 0 && maxd < 1.6e-2 && rel < 1e-2,
         "decode attn (%s) H%d Hkv%d D%d window %d part %d parts %d lens %s: rel %.2e maxabs %.2e layout-mismatch %zu "
         "non-finite %zu, rerun differing %zu",
         kind == VR_ROLL_ATTN_MMA ? "mma" : kind == VR_ROLL_ATTN_REGS ? "regs" : "ring", H, Hkv, D, window, part,
         max_parts, lens_s, rel, maxd, bad_layout, nonfinite, rerun_diff);
  free(sc);
  free(out);
  free(q);
  free(kc);
  free(vc);
  free(kv);
  free(slots);
  free(bt);
  free(perm);
  CK(cudaFree(kc_d));
  CK(cudaFree(vc_d));
  CK(cudaFree(kv_d));
  CK(cudaFree(slots_d));
  CK(cudaFree(q_d));
  CK(cudaFree(bt_d));
  CK(cudaFree(lens_d));
  CK(cudaFree(po));
  CK(cudaFree(pml));
  CK(cudaFree(out_d));
}

/* The kernels (the ring, the register one, the tensor-core one where D % 16 == 0) on the same inputs
 * (the generator restarted). */
static void test_decode(int H, int Hkv, int D, const int *lens, int n, int window, int part) {
  const uint64_t r0 = g_rng;
  test_decode_impl(H, Hkv, D, lens, n, window, part, VR_ROLL_ATTN_RING);
  g_rng = r0;
  test_decode_impl(H, Hkv, D, lens, n, window, part, VR_ROLL_ATTN_REGS);
  if (D % 16 == 0) {
    g_rng = r0;
    test_decode_impl(H, Hkv, D, lens, n, window, part, VR_ROLL_ATTN_MMA);
  }
}

/* Elements (bf16 bit patterns) that differ between device arrays a_d and b_d of n each; ha, hb:
 * host scratch of n. */
static size_t count_diff(const uint16_t *a_d, const uint16_t *b_d, size_t n, uint16_t *ha, uint16_t *hb) {
  size_t bad = 0;
  tohost(ha, a_d, n * 2);
  tohost(hb, b_d, n * 2);
  for (size_t i = 0; i < n; ++i) bad += ha[i] != hb[i];
  return bad;
}

/* vr_cuda_roll_rope_append == vr_cuda_rope + vr_cuda_roll_kv_append: the rotated q/k columns of
 * qkv and both caches (from the same poisoned start), bit for bit; rows with slot -1 rotate but
 * write no cache. */
static void test_rope_append(int T, int H, int Hkv, int D) {
  const int ld = (H + 2 * Hkv) * D + 8, qoff = 0, koff = H * D, voff = (H + Hkv) * D;
  const int nblk = (T + VR_ROLL_BLOCK - 1) / VR_ROLL_BLOCK + 2;
  const size_t cache = (size_t)nblk * Hkv * VR_ROLL_BLOCK * D;
  uint16_t *qkv = malloc((size_t)T * ld * 2);
  int32_t *pos = malloc(sizeof(int32_t) * T), *slots = malloc(sizeof(int32_t) * T);
  float *inv = malloc(sizeof(float) * (D / 2));
  for (size_t i = 0; i < (size_t)T * ld; ++i) qkv[i] = f2bf(frand());
  for (int t = 0; t < T; ++t) {
    pos[t] = (int32_t)irand(4000);
    slots[t] = t % 7 == 3 ? -1 : (int32_t)(nblk * VR_ROLL_BLOCK - 1 - t); /* distinct, from the pool's end */
  }
  for (int i = 0; i < D / 2; ++i) inv[i] = powf(10000.f, -2.f * i / D);
  uint16_t *a_d = todev(qkv, (size_t)T * ld * 2), *b_d = todev(qkv, (size_t)T * ld * 2);
  int32_t *pos_d = todev(pos, sizeof(int32_t) * T), *slots_d = todev(slots, sizeof(int32_t) * T);
  float *inv_d = todev(inv, sizeof(float) * (D / 2));
  uint16_t *ka = dalloc(cache * 2), *va = dalloc(cache * 2), *kb = dalloc(cache * 2), *vb = dalloc(cache * 2);
  vr_cuda_rope(a_d, ld, qoff, koff, H, Hkv, D, pos_d, inv_d, 1.f, T, 0);
  vr_cuda_roll_kv_append(ka, va, a_d, ld, koff, voff, slots_d, T, Hkv, D, 0);
  vr_cuda_roll_rope_append(kb, vb, b_d, ld, qoff, koff, voff, pos_d, slots_d, inv_d, 1.f, T, H, Hkv, D, 0);
  uint16_t *ha = malloc((size_t)T * ld * 2), *hb = malloc((size_t)T * ld * 2);
  uint16_t *ca = malloc(cache * 2), *cb = malloc(cache * 2);
  const size_t bad_qkv = count_diff(a_d, b_d, (size_t)T * ld, ha, hb), bad_k = count_diff(ka, kb, cache, ca, cb);
  const size_t bad_v = count_diff(va, vb, cache, ca, cb);
  report(bad_qkv == 0 && bad_k == 0 && bad_v == 0,
         "rope+append T%d H%d Hkv%d D%d == rope, append: differing qkv %zu, K cache %zu, V cache %zu", T, H, Hkv, D,
         bad_qkv, bad_k, bad_v);
  free(qkv);
  free(pos);
  free(slots);
  free(inv);
  free(ha);
  free(hb);
  free(ca);
  free(cb);
  CK(cudaFree(a_d));
  CK(cudaFree(b_d));
  CK(cudaFree(pos_d));
  CK(cudaFree(slots_d));
  CK(cudaFree(inv_d));
  CK(cudaFree(ka));
  CK(cudaFree(va));
  CK(cudaFree(kb));
  CK(cudaFree(vb));
}

/* vr_cuda_roll_decode_attention_rope == vr_cuda_roll_rope_append + vr_cuda_roll_decode_attention,
 * bit for bit (the output and both caches, from the same random cache): one new token per
 * sequence at position lens - 1 (length 0: a padding row, slot -1). */
static void test_decode_rope_impl(int H, int Hkv, int D, const int *lens, int n, int window, int part,
                                  unsigned flags) {
  const int ld = (H + 2 * Hkv) * D + 8, koff = H * D, voff = (H + Hkv) * D, ld_out = H * D;
  int max_len = 1, pool = 2;
  for (int i = 0; i < n; ++i) {
    max_len = lens[i] > max_len ? lens[i] : max_len;
    pool += (lens[i] + VR_ROLL_BLOCK - 1) / VR_ROLL_BLOCK;
  }
  const int max_blocks = (max_len + VR_ROLL_BLOCK - 1) / VR_ROLL_BLOCK;
  int32_t *bt = malloc(sizeof(int32_t) * (size_t)n * max_blocks), *pos = malloc(sizeof(int32_t) * n);
  int32_t *slots = malloc(sizeof(int32_t) * n);
  int used = 0;
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < max_blocks; ++k) bt[i * max_blocks + k] = k * VR_ROLL_BLOCK < lens[i] ? pool - 1 - used++ : -1;
    pos[i] = lens[i] > 0 ? lens[i] - 1 : 0;
    slots[i] = lens[i] > 0 ? bt[i * max_blocks + pos[i] / VR_ROLL_BLOCK] * VR_ROLL_BLOCK + pos[i] % VR_ROLL_BLOCK : -1;
  }
  const size_t cache = (size_t)pool * Hkv * VR_ROLL_BLOCK * D;
  uint16_t *kv = malloc(cache * 2), *qkv = malloc((size_t)n * ld * 2);
  float *inv = malloc(sizeof(float) * (D / 2));
  for (size_t i = 0; i < cache; ++i) kv[i] = f2bf(frand());
  for (size_t i = 0; i < (size_t)n * ld; ++i) qkv[i] = f2bf(frand() * 2.f);
  for (int i = 0; i < D / 2; ++i) inv[i] = powf(10000.f, -2.f * i / D);
  uint16_t *ka = todev(kv, cache * 2), *va = todev(kv, cache * 2), *kb = todev(kv, cache * 2), *vb = todev(kv, cache * 2);
  uint16_t *qa = todev(qkv, (size_t)n * ld * 2), *qb = todev(qkv, (size_t)n * ld * 2);
  int32_t *bt_d = todev(bt, sizeof(int32_t) * (size_t)n * max_blocks), *lens_d = todev(lens, sizeof(int32_t) * n);
  int32_t *pos_d = todev(pos, sizeof(int32_t) * n), *slots_d = todev(slots, sizeof(int32_t) * n);
  float *inv_d = todev(inv, sizeof(float) * (D / 2));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  if (part <= 0) part = vr_cuda_roll_pick_part(n, H, Hkv, D, sms);
  const int max_parts = (max_len + part - 1) / part;
  float *po = dalloc((size_t)n * H * max_parts * D * 4), *pml = dalloc((size_t)n * H * max_parts * 2 * 4);
  uint16_t *oa = dalloc((size_t)n * ld_out * 2), *ob = dalloc((size_t)n * ld_out * 2);
  const float scale = 1.f / sqrtf((float)D), rs = 0.9f;
  vr_cuda_roll_rope_append(ka, va, qa, ld, 0, koff, voff, pos_d, slots_d, inv_d, rs, n, H, Hkv, D, 0);
  vr_cuda_roll_decode_attention(oa, ld_out, qa, ld, 0, ka, va, bt_d, max_blocks, NULL, lens_d, n, H, Hkv, D, window,
                                scale, part, max_parts, po, pml, flags & ~VR_ROLL_ATTN_PDL, 0);
  cudaStream_t cs; /* a stream of its own (blocking: ordered with the legacy stream's work), as the engine's */
  CK(cudaStreamCreate(&cs));
  vr_cuda_roll_decode_attention_rope(ob, ld_out, qb, ld, 0, koff, voff, kb, vb, bt_d, max_blocks, lens_d, pos_d, slots_d,
                                     inv_d, rs, n, H, Hkv, D, window, scale, part, max_parts, po, pml, flags, cs);
  CK(cudaStreamSynchronize(cs));
  CK(cudaStreamDestroy(cs));
  const size_t hn = cache > (size_t)n * ld_out ? cache : (size_t)n * ld_out;
  uint16_t *ha = malloc(hn * 2), *hb = malloc(hn * 2);
  const size_t bad_out = count_diff(oa, ob, (size_t)n * ld_out, ha, hb), bad_k = count_diff(ka, kb, cache, ha, hb);
  const size_t bad_v = count_diff(va, vb, cache, ha, hb);
  report(bad_out == 0 && bad_k == 0 && bad_v == 0,
         "decode attn with rope (flags %u) H%d Hkv%d D%d window %d part %d == rope+append, attn: differing out %zu, "
         "K cache %zu, V cache %zu", flags, H, Hkv, D, window, part, bad_out, bad_k, bad_v);
  free(bt);
  free(pos);
  free(slots);
  free(kv);
  free(qkv);
  free(inv);
  free(ha);
  free(hb);
  void *dev[] = {ka, va, kb, vb, qa, qb, bt_d, lens_d, pos_d, slots_d, inv_d, po, pml, oa, ob};
  for (size_t i = 0; i < sizeof dev / sizeof dev[0]; ++i) CK(cudaFree(dev[i]));
}

/* The ring and tensor-core kernels with and without PDL (no previous kernel in its stream: the same
 * bits), the register kernel; each == rope+append, then the same kernel's plain form. */
static void test_decode_rope(int H, int Hkv, int D, const int *lens, int n, int window, int part) {
  static const unsigned fl[] = {VR_ROLL_ATTN_RING, VR_ROLL_ATTN_RING | VR_ROLL_ATTN_PDL, VR_ROLL_ATTN_REGS,
                                VR_ROLL_ATTN_MMA, VR_ROLL_ATTN_MMA | VR_ROLL_ATTN_PDL};
  const uint64_t r0 = g_rng;
  for (int i = 0; i < (D % 16 == 0 ? 5 : 3); ++i) {
    g_rng = r0;
    test_decode_rope_impl(H, Hkv, D, lens, n, window, part, fl[i]);
  }
}

/* vr_cuda_roll_gemm (configuration bn x splits; bn 0: vr_cuda_roll_gemm_pick's) against a double
 * host product of the same bf16 operands and against cuBLASLt: fp32 out with fp32 bias and beta 1
 * (onto a random D), bf16 out with bf16 bias; rows past M (M not a multiple of 16), column tiles
 * past N (odd N too), K tails past a 64-chunk. Then its determinism: the first (M + 1) / 2 rows
 * computed alone and the whole product computed again give the same bits. */
static void test_dgemm(int M, int N, int K, int out_f32, int with_bias, int beta1, int bn, int kc, int splits, int pdl) {
  vr_cuda_roll_gemm_cfg_t cfg = {bn, kc, splits, pdl};
  if (!bn) {
    int dev = 0, sms = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    cfg = vr_cuda_roll_gemm_pick(N, K, sms);
    cfg.pdl = pdl;
  }
  uint16_t *a = malloc((size_t)M * K * 2), *w = malloc((size_t)N * K * 2);
  for (size_t i = 0; i < (size_t)M * K; ++i) a[i] = f2bf(frand());
  for (size_t i = 0; i < (size_t)N * K; ++i) w[i] = f2bf(frand() * 0.1f);
  float *bias_f = malloc(sizeof(float) * N), *d0 = malloc(sizeof(float) * (size_t)M * N);
  uint16_t *bias_h = malloc(2 * (size_t)N);
  for (int i = 0; i < N; ++i) {
    bias_h[i] = f2bf(frand());
    bias_f[i] = bf2f(bias_h[i]);
  }
  for (size_t i = 0; i < (size_t)M * N; ++i) d0[i] = frand() * 4.f;
  const size_t esz = out_f32 ? 4 : 2, dbytes = (size_t)M * N * esz;
  uint16_t *a_d = todev(a, (size_t)M * K * 2), *w_d = todev(w, (size_t)N * K * 2);
  void *bias_d = with_bias ? (out_f32 ? todev(bias_f, sizeof(float) * N) : todev(bias_h, 2 * (size_t)N)) : NULL;
  void *dd[4]; /* ours, ours again, ours on the first half of the rows, cuBLASLt */
  for (int i = 0; i < 4; ++i) dd[i] = out_f32 ? todev(d0, dbytes) : dalloc(dbytes);
  const int Mh = (M + 1) / 2;
  const float beta = beta1 ? 1.f : 0.f;
  cudaStream_t st; /* a stream of its own: programmatic dependent launch is not for the legacy one */
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  vr_cuda_roll_gemm(dd[0], out_f32, a_d, w_d, bias_d, M, N, K, beta, cfg, st);
  vr_cuda_roll_gemm(dd[1], out_f32, a_d, w_d, bias_d, M, N, K, beta, cfg, st);
  vr_cuda_roll_gemm(dd[2], out_f32, a_d, w_d, bias_d, Mh, N, K, beta, cfg, st);
  vr_cuda_gemm_t *lt = NULL;
  CK(vr_cuda_gemm_init(&lt, 4u << 20) == 0 ? cudaSuccess : cudaErrorUnknown);
  vr_cuda_gemm(lt, dd[3], out_f32, a_d, w_d, bias_d, M, N, K, beta, st);
  CK(cudaStreamSynchronize(st));
  CK(cudaStreamDestroy(st));
  unsigned char *h[4];
  for (int i = 0; i < 4; ++i) {
    h[i] = malloc(dbytes);
    tohost(h[i], dd[i], dbytes);
  }
  double maxd = 0, maxr = 0, maxl = 0;
  for (int r = 0; r < M; ++r)
    for (int n = 0; n < N; ++n) {
      double ref = 0;
      for (int k = 0; k < K; ++k) ref += (double)bf2f(a[(size_t)r * K + k]) * bf2f(w[(size_t)n * K + k]);
      if (with_bias) ref += bias_f[n];
      if (beta1) ref += d0[(size_t)r * N + n];
      const size_t e = (size_t)r * N + n;
      const double got = out_f32 ? ((float *)h[0])[e] : bf2f(((uint16_t *)h[0])[e]);
      const double lt_v = out_f32 ? ((float *)h[3])[e] : bf2f(((uint16_t *)h[3])[e]);
      const double df = isfinite(got) ? fabs(got - ref) : INFINITY, dl = isfinite(got) ? fabs(got - lt_v) : INFINITY;
      if (df > maxd) maxd = df;
      if (dl > maxl) maxl = dl;
      if (fabs(ref) > maxr) maxr = fabs(ref);
    }
  const double tol = out_f32 ? 1e-4 * (maxr + 1) : 1.0 / 128 * (maxr + 1);
  report(maxd <= tol && maxl <= tol,
         "dgemm M%d N%d K%d %s%s%s bn %d kc %d splits %d%s: maxabs %.2e vs double, %.2e vs cuBLASLt (outputs up "
         "to %.2f, bound %.2e)", M, N, K, out_f32 ? "fp32" : "bf16", with_bias ? " bias" : "", beta1 ? " +=" : "",
         cfg.bn, cfg.kc, cfg.splits, pdl ? " pdl" : "", maxd, maxl, maxr, tol);
  const size_t hbytes = (size_t)Mh * N * esz;
  report(!memcmp(h[0], h[1], dbytes) && !memcmp(h[0], h[2], hbytes),
         "dgemm M%d N%d K%d bn %d kc %d splits %d: the same bits again and for the first %d rows alone", M, N, K,
         cfg.bn, cfg.kc, cfg.splits, Mh);
  vr_cuda_gemm_free(lt);
  for (int i = 0; i < 4; ++i) {
    free(h[i]);
    CK(cudaFree(dd[i]));
  }
  free(a);
  free(w);
  free(bias_f);
  free(bias_h);
  free(d0);
  CK(cudaFree(a_d));
  CK(cudaFree(w_d));
  if (bias_d) CK(cudaFree(bias_d));
}

/* ------------------------------------------------------------ sampling */

/* GPU draws vs trainer/vr_sample.c's vr_sample_row (the CPU engine's sampler) on the same logits
 * (n_rows, V) and keys, rq[b] naming draw b's row. The kept set is the same integer computation
 * on both, so a token the CPU dropped is always a failure; another kept token is one unless the
 * CPU's own numbers put the draw within 1e-6 of a boundary of the cumulative distribution
 * (double sums in another order): those are counted and must stay rare. Some draws again, alone
 * (another batch position and size): the same result. Twice: one block per row, then greedy rows
 * over several blocks (vr_cuda_roll_sample_ws), which must give the first run's tokens and its
 * log-probs within 1e-5. */
static void check_sample(const char *what, const float *l, int V, int n_rows, const vr_sample_req_t *rq, int B) {
  vr_cuda_roll_sample_row_t *pr = calloc(B, sizeof *pr);
  for (int b = 0; b < B; ++b)
    pr[b] = (vr_cuda_roll_sample_row_t){(int32_t)rq[b].row, rq[b].p.temperature, rq[b].p.top_k, rq[b].p.top_p,
                                        vr_sample_uniform(rq[b].key, rq[b].stream, rq[b].position)};
  float *l_d = todev(l, sizeof(float) * (size_t)V * n_rows);
  vr_cuda_roll_sample_row_t *pr_d = todev(pr, sizeof *pr * B);
  int32_t *tok_d = dalloc(4 * (size_t)B);
  float *lp_d = dalloc(4 * (size_t)B);
  void *sws_d = dalloc(vr_cuda_roll_sample_ws_bytes(B, V));
  int32_t *tok = malloc(4 * (size_t)B), *tok1 = malloc(4 * (size_t)B);
  float *lp = malloc(4 * (size_t)B), *lp1 = malloc(4 * (size_t)B);
  void *ws = malloc(VR_SAMPLE_SCRATCH_BYTES(V));
  double *probs = malloc(sizeof(double) * V);
  for (int split = 0; split < 2; ++split) {
    void *sws = split ? sws_d : NULL;
    vr_cuda_roll_sample_ws(tok_d, lp_d, l_d, pr_d, B, V, sws, 0);
    tohost(tok, tok_d, 4 * (size_t)B);
    tohost(lp, lp_d, 4 * (size_t)B);
    int32_t one;
    int batch_dep = 0, vs_one = 0;
    for (int b = 0; b < B; b += 37) {
      vr_cuda_roll_sample_ws(tok_d, lp_d, l_d, pr_d + b, 1, V, sws, 0);
      tohost(&one, tok_d, 4);
      batch_dep += one != tok[b];
    }
    if (!split) {
      memcpy(tok1, tok, 4 * (size_t)B);
      memcpy(lp1, lp, 4 * (size_t)B);
    }
    for (int b = 0; b < B; ++b)
      vs_one += tok[b] != tok1[b] || !(fabsf(lp[b] - lp1[b]) <= 1e-5f || (isnan(lp[b]) && isnan(lp1[b])));
    int mism = 0, edge = 0, nonfinite_ok = 0, nonfinite_rows = 0;
    double maxlp = 0;
    for (int b = 0; b < B; ++b) {
      const float *row = l + (size_t)rq[b].row * V;
      int32_t ht;
      float hlp;
      const int rc = vr_sample_row(row, V, &rq[b].p, rq[b].key, rq[b].stream, rq[b].position, ws, &ht, &hlp);
      if (rc != 0) { /* non-finite row: the GPU says so with token -1 */
        ++nonfinite_rows;
        nonfinite_ok += tok[b] == -1 && isnan(lp[b]);
        continue;
      }
      if (ht != tok[b]) {
        int is_edge = 0, kept = 0;
        vr_sample_probs(row, V, &rq[b].p, ws, probs);
        for (int i = 0; i < V; ++i) kept += probs[i] > 0;
        if (tok[b] >= 0 && tok[b] < V && probs[tok[b]] > 0) {
          double before = 0;
          for (int i = 0; i < tok[b]; ++i) before += probs[i];
          is_edge = fabs(before - pr[b].u) < 1e-6 || fabs(before + probs[tok[b]] - pr[b].u) < 1e-6;
        }
        if (is_edge) ++edge;
        else {
          if (mism < 5)
            printf("     draw %d, row %u (T %.2f k %d p %.6g u %.6f): gpu %d host %d (host keeps %d%s)\n", b, rq[b].row,
                   rq[b].p.temperature, rq[b].p.top_k, rq[b].p.top_p, pr[b].u, tok[b], ht, kept,
                   tok[b] >= 0 && tok[b] < V && probs[tok[b]] > 0 ? "" : ", not the gpu's token");
          ++mism;
        }
        continue;
      }
      const double d = fabs((double)hlp - lp[b]);
      if (!(d <= maxlp)) maxlp = d; /* NaN propagates into the check below */
    }
    report(mism == 0 && batch_dep == 0 && vs_one == 0 && maxlp < 1e-4 && edge <= B / 100 + 1 &&
               nonfinite_ok == nonfinite_rows,
           "sample %s V %d draws %d%s vs vr_sample_row: token mismatches %d (within 1e-6 of a boundary %d), logprob "
           "maxabs %.2e, batch-dependent %d, non-finite rows flagged %d/%d, differing from one block per row %d",
           what, V, B, split ? " (greedy rows over blocks)" : "", mism, edge, maxlp, batch_dep, nonfinite_ok,
           nonfinite_rows, vs_one);
  }
  free(ws);
  free(probs);
  free(tok);
  free(lp);
  free(tok1);
  free(lp1);
  CK(cudaFree(sws_d));
  free(pr);
  CK(cudaFree(l_d));
  CK(cudaFree(pr_d));
  CK(cudaFree(tok_d));
  CK(cudaFree(lp_d));
}

/* B random rows (values in [-6, 6), multiples of quant when quant > 0: ties), one draw each, the
 * parameters cycling over temperatures, top-k and top-p; a NaN row and an all -inf row. */
static void test_sample_rows(int V, int B, float quant) {
  float *l = malloc(sizeof(float) * (size_t)V * B);
  vr_test_random_logits(&g_rng, l, (size_t)V * B, quant); /* frand() * 6, quantised: ties */
  if (B > 3) { /* a non-finite row, an all -inf row */
    l[(size_t)1 * V + 3] = NAN;
    for (int i = 0; i < V; ++i) l[(size_t)2 * V + i] = -INFINITY;
  }
  vr_sample_req_t *rq = calloc(B, sizeof *rq);
  static const float temps[] = {0.f, 1.f, 0.7f, 1.3f};
  static const int topks[] = {0, 1, 5, 50, 100000};
  static const float topps[] = {1.f, 0.9f, 0.5f, 0.999f, 0.05f};
  for (int b = 0; b < B; ++b) {
    rq[b].row = (uint32_t)b;
    rq[b].p.temperature = temps[b % 4];
    rq[b].p.top_k = topks[(b / 4) % 5];
    rq[b].p.top_p = topps[(b / 20) % 5];
    rq[b].key = vr_sample_prompt_key(1234, (uint64_t)(b % 3));
    rq[b].stream = (uint32_t)(b % 5);
    rq[b].position = (uint32_t)(b * 7);
  }
  check_sample(quant > 0 ? "random rows (tied logits)" : "random rows", l, V, B, rq, B);
  free(l);
  free(rq);
}

/* H12's row (vr_test_tie_rows.h): the GPU and the CPU both draw 884. */
static void test_sample_h12(void) {
  float l[VR_TEST_H12_V];
  vr_sample_req_t q;
  vr_test_h12_row(l, &q);
  const vr_cuda_roll_sample_row_t pr = {0, q.p.temperature, q.p.top_k, q.p.top_p,
                                        vr_sample_uniform(q.key, q.stream, q.position)};
  float *l_d = todev(l, sizeof l);
  vr_cuda_roll_sample_row_t *pr_d = todev(&pr, sizeof pr);
  int32_t *tok_d = dalloc(4);
  float *lp_d = dalloc(4);
  vr_cuda_roll_sample(tok_d, lp_d, l_d, pr_d, 1, VR_TEST_H12_V, 0);
  int32_t gt, ht;
  float hlp;
  tohost(&gt, tok_d, 4);
  void *ws = malloc(VR_SAMPLE_SCRATCH_BYTES(VR_TEST_H12_V));
  const int rc = vr_sample_row(l, VR_TEST_H12_V, &q.p, q.key, q.stream, q.position, ws, &ht, &hlp);
  report(rc == 0 && gt == VR_TEST_H12_TOKEN && ht == VR_TEST_H12_TOKEN,
         "sample H12's row (18 tied maxima, T 0.7, top-k 5, top-p 0.5, u %.6f): gpu %d host %d, want %d", pr.u, gt, ht,
         VR_TEST_H12_TOKEN);
  free(ws);
  CK(cudaFree(l_d));
  CK(cudaFree(pr_d));
  CK(cudaFree(tok_d));
  CK(cudaFree(lp_d));
}

/* The ends of the inverse CDF (vr_test_tie_rows.h's VR_TEST_U_ENDS, u given directly) on rows
 * with -inf heads and tails, from their own generator state: the first token of nonzero weight
 * at u = 0, a token of nonzero weight at the top of the distribution for u within 2^-45 of 1
 * (never a -inf one; tests/trainer/test_sample_ties.c runs the same rows through the kernel's
 * transcription). */
static void test_sample_u_ends(uint64_t seed, int V, int rows) {
  static const double us[] = VR_TEST_U_ENDS;
  enum { NU = sizeof us / sizeof us[0] };
  uint64_t rs = seed;
  float *l = malloc(sizeof(float) * (size_t)V * rows);
  vr_sample_params_t *ps = malloc(sizeof *ps * rows);
  vr_cuda_roll_sample_row_t *pr = malloc(sizeof *pr * rows * NU);
  for (int r = 0; r < rows; ++r) {
    vr_test_u_ends_row(&rs, r, V, l + (size_t)r * V, &ps[r]);
    for (int k = 0; k < NU; ++k)
      pr[r * NU + k] = (vr_cuda_roll_sample_row_t){r, ps[r].temperature, ps[r].top_k, ps[r].top_p, us[k]};
  }
  float *l_d = todev(l, sizeof(float) * (size_t)V * rows);
  vr_cuda_roll_sample_row_t *pr_d = todev(pr, sizeof *pr * rows * NU);
  int32_t *tok_d = dalloc(4 * (size_t)rows * NU);
  float *lp_d = dalloc(4 * (size_t)rows * NU);
  vr_cuda_roll_sample(tok_d, lp_d, l_d, pr_d, rows * NU, V, 0);
  int32_t *tok = malloc(4 * (size_t)rows * NU);
  tohost(tok, tok_d, 4 * (size_t)rows * NU);
  void *ws = malloc(VR_SAMPLE_SCRATCH_BYTES(V));
  double *probs = malloc(sizeof(double) * V);
  int bad = 0;
  for (int r = 0; r < rows; ++r) {
    vr_sample_probs(l + (size_t)r * V, V, &ps[r], ws, probs);
    for (int k = 0; k < NU; ++k)
      if (!vr_test_u_ends_ok(probs, V, us[k], tok[r * NU + k])) {
        if (bad < 5) printf("     row %d u %.17g: gpu %d\n", r, us[k], tok[r * NU + k]);
        ++bad;
      }
  }
  report(bad == 0, "sample CDF ends V %d draws %d (u 0 and 1 - 2^-53 .. 2^-45, -inf heads and tails): bad %d", V,
         rows * NU, bad);
  free(l);
  free(ps);
  free(pr);
  free(tok);
  free(ws);
  free(probs);
  CK(cudaFree(l_d));
  CK(cudaFree(pr_d));
  CK(cudaFree(tok_d));
  CK(cudaFree(lp_d));
}

/* tests/common/vr_test_tie_rows.h's rows (ties at the top-k threshold and exactly on top-p
 * boundaries, several temperatures), draws draws each, from their own generator state (seed):
 * the rows tests/trainer/test_sample_ties.c checks the kernel's algorithm on, on the CPU. */
static void test_sample_tied(uint64_t seed, int V, int rows, int draws) {
  uint64_t rs = vr_test_tie_state(seed);
  float *l = malloc(sizeof(float) * (size_t)V * rows);
  vr_sample_req_t *rq = calloc((size_t)rows * draws, sizeof *rq);
  for (int r = 0; r < rows; ++r) {
    vr_sample_params_t p;
    vr_test_tie_row(&rs, r, V, l + (size_t)r * V, &p);
    for (int d = 0; d < draws; ++d) rq[r * draws + d] = vr_test_tie_req(seed, r, d, &p);
  }
  check_sample("tied rows", l, V, rows, rq, rows * draws);
  free(l);
  free(rq);
}

/* The empirical distribution of N GPU draws (positions 0..N-1 of one response) from one row of
 * a small vocabulary against vr_sample_probs (the formula): chi-square below the 0.1% critical
 * value of its degrees of freedom, and no draw outside the kept set. */
static void test_sample_chisq(float T, int k, float p) {
  enum { V = 12, N = 40000 };
  const float row[V] = {2.0f, 1.5f, 1.2f, 1.0f, 0.8f, 0.5f, 0.1f, -0.3f, -0.5f, -1.f, -2.f, -3.f};
  vr_cuda_roll_sample_row_t *pr = calloc(N, sizeof *pr);
  const uint64_t key = vr_sample_prompt_key(99, 5);
  for (int i = 0; i < N; ++i) pr[i] = (vr_cuda_roll_sample_row_t){0, T, k, p, vr_sample_uniform(key, 0, (uint32_t)i)};
  float *l_d = todev(row, sizeof row);
  vr_cuda_roll_sample_row_t *pr_d = todev(pr, sizeof *pr * N);
  int32_t *tok_d = dalloc(4 * N);
  float *lp_d = dalloc(4 * N);
  vr_cuda_roll_sample(tok_d, lp_d, l_d, pr_d, N, V, 0);
  int32_t *tok = malloc(4 * N);
  tohost(tok, tok_d, 4 * N);
  const vr_sample_params_t sp = {T, k, p};
  void *ws = malloc(VR_SAMPLE_SCRATCH_BYTES(V));
  double probs[V];
  vr_sample_probs(row, V, &sp, ws, probs);
  int nkept = 0;
  for (int i = 0; i < V; ++i) nkept += probs[i] > 0;
  long cnt[V] = {0};
  int outside = 0;
  for (int i = 0; i < N; ++i) {
    if (tok[i] < 0 || tok[i] >= V || probs[tok[i]] == 0) ++outside;
    else ++cnt[tok[i]];
  }
  double chi = 0;
  for (int i = 0; i < V; ++i)
    if (probs[i] > 0) {
      const double e = N * probs[i];
      chi += (cnt[i] - e) * (cnt[i] - e) / e;
    }
  /* 0.1% critical values of chi-square, df 1..11 */
  static const double crit[] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59, 31.26};
  const int df = nkept - 1;
  report(outside == 0 && (df == 0 || chi < crit[df]),
         "sample distribution T %.2f top_k %d top_p %.2f: kept %d, chi2 %.2f (df %d, 0.1%% critical %.2f), outside %d",
         T, k, p, nkept, chi, df, df > 0 ? crit[df] : 0.0, outside);
  free(ws);
  free(pr);
  free(tok);
  CK(cudaFree(l_d));
  CK(cudaFree(pr_d));
  CK(cudaFree(tok_d));
  CK(cudaFree(lp_d));
}

/* ------------------------------------------------------------ the engine: cuda backend vs cpu */

static int make_engine(const tmodel_t *m, const vr_rollout_backend_t *be, const char *dev, uint32_t max_batch_tokens,
                       vr_rollout_t **out) {
  vr_rollout_options_t o;
  vr_rollout_options_init(&o);
  o.device = dev;
  o.kv_cache_bytes = 16u << 20;
  o.max_seqs = 32;
  o.max_batch_tokens = max_batch_tokens;
  o.max_model_len = 512;
  const int rc = vr_rollout_init_backend(be, &m->cfg, m->params, m->n, &m->w, &o, out);
  if (rc == 0 && be == &vr_rollout_backend_cuda) {
    vr_cuda_roll_use_dgemm(vr_rollout_backend_state(*out), g_dgemm);
    if (g_graph_io >= 0) vr_cuda_roll_graph_io(vr_rollout_backend_state(*out), g_graph_io);
  }
  return rc;
}

/* top-1 minus top-2 of the cpu engine's logits after prompt ++ prefix (one prefill). */
static double cpu_margin(vr_rollout_t *cpu, const tmodel_t *m, const int32_t *prompt, uint32_t np, const int32_t *pre,
                         uint32_t k, double *maxabs) {
  int32_t *ids = malloc(sizeof(int32_t) * (np + k));
  memcpy(ids, prompt, np * 4);
  if (k) memcpy(ids + np, pre, k * 4);
  uint32_t cu[2] = {0, np + k};
  vr_gen_params_t gp;
  vr_gen_params_init(&gp);
  gp.max_new_tokens = 1;
  vr_gen_output_t o;
  double margin = -1;
  const int V = m->cfg.vocab_size;
  float *lg = malloc(sizeof(float) * V);
  if (vr_rollout_generate(cpu, ids, cu, 1, &gp, &o) == 0 &&
      vr_rollout_backend_cpu.logits(vr_rollout_backend_state(cpu), 1, lg) == 0) {
    float a = -INFINITY, b = -INFINITY;
    for (int i = 0; i < V; ++i) {
      if (lg[i] > a) b = a, a = lg[i];
      else if (lg[i] > b) b = lg[i];
    }
    margin = (double)a - b;
    if (maxabs) {
      *maxabs = 0;
      for (int i = 0; i < V; ++i) *maxabs = fabs(lg[i]) > *maxabs ? fabs(lg[i]) : *maxabs;
    }
    vr_gen_output_free(&o);
  }
  free(lg);
  free(ids);
  return margin;
}

/* Greedy generation (n per prompt) on the cuda engine equals the cpu engine token for token up to
 * the first step where the cpu's top-1/top-2 margin is below 1% of the logits' scale (the largest
 * |logit| after prompt 0: bf16 weights and activations against fp32 round at that relative
 * size), log-probs of the equal tokens within twice that bound (a log-prob is a logit minus the
 * log-sum-exp of the row: two quantities, each carrying that rounding). */
static void compare_greedy(const char *what, const tmodel_t *m, vr_rollout_t *cpu, vr_rollout_t *cu, const int32_t *ids,
                           const uint32_t *pcu, uint32_t np, uint32_t n, uint32_t max_new) {
  vr_gen_params_t gp;
  vr_gen_params_init(&gp);
  gp.n = n;
  gp.max_new_tokens = max_new;
  vr_gen_output_t a, b;
  const int ra = vr_rollout_generate(cpu, ids, pcu, np, &gp, &a), rb = vr_rollout_generate(cu, ids, pcu, np, &gp, &b);
  if (ra || rb) {
    report(0, "greedy %s: generate failed (cpu %d, cuda %d)", what, ra, rb);
    return;
  }
  uint32_t equal = 0, total = 0, bad = 0, near = 0;
  double maxlp = 0, scale = 0;
  cpu_margin(cpu, m, ids, pcu[1], NULL, 0, &scale);
  const double tol = 0.01 * scale;
  for (uint32_t r = 0; r < a.n_resp; ++r) {
    const uint32_t la = a.cu[r + 1] - a.cu[r], lb = b.cu[r + 1] - b.cu[r];
    const uint32_t l = la < lb ? la : lb;
    total += la;
    uint32_t k = 0;
    while (k < l && a.tokens[a.cu[r] + k] == b.tokens[b.cu[r] + k]) {
      const double d = fabs((double)a.logprobs[a.cu[r] + k] - b.logprobs[b.cu[r] + k]);
      if (d > maxlp) maxlp = d;
      ++k;
    }
    equal += k;
    if (k < la || la != lb) {
      const uint32_t p = r / n;
      const double mg = k < l ? cpu_margin(cpu, m, ids + pcu[p], pcu[p + 1] - pcu[p], a.tokens + a.cu[r], k, NULL) : 0;
      if (k < l && mg >= 0 && mg < tol) ++near;
      else {
        if (bad < 3) printf("     %s response %u: diverges at token %u of %u (cpu margin %.4f)\n", what, r, k, la, mg);
        ++bad;
      }
    }
  }
  report(bad == 0 && maxlp < 2 * tol && equal > total / 2,
         "greedy %s: cuda == cpu on %u of %u tokens (%u responses, %u diverge where the cpu margin < %.3f = 1%% of "
         "max |logit|), logprob maxabs %.3g (bound %.3g)",
         what, equal, total, a.n_resp, near, tol, maxlp, 2 * tol);
  vr_gen_output_free(&a);
  vr_gen_output_free(&b);
}

/* Two outputs identical bit for bit. */
static int same_output(const vr_gen_output_t *a, const vr_gen_output_t *b) {
  if (a->n_resp != b->n_resp || a->cu[a->n_resp] != b->cu[b->n_resp]) return 0;
  if (memcmp(a->cu, b->cu, sizeof(uint32_t) * (a->n_resp + 1))) return 0;
  return !memcmp(a->tokens, b->tokens, 4 * a->cu[a->n_resp]) && !memcmp(a->logprobs, b->logprobs, 4 * a->cu[a->n_resp]);
}

/* The same tokens, log-probs within tol: two engines (each times its own cuBLASLt candidates at its
 * first step, so their GEMMs may round differently). */
static int close_output(const vr_gen_output_t *a, const vr_gen_output_t *b, double tol) {
  if (a->n_resp != b->n_resp || memcmp(a->cu, b->cu, sizeof(uint32_t) * (a->n_resp + 1))) return 0;
  if (memcmp(a->tokens, b->tokens, 4 * a->cu[a->n_resp])) return 0;
  for (uint32_t i = 0; i < a->cu[a->n_resp]; ++i)
    if (!(fabs((double)a->logprobs[i] - b->logprobs[i]) <= tol)) return 0;
  return 1;
}

static void test_engine(const char *what, int V, int C, int L, int H, int KV, int D, int F, int tied, int bias,
                        int window) {
  tmodel_t m;
  if (tmodel_make(&m, V, C, L, H, KV, D, F, tied, bias, window, g_rng, 0.f, 1.f)) {
    report(0, "engine %s: out of host memory", what);
    return;
  }
  enum { NP = 12 };
  uint32_t pcu[NP + 1] = {0};
  int32_t ids[NP * 80];
  for (int p = 0; p < NP; ++p) {
    const uint32_t len = 3 + irand(p == 0 ? 150 : 60);
    for (uint32_t i = 0; i < len; ++i) ids[pcu[p] + i] = (int32_t)irand((uint32_t)V);
    pcu[p + 1] = pcu[p] + len;
  }
  vr_rollout_t *cpu = NULL, *cu = NULL, *cu_chunk = NULL;
  if (make_engine(&m, &vr_rollout_backend_cpu, "cpu", 2048, &cpu) || make_engine(&m, &vr_rollout_backend_cuda, "cuda", 2048, &cu) ||
      make_engine(&m, &vr_rollout_backend_cuda, "cuda", 40, &cu_chunk)) {
    report(0, "engine %s: init failed", what);
    goto done;
  }
  char name[96];
  snprintf(name, sizeof name, "%s (n 1)", what);
  compare_greedy(name, &m, cpu, cu, ids, pcu, NP, 1, 40);
  snprintf(name, sizeof name, "%s (n 2, shared prompt blocks)", what);
  compare_greedy(name, &m, cpu, cu, ids, pcu, NP, 2, 20);
  snprintf(name, sizeof name, "%s (prefill chunks of 40 tokens: paged rows)", what);
  compare_greedy(name, &m, cpu, cu_chunk, ids, pcu, NP, 1, 30);
  {
    /* graph replay == eager, and a seeded sampled run reproduces */
    vr_gen_params_t gp;
    vr_gen_params_init(&gp);
    gp.max_new_tokens = 40;
    vr_gen_output_t g1, e1, s1, s2;
    int rc = vr_rollout_generate(cu, ids, pcu, NP, &gp, &g1);
    vr_cuda_roll_use_graphs(vr_rollout_backend_state(cu), 0);
    rc |= vr_rollout_generate(cu, ids, pcu, NP, &gp, &e1);
    vr_cuda_roll_use_graphs(vr_rollout_backend_state(cu), 1);
    report(rc == 0 && same_output(&g1, &e1), "engine %s: graph replay == eager (tokens and log-probs, bit for bit)", what);
    gp.sample.temperature = 0.8f;
    gp.sample.top_p = 0.9f;
    gp.sample.top_k = 20;
    gp.n = 3;
    gp.seed = 7;
    rc = vr_rollout_generate(cu, ids, pcu, NP, &gp, &s1);
    rc |= vr_rollout_generate(cu, ids, pcu, NP, &gp, &s2);
    report(rc == 0 && same_output(&s1, &s2), "engine %s: sampling (T 0.8, top-p 0.9, top-k 20, n 3, seed 7) reproduces",
           what);
    vr_gen_output_free(&s1);
    vr_gen_output_free(&s2);
    /* weight update: new parameters through set_weights (host) and through the device path give
     * what an engine built on them gives */
    tmodel_t m2;
    if (tmodel_make(&m2, V, C, L, H, KV, D, F, tied, bias, window, g_rng + 1, 0.f, 1.f)) abort();
    vr_rollout_t *fresh = NULL;
    gp = (vr_gen_params_t){0};
    vr_gen_params_init(&gp);
    gp.max_new_tokens = 40;
    vr_gen_output_t f, u1, u2;
    double secs = -1;
    rc = make_engine(&m2, &vr_rollout_backend_cuda, "cuda", 2048, &fresh);
    rc |= vr_rollout_generate(fresh, ids, pcu, NP, &gp, &f);
    rc |= vr_rollout_set_weights(cu, m2.params, m2.n, &m2.w, &secs);
    rc |= vr_rollout_generate(cu, ids, pcu, NP, &gp, &u1);
    float *dp = NULL;
    CK(cudaMalloc((void **)&dp, m.n * sizeof(float)));
    CK(cudaMemcpy(dp, m.params, m.n * sizeof(float), cudaMemcpyHostToDevice)); /* back to the first model */
    double dsecs = -1;
    rc |= vr_cuda_roll_set_weights_device(vr_rollout_backend_state(cu), dp, m.n, m.params, &m.w, &dsecs);
    rc |= vr_rollout_generate(cu, ids, pcu, NP, &gp, &u2);
    const int fresh_eq = close_output(&f, &u1, 1e-3), back_eq = same_output(&u2, &g1), differs = !same_output(&f, &g1);
    report(rc == 0 && fresh_eq && back_eq && differs,
           "engine %s: weight update (host %.3f ms, device %.3f ms): new weights == an engine loaded with them (tokens, "
           "log-probs within 1e-3) %s; device update back to the first == its output bit for bit %s; outputs changed %s",
           what, secs * 1e3, dsecs * 1e3, fresh_eq ? "yes" : "NO", back_eq ? "yes" : "NO", differs ? "yes" : "NO");
    CK(cudaFree(dp));
    vr_gen_output_free(&f);
    vr_gen_output_free(&u1);
    vr_gen_output_free(&u2);
    vr_rollout_free(fresh);
    tmodel_free(&m2);
    vr_gen_output_free(&g1);
    vr_gen_output_free(&e1);
  }
done:
  vr_rollout_free(cpu);
  vr_rollout_free(cu);
  vr_rollout_free(cu_chunk);
  tmodel_free(&m);
}

/* The length-aware partition choice (vr_cuda_roll_set_part 0, the default) switching lengths inside
 * one generate: 8 prompts of 100, 110, ..., 170 tokens, 60 new, bucket 8, whose class-0 length is
 * 64 (vr_cuda_roll_pick_part(8, 4, 2, 16, 132 SMs)). With the rule told of 14 SMs (28 blocks) the
 * first decode step's contexts 101..171 make 13 partitions of 128 keys x 2 kv heads = 26 blocks:
 * 64 keys; from step 8 (121 -> 129) 14 x 2 = 28: 128 keys; 256 would give 8 x 2 = 16: never. So
 * both lengths run, each with its own graph; checked: both were used, graph replay == eager bit
 * for bit, a rerun reproduces, and greedy cuda == cpu as compare_greedy says. */
static void test_part_classes(void) {
  { /* the rule on the measured workloads (docs/benchmarks.md), 132 SMs: llama-1b 64 x 129..384 keeps
     * the bucket's 512, qwen2-0.5b 64 x 129..384 its 128, llama-1b 16 x 4,097..4,352 goes 128 -> 512 */
    uint32_t ctx[64];
    for (int b = 0; b < 64; ++b) ctx[b] = 129 + (uint32_t)b * 4;
    const int l64 = vr_cuda_roll_pick_part_ctx(vr_cuda_roll_pick_part(64, 32, 8, 64, 132), 32, 8, 64, 132, ctx, 64, 0);
    const int q64 = vr_cuda_roll_pick_part_ctx(vr_cuda_roll_pick_part(64, 14, 2, 64, 132), 14, 2, 64, 132, ctx, 64, 0);
    for (int b = 0; b < 64; ++b) ctx[b] = 384;
    const int q384 = vr_cuda_roll_pick_part_ctx(128, 14, 2, 64, 132, ctx, 64, 0);
    for (int b = 0; b < 16; ++b) ctx[b] = 4097 + (uint32_t)b * 16;
    const int base16 = vr_cuda_roll_pick_part(16, 32, 8, 64, 132);
    const int l4k = vr_cuda_roll_pick_part_ctx(base16, 32, 8, 64, 132, ctx, 16, 0);
    const int l4kw = vr_cuda_roll_pick_part_ctx(base16, 32, 8, 64, 132, ctx, 16, 100); /* 100 keys count */
    report(l64 == 512 && q64 == 128 && q384 == 128 && base16 == 128 && l4k == 512 && l4kw == 128,
           "partition rule: llama 64 x 129..381 -> %d (512), qwen2 64 x 129..381 -> %d, 64 x 384 -> %d (128), "
           "llama 16 x 4k: bucket %d -> %d (128 -> 512), with a window of 100 -> %d (128)",
           l64, q64, q384, base16, l4k, l4kw);
    /* the tensor-core kernel's count (a quarter of 132): qwen2 64 x 129..384 goes 128 -> 512 (the
     * measured best), llama keeps 512; the CUDA-core kernels keep the full count */
    const int sm_mma = vr_cuda_roll_part_sms(4, 64, 0, 132), sm_old = vr_cuda_roll_part_sms(4, 64, VR_ROLL_ATTN_OLD_RULE, 132);
    for (int b = 0; b < 64; ++b) ctx[b] = 129 + (uint32_t)b * 4;
    const int tq64 = vr_cuda_roll_pick_part_ctx(vr_cuda_roll_pick_part(64, 14, 2, 64, 132), 14, 2, 64, sm_mma, ctx, 64, 0);
    const int tl64 = vr_cuda_roll_pick_part_ctx(vr_cuda_roll_pick_part(64, 32, 8, 64, 132), 32, 8, 64, sm_mma, ctx, 64, 0);
    const int tq8 = vr_cuda_roll_pick_part_ctx(vr_cuda_roll_pick_part(8, 14, 2, 64, 132), 14, 2, 64, sm_mma, ctx, 8, 0);
    report(sm_mma == 33 && sm_old == 132 && vr_cuda_roll_part_sms(8, 8, 0, 132) == 132 && tq64 == 512 && tl64 == 512 &&
               tq8 == 64,
           "partition rule with the tensor-core kernel (%d of 132 SMs; CUDA-core kernels %d): qwen2 64 x 129..381 -> %d "
           "(512), llama -> %d (512), qwen2 8 x 129..157 -> %d (64)",
           sm_mma, sm_old, tq64, tl64, tq8);
  }
  const int V = 300, C = 64, L = 2, H = 4, KV = 2, D = 16, F = 96;
  tmodel_t m;
  if (tmodel_make(&m, V, C, L, H, KV, D, F, 0, 0, 0, g_rng, 0.f, 1.f)) {
    report(0, "partition classes: out of host memory");
    return;
  }
  enum { NP = 8 };
  uint32_t pcu[NP + 1] = {0};
  int32_t ids[NP * 170];
  for (int p = 0; p < NP; ++p) {
    const uint32_t len = 100 + 10 * (uint32_t)p;
    for (uint32_t i = 0; i < len; ++i) ids[pcu[p] + i] = (int32_t)irand((uint32_t)V);
    pcu[p + 1] = pcu[p] + len;
  }
  vr_rollout_t *cpu = NULL, *cu = NULL;
  if (make_engine(&m, &vr_rollout_backend_cpu, "cpu", 2048, &cpu) ||
      make_engine(&m, &vr_rollout_backend_cuda, "cuda", 2048, &cu)) {
    report(0, "partition classes: init failed");
    goto done;
  }
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  if (vr_cuda_roll_pick_part(8, H, KV, D, sms) != 64) { /* 33..264 SMs give 64 */
    printf("skip partition classes: bucket 8's length is %d on %d SMs, not 64\n", vr_cuda_roll_pick_part(8, H, KV, D, sms), sms);
    goto done;
  }
  void *st = vr_rollout_backend_state(cu);
  vr_cuda_roll_set_part_rule(st, 4 * 14); /* the tensor-core kernel (D 16) sees a quarter: the rule gets 14 */
  compare_greedy("partition classes 64 -> 128 (8 prompts of 100..170, 60 new)", &m, cpu, cu, ids, pcu, NP, 1, 60);
  {
    uint64_t ps[VR_CUDA_ROLL_PART_LENGTHS];
    vr_cuda_roll_part_steps(st, ps);
    vr_gen_params_t gp;
    vr_gen_params_init(&gp);
    gp.max_new_tokens = 60;
    vr_gen_output_t g1, g2, e1;
    int rc = vr_rollout_generate(cu, ids, pcu, NP, &gp, &g1);
    rc |= vr_rollout_generate(cu, ids, pcu, NP, &gp, &g2);
    vr_cuda_roll_use_graphs(st, 0);
    rc |= vr_rollout_generate(cu, ids, pcu, NP, &gp, &e1);
    vr_cuda_roll_use_graphs(st, 1);
    report(rc == 0 && ps[2] == 8 && ps[3] == 51 && ps[0] + ps[1] + ps[4] + ps[5] == 0,
           "partition classes: the first generate's 59 decode steps ran at 64 keys (%llu, expected 8) and at 128 keys "
           "(%llu, expected 51), no other length (%llu)",
           (unsigned long long)ps[2], (unsigned long long)ps[3],
           (unsigned long long)(ps[0] + ps[1] + ps[4] + ps[5]));
    report(rc == 0 && same_output(&g1, &g2) && same_output(&g1, &e1),
           "partition classes: rerun == first run, graph replay == eager (tokens and log-probs, bit for bit)");
    vr_gen_output_free(&g1);
    vr_gen_output_free(&g2);
    vr_gen_output_free(&e1);
  }
done:
  vr_rollout_free(cpu);
  vr_rollout_free(cu);
  tmodel_free(&m);
}

/* Where two outputs first differ (for the failure message). */
static void first_diff(const vr_gen_output_t *a, const vr_gen_output_t *b, char *buf, size_t n) {
  snprintf(buf, n, "same");
  if (a->n_resp != b->n_resp) {
    snprintf(buf, n, "%u vs %u responses", a->n_resp, b->n_resp);
    return;
  }
  for (uint32_t r = 0; r < a->n_resp; ++r) {
    const uint32_t la = a->cu[r + 1] - a->cu[r], lb = b->cu[r + 1] - b->cu[r];
    for (uint32_t k = 0; k < (la < lb ? la : lb); ++k)
      if (a->tokens[a->cu[r] + k] != b->tokens[b->cu[r] + k] || memcmp(&a->logprobs[a->cu[r] + k], &b->logprobs[b->cu[r] + k], 4)) {
        snprintf(buf, n, "response %u token %u: %d (%.6g) vs %d (%.6g)", r, k, a->tokens[a->cu[r] + k],
                 a->logprobs[a->cu[r] + k], b->tokens[b->cu[r] + k], b->logprobs[b->cu[r] + k]);
        return;
      }
    if (la != lb || a->finish[r] != b->finish[r]) {
      snprintf(buf, n, "response %u: %u tokens (finish %d) vs %u (finish %d)", r, la, a->finish[r], lb, b->finish[r]);
      return;
    }
  }
}

/* Up to 3 stop ids from a run's own tokens that stop responses on a decode step: from responses 1,
 * 3, 5, ... the first token at index >= 2, 7, 12 (and before the last two) that the response has not
 * produced before (a random model's greedy responses soon repeat one token, and a stop id equal to
 * a response's first token stops it at the prefill, where nothing is pipelined: the first device run
 * of this test took fixed positions and every stop came there). Returns how many. */
static uint32_t pick_stops(const vr_gen_output_t *o, int32_t *stop) {
  uint32_t n = 0;
  for (uint32_t r = 1; r < o->n_resp && n < 3; r += 2) {
    const int32_t *t = o->tokens + o->cu[r];
    const uint32_t len = o->cu[r + 1] - o->cu[r];
    for (uint32_t k = 2 + 5 * n; k + 2 < len; ++k) { /* not the last steps: the pipeline stops there anyway */
      uint32_t j = 0;
      while (j < k && t[j] != t[k]) ++j;
      if (j == k) {
        stop[n++] = t[k];
        break;
      }
    }
  }
  return n;
}

/* The one-step-late pipeline on the cuda backend: the outputs of the plain scheduler (decode_pipeline
 * -1) bit for bit, greedy and sampled (T 0.8, top-p 0.9, n 2, seed 7), without stop ids (mode 1,
 * the default: every step after the first of a streak launched ahead) and with stop ids taken from
 * the plain run's own tokens (pick_stops), so that responses stop on different decode steps (mode 2:
 * the step launched after a stop dropped, the plain schedule goes on); on one engine (the mode
 * switched between generates) and on a second, fresh one (both in the default step I/O form,
 * vr_cuda_roll_graph_io 2: the upload on the copy stream into a device copy the graph stages from);
 * and on one engine each of the other forms, their steps timed (vr_cuda_roll_time_steps): 0, the
 * upload, feed and download as stream operations around the graph, and 1, the graph's first
 * kernel reading the pinned host block through its mapping. */
static void test_pipeline(void) {
  tmodel_t m;
  /* untied: with the LM head tied to these random embeddings every response repeats one token
   * from its first (a token's own embedding dominates its logits), so no stop id can stop a
   * response on a decode step; that made the stop checks fail on the device (the outputs were
   * equal). The same model on the cpu backend: tied, 0 stops found at 3 seeds; untied, 3-18
   * responses stop on decode steps. */
  if (tmodel_make(&m, 500, 256, 2, 4, 1, 64, 384, 0, 1, 0, g_rng, 0.f, 1.f)) {
    report(0, "pipeline: out of host memory");
    return;
  }
  enum { NP = 12 };
  uint32_t pcu[NP + 1] = {0};
  int32_t ids[NP * 40];
  for (int p = 0; p < NP; ++p) {
    const uint32_t len = 3 + irand(37);
    for (uint32_t i = 0; i < len; ++i) ids[pcu[p] + i] = (int32_t)irand(500);
    pcu[p + 1] = pcu[p] + len;
  }
  static const int forms[2] = {0, 1}; /* h[i]'s vr_cuda_roll_graph_io */
  static const char *const form_what[2] = {"as stream operations (graph_io 0)",
                                           "in the graph from the host block's mapping (graph_io 1)"};
  vr_rollout_t *e = NULL, *f = NULL, *h[2] = {NULL, NULL};
  if (make_engine(&m, &vr_rollout_backend_cuda, "cuda", 2048, &e) || make_engine(&m, &vr_rollout_backend_cuda, "cuda", 2048, &f) ||
      make_engine(&m, &vr_rollout_backend_cuda, "cuda", 2048, &h[0]) ||
      make_engine(&m, &vr_rollout_backend_cuda, "cuda", 2048, &h[1])) {
    report(0, "pipeline: init failed");
    goto done;
  }
  for (int i = 0; i < 2; ++i) vr_cuda_roll_graph_io(vr_rollout_backend_state(h[i]), forms[i]);
  for (int sampled = 0; sampled < 2; ++sampled) {
    vr_gen_params_t gp;
    vr_gen_params_init(&gp);
    gp.max_new_tokens = 48;
    if (sampled) {
      gp.sample.temperature = 0.8f;
      gp.sample.top_p = 0.9f;
      gp.n = 2;
      gp.seed = 7;
    }
    const char *what = sampled ? "sampled" : "greedy";
    vr_gen_output_t plain, pipe1, plain_s, pipe2, fresh2, form2[2];
    char d1[160], d2[160], d3[160], d4[160];
    vr_rollout_set_decode_pipeline(e, -1);
    int rc = vr_rollout_generate(e, ids, pcu, NP, &gp, &plain);
    vr_rollout_set_decode_pipeline(e, 1);
    rc |= vr_rollout_generate(e, ids, pcu, NP, &gp, &pipe1);
    int32_t stop[3] = {0, 0, 0};
    gp.stop_ids = stop;
    gp.n_stop = rc ? 1 : pick_stops(&plain, stop);
    vr_rollout_set_decode_pipeline(e, -1);
    rc |= vr_rollout_generate(e, ids, pcu, NP, &gp, &plain_s);
    vr_rollout_set_decode_pipeline(e, 2);
    rc |= vr_rollout_generate(e, ids, pcu, NP, &gp, &pipe2);
    vr_rollout_set_decode_pipeline(f, 2);
    rc |= vr_rollout_generate(f, ids, pcu, NP, &gp, &fresh2);
    double tm[2][3] = {{0, 0, 0}, {0, 0, 0}};
    int timed[2] = {0, 0};
    for (int i = 0; i < 2; ++i) {
      void *hs = vr_rollout_backend_state(h[i]);
      vr_rollout_set_decode_pipeline(h[i], 2);
      vr_cuda_roll_time_steps(hs, 1);
      rc |= vr_rollout_generate(h[i], ids, pcu, NP, &gp, &form2[i]);
      timed[i] = vr_cuda_roll_step_times(hs, tm[i]) == 0 && tm[i][0] > 0 && tm[i][1] > 0 && tm[i][2] > 0;
      vr_cuda_roll_time_steps(hs, 0);
    }
    if (rc) {
      report(0, "pipeline %s: generate failed", what);
      continue;
    }
    uint32_t stopped = 0, on_decode = 0; /* stopped responses; those that stopped on a decode step */
    for (uint32_t r = 0; r < plain_s.n_resp; ++r) {
      stopped += plain_s.finish[r] == VR_FINISH_STOP;
      on_decode += plain_s.finish[r] == VR_FINISH_STOP && plain_s.cu[r + 1] - plain_s.cu[r] >= 2;
    }
    first_diff(&plain, &pipe1, d1, sizeof d1);
    first_diff(&plain_s, &pipe2, d2, sizeof d2);
    first_diff(&plain_s, &fresh2, d3, sizeof d3);
    report(same_output(&plain, &pipe1) && pipe1.stats.decode_ahead > 0 && pipe1.stats.decode_calls == plain.stats.decode_calls,
           "pipeline %s: no stop ids, pipelined == plain bit for bit (%s; %llu of %llu steps launched ahead)", what, d1,
           (unsigned long long)pipe1.stats.decode_ahead, (unsigned long long)pipe1.stats.decode_calls);
    report(same_output(&plain_s, &pipe2) && !memcmp(plain_s.finish, pipe2.finish, plain_s.n_resp) && on_decode > 0 &&
               pipe2.stats.decode_dropped > 0 && pipe2.stats.decode_calls == plain_s.stats.decode_calls,
           "pipeline %s: %u stop ids (%u of %u responses stop, %u on a decode step), always pipelined == plain bit for "
           "bit (%s; %llu steps ahead, %llu dropped after a stop; %llu / %llu kept steps)",
           what, gp.n_stop, stopped, plain_s.n_resp, on_decode, d2, (unsigned long long)pipe2.stats.decode_ahead,
           (unsigned long long)pipe2.stats.decode_dropped, (unsigned long long)pipe2.stats.decode_calls,
           (unsigned long long)plain_s.stats.decode_calls);
    report(same_output(&plain_s, &fresh2) && !memcmp(plain_s.finish, fresh2.finish, plain_s.n_resp),
           "pipeline %s: the same on a fresh engine (%s; %llu dropped)", what, d3,
           (unsigned long long)fresh2.stats.decode_dropped);
    for (int i = 0; i < 2; ++i) {
      const vr_gen_output_t *o = &form2[i];
      first_diff(&plain_s, o, d4, sizeof d4);
      report(same_output(&plain_s, o) && !memcmp(plain_s.finish, o->finish, plain_s.n_resp) && o->stats.decode_ahead > 0 &&
                 timed[i],
             "pipeline %s: upload / feed / download %s == the default form (graph_io 2: copy stream) bit for bit (%s; "
             "%llu steps ahead; timed steps: period %.3f, stream ops %.3f, graph %.3f ms)",
             what, form_what[i], d4, (unsigned long long)o->stats.decode_ahead, tm[i][0], tm[i][1], tm[i][2]);
    }
    vr_gen_output_free(&plain);
    vr_gen_output_free(&pipe1);
    vr_gen_output_free(&plain_s);
    vr_gen_output_free(&pipe2);
    vr_gen_output_free(&fresh2);
    for (int i = 0; i < 2; ++i) vr_gen_output_free(&form2[i]);
  }
done:
  vr_rollout_free(e);
  vr_rollout_free(f);
  for (int i = 0; i < 2; ++i) vr_rollout_free(h[i]);
  tmodel_free(&m);
}

/* The causal-LM fixtures of the training engine (tests/fixtures/lm/<name>, through vr_lm and
 * vr_rollout_lm_view): greedy on cuda equals the cpu engine as compare_greedy says (the cpu engine
 * is checked against transformers on the same fixtures by tests/trainer/test_rollout_golden.c). */
static void test_fixture(const char *name) {
  const char *fx = getenv("VR_FIXTURES");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/lm/%s", fx ? fx : "tests/fixtures", name);
  vr_lm_t *lm = NULL;
  vr_rollout_lm_t v;
  memset(&v, 0, sizeof v);
  if (vr_lm_load(dir, NULL, &lm) != 0 || vr_rollout_lm_view(lm, &v) != 0) {
    report(0, "fixture %s: cannot load %s (VR_FIXTURES names tests/fixtures)", name, dir);
    vr_lm_free(lm);
    return;
  }
  tmodel_t m; /* borrows the lm's buffer and the view: nothing of it is freed here */
  memset(&m, 0, sizeof m);
  m.cfg = v.cfg;
  m.params = vr_lm_params(lm);
  m.n = vr_lm_n_floats(lm);
  m.w = v.w;
  enum { NP = 8 };
  uint32_t pcu[NP + 1] = {0};
  int32_t ids[NP * 24];
  for (int p = 0; p < NP; ++p) {
    const uint32_t len = 2 + irand(22);
    for (uint32_t i = 0; i < len; ++i) ids[pcu[p] + i] = (int32_t)irand((uint32_t)m.cfg.vocab_size);
    pcu[p + 1] = pcu[p] + len;
  }
  vr_rollout_t *cpu = NULL, *cu = NULL;
  char what[96];
  if (make_engine(&m, &vr_rollout_backend_cpu, "cpu", 2048, &cpu) == 0 &&
      make_engine(&m, &vr_rollout_backend_cuda, "cuda", 2048, &cu) == 0) {
    snprintf(what, sizeof what, "fixture %s (n 1)", name);
    compare_greedy(what, &m, cpu, cu, ids, pcu, NP, 1, 24);
    snprintf(what, sizeof what, "fixture %s (n 3)", name);
    compare_greedy(what, &m, cpu, cu, ids, pcu, NP, 3, 16);
  } else {
    report(0, "fixture %s: engine init failed", name);
  }
  vr_rollout_free(cpu);
  vr_rollout_free(cu);
  vr_rollout_lm_view_free(&v);
  vr_lm_free(lm);
}

/* ------------------------------------------------------------ main */

int main(void) {
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    printf("no CUDA device: skipped\n");
    return 77;
  }
  const uint64_t seed = vr_test_seed("test_cuda_rollout", 20261201);
  g_rng = seed;
  /* this branch's kernel tests draw from a copy of the generator, so the tests below keep the
   * inputs they had before them */
  const uint64_t rng0 = g_rng;
  test_rope_append(37, 4, 2, 64);
  test_rope_append(64, 32, 8, 64); /* Llama-3.2-1B's heads */
  test_rope_append(5, 14, 2, 64);
  test_rope_append(9, 4, 2, 8);
  test_rope_append(20, 8, 8, 256);
  if (vr_cuda_roll_gemm_available(0)) { /* the Hopper decode GEMM: awkward shapes, every configuration kind */
    test_dgemm(1, 8, 8, 0, 0, 0, 128, 64, 1, 0);
    test_dgemm(5, 136, 96, 1, 1, 1, 64, 64, 2, 0);
    test_dgemm(16, 264, 544, 0, 1, 0, 128, 128, 3, 0); /* K tail of 32 past the last 128-chunk */
    test_dgemm(17, 128, 256, 1, 0, 1, 64, 64, 4, 1);
    test_dgemm(33, 392, 328, 1, 1, 0, 128, 64, 5, 0); /* K tail of 8 past the last 64-chunk */
    test_dgemm(64, 520, 1024, 0, 0, 0, 64, 128, 8, 0);
    test_dgemm(64, 251, 200, 0, 1, 0, 128, 64, 4, 0); /* odd N */
    test_dgemm(63, 251, 200, 1, 1, 1, 64, 128, 1, 1);
    test_dgemm(9, 600, 1000, 1, 1, 1, 256, 64, 3, 0); /* 256-column tiles */
    test_dgemm(64, 777, 776, 0, 1, 0, 256, 128, 2, 1);
    test_dgemm(50, 300, 1288, 1, 1, 1, 128, 256, 3, 0); /* 256-element chunks, K tail of 8 */
    test_dgemm(64, 200, 512, 0, 0, 0, 64, 256, 1, 0);
    test_dgemm(64, 3072, 2048, 0, 0, 0, 0, 0, 0, 0); /* Llama-3.2-1B's qkv, o (+=), down (+=): the rule's picks */
    test_dgemm(64, 2048, 2048, 1, 0, 1, 0, 0, 0, 1);
    test_dgemm(40, 2048, 8192, 1, 1, 1, 0, 0, 0, 0);
    test_dgemm(64, 1152, 896, 0, 1, 0, 0, 0, 0, 0); /* Qwen2-0.5B's qkv (bias) and down */
    test_dgemm(3, 896, 4864, 1, 0, 1, 0, 0, 0, 0);
  } else {
    printf("skip dgemm: no sm_90a code in this build or not a compute 9.0 device\n");
  }
  const char *dg = getenv("VR_ROLL_TEST_DGEMM_ONLY"); /* the decode GEMM's compute-sanitizer run */
  if (dg && *dg == '1') {
    printf(g_fail ? "test_cuda_rollout: FAILED\n" : "test_cuda_rollout: all passed (decode GEMM only)\n");
    return g_fail;
  }
  g_rng = rng0;
  /* decode attention: head dims, GQA ratios, lengths, splits */
  const int lens_a[] = {1, 17, 300, 129, 0, 64};
  const int lens_b[] = {5000, 1, 2049, 777};
  const int lens_c[] = {33, 16, 15, 512, 513, 1000};
  static const int dims[] = {64, 128};
  static const int groups[] = {1, 4, 8};
  for (int di = 0; di < 2; ++di)
    for (int gi = 0; gi < 3; ++gi) {
      const int Hkv = groups[gi] == 1 ? 4 : 2, H = Hkv * groups[gi], D = dims[di];
      test_decode(H, Hkv, D, lens_a, 6, 0, 0);
      test_decode(H, Hkv, D, lens_b, 4, 0, 0);
      test_decode(H, Hkv, D, lens_c, 6, 0, 64);
    }
  test_decode(14, 2, 64, lens_b, 4, 0, 0);    /* Qwen2-0.5B's grouping: 7 */
  test_decode(32, 8, 128, lens_c, 6, 0, 0);   /* Llama-3.2-1B's */
  test_decode(32, 2, 64, lens_a, 6, 0, 128);  /* 16 per group: two head chunks */
  test_decode(4, 2, 8, lens_a, 6, 0, 16);     /* the fixtures' head dims */
  test_decode(2, 2, 16, lens_c, 6, 0, 0);
  test_decode(4, 1, 16, lens_b, 4, 0, 256);
  test_decode(8, 2, 64, lens_b, 4, 100, 64);  /* sliding window */
  test_decode(8, 2, 64, lens_c, 6, 20, 0);
  test_decode(8, 8, 256, lens_c, 6, 0, 0);
  /* groups 7 and 8 at D 128, windows over partitions, odd lengths (the tensor-core kernel's N = 8 columns);
   * the generator restarted afterwards, so the later tests draw what they drew before these were added */
  const uint64_t rng_e = g_rng;
  const int lens_e[] = {383, 1, 31, 4351, 95, 0, 257};
  test_decode(14, 2, 128, lens_e, 7, 0, 0);
  test_decode(16, 2, 128, lens_e, 7, 0, 128);
  test_decode(28, 4, 64, lens_e, 7, 0, 512);
  test_decode(7, 1, 128, lens_e, 7, 300, 64); /* window within a cache block, several partitions */
  test_decode(32, 8, 64, lens_e, 7, 47, 0);
  test_decode(4, 4, 128, lens_e, 7, 0, 256);
  {
    /* the rule: the tensor-core kernel wherever D % 16 == 0, the earlier choice elsewhere */
    const int ok = vr_cuda_roll_attn_kernel(4, 64, 0) == VR_ROLL_ATTN_MMA && vr_cuda_roll_attn_kernel(7, 64, 0) == VR_ROLL_ATTN_MMA &&
                   vr_cuda_roll_attn_kernel(4, 8, 0) == VR_ROLL_ATTN_RING && vr_cuda_roll_attn_kernel(8, 8, 0) == VR_ROLL_ATTN_REGS &&
                   vr_cuda_roll_attn_kernel(4, 8, VR_ROLL_ATTN_MMA) == VR_ROLL_ATTN_RING &&
                   vr_cuda_roll_attn_kernel(7, 64, VR_ROLL_ATTN_OLD_RULE) == VR_ROLL_ATTN_REGS;
    report(ok, "decode attention kernel rule: tensor cores for head dims of 16k, else ring / register by group");
  }
  g_rng = rng_e;
  test_decode_rope(32, 8, 64, lens_a, 6, 0, 0); /* Llama-3.2-1B's heads */
  test_decode_rope(14, 2, 64, lens_b, 4, 0, 0);  /* Qwen2's group of 7, several partitions */
  test_decode_rope(32, 2, 64, lens_c, 6, 0, 64); /* two head chunks: one block appends */
  test_decode_rope(4, 4, 8, lens_c, 6, 0, 16);
  test_decode_rope(8, 2, 128, lens_b, 4, 100, 0); /* sliding window */
  test_decode_rope(8, 8, 256, lens_a, 6, 0, 0);
  {
    const uint64_t r = g_rng; /* as above: the later tests' draws unchanged */
    test_decode_rope(16, 2, 128, lens_e, 7, 0, 128); /* group 8, partitions, the new key in a later block */
    test_decode_rope(7, 1, 64, lens_e, 7, 40, 0);    /* group 7, a window */
    g_rng = r;
  }
  /* sampling */
  test_sample_rows(1000, 400, 0.f);
  test_sample_rows(1000, 400, 0.25f);
  test_sample_rows(151936, 40, 0.f);
  test_sample_h12();
  test_sample_tied(seed, 1000, 240, 16); /* the rows of tests/trainer/test_sample_ties.c */
  test_sample_tied(seed + 1, 151936, 6, 4);
  test_sample_u_ends(seed + 11, 1000, 64); /* the rows of test_sample_ties.c's test_kernel_u_ends */
  test_sample_u_ends(seed + 12, 151936, 12);
  test_sample_chisq(1.f, 0, 1.f);
  test_sample_chisq(0.8f, 8, 1.f);
  test_sample_chisq(1.2f, 0, 0.8f);
  test_sample_chisq(0.9f, 6, 0.7f);
  /* the engine on the cuda backend against the cpu engine (VR_ROLL_TEST_KERNELS_ONLY=1 skips it:
   * the compute-sanitizer run of tests/cuda/rollout_device_run.sh) */
  const char *ko = getenv("VR_ROLL_TEST_KERNELS_ONLY");
  if (ko && *ko == '1') {
    printf(g_fail ? "test_cuda_rollout: FAILED\n" : "test_cuda_rollout: all passed (kernels only)\n");
    return g_fail;
  }
  test_engine("llama gqa D16", 300, 64, 2, 4, 2, 16, 96, 0, 0, 0);
  test_engine("qwen2 bias tied mqa D64", 500, 256, 2, 4, 1, 64, 384, 1, 1, 0);
  test_engine("mistral window 24 D8", 97, 32, 2, 4, 2, 8, 48, 0, 0, 24);
  test_engine("gqa 8 D128", 256, 256, 2, 16, 2, 128, 256, 0, 0, 0);
  if (vr_cuda_roll_gemm_available(0)) { /* two engines again with our decode GEMM on the layers' GEMMs */
    g_dgemm = VR_CUDA_ROLL_DGEMM_LAYERS;
    test_engine("gqa 8 D128, our decode GEMM", 256, 256, 2, 16, 2, 128, 256, 0, 0, 0);
    test_engine("qwen2 bias tied mqa D64, our decode GEMM", 500, 256, 2, 4, 1, 64, 384, 1, 1, 0);
    g_dgemm = VR_CUDA_ROLL_DGEMM_DEFAULT;
  }
  /* two engines again with the graph's first kernel staging from the pinned host block's mapping
   * (graph_io 1) instead of the default's device copy (2): graph == eager, reruns, as above; the
   * generator restarted afterwards, so the later tests draw what they drew before these were added */
  {
    const uint64_t r = g_rng;
    g_graph_io = 1;
    test_engine("llama gqa D16, graph_io 1", 300, 64, 2, 4, 2, 16, 96, 0, 0, 0);
    test_engine("qwen2 bias tied mqa D64, graph_io 1", 500, 256, 2, 4, 1, 64, 384, 1, 1, 0);
    g_graph_io = -1;
    g_rng = r;
  }
  test_part_classes();
  test_pipeline();
  test_fixture("llama_lm");
  test_fixture("qwen2_lm");
  test_fixture("mistral_lm");
  printf(g_fail ? "test_cuda_rollout: FAILED\n" : "test_cuda_rollout: all passed\n");
  return g_fail;
}
