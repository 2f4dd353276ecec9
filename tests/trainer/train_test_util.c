/* train_test_util.c: see train_test_util.h. */
#include "train_test_util.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model_test_util.h"

void tr_fixture_dir(char *path, size_t cap, const char *name) {
  const char *fx = getenv("VR_FIXTURES");
  snprintf(path, cap, "%s/lm/%s", fx ? fx : "tests/fixtures", name);
}

void tr_golden_load(const char *name, tr_golden_t *g) {
  memset(g, 0, sizeof *g);
  tr_fixture_dir(g->dir, sizeof g->dir, name);
  char path[1200];
  size_t len;
  snprintf(path, sizeof path, "%s/golden.json", g->dir);
  char *text = mt_read_file(path, &len);
  g->root = cJSON_ParseWithLength(text, len);
  free(text);
  assert_non_null(g->root);
  const cJSON *seqs = cJSON_GetObjectItem(g->root, "sequences");
  assert_true(cJSON_IsArray(seqs));
  g->n = (uint32_t)cJSON_GetArraySize(seqs);
  g->cu = calloc(g->n + 1, sizeof *g->cu);
  uint32_t T = 0;
  for (const cJSON *s = seqs->child; s; s = s->next) T += (uint32_t)cJSON_GetArraySize(s);
  g->ids = calloc(T ? T : 1, sizeof *g->ids);
  uint32_t q = 0, t = 0;
  for (const cJSON *s = seqs->child; s; s = s->next, q++) {
    for (const cJSON *v = s->child; v; v = v->next) g->ids[t++] = v->valueint;
    g->cu[q + 1] = t;
  }
  g->T = T;
  snprintf(path, sizeof path, "%s/grads.bin", g->dir);
  char *bin = mt_read_file(path, &len);
  g->grads = (float *)bin;
  g->n_grads = len / sizeof(float);
}

void tr_golden_free(tr_golden_t *g) {
  cJSON_Delete(g->root);
  free(g->ids);
  free(g->cu);
  free(g->grads);
}

void tr_golden_rows(const cJSON *lists, const tr_golden_t *g, int shift, double *out) {
  assert_true(cJSON_IsArray(lists));
  memset(out, 0, g->T * sizeof *out);
  uint32_t q = 0;
  for (const cJSON *l = lists->child; l; l = l->next, q++) {
    uint32_t i = 0;
    for (const cJSON *v = l->child; v; v = v->next, i++) out[g->cu[q] + (uint32_t)shift + i] = v->valuedouble;
    assert_int_equal(i + (uint32_t)shift, g->cu[q + 1] - g->cu[q]);
  }
  assert_int_equal(q, g->n);
}

double tr_grads_vs(const vr_lm_t *lm, const float *a, const float *b, const char **worst) {
  double w = 0;
  for (size_t i = 0; i < vr_lm_n_tensors(lm); ++i) {
    const vr_lm_tensor_t *x = vr_lm_tensor(lm, i);
    double md = 0, mb = 0;
    for (size_t k = 0; k < x->numel; ++k) {
      md = fmax(md, fabs((double)a[x->offset + k] - b[x->offset + k]));
      mb = fmax(mb, fabs((double)b[x->offset + k]));
    }
    const double r = mb > 0 ? md / mb : md;
    if (r > w) {
      w = r;
      if (worst) *worst = x->name;
    }
  }
  return w;
}

double tr_grads_check(const vr_lm_t *lm, const float *grads, const tr_golden_t *g, const char *set) {
  const cJSON *idx = cJSON_GetObjectItem(cJSON_GetObjectItem(g->root, "grads"), set);
  assert_true(cJSON_IsArray(idx));
  assert_int_equal((size_t)cJSON_GetArraySize(idx), vr_lm_n_tensors(lm));
  double worst = 0;
  const char *worst_name = "";
  for (const cJSON *e = idx->child; e; e = e->next) {
    const char *name = cJSON_GetObjectItem(e, "name")->valuestring;
    size_t off = (size_t)cJSON_GetObjectItem(e, "offset")->valuedouble;
    int i = vr_lm_find(lm, name);
    if (i < 0) fail_msg("golden gradient %s is not a tensor of the engine", name);
    const vr_lm_tensor_t *t = vr_lm_tensor(lm, (size_t)i);
    assert_true(off + t->numel <= g->n_grads);
    double mx = 0, md = 0;
    for (size_t k = 0; k < t->numel; k++) {
      double want = g->grads[off + k], got = grads[t->offset + k];
      mx = fabs(want) > mx ? fabs(want) : mx;
      md = fabs(got - want) > md ? fabs(got - want) : md;
    }
    double rel = mx > 0 ? md / mx : md;
    if (rel > worst) worst = rel, worst_name = t->name;
  }
  printf("  grads %-6s: worst tensor %s, rel err %.3g\n", set, worst_name, worst);
  return worst;
}

vr_train_t *tr_engine(const vr_lm_t *lm, int threads, int recompute, size_t vchunk) {
  vr_train_options_t o;
  vr_train_options_init(&o);
  o.n_threads = threads;
  o.recompute = recompute;
  o.vocab_chunk = vchunk;
  vr_train_t *t = NULL;
  assert_int_equal(vr_train_init(lm, &o, &t), 0);
  return t;
}

vr_lm_t *tr_lm_load(const char *name, vr_lm_head_t head) {
  char dir[1024];
  tr_fixture_dir(dir, sizeof dir, name);
  vr_lm_load_options_t o = {.head = head, .seed = 1};
  vr_lm_t *lm = NULL;
  assert_int_equal(vr_lm_load(dir, &o, &lm), 0);
  return lm;
}

double tr_max_abs_diff(const float *got, const double *want, uint32_t n) {
  double m = 0;
  for (uint32_t i = 0; i < n; i++) m = fmax(m, fabs(got[i] - want[i]));
  return m;
}

void tr_check_logprobs(vr_train_t *t, tr_golden_t *g, const char *lp_key, const char *ent_key, float tau, double tol,
                       const char *tag) {
  vr_train_batch_t b = {g->ids, g->cu, g->n, NULL};
  float *lp = calloc(g->T, sizeof *lp), *ent = calloc(g->T, sizeof *ent);
  double *want = calloc(g->T, sizeof *want);
  assert_int_equal(vr_train_forward(t, &b, tau, lp, ent, 0), 0);
  tr_golden_rows(cJSON_GetObjectItem(g->root, lp_key), g, 1, want);
  const double d1 = tr_max_abs_diff(lp, want, g->T);
  tr_golden_rows(cJSON_GetObjectItem(g->root, ent_key), g, 1, want);
  const double d2 = tr_max_abs_diff(ent, want, g->T);
  printf("  %s%s: max |logp diff| %.3g, max |entropy diff| %.3g (tolerance %g)\n", tag, lp_key, d1, d2, tol);
  assert_true(d1 <= tol);
  assert_true(d2 <= tol);
  free(lp), free(ent), free(want);
}
