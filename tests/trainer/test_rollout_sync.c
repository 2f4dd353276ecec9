/* test_rollout_sync.c: the actor -> rollout weight update through the weight-sync group, as real
 * processes under mpirun (ctest runs `mpirun -np 3`: the controller, an actor worker on cpu:0, a
 * rollout worker on cpu:1, the groups on MPI).
 *
 * 1. In-memory models: the rollout worker builds its engine on model A and generates; the actor
 *    broadcasts model B's parameter buffer; the rollout's outputs then equal those of an engine
 *    built on B from scratch (greedy and sampled), and differ from A's.
 * 2. The real pair: both load tests/fixtures/lm/llama_lm; the actor's training engine (vr_train)
 *    takes one AdamW step and broadcasts its own parameter buffer (vr_train_param_buffer); the
 *    rollout's outputs equal those of an engine on the same step's parameters computed locally
 *    (the cpu training step is deterministic), and differ from before the step.
 * The sync times are printed. Exit status 0 on every rank is the verdict (mpirun fails when one
 * rank does). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rollout_test_util.h"
#include "vr_rollout_lm.h"
#include "vr_train.h"
#include <mpi.h>

#include "vr_comm.h"
#include "vr_devmap.h"
#include "vr_rollout_sync.h"


static const char MAP[] = "actor:\n  device_group: [\"cpu:0\"]\n  nccl_backend: mpi\n"
                          "rollout:\n  device_group: [\"cpu:1\"]\n";

static const rt_shape_t SHAPE = {.vocab = 61, .hidden = 32, .layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 8,
                                 .inter = 48, .max_pos = 96, .qkv_bias = 1};

static void gen(vr_rollout_t *r, float T, vr_gen_output_t *o) {
  static const int32_t ids[] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
  static const uint32_t cu[] = {0, 4, 10};
  vr_gen_params_t gp;
  vr_gen_params_init(&gp);
  gp.max_new_tokens = 30;
  gp.n = 2;
  gp.seed = 5;
  gp.sample.temperature = T;
  RT_CHECK(vr_rollout_generate(r, ids, cu, 2, &gp, o) == 0);
}

static int same(const vr_gen_output_t *a, const vr_gen_output_t *b) {
  return a->cu[a->n_resp] == b->cu[b->n_resp] &&
         memcmp(a->tokens, b->tokens, a->cu[a->n_resp] * sizeof(int32_t)) == 0 &&
         memcmp(a->logprobs, b->logprobs, a->cu[a->n_resp] * sizeof(float)) == 0;
}

/* One AdamW step of the training engine on a fixed batch (maximise the log-prob of a sequence). */
static vr_train_t *trained(const vr_lm_t *lm) {
  vr_train_options_t o;
  vr_train_options_init(&o);
  o.n_threads = 1;
  vr_train_t *t = NULL;
  RT_CHECK(vr_train_init(lm, &o, &t) == 0);
  static const int32_t ids[] = {7, 11, 13, 17, 19, 23, 29, 31};
  static const uint32_t cu[] = {0, 8};
  vr_train_batch_t b = {.ids = ids, .cu_seqlens = cu, .n_seqs = 1, .mask = NULL};
  float out[8], dout[8];
  RT_CHECK(vr_train_forward(t, &b, 1.0f, out, NULL, 1) == 0);
  for (int i = 0; i < 8; i++) dout[i] = i ? -1.0f / 7 : 0.0f;
  RT_CHECK(vr_train_backward(t, dout, NULL) == 0);
  vr_adamw_t h;
  vr_adamw_init(&h);
  h.lr = 3e-2f;
  double norm;
  RT_CHECK(vr_train_step(t, &h, 0.0f, &norm) == 0);
  return t;
}

static void real_pair(vr_world_t *w, vr_group_t *g) {
  const char *root = getenv("VR_FIXTURES");
  char dir[4096];
  snprintf(dir, sizeof dir, "%s/lm/llama_lm", root ? root : "tests/fixtures");
  vr_lm_t *lm = NULL;
  RT_CHECK(vr_lm_load(dir, NULL, &lm) == 0);
  const size_t nf = vr_lm_n_floats(lm);
  if (vr_group_rank(g) == 0) { /* the actor: a step, then its own buffer goes out */
    vr_train_t *t = trained(lm);
    RT_CHECK(vr_rollout_sync_weights(w, g, 0, vr_train_param_buffer(t), 0, nf, NULL, NULL) == 0);
    vr_train_free(t);
  } else {
    vr_rollout_lm_t v, v2;
    vr_rollout_t *r = NULL, *want = NULL;
    RT_CHECK(vr_rollout_from_lm(lm, NULL, &v, &r) == 0);
    vr_gen_output_t before, after, expect;
    gen(r, 0.0f, &before);
    double secs = -1;
    RT_CHECK(vr_rollout_sync_weights(w, g, 0, NULL, 0, nf, r, &secs) == 0);
    printf("weight sync after a training step: %zu floats in %.3f ms\n", nf, secs * 1e3);
    gen(r, 0.0f, &after);
    vr_train_t *t = trained(lm); /* the same step here: deterministic on cpu */
    float *p = malloc(nf * sizeof *p);
    RT_CHECK(p && vr_train_get_params(t, p, nf) == 0);
    RT_CHECK(vr_rollout_from_lm(lm, NULL, &v2, &want) == 0);
    RT_CHECK(vr_rollout_set_params(want, p, nf, NULL) == 0);
    gen(want, 0.0f, &expect);
    RT_CHECK(same(&after, &expect));
    RT_CHECK(!same(&before, &after));
    vr_gen_output_free(&before), vr_gen_output_free(&after), vr_gen_output_free(&expect);
    free(p);
    vr_train_free(t);
    vr_rollout_free(r), vr_rollout_free(want);
    vr_rollout_lm_view_free(&v), vr_rollout_lm_view_free(&v2);
  }
  vr_lm_free(lm);
}

int main(void) {
  vr_devmap_t map;
  char err[4096];
  RT_CHECK(vr_devmap_parse("sync.yaml", MAP, sizeof MAP - 1, NULL, &map, err, sizeof err) == 0);
  vr_world_t w;
  RT_CHECK(vr_world_init(&w, &map, 60.0, NULL, NULL) == 0);
  int rc = 0;
  if (w.worker >= 0) {
    vr_group_t *g = w.groups[VR_GROUP_WEIGHT_SYNC];
    RT_CHECK(g != NULL && vr_group_size(g) == 2 && !vr_group_is_device(g));
    rt_model_t a, b;
    rt_model_random(&a, &SHAPE, 101, 0.35f);
    rt_model_random(&b, &SHAPE, 202, 0.35f);
    if (vr_group_rank(g) == 0) { /* the actor: sends B */
      RT_CHECK(vr_rollout_sync_weights(&w, g, 0, b.params, 0, b.n_params, NULL, NULL) == 0);
    } else {
      vr_rollout_t *r = NULL, *fresh = NULL;
      RT_CHECK(vr_rollout_init(&a.cfg, a.params, a.n_params, &a.w, NULL, &r) == 0);
      RT_CHECK(vr_rollout_init(&b.cfg, b.params, b.n_params, &b.w, NULL, &fresh) == 0);
      vr_gen_output_t before, after, want, after_s, want_s;
      gen(r, 0.0f, &before);
      double secs = -1;
      RT_CHECK(vr_rollout_sync_weights(&w, g, 0, NULL, 0, b.n_params, r, &secs) == 0);
      RT_CHECK(secs >= 0);
      printf("weight sync: %zu parameters (%.1f KiB) in %.3f ms\n", b.n_params, b.n_params * 4 / 1024.0, secs * 1e3);
      gen(r, 0.0f, &after);
      gen(fresh, 0.0f, &want);
      RT_CHECK(same(&after, &want));
      RT_CHECK(!same(&before, &after));
      gen(r, 0.9f, &after_s);
      gen(fresh, 0.9f, &want_s);
      RT_CHECK(same(&after_s, &want_s));
      vr_gen_output_free(&before), vr_gen_output_free(&after), vr_gen_output_free(&want);
      vr_gen_output_free(&after_s), vr_gen_output_free(&want_s);
      vr_rollout_free(r);
      vr_rollout_free(fresh);
    }
    rt_model_free(&a);
    rt_model_free(&b);
    real_pair(&w, g);
  }
  vr_world_free(&w);
  MPI_Finalize();
  return rc;
}
