/* cuda_rollout_bench.c: the rollout engine's throughput on the cuda backend (a benchmark program,
 * not a test). A random model of a named shape, P prompts of L random tokens, N new tokens each,
 * greedy, no stop ids (so every response has exactly N tokens), through vr_rollout_generate (the
 * scheduler, prefill, decode graphs, device sampling). Prints and writes as JSON:
 *   tokens/s = P * N / the generate call's wall time (prefill included, as transformers' generate
 *     is timed); the prefill alone (a generate of 1 new token); the decode step end to end
 *     ((generate - prefill) / steps) and on the device (graph replay, and eager variants without
 *     each op class: vr_cuda_roll_profile_decode);
 *   the bytes a step must read at least: the bf16 weights once plus the live K/V cache (mean
 *     context over the steps), and the time that takes at the card's copy rate measured here
 *     (cudaMemcpy device to device of 2 GiB, read + write bytes over the time);
 *   the weight update: host fp32 buffer -> device bf16 (set_weights), and device fp32 -> device bf16
 *     (vr_cuda_roll_set_weights_device, the actor on the same GPU).
 *   with --n R, R responses per prompt sharing the prompt's cache blocks (P * R sequences decode
 *   together); --temperature T samples (default 0: greedy). Prompts longer than the test model's
 *   4096 positions raise its max_position_embeddings (default RoPE: nothing else depends on it).
 *   --variants F[:PART[:KNOBS[:PIPE]]][,...] runs the whole measurement once per item on a fresh
 *   engine over the same model: F 1/0 the sampler inside the decode graph or after it
 *   (vr_cuda_roll_fuse_sample), PART the attention partition length (vr_cuda_roll_set_part; 0 or
 *   left out: the engine's choice, by the live contexts; -1 the bucket's length only, the rule
 *   before that), KNOBS (left out or -1: the engine's defaults) a bit mask: 1 the GEMM candidates
 *   timed with their operands from HBM, 2 split-K candidates (vr_cuda_roll_set_tuning), 4 greedy
 *   rows sampled over several blocks (vr_cuda_roll_split_sample), 8 the decode attention's
 *   shared-memory ring kernel (else the register one), 512 the tensor-core kernel instead, 1024 the
 *   choice between ring and register kernel by group size (the rule before the tensor-core kernel;
 *   so 1031 = the engine's defaults before it), 16 its launch as a programmatic dependent of the
 *   qkv GEMM (ring or tensor-core kernel: vr_cuda_roll_set_attn), 32 / 64 / 128 / 256 our decode GEMM on the
 *   layers / on the LM head / per shape where it won the warm-up's timing / with programmatic
 *   dependent launch (vr_cuda_roll_use_dgemm's LAYERS, HEAD, TIMED, PDL), PIPE the scheduler's
 *   decode_pipeline (left out or 0: the default, pipelined without stop ids; -1 off), IO
 *   (vr_cuda_roll_graph_io; left out or -1: the engine's default, 2) where a step's upload, feed and
 *   download run: 2 the upload on a copy stream at launch into a device copy that the graph's
 *   first kernel stages from, 1 that kernel reading the pinned host block through its mapping, 0
 *   stream operations around the graph. Default: "1", the engine's defaults. Each
 *   measurement then runs the generate once more with events around every launched step
 *   (vr_cuda_roll_time_steps): the device period of a step, its stream operations, its graph. After each measurement the three attention kernels are also timed alone
 *   on one layer (vr_cuda_roll_time_attention) at the last step's partition length, and the
 *   tensor-core kernel at 128, 256 and 512 keys. The JSON file gets one line per variant.
 *   --gemm: instead, each decode GEMM of both shapes at M = 64 (qkv, o +=, gate/up, down +=, LM
 *   head) on cuBLASLt (its candidates timed from HBM) and on ours (the rule's configuration and a
 *   sweep of bn x kc x splits), each run after a flush of twice the L2 (median of 7, events around
 *   the one launch), with the weights' read rate; ours checked against cuBLASLt.
 * Usage: cuda_rollout_bench [--shape llama-1b|qwen2-0.5b] [--prompts P] [--prompt-len L] [--new N]
 *        [--n R] [--temperature T] [--variants F[:PART[:KNOBS[:PIPE[:IO]]]],...] [--json FILE] | --gemm. Exit code 0,
 *        or 1 on any error, 77 without a GPU. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rollout_test_model.h"
#include "vr_cuda_check.h"
#include "vr_cuda_ops.h"
#include "vr_cuda_roll_backend.h"
#include "vr_cuda_roll_ops.h"
#include "vr_rollout.h"
#include "vr_time.h"

typedef struct {
  const char *name;
  int V, C, L, H, KV, F, tied, bias;
} shape_t;

static const shape_t k_shapes[] = {
    {"llama-1b", 128256, 2048, 16, 32, 8, 8192, 1, 0},   /* Llama-3.2-1B */
    {"qwen2-0.5b", 151936, 896, 24, 14, 2, 4864, 1, 1}, /* Qwen2-0.5B */
};

static double copy_rate(void) {
  const size_t bytes = 2ull << 30;
  void *a, *b;
  VR_CUDA_CHECK(cudaMalloc(&a, bytes));
  VR_CUDA_CHECK(cudaMalloc(&b, bytes));
  VR_CUDA_CHECK(cudaMemset(a, 1, bytes));
  cudaEvent_t e0, e1;
  VR_CUDA_CHECK(cudaEventCreate(&e0));
  VR_CUDA_CHECK(cudaEventCreate(&e1));
  float best = 1e30f;
  for (int i = 0; i < 6; ++i) {
    VR_CUDA_CHECK(cudaEventRecord(e0, 0));
    VR_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, 0));
    VR_CUDA_CHECK(cudaEventRecord(e1, 0));
    VR_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms;
    VR_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    if (i > 0 && ms < best) best = ms;
  }
  VR_CUDA_CHECK(cudaFree(a));
  VR_CUDA_CHECK(cudaFree(b));
  return 2.0 * bytes / (best * 1e-3);
}

typedef struct {
  const shape_t *sh;
  int P, Lp, N, R;
  float temp;
  double rate;
  const int32_t *ids;
  const uint32_t *cu;
} bench_t;

/* One measurement on a fresh engine: fuse (1/0), part (0: the engine's), knobs (-1: the engine's;
 * else the --variants bit mask), pipe (decode_pipeline) and io (-1: the engine's) set before the
 * first generate. 0 or 1 (an error). */
static int run_variant(const bench_t *bn, tmodel_t *mp, int fuse, int part, int knobs, int pipe, int io, FILE *jf) {
  const shape_t *sh = bn->sh;
  const int P = bn->P, Lp = bn->Lp, N = bn->N, R = bn->R;
  const float temp = bn->temp;
  const double rate = bn->rate;
  const int32_t *ids = bn->ids;
  const uint32_t *cu = bn->cu;
  tmodel_t m = *mp;
  uint64_t t0;
  vr_rollout_options_t o;
  vr_rollout_options_init(&o);
  o.device = "cuda";
  o.max_seqs = (uint32_t)(P * R);
  o.max_batch_tokens = (uint32_t)(P * Lp);
  o.max_model_len = (uint32_t)(Lp + N + 16);
  o.decode_pipeline = pipe;
  o.kv_cache_bytes = vr_rollout_block_bytes(&m.cfg, 16, 2) * ((uint64_t)P * R * ((o.max_model_len + 15) / 16) + 16);
  vr_rollout_t *r = NULL;
  t0 = vr_now_ns();
  if (vr_rollout_init(&m.cfg, m.params, m.n, &m.w, &o, &r)) return 1;
  const double init_s = (vr_now_ns() - t0) * 1e-9;
  void *st = vr_rollout_backend_state(r);
  vr_cuda_roll_fuse_sample(st, fuse);
  if (io >= 0) vr_cuda_roll_graph_io(st, io);
  if (knobs >= 0) {
    vr_cuda_roll_set_tuning(st, knobs & 1, (knobs >> 1) & 1);
    vr_cuda_roll_split_sample(st, (knobs >> 2) & 1);
    vr_cuda_roll_set_attn(st, knobs & 1024 ? 3 : knobs & 512 ? 2 : (knobs >> 3) & 1, (knobs >> 4) & 1);
    vr_cuda_roll_use_dgemm(st, ((unsigned)knobs >> 5) & 15u);
  }
  if (part && vr_cuda_roll_set_part(st, part)) {
    fprintf(stderr, "attention partition %d refused\n", part);
    return 1;
  }
  uint64_t wb = 0, kvb = 0, workb = 0;
  char dev[32];
  vr_rollout_backend_cuda.describe(st, &wb, &kvb, &workb, dev, sizeof dev);
  /* weight updates */
  double host_s = 0, dev_s = 1e30;
  if (vr_rollout_set_weights(r, m.params, m.n, &m.w, &host_s)) return 1;
  float *dp = NULL;
  VR_CUDA_CHECK(cudaMalloc((void **)&dp, m.n * sizeof(float)));
  VR_CUDA_CHECK(cudaMemcpy(dp, m.params, m.n * sizeof(float), cudaMemcpyHostToDevice));
  for (int i = 0; i < 3; ++i) {
    double s = 0;
    if (vr_cuda_roll_set_weights_device(st, dp, m.n, m.params, &m.w, &s)) return 1;
    if (s < dev_s) dev_s = s;
  }
  VR_CUDA_CHECK(cudaFree(dp));
  vr_gen_params_t gp;
  vr_gen_params_init(&gp);
  gp.n = (uint32_t)R;
  gp.sample.temperature = temp;
  gp.seed = 1234;
  gp.max_new_tokens = 8; /* warm-up: plans, the bucket's graph */
  vr_gen_output_t out;
  if (vr_rollout_generate(r, ids, cu, (uint32_t)P, &gp, &out)) return 1;
  vr_gen_output_free(&out);
  gp.max_new_tokens = 1; /* the prefill and the first token alone (prefill() only enqueues: its host
                          * time is not its device time) */
  t0 = vr_now_ns();
  if (vr_rollout_generate(r, ids, cu, (uint32_t)P, &gp, &out)) return 1;
  const double prefill_wall = (vr_now_ns() - t0) * 1e-9;
  vr_gen_output_free(&out);
  gp.max_new_tokens = (uint32_t)N;
  t0 = vr_now_ns();
  if (vr_rollout_generate(r, ids, cu, (uint32_t)P, &gp, &out)) return 1;
  const double wall = (vr_now_ns() - t0) * 1e-9;
  const vr_gen_stats_t *s = &out.stats;
  const uint64_t gen = out.cu[out.n_resp];
  /* the same generate again with events around every step (after the measurement: they cost) */
  double tsm[3] = {0, 0, 0};
  double wall_t = 0;
  {
    vr_gen_output_t o2;
    vr_cuda_roll_time_steps(st, 1);
    t0 = vr_now_ns();
    if (vr_rollout_generate(r, ids, cu, (uint32_t)P, &gp, &o2)) return 1;
    wall_t = (vr_now_ns() - t0) * 1e-9;
    if (vr_cuda_roll_step_times(st, tsm)) tsm[0] = tsm[1] = tsm[2] = 0;
    vr_cuda_roll_time_steps(st, 0);
    vr_gen_output_free(&o2);
  }
  const double tps = gen / wall;
  const double steps = (double)s->decode_calls;
  const double step_ms = steps > 0 ? (wall - prefill_wall) / steps * 1e3 : 0; /* a decode step, end to end */
  const double kv_tok = (double)vr_rollout_block_bytes(&m.cfg, 1, 2); /* bytes per cached token, all layers */
  const double mean_ctx = Lp + (N + 1) / 2.0;
  const double step_bytes = (double)wb + (double)P * R * mean_ctx * kv_tok; /* every sequence reads its whole context */
  const double ideal_ms = step_bytes / rate * 1e3;
  printf("%s [sampler in graph %d, attention part %d, knobs %d, pipeline %d, step io %d]: %d prompts x %d tokens, %d responses each, %d new (%s, T %.2f; "
         "): %llu tokens in %.3f s = %.0f tokens/s (peak %u blocks, %llu copy-on-write copies)\n",
         sh->name, fuse, part, knobs, pipe, io, P, Lp, R, N, temp > 0.f ? "sampled" : "greedy", temp,
         (unsigned long long)gen, wall, tps, s->peak_blocks, (unsigned long long)s->cow_copies);
  printf("  prefill + first token %.1f ms (%llu prefill calls); decode %llu steps (%llu launched ahead), %.3f ms/step "
         "end to end ((generate - prefill run) / steps; host time in decode() %.3f ms/step)\n",
         prefill_wall * 1e3, (unsigned long long)s->prefill_calls, (unsigned long long)s->decode_calls,
         (unsigned long long)s->decode_ahead, step_ms, s->decode_s / steps * 1e3);
  printf("  pipelined decode step on the device (events around each launched step, a second generate: %.0f tokens/s): "
         "period %.4f ms (a step's first stream op to the next one's), the step's stream ops %.4f ms, its graph %.4f "
         "ms -> between steps %.4f ms, upload / feed / download outside the graph %.4f ms\n",
         wall_t > 0 ? gen / wall_t : 0.0, tsm[0], tsm[1], tsm[2], tsm[0] - tsm[1], tsm[1] - tsm[2]);
  printf("  a step reads >= %.0f MB (weights %.0f MB + mean live K/V %.0f MB): %.3f ms at %.0f GB/s -> step at "
         "%.0f%% of the copy rate (%.2fx the ideal)\n",
         step_bytes / 1e6, wb / 1e6, (double)P * R * mean_ctx * kv_tok / 1e6, ideal_ms, rate * 1e-9, 100.0 * ideal_ms / step_ms,
         step_ms / ideal_ms);
  uint64_t ps[VR_CUDA_ROLL_PART_LENGTHS];
  vr_cuda_roll_part_steps(st, ps); /* since init: the warm-up and prefill-only runs included */
  char psl[256] = "";
  for (int i = 0, o2 = 0; i < VR_CUDA_ROLL_PART_LENGTHS; ++i)
    if (ps[i] && o2 < (int)sizeof psl)
      o2 += snprintf(psl + o2, sizeof psl - (size_t)o2, "%s%d: %llu", o2 ? ", " : "", VR_ROLL_BLOCK << i,
                     (unsigned long long)ps[i]);
  printf("  decode steps per attention partition length (all generates of this engine): %s\n", psl);
  printf("  last decode step on the device: %.3f ms; weight update: host fp32 -> device bf16 %.1f ms, device fp32 -> "
         "bf16 %.2f ms; init %.2f s\n",
         vr_cuda_roll_last_decode_ms(st), host_s * 1e3, dev_s * 1e3, init_s);
  {
    char rep[8192];
    vr_cuda_roll_gemm_report(st, rep, sizeof rep);
    printf("  decode GEMMs (per shape, chosen at the bucket's warm-up):\n%s", rep);
  }
  double pr[6] = {0};
  if (vr_cuda_roll_profile_decode(st, (uint32_t)(P * R), 20, pr) == 0)
    printf("  decode step on the device (mean of 20): graph %.3f ms, eager %.3f ms; eager without attention %.3f, "
           "without the layers' GEMMs %.3f, without the small kernels %.3f, without the LM head %.3f ms\n",
           pr[5], pr[0], pr[1], pr[2], pr[3], pr[4]);
  /* the attention kernels alone on the last step's contexts (Lp + N - 1 tokens each): ring, register,
   * tensor-core kernel at the step's partition length, then the tensor-core one at 128 / 256 / 512 */
  double ta[6] = {0, 0, 0, 0, 0, 0};
  static const unsigned tk[3] = {VR_ROLL_ATTN_RING, VR_ROLL_ATTN_REGS, VR_ROLL_ATTN_MMA};
  static const int tp[3] = {128, 256, 512};
  const double kv_layer = (double)P * R * (Lp + N - 1) * kv_tok / m.cfg.num_layers;
  int tok = 1;
  for (int i = 0; i < 3; ++i) tok = tok && vr_cuda_roll_time_attention(st, (uint32_t)(P * R), 50, tk[i], 0, &ta[i]) == 0;
  for (int i = 0; i < 3; ++i)
    if (vr_cuda_roll_time_attention(st, (uint32_t)(P * R), 50, VR_ROLL_ATTN_MMA, tp[i], &ta[3 + i])) ta[3 + i] = 0;
  if (tok)
    printf("  decode attention alone (one layer, %d-token contexts, mean of 50): ring kernel %.1f us, register kernel "
           "%.1f us, tensor-core kernel %.1f us for %.1f MB of K/V (%.0f / %.0f / %.0f GB/s; the copy rate's time "
           "%.1f us); tensor-core kernel at partitions of 128 / 256 / 512 keys: %.1f / %.1f / %.1f us\n",
           Lp + N - 1, ta[0] * 1e3, ta[1] * 1e3, ta[2] * 1e3, kv_layer / 1e6, kv_layer / (ta[0] * 1e-3) * 1e-9,
           kv_layer / (ta[1] * 1e-3) * 1e-9, kv_layer / (ta[2] * 1e-3) * 1e-9, kv_layer / rate * 1e6, ta[3] * 1e3,
           ta[4] * 1e3, ta[5] * 1e3);
  {
    FILE *f = jf;
    if (f) {
      fprintf(f,
              "{\"shape\": \"%s\", \"fuse_sample\": %d, \"part\": %d, \"knobs\": %d, \"pipeline\": %d, \"graph_io\": %d, "
              "\"timed_period_ms\": %.4f, \"timed_step_ops_ms\": %.4f, \"timed_graph_ms\": %.4f, "
              "\"decode_ahead\": %llu, \"params\": %zu, \"prompts\": %d, \"n\": %d, \"temperature\": %.3f, "
              "\"prompt_len\": %d, \"new_tokens\": %d, "
              "\"tokens\": %llu, \"wall_s\": %.4f, \"tokens_per_s\": %.1f, \"prefill_ms\": %.3f, \"decode_steps\": %llu, "
              "\"step_ms\": %.4f, \"step_bytes\": %.0f, \"copy_rate_gbs\": %.1f, \"ideal_step_ms\": %.4f, "
              "\"fraction_of_copy_rate\": %.3f, \"weight_update_host_ms\": %.2f, \"weight_update_device_ms\": %.3f, "
              "\"graph_step_ms\": %.4f, \"eager_step_ms\": %.4f, \"eager_no_attn_ms\": %.4f, \"eager_no_gemm_ms\": %.4f, "
              "\"eager_no_small_ms\": %.4f, \"eager_no_head_ms\": %.4f, \"attn_ring_us\": %.2f, \"attn_regs_us\": %.2f, \"attn_mma_us\": %.2f, "
              "\"attn_mma_part_us\": [%.2f, %.2f, %.2f], "
              "\"attn_kv_bytes\": %.0f, \"part_steps\": \"%s\"}\n",
              sh->name, fuse, part, knobs, pipe, io, tsm[0], tsm[1], tsm[2], (unsigned long long)s->decode_ahead, m.n, P, R, temp, Lp, N, (unsigned long long)gen, wall, tps, prefill_wall * 1e3,
              (unsigned long long)s->decode_calls, step_ms, step_bytes, rate * 1e-9, ideal_ms, ideal_ms / step_ms,
              host_s * 1e3, dev_s * 1e3, pr[5], pr[0], pr[1], pr[2], pr[3], pr[4], ta[0] * 1e3, ta[1] * 1e3, ta[2] * 1e3,
              ta[3] * 1e3, ta[4] * 1e3, ta[5] * 1e3, kv_layer, psl);
    }
  }
  vr_gen_output_free(&out);
  vr_rollout_free(r);
  return 0;
}

/* Device time (us) of one GEMM launch from HBM: median of 7, each after a flush of the L2. */
static float gemm_time(vr_cuda_gemm_t *lt, const vr_cuda_roll_gemm_cfg_t *cfg, void *D, int out_f32, const uint16_t *A,
                       const uint16_t *W, const void *bias, int N, int K, float beta, void *flush, size_t fb,
                       cudaEvent_t e0, cudaEvent_t e1, cudaStream_t st) {
  float t[7];
  for (int r = -1; r < 7; ++r) {
    VR_CUDA_CHECK(cudaMemsetAsync(flush, r + 2, fb, st));
    VR_CUDA_CHECK(cudaEventRecord(e0, st));
    if (cfg) vr_cuda_roll_gemm(D, out_f32, A, W, bias, 64, N, K, beta, *cfg, st);
    else vr_cuda_gemm(lt, D, out_f32, A, W, bias, 64, N, K, beta, st);
    VR_CUDA_CHECK(cudaEventRecord(e1, st));
    VR_CUDA_CHECK(cudaEventSynchronize(e1));
    if (r >= 0) VR_CUDA_CHECK(cudaEventElapsedTime(&t[r], e0, e1));
  }
  for (int i = 1; i < 7; ++i) /* insertion sort: the median */
    for (int j = i; j > 0 && t[j] < t[j - 1]; --j) {
      const float x = t[j];
      t[j] = t[j - 1];
      t[j - 1] = x;
    }
  return t[3] * 1e3f;
}

/* --gemm: every decode GEMM shape of both model shapes, ours against cuBLASLt (see the top). */
static int gemm_bench(double rate) {
  int dev = 0, sms = 0, l2 = 0;
  VR_CUDA_CHECK(cudaGetDevice(&dev));
  VR_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  VR_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  if (!vr_cuda_roll_gemm_available(dev)) {
    printf("gemm bench: our decode GEMM needs a compute 9.0 device and an sm_90a build\n");
    return 1;
  }
  const size_t maxw = (size_t)151936 * 2048, maxd = (size_t)64 * 151936, fb = 2 * (size_t)l2;
  uint16_t *A, *W, *bias;
  float *D, *D2;
  void *flush;
  unsigned *res;
  VR_CUDA_CHECK(cudaMalloc((void **)&A, (size_t)64 * 8192 * 2));
  VR_CUDA_CHECK(cudaMalloc((void **)&W, maxw * 2));
  VR_CUDA_CHECK(cudaMalloc((void **)&bias, 151936 * 4));
  VR_CUDA_CHECK(cudaMalloc((void **)&D, maxd * 4));
  VR_CUDA_CHECK(cudaMalloc((void **)&D2, maxd * 4));
  VR_CUDA_CHECK(cudaMalloc(&flush, fb));
  VR_CUDA_CHECK(cudaMalloc((void **)&res, 8));
  { /* small random bf16 operands (0x3c00-0x3cff, ~0.008-0.016, random signs), zero bias */
    const size_t n = maxw > (size_t)64 * 8192 ? maxw : (size_t)64 * 8192;
    uint16_t *h = malloc(n * 2);
    for (size_t i = 0; i < n; ++i) h[i] = (uint16_t)(0x3c00u | ((i * 2654435761u) >> 7 & 0xffu) | ((i * 40503u) & 0x8000u));
    VR_CUDA_CHECK(cudaMemcpy(W, h, maxw * 2, cudaMemcpyHostToDevice));
    VR_CUDA_CHECK(cudaMemcpy(A, h + 12345, (size_t)64 * 8192 * 2, cudaMemcpyHostToDevice));
    free(h);
    VR_CUDA_CHECK(cudaMemset(bias, 0, 151936 * 4));
  }
  vr_cuda_gemm_t *lt = NULL;
  if (vr_cuda_gemm_init(&lt, 32u << 20)) return 1;
  vr_cuda_gemm_set_tune_opts(lt, flush, fb, 0);
  vr_cuda_gemm_set_tuning(lt, 1);
  cudaEvent_t e0, e1;
  cudaStream_t gs; /* a stream of its own (programmatic dependent launch is not for the legacy one) */
  VR_CUDA_CHECK(cudaStreamCreateWithFlags(&gs, cudaStreamNonBlocking));
  VR_CUDA_CHECK(cudaEventCreate(&e0));
  VR_CUDA_CHECK(cudaEventCreate(&e1));
  printf("gemm bench: M = 64, %d SMs, L2 %d MB, flush %zu MB before every run; copy rate %.0f GB/s\n", sms, l2 >> 20,
         fb >> 20, rate * 1e-9);
  double sum_lt[2] = {0, 0}, sum_rule[2] = {0, 0}, sum_best[2] = {0, 0};
  for (size_t si = 0; si < sizeof k_shapes / sizeof k_shapes[0]; ++si) {
    const shape_t *sh = &k_shapes[si];
    const int Dh = sh->C / sh->H, NQ = sh->C + 2 * sh->KV * Dh;
    const struct {
      const char *what;
      int N, K, out_f32, bias;
      float beta;
      int reps; /* per step */
    } g[5] = {{"qkv", NQ, sh->C, 0, sh->bias, 0.f, sh->L},
              {"o +=", sh->C, sh->C, 1, 0, 1.f, sh->L},
              {"gate/up", 2 * sh->F, sh->C, 0, 0, 0.f, sh->L},
              {"down +=", sh->C, sh->F, 1, 0, 1.f, sh->L},
              {"LM head", sh->V, sh->C, 1, 0, 0.f, 1}};
    for (int gi = 0; gi < 5; ++gi) {
      const int N = g[gi].N, K = g[gi].K, f32 = g[gi].out_f32;
      const void *bp = g[gi].bias ? bias : NULL; /* bf16 bias (zeros) for the bf16 qkv */
      const float beta = g[gi].beta;
      const double wbytes = (double)N * K * 2;
      VR_CUDA_CHECK(cudaMemset(D, 0, (size_t)64 * N * 4));
      vr_cuda_gemm(lt, D, f32, A, W, bp, 64, N, K, beta, gs); /* cuBLASLt's tuning (from HBM) */
      const float t_lt = gemm_time(lt, NULL, D, f32, A, W, bp, N, K, beta, flush, fb, e0, e1, gs);
      const vr_cuda_roll_gemm_cfg_t rule = vr_cuda_roll_gemm_pick(N, K, sms);
      /* check the rule's configuration against cuBLASLt (beta 0 on zeroed outputs) */
      VR_CUDA_CHECK(cudaMemset(D, 0, (size_t)64 * N * 4));
      VR_CUDA_CHECK(cudaMemset(D2, 0, (size_t)64 * N * 4));
      vr_cuda_gemm(lt, D, f32, A, W, bp, 64, N, K, beta, gs);
      vr_cuda_roll_gemm(D2, f32, A, W, bp, 64, N, K, beta, rule, gs);
      vr_cuda_roll_gemm_compare(D2, D, f32, (size_t)64 * N, res, gs);
      VR_CUDA_CHECK(cudaStreamSynchronize(gs));
      unsigned rh[2];
      VR_CUDA_CHECK(cudaMemcpy(rh, res, 8, cudaMemcpyDeviceToHost));
      float dmax, ymax;
      memcpy(&dmax, &rh[0], 4);
      memcpy(&ymax, &rh[1], 4);
      const float t_rule = gemm_time(lt, &rule, D2, f32, A, W, bp, N, K, beta, flush, fb, e0, e1, gs);
      vr_cuda_roll_gemm_cfg_t pdl = rule;
      pdl.pdl = 1;
      const float t_pdl = gemm_time(lt, &pdl, D2, f32, A, W, bp, N, K, beta, flush, fb, e0, e1, gs);
      printf("%s %-8s N %6d K %5d: cuBLASLt %7.1f us (%.2f TB/s) | ours rule bn %3d kc %d splits %d %7.1f us (%.2f TB/s), "
             "pdl %7.1f us | max diff %.3g of %.3g\n  sweep (bn/kc/splits us):",
             sh->name, g[gi].what, N, K, t_lt, wbytes / t_lt * 1e-6, rule.bn, rule.kc, rule.splits, t_rule, wbytes / t_rule * 1e-6,
             t_pdl, dmax, ymax);
      float best = t_rule;
      vr_cuda_roll_gemm_cfg_t bc = rule, cand[96];
      const int nc = vr_cuda_roll_gemm_candidates(N, K, sms, cand, 96);
      for (int i = 0; i < nc && i < 96; ++i) {
        const float t = gemm_time(lt, &cand[i], D2, f32, A, W, bp, N, K, beta, flush, fb, e0, e1, gs);
        printf(" %d/%d/%d %.1f", cand[i].bn, cand[i].kc, cand[i].splits, t);
        if (t < best) best = t, bc = cand[i];
      }
      printf("\n  best bn %d kc %d splits %d %.1f us (%.2f TB/s)\n", bc.bn, bc.kc, bc.splits, best, wbytes / best * 1e-6);
      sum_lt[si] += g[gi].reps * t_lt;
      sum_rule[si] += g[gi].reps * t_rule;
      sum_best[si] += g[gi].reps * best;
    }
    printf("%s: per step (layers x 4 + head), isolated launches from HBM: cuBLASLt %.1f us, ours by rule %.1f us, "
           "best of the sweep %.1f us\n", sh->name, sum_lt[si], sum_rule[si], sum_best[si]);
  }
  vr_cuda_gemm_free(lt);
  VR_CUDA_CHECK(cudaStreamDestroy(gs));
  VR_CUDA_CHECK(cudaFree(A));
  VR_CUDA_CHECK(cudaFree(W));
  VR_CUDA_CHECK(cudaFree(bias));
  VR_CUDA_CHECK(cudaFree(D));
  VR_CUDA_CHECK(cudaFree(D2));
  VR_CUDA_CHECK(cudaFree(flush));
  VR_CUDA_CHECK(cudaFree(res));
  return 0;
}

int main(int argc, char **argv) {
  const char *shape_name = "llama-1b", *json = NULL, *variants = "1";
  int P = 64, Lp = 128, N = 256, R = 1, gemm = 0;
  float temp = 0.f;
  for (int i = 1; i < argc; i += 2) {
    if (!strcmp(argv[i], "--gemm")) {
      gemm = 1;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "flag %s needs a value\n", argv[i]);
      return 1;
    }
    if (!strcmp(argv[i], "--shape")) shape_name = argv[i + 1];
    else if (!strcmp(argv[i], "--n")) R = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--temperature")) temp = (float)atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--prompts")) P = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--prompt-len")) Lp = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--new")) N = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--json")) json = argv[i + 1];
    else if (!strcmp(argv[i], "--variants")) variants = argv[i + 1];
    else {
      fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 1;
    }
  }
  const shape_t *sh = NULL;
  for (size_t i = 0; i < sizeof k_shapes / sizeof k_shapes[0]; ++i)
    if (!strcmp(k_shapes[i].name, shape_name)) sh = &k_shapes[i];
  if (!sh || P < 1 || Lp < 1 || N < 1 || R < 1 || !(temp >= 0.f)) {
    fprintf(stderr, "bad --shape (llama-1b, qwen2-0.5b) or sizes\n");
    return 1;
  }
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    printf("no CUDA device: skipped\n");
    return 77;
  }
  const double rate = copy_rate();
  if (gemm) return gemm_bench(rate);
  const int D = sh->C / sh->H;
  tmodel_t m;
  uint64_t t0 = vr_now_ns();
  if (tmodel_make(&m, sh->V, sh->C, sh->L, sh->H, sh->KV, D, sh->F, sh->tied, sh->bias, 0, 42, 0.02f * 1.7f, 0.02f * 1.7f)) {
    fprintf(stderr, "out of host memory for %zu parameters\n", (size_t)0);
    return 1;
  }
  if (Lp + N + 16 > m.cfg.max_position_embeddings) m.cfg.max_position_embeddings = m.cfg.max_seq_len = Lp + N + 16;
  printf("%s: %zu parameters (random, filled in %.2f s); device copy rate %.0f GB/s\n", sh->name, m.n,
         (vr_now_ns() - t0) * 1e-9, rate * 1e-9);
  /* prompts */
  int32_t *ids = malloc(sizeof(int32_t) * (size_t)P * Lp);
  uint32_t *cu = malloc(sizeof(uint32_t) * (P + 1));
  for (int p = 0; p <= P; ++p) cu[p] = (uint32_t)(p * Lp);
  for (size_t i = 0; i < (size_t)P * Lp; ++i) ids[i] = (int32_t)((tmodel_u(7, i) * 0.5f + 0.5f) * (sh->V - 1));
  bench_t bn = {sh, P, Lp, N, R, temp, rate, ids, cu};
  FILE *jf = json ? fopen(json, "w") : NULL;
  if (json && !jf) {
    fprintf(stderr, "cannot write %s\n", json);
    return 1;
  }
  int rc = 0;
  for (const char *v = variants; v && *v && !rc;) {
    int fuse = 1, part = 0, knobs = -1, pipe = 0, io = -1, used = 0, more = 0;
    if (sscanf(v, "%d%n", &fuse, &used) != 1) {
      fprintf(stderr, "bad --variants item at \"%s\" (F[:PART[:KNOBS[:PIPE[:IO]]]])\n", v);
      rc = 1;
      break;
    }
    if (v[used] == ':' && sscanf(v + used, ":%d%n", &part, &more) == 1) used += more;
    if (v[used] == ':' && sscanf(v + used, ":%d%n", &knobs, &more) == 1) used += more;
    if (v[used] == ':' && sscanf(v + used, ":%d%n", &pipe, &more) == 1) used += more;
    if (v[used] == ':' && sscanf(v + used, ":%d%n", &io, &more) == 1) used += more;
    rc = run_variant(&bn, &m, fuse, part, knobs, pipe, io, jf);
    v += used;
    if (*v == ',') ++v;
  }
  if (jf) fclose(jf);
  if (rc) return 1;
  tmodel_free(&m);
  free(ids);
  free(cu);
  return 0;
}
