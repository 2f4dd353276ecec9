/* test_cuda_weight_sync.c (label gpu): the actor -> rollout weight update on one GPU, actor and
 * rollout colocated in one worker (ctest runs `mpirun -np 2`: the controller and one worker holding
 * both roles on cuda:0, the weight-sync group of one member).
 *
 * On each causal-LM fixture (tests/fixtures/lm/<name>): the worker builds the CUDA training engine
 * (the actor) and the CUDA rollout engine on the same checkpoint, generates, takes one AdamW step
 * and calls vr_rollout_sync_weights with the actor's own device parameter buffer
 * (vr_train_param_buffer): the rollout converts straight from it on the device (set_weights_device:
 * no host round trip, no staging). Then
 *   1. the rollout's greedy tokens equal those of an engine given the same step's parameters
 *      through the host (vr_train_get_params + vr_rollout_set_params: what a fresh load of the new
 *      checkpoint gives; both round fp32 -> bf16 the same way), log-probs within 1e-3;
 *   2. the outputs changed (before != after);
 *   3. a third engine updated from the same device buffer in odd-sized chunks in reverse order (the
 *      path an NCCL broadcast's chunks take, vr_rollout_sync.h) gives the same outputs as 1.
 * The times of the device update and of the host path are printed. Exit 77 (skip) without a GPU.
 * Exit status 0 on every rank is the verdict. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <mpi.h>

#include "rollout_test_util.h"
#include "verl_reward/status.h"
#include "vr_comm.h"
#include "vr_devmap.h"
#include "vr_lm.h"
#include "vr_rollout_lm.h"
#include "vr_rollout_sync.h"
#include "vr_time.h"
#include "vr_train.h"


static const char MAP[] = "actor: {device_group: [0], placement_policy: hybrid}\n"
                          "rollout: {device_group: [0]}\n"
                          "colocate: [actor, rollout]\n";

static void gen(vr_rollout_t *r, vr_gen_output_t *o) {
  static const int32_t ids[] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7};
  static const uint32_t cu[] = {0, 4, 10, 14};
  vr_gen_params_t gp;
  vr_gen_params_init(&gp);
  gp.max_new_tokens = 24;
  RT_CHECK(vr_rollout_generate(r, ids, cu, 3, &gp, o) == 0);
}

/* Tokens equal, log-probs within tol (tol 0: bit for bit). */
static int close_out(const vr_gen_output_t *a, const vr_gen_output_t *b, float tol) {
  if (a->n_resp != b->n_resp || memcmp(a->cu, b->cu, (a->n_resp + 1) * sizeof(uint32_t)) != 0) return 0;
  const uint32_t n = a->cu[a->n_resp];
  if (memcmp(a->tokens, b->tokens, n * sizeof(int32_t)) != 0) return 0;
  for (uint32_t i = 0; i < n; i++)
    if (!(fabsf(a->logprobs[i] - b->logprobs[i]) <= tol)) return 0;
  return 1;
}

/* One AdamW step on a fixed batch (raise the log-prob of a sequence), lr large enough to move
 * every greedy choice of the tiny fixtures. */
static void step(vr_train_t *t) {
  static const int32_t ids[] = {7, 11, 13, 17, 19, 23, 29, 31};
  static const uint32_t cu[] = {0, 8};
  vr_train_batch_t b = {.ids = ids, .cu_seqlens = cu, .n_seqs = 1, .mask = NULL};
  float out[8], dout[8];
  RT_CHECK(vr_train_zero_grad(t) == 0);
  RT_CHECK(vr_train_forward(t, &b, 1.0f, out, NULL, 1) == 0);
  for (int i = 0; i < 8; i++) dout[i] = i ? -1.0f / 7 : 0.0f;
  RT_CHECK(vr_train_backward(t, dout, NULL) == 0);
  vr_adamw_t h;
  vr_adamw_init(&h);
  h.lr = 3e-2f;
  double norm;
  RT_CHECK(vr_train_step(t, &h, 0.0f, &norm) == 0);
}

static void one(vr_world_t *w, vr_group_t *g, const char *name) {
  const char *root = getenv("VR_FIXTURES");
  char dir[4096], dev[32];
  snprintf(dir, sizeof dir, "%s/lm/%s", root ? root : "tests/fixtures", name);
  snprintf(dev, sizeof dev, "cuda:%d", w->cuda_device);
  vr_lm_t *lm = NULL;
  RT_CHECK(vr_lm_load(dir, NULL, &lm) == 0);
  const size_t nf = vr_lm_n_floats(lm);
  vr_train_options_t to;
  vr_train_options_init(&to);
  to.device = dev;
  vr_train_t *t = NULL;
  RT_CHECK(vr_train_init(lm, &to, &t) == 0);
  vr_rollout_options_t ro;
  vr_rollout_options_init(&ro);
  ro.device = dev;
  vr_rollout_lm_t v1, v2, v3;
  vr_rollout_t *r = NULL, *host = NULL, *chunked = NULL;
  RT_CHECK(vr_rollout_from_lm(lm, &ro, &v1, &r) == 0);
  RT_CHECK(vr_rollout_from_lm(lm, &ro, &v2, &host) == 0);
  RT_CHECK(vr_rollout_from_lm(lm, &ro, &v3, &chunked) == 0);
  RT_CHECK(vr_rollout_has_device_update(r));
  vr_gen_output_t before, after, want, after_c;
  gen(r, &before);
  step(t);
  double secs = -1, hsecs = -1, dsum = 0;
  RT_CHECK(vr_rollout_sync_weights(w, g, 0, vr_train_param_buffer(t), 1, nf, r, &secs) == 0);
  gen(r, &after);
  float *p = malloc(nf * sizeof *p);
  RT_CHECK(p != NULL);
  const uint64_t t0 = vr_now_ns();
  RT_CHECK(vr_train_get_params(t, p, nf) == 0);
  RT_CHECK(vr_rollout_set_params(host, p, nf, NULL) == 0);
  hsecs = (double)(vr_now_ns() - t0) * 1e-9;
  gen(host, &want);
  const float *dp = vr_train_param_buffer(t);
  const size_t ch = nf / 7 + 13; /* odd chunks, crossing tensor boundaries, last one short */
  for (size_t k = (nf + ch - 1) / ch; k-- > 0;) {
    const size_t off = k * ch, len = nf - off < ch ? nf - off : ch;
    double s = 0;
    RT_CHECK(vr_rollout_set_params_device(chunked, dp + off, off, len, &s) == 0);
    dsum += s;
  }
  gen(chunked, &after_c);
  /* out-of-range updates are refused */
  RT_CHECK(vr_rollout_set_params_device(chunked, dp, nf - 3, 4, NULL) == VR_ERR_INVAL);
  const int eq = close_out(&after, &want, 1e-3f), changed = !close_out(&before, &after, 1e-3f);
  const int ceq = close_out(&after_c, &after, 1e-3f);
  printf("%s: %zu floats (%.1f MiB fp32): colocated device sync %.3f ms, host path (download + upload) %.3f ms, "
         "chunked %.3f ms; after sync == host-loaded engine %s, outputs changed %s, chunked == whole %s\n",
         name, nf, nf * 4.0 / (1 << 20), secs * 1e3, hsecs * 1e3, dsum * 1e3, eq ? "yes" : "NO",
         changed ? "yes" : "NO", ceq ? "yes" : "NO");
  RT_CHECK(eq && changed && ceq);
  vr_gen_output_free(&before), vr_gen_output_free(&after), vr_gen_output_free(&want), vr_gen_output_free(&after_c);
  free(p);
  vr_rollout_free(r), vr_rollout_free(host), vr_rollout_free(chunked);
  vr_rollout_lm_view_free(&v1), vr_rollout_lm_view_free(&v2), vr_rollout_lm_view_free(&v3);
  vr_train_free(t);
  vr_lm_free(lm);
}

int main(void) {
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1) {
    fprintf(stderr, "test_cuda_weight_sync: no CUDA device, skipped\n");
    return 77;
  }
  vr_devmap_t map;
  char err[4096];
  RT_CHECK(vr_devmap_parse("sync.yaml", MAP, sizeof MAP - 1, NULL, &map, err, sizeof err) == 0);
  vr_world_t w;
  RT_CHECK(vr_world_init(&w, &map, 120.0, NULL, NULL) == 0);
  if (w.worker >= 0) {
    vr_group_t *g = w.groups[VR_GROUP_WEIGHT_SYNC];
    RT_CHECK(g != NULL && vr_group_size(g) == 1 && w.cuda_device >= 0);
    one(&w, g, "llama_lm");
    one(&w, g, "qwen2_lm"); /* biases on q/k/v (bf16 in the fused bias), tied embeddings */
    one(&w, g, "mistral_lm");
  }
  vr_world_free(&w);
  MPI_Finalize();
  return 0;
}
