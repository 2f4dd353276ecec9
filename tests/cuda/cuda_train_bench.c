/* cuda_train_bench.c: the CUDA training engine's step time on Hugging Face model shapes with
 * random weights (a benchmark program, not a test): fwd + bwd + AdamW (clip 1.0) of the
 * token-mean NLL over n_seqs x seq_len packed tokens, and a log-prob-only forward (the
 * reference policy's). Prints tokens/s and MFU against a given bf16 GEMM rate with
 *   training flops / token = 6 N + 6 L (H D) S      (N parameters, causal attention of length S)
 *   forward flops / token  = 2 N + 2 L (H D) S
 * and writes one JSON line per model to stdout (prefix "json "). Then one more step and one more
 * forward with the engine's per-phase profiling on (cudaEvents at phase boundaries,
 * vr_cutrain_profile; outside the timed iterations): one "phase" line per phase with its
 * milliseconds in the step and in the log-prob forward. A "clocks" line gives the SM clock and
 * board power sampled every 20 ms over the timed steps and the timed forwards (gpu_sampler.h,
 * NVML loaded at run time; "not sampled" without it): at the card's power cap the clock falls
 * well below its maximum, and a rate is read against the clock it ran at.
 *
 *   cuda_train_bench [--model qwen2-0.5b|llama-3.2-1b|all] [--seqs 16] [--len 1024] [--iters 5]
 *                    [--gemm-tflops 781] [--recompute 0|1] [--staged 0|1] [--tune-gemm 0|1|2|3]
 *                    [--attn-bwd auto|generic|mma|wgmma|wgmma-ss|wgmma-ra|wgmma-co|wgmma-cop|wgmma-co4|wgmma-co4h]
 *                    [--bias-layout grouped|interleaved] [--lmhead auto|cublas|fused|fused-pp|fused-pp2|both|forms] [--head 0|1]
 *                    [--dxn bf16|f32|both] [--mlp auto|cublas|fused|both] [--optim auto|overlap|serial|both]
 * --staged 1: the backward through vr_cutrain_backward_cb (the DP overlap's form) with a callback
 * that only counts, i.e. the cost of its waits on one GPU; --tune-gemm 1: cuBLASLt's candidates
 * timed during the first warm-up step and forward (vr_cutrain_tune_gemms: 1 those with the
 * untuned bits only, 2 any, 3 as 1 over a wider search);
 * --attn-bwd: the attention backward's kernel (vr_cutrain_desc_t.attn_bwd; auto: the engine's
 * choice, which its log line names); --bias-layout interleaved: each qkv bias right after its
 * weight (vr_lm's layout before the optimizer file's version 2), so the engine runs q, k, v as
 * three GEMMs and copies (its log line: "qkv split"); grouped (default): the weights adjacent, the
 * biases after them, as vr_lm lays out a checkpoint now. --lmhead: the LM head's forward
 * (vr_cutrain_desc_t.lmhead; the model's name then carries it, "/cublas", "/fused", "/fused-pp",
 * "/fused-pp2"); both: each model twice in the same process, cuBLASLt's then the fused one (its
 * cooperative form); forms: the fused GEMM's cooperative, single-block ping-pong and pair
 * ping-pong forms in turn. --head 1: instead, the LM-head
 * forward alone (bench_head), --iters calls of each path and form. --dxn f32: the fused projections' dX in
 * fp32 into the RMSNorm backward (vr_cutrain_desc_t.dxn_f32; the name carries "/dxn-f32"; the
 * default bf16 halves its bytes); both: bf16's run, then f32's, in the same process. --mlp: the
 * gate/up projection + SwiGLU forward (vr_cutrain_desc_t.mlp; the name carries "/mlp-cublas",
 * "/mlp-fused"); both: cuBLASLt + the SwiGLU kernel, then the fused Hopper GEMM, per model. --optim: the
 * optimizer step's schedule (vr_cutrain_desc_t.optim; the name carries "/optim-overlap", "/optim-serial");
 * both: overlapped with the next forward, then on the stream, per model. The timed steps run back to
 * back and are waited for once at the end (the peer's timing loop), so an overlapped update runs
 * beside the next step's forward; the last step's update is inside the time.
 * Shapes from the models' config.json on the Hugging Face hub (tied embeddings both). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_sampler.h"
#include "vr_cutrain.h"
#include "vr_cutrain_ops.h"

typedef struct {
  const char *name;
  int vocab, hidden, layers, heads, kv, inter, qkv_bias;
  double theta;
} shape_t;

static const shape_t k_shapes[] = {
    {"qwen2-0.5b", 151936, 896, 24, 14, 2, 4864, 1, 1000000.0},
    {"llama-3.2-1b", 128256, 2048, 16, 32, 8, 8192, 0, 500000.0},
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static size_t put(size_t *at, size_t n) { /* a tensor of n floats at 64-float alignment */
  const size_t o = *at;
  *at += (n + 63) / 64 * 64;
  return o;
}

/* The staged backward's callback (--staged 1): counts the stages. */
static void count_stage(void *ctx, int stage) { (void)stage, ++*(int *)ctx; }

static const char *const k_lmhead_names[] = {"auto", "cublas", "fused", "fused-pp", "fused-pp2"}; /* VR_CUTRAIN_LMHEAD_* */

static const char *const k_optim_names[] = {"auto", "overlap", "serial"}; /* VR_CUTRAIN_OPTIM_* */

static int bench(const shape_t *m0, int seqs, int len, int iters, double gemm_tflops, int recompute, int staged,
                 int tune, int attn_bwd, int interleave, int lmhead, int dxn_f32, int mlp, int optim) {
  shape_t mm = *m0; /* the name tagged with an LM head / MLP form / optimizer schedule asked for by name */
  char tag[96];
  snprintf(tag, sizeof tag, "%s%s%s%s%s%s%s%s", m0->name, lmhead ? "/" : "", lmhead ? k_lmhead_names[lmhead] : "",
           dxn_f32 ? "/dxn-f32" : "", mlp ? "/mlp-" : "", mlp ? k_lmhead_names[mlp] : "", optim ? "/optim-" : "",
           optim ? k_optim_names[optim] : "");
  mm.name = tag;
  const shape_t *m = &mm;
  const int C = m->hidden, H = m->heads, KV = m->kv, D = C / H, F = m->inter, L = m->layers, V = m->vocab;
  vr_cutrain_layer_off_t *lo = calloc((size_t)L, sizeof *lo);
  size_t at = 0, n_params = 0;
  const size_t embed = put(&at, (size_t)V * C);
  n_params += (size_t)V * C;
  for (int l = 0; l < L; ++l) {
    vr_cutrain_layer_off_t *o = &lo[l];
    const size_t qn = (size_t)H * D * C, kn = (size_t)KV * D * C;
    o->q_b = o->k_b = o->v_b = VR_CUTRAIN_NONE;
    if (m->qkv_bias && interleave) {
      o->q_w = put(&at, qn), o->q_b = put(&at, (size_t)H * D);
      o->k_w = put(&at, kn), o->k_b = put(&at, (size_t)KV * D);
      o->v_w = put(&at, kn), o->v_b = put(&at, (size_t)KV * D);
    } else {
      o->q_w = put(&at, qn), o->k_w = put(&at, kn), o->v_w = put(&at, kn);
      if (m->qkv_bias)
        o->q_b = put(&at, (size_t)H * D), o->k_b = put(&at, (size_t)KV * D), o->v_b = put(&at, (size_t)KV * D);
    }
    o->o_w = put(&at, (size_t)C * H * D), o->o_b = VR_CUTRAIN_NONE;
    o->gate_w = put(&at, (size_t)F * C), o->up_w = put(&at, (size_t)F * C), o->down_w = put(&at, (size_t)C * F);
    o->gate_b = o->up_b = o->down_b = VR_CUTRAIN_NONE;
    o->norm1 = put(&at, C), o->norm2 = put(&at, C);
    n_params += qn + 2 * kn + (m->qkv_bias ? (size_t)(H + 2 * KV) * D : 0) + (size_t)C * H * D + 3 * (size_t)F * C +
                2 * (size_t)C;
  }
  const size_t fnorm = put(&at, C);
  n_params += C;
  float *inv = malloc((size_t)D / 2 * sizeof *inv);
  for (int i = 0; i < D / 2; ++i) inv[i] = (float)pow(m->theta, -2.0 * i / D);
  const vr_cutrain_desc_t d = {.vocab = V,
                               .hidden = C,
                               .layers = L,
                               .heads = H,
                               .kv_heads = KV,
                               .head_dim = D,
                               .inter = F,
                               .rms_eps = 1e-6f,
                               .rope_scaling = 1.0f,
                               .rope_inv_freq = inv,
                               .n_floats = at,
                               .embed = embed,
                               .final_norm = fnorm,
                               .lm_head = VR_CUTRAIN_NONE,
                               .layer = lo,
                               .score_w = VR_CUTRAIN_NONE,
                               .score_b = VR_CUTRAIN_NONE,
                               .recompute = recompute,
                               .attn_bwd = attn_bwd,
                               .lmhead = lmhead,
                               .dxn_f32 = dxn_f32,
                               .mlp = mlp,
                               .optim = optim};
  const int T = seqs * len;
  size_t free0 = 0, total = 0;
  cudaMemGetInfo(&free0, &total);
  vr_cutrain_t *e = NULL;
  int rc = vr_cutrain_create(&d, NULL, T, 0, 0, at, &e);
  if (rc) {
    fprintf(stderr, "%s: engine create failed (%d)\n", m->name, rc);
    free(lo), free(inv);
    return 1;
  }
  vr_cutrain_randomize(e, 42, 0.02f);
  int32_t *ids = malloc((size_t)T * 4), *tgt = malloc((size_t)T * 4);
  uint32_t *cu = malloc(((size_t)seqs + 1) * 4);
  float *glp = malloc((size_t)T * 4), *logp = malloc((size_t)T * 4);
  uint64_t z = 12345;
  for (int t = 0; t < T; ++t) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    ids[t] = (int32_t)((z >> 33) % (uint64_t)V);
  }
  const int Nt = seqs * (len - 1);
  for (int q = 0; q <= seqs; ++q) cu[q] = (uint32_t)(q * len);
  for (int t = 0; t < T; ++t) {
    const int last = (t + 1) % len == 0;
    tgt[t] = last ? -1 : ids[t + 1];
    glp[t] = last ? 0.f : -1.0f / (float)Nt;
  }
  double t_step, t_fwd = 0;
  int stages = 0;
  gpu_sampler_t smp;
  (void)gpu_sampler_open(&smp); /* unavailable: the clocks line says so */
  gpu_sample_sum_t clk_step, clk_fwd;
  /* two warm-up steps (plans, first touches; --tune-gemm: the first), each waited for; then the timed
   * steps back to back, waited for once at the end, as the peer's loop is */
  double t0 = 0;
  for (int it = -2; it < iters; ++it) {
    if (tune) vr_cutrain_tune_gemms(e, it == -2);
    if (it == 0) gpu_sampler_start(&smp), t0 = now_s();
    vr_cutrain_zero_grad(e);
    vr_cutrain_forward(e, ids, cu, seqs, tgt, 1.0f, NULL, NULL, 1);
    if (staged)
      vr_cutrain_backward_cb(e, glp, NULL, count_stage, &stages);
    else
      vr_cutrain_backward(e, glp, NULL);
    vr_cutrain_adamw_step(e, 1e-5f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, it + 3);
    if (it < 0) vr_cutrain_sync(e);
  }
  vr_cutrain_sync(e);
  t_step = now_s() - t0;
  clk_step = gpu_sampler_stop(&smp);
  if (staged && stages != (iters + 2) * (L + 2)) fprintf(stderr, "%s: %d backward stages reported, want %d\n", m->name,
                                                         stages, (iters + 2) * (L + 2));
  for (int it = -2; it < iters; ++it) {
    if (tune) vr_cutrain_tune_gemms(e, it == -2);
    if (it == 0) gpu_sampler_start(&smp);
    const double t0 = now_s();
    vr_cutrain_forward(e, ids, cu, seqs, tgt, 1.0f, logp, NULL, 0);
    if (it >= 0) t_fwd += now_s() - t0;
  }
  clk_fwd = gpu_sampler_stop(&smp);
  gpu_sampler_close(&smp);
  /* per-phase device time of one more step and one more forward */
  double ph_step[VR_CUTRAIN_PH_N] = {0}, ph_fwd[VR_CUTRAIN_PH_N] = {0};
  if (vr_cutrain_profile(e, 1) == 0) {
    vr_cutrain_zero_grad(e);
    vr_cutrain_forward(e, ids, cu, seqs, tgt, 1.0f, NULL, NULL, 1);
    vr_cutrain_backward(e, glp, NULL);
    vr_cutrain_adamw_step(e, 1e-5f, 0.9f, 0.999f, 1e-8f, 0.01f, 1.0f, iters + 3);
    vr_cutrain_profile_take(e, ph_step);
    vr_cutrain_forward(e, ids, cu, seqs, tgt, 1.0f, logp, NULL, 0);
    vr_cutrain_profile_take(e, ph_fwd);
    vr_cutrain_profile(e, 0);
  }
  double sum_s = 0, sum_f = 0;
  for (int p = 0; p < VR_CUTRAIN_PH_N; ++p) {
    printf("phase %-14s %-14s step %8.2f ms   log-prob forward %8.2f ms\n", m->name, vr_cutrain_phase_name(p),
           ph_step[p], ph_fwd[p]);
    sum_s += ph_step[p], sum_f += ph_fwd[p];
  }
  printf("phase %-14s %-14s step %8.2f ms   log-prob forward %8.2f ms\n", m->name, "sum", sum_s, sum_f);
  double nll = 0;
  for (int t = 0; t < T; ++t) nll -= glp[t] != 0.f ? logp[t] : 0.0;
  nll /= Nt;
  size_t free1 = 0;
  cudaMemGetInfo(&free1, &total);
  t_step /= iters, t_fwd /= iters;
  const double attn = 6.0 * L * (double)H * D * len, f_train = 6.0 * (double)n_params + attn,
               f_fwd = 2.0 * (double)n_params + attn / 3.0;
  const double tps = T / t_step, tps_f = T / t_fwd;
  const double mfu = tps * f_train / (gemm_tflops * 1e12), mfu_f = tps_f * f_fwd / (gemm_tflops * 1e12);
  printf(
      "%-14s%s%s%s%s N=%.3fB  T=%d (%dx%d)  step %.1f ms  %.1fk tokens/s  MFU %.1f%%  |  log-prob forward %.1f ms  "
      "%.1fk tokens/s  MFU %.1f%%  |  device memory %.1f GiB  loss %.4f (ln V = %.4f)\n",
      m->name, recompute ? " (recompute)" : "", staged ? " (staged)" : "",
      tune == 1   ? " (tuned gemms, same bits)"
      : tune == 2 ? " (tuned gemms, any)"
      : tune == 3 ? " (tuned gemms, same bits, wide)"
                  : "",
      interleave && m->qkv_bias ? " (biases interleaved)" : "", n_params / 1e9, T, seqs, len, t_step * 1e3, tps / 1e3,
      100 * mfu,
      t_fwd * 1e3, tps_f / 1e3, 100 * mfu_f, (free0 - free1) / 1073741824.0, nll, log((double)V));
  printf(
      "json {\"model\": \"%s\", \"params\": %zu, \"tokens\": %d, \"step_ms\": %.3f, \"tokens_per_s\": %.1f, "
      "\"mfu\": %.4f, \"fwd_ms\": %.3f, \"fwd_tokens_per_s\": %.1f, \"fwd_mfu\": %.4f, \"device_gib\": %.3f, "
      "\"gemm_tflops\": %.1f, \"recompute\": %d, \"staged\": %d, \"tuned\": %d}\n",
      m->name, n_params, T, t_step * 1e3, tps, mfu, t_fwd * 1e3, tps_f, mfu_f, (free0 - free1) / 1073741824.0,
      gemm_tflops, recompute, staged, tune);
  char cs[160], cf[160];
  gpu_sample_format(cs, sizeof cs, &clk_step);
  gpu_sample_format(cf, sizeof cf, &clk_fwd);
  printf("clocks %-14s timed steps: %s  |  timed log-prob forwards: %s\n", m->name, cs, cf);
  fflush(stdout);
  vr_cutrain_free(e);
  free(lo), free(inv), free(ids), free(tgt), free(cu), free(glp), free(logp);
  return 0;
}

/* --head 1: the LM-head forward alone on the model's (T, C, V), x and W random bf16, device time
 * of `reps` calls (cudaEvents, after one warm-up call each): cuBLASLt's chunked GEMM into the fp32
 * logits alone (the engine's chunk, 2^28 / V rows), then vr_cutrain_lmhead_fwd with cuBLASLt + the
 * row kernel and with the fused GEMM, each with the stored log-softmax (training) and without
 * (log-prob forward). TFLOP/s: 2 T C V over the time. */
static int bench_head(const shape_t *m, int T, int reps) {
  const int C = m->hidden, V = m->vocab, chunk = (int)(((size_t)1 << 28) / (size_t)V);
  const size_t nx = (size_t)T * C, nw = (size_t)V * C;
  uint16_t *hx = malloc(nx * 2), *hw = malloc(nw * 2);
  int32_t *ht = malloc((size_t)T * 4);
  uint64_t z = 777;
  for (size_t i = 0; i < nx + nw; ++i) {
    z = z * 6364136223846793005ull + 1442695040888963407ull;
    const float f = ((float)(z >> 40) / 16777216.0f * 2.f - 1.f) * (i < nx ? 1.f : 0.1f);
    uint32_t b;
    memcpy(&b, &f, 4);
    *(i < nx ? &hx[i] : &hw[i - nx]) = (uint16_t)(b >> 16);
  }
  for (int t = 0; t < T; ++t) ht[t] = (t * 7919) % V;
  uint16_t *x = NULL, *W = NULL, *lp16 = NULL;
  int32_t *tgt = NULL;
  float *logits = NULL, *lpmax = NULL, *lse = NULL, *ent = NULL, *logp = NULL;
  vr_cuda_gemm_t *g = NULL;
  if (cudaMalloc((void **)&x, nx * 2) || cudaMalloc((void **)&W, nw * 2) || cudaMalloc((void **)&tgt, (size_t)T * 4) ||
      cudaMalloc((void **)&logits, (size_t)chunk * V * 4) || cudaMalloc((void **)&lp16, (size_t)T * V * 2) ||
      cudaMalloc((void **)&lpmax, (size_t)T * vr_cutrain_lsm_segs(V) * 4) || cudaMalloc((void **)&lse, (size_t)T * 4) ||
      cudaMalloc((void **)&ent, (size_t)T * 4) || cudaMalloc((void **)&logp, (size_t)T * 4) ||
      vr_cuda_gemm_init(&g, (size_t)64 << 20)) {
    fprintf(stderr, "%s: head bench: allocation failed\n", m->name);
    return 1;
  }
  cudaMemcpy(x, hx, nx * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(W, hw, nw * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(tgt, ht, (size_t)T * 4, cudaMemcpyHostToDevice);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0), cudaEventCreate(&e1);
  const double flops = 2.0 * T * C * (double)V;
  static const char *const what[9] = {"gemm alone (cuBLASLt, fp32 logits)", "cublas+rows, stored lsm",
                                      "cublas+rows, log-prob", "fused, stored lsm", "fused, log-prob",
                                      "fused ping-pong, stored lsm", "fused ping-pong, log-prob",
                                      "fused ping-pong pairs, stored lsm", "fused ping-pong pairs, log-prob"};
  static const int form[9] = {0, 0, 0, VR_CUTRAIN_LMHEAD_FORM_COOP, VR_CUTRAIN_LMHEAD_FORM_COOP,
                              VR_CUTRAIN_LMHEAD_FORM_PP, VR_CUTRAIN_LMHEAD_FORM_PP,
                              VR_CUTRAIN_LMHEAD_FORM_PP2, VR_CUTRAIN_LMHEAD_FORM_PP2};
  float lse_of[9] = {0};
  int ran = 0;
  for (int k = 0; k < 9; ++k) {
    if (k >= 3 && !vr_cutrain_lmhead_fused_available(C, V)) continue;
    float ms = 0;
    for (int r = -1; r < reps; ++r) {
      if (r == 0) cudaEventRecord(e0, 0);
      if (k == 0) {
        for (int t0 = 0; t0 < T; t0 += chunk)
          vr_cuda_gemm(g, logits, 1, x + (size_t)t0 * C, W, NULL, T - t0 < chunk ? T - t0 : chunk, V, C, 0.f, 0);
      } else {
        ran = vr_cutrain_lmhead_fwd(g, logp, ent, lse, x, W, tgt, T, C, V, 1.0f, chunk, logits, k % 2 ? lp16 : NULL,
                                    lpmax, form[k], 0);
      }
    }
    cudaEventRecord(e1, 0);
    cudaEventSynchronize(e1);
    cudaEventElapsedTime(&ms, e0, e1);
    ms /= reps;
    if (k) cudaMemcpy(&lse_of[k], lse + T / 2, 4, cudaMemcpyDeviceToHost);
    printf("head %-14s T=%d C=%d V=%d  %-36s %8.3f ms  %6.1f TFLOP/s  (lse[T/2] %.6f)%s\n", m->name, T, C, V, what[k],
           ms, flops / (ms * 1e-3) / 1e12, lse_of[k], k && ran != form[k] ? "  ANOTHER FORM RAN" : "");
  }
  const cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) fprintf(stderr, "%s: head bench: %s\n", m->name, cudaGetErrorString(err));
  fflush(stdout);
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  vr_cuda_gemm_free(g);
  cudaFree(x), cudaFree(W), cudaFree(tgt), cudaFree(logits), cudaFree(lp16), cudaFree(lpmax), cudaFree(lse);
  cudaFree(ent), cudaFree(logp);
  free(hx), free(hw), free(ht);
  return err != cudaSuccess;
}

int main(int argc, char **argv) {
  const char *which = "all";
  /* VR_CUTRAIN_ATTN_BWD_*'s values in order */
  static const char *const attn_names[] = {"auto", "generic", "mma", "wgmma", "wgmma-ss", "wgmma-ra",
                                           "wgmma-co", "wgmma-cop", "wgmma-co4", "wgmma-co4h"};
  int seqs = 16, len = 1024, iters = 5, recompute = 0, staged = 0, tune = 0, attn = 0, inter = 0, lmh = 0, head = 0,
      dxn = 0, mlp = 0, optim = 0;
  double gemm = 781.0;
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) {
      fprintf(stderr, "%s: %s needs a value\n", argv[0], argv[i]);
      return 2;
    }
    if (!strcmp(argv[i], "--model"))
      which = argv[i + 1];
    else if (!strcmp(argv[i], "--seqs"))
      seqs = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--len"))
      len = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--iters"))
      iters = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--gemm-tflops"))
      gemm = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--recompute"))
      recompute = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--staged"))
      staged = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--tune-gemm"))
      tune = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--bias-layout") && (!strcmp(argv[i + 1], "grouped") || !strcmp(argv[i + 1], "interleaved")))
      inter = !strcmp(argv[i + 1], "interleaved");
    else if (!strcmp(argv[i], "--dxn") &&
             (!strcmp(argv[i + 1], "bf16") || !strcmp(argv[i + 1], "f32") || !strcmp(argv[i + 1], "both")))
      dxn = !strcmp(argv[i + 1], "f32") ? 1 : !strcmp(argv[i + 1], "both") ? 2 : 0;
    else if (!strcmp(argv[i], "--mlp")) {
      mlp = -1; /* unless named; "both": cublas, then fused, per model */
      for (int k = 0; k < 3; ++k)
        if (!strcmp(argv[i + 1], k_lmhead_names[k])) mlp = k;
      if (!strcmp(argv[i + 1], "both")) mlp = 3;
    } else if (!strcmp(argv[i], "--optim")) {
      optim = -1; /* unless named; "both": overlap, then serial, per model */
      for (int k = 0; k < 3; ++k)
        if (!strcmp(argv[i + 1], k_optim_names[k])) optim = k;
      if (!strcmp(argv[i + 1], "both")) optim = 3;
    } else if (!strcmp(argv[i], "--head"))
      head = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--lmhead")) {
      lmh = -1; /* unless named; "both": cublas, then fused; "forms": fused, fused-pp, fused-pp2; per model */
      for (int k = 0; k < 5; ++k)
        if (!strcmp(argv[i + 1], k_lmhead_names[k])) lmh = k;
      if (!strcmp(argv[i + 1], "both")) lmh = 5;
      if (!strcmp(argv[i + 1], "forms")) lmh = 6;
    } else if (!strcmp(argv[i], "--attn-bwd")) {
      attn = -1; /* unless named */
      for (int k = 0; k < (int)(sizeof attn_names / sizeof attn_names[0]); ++k)
        if (!strcmp(argv[i + 1], attn_names[k])) attn = k;
    } else {
      fprintf(stderr,
              "usage: %s [--model qwen2-0.5b|llama-3.2-1b|all] [--seqs N] [--len S] [--iters K] "
              "[--gemm-tflops R] [--recompute 0|1] [--staged 0|1] [--tune-gemm 0|1|2|3] "
              "[--attn-bwd auto|generic|mma|wgmma|wgmma-ss|wgmma-ra|wgmma-co|wgmma-cop|wgmma-co4|wgmma-co4h] "
              "[--bias-layout grouped|interleaved] [--lmhead auto|cublas|fused|fused-pp|fused-pp2|both|forms] [--head 0|1] "
              "[--dxn bf16|f32|both] [--mlp auto|cublas|fused|both] [--optim auto|overlap|serial|both]\n",
              argv[0]);
      return 2;
    }
  }
  if (seqs < 1 || len < 2 || iters < 1 || !(gemm > 0) || attn < 0 || lmh < 0 || mlp < 0 || optim < 0) {
    fprintf(stderr, "bad arguments\n");
    return 2;
  }
  int rc = 0, ran = 0;
  for (size_t i = 0; i < sizeof k_shapes / sizeof k_shapes[0]; ++i)
    if ((!strcmp(which, "all") || !strcmp(which, k_shapes[i].name)) && head)
      rc |= bench_head(&k_shapes[i], seqs * len, iters), ++ran;
    else if (!strcmp(which, "all") || !strcmp(which, k_shapes[i].name))
      for (int hi = 0; hi < (lmh == 5 ? 2 : lmh == 6 ? 3 : 1); ++hi) {
        static const int forms[3] = {VR_CUTRAIN_LMHEAD_FUSED, VR_CUTRAIN_LMHEAD_FUSED_PP, VR_CUTRAIN_LMHEAD_FUSED_PP2};
        const int h = lmh == 5 ? 1 + hi : lmh == 6 ? forms[hi] : lmh;
        for (int x = dxn == 2 ? 0 : dxn; x <= (dxn == 2 ? 1 : dxn); ++x)
          for (int u = mlp == 3 ? 1 : mlp; u <= (mlp == 3 ? 2 : mlp); ++u)
            for (int o = optim == 3 ? 1 : optim; o <= (optim == 3 ? 2 : optim); ++o)
              rc |= bench(&k_shapes[i], seqs, len, iters, gemm, recompute, staged, tune, attn, inter, h, x, u, o),
                  ++ran;
      }
  if (!ran) fprintf(stderr, "unknown model %s\n", which);
  return ran ? rc : 2;
}
