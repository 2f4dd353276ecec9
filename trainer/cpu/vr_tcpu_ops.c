/* vr_tcpu_ops.c: forward/backward ops of the cpu training backend (vr_tcpu_ops.h). */
#include "vr_tcpu_ops.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"

#ifdef _OPENMP
#include <omp.h>
#endif

static int vr_tcpu_tid(void) {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

/* dst (cols, rows) = src (rows, cols; ld lds)^T */
static void vr_tcpu_transpose(const float *src, int rows, int cols, int lds, float *dst) {
  for (int r = 0; r < rows; r++)
    for (int j = 0; j < cols; j++) dst[(size_t)j * rows + r] = src[(size_t)r * lds + j];
}

/* ---- linear -------------------------------------------------------------------------- */

void vr_tcpu_linear(const vr_tcpu_ctx_t *c, const float *x, const float *w, const float *b, int T, int in,
                    int out, float *y) {
  if (T == 0) return;
  vr_cpu_gemm_nt(c->gemm, T, out, in, 1.0f, x, in, w, in, b, y, out, c->pack, c->n_threads);
}

void vr_tcpu_linear_bwd(const vr_tcpu_ctx_t *c, const float *x, const float *w, const float *dy, int T,
                        int in, int out, float *dx, int add_dx, float *gw, float *gb) {
  if (T == 0) return;
  float *dyT = c->tmp, *tw = c->tmp + (size_t)out * T, *tx = tw + (size_t)out * in;
  if (dx) {
    float *dst = add_dx ? tx : dx;
    vr_cpu_gemm_nn(c->gemm, T, in, out, dy, out, w, in, dst, in, c->n_threads);
    if (add_dx)
      for (size_t i = 0; i < (size_t)T * in; i++) dx[i] += tx[i];
  }
  vr_tcpu_transpose(dy, T, out, out, dyT);
  vr_cpu_gemm_nn(c->gemm, out, in, T, dyT, T, x, in, tw, in, c->n_threads);
  const size_t nw = (size_t)out * in;
#pragma omp parallel for num_threads(c->n_threads) schedule(static) if (c->n_threads > 1 && nw >= 65536)
  for (size_t i = 0; i < nw; i++) gw[i] += tw[i];
  if (gb)
#pragma omp parallel for num_threads(c->n_threads) schedule(static) if (c->n_threads > 1 && (size_t)out * T >= 65536)
    for (int j = 0; j < out; j++) {
      float s = 0.0f;
      for (int t = 0; t < T; t++) s += dyT[(size_t)j * T + t];
      gb[j] += s;
    }
}

/* ---- RMSNorm ----------------------------------------------------------------------------- */

void vr_tcpu_rmsnorm(const float *x, const float *w, int T, int C, float eps, float *y, float *r) {
  for (int t = 0; t < T; t++) {
    const float *row = x + (size_t)t * C;
    double ss = 0;
    for (int i = 0; i < C; i++) ss += (double)row[i] * row[i];
    float inv = 1.0f / sqrtf((float)(ss / C) + eps);
    r[t] = inv;
    for (int i = 0; i < C; i++) y[(size_t)t * C + i] = w[i] * (row[i] * inv);
  }
}

void vr_tcpu_rmsnorm_bwd(const float *x, const float *w, const float *r, const float *dy, int T, int C,
                         float *dx, float *gw) {
  for (int t = 0; t < T; t++) {
    const float *xr = x + (size_t)t * C, *dr = dy + (size_t)t * C;
    const float rt = r[t];
    double dot = 0;
    for (int i = 0; i < C; i++) {
      dot += (double)w[i] * dr[i] * xr[i];
      gw[i] += dr[i] * (xr[i] * rt);
    }
    const float k = (float)(dot * rt * rt * rt / C);
    for (int i = 0; i < C; i++) dx[(size_t)t * C + i] += rt * w[i] * dr[i] - xr[i] * k;
  }
}

/* ---- RoPE ---------------------------------------------------------------------------------- */

void vr_tcpu_rope(float *x, int nh, int D, const uint32_t *cu, uint32_t n, const float *cos_t,
                  const float *sin_t, int inverse) {
  const int half = D / 2;
  for (uint32_t q = 0; q < n; q++) {
    for (uint32_t t = cu[q]; t < cu[q + 1]; t++) {
      const float *cs = cos_t + (size_t)(t - cu[q]) * half, *sn = sin_t + (size_t)(t - cu[q]) * half;
      for (int h = 0; h < nh; h++) {
        float *v = x + ((size_t)t * nh + h) * D;
        for (int i = 0; i < half; i++) {
          float a = v[i], b = v[i + half];
          if (!inverse) {
            v[i] = a * cs[i] - b * sn[i];
            v[i + half] = b * cs[i] + a * sn[i];
          } else {
            v[i] = a * cs[i] + b * sn[i];
            v[i + half] = b * cs[i] - a * sn[i];
          }
        }
      }
    }
  }
}

/* ---- SwiGLU ----------------------------------------------------------------------------------- */

void vr_tcpu_swiglu(const float *g, const float *u, size_t n, float *a) {
  for (size_t i = 0; i < n; i++) a[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void vr_tcpu_swiglu_bwd(const float *g, const float *u, const float *da, size_t n, float *dg, float *du) {
  for (size_t i = 0; i < n; i++) {
    float sg = 1.0f / (1.0f + expf(-g[i]));
    float silu = g[i] * sg;
    dg[i] = da[i] * u[i] * (sg * (1.0f + g[i] * (1.0f - sg)));
    du[i] = da[i] * silu;
  }
}

/* ---- attention -------------------------------------------------------------------------------- */

/* Query rows per block for a sequence of L tokens (depends on L only). */
static int vr_tcpu_block(int L) {
  if ((size_t)L * L <= ((size_t)1 << 20)) return L > 0 ? L : 1;
  return (int)(((size_t)1 << 20) / (size_t)L) + 1;
}

/* Per-thread floats the backward needs for a sequence of L (forward needs less). */
static size_t vr_tcpu_attn_need(int L, int D) {
  size_t b = (size_t)vr_tcpu_block(L);
  return 3 * b * (size_t)L + (size_t)L * D;
}

size_t vr_tcpu_attn_scratch(const uint32_t *cu, uint32_t n, int n_threads, int D) {
  size_t mx = 1;
  for (uint32_t q = 0; q < n; q++) {
    size_t need = vr_tcpu_attn_need((int)(cu[q + 1] - cu[q]), D);
    if (need > mx) mx = need;
  }
  return mx * (size_t)(n_threads > 0 ? n_threads : 1);
}

/* The visible keys [lo, hi) of query row i. */
static void vr_tcpu_keys(int i, int window, int *lo, int *hi) {
  *hi = i + 1;
  *lo = window > 0 && i - window + 1 > 0 ? i - window + 1 : 0;
}

void vr_tcpu_attention(const vr_tcpu_ctx_t *c, const float *q, const float *k, const float *v, int H, int KV,
                       int D, int window, const uint32_t *cu, uint32_t n, float *out, float *lse, float *s) {
  const int group = H / KV, ldq = H * D, ldk = KV * D;
  const float scale = 1.0f / sqrtf((float)D);
  const int nt = c->n_threads < H ? c->n_threads : H;
  for (uint32_t sq = 0; sq < n; sq++) {
    const int o = (int)cu[sq], L = (int)(cu[sq + 1] - cu[sq]);
    const int block = vr_tcpu_block(L);
    const size_t need = vr_tcpu_attn_need(L, D);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1 && (size_t)L * L * D >= 4096)
    for (int h = 0; h < H; h++) {
      const int tid = vr_tcpu_tid();
      float *S = s + need * (size_t)tid, *pack = c->pack + VR_CPU_GEMM_PACK_FLOATS(c->pack_k) * (size_t)tid;
      const float *Q = q + (size_t)o * ldq + (size_t)h * D;
      const float *K = k + (size_t)o * ldk + (size_t)(h / group) * D;
      const float *V = v + (size_t)o * ldk + (size_t)(h / group) * D;
      float *O = out + (size_t)o * ldq + (size_t)h * D;
      for (int r0 = 0; r0 < L; r0 += block) {
        const int rows = L - r0 < block ? L - r0 : block, cols = r0 + rows;
        vr_cpu_gemm_nt(c->gemm, rows, cols, D, scale, Q + (size_t)r0 * ldq, ldq, K, ldk, NULL, S, cols, pack, 1);
        for (int r = 0; r < rows; r++) {
          float *row = S + (size_t)r * cols;
          int lo, hi;
          vr_tcpu_keys(r0 + r, window, &lo, &hi);
          float mx = -INFINITY;
          for (int j = lo; j < hi; j++) mx = row[j] > mx ? row[j] : mx;
          float sum = 0.0f;
          for (int j = 0; j < cols; j++) {
            float e = (j >= lo && j < hi) ? expf(row[j] - mx) : 0.0f;
            row[j] = e;
            sum += e;
          }
          float inv = 1.0f / sum;
          for (int j = lo; j < hi; j++) row[j] *= inv;
          lse[(size_t)(o + r0 + r) * H + h] = mx + logf(sum);
        }
        vr_cpu_gemm_nn(c->gemm, rows, D, cols, S, cols, V, ldk, O + (size_t)r0 * ldq, ldq, 1);
      }
    }
  }
}

void vr_tcpu_attention_bwd(const vr_tcpu_ctx_t *c, const float *q, const float *k, const float *v,
                           const float *out, const float *lse, const float *dout, int H, int KV, int D,
                           int window, const uint32_t *cu, uint32_t n, float *dq, float *dk, float *dv,
                           float *s) {
  const int group = H / KV, ldq = H * D, ldk = KV * D;
  const float scale = 1.0f / sqrtf((float)D);
  const int nt = c->n_threads < KV ? c->n_threads : KV;
  for (uint32_t sq = 0; sq < n; sq++) {
    const int o = (int)cu[sq], L = (int)(cu[sq + 1] - cu[sq]);
    const int block = vr_tcpu_block(L);
    const size_t need = vr_tcpu_attn_need(L, D);
#pragma omp parallel for num_threads(nt) schedule(static) if (nt > 1 && (size_t)L * L * D >= 4096)
    for (int g = 0; g < KV; g++) {
      const int tid = vr_tcpu_tid();
      float *S = s + need * (size_t)tid, *dP = S + (size_t)block * L, *Tr = dP + (size_t)block * L;
      float *tmpD = Tr + (size_t)block * L;
      float *pack = c->pack + VR_CPU_GEMM_PACK_FLOATS(c->pack_k) * (size_t)tid;
      const float *K = k + (size_t)o * ldk + (size_t)g * D, *V = v + (size_t)o * ldk + (size_t)g * D;
      float *dK = dk + (size_t)o * ldk + (size_t)g * D, *dV = dv + (size_t)o * ldk + (size_t)g * D;
      for (int i = 0; i < L; i++) {
        memset(dK + (size_t)i * ldk, 0, (size_t)D * sizeof(float));
        memset(dV + (size_t)i * ldk, 0, (size_t)D * sizeof(float));
      }
      for (int h = g * group; h < (g + 1) * group; h++) {
        const float *Q = q + (size_t)o * ldq + (size_t)h * D, *O = out + (size_t)o * ldq + (size_t)h * D;
        const float *dO = dout + (size_t)o * ldq + (size_t)h * D;
        float *dQ = dq + (size_t)o * ldq + (size_t)h * D;
        for (int r0 = 0; r0 < L; r0 += block) {
          const int rows = L - r0 < block ? L - r0 : block, cols = r0 + rows;
          vr_cpu_gemm_nt(c->gemm, rows, cols, D, scale, Q + (size_t)r0 * ldq, ldq, K, ldk, NULL, S, cols, pack, 1);
          vr_cpu_gemm_nt(c->gemm, rows, cols, D, 1.0f, dO + (size_t)r0 * ldq, ldq, V, ldk, NULL, dP, cols, pack, 1);
          for (int r = 0; r < rows; r++) {
            const int i = r0 + r;
            const float l = lse[(size_t)(o + i) * H + h];
            float di = 0.0f;
            for (int d = 0; d < D; d++) di += dO[(size_t)i * ldq + d] * O[(size_t)i * ldq + d];
            int lo, hi;
            vr_tcpu_keys(i, window, &lo, &hi);
            float *prow = S + (size_t)r * cols, *drow = dP + (size_t)r * cols;
            for (int j = 0; j < cols; j++) {
              float p = (j >= lo && j < hi) ? expf(prow[j] - l) : 0.0f;
              prow[j] = p;
              drow[j] = p * (drow[j] - di);
            }
          }
          /* dQ rows = scale * dS K */
          vr_cpu_gemm_nn(c->gemm, rows, D, cols, dP, cols, K, ldk, dQ + (size_t)r0 * ldq, ldq, 1);
          for (int r = 0; r < rows; r++)
            for (int d = 0; d < D; d++) dQ[(size_t)(r0 + r) * ldq + d] *= scale;
          /* dV += P^T dO */
          vr_tcpu_transpose(S, rows, cols, cols, Tr);
          vr_cpu_gemm_nn(c->gemm, cols, D, rows, Tr, rows, dO + (size_t)r0 * ldq, ldq, tmpD, D, 1);
          for (int j = 0; j < cols; j++)
            for (int d = 0; d < D; d++) dV[(size_t)j * ldk + d] += tmpD[(size_t)j * D + d];
          /* dK += scale * dS^T Q */
          vr_tcpu_transpose(dP, rows, cols, cols, Tr);
          vr_cpu_gemm_nn(c->gemm, cols, D, rows, Tr, rows, Q + (size_t)r0 * ldq, ldq, tmpD, D, 1);
          for (int j = 0; j < cols; j++)
            for (int d = 0; d < D; d++) dK[(size_t)j * ldk + d] += scale * tmpD[(size_t)j * D + d];
        }
      }
    }
  }
}

/* ---- LM head ------------------------------------------------------------------------------------ */

void vr_tcpu_lmhead(const vr_tcpu_ctx_t *c, const float *h, const int32_t *tgt, int R, int C, const float *W,
                    int V, float tau, int vchunk, float *logp, float *ent, float *lse, float *zbuf) {
  const float alpha = 1.0f / tau;
  double m[VR_TCPU_LM_ROWS], s[VR_TCPU_LM_ROWS], u[VR_TCPU_LM_ROWS];
  float zy[VR_TCPU_LM_ROWS];
  for (int r0 = 0; r0 < R; r0 += VR_TCPU_LM_ROWS) {
    const int rows = R - r0 < VR_TCPU_LM_ROWS ? R - r0 : VR_TCPU_LM_ROWS;
    for (int r = 0; r < rows; r++) m[r] = -INFINITY, s[r] = 0, u[r] = 0, zy[r] = 0;
    for (int v0 = 0; v0 < V; v0 += vchunk) {
      const int vc = V - v0 < vchunk ? V - v0 : vchunk;
      vr_cpu_gemm_nt(c->gemm, rows, vc, C, alpha, h + (size_t)r0 * C, C, W + (size_t)v0 * C, C, NULL, zbuf, vc,
                     c->pack, c->n_threads);
#pragma omp parallel for num_threads(c->n_threads) schedule(static) if (c->n_threads > 1 && (size_t)rows * vc >= 16384)
      for (int r = 0; r < rows; r++) {
        const float *z = zbuf + (size_t)r * vc;
        double cm = m[r];
        for (int j = 0; j < vc; j++) cm = z[j] > cm ? z[j] : cm;
        if (cm > m[r]) {
          double f = exp(m[r] - cm); /* m = -inf the first time: f = 0 */
          s[r] *= f;
          u[r] *= f;
          m[r] = cm;
        }
        for (int j = 0; j < vc; j++) {
          double e = exp((double)z[j] - m[r]);
          s[r] += e;
          u[r] += e * z[j];
        }
        const int y = tgt[r0 + r];
        if (y >= v0 && y < v0 + vc) zy[r] = z[y - v0];
      }
    }
    for (int r = 0; r < rows; r++) {
      double l = m[r] + log(s[r]);
      lse[r0 + r] = (float)l;
      logp[r0 + r] = (float)(zy[r] - l);
      ent[r0 + r] = (float)(l - u[r] / s[r]);
    }
  }
}

void vr_tcpu_lmhead_bwd(const vr_tcpu_ctx_t *c, const float *h, const int32_t *tgt, int R, int C,
                        const float *W, int V, float tau, int vchunk, const float *lse, const float *ent,
                        const float *dlogp, const float *dent, float *dh, float *gW, float *zbuf) {
  const float alpha = 1.0f / tau;
  float *th = c->tmp, *GT = th + (size_t)VR_TCPU_LM_ROWS * C, *tw = GT + (size_t)vchunk * VR_TCPU_LM_ROWS;
  memset(dh, 0, (size_t)R * C * sizeof(float));
  for (int r0 = 0; r0 < R; r0 += VR_TCPU_LM_ROWS) {
    const int rows = R - r0 < VR_TCPU_LM_ROWS ? R - r0 : VR_TCPU_LM_ROWS;
    for (int v0 = 0; v0 < V; v0 += vchunk) {
      const int vc = V - v0 < vchunk ? V - v0 : vchunk;
      vr_cpu_gemm_nt(c->gemm, rows, vc, C, alpha, h + (size_t)r0 * C, C, W + (size_t)v0 * C, C, NULL, zbuf, vc,
                     c->pack, c->n_threads);
#pragma omp parallel for num_threads(c->n_threads) schedule(static) if (c->n_threads > 1 && (size_t)rows * vc >= 16384)
      for (int r = 0; r < rows; r++) {
        float *z = zbuf + (size_t)r * vc;
        const float l = lse[r0 + r], H = ent[r0 + r], gl = dlogp[r0 + r], ge = dent ? dent[r0 + r] : 0.0f;
        const int y = tgt[r0 + r];
        for (int j = 0; j < vc; j++) {
          float lp = z[j] - l, p = expf(lp);
          float gz = -gl * p - ge * p * (lp + H);
          if (v0 + j == y) gz += gl;
          z[j] = gz * alpha; /* d/d(h.W) = d/dz / tau */
        }
      }
      vr_cpu_gemm_nn(c->gemm, rows, C, vc, zbuf, vc, W + (size_t)v0 * C, C, th, C, c->n_threads);
      for (size_t i = 0; i < (size_t)rows * C; i++) dh[(size_t)r0 * C + i] += th[i];
      vr_tcpu_transpose(zbuf, rows, vc, vc, GT);
      vr_cpu_gemm_nn(c->gemm, vc, C, rows, GT, rows, h + (size_t)r0 * C, C, tw, C, c->n_threads);
      for (size_t i = 0; i < (size_t)vc * C; i++) gW[(size_t)v0 * C + i] += tw[i];
    }
  }
}

int vr_tcpu_rope_grow(vr_tcpu_rope_tab_t *t, size_t need, size_t cap, const float *inv, int half, float scale) {
  if (need <= t->n) return 0;
  size_t want = 2 * t->n > need ? 2 * t->n : need, h = (size_t)half;
  if (want < 256) want = 256;
  if (want > cap) want = cap > need ? cap : need;
  float *ct = realloc(t->cos_t, want * h * sizeof *ct);
  if (!ct) return VR_ERR_NOMEM;
  t->cos_t = ct;
  float *st = realloc(t->sin_t, want * h * sizeof *st);
  if (!st) return VR_ERR_NOMEM;
  t->sin_t = st;
  for (size_t p = t->n; p < want; p++)
    for (size_t i = 0; i < h; i++) {
      float a = (float)p * inv[i];
      ct[p * h + i] = cosf(a) * scale;
      st[p * h + i] = sinf(a) * scale;
    }
  t->n = want;
  return 0;
}

void vr_tcpu_rope_free(vr_tcpu_rope_tab_t *t) {
  free(t->cos_t), free(t->sin_t);
  memset(t, 0, sizeof *t);
}
