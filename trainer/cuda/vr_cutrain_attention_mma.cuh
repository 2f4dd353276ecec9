/* vr_cutrain_attention_mma.cuh: the tensor-core attention backward on mma.sync m16n8k16 (bf16 in,
 * fp32 accumulate), FlashAttention-2's register scheme: S / dP accumulate in the C layout, whose
 * row pairs are the A-operand layout of the next product, so P and dS never touch shared
 * memory (the fragment layouts and the cp.async / ldmatrix / mma wrappers are model/cuda's,
 * vr_cuda_attention_fa.cuh). Included by vr_cutrain_attention.cu inside its anonymous namespace
 * (bwd_params there).
 *
 * Both kernels: 4 warps, a 64-row block tile (warp w owns rows 16 w .. 16 w + 15), the streamed
 * 64-row tiles double-buffered with cp.async (the next one lands while the current one is
 * used). Tiles of pitch D + 8 bf16 (conflict-free ldmatrix in both orientations).
 *   k_bwd_dkdv_mma: a block owns 64 keys of key head hk (or of query head h alone: p.part);
 *     per (query head, query tile at or after the keys): S^T = K Q^T, P^T, dP^T = V dO^T,
 *     dS^T = P^T (dP^T - delta); dV += P^T dO and dK += dS^T Q in registers.
 *   k_bwd_dq_mma: a block owns 64 queries of head h; per key tile up to the diagonal:
 *     S = Q K^T, P, dP = dO V^T, dS; dQ += dS K. */

__device__ __forceinline__ float2 unpack_bf16(uint32_t u) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&u));
}

/* Blocks per multiprocessor the register allocation must allow (1: no bound). D 64: 3 (168
 * registers, a few bytes spilled; the attention backward 3-7% faster than unbounded at 2
 * blocks on the H200: docs/benchmarks.md); D 128: 2 blocks fit its shared memory anyway.
 * VR_CUTRAIN_ATTN_BWD_MINB overrides both (a build-time knob for measurements). */
#ifdef VR_CUTRAIN_ATTN_BWD_MINB
#define ATTN_BWD_MINB(D) VR_CUTRAIN_ATTN_BWD_MINB
#else
#define ATTN_BWD_MINB(D) ((D) == 64 ? 3 : 1)
#endif

template <int D>
struct mma_bwd_smem {
  static constexpr int LD = D + 8;
  static constexpr size_t tile = (size_t)64 * LD * 2;
  static constexpr size_t bytes = 6 * tile + 4 * 64 * 4; /* 2 own tiles, 2 x 2 streamed, lse / delta x 2 */
};

/* acc[nt] (16 rows x 64 columns, C layout) = A rows (16 x D at a, pitch LD) . B^T with B the
 * 64 x D tile b: A through ldmatrix, B rows as the col-major operand. */
template <int D>
__device__ __forceinline__ void mma_rows_tileT(float (&acc)[8][4], const bf16 *a, const bf16 *b) {
  constexpr int LD = D + 8;
  const int lane = threadIdx.x & 31, mat = lane >> 3, mrow = lane & 7;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t af[4];
    ldmatrix_x4(af[0], af[1], af[2], af[3], a + (lane & 15) * LD + kk * 16 + 8 * (lane >> 4));
#pragma unroll
    for (int nt = 0; nt < 8; nt += 2) {
      uint32_t b0, b1, b2, b3;
      ldmatrix_x4(b0, b1, b2, b3, b + ((nt + (mat >> 1)) * 8 + mrow) * LD + kk * 16 + 8 * (mat & 1));
      mma_bf16(acc[nt], af, b0, b1);
      mma_bf16(acc[nt + 1], af, b2, b3);
    }
  }
}

/* The 16 x D rows at a (pitch LD) as D / 16 k16 A fragments (ldmatrix), for operands that stay
 * the same over a kernel's whole loop. */
template <int D>
__device__ __forceinline__ void load_afrags(uint32_t (&af)[D / 16][4], const bf16 *a) {
  constexpr int LD = D + 8;
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    ldmatrix_x4(af[kk][0], af[kk][1], af[kk][2], af[kk][3], a + (lane & 15) * LD + kk * 16 + 8 * (lane >> 4));
}

/* As mma_rows_tileT with the A rows already in registers (load_afrags). */
template <int D>
__device__ __forceinline__ void mma_frags_tileT(float (&acc)[8][4], const uint32_t (&af)[D / 16][4], const bf16 *b) {
  constexpr int LD = D + 8;
  const int lane = threadIdx.x & 31, mat = lane >> 3, mrow = lane & 7;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
#pragma unroll
    for (int nt = 0; nt < 8; nt += 2) {
      uint32_t b0, b1, b2, b3;
      ldmatrix_x4(b0, b1, b2, b3, b + ((nt + (mat >> 1)) * 8 + mrow) * LD + kk * 16 + 8 * (mat & 1));
      mma_bf16(acc[nt], af[kk], b0, b1);
      mma_bf16(acc[nt + 1], af[kk], b2, b3);
    }
  }
}

/* acc[nn] (16 rows x D) += A (16 x 64 as 4 k16 fragments in registers) . B (64 x D tile b,
 * row-major in k: ldmatrix.trans). */
template <int D>
__device__ __forceinline__ void mma_regs_tile(float (&acc)[D / 8][4], const uint32_t (&a)[4][4], const bf16 *b) {
  constexpr int LD = D + 8;
  const int lane = threadIdx.x & 31, mat = lane >> 3, mrow = lane & 7;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int nn = 0; nn < D / 8; nn += 2) {
      uint32_t b0, b1, b2, b3;
      ldmatrix_x4_trans(b0, b1, b2, b3, b + (j * 16 + mrow + 8 * (mat & 1)) * LD + nn * 8 + 8 * (mat >> 1));
      mma_bf16(acc[nn], a[j], b0, b1);
      mma_bf16(acc[nn + 1], a[j], b2, b3);
    }
  }
}

/* 64 rows from r0 of one head (D at column col) into a tile of pitch D + 8, cp.async; rows at
 * or past valid zero-filled. */
template <int D>
__device__ __forceinline__ void cp_rows(bf16 *dst, const bf16 *src, int ld, size_t s0, int col, int r0, int valid) {
  cp_tile2<D, 4>(dst, src, ld, s0, col, r0, valid);
}

/* ---- the element-wise steps both backward paths share (mma.sync here, wgmma in
 * vr_cutrain_attention_sm90.cuh): a warp's 16 rows x 64 columns in the C layout sc[nt][e]
 * (row g + 8 (e >> 1) of the warp's slab, column nt * 8 + 2 t + (e & 1)), which is also the
 * wgmma m64n64 accumulator layout of the warp's rows (d[4 nt + e]). */

/* dK / dV side: P^T of keys kr0 / kr1 = kr0 + 8 against the 64 queries from q0 (their lse in
 * slse), as bf16 A fragments. Queries past the end have lse = inf (P = 0); only the diagonal
 * tile needs the causal mask (it alone holds keys past the end, or after a query). */
__device__ __forceinline__ void bwd_pT(uint32_t (&pa)[4][4], const float (&sc)[8][4], const float *slse,
                                       float scale_log2, bool diag, int kr0, int kr1, int q0) {
  const int t = threadIdx.x & 3;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    float v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int qi = nt * 8 + 2 * t + (e & 1), kp = e < 2 ? kr0 : kr1;
      const float x = ex2_approx(fmaf(sc[nt][e], scale_log2, -slse[qi]));
      v[e] = !diag || kp <= q0 + qi ? x : 0.f;
    }
    pa[nt >> 1][(nt & 1) * 2 + 0] = pack_bf16(v[0], v[1]);
    pa[nt >> 1][(nt & 1) * 2 + 1] = pack_bf16(v[2], v[3]);
  }
}

/* dS^T = P^T (dP^T - delta) from the bf16 P^T (pa) and dP^T (sc), delta of the 64 queries in
 * sdel, as bf16 A fragments. */
__device__ __forceinline__ void bwd_dsT(uint32_t (&da)[4][4], const uint32_t (&pa)[4][4], const float (&sc)[8][4],
                                        const float *sdel) {
  const int t = threadIdx.x & 3;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    const int qi = nt * 8 + 2 * t;
    const float d0 = sdel[qi], d1 = sdel[qi + 1];
    const float2 r0 = unpack_bf16(pa[nt >> 1][(nt & 1) * 2 + 0]), r1 = unpack_bf16(pa[nt >> 1][(nt & 1) * 2 + 1]);
    da[nt >> 1][(nt & 1) * 2 + 0] = pack_bf16(r0.x * (sc[nt][0] - d0), r0.y * (sc[nt][1] - d1));
    da[nt >> 1][(nt & 1) * 2 + 1] = pack_bf16(r1.x * (sc[nt][2] - d0), r1.y * (sc[nt][3] - d1));
  }
}

/* dQ side: P of queries qr0 / qr1 (lse l0 / l1) against the 64 keys from n0, bf16 A fragments
 * (rounded as the dK / dV side's); the same masking rule. */
__device__ __forceinline__ void bwd_p(uint32_t (&pa)[4][4], const float (&sc)[8][4], float l0, float l1,
                                      float scale_log2, bool diag, int n0, int qr0, int qr1) {
  const int t = threadIdx.x & 3;
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    float v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int kp = n0 + nt * 8 + 2 * t + (e & 1), qp = e < 2 ? qr0 : qr1;
      const float x = ex2_approx(fmaf(sc[nt][e], scale_log2, e < 2 ? -l0 : -l1));
      v[e] = !diag || kp <= qp ? x : 0.f;
    }
    pa[nt >> 1][(nt & 1) * 2 + 0] = pack_bf16(v[0], v[1]);
    pa[nt >> 1][(nt & 1) * 2 + 1] = pack_bf16(v[2], v[3]);
  }
}

/* dS = P (dP - delta) of rows qr0 / qr1 (delta d0 / d1), dP in sc. */
__device__ __forceinline__ void bwd_ds(uint32_t (&da)[4][4], const uint32_t (&pa)[4][4], const float (&sc)[8][4],
                                       float d0, float d1) {
#pragma unroll
  for (int nt = 0; nt < 8; ++nt) {
    const float2 r0 = unpack_bf16(pa[nt >> 1][(nt & 1) * 2 + 0]), r1 = unpack_bf16(pa[nt >> 1][(nt & 1) * 2 + 1]);
    da[nt >> 1][(nt & 1) * 2 + 0] = pack_bf16(r0.x * (sc[nt][0] - d0), r0.y * (sc[nt][1] - d0));
    da[nt >> 1][(nt & 1) * 2 + 1] = pack_bf16(r1.x * (sc[nt][2] - d1), r1.y * (sc[nt][3] - d1));
  }
}

/* The dK / dV block's work (grid (n_tiles, Hkv), or (n_tiles, Hkv np) with p.part: part j = y % np
 * of key head y / np takes the group's query heads j G / np .. (j + 1) G / np - 1): 64 keys from
 * k0 of sequence seq (rows s0 .., len of them) of key head hk; n_it = ng nq (query head, query
 * tile) pairs, pair it being head hk G + g_lo + it / nq and query tile k0 + 64 (it % nq). */
struct bwd_kv_work {
  size_t s0;
  int k0, len, G, hk, g_lo, nq, n_it;
};
__device__ __forceinline__ bwd_kv_work bwd_kv_block(const bwd_params &p) {
  bwd_kv_work w;
  const int seq = p.tiles[2 * blockIdx.x];
  w.k0 = p.tiles[2 * blockIdx.x + 1];
  w.s0 = (size_t)p.cu[seq];
  w.G = p.H / p.Hkv, w.len = p.cu[seq + 1] - p.cu[seq];
  const int y = (int)blockIdx.y, np = p.part ? p.np : 1;
  w.hk = y / np;
  const int j = y - w.hk * np;
  w.g_lo = j * w.G / np;
  w.nq = (w.len - w.k0 + 63) / 64, w.n_it = ((j + 1) * w.G / np - w.g_lo) * w.nq;
  return w;
}

/* The dK / dV block's result, rows kr0 / kr1 of the sequence at s0 (len rows), C layout:
 * into the split table (p.part, (T, Hkv np, 2 D): column block `y` = the block's part) or bf16
 * into dqkv (key head hk). dK carries the softmax scale. */
template <int D>
__device__ __forceinline__ void bwd_store_dkdv(const bwd_params &p, const float (&dk)[D / 8][4],
                                               const float (&dv)[D / 8][4], size_t s0, int len, int kr0, int kr1,
                                               int hk, int y) {
  const int t = threadIdx.x & 3;
  const size_t ldp = (size_t)p.Hkv * p.np * 2 * D;
#pragma unroll
  for (int nn = 0; nn < D / 8; ++nn) {
    const int c = nn * 8 + 2 * t;
    if (p.part) {
      float *base = p.part + (size_t)y * 2 * D + c;
      if (kr0 < len) {
        *reinterpret_cast<float2 *>(base + (s0 + kr0) * ldp) = make_float2(dk[nn][0] * p.scale, dk[nn][1] * p.scale);
        *reinterpret_cast<float2 *>(base + (s0 + kr0) * ldp + D) = make_float2(dv[nn][0], dv[nn][1]);
      }
      if (kr1 < len) {
        *reinterpret_cast<float2 *>(base + (s0 + kr1) * ldp) = make_float2(dk[nn][2] * p.scale, dk[nn][3] * p.scale);
        *reinterpret_cast<float2 *>(base + (s0 + kr1) * ldp + D) = make_float2(dv[nn][2], dv[nn][3]);
      }
    } else {
      bf16 *base = p.dqkv + c;
      if (kr0 < len) {
        *reinterpret_cast<uint32_t *>(base + (s0 + kr0) * p.ld + p.k_off + hk * D) =
            pack_bf16(dk[nn][0] * p.scale, dk[nn][1] * p.scale);
        *reinterpret_cast<uint32_t *>(base + (s0 + kr0) * p.ld + p.v_off + hk * D) = pack_bf16(dv[nn][0], dv[nn][1]);
      }
      if (kr1 < len) {
        *reinterpret_cast<uint32_t *>(base + (s0 + kr1) * p.ld + p.k_off + hk * D) =
            pack_bf16(dk[nn][2] * p.scale, dk[nn][3] * p.scale);
        *reinterpret_cast<uint32_t *>(base + (s0 + kr1) * p.ld + p.v_off + hk * D) = pack_bf16(dv[nn][2], dv[nn][3]);
      }
    }
  }
}

/* The dQ block's rows qr0 / qr1 of head h (scaled), bf16 into dqkv. */
template <int D>
__device__ __forceinline__ void bwd_store_dq(const bwd_params &p, const float (&dq)[D / 8][4], size_t s0, int len,
                                             int qr0, int qr1, int h) {
  const int t = threadIdx.x & 3;
#pragma unroll
  for (int nn = 0; nn < D / 8; ++nn) {
    bf16 *base = p.dqkv + p.q_off + h * D + nn * 8 + 2 * t;
    if (qr0 < len) *reinterpret_cast<uint32_t *>(base + (s0 + qr0) * p.ld) = pack_bf16(dq[nn][0] * p.scale, dq[nn][1] * p.scale);
    if (qr1 < len) *reinterpret_cast<uint32_t *>(base + (s0 + qr1) * p.ld) = pack_bf16(dq[nn][2] * p.scale, dq[nn][3] * p.scale);
  }
}

/* Grid (n_tiles, Hkv) of (64-key tile, key head), or (n_tiles, H) of (64-key tile, query head)
 * with p.part (the split table). */
template <int D>
__global__ void __launch_bounds__(128, ATTN_BWD_MINB(D)) k_bwd_dkdv_mma(bwd_params p) {
  typedef mma_bwd_smem<D> L;
  constexpr int LD = L::LD, NT = D / 8;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *sK = reinterpret_cast<bf16 *>(smem), *sV = sK + 64 * LD, *sQ0 = sV + 64 * LD, *sO0 = sQ0 + 2 * 64 * LD;
  float *slse0 = reinterpret_cast<float *>(sO0 + 2 * 64 * LD), *sdel0 = slse0 + 2 * 64;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
  const bwd_kv_work w = bwd_kv_block(p);
  const size_t s0 = w.s0;
  const int k0 = w.k0, len = w.len, G = w.G, hk = w.hk, g_lo = w.g_lo, nq = w.nq, n_it = w.n_it;
  /* iteration it: head hk G + g_lo + it / nq, query tile k0 + 64 (it % nq) */
  auto stage = [&](int it, int buf) {
    const int h = hk * G + g_lo + it / nq, q0 = k0 + 64 * (it % nq);
    cp_rows<D>(sQ0 + buf * 64 * LD, p.qkv, p.ld, s0, p.q_off + h * D, q0, len);
    cp_rows<D>(sO0 + buf * 64 * LD, p.dout, p.ld_o, s0, h * D, q0, len);
    for (int i = threadIdx.x; i < 64; i += 128) {
      const bool ok = q0 + i < len;
      slse0[buf * 64 + i] = ok ? p.lse[(s0 + q0 + i) * p.H + h] : INFINITY;
      sdel0[buf * 64 + i] = ok ? p.delta[(s0 + q0 + i) * p.H + h] : 0.f;
    }
  };
  cp_rows<D>(sK, p.qkv, p.ld, s0, p.k_off + hk * D, k0, len);
  cp_rows<D>(sV, p.qkv, p.ld, s0, p.v_off + hk * D, k0, len);
  stage(0, 0);
  cp_async_commit();
  float dk[NT][4], dv[NT][4];
#pragma unroll
  for (int i = 0; i < NT; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[i][e] = dv[i][e] = 0.f;
  const int kr0 = k0 + warp * 16 + g, kr1 = kr0 + 8;
  const bf16 *wk = sK + warp * 16 * LD, *wv = sV + warp * 16 * LD;
  for (int it = 0; it < n_it; ++it) {
    const int buf = it & 1, q0 = k0 + 64 * (it % nq);
    if (it + 1 < n_it) stage(it + 1, buf ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const bf16 *sQ = sQ0 + buf * 64 * LD, *sO = sO0 + buf * 64 * LD;
    const float *slse = slse0 + buf * 64, *sdel = sdel0 + buf * 64;
    const bool diag = q0 == k0;
    float sc[8][4];
    mma_rows_tileT<D>(sc, wk, sQ); /* S^T: 16 keys x 64 queries */
    uint32_t pa[4][4], da[4][4]; /* P^T, dS^T as A fragments (bf16: P^T's are dS^T's factor too) */
    bwd_pT(pa, sc, slse, p.scale_log2, diag, kr0, kr1, q0);
    mma_regs_tile<D>(dv, pa, sO); /* dV += P^T dO */
    mma_rows_tileT<D>(sc, wv, sO); /* dP^T = V dO^T */
    bwd_dsT(da, pa, sc, sdel);
    mma_regs_tile<D>(dk, da, sQ); /* dK += dS^T Q */
    __syncthreads(); /* this buffer may be refilled by the next iteration's stage */
  }
  cp_async_wait<0>();
  bwd_store_dkdv<D>(p, dk, dv, s0, len, kr0, kr1, hk, blockIdx.y);
}

/* Grid (n_tiles, H): (64-query tile, head). D 64: the warp's Q and dO rows stay in registers
 * as A fragments (AREG: 32 registers; 48 ldmatrix per key tile instead of 56). */
template <int D>
__global__ void __launch_bounds__(128, ATTN_BWD_MINB(D)) k_bwd_dq_mma(bwd_params p) {
  typedef mma_bwd_smem<D> L;
  constexpr int LD = L::LD, NT = D / 8;
  constexpr bool AREG = D == 64;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16 *sQ = reinterpret_cast<bf16 *>(smem), *sO = sQ + 64 * LD, *sK0 = sO + 64 * LD, *sV0 = sK0 + 2 * 64 * LD;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
  const int seq = p.tiles_q[2 * blockIdx.x], q0 = p.tiles_q[2 * blockIdx.x + 1];
  const size_t s0 = (size_t)p.cu[seq];
  const int len = p.cu[seq + 1] - p.cu[seq], h = blockIdx.y, hk = h / (p.H / p.Hkv);
  const int kend = min(len, q0 + 64), n_it = (kend + 63) / 64;
  cp_rows<D>(sQ, p.qkv, p.ld, s0, p.q_off + h * D, q0, len);
  cp_rows<D>(sO, p.dout, p.ld_o, s0, h * D, q0, len);
  cp_rows<D>(sK0, p.qkv, p.ld, s0, p.k_off + hk * D, 0, len);
  cp_rows<D>(sV0, p.qkv, p.ld, s0, p.v_off + hk * D, 0, len);
  cp_async_commit();
  const int qr0 = q0 + warp * 16 + g, qr1 = qr0 + 8;
  const float l0 = qr0 < len ? p.lse[(s0 + qr0) * p.H + h] : INFINITY;
  const float l1 = qr1 < len ? p.lse[(s0 + qr1) * p.H + h] : INFINITY;
  const float d0 = qr0 < len ? p.delta[(s0 + qr0) * p.H + h] : 0.f;
  const float d1 = qr1 < len ? p.delta[(s0 + qr1) * p.H + h] : 0.f;
  float dq[NT][4];
#pragma unroll
  for (int i = 0; i < NT; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.f;
  const bf16 *wq = sQ + warp * 16 * LD, *wo = sO + warp * 16 * LD;
  uint32_t qf[AREG ? D / 16 : 1][4], of[AREG ? D / 16 : 1][4];
  if (AREG) {
    cp_async_wait<0>();
    __syncthreads();
    load_afrags<D>(reinterpret_cast<uint32_t(&)[D / 16][4]>(qf), wq);
    load_afrags<D>(reinterpret_cast<uint32_t(&)[D / 16][4]>(of), wo);
  }
  for (int it = 0; it < n_it; ++it) {
    const int buf = it & 1, n0 = it * 64;
    if (it + 1 < n_it) {
      cp_rows<D>(sK0 + (buf ^ 1) * 64 * LD, p.qkv, p.ld, s0, p.k_off + hk * D, n0 + 64, len);
      cp_rows<D>(sV0 + (buf ^ 1) * 64 * LD, p.qkv, p.ld, s0, p.v_off + hk * D, n0 + 64, len);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    const bf16 *sK = sK0 + buf * 64 * LD, *sV = sV0 + buf * 64 * LD;
    const bool diag = n0 == q0;
    float sc[8][4];
    if (AREG)
      mma_frags_tileT<D>(sc, reinterpret_cast<const uint32_t(&)[D / 16][4]>(qf), sK); /* S: 16 queries x 64 keys */
    else
      mma_rows_tileT<D>(sc, wq, sK);
    uint32_t pa[4][4]; /* P (bf16, as the dK / dV kernel's) */
    bwd_p(pa, sc, l0, l1, p.scale_log2, diag, n0, qr0, qr1);
    if (AREG)
      mma_frags_tileT<D>(sc, reinterpret_cast<const uint32_t(&)[D / 16][4]>(of), sV); /* dP = dO V^T */
    else
      mma_rows_tileT<D>(sc, wo, sV);
    uint32_t da[4][4];
    bwd_ds(da, pa, sc, d0, d1);
    mma_regs_tile<D>(dq, da, sK); /* dQ += dS K */
    __syncthreads();
  }
  cp_async_wait<0>();
  bwd_store_dq<D>(p, dq, s0, len, qr0, qr1, h);
}
