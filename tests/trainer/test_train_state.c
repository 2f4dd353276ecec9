/* test_train_state.c: checkpoints and state of the training engine: vr_lm save -> load is bit
 * exact (causal LM, tied, critic); sft-style steps resumed from saved params + optimizer state
 * equal an uninterrupted run bit for bit; micro-batches accumulate to the whole batch's gradient;
 * a version-1 optimizer file (the first layout) is read into the current one, also per ZeRO-1
 * shard (exactly, or refused where the moments it needs are in another rank's file);
 * bad inputs (batches, optimizer files, directories, heads) fail with messages naming the problem. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model_test_util.h"
#include "train_test_util.h"
#include "verl_reward/status.h"
#include "vr_model.h"

static vr_lm_t *load(const char *name, vr_lm_head_t head, int want_rc) {
  char dir[1024];
  tr_fixture_dir(dir, sizeof dir, name);
  vr_lm_load_options_t o = {.head = head, .seed = 7};
  vr_lm_t *lm = NULL;
  assert_int_equal(vr_lm_load(dir, &o, &lm), want_rc);
  return lm;
}

static void roundtrip(const char *name, vr_lm_head_t head, const char *tmp) {
  vr_lm_t *a = load(name, head, 0);
  char dir[1400];
  snprintf(dir, sizeof dir, "%s/%s", tmp, name);
  assert_int_equal(vr_lm_save(a, dir), 0);
  vr_lm_load_options_t o = {.head = head};
  vr_lm_t *b = NULL;
  assert_int_equal(vr_lm_load(dir, &o, &b), 0);
  assert_int_equal(vr_lm_n_floats(a), vr_lm_n_floats(b));
  assert_int_equal(vr_lm_n_tensors(a), vr_lm_n_tensors(b));
  for (size_t i = 0; i < vr_lm_n_tensors(a); i++) assert_string_equal(vr_lm_tensor(a, i)->name, vr_lm_tensor(b, i)->name);
  assert_memory_equal(vr_lm_params(a), vr_lm_params(b), vr_lm_n_floats(a) * sizeof(float));
  assert_memory_equal(&vr_lm_config(a)->rope_theta, &vr_lm_config(b)->rope_theta, sizeof(float));
  assert_memory_equal(vr_lm_config(a)->rope_inv_freq, vr_lm_config(b)->rope_inv_freq,
                      (size_t)vr_lm_config(a)->head_dim / 2 * sizeof(float));
  char path[1500];
  snprintf(path, sizeof path, "%s/config.json", dir);
  size_t len;
  char *cfg = mt_read_file(path, &len);
  assert_non_null(strstr(cfg, vr_lm_arch_name(vr_lm_config(a)->family, head)));
  assert_non_null(strstr(cfg, "\"float32\""));
  free(cfg);
  snprintf(path, sizeof path, "%s/generation_config.json", dir);
  if (head == VR_LM_HEAD_LM) free(mt_read_file(path, &len)); /* copied */
  printf("%s: %zu tensors, %zu parameters round-trip bit-exact\n", name, vr_lm_n_tensors(a), vr_lm_n_params(a));
  vr_lm_free(a);
  vr_lm_free(b);
}

static void test_save_load(void **state) {
  (void)state;
  const char *tmp = mt_tmp;
  roundtrip("llama_lm", VR_LM_HEAD_LM, tmp);
  roundtrip("qwen2_lm", VR_LM_HEAD_LM, tmp);
  roundtrip("mistral_lm", VR_LM_HEAD_LM, tmp);
  roundtrip("qwen2_critic", VR_LM_HEAD_VALUE, tmp);
  /* a value head from a causal LM: seeded, reproducible, N(0, 0.02^2)-sized, bias 0 */
  vr_lm_t *a = load("qwen2_lm", VR_LM_HEAD_VALUE, 0), *b = load("qwen2_lm", VR_LM_HEAD_VALUE, 0);
  const vr_lm_index_t *ix = vr_lm_index(a);
  assert_true(ix->lm_head < 0 && ix->score_w >= 0 && ix->score_b >= 0);
  const float *sw = vr_lm_params(a) + vr_lm_tensor(a, (size_t)ix->score_w)->offset;
  assert_memory_equal(sw, vr_lm_params(b) + vr_lm_tensor(b, (size_t)ix->score_w)->offset, 32 * sizeof(float));
  double ss = 0;
  for (int i = 0; i < 32; i++) ss += (double)sw[i] * sw[i];
  assert_true(sqrt(ss / 32) > 0.005 && sqrt(ss / 32) < 0.05);
  assert_true(vr_lm_params(a)[vr_lm_tensor(a, (size_t)ix->score_b)->offset] == 0.0f);
  vr_lm_free(a);
  vr_lm_free(b);
}

/* Token-mean NLL gradients over micro-batches of budget tokens (vr_train_split). */
static void accumulate(vr_train_t *t, const tr_golden_t *g, uint32_t budget, float *grads, size_t n) {
  uint32_t starts[64];
  uint32_t nb = vr_train_split(g->cu, g->n, budget, starts);
  float *lp = calloc(g->T, sizeof *lp), *d = calloc(g->T, sizeof *d);
  uint32_t N = g->T - g->n;
  assert_int_equal(vr_train_zero_grad(t), 0);
  for (uint32_t k = 0; k < nb; k++) {
    uint32_t cu[64], q0 = starts[k], q1 = starts[k + 1], base = g->cu[q0];
    for (uint32_t q = q0; q <= q1; q++) cu[q - q0] = g->cu[q] - base;
    vr_train_batch_t b = {g->ids + base, cu, q1 - q0, NULL};
    assert_int_equal(vr_train_forward(t, &b, 1.0f, lp + base, NULL, 1), 0);
    for (uint32_t i = 0; i < g->T; i++) d[i] = 0;
    for (uint32_t q = q0; q < q1; q++)
      for (uint32_t i = g->cu[q] + 1; i < g->cu[q + 1]; i++) d[i] = -1.0f / (float)N;
    assert_int_equal(vr_train_backward(t, d + base, NULL), 0);
  }
  if (grads) assert_int_equal(vr_train_get_grads(t, grads, n), 0);
  free(lp);
  free(d);
}

static void test_microbatch_and_resume(void **state) {
  (void)state;
  const char *tmp = mt_tmp;
  tr_golden_t g;
  tr_golden_load("llama_lm", &g);
  vr_lm_t *lm = load("llama_lm", VR_LM_HEAD_LM, 0);
  vr_train_t *t = tr_engine(lm, 0, 0, 0);
  size_t n = vr_train_n_floats(t);
  float *whole = malloc(n * sizeof *whole), *micro = malloc(n * sizeof *micro);
  accumulate(t, &g, 1u << 20, whole, n);
  uint32_t starts[64];
  assert_true(vr_train_split(g.cu, g.n, 20, starts) >= 4);
  accumulate(t, &g, 20, micro, n);
  double md = 0, mx = 0;
  for (size_t i = 0; i < n; i++) md = fmax(md, fabs(micro[i] - whole[i])), mx = fmax(mx, fabs(whole[i]));
  printf("micro-batches of <= 20 tokens vs one batch: max |grad diff| %.3g (max |grad| %.3g)\n", md, mx);
  assert_true(md <= 1e-6 * mx);
  assert_true(tr_grads_check(lm, micro, &g, "nll") <= 1e-5);
  /* 4 steps straight vs 2 steps, save params + optimizer, fresh engine, load, 2 steps */
  vr_adamw_t h = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f};
  for (int s = 0; s < 4; s++) accumulate(t, &g, 20, NULL, n), assert_int_equal(vr_train_step(t, &h, 1.0f, NULL), 0);
  float *straight = malloc(n * sizeof *straight);
  assert_int_equal(vr_train_get_params(t, straight, n), 0);
  vr_train_free(t);
  t = tr_engine(lm, 0, 0, 0);
  for (int s = 0; s < 2; s++) accumulate(t, &g, 20, NULL, n), assert_int_equal(vr_train_step(t, &h, 1.0f, NULL), 0);
  char opt[1300], ckpt[1300];
  snprintf(opt, sizeof opt, "%s/opt.vrad", tmp);
  snprintf(ckpt, sizeof ckpt, "%s/resume", tmp);
  assert_int_equal(vr_train_save_optimizer(t, opt), 0);
  assert_int_equal(vr_train_get_params(t, vr_lm_params(lm), n), 0);
  assert_int_equal(vr_lm_save(lm, ckpt), 0);
  vr_train_free(t);
  vr_lm_t *lm2 = NULL;
  assert_int_equal(vr_lm_load(ckpt, NULL, &lm2), 0);
  t = tr_engine(lm2, 0, 0, 0);
  assert_int_equal(vr_train_load_optimizer(t, opt), 0);
  assert_int_equal(vr_train_step_count(t), 2);
  for (int s = 0; s < 2; s++) accumulate(t, &g, 20, NULL, n), assert_int_equal(vr_train_step(t, &h, 1.0f, NULL), 0);
  float *resumed = malloc(n * sizeof *resumed);
  assert_int_equal(vr_train_get_params(t, resumed, n), 0);
  assert_memory_equal(straight, resumed, n * sizeof *resumed);
  assert_memory_equal(vr_train_param_buffer(t), resumed, n * sizeof *resumed); /* the cpu buffer is the params */
  assert_string_equal(vr_train_device(t), "cpu");
  printf("resume from params + optimizer state after 2 of 4 steps: bit-exact\n");
  /* a damaged optimizer file is refused with a reason */
  size_t len;
  char *bytes = mt_read_file(opt, &len);
  mt_write_file(opt, bytes, len - 4);
  mt_log_start();
  assert_int_equal(vr_train_load_optimizer(t, opt), VR_ERR_MODEL_FORMAT);
  assert_non_null(strstr(mt_log_text(), "truncated"));
  memcpy(bytes, "XXXX", 4);
  mt_write_file(opt, bytes, len);
  assert_int_equal(vr_train_load_optimizer(t, opt), VR_ERR_MODEL_FORMAT);
  assert_non_null(strstr(mt_log_text(), "magic"));
  memcpy(bytes, "VRAD", 4);
  /* every cut of the header and some of the body, a byte too many, each header field changed:
   * refused with the field named, the engine's step count and moments untouched */
  assert_int_equal(vr_train_save_optimizer(t, opt), 0); /* the engine's current state, to compare */
  char *now = mt_read_file(opt, &len);
  for (size_t cut = 0; cut < len; cut += cut < 48 ? 1 : len / 7) {
    mt_write_file(opt, now, cut);
    assert_int_equal(vr_train_load_optimizer(t, opt), VR_ERR_MODEL_FORMAT);
  }
  char *longer = malloc(len + 1);
  memcpy(longer, now, len), longer[len] = 0;
  mt_write_file(opt, longer, len + 1);
  assert_int_equal(vr_train_load_optimizer(t, opt), VR_ERR_MODEL_FORMAT);
  const struct { size_t at; int64_t v; const char *frag; } bad[] = {
      {4, 3, "version 3"}, {8, -1, "step differs"}, {16, 12345, "n_floats (another model)"},
      {24, 64, "the shard"}, {32, 64, "the shard"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    memcpy(longer, now, len);
    if (bad[i].at == 4) {
      uint32_t v = (uint32_t)bad[i].v;
      memcpy(longer + 4, &v, 4);
    } else {
      memcpy(longer + bad[i].at, &bad[i].v, 8);
    }
    mt_write_file(opt, longer, len);
    assert_int_equal(vr_train_load_optimizer(t, opt), VR_ERR_MODEL_FORMAT);
    if (!strstr(mt_log_text(), bad[i].frag)) fail_msg("expected \"%s\" in: %s", bad[i].frag, mt_log_text());
  }
  assert_int_equal(vr_train_step_count(t), 4);
  assert_int_equal(vr_train_save_optimizer(t, opt), 0);
  char *after = mt_read_file(opt, &len);
  assert_memory_equal(now, after, len);
  free(now), free(longer), free(after);
  mt_log_stop();
  free(bytes);
  vr_train_free(t);
  vr_lm_free(lm2);
  free(whole), free(micro), free(straight), free(resumed);
  vr_lm_free(lm);
  tr_golden_free(&g);
}

/* An optimizer state file of version 1 (every bias right after its weight: vr_lm_offsets_v1) on a
 * model with qkv biases, whose layout now differs: read into this layout, it saves (version 2)
 * the same bytes as the state it was made from. */
static void test_optimizer_v1(void **state) {
  (void)state;
  tr_golden_t g;
  tr_golden_load("qwen2_lm", &g);
  vr_lm_t *lm = load("qwen2_lm", VR_LM_HEAD_LM, 0);
  const size_t n = vr_lm_n_floats(lm), nt = vr_lm_n_tensors(lm);
  size_t *v1 = malloc(nt * sizeof *v1), moved = 0;
  vr_lm_offsets_v1(lm, v1);
  for (size_t i = 0; i < nt; i++) moved += v1[i] != vr_lm_tensor(lm, i)->offset;
  printf("qwen2_lm: %zu of %zu tensors at another offset in the version-1 layout\n", moved, nt);
  assert_true(moved > 0);
  /* layer 0 of the first layout as c8bd4b5's vr_lm laid it out (each bias after its weight, every
   * tensor padded to 64 floats), pinned here rather than derived from vr_lm_offsets_v1 */
  const vr_lm_layer_index_t *L0 = &vr_lm_index(lm)->layers[0];
  const int who[7] = {L0->q_w, L0->q_b, L0->k_w, L0->k_b, L0->v_w, L0->v_b, L0->o_w};
  const size_t was[7] = {8256, 9280, 9344, 9856, 9920, 10432, 10496};
  for (int k = 0; k < 7; k++) assert_int_equal(v1[who[k]], was[k]);
  vr_train_t *t = tr_engine(lm, 0, 0, 0);
  vr_adamw_t h = {1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f};
  for (int k = 0; k < 2; k++) accumulate(t, &g, 1u << 20, NULL, n), assert_int_equal(vr_train_step(t, &h, 1.0f, NULL), 0);
  char opt[1300], opt1[1300];
  snprintf(opt, sizeof opt, "%s/opt2.vrad", mt_tmp);
  snprintf(opt1, sizeof opt1, "%s/opt1.vrad", mt_tmp);
  assert_int_equal(vr_train_save_optimizer(t, opt), 0);
  vr_train_free(t);
  size_t len;
  char *now = mt_read_file(opt, &len);
  const size_t hdr = len - 2 * n * sizeof(float);
  char *old = calloc(1, len);
  memcpy(old, now, hdr);
  const uint32_t one = 1;
  memcpy(old + 4, &one, 4);
  for (int mv = 0; mv < 2; mv++) { /* m, then v */
    const float *src = (const float *)(now + hdr) + (size_t)mv * n;
    float *dst = (float *)(old + hdr) + (size_t)mv * n;
    for (size_t i = 0; i < nt; i++)
      memcpy(dst + v1[i], src + vr_lm_tensor(lm, i)->offset, vr_lm_tensor(lm, i)->numel * sizeof(float));
  }
  mt_write_file(opt1, old, len);
  assert_true(memcmp(old + hdr, now + hdr, len - hdr) != 0);
  t = tr_engine(lm, 0, 0, 0);
  assert_int_equal(vr_train_load_optimizer(t, opt1), 0);
  assert_int_equal(vr_train_step_count(t), 2);
  assert_int_equal(vr_train_save_optimizer(t, opt), 0);
  char *again = mt_read_file(opt, &len);
  assert_memory_equal(again, now, len);
  printf("qwen2_lm: a version-1 optimizer state read into this layout saves the same bytes\n");
  vr_train_free(t);
  free(now), free(old), free(again), free(v1);
  vr_lm_free(lm);
  tr_golden_free(&g);
}

/* ZeRO-1 shards of a version-1 file (3 ranks; the collectives are never called by save / load):
 * moments patterned per position in this layout, the file holding each rank's shard of the same
 * moments in the first layout. A rank loads them into this layout exactly, or (where a tensor
 * the layouts place differently needs moments outside its shard) refuses saying so; a model
 * whose layouts agree (llama_lm: no biases) loads on every rank. */
static int nop_allreduce(void *c, float *b, size_t n) { (void)c, (void)b, (void)n; return 0; }
static int nop_bcast(void *c, void *b, size_t n, int root) { (void)c, (void)b, (void)n, (void)root; return 0; }

static int v1_zero1_case(const char *name, int R) {
  vr_lm_t *lm = load(name, VR_LM_HEAD_LM, 0);
  const size_t n = vr_lm_n_floats(lm), nt = vr_lm_n_tensors(lm);
  size_t *v1 = malloc(nt * sizeof *v1);
  vr_lm_offsets_v1(lm, v1);
  float *m2 = calloc(2 * n, sizeof *m2), *m1 = calloc(2 * n, sizeof *m1); /* m then v, whole buffer */
  for (size_t i = 0; i < nt; i++) {
    const vr_lm_tensor_t *x = vr_lm_tensor(lm, i);
    for (size_t j = 0; j < x->numel; j++)
      for (int h = 0; h < 2; h++) {
        const float val = (float)(x->offset + j) + (h ? 0.5f : 0.25f);
        m2[(size_t)h * n + x->offset + j] = val, m1[(size_t)h * n + v1[i] + j] = val;
      }
  }
  int loaded = 0;
  char path[1300];
  snprintf(path, sizeof path, "%s/%s_z.vrad", mt_tmp, name);
  for (int r = 0; r < R; r++) {
    vr_train_options_t o;
    vr_train_options_init(&o);
    o.zero1 = 1, o.comm.size = R, o.comm.rank = r, o.comm.allreduce_sum = nop_allreduce, o.comm.bcast = nop_bcast;
    vr_train_t *t = NULL;
    assert_int_equal(vr_train_init(lm, &o, &t), 0);
    size_t lo, hi;
    vr_train_shard_range(t, &lo, &hi);
    const size_t k = hi - lo, hdr = 4 + 4 + 8 + 3 * 8;
    char *f = malloc(hdr + 2 * k * 4);
    const uint32_t ver = 1;
    const int64_t step = 3;
    const uint64_t hn = n, hlo = lo, hhi = hi;
    memcpy(f, "VRAD", 4), memcpy(f + 4, &ver, 4), memcpy(f + 8, &step, 8), memcpy(f + 16, &hn, 8);
    memcpy(f + 24, &hlo, 8), memcpy(f + 32, &hhi, 8);
    memcpy(f + hdr, m1 + lo, k * 4), memcpy(f + hdr + k * 4, m1 + n + lo, k * 4);
    mt_write_file(path, f, hdr + 2 * k * 4);
    mt_log_start();
    const int rc = vr_train_load_optimizer(t, path);
    const int said = strstr(mt_log_text(), "outside the file's shard") != NULL;
    mt_log_stop();
    if (rc == 0) {
      assert_int_equal(vr_train_save_optimizer(t, path), 0);
      size_t len;
      char *back = mt_read_file(path, &len);
      assert_int_equal(len, hdr + 2 * k * 4);
      assert_memory_equal(back + hdr, m2 + lo, k * 4);
      assert_memory_equal(back + hdr + k * 4, m2 + n + lo, k * 4);
      free(back);
      ++loaded;
    } else {
      assert_int_equal(rc, VR_ERR_MODEL_FORMAT);
      assert_true(said);
    }
    printf("%s: ZeRO-1 rank %d of %d, shard [%zu, %zu): version-1 state %s\n", name, r, R, lo, hi,
           rc == 0 ? "moved into this layout exactly" : "refused (moments on another rank)");
    free(f);
    vr_train_free(t);
  }
  free(v1), free(m1), free(m2);
  vr_lm_free(lm);
  return loaded;
}

static void test_optimizer_v1_zero1(void **state) {
  (void)state;
  assert_int_equal(v1_zero1_case("llama_lm", 3), 3);
  assert_int_equal(v1_zero1_case("llama_lm", 4), 4);
  /* qwen2_lm on 4 ranks: the cut at 18240 falls inside layer 1's v_proj weight, which the first
   * layout had 128 floats later (after q's and k's biases): rank 2 lacks moments rank 3 holds */
  const int q3 = v1_zero1_case("qwen2_lm", 3), q4 = v1_zero1_case("qwen2_lm", 4);
  assert_true(q3 >= 1 && q4 >= 1 && q4 < 4);
}

static void expect_fail(vr_train_t *t, const vr_train_batch_t *b, float tau, int rc, const char *frag) {
  float out[64];
  mt_log_start();
  assert_int_equal(vr_train_forward(t, b, tau, out, NULL, 1), rc);
  const char *log = mt_log_text();
  if (!strstr(log, frag)) fail_msg("expected \"%s\" in: %s", frag, log);
  mt_log_stop();
}

static void test_bad_inputs(void **state) {
  (void)state;
  vr_lm_t *lm = load("llama_lm", VR_LM_HEAD_LM, 0);
  vr_train_t *t = tr_engine(lm, 0, 0, 0);
  int32_t ids[8] = {1, 2, 3, 4, 300, 6, 7, 8};
  uint32_t cu[3] = {0, 4, 8}, cu_empty[3] = {0, 4, 4}, cu_bad[3] = {1, 4, 8};
  uint8_t mask[8] = {1, 1, 1, 1, 0, 1, 1, 1};
  vr_train_batch_t b = {ids, cu, 2, NULL};
  expect_fail(t, &b, 1.0f, VR_ERR_TOKEN_RANGE, "sequence 1 token 0 is id 300");
  ids[4] = 5;
  expect_fail(t, &b, 0.0f, VR_ERR_INVAL, "temperature");
  b.mask = mask;
  expect_fail(t, &b, 1.0f, VR_ERR_INVAL, "first token of sequence 0");
  b.mask = NULL, b.cu_seqlens = cu_empty;
  expect_fail(t, &b, 1.0f, VR_ERR_EMPTY_SEQ, "sequence 1 is empty");
  b.cu_seqlens = cu_bad;
  expect_fail(t, &b, 1.0f, VR_ERR_INVAL, "cu_seqlens[0]");
  int32_t *longer = calloc(65, sizeof *longer);
  uint32_t cu_long[2] = {0, 65};
  vr_train_batch_t bl = {longer, cu_long, 1, NULL};
  float *out = calloc(65, sizeof *out);
  mt_log_start();
  assert_int_equal(vr_train_forward(t, &bl, 1.0f, out, NULL, 1), VR_ERR_SEQ_TOO_LONG);
  assert_non_null(strstr(mt_log_text(), "max_position_embeddings 64"));
  float d[8] = {0};
  assert_int_equal(vr_train_backward(t, d, NULL), VR_ERR_INVAL); /* nothing kept */
  assert_non_null(strstr(mt_log_text(), "no forward with keep"));
  mt_log_stop();
  /* masked rows only: the rest are 0 and the wanted ones equal the unmasked forward's */
  b.cu_seqlens = cu;
  float all[8], some[8];
  mask[0] = 0;
  assert_int_equal(vr_train_forward(t, &b, 1.0f, all, NULL, 0), 0);
  b.mask = mask;
  mask[1] = mask[2] = 0;
  assert_int_equal(vr_train_forward(t, &b, 1.0f, some, NULL, 0), 0);
  for (int i = 0; i < 8; i++) assert_true(mask[i] ? some[i] == all[i] : some[i] == 0.0f);
  free(longer), free(out);
  vr_train_free(t);
  /* a vocabulary chunk past INT_MAX is the whole vocabulary (it wrapped to 0 and never ended) */
  b.mask = NULL;
  float ref[8], big[8];
  t = tr_engine(lm, 0, 0, 0);
  assert_int_equal(vr_train_forward(t, &b, 1.0f, ref, NULL, 0), 0);
  vr_train_free(t);
  t = tr_engine(lm, 0, 0, (size_t)1 << 32);
  assert_int_equal(vr_train_forward(t, &b, 1.0f, big, NULL, 0), 0);
  assert_memory_equal(ref, big, sizeof ref);
  vr_train_free(t);
  /* heads and devices */
  mt_log_start();
#ifndef VR_HAVE_CUDA /* a CUDA build has the backend (tests/cuda/test_cuda_train_backend.c) */
  vr_train_options_t o;
  vr_train_options_init(&o);
  o.device = "cuda";
  assert_int_equal(vr_train_init(lm, &o, &t), VR_ERR_UNSUPPORTED);
  assert_non_null(strstr(mt_log_text(), "CUDA training backend"));
#else /* the cuda backend's options are checked before it looks for a device */
  vr_train_options_t o;
  vr_train_options_init(&o);
  o.device = "cuda";
  o.cuda_mlp = "fast";
  assert_int_equal(vr_train_init(lm, &o, &t), VR_ERR_INVAL);
  assert_non_null(strstr(mt_log_text(), "cuda-mlp \"fast\" is not auto|cublas|fused"));
  o.cuda_mlp = NULL;
  o.cuda_gemm_tune = "yes";
  assert_int_equal(vr_train_init(lm, &o, &t), VR_ERR_INVAL);
  assert_non_null(strstr(mt_log_text(), "cuda-gemm-tune \"yes\" is not off|same-bits|any"));
  o.cuda_gemm_tune = NULL;
  o.cuda_optim = "later";
  assert_int_equal(vr_train_init(lm, &o, &t), VR_ERR_INVAL);
  assert_non_null(strstr(mt_log_text(), "cuda-optim \"later\" is not auto|overlap|serial"));
#endif
  vr_lm_free(lm);
  assert_null(load("qwen2_critic", VR_LM_HEAD_LM, VR_ERR_UNSUPPORTED));
  assert_non_null(strstr(mt_log_text(), "has no lm_head"));
  char dir[1024];
  vr_lm_t *none = NULL;
  snprintf(dir, sizeof dir, "%s/models/bert", getenv("VR_FIXTURES") ? getenv("VR_FIXTURES") : "tests/fixtures");
  assert_int_equal(vr_lm_load(dir, NULL, &none), VR_ERR_UNSUPPORTED);
  assert_non_null(strstr(mt_log_text(), "encoder"));
  assert_int_equal(vr_lm_load("/nonexistent/dir", NULL, &none), VR_ERR_NOT_FOUND);
  /* the reward runtime still refuses a causal LM, saying what it is */
  vr_model_t *rm = NULL;
  tr_fixture_dir(dir, sizeof dir, "llama_lm");
  assert_int_equal(vr_model_load(dir, NULL, &rm), VR_ERR_UNSUPPORTED);
  assert_non_null(strstr(mt_log_text(), "LlamaForCausalLM is a causal language model (lm_head), not a reward model"));
  assert_null(rm);
  assert_non_null(strstr(mt_log_text(), "config.json: not found"));
  mt_log_stop();
  assert_null(none);
}

/* A critic initialised from a reward model (*ForSequenceClassification): its value at each
 * sequence's last token is the reward model's score (the reward runtime's cpu forward). Every
 * decoder reward fixture: GQA, MQA with head_dim 16, llama3 and linear RoPE, attention and MLP
 * biases (o_proj too), qkv bias, sliding window, tied, bf16 weights, sharded files. */
static void test_critic_from_reward_models(void **state) {
  (void)state;
  static const char *const names[] = {"llama_gqa", "llama_linear_bias", "llama3_mqa", "llama_tied",
                                      "mistral_swa", "qwen2",    "qwen2_bf16",        "llama_gqa_sharded"};
  int32_t ids[40];
  for (int i = 0; i < 40; i++) ids[i] = 10 + (i * 37) % 87; /* no pad id (< 10) */
  uint32_t cu[] = {0, 7, 40};
  for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/%s", getenv("VR_FIXTURES") ? getenv("VR_FIXTURES") : "tests/fixtures", names[k]);
    vr_lm_load_options_t o = {.head = VR_LM_HEAD_VALUE};
    vr_lm_t *lm = NULL;
    assert_int_equal(vr_lm_load(dir, &o, &lm), 0);
    assert_true(vr_lm_params(lm)[vr_lm_tensor(lm, (size_t)vr_lm_index(lm)->score_b)->offset] == 0.0f);
    vr_model_t *rm = NULL;
    assert_int_equal(vr_model_load(dir, NULL, &rm), 0);
    float scores[2], values[40];
    assert_int_equal(vr_model_score(rm, ids, cu, 2, scores, NULL), 0);
    vr_train_t *t = tr_engine(lm, 0, 0, 0);
    vr_train_batch_t b = {ids, cu, 2, NULL};
    assert_int_equal(vr_train_forward(t, &b, 1.0f, values, NULL, 0), 0);
    double d = fmax(fabs(values[6] - scores[0]), fabs(values[39] - scores[1]));
    printf("critic from reward model %-18s: |last-token value - reward score| %.3g\n", names[k], d);
    assert_true(d <= 1e-5 * fmax(1.0, fabs(scores[1])));
    vr_train_free(t);
    vr_model_free(rm);
    vr_lm_free(lm);
  }
}

/* A forward-only engine (the reference policy, `logprobs`): the same log-probs, entropies and
 * values as a full engine bit for bit, and everything that needs gradients or optimizer state
 * refused with VR_ERR_UNSUPPORTED (nothing allocated for it to touch). */
static void test_forward_only(void **state) {
  (void)state;
  static const struct { const char *name; vr_lm_head_t head; } cases[] = {
      {"llama_lm", VR_LM_HEAD_LM}, {"qwen2_lm", VR_LM_HEAD_LM}, {"mistral_lm", VR_LM_HEAD_LM}, {"qwen2_critic", VR_LM_HEAD_VALUE}};
  int32_t ids[40];
  for (int i = 0; i < 40; i++) ids[i] = 10 + (i * 37) % 87;
  uint32_t cu[] = {0, 7, 40};
  vr_train_batch_t b = {ids, cu, 2, NULL};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    vr_lm_t *lm = tr_lm_load(cases[k].name, cases[k].head);
    vr_train_t *full = tr_engine(lm, 0, 0, 0);
    vr_train_options_t o;
    vr_train_options_init(&o);
    o.forward_only = 1;
    vr_train_t *fo = NULL;
    assert_int_equal(vr_train_init(lm, &o, &fo), 0);
    float a[40], ea[40], c[40], ec[40];
    memset(a, 0, sizeof a), memset(ea, 0, sizeof ea), memset(c, 0xff, sizeof c), memset(ec, 0xff, sizeof ec);
    assert_int_equal(vr_train_forward(full, &b, 0.7f, a, ea, 0), 0);
    assert_int_equal(vr_train_forward(fo, &b, 0.7f, c, ec, 0), 0);
    assert_memory_equal(a, c, sizeof a);
    if (cases[k].head == VR_LM_HEAD_LM) assert_memory_equal(ea, ec, sizeof ea);
    size_t lo = 1, hi = 1;
    vr_train_shard_range(fo, &lo, &hi);
    assert_true(lo == 0 && hi == 0); /* no optimizer state */
    float dout[40] = {0};
    vr_adamw_t h;
    vr_adamw_init(&h);
    double norm = 0;
    const size_t n = vr_train_n_floats(fo);
    float *buf = malloc(n * sizeof *buf);
    assert_non_null(buf);
    vr_train_optsnap_t snap = {0};
    assert_int_equal(vr_train_forward(fo, &b, 0.7f, c, NULL, 1), VR_ERR_UNSUPPORTED);
    assert_int_equal(vr_train_backward(fo, dout, NULL), VR_ERR_UNSUPPORTED);
    assert_int_equal(vr_train_backward_last(fo, dout, NULL), VR_ERR_UNSUPPORTED);
    assert_int_equal(vr_train_zero_grad(fo), VR_ERR_UNSUPPORTED);
    assert_int_equal(vr_train_grad_norm(fo, &norm), VR_ERR_UNSUPPORTED);
    assert_int_equal(vr_train_step(fo, &h, 1.0f, &norm), VR_ERR_UNSUPPORTED);
    assert_int_equal(vr_train_get_grads(fo, buf, n), VR_ERR_UNSUPPORTED);
    assert_null(vr_train_grad_buffer(fo));
    assert_int_equal(vr_train_optimizer_snapshot(fo, &snap), VR_ERR_UNSUPPORTED);
    assert_null(snap.bytes);
    assert_int_equal(vr_train_load_optimizer(fo, "/nonexistent/optim.bin"), VR_ERR_UNSUPPORTED);
    /* parameters still move in and out (a weight update of the reference), and the forward follows */
    assert_int_equal(vr_train_get_params(fo, buf, n), 0);
    assert_memory_equal(buf, vr_lm_params(lm), n * sizeof *buf);
    for (size_t i = 0; i < n; i++) buf[i] *= 0.5f;
    assert_int_equal(vr_train_set_params(fo, buf, n), 0);
    assert_int_equal(vr_train_set_params(full, buf, n), 0);
    assert_int_equal(vr_train_forward(full, &b, 1.0f, a, NULL, 0), 0);
    assert_int_equal(vr_train_forward(fo, &b, 1.0f, c, NULL, 0), 0);
    assert_memory_equal(a, c, sizeof a);
    printf("forward-only %-10s %s: outputs equal the full engine's, gradient / optimizer calls refused\n",
           cases[k].name, cases[k].head == VR_LM_HEAD_LM ? "lm" : "value");
    free(buf);
    vr_train_free(fo);
    vr_train_free(full);
    vr_lm_free(lm);
  }
  /* a data-parallel group makes no sense without gradients */
  vr_lm_t *lm = tr_lm_load("llama_lm", VR_LM_HEAD_LM);
  vr_train_options_t o;
  vr_train_options_init(&o);
  o.forward_only = 1;
  o.comm.size = 2, o.comm.rank = 0;
  vr_train_t *t = NULL;
  assert_int_equal(vr_train_init(lm, &o, &t), VR_ERR_INVAL);
  assert_null(t);
  vr_lm_free(lm);
}

/* A response mask: gradients of the masked rows only equal the full forward's with the other
 * rows' dout zero (LM head and value head). */
static void mask_case(const char *name, vr_lm_head_t head) {
  tr_golden_t g;
  tr_golden_load(name, &g);
  vr_lm_t *lm = load(name, head, 0);
  vr_train_t *t = tr_engine(lm, 0, 0, 0);
  size_t n = vr_train_n_floats(t);
  uint8_t *mask = calloc(g.T, 1);
  float *out = calloc(g.T, sizeof *out), *d = calloc(g.T, sizeof *d), *e = calloc(g.T, sizeof *e);
  float *ga = malloc(n * sizeof *ga), *gb = malloc(n * sizeof *gb);
  for (uint32_t q = 0; q < g.n; q++) /* the second half of every sequence is the "response" */
    for (uint32_t i = g.cu[q] + (g.cu[q + 1] - g.cu[q] + 1) / 2; i < g.cu[q + 1]; i++)
      if (i > g.cu[q]) mask[i] = 1, d[i] = 0.25f + 0.01f * (float)(i % 7), e[i] = -0.1f;
  vr_train_batch_t b = {g.ids, g.cu, g.n, mask};
  assert_int_equal(vr_train_zero_grad(t), 0);
  assert_int_equal(vr_train_forward(t, &b, 0.9f, out, NULL, 1), 0);
  assert_int_equal(vr_train_backward(t, d, e), 0);
  assert_int_equal(vr_train_get_grads(t, ga, n), 0);
  b.mask = NULL;
  assert_int_equal(vr_train_zero_grad(t), 0);
  assert_int_equal(vr_train_forward(t, &b, 0.9f, out, NULL, 1), 0);
  assert_int_equal(vr_train_backward(t, d, e), 0);
  assert_int_equal(vr_train_get_grads(t, gb, n), 0);
  double md = 0, mx = 0;
  for (size_t i = 0; i < n; i++) md = fmax(md, fabs(ga[i] - gb[i])), mx = fmax(mx, fabs(gb[i]));
  printf("%s: masked backward vs zero dout outside the mask: max |grad diff| %.3g of max %.3g\n", name, md, mx);
  assert_true(mx > 0 && md <= 1e-6 * mx);
  free(mask), free(out), free(d), free(e), free(ga), free(gb);
  vr_train_free(t);
  vr_lm_free(lm);
  tr_golden_free(&g);
}

static void test_masks(void **state) {
  (void)state;
  mask_case("llama_lm", VR_LM_HEAD_LM);
  mask_case("qwen2_critic", VR_LM_HEAD_VALUE);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_save_load, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_microbatch_and_resume, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_optimizer_v1, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_optimizer_v1_zero1, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test(test_bad_inputs),
      cmocka_unit_test(test_critic_from_reward_models),
      cmocka_unit_test(test_masks),
      cmocka_unit_test(test_forward_only),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
