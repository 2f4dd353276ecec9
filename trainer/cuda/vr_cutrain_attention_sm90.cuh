/* vr_cutrain_attention_sm90.cuh: the attention backward on Hopper (sm_90a): wgmma with its
 * operands in shared memory, loaded by TMA (128-byte swizzle) into a ring of stages guarded by
 * mbarriers, FlashAttention-3's operand scheme (Shah et al. 2024) on the split of
 * vr_cutrain_attention_mma.cuh (a dK / dV kernel per key tile, a dQ kernel per query tile: no
 * atomics, deterministic). Included by vr_cutrain_attention.cu inside its anonymous namespace,
 * after vr_cutrain_attention_mma.cuh (bwd_params, the shared element-wise steps bwd_pT / bwd_dsT
 * / bwd_p / bwd_ds and the stores) and model/cuda's vr_cuda_sm90.cuh (mbarriers, TMA, wgmma).
 *
 * Both kernels: one warpgroup (128 threads) a block, a 64-row block tile (warp w rows
 * 16 w .. 16 w + 15, so a thread's accumulator elements are exactly those of the mma.sync
 * kernels' C layout and the same element-wise code and stores apply), the streamed 64-row tile
 * pairs in a ring of STAGES stages that thread 0 refills with TMA once every warp is past the
 * stage (the block-wide barrier that ends each iteration); several blocks a multiprocessor
 * overlap one's softmax with another's products. Per (key tile, query tile) pair:
 *   k_bwd_dkdv_wg: S^T = K Q^T (wgmma m64n64, K and Q from shared memory, K-major both),
 *     P^T (registers, bf16 A fragments), dV += P^T dO (m64nD, A from registers, dO MN-major)
 *     issued with dP^T = V dO^T (m64n64 from shared memory), dS^T, dK += dS^T Q (A registers);
 *   k_bwd_dq_wg: S = Q K^T and dP = dO V^T issued together, P while dP runs, dS,
 *     dQ += dS K (A registers, K MN-major).
 * Variants (wg_bwd_ra, PIPE below): the block's own tiles as register A operands of S / dP, and
 * the pair's last product overlapping the next pair's first; CO (k_bwd_dkdv_wg): S^T and dP^T
 * issued together; MB (wg_bwd_cfg): the dQ kernel at 4 blocks a multiprocessor.
 * Shared memory (1024-byte aligned): a 64 x D tile is D / 64 chunks of 64 rows x 128 bytes
 * (TMA's 64 x 64 boxes, SWIZZLE_128B; the descriptors' 128B layout, SBO 1024 between 8-row
 * groups, LBO 8192 between the chunks of an MN-major operand), as vr_cuda_attention_fa3.cu's.
 * Boxes read whole 64-row tiles: rows past a sequence are the next one's (finite: every row of
 * qkv and dout below T is the forward's), past T zeros (the tensor maps span T rows); P is 0
 * there (lse = inf, or the diagonal tile's causal mask), so they add nothing.
 *
 * Only sm_90a code has the bodies; the host launches them where vr_cutrain_attention_bwd_wgmma_ok. */

/* MB: 4 for the dQ kernel at 4 blocks a multiprocessor (D 64, 2 stages: 4 blocks' shared memory and
 * its 122 registers fit), else 0 (the defaults below). */
template <int D, int MB = 0>
struct wg_bwd_cfg {
  static constexpr int STAGES = MB == 4 || D != 64 ? 2 : 3; /* streamed tile pairs in flight */
  static constexpr int MINB = MB ? MB : D == 64 ? 3 : 2;    /* blocks a multiprocessor (shared memory allows it) */
  static constexpr uint32_t TILE = 64 * D * 2;     /* one 64 x D bf16 tile */
  static constexpr uint32_t PAIR = 2 * TILE;       /* (K, V), (Q, dO) */
  static constexpr uint32_t LSE_OFF = PAIR + STAGES * PAIR; /* dK / dV: lse, delta of 64 queries x 2 buffers */
  static constexpr uint32_t BAR_OFF = LSE_OFF + 4 * 64 * 4;
  static constexpr size_t SMEM = BAR_OFF + 8 * (STAGES + 1) + 1024; /* + alignment slack */
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

template <int N>
__device__ __forceinline__ void f3_pin(float (&r)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+f"(r[i][j])::"memory");
}

/* Thread 0 initialises n mbarriers of one arrival each at bars (8 bytes apart) and prefetches the
 * tensor map; then the block waits for it. */
__device__ __forceinline__ void wg_init_bars(uint32_t bars, int n, const CUtensorMap *tm) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < n; ++s) mb_init(bars + 8 * s, 1);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(tm)) : "memory");
  }
  __syncthreads();
}

/* One 64 x D tile (rows from row, columns from col) of the map into dst, completing on bar. */
template <int D>
__device__ __forceinline__ void wg_tile(uint32_t dst, const CUtensorMap *tm, int col, int row, uint32_t bar) {
#pragma unroll
  for (int c = 0; c < D / 64; ++c) tma_box(dst + c * 64 * 128, tm, col + c * 64, row, bar);
}

/* acc (64 x 64, C layout per warp) = A B^T, A and B 64 x D tiles at a / b (K-major both):
 * D / 16 wgmma m64n64k16, issued, not waited for. */
template <int D>
__device__ __forceinline__ void wg_issue_ss(float (&acc)[8][4], uint32_t a, uint32_t b) {
  uint64_t da[D / 16], db[D / 16];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    da[kk] = f3_desc(a + (kk >> 2) * 64 * 128 + (kk & 3) * 32, 16, 1024);
    db[kk] = f3_desc(b + (kk >> 2) * 64 * 128 + (kk & 3) * 32, 16, 1024);
    asm volatile("" : "+l"(da[kk]), "+l"(db[kk]));
  }
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) wg_ss64(reinterpret_cast<float(&)[32]>(acc), da[kk], db[kk], kk);
}

/* d (+)= A B, m64nDk16, A from registers, B MN-major in shared memory (wg_rs with scale-d from
 * acc: 0 gives d = A B, so an accumulator needs no zeroing instruction before its first product). */
__device__ __forceinline__ void wg_rs_acc(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int acc) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " F3_DREGS32
               ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
               : F3_DOPS32
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}
__device__ __forceinline__ void wg_rs_acc(float (&d)[64], const uint32_t (&a)[4], uint64_t db, int acc) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " F3_DREGS64
               ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
               : F3_DOPS64
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}

/* acc (64 x D) += A B, A 64 x 64 as 4 k16 register fragments, B the 64 x D tile at b
 * (MN-major): 4 wgmma m64nDk16, issued, not waited for. */
template <int D>
__device__ __forceinline__ void wg_issue_rs(float (&acc)[D / 8][4], const uint32_t (&a)[4][4], uint32_t b,
                                            bool set = false) {
  uint64_t db[4];
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    db[kk] = f3_desc(b + kk * 2048, 64 * 128, 1024);
    asm volatile("" : "+l"(db[kk]));
  }
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
    if (kk == 0)
      wg_rs_acc(reinterpret_cast<float(&)[D / 2]>(acc), a[0], db[0], !set);
    else
      wg_rs(reinterpret_cast<float(&)[D / 2]>(acc), a[kk], db[kk]);
}

/* d (+)= A B, m64n64k16, A from registers (mma.sync A fragments), B K-major in shared memory
 * (S^T = K Q^T with K in registers); acc 0: d = A B. */
__device__ __forceinline__ void wg_rs_kmajor(float (&d)[32], const uint32_t (&a)[4], uint64_t db, int acc) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " F3_DREGS32
               ", {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
               : F3_DOPS32
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(acc));
}

/* This warp's 16 rows of the 64 x D tile at tile (swizzled as TMA wrote it) as D / 16 k16 A
 * fragments: ldmatrix row addresses with the 16-byte chunk c of row r at chunk c ^ (r & 7). */
template <int D>
__device__ __forceinline__ void wg_afrags(uint32_t (&f)[D / 16][4], uint32_t tile) {
  const int lane = threadIdx.x & 31, r = (threadIdx.x >> 5 & 3) * 16 + (lane & 15);
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const int c = 2 * (kk & 3) + (lane >> 4);
    const uint32_t a = tile + (kk >> 2) * 64 * 128 + r * 128 + ((c ^ (r & 7)) << 4);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(f[kk][0]), "=r"(f[kk][1]), "=r"(f[kk][2]), "=r"(f[kk][3])
                 : "r"(a));
  }
}

/* As wg_issue_ss with A in registers (wg_afrags). */
template <int D>
__device__ __forceinline__ void wg_issue_rk(float (&acc)[8][4], const uint32_t (&a)[D / 16][4], uint32_t b) {
  uint64_t db[D / 16];
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    db[kk] = f3_desc(b + (kk >> 2) * 64 * 128 + (kk & 3) * 32, 16, 1024);
    asm volatile("" : "+l"(db[kk]));
  }
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) wg_rs_kmajor(reinterpret_cast<float(&)[32]>(acc), a[kk], db[kk], kk);
}

#endif

/* RA: the block's own tiles (K and V here, Q and dO in the dQ kernel) as register A fragments
 * for the S / dP products (half their shared-memory reads), else both operands from shared
 * memory; wg_bwd_ra's choice per kernel and head dim. PIPE: the last product of a pair (dK, dQ)
 * is left in flight while the next pair's S is issued (the ring's stage is released by a barrier
 * once that S has been waited for), its accumulator set by the first pair's products rather than
 * zeroed (a zeroing instruction on an accumulator that is in flight across the loop makes ptxas
 * serialise every wgmma); else every product is waited for within its pair. */
template <int D>
struct wg_bwd_ra {
  /* D 64: off in both kernels: with it the kernel test's D 64 shapes failed on the H200 (relative
   * error about 0.3 in dq, dk and dv, the same with and without PIPE) while the same code passed
   * at D 128 (dQ kernel); the cause is not found yet (docs/benchmarks.md). K / V at D 128: 64 more
   * registers than a thread has. */
  static constexpr bool kv = false;
  static constexpr bool q = D == 128;
};

/* Grid (n_tiles, Hkv) of (64-key tile, key head), or (n_tiles, H) with p.part, as k_bwd_dkdv_mma.
 * tq: the map of qkv (T rows x ld), to: of dout (T rows x ld_o). CO (co-issued, wg_bwd_co): S^T and
 * dP^T issued together (both need only the pair's tiles, as the dQ kernel's S and dP), P^T formed
 * while dP^T runs and dS^T while dV runs; else dP^T is issued with dV, after P^T. */
template <int D, bool RA, bool PIPE, bool CO>
__global__ void __launch_bounds__(128, wg_bwd_cfg<D>::MINB)
    k_bwd_dkdv_wg(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap to, bwd_params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  typedef wg_bwd_cfg<D> C;
  constexpr int S = C::STAGES, NT = D / 8;
  extern __shared__ unsigned char wg_smem_raw[];
  const uint32_t raw = smem_u32(wg_smem_raw), base = (raw + 1023u) & ~1023u;
  const uint32_t sK = base, sV = base + C::TILE, sRing = base + C::PAIR, bars = base + C::BAR_OFF;
  float *slse0 = reinterpret_cast<float *>(wg_smem_raw + (base - raw) + C::LSE_OFF), *sdel0 = slse0 + 2 * 64;
  const uint32_t own = bars + 8 * S; /* full[s] = bars + 8 s; own: K and V */
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
  const bwd_kv_work w = bwd_kv_block(p);
  const size_t s0 = w.s0;
  const int k0 = w.k0, len = w.len, G = w.G, hk = w.hk, g_lo = w.g_lo, nq = w.nq, n_it = w.n_it;
  /* iteration it: head hk G + g_lo + it / nq, query tile k0 + 64 (it % nq), stage it % S */
  auto load = [&](int it) {
    const int st = it % S, h = hk * G + g_lo + it / nq, row = (int)s0 + k0 + 64 * (it % nq);
    const uint32_t bar = bars + 8 * st, dst = sRing + st * C::PAIR;
    mb_expect_tx(bar, C::PAIR);
    wg_tile<D>(dst, &tq, p.q_off + h * D, row, bar);
    wg_tile<D>(dst + C::TILE, &to, h * D, row, bar);
  };
  float nl = INFINITY, nd = 0.f; /* threads < 64: query threadIdx.x's lse / delta of the next pair */
  auto lse_load = [&](int it) {
    const int h = hk * G + g_lo + it / nq, q = k0 + 64 * (it % nq) + (int)threadIdx.x;
    nl = q < len ? p.lse[(s0 + q) * p.H + h] : INFINITY;
    nd = q < len ? p.delta[(s0 + q) * p.H + h] : 0.f;
  };
  wg_init_bars(bars, S + 1, &tq);
  if (threadIdx.x == 0) {
    mb_expect_tx(own, C::PAIR);
    wg_tile<D>(sK, &tq, p.k_off + hk * D, (int)s0 + k0, own);
    wg_tile<D>(sV, &tq, p.v_off + hk * D, (int)s0 + k0, own);
    for (int i = 0; i < S - 1 && i < n_it; ++i) load(i);
  }
  if (threadIdx.x < 64) {
    lse_load(0);
    slse0[threadIdx.x] = nl, sdel0[threadIdx.x] = nd;
  }
  __syncthreads();
  float dk[NT][4], dv[NT][4]; /* PIPE: set by the first pair's products (no zeroing instructions) */
  if (!PIPE)
#pragma unroll
    for (int i = 0; i < NT; ++i)
#pragma unroll
      for (int e = 0; e < 4; ++e) dk[i][e] = dv[i][e] = 0.f;
  const int kr0 = k0 + warp * 16 + g, kr1 = kr0 + 8;
  mb_wait(own, 0);
  uint32_t kf[RA ? D / 16 : 1][4], vf[RA ? D / 16 : 1][4];
  if (RA) {
    wg_afrags<D>(reinterpret_cast<uint32_t(&)[D / 16][4]>(kf), sK);
    wg_afrags<D>(reinterpret_cast<uint32_t(&)[D / 16][4]>(vf), sV);
  }
  uint32_t da[4][4]; /* dS^T: with PIPE, the A operand of a dK product still in flight at the loop's top */
  for (int it = 0; it < n_it; ++it) {
    const int st = it % S, buf = it & 1, q0 = k0 + 64 * (it % nq);
    /* !PIPE: stage (it - 1) % S, every warp finished with it at the barrier ending iteration it - 1 */
    if (!PIPE && threadIdx.x == 0 && it + S - 1 < n_it) load(it + S - 1);
    if (threadIdx.x < 64 && it + 1 < n_it) lse_load(it + 1);
    mb_wait(bars + 8 * st, (uint32_t)(it / S) & 1);
    const uint32_t sQ = sRing + st * C::PAIR, sO = sQ + C::TILE;
    float sc[8][4], dp[8][4]; /* dp: CO's dP^T (else dP^T reuses sc and dp is unused) */
    uint32_t pa[4][4];
    if (!PIPE) {
      f3_pin(sc);
      if constexpr (CO) f3_pin(dp);
    }
    f3_fence();
    if (RA)
      wg_issue_rk<D>(sc, reinterpret_cast<const uint32_t(&)[D / 16][4]>(kf), sQ); /* S^T = K Q^T: 64 keys x 64 queries */
    else
      wg_issue_ss<D>(sc, sK, sQ);
    f3_commit();
    if constexpr (CO) {
      if (RA)
        wg_issue_rk<D>(dp, reinterpret_cast<const uint32_t(&)[D / 16][4]>(vf), sO); /* dP^T = V dO^T */
      else
        wg_issue_ss<D>(dp, sV, sO);
      f3_commit();
      f3_wait<1>(); /* S^T; PIPE: also the previous pair's dV and dK */
    } else
      f3_wait<0>(); /* PIPE: also the previous pair's dK */
    f3_pin(sc);
    if (PIPE) {
      f3_pin(dk);
      f3_pin(dv);
      f3_pin(da);
      __syncthreads(); /* every warp is past the previous pair: its stage and lse buffer are free */
      if (threadIdx.x == 0 && it + S - 1 < n_it) load(it + S - 1);
      if (threadIdx.x < 64 && it + 1 < n_it) slse0[(buf ^ 1) * 64 + threadIdx.x] = nl, sdel0[(buf ^ 1) * 64 + threadIdx.x] = nd;
    }
    bwd_pT(pa, sc, slse0 + buf * 64, p.scale_log2, q0 == k0, kr0, kr1, q0);
    f3_pin(pa);
    f3_pin(dv);
    f3_fence();
    wg_issue_rs<D>(dv, pa, sO, PIPE && it == 0); /* dV += P^T dO */
    if constexpr (!CO) {
      if (RA)
        wg_issue_rk<D>(sc, reinterpret_cast<const uint32_t(&)[D / 16][4]>(vf), sO); /* dP^T = V dO^T */
      else
        wg_issue_ss<D>(sc, sV, sO);
    }
    f3_commit();
    if constexpr (CO) {
      f3_wait<1>(); /* dP^T; dV may still run: its A operand pa is only read here */
      f3_pin(dp);
      bwd_dsT(da, pa, dp, sdel0 + buf * 64);
    } else {
      f3_wait<0>();
      f3_pin(sc);
      f3_pin(dv);
      f3_pin(pa);
      bwd_dsT(da, pa, sc, sdel0 + buf * 64);
    }
    f3_pin(da);
    f3_pin(dk);
    f3_fence();
    wg_issue_rs<D>(dk, da, sQ, PIPE && it == 0); /* dK += dS^T Q; PIPE: waited for under the next pair's S^T */
    f3_commit();
    if (!PIPE) {
      f3_wait<0>();
      f3_pin(dk);
      f3_pin(dv);
      f3_pin(da);
      if (threadIdx.x < 64 && it + 1 < n_it) slse0[(buf ^ 1) * 64 + threadIdx.x] = nl, sdel0[(buf ^ 1) * 64 + threadIdx.x] = nd;
      __syncthreads();
    }
  }
  if (PIPE) {
    f3_wait<0>();
    f3_pin(dk);
    f3_pin(dv);
  }
  bwd_store_dkdv<D>(p, dk, dv, s0, len, kr0, kr1, hk, blockIdx.y);
#endif
}

/* Grid (n_tiles, H): (64-query tile, head), as k_bwd_dq_mma; MB as wg_bwd_cfg's. */
template <int D, bool RA, bool PIPE, int MB>
__global__ void __launch_bounds__(128, wg_bwd_cfg<D, MB>::MINB)
    k_bwd_dq_wg(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap to, bwd_params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  typedef wg_bwd_cfg<D, MB> C;
  constexpr int S = C::STAGES, NT = D / 8;
  extern __shared__ unsigned char wg_smem_raw[];
  const uint32_t base = (smem_u32(wg_smem_raw) + 1023u) & ~1023u;
  const uint32_t sQ = base, sO = base + C::TILE, sRing = base + C::PAIR, bars = base + C::BAR_OFF;
  const uint32_t own = bars + 8 * S; /* full[s] = bars + 8 s; own: Q and dO */
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
  const int seq = p.tiles_q[2 * blockIdx.x], q0 = p.tiles_q[2 * blockIdx.x + 1];
  const size_t s0 = (size_t)p.cu[seq];
  const int len = p.cu[seq + 1] - p.cu[seq], h = blockIdx.y, hk = h / (p.H / p.Hkv);
  const int kend = min(len, q0 + 64), n_it = (kend + 63) / 64;
  auto load = [&](int it) { /* key tile it into stage it % S */
    const int st = it % S, row = (int)s0 + 64 * it;
    const uint32_t bar = bars + 8 * st, dst = sRing + st * C::PAIR;
    mb_expect_tx(bar, C::PAIR);
    wg_tile<D>(dst, &tq, p.k_off + hk * D, row, bar);
    wg_tile<D>(dst + C::TILE, &tq, p.v_off + hk * D, row, bar);
  };
  wg_init_bars(bars, S + 1, &tq);
  if (threadIdx.x == 0) {
    mb_expect_tx(own, C::PAIR);
    wg_tile<D>(sQ, &tq, p.q_off + h * D, (int)s0 + q0, own);
    wg_tile<D>(sO, &to, h * D, (int)s0 + q0, own);
    for (int i = 0; i < S - 1 && i < n_it; ++i) load(i);
  }
  const int qr0 = q0 + warp * 16 + g, qr1 = qr0 + 8;
  const float l0 = qr0 < len ? p.lse[(s0 + qr0) * p.H + h] : INFINITY;
  const float l1 = qr1 < len ? p.lse[(s0 + qr1) * p.H + h] : INFINITY;
  const float d0 = qr0 < len ? p.delta[(s0 + qr0) * p.H + h] : 0.f;
  const float d1 = qr1 < len ? p.delta[(s0 + qr1) * p.H + h] : 0.f;
  float dq[NT][4]; /* PIPE: set by the first tile's product (no zeroing instructions) */
  if (!PIPE)
#pragma unroll
    for (int i = 0; i < NT; ++i) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.f;
  mb_wait(own, 0);
  uint32_t qf[RA ? D / 16 : 1][4], of[RA ? D / 16 : 1][4];
  if (RA) {
    wg_afrags<D>(reinterpret_cast<uint32_t(&)[D / 16][4]>(qf), sQ);
    wg_afrags<D>(reinterpret_cast<uint32_t(&)[D / 16][4]>(of), sO);
  }
  uint32_t da[4][4]; /* dS: with PIPE, the A operand of a dQ product still in flight at the loop's top */
  for (int it = 0; it < n_it; ++it) {
    const int st = it % S, n0 = it * 64;
    if (!PIPE && threadIdx.x == 0 && it + S - 1 < n_it) load(it + S - 1);
    mb_wait(bars + 8 * st, (uint32_t)(it / S) & 1);
    const uint32_t sK = sRing + st * C::PAIR, sV = sK + C::TILE;
    float sc[8][4], dp[8][4];
    uint32_t pa[4][4];
    if (!PIPE) {
      f3_pin(sc);
      f3_pin(dp);
    }
    f3_fence();
    if (RA)
      wg_issue_rk<D>(sc, reinterpret_cast<const uint32_t(&)[D / 16][4]>(qf), sK); /* S = Q K^T: 64 queries x 64 keys */
    else
      wg_issue_ss<D>(sc, sQ, sK);
    f3_commit();
    if (RA)
      wg_issue_rk<D>(dp, reinterpret_cast<const uint32_t(&)[D / 16][4]>(of), sV); /* dP = dO V^T */
    else
      wg_issue_ss<D>(dp, sO, sV);
    f3_commit();
    f3_wait<1>(); /* S; PIPE: also the previous tile's dQ */
    f3_pin(sc);
    if (PIPE) {
      f3_pin(dq);
      f3_pin(da);
      __syncthreads(); /* every warp is past the previous tile: its stage is free */
      if (threadIdx.x == 0 && it + S - 1 < n_it) load(it + S - 1);
    }
    bwd_p(pa, sc, l0, l1, p.scale_log2, n0 == q0, n0, qr0, qr1);
    f3_wait<0>();
    f3_pin(dp);
    bwd_ds(da, pa, dp, d0, d1);
    f3_pin(da);
    f3_pin(dq);
    f3_fence();
    wg_issue_rs<D>(dq, da, sK, PIPE && it == 0); /* dQ += dS K; PIPE: waited for under the next tile's S */
    f3_commit();
    if (!PIPE) {
      f3_wait<0>();
      f3_pin(dq);
      f3_pin(da);
      __syncthreads();
    }
  }
  if (PIPE) {
    f3_wait<0>();
    f3_pin(dq);
  }
  bwd_store_dq<D>(p, dq, s0, len, qr0, qr1, h);
#endif
}
