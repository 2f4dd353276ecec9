/* test_rollout_sync.c: the actor -> rollout weight update through the weight-sync group, as real
 * processes under mpirun (ctest runs `mpirun -np 3`: the controller, an actor worker on cpu:0, a
 * rollout worker on cpu:1, the groups on MPI).
 *
 * The rollout worker builds its engine on model A and generates; the actor broadcasts model B's
 * parameter buffer; the rollout's outputs then equal those of an engine built on B from scratch
 * (greedy and sampled), and differ from A's. The sync time is printed. Exit status 0 on every rank
 * is the verdict (mpirun fails when one rank does). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rollout_test_util.h"
#include <mpi.h>

#include "vr_comm.h"
#include "vr_devmap.h"
#include "vr_rollout_sync.h"

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "test_rollout_sync: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

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
  CHECK(vr_rollout_generate(r, ids, cu, 2, &gp, o) == 0);
}

static int same(const vr_gen_output_t *a, const vr_gen_output_t *b) {
  return a->cu[a->n_resp] == b->cu[b->n_resp] &&
         memcmp(a->tokens, b->tokens, a->cu[a->n_resp] * sizeof(int32_t)) == 0 &&
         memcmp(a->logprobs, b->logprobs, a->cu[a->n_resp] * sizeof(float)) == 0;
}

int main(void) {
  vr_devmap_t map;
  char err[4096];
  CHECK(vr_devmap_parse("sync.yaml", MAP, sizeof MAP - 1, NULL, &map, err, sizeof err) == 0);
  vr_world_t w;
  CHECK(vr_world_init(&w, &map, 60.0, NULL) == 0);
  int rc = 0;
  if (w.worker >= 0) {
    vr_group_t *g = w.groups[VR_GROUP_WEIGHT_SYNC];
    CHECK(g != NULL && vr_group_size(g) == 2 && !vr_group_is_device(g));
    rt_model_t a, b;
    rt_model_random(&a, &SHAPE, 101, 0.35f);
    rt_model_random(&b, &SHAPE, 202, 0.35f);
    if (vr_group_rank(g) == 0) { /* the actor: sends B */
      CHECK(vr_rollout_sync_weights(&w, g, 0, b.params, b.n_params, NULL, NULL) == 0);
    } else {
      vr_rollout_t *r = NULL, *fresh = NULL;
      CHECK(vr_rollout_init(&a.cfg, a.params, a.n_params, &a.w, NULL, &r) == 0);
      CHECK(vr_rollout_init(&b.cfg, b.params, b.n_params, &b.w, NULL, &fresh) == 0);
      vr_gen_output_t before, after, want, after_s, want_s;
      gen(r, 0.0f, &before);
      double secs = -1;
      CHECK(vr_rollout_sync_weights(&w, g, 0, NULL, b.n_params, r, &secs) == 0);
      CHECK(secs >= 0);
      printf("weight sync: %zu parameters (%.1f KiB) in %.3f ms\n", b.n_params, b.n_params * 4 / 1024.0, secs * 1e3);
      gen(r, 0.0f, &after);
      gen(fresh, 0.0f, &want);
      CHECK(same(&after, &want));
      CHECK(!same(&before, &after));
      gen(r, 0.9f, &after_s);
      gen(fresh, 0.9f, &want_s);
      CHECK(same(&after_s, &want_s));
      vr_gen_output_free(&before), vr_gen_output_free(&after), vr_gen_output_free(&want);
      vr_gen_output_free(&after_s), vr_gen_output_free(&want_s);
      vr_rollout_free(r);
      vr_rollout_free(fresh);
    }
    rt_model_free(&a);
    rt_model_free(&b);
  }
  vr_world_free(&w);
  MPI_Finalize();
  return rc;
}
