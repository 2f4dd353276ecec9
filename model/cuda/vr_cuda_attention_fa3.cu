/* vr_cuda_attention_fa3.cu: the Hopper (sm_90a) attention forward, FlashAttention-3 style
 * (Shah et al. 2024): one block of three (or four) warpgroups per SM, a producer warpgroup whose one
 * thread issues TMA loads (cp.async.bulk.tensor, 128-byte swizzle) into a ring of shared-memory
 * stages guarded by mbarriers, and two consumer warpgroups of 64 query rows each that run
 * S = Q K^T (wgmma m64n128k16, both operands in shared memory), the online softmax in
 * registers, and O += P V (wgmma m64nDk16, P from registers). At head_dim 64 a launch may take
 * three consumer warpgroups instead (VR_CUDA_FA3_C3: 192-row tiles, four warpgroups, 160
 * registers a consumer thread after setmaxnreg; FA3's own D64 configuration: more warps to
 * hide the softmax's latency, each K / V tile read by three). Within a consumer the matrix
 * products of key tile it + 1 are issued before the softmax of tile it waits for them, so the
 * softmax overlaps the tensor cores (the paper's intra-warpgroup pipelining); at head_dim 128
 * the two consumers also take turns issuing them (ping-pong: one's softmax under the other's
 * products), at 64 that measured slower and they issue unordered.
 *
 * Schedules: a (G, H) grid whose blocks loop over tiles x + k G of head y (G = the tile count:
 * one block per tile), or the persistent one (VR_CUDA_FA3_PERSIST; FlashAttention-3's persistent
 * kernel): one block per multiprocessor looping over the (tile, head) items in a snake, Q
 * double-buffered and the K / V ring running on across items, so the producer loads item i + 1
 * while the consumers finish item i (its last P V, the O and lse stores); no block start, barrier
 * initialisation or first load per item (f3_item).
 *
 * Tiles: 64 x consumers query rows (vr_cuda_attention_fa3_rows: the tile list's) x 128 keys;
 * head dims 64 and 128;
 * causal, bidirectional, sliding window, GQA, variable length (the tile list and cu of
 * vr_cuda_attention), optional lse. One tensor map covers the whole qkv buffer (rows x ld
 * bf16): Q, K and V tiles are 64 x 64 boxes of it at their column offsets. A box that runs
 * past a sequence reads whatever follows in qkv (masked for K, zeroed in shared memory for V
 * before P V, never written out for Q), past `rows` zeros (TMA's out-of-bounds fill): rows
 * must not exceed qkv's allocation and must cover every sequence (vr_cuda_attention's
 * rows_hint, the batch's rows).
 *
 * Shared memory (1024-byte aligned): a tile of R rows x D dims is D / 64 column chunks of R
 * rows x 128 bytes, each 8-row group a 1024-byte swizzle atom (TMA's SWIZZLE_128B, the
 * wgmma descriptors' 128B layout). Q (K-major A), K (K-major B), V (MN-major B, transposed):
 * LBO between the 64-dim chunks, SBO 1024 between 8-row groups.
 *
 * Only sm_90a code has the body (wgmma, setmaxnreg); the host launches it only where
 * vr_cuda_attention_fa3_ok says the build carries it and the device is compute 9.0. */
#include "vr_cuda_attention_fa.cuh"
#include "vr_cuda_sm90.cuh"

namespace {

constexpr int F3_BN = 128;

/* One configuration: NC consumer warpgroups of 64 query rows (ROWS = 64 NC query rows a tile) and the
 * producer warpgroup; QB Q buffers (2: the persistent schedule's, the next tile's Q loads while
 * the consumers finish this one). */
template <int D, int NC, int QB = 1>
struct f3_cfg {
  static_assert(NC == 2 || (NC == 3 && D == 64), "three consumers only at head_dim 64");
  static constexpr int ROWS = 64 * NC, THREADS = 128 * (NC + 1);
  static constexpr int STAGES = D == 64 ? 4 : 2;  /* K and V stages each */
  static constexpr uint32_t Q_BYTES = ROWS * D * 2; /* one Q tile */
  static constexpr uint32_t KV_BYTES = F3_BN * D * 2;
  static constexpr uint32_t BAR_OFF = QB * Q_BYTES + 2 * STAGES * KV_BYTES;
  static constexpr size_t SMEM = BAR_OFF + 8 * (2 * QB + 4 * STAGES) + 1024; /* + alignment slack */
  static_assert(SMEM <= 227 * 1024, "shared memory of one block");
};
/* The library's default configuration: two consumers on 128-row tiles at both head dims. Three
 * at head_dim 64 (VR_CUDA_FA3_C3, FA3's own D64 shape) were faster at 16k tokens and slower on
 * packed short sequences (docs/benchmarks.md, "Issue 24: FA3 at head_dim 64"): the launchers
 * pass that flag for batches whose longest sequence is long (vr_cuda_attention_maxlen). */
constexpr int f3_default_nc(int /* D */) { return 2; }
static int f3_nc(int D, int flags) {
  return flags & VR_CUDA_FA3_C2 ? 2 : flags & VR_CUDA_FA3_C3 ? 3 : f3_default_nc(D);
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

/* Mask and online softmax of one 128-key tile (keys from n0) for this thread's two query rows
 * qr0 / qr1 in the wgmma m64n128 accumulator layout: sc[4 j + e] is row qr0 (e < 2) or qr1,
 * key n0 + 8 j + 2 t + (e & 1). As softmax_rows16 over 16 n-tiles, but in place: sc becomes
 * the unnormalised probabilities (f3_pack turns them into P V's A fragments once the previous
 * P V is complete: A registers written while a wgmma is in flight make ptxas serialise the
 * pipeline), al0 / al1 the factors O's rows must be scaled by. */
/* 2^x for x <= 0 on the FMA pipe instead of the MUFU unit (FlashAttention-4's trick; the
 * MUFU's 16 exp2 a clock per multiprocessor match the tensor cores' rate at head_dim 64):
 * x = j + f with j = round(x) (the 1.5 * 2^23 shift), 2^f on [-1/2, 1/2] by a cubic through
 * the Chebyshev nodes (relative error <= 1.0e-4, under bf16's 3.9e-3 that P is rounded to),
 * 2^j added to the exponent bits. x is clamped at -125 (2^-125 for masked scores' -inf:
 * nothing next to any unmasked score, and the result stays a normal float). */
__device__ __forceinline__ float f3_ex2_poly(float x) {
  x = fmaxf(x, -125.f);
  const float t = x + 12582912.f, f = x - (t - 12582912.f);
  const float q = fmaf(fmaf(fmaf(0.0558382829f, f, 0.242639479f), f, 0.693136734f), f, 0.999924557f);
  return __uint_as_float(__float_as_uint(q) + (__float_as_uint(t) << 23));
}

/* POLY: the n-tiles j = 3 mod 4 (a quarter of the scores) through f3_ex2_poly, the rest on the
 * MUFU unit. */
template <bool POLY>
__device__ __forceinline__ void f3_softmax(const attn_params &p, float (&sc)[64], int n0, int len, bool need_mask,
                                           int qr0, int qr1, float &m0, float &m1, float &l0, float &l1, float &al0,
                                           float &al1) {
  const int t = threadIdx.x & 3;
  if (need_mask) {
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int kp = n0 + j * 8 + 2 * t + (e & 1), qp = e < 2 ? qr0 : qr1;
        bool ok = kp < len;
        if (p.causal) ok = ok && kp <= qp;
        if (p.window > 0) ok = ok && qp - kp < p.window && kp - qp < p.window;
        if (!ok) sc[4 * j + e] = -INFINITY;
      }
  }
  float x0[8], x1[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    x0[j] = fmaxf(fmaxf(sc[8 * j], sc[8 * j + 1]), fmaxf(sc[8 * j + 4], sc[8 * j + 5]));
    x1[j] = fmaxf(fmaxf(sc[8 * j + 2], sc[8 * j + 3]), fmaxf(sc[8 * j + 6], sc[8 * j + 7]));
  }
  const float mx0 = quad_max(tree8(x0, op_max())), mx1 = quad_max(tree8(x1, op_max()));
  /* scale > 0, so max(raw) * scale is the max of the scaled scores */
  const float mn0 = fmaxf(m0, mx0 * p.scale_log2), mn1 = fmaxf(m1, mx1 * p.scale_log2);
  const float mu0 = mn0 == -INFINITY ? 0.f : mn0, mu1 = mn1 == -INFINITY ? 0.f : mn1;
  al0 = ex2_approx(m0 - mu0), al1 = ex2_approx(m1 - mu1);
  m0 = mn0, m1 = mn1;
#pragma unroll
  for (int i = 0; i < 64; ++i) {
    const float x = fmaf(sc[i], p.scale_log2, (i & 2) ? -mu1 : -mu0);
    sc[i] = POLY && ((i >> 2) & 3) == 3 ? f3_ex2_poly(x) : ex2_approx(x);
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    x0[j] = (sc[8 * j] + sc[8 * j + 1]) + (sc[8 * j + 4] + sc[8 * j + 5]);
    x1[j] = (sc[8 * j + 2] + sc[8 * j + 3]) + (sc[8 * j + 6] + sc[8 * j + 7]);
  }
  l0 = l0 * al0 + quad_sum(tree8(x0, op_add()));
  l1 = l1 * al1 + quad_sum(tree8(x1, op_add()));
}

/* P (sc after f3_softmax) as the A fragments of P V's 8 k-steps of 16 keys: n-tiles 2 kk and
 * 2 kk + 1 of the accumulator layout are the mma.sync A layout of k-step kk. */
__device__ __forceinline__ void f3_pack(const float (&sc)[64], uint32_t (&pa)[8][4]) {
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    pa[j >> 1][(j & 1) * 2 + 0] = pack_bf16(sc[4 * j], sc[4 * j + 1]);
    pa[j >> 1][(j & 1) * 2 + 1] = pack_bf16(sc[4 * j + 2], sc[4 * j + 3]);
  }
}
/* The span of tile `tile`: rows s0 + q0 .. of a sequence of len rows, key tiles from kbeg. */
struct f3_span {
  int s0, q0, len, kbeg, nkv;
};
__device__ __forceinline__ f3_span f3_tile(const attn_params &p, int tile, int bm) {
  f3_span w;
  const int seq = p.tiles[2 * tile];
  w.q0 = p.tiles[2 * tile + 1];
  w.s0 = p.cu[seq];
  w.len = p.cu[seq + 1] - w.s0;
  const int kend = p.causal ? min(w.len, w.q0 + bm) : w.len;
  w.kbeg = p.window > 0 ? max(0, w.q0 - p.window + 1) / F3_BN * F3_BN : 0;
  w.nkv = (kend - w.kbeg + F3_BN - 1) / F3_BN;
  return w;
}

/* The k-th work item (tile, head) of this block; false past its last. PS (the persistent
 * schedule, a 1-D grid of at most one block per multiprocessor): item idx of the n_tiles x H
 * list, heads-inner (tile idx / H, head idx % H: the heaviest tiles of every head first) or
 * heads-outer (head idx / n_tiles, tile idx % n_tiles), block b taking idx = k G + b in even
 * rounds k and k G + G - 1 - b in odd ones (a snake over the list ordered by work: the blocks'
 * totals even out). Otherwise the (G, H) grid: block (x, y) takes head y, tiles x + k G;
 * heads-inner: the block of linear index x + G y takes head (x + G y) % H, tiles (x + G y) / H
 * + k G. Every item goes to one block alone whatever the grid, so the output does not depend
 * on it. */
struct f3_sched {
  int tile0, h0; /* the (G, H) grid's: this block's first tile and its head */
};
__device__ __forceinline__ f3_sched f3_sched_make(int H, int head_inner) {
  const int lin = blockIdx.x + gridDim.x * blockIdx.y;
  return {head_inner ? lin / H : (int)blockIdx.x, head_inner ? lin % H : (int)blockIdx.y};
}
template <bool PS>
__device__ __forceinline__ bool f3_item(const f3_sched &sc, int k, int n_tiles, int H, int head_inner, int &tile,
                                        int &h) {
  if (PS) {
    const int G = gridDim.x, b = blockIdx.x, idx = k * G + ((k & 1) ? G - 1 - b : b);
    if (idx >= n_tiles * H) return false;
    tile = head_inner ? idx / H : idx % n_tiles;
    h = head_inner ? idx % H : idx / n_tiles;
    return true;
  }
  h = sc.h0;
  tile = sc.tile0 + k * gridDim.x;
  return tile < n_tiles;
}

#endif

/* PS: the persistent schedule (f3_item; 1-D grid, Q double-buffered: the producer loads the next
 * item's Q and K / V while the consumers finish this one, its stores and the next item's loads
 * overlap). */
template <int D, int NC, bool PP, bool POLY, bool PS>
__global__ void __launch_bounds__(128 * (NC + 1), 1)
    k_attn_fa3(const __grid_constant__ CUtensorMap tm, attn_params p, int head_inner) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int QB = PS ? 2 : 1;
  typedef f3_cfg<D, NC, QB> C;
  static_assert(!PP || NC == 2, "ping-pong takes two consumers");
  constexpr int S = C::STAGES, NO = D / 2, QR = C::ROWS; /* NO: O accumulator floats per thread */
  /* registers per thread after setmaxnreg, within the multiprocessor's 64 K */
  constexpr int REG_PRODUCER = 24, REG_CONSUMER = NC == 2 ? 240 : 160;
  extern __shared__ unsigned char f3_smem_raw[];
  const uint32_t base = (smem_u32(f3_smem_raw) + 1023u) & ~1023u;
  const uint32_t sQ = base, sK = base + QB * C::Q_BYTES, sV = sK + S * C::KV_BYTES, bars = base + C::BAR_OFF;
  /* barriers: q_full[QB], q_empty[QB], k_full[S], k_empty[S], v_full[S], v_empty[S]; item k's Q
   * in buffer k % QB, whose barriers complete phase k / QB for it */
  const uint32_t q_full = bars, q_empty = bars + 8 * QB, k_full = bars + 16 * QB, k_empty = k_full + 8 * S,
                 v_full = k_empty + 8 * S, v_empty = v_full + 8 * S;
  const int n_tiles = p.meta[VR_CUDA_META_N_TILES];
  const f3_sched sched = f3_sched_make(p.H, head_inner);
  const int wg = threadIdx.x >> 7;
  if (threadIdx.x == 0) {
    for (int b = 0; b < QB; ++b) {
      mb_init(q_full + 8 * b, 1);
      mb_init(q_empty + 8 * b, 4 * NC); /* every consumer warp arrives on the empty barriers */
    }
    for (int s = 0; s < S; ++s) {
      mb_init(k_full + 8 * s, 1);
      mb_init(k_empty + 8 * s, 4 * NC);
      mb_init(v_full + 8 * s, 1);
      mb_init(v_empty + 8 * s, 4 * NC);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (wg == 0) { /* producer: one thread issues every load */
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(REG_PRODUCER) : "memory");
    if (threadIdx.x == 0) {
      asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&tm)) : "memory");
      int kv = 0, tile, h;
      for (int tc = 0; f3_item<PS>(sched, tc, n_tiles, p.H, head_inner, tile, h); ++tc) {
        const f3_span w = f3_tile(p, tile, QR);
        const int hk = h / (p.H / p.Hkv), qb = tc % QB;
        const uint32_t qf = q_full + 8 * qb, qd = sQ + qb * C::Q_BYTES;
        mb_wait(q_empty + 8 * qb, ((tc / QB) & 1) ^ 1);
        mb_expect_tx(qf, C::Q_BYTES);
#pragma unroll
        for (int c = 0; c < D / 64; ++c)
#pragma unroll
          for (int r = 0; r < NC; ++r)
            tma_box(qd + (c * QR + r * 64) * 128, &tm, p.q_off + h * D + c * 64, w.s0 + w.q0 + r * 64, qf);
        for (int it = 0; it < w.nkv; ++it, ++kv) {
          const int st = kv % S;
          const uint32_t ph = (kv / S) & 1;
          const int row = w.s0 + w.kbeg + it * F3_BN;
          mb_wait(k_empty + 8 * st, ph ^ 1);
          mb_expect_tx(k_full + 8 * st, C::KV_BYTES);
#pragma unroll
          for (int c = 0; c < D / 64; ++c)
#pragma unroll
            for (int r = 0; r < F3_BN / 64; ++r)
              tma_box(sK + st * C::KV_BYTES + (c * F3_BN + r * 64) * 128, &tm, p.k_off + hk * D + c * 64, row + r * 64,
                      k_full + 8 * st);
          mb_wait(v_empty + 8 * st, ph ^ 1);
          mb_expect_tx(v_full + 8 * st, C::KV_BYTES);
#pragma unroll
          for (int c = 0; c < D / 64; ++c)
#pragma unroll
            for (int r = 0; r < F3_BN / 64; ++r)
              tma_box(sV + st * C::KV_BYTES + (c * F3_BN + r * 64) * 128, &tm, p.v_off + hk * D + c * 64, row + r * 64,
                      v_full + 8 * st);
        }
      }
    }
    return;
  }

  /* consumers: warpgroup cw owns query rows 64 cw .. 64 cw + 63 of each tile */
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(REG_CONSUMER) : "memory");
  const int cw = wg - 1, lane = threadIdx.x & 31, warp = (threadIdx.x >> 5) & 3, g = lane >> 2, t = lane & 3;
  if (PP && cw == 1) asm volatile("bar.arrive 2, 256;\n" ::: "memory"); /* consumer 0 goes first */
  int kv = 0, tile, h;
  for (int tc = 0; f3_item<PS>(sched, tc, n_tiles, p.H, head_inner, tile, h); ++tc) {
    const f3_span w = f3_tile(p, tile, QR);
    const int qb = tc % QB;
    const int wr0 = w.q0 + cw * 64 + warp * 16; /* this warp's first query row */
    const int qr0 = wr0 + g, qr1 = qr0 + 8;
    float o[NO], sc[64];
    uint32_t pa[8][4]; /* P of the previous key tile, the A operand of its P V */
#pragma unroll
    for (int i = 0; i < NO; ++i) o[i] = 0.f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f, al0, al1;
    mb_wait(q_full + 8 * qb, (tc / QB) & 1);
    const uint32_t q_at = sQ + qb * C::Q_BYTES + cw * 64 * 128;
    /* S = Q K^T of stage st: D / 16 k-steps of 16 dims (32 bytes inside a 128-byte row) */
    /* descriptors are computed and pinned before the wgmma batch: an address computed between
     * two wgmmas of one batch makes ptxas serialise them */
    auto issue_qk = [&](int st) {
      const uint32_t k_at = sK + st * C::KV_BYTES;
      uint64_t da[D / 16], db[D / 16];
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        da[kk] = f3_desc(q_at + (kk >> 2) * QR * 128 + (kk & 3) * 32, 16, 1024);
        db[kk] = f3_desc(k_at + (kk >> 2) * F3_BN * 128 + (kk & 3) * 32, 16, 1024);
        asm volatile("" : "+l"(da[kk]), "+l"(db[kk]));
      }
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) wg_ss128(sc, da[kk], db[kk], kk);
    };
    /* O += P V of stage st: 8 k-steps of 16 keys (2048 bytes); N spans the D / 64 chunks */
    auto issue_pv = [&](int st, const uint32_t(&pp)[8][4]) {
      const uint32_t v_at = sV + st * C::KV_BYTES;
      uint64_t dv[8];
#pragma unroll
      for (int kk = 0; kk < 8; ++kk) {
        dv[kk] = f3_desc(v_at + kk * 2048, F3_BN * 128, 1024);
        asm volatile("" : "+l"(dv[kk]));
      }
#pragma unroll
      for (int kk = 0; kk < 8; ++kk) wg_rs(o, pp[kk], dv[kk]);
    };
    auto release = [&](uint32_t bar) {
      __syncwarp();
      if (lane == 0) mb_arrive(bar);
    };
    /* PP: the two consumers take turns issuing their matrix products (named barriers 2 + cw:
     * wait for mine, then let the other go), so one's softmax runs under the other's wgmma
     * (the paper's ping-pong schedule); both issue the same number of batches per tile. */
    auto turn_begin = [&] {
      if (PP) asm volatile("bar.sync %0, 256;\n" ::"r"(2 + cw) : "memory");
    };
    auto turn_end = [&] {
      if (PP) asm volatile("bar.arrive %0, 256;\n" ::"r"(2 + (cw ^ 1)) : "memory");
    };
    auto need_mask = [&](int n0) {
      return n0 + F3_BN > w.len || (p.causal && n0 + F3_BN - 1 > wr0) || p.window > 0;
    };
    /* key tile 0: S only (O is still zero) */
    {
      const int st = kv % S;
      mb_wait(k_full + 8 * st, (kv / S) & 1);
      f3_pin(sc);
      turn_begin();
      f3_fence();
      issue_qk(st);
      f3_commit();
      turn_end();
      f3_wait<0>();
      f3_pin(sc);
      release(k_empty + 8 * st);
      const int n0 = w.kbeg;
      f3_softmax<POLY>(p, sc, n0, w.len, need_mask(n0), qr0, qr1, m0, m1, l0, l1, al0, al1);
      f3_pack(sc, pa);
    }
    for (int it = 1; it < w.nkv; ++it) {
      const int j = kv + it, st = j % S, sp = (j - 1) % S;
      mb_wait(k_full + 8 * st, (j / S) & 1);
      mb_wait(v_full + 8 * sp, ((j - 1) / S) & 1);
      f3_pin(o);
      f3_pin(pa);
      f3_pin(sc);
      turn_begin();
      f3_fence();
      issue_qk(st);
      f3_commit();
      issue_pv(sp, pa);
      f3_commit();
      turn_end();
      f3_wait<1>(); /* S(it) */
      f3_pin(sc);
      release(k_empty + 8 * st);
      const int n0 = w.kbeg + it * F3_BN;
      f3_softmax<POLY>(p, sc, n0, w.len, need_mask(n0), qr0, qr1, m0, m1, l0, l1, al0, al1);
      f3_wait<0>(); /* P V(it - 1) */
      f3_pin(o);
      f3_pin(pa);
      release(v_empty + 8 * sp);
#pragma unroll
      for (int i = 0; i < NO / 4; ++i) o[4 * i] *= al0, o[4 * i + 1] *= al0, o[4 * i + 2] *= al1, o[4 * i + 3] *= al1;
      f3_pack(sc, pa);
    }
    release(q_empty + 8 * qb); /* every S of this tile is complete: the producer may load a next Q here */
    {
      const int j = kv + w.nkv - 1, sp = j % S;
      mb_wait(v_full + 8 * sp, (j / S) & 1);
      const int valid = w.len - (w.kbeg + (w.nkv - 1) * F3_BN); /* keys of the sequence in this tile */
      if (valid < F3_BN) {
        /* the rows past the sequence hold whatever follows it in qkv (another sequence, rows
         * never written): P is 0 there, but 0 * NaN is not, so they are zeroed (a whole
         * 128-byte row of a chunk: the swizzle only permutes within it) by every consumer
         * warpgroup, made visible to wgmma (async proxy), then they wait for each other */
        const int n16 = (F3_BN - valid) * (D / 64) * 8, ct = threadIdx.x - 128;
        for (int i = ct; i < n16; i += 128 * NC) {
          const int piece = i & 7, rc = i >> 3, c = rc % (D / 64), r = valid + rc / (D / 64);
          asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(sV + sp * C::KV_BYTES +
                                                                        (c * F3_BN + r) * 128 + piece * 16),
                       "r"(0u)
                       : "memory");
        }
        asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
        asm volatile("bar.sync 1, %0;\n" ::"n"(128 * NC) : "memory");
      }
      f3_pin(o);
      f3_pin(pa);
      turn_begin();
      f3_fence();
      issue_pv(sp, pa);
      f3_commit();
      turn_end();
      f3_wait<0>();
      f3_pin(o);
      release(v_empty + 8 * sp);
    }
    kv += w.nkv;
    const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
    const size_t r0 = (size_t)w.s0 + qr0, r1 = (size_t)w.s0 + qr1;
#pragma unroll
    for (int i = 0; i < NO / 4; ++i) {
      const int c = h * D + i * 8 + 2 * t;
      if (qr0 < w.len)
        *reinterpret_cast<uint32_t *>(p.out + r0 * p.ld_out + c) = pack_bf16(o[4 * i] * inv0, o[4 * i + 1] * inv0);
      if (qr1 < w.len)
        *reinterpret_cast<uint32_t *>(p.out + r1 * p.ld_out + c) = pack_bf16(o[4 * i + 2] * inv1, o[4 * i + 3] * inv1);
    }
    if (p.lse && t == 0) {
      if (qr0 < w.len) p.lse[r0 * p.H + h] = m0 + log2f(l0);
      if (qr1 < w.len) p.lse[r1 * p.H + h] = m1 + log2f(l1);
    }
  }
#endif
}

/* The tensor map of qkv: rows x ld bf16, 64 x 64 boxes, 128-byte swizzle, zeros past the end. */
static int f3_tensor_map(CUtensorMap *tm, const void *qkv, int ld, int rows) {
  return vr_sm90_tensor_map(tm, qkv, ld, rows, ld, 64, 64);
}

template <int D, int NC, bool PP, bool POLY, bool PS>
static void f3_launch_k(const CUtensorMap &tm, const attn_params &p, dim3 grid, int head_inner, cudaStream_t s) {
  typedef f3_cfg<D, NC, PS ? 2 : 1> C;
  static int attr_set[64];
  set_smem_once(k_attn_fa3<D, NC, PP, POLY, PS>, C::SMEM, attr_set);
  k_attn_fa3<D, NC, PP, POLY, PS><<<grid, C::THREADS, C::SMEM, s>>>(tm, p, head_inner);
  VR_CUDA_CHECK_LAUNCH();
}
/* The multiprocessors of the current device (cached per device). */
static int f3_sms() {
  static int sms[64];
  const int dev = vr_cuda_current_device_();
  if (dev >= 0 && dev < 64 && sms[dev]) return sms[dev];
  int n = 0;
  VR_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev < 0 ? 0 : dev));
  if (dev >= 0 && dev < 64) sms[dev] = n;
  return n;
}
/* ps: the persistent schedule (a 1-D grid of min(grid.x grid.y, one block per multiprocessor)
 * blocks over the work items; no exponent polynomial there: it lost everywhere) */
template <int D, int NC, bool PP>
static void f3_launch(const CUtensorMap &tm, const attn_params &p, dim3 grid, int head_inner, bool poly, bool ps,
                      cudaStream_t s) {
  if (ps) {
    const long items = (long)grid.x * grid.y, sms = f3_sms();
    f3_launch_k<D, NC, PP, false, true>(tm, p, dim3((unsigned)(items < sms ? items : sms)), head_inner, s);
  } else if (poly) {
    f3_launch_k<D, NC, PP, true, false>(tm, p, grid, head_inner, s);
  } else {
    f3_launch_k<D, NC, PP, false, false>(tm, p, grid, head_inner, s);
  }
}

} /* namespace */

extern "C" int vr_cuda_attention_fa3_ok(int D) {
#ifdef VR_CUDA_HAVE_FA3
  if (D != 64 && D != 128) return 0;
  return vr_sm90_current_device();
#else
  (void)D;
  return 0;
#endif
}

extern "C" int vr_cuda_attention_fa3_rows(int D, int flags) { return 64 * f3_nc(D, flags); }

extern "C" int vr_cuda_attention_fa3_resident(int D) {
  typedef f3_cfg<64, f3_default_nc(64)> C64;
  typedef f3_cfg<128, f3_default_nc(128)> C128;
  return D == 64 ? resident_of(k_attn_fa3<64, f3_default_nc(64), false, false, false>, C64::THREADS, (int)C64::SMEM)
                 : resident_of(k_attn_fa3<128, f3_default_nc(128), true, false, false>, C128::THREADS, (int)C128::SMEM);
}

extern "C" void vr_cuda_attention_fa3(const uint16_t *qkv, int ld, int rows, int q_off, int k_off, int v_off,
                                      uint16_t *out, int ld_out, float *lse, const int32_t *cu, const int32_t *tiles,
                                      const int32_t *meta, int grid_tiles, int H, int Hkv, int D, int causal,
                                      int window, float scale, int flags, cudaStream_t s) {
  VR_ASSERT(rows > 0 && ld % 8 == 0 && (D == 64 || D == 128) && H % Hkv == 0);
  CUtensorMap tm;
  const int enc = f3_tensor_map(&tm, qkv, ld, rows);
  VR_ASSERT(enc == 0 && "cuTensorMapEncodeTiled failed");
  attn_params p = attn_params_make(qkv, ld, q_off, k_off, v_off, out, ld_out, cu, tiles, meta, H, Hkv, causal, window, scale);
  p.lse = lse;
  const dim3 grid((unsigned)grid_tiles, (unsigned)H);
  /* ping-pong where it measured faster: head_dim 128 (2 x 16384 causal 692 against 681
   * TFLOP/s); at 64 the consumers waiting for their turn cost more than the overlap gives
   * (4 x 16384 causal 428 against 444): docs/benchmarks.md, "Issue 24: FA3-class attention" */
  const int nc = f3_nc(D, flags);
  VR_ASSERT((nc == 2 || D == 64) && "three consumer warpgroups only at head_dim 64");
  const bool pp = flags & VR_CUDA_FA3_PINGPONG ? true : flags & VR_CUDA_FA3_NO_PINGPONG ? false : D == 128;
  VR_ASSERT((!pp || nc == 2) && "ping-pong takes two consumer warpgroups");
  const int hi = (flags & VR_CUDA_FA3_HEAD_INNER) != 0;
  const bool poly = (flags & VR_CUDA_FA3_EXP2_POLY) != 0, ps = (flags & VR_CUDA_FA3_PERSIST) != 0;
  VR_ASSERT(!(poly && ps) && "the persistent schedule has no exponent polynomial");
  if (D == 128)
    pp ? f3_launch<128, 2, true>(tm, p, grid, hi, poly, ps, s) : f3_launch<128, 2, false>(tm, p, grid, hi, poly, ps, s);
  else if (nc == 3) f3_launch<64, 3, false>(tm, p, grid, hi, poly, ps, s);
  else if (pp) f3_launch<64, 2, true>(tm, p, grid, hi, poly, ps, s);
  else f3_launch<64, 2, false>(tm, p, grid, hi, poly, ps, s);
}
