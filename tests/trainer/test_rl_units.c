/* test_rl_units.c: the RL loop's small pieces without processes: verl's truncation modes
 * (RLHFDataset: left keeps the end, right the start, middle the first N/2 and last N - N/2),
 * the dataset loader's checks (file:line in every message), the sampler (seeded permutations,
 * drop_last batches, epochs, resuming from (epoch, index) gives the same batches), the msgpack
 * extras (bytes checked by hand against the msgpack spec), the config's verl keys, and the
 * checkpoint tracker (a .tmp is never taken for a checkpoint; max_ckpt_to_keep), and the update
 * metrics as verl's dp_actor / dp_critic log them (vr_rlstats.h) against a table computed by hand. */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "vr_ckpt.h"
#include "vr_dataset.h"
#include "vr_rlconfig.h"
#include "vr_rlreward.h"
#include "vr_rlstats.h"
#include "vr_tconfig.h"

static char g_dir[256];

static int setup(void **st) {
  (void)st;
  snprintf(g_dir, sizeof g_dir, "/tmp/vr-rl-units-XXXXXX");
  return mkdtemp(g_dir) ? 0 : -1;
}

static int teardown(void **st) {
  (void)st;
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
  return system(cmd) == 0 ? 0 : -1;
}

static void write_file(const char *name, const char *text, char *path, size_t cap) {
  snprintf(path, cap, "%s/%s", g_dir, name);
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void test_truncation(void **st) {
  (void)st;
  int32_t a[7] = {1, 2, 3, 4, 5, 6, 7};
  assert_int_equal(vr_dataset_truncate(a, 7, 3, VR_TRUNC_LEFT), 3);
  assert_true(a[0] == 5 && a[1] == 6 && a[2] == 7);
  int32_t b[7] = {1, 2, 3, 4, 5, 6, 7};
  assert_int_equal(vr_dataset_truncate(b, 7, 3, VR_TRUNC_RIGHT), 3);
  assert_true(b[0] == 1 && b[1] == 2 && b[2] == 3);
  int32_t c[7] = {1, 2, 3, 4, 5, 6, 7};
  assert_int_equal(vr_dataset_truncate(c, 7, 5, VR_TRUNC_MIDDLE), 5); /* ids[:2] + ids[-3:] */
  assert_true(c[0] == 1 && c[1] == 2 && c[2] == 5 && c[3] == 6 && c[4] == 7);
  int32_t d[3] = {1, 2, 3};
  assert_int_equal(vr_dataset_truncate(d, 3, 2, VR_TRUNC_ERROR), -1);
  assert_int_equal(vr_dataset_truncate(d, 3, 3, VR_TRUNC_ERROR), 3);
}

static void test_dataset_rows_and_errors(void **st) {
  (void)st;
  char p[512], err[1024];
  vr_dataset_t ds;
  vr_dataset_options_t o = {"prompt", 4, VR_TRUNC_MIDDLE, 100, NULL};
  write_file("good.jsonl",
             "{\"input_ids\": [5, 6, 7, 8, 9], \"data_source\": \"openai/gsm8k\", \"reward_model\": {\"ground_truth\": 72},"
             " \"extra_info\": {\"split\": \"train\", \"index\": 3}}\n\n"
             "{\"input_ids\": [1], \"reward_model\": {\"ground_truth\": \"x y\"}}\n",
             p, sizeof p);
  assert_int_equal(vr_dataset_load(p, &o, &ds, err, sizeof err), 0);
  assert_int_equal(ds.n_rows, 2);
  assert_int_equal(ds.n_truncated, 1);
  assert_int_equal(ds.rows[0].n_ids, 4);
  assert_true(ds.rows[0].ids[0] == 5 && ds.rows[0].ids[1] == 6 && ds.rows[0].ids[2] == 8 && ds.rows[0].ids[3] == 9);
  assert_string_equal(ds.rows[0].data_source, "openai/gsm8k");
  assert_string_equal(ds.rows[0].ground_truth, "72");
  assert_string_equal(ds.rows[0].extra_info, "{\"split\":\"train\",\"index\":3}");
  assert_string_equal(ds.rows[1].data_source, "");
  assert_string_equal(ds.rows[1].ground_truth, "x y");
  assert_null(ds.rows[1].extra_info);
  vr_dataset_free(&ds);
  static const struct {
    const char *text, *want;
  } bad[] = {
      {"{\"input_ids\": [1, 2]}\n{\"input_ids\": [1, 200]}\n", "bad.jsonl:2: token 1 is 200, outside the vocabulary"},
      {"{\"input_ids\": [1, 2.5]}\n", "bad.jsonl:1: input_ids[1] is not a token id"},
      {"{\"input_ids\": []}\n", "bad.jsonl:1: the prompt has no tokens"},
      {"{\"input_ids\": [1]\n", "bad.jsonl:1: not valid JSON"},
      {"{\"text\": \"hi\"}\n", "bad.jsonl:1: neither \"prompt\" (chat messages) nor \"input_ids\""},
      {"{\"prompt\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n", "needs the policy's tokenizer"},
      {"{\"input_ids\": [1], \"reward_model\": {\"ground_truth\": [1]}}\n", "ground_truth is not a string or a number"},
      {"\n\n", "bad.jsonl: no prompts in the dataset"},
      /* one object per line: what followed the first value used to be dropped without a word */
      {"{\"input_ids\": [1]} {\"input_ids\": [2]}\n", "bad.jsonl:1: text after the JSON value at byte 20"},
      {"{\"input_ids\": [1]}\n{\"input_ids\": [2]}x\n", "bad.jsonl:2: text after the JSON value at byte 19"},
      /* Python's json (verl) keeps the last of two equal keys, cJSON the first */
      {"{\"input_ids\": [1], \"input_ids\": [2, 3]}\n", "bad.jsonl:1: \"input_ids\" appears more than once"},
      {"{\"input_ids\": [1], \"reward_model\": {}, \"reward_model\": {\"ground_truth\": 1}}\n",
       "\"reward_model\" appears more than once"},
      {"{\"input_ids\": [1], \"data_source\": \"a\xff\"}\n", "bad.jsonl:1: byte 37 is not valid UTF-8"},
      {"{\"input_ids\": [1, -1]}\n", "bad.jsonl:1: input_ids[1] is not a token id"},
      {"{\"input_ids\": \"1 2\"}\n", "bad.jsonl:1: \"input_ids\" is not a list"},
      {"[1, 2]\n", "bad.jsonl:1: not a JSON object"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    write_file("bad.jsonl", bad[i].text, p, sizeof p);
    assert_true(vr_dataset_load(p, &o, &ds, err, sizeof err) < 0);
    if (!strstr(err, bad[i].want)) fail_msg("case %zu: \"%s\" lacks \"%s\"", i, err, bad[i].want);
  }
  /* a NUL inside the line (write_file stops at one in its string) */
  snprintf(p, sizeof p, "%s/nul.jsonl", g_dir);
  FILE *f = fopen(p, "wb");
  assert_non_null(f);
  fwrite("{\"input_ids\": [1]}\0x\n", 1, 22, f);
  fclose(f);
  assert_int_equal(vr_dataset_load(p, &o, &ds, err, sizeof err), -27 /* VR_ERR_PARSE */);
  if (!strstr(err, "nul.jsonl:1: text after the JSON value at byte 19")) fail_msg("%s", err);
  /* a directory: fopen takes it and the first read fails; it used to say "no prompts" */
  assert_true(vr_dataset_load(g_dir, &o, &ds, err, sizeof err) < 0);
  if (!strstr(err, "cannot open the dataset (data.train_files): Is a directory")) fail_msg("%s", err);
  o.truncation = VR_TRUNC_ERROR;
  write_file("long.jsonl", "{\"input_ids\": [1, 2, 3, 4, 5]}\n", p, sizeof p);
  assert_int_equal(vr_dataset_load(p, &o, &ds, err, sizeof err), -9 /* VR_ERR_SEQ_TOO_LONG */);
  assert_non_null(strstr(err, "long.jsonl:1: the prompt has 5 tokens, more than data.max_prompt_length 4"));
}

static void test_sampler(void **st) {
  (void)st;
  vr_sampler_t s, t;
  assert_int_equal(vr_sampler_init(&s, 10, 11, 1, 1), -1);
  assert_int_equal(vr_sampler_init(&s, 10, 3, 42, 1), 0);
  assert_int_equal(vr_sampler_batches_per_epoch(&s), 3); /* drop_last */
  uint32_t seen[10] = {0}, rows[3], e0[9], e1[9];
  uint64_t ep;
  for (int k = 0; k < 3; k++) {
    vr_sampler_next(&s, rows, &ep);
    assert_int_equal(ep, 0);
    for (int i = 0; i < 3; i++) seen[rows[i]]++, e0[k * 3 + i] = rows[i];
  }
  for (int i = 0; i < 10; i++) assert_true(seen[i] <= 1); /* a permutation: nothing twice in an epoch */
  /* resuming from the saved (epoch, index) gives the same next batches */
  t = s;
  for (int k = 0; k < 3; k++) {
    vr_sampler_next(&s, rows, &ep);
    assert_int_equal(ep, 1);
    memcpy(e1 + k * 3, rows, sizeof rows);
  }
  vr_sampler_t r;
  vr_sampler_init(&r, 10, 3, 42, 1);
  r.epoch = t.epoch, r.index = t.index;
  for (int k = 0; k < 3; k++) {
    vr_sampler_next(&r, rows, &ep);
    assert_memory_equal(rows, e1 + k * 3, sizeof rows);
  }
  assert_true(memcmp(e0, e1, sizeof e0) != 0); /* each epoch its own order */
  uint32_t rows5[5];
  vr_sampler_init(&s, 10, 5, 42, 0);
  assert_int_equal(vr_sampler_next(&s, rows5, &ep), 0);
  for (uint32_t i = 0; i < 5; i++) assert_int_equal(rows5[i], i); /* no shuffle: file order */
  assert_int_equal(vr_sampler_next(&s, rows5, &ep), 0);
  for (uint32_t i = 0; i < 5; i++) assert_int_equal(rows5[i], 5 + i);
}

static void test_extras_msgpack(void **st) {
  (void)st;
  uint32_t n = 0;
  uint8_t *m = vr_rlreward_extras("ds", "3 7", "7", "{\"a\": [1, true, null, 2.5]}", &n);
  static const uint8_t want[] = {0x84, 0xab, 'd', 'a', 't', 'a', '_', 's', 'o', 'u', 'r', 'c', 'e', 0xa2, 'd', 's',
                                 0xac, 's', 'o', 'l', 'u', 't', 'i', 'o', 'n', '_', 's', 't', 'r', 0xa3, '3', ' ', '7',
                                 0xac, 'g', 'r', 'o', 'u', 'n', 'd', '_', 't', 'r', 'u', 't', 'h', 0xa1, '7',
                                 0xaa, 'e', 'x', 't', 'r', 'a', '_', 'i', 'n', 'f', 'o', 0x81, 0xa1, 'a', 0x94,
                                 0xd3, 0, 0, 0, 0, 0, 0, 0, 1, 0xc3, 0xc0, 0xcb, 0x40, 0x04, 0, 0, 0, 0, 0, 0};
  assert_int_equal(n, sizeof want);
  assert_memory_equal(m, want, sizeof want);
  free(m);
  m = vr_rlreward_extras("", NULL, NULL, NULL, &n); /* nothing: an empty map */
  assert_int_equal(n, 1);
  assert_int_equal(m[0], 0x80);
  free(m);
}

static void test_config_keys(void **st) {
  (void)st;
  char p[512], err[4096];
  vr_tconfig_t c;
  write_file("ppo.yaml",
             "data: {train_files: p.jsonl, train_batch_size: 4, truncation: middle, shuffle: false, seed: 3}\n"
             "actor_rollout_ref:\n  model: {path: m}\n  actor: {clip_ratio_low: 0.1, clip_ratio_high: 0.28, "
             "loss_agg_mode: seq-mean-token-mean, kl_loss_type: k3+, use_kl_loss: true, optim: {lr: 2e-6}}\n"
             "  rollout: {n: 8, top_p: 0.9, top_k: 20}\n"
             "algorithm: {adv_estimator: rloo, kl_penalty: abs, kl_ctrl: {type: adaptive, target_kl: 0.05, horizon: 500}}\n"
             "trainer: {total_epochs: 3, save_freq: 5, resume_mode: disable, max_actor_ckpt_to_keep: 2}\n",
             p, sizeof p);
  assert_int_equal(vr_tconfig_load(p, &c, err, sizeof err), 0);
  const vr_rlconfig_t *r = &c.rl;
  assert_true(r->present);
  assert_int_equal(r->train_batch_size, 4);
  assert_int_equal(r->truncation, VR_TRUNC_MIDDLE);
  assert_int_equal(r->shuffle, 0);
  assert_true(strstr(r->train_files, "/p.jsonl") && strstr(r->model_path, "/m"));
  assert_true(r->clip_ratio_low == 0.1 && r->clip_ratio_high == 0.28 && r->actor.lr == 2e-6);
  assert_int_equal(r->actor.loss_agg_mode, VR_AGG_SEQ_MEAN_TOKEN_MEAN);
  assert_true(r->kl_loss_type.type == VR_KL_K3 && r->kl_loss_type.straight_through && r->use_kl_loss);
  assert_true(r->rollout_n == 8 && r->top_k == 20 && r->top_p == 0.9);
  assert_int_equal(r->adv_estimator, VR_ADV_RLOO);
  assert_int_equal(r->kl_penalty.type, VR_KL_ABS);
  assert_true(r->kl_ctrl_adaptive && r->target_kl == 0.05 && r->horizon == 500);
  assert_true(c.total_epochs == 3 && c.save_freq == 5 && c.resume_mode == 1 && c.max_ckpt_to_keep == 2);
  write_file("bad.yaml", "actor_rollout_ref:\n  actor: {ppo_epochs: 0, cliprato: 1}\ncritic: {optim: {lrr: 1}}\n", p,
             sizeof p);
  assert_int_not_equal(vr_tconfig_load(p, &c, err, sizeof err), 0);
  assert_non_null(strstr(err, "bad.yaml:2:"));
  assert_non_null(strstr(err, "ppo_epochs must be an integer in 1..1000"));
  assert_non_null(strstr(err, "unknown key 'cliprato' in actor_rollout_ref.actor"));
  assert_non_null(strstr(err, "unknown key 'lrr' in critic.optim"));
  /* a u64 key: 2^64 - 1 is taken; past it (strtoull's ERANGE gave 2^64 - 1 silently), a sign or a
   * blank is refused */
  write_file("seed.yaml", "data: {seed: 18446744073709551615}\n", p, sizeof p);
  assert_int_equal(vr_tconfig_load(p, &c, err, sizeof err), 0);
  assert_true(c.rl.seed == UINT64_MAX);
  static const char *const bad_seeds[] = {"18446744073709551616", "99999999999999999999999", "-1", "+5", "' 5'"};
  for (size_t i = 0; i < sizeof bad_seeds / sizeof *bad_seeds; i++) {
    char text[128];
    snprintf(text, sizeof text, "data: {seed: %s}\n", bad_seeds[i]);
    write_file("seed.yaml", text, p, sizeof p);
    assert_int_not_equal(vr_tconfig_load(p, &c, err, sizeof err), 0);
    if (!strstr(err, "data.seed must be an integer in 0..18446744073709551615")) fail_msg("%s: %s", bad_seeds[i], err);
  }
  /* clip_ratio_c > 1 (verl's assert): 1.0 is refused with an open interval (it said "[1, 1e+06]") */
  write_file("c.yaml", "actor_rollout_ref: {actor: {clip_ratio_c: 1.0}}\n", p, sizeof p);
  assert_int_not_equal(vr_tconfig_load(p, &c, err, sizeof err), 0);
  if (!strstr(err, "actor_rollout_ref.actor.clip_ratio_c must be a number in (1, 1e+06], not \"1.0\""))
    fail_msg("%s", err);
  write_file("c.yaml", "actor_rollout_ref: {actor: {clip_ratio_c: 1.0001}}\n", p, sizeof p);
  assert_int_equal(vr_tconfig_load(p, &c, err, sizeof err), 0);
  assert_true(c.rl.clip_ratio_c == 1.0001);
  /* the GEMM-choice cache keys: tuning on and the default file unless given; a relative path is the
   * config's directory's, "off" stays off */
  assert_true(r->gemm_tune == 1 && r->gemm_cache[0] == '\0');
  write_file("g.yaml", "actor_rollout_ref: {rollout: {gemm_tune: false, gemm_cache: cache/g.json}}\n", p, sizeof p);
  assert_int_equal(vr_tconfig_load(p, &c, err, sizeof err), 0);
  assert_true(c.rl.gemm_tune == 0 && strstr(c.rl.gemm_cache, "/cache/g.json") && c.rl.gemm_cache[0] == '/');
  write_file("g.yaml", "actor_rollout_ref: {rollout: {gemm_cache: off}}\n", p, sizeof p);
  assert_int_equal(vr_tconfig_load(p, &c, err, sizeof err), 0);
  assert_string_equal(c.rl.gemm_cache, "off");
  write_file("g.yaml", "actor_rollout_ref: {rollout: {gemm_tune: maybe}}\n", p, sizeof p);
  assert_int_not_equal(vr_tconfig_load(p, &c, err, sizeof err), 0);
  if (!strstr(err, "actor_rollout_ref.rollout.gemm_tune must be true or false")) fail_msg("%s", err);
  /* the reward wait bound: default 120 s, trainer.reward_timeout_s in 1..86400 */
  write_file("rt.yaml", "trainer: {reward_timeout_s: 7}\n", p, sizeof p);
  assert_int_equal(vr_tconfig_load(p, &c, err, sizeof err), 0);
  assert_true(c.reward_timeout_s == 7);
  write_file("rt.yaml", "trainer: {comm_timeout_s: 9}\n", p, sizeof p);
  assert_int_equal(vr_tconfig_load(p, &c, err, sizeof err), 0);
  assert_true(c.reward_timeout_s == 120);
  write_file("rt.yaml", "trainer:\n  reward_timeout_s: 0\n", p, sizeof p);
  assert_int_not_equal(vr_tconfig_load(p, &c, err, sizeof err), 0);
  if (!strstr(err, "rt.yaml:2:") || !strstr(err, "trainer.reward_timeout_s must be an integer in 1..86400"))
    fail_msg("%s", err);
}

static void test_ckpt_tracker(void **st) {
  (void)st;
  char root[300], dir[1300];
  snprintf(root, sizeof root, "%s/ck", g_dir);
  vr_ckpt_t c;
  assert_int_equal(vr_ckpt_init(&c, root, 2), 0);
  int64_t step;
  assert_int_equal(vr_ckpt_latest(root, &step, dir, sizeof dir), 0);
  assert_int_equal(step, 0);
  for (int s = 1; s <= 3; s++) {
    assert_int_equal(vr_ckpt_begin(&c, s, dir, sizeof dir), 0);
    assert_non_null(strstr(dir, ".tmp"));
    vr_ckpt_state_t state = {s, 1, (uint64_t)s, 9, 1, 0.25};
    assert_int_equal(s == 3 ? vr_ckpt_finish_async(&c, &state) : vr_ckpt_finish(&c, &state), 0);
  }
  assert_int_equal(vr_ckpt_join(&c), 0);
  assert_int_equal(vr_ckpt_latest(root, &step, dir, sizeof dir), 0);
  assert_int_equal(step, 3);
  vr_ckpt_state_t got;
  assert_int_equal(vr_ckpt_read_state(dir, &got), 0);
  assert_true(got.global_step == 3 && got.index == 3 && got.seed == 9 && got.kl_coef == 0.25);
  char p[1400];
  { /* data.json read as one value (text after it was dropped), a repeated key as its last */
    snprintf(p, sizeof p, "%s/data.json", dir);
    char text[4096];
    FILE *df = fopen(p, "rb");
    assert_non_null(df);
    size_t tn = fread(text, 1, sizeof text - 1, df);
    fclose(df);
    text[tn] = 0;
    assert_true(tn > 2 && text[0] == '{');
    df = fopen(p, "wb");
    fprintf(df, "{\"global_step\": 99, %s", text + 1);
    fclose(df);
    assert_int_equal(vr_ckpt_read_state(dir, &got), 0);
    assert_true(got.global_step == 3);
    df = fopen(p, "ab");
    fputs(" {}", df);
    fclose(df);
    assert_int_equal(vr_ckpt_read_state(dir, &got), -27 /* VR_ERR_PARSE */);
  }
  snprintf(p, sizeof p, "%s/global_step_1", root);
  assert_int_not_equal(access(p, F_OK), 0); /* kept 2 */
  /* a begun, unfinished save does not move the tracker */
  assert_int_equal(vr_ckpt_begin(&c, 4, dir, sizeof dir), 0);
  assert_int_equal(vr_ckpt_latest(root, &step, dir, sizeof dir), 0);
  assert_int_equal(step, 3);
  /* a tracker naming a missing directory is an error */
  snprintf(p, sizeof p, "%s/latest_checkpointed_iteration.txt", root);
  FILE *f = fopen(p, "w");
  fputs("7\n", f);
  fclose(f);
  assert_int_equal(vr_ckpt_latest(root, &step, dir, sizeof dir), -18 /* VR_ERR_NOT_FOUND */);
  /* a root that cannot take a checkpoint is refused at init, not at the first save after
   * save_freq steps of work: a regular file (mkdir_p's EEXIST took it), a path under one */
  char file[400];
  snprintf(file, sizeof file, "%s/plain", g_dir);
  f = fopen(file, "w");
  fclose(f);
  assert_int_equal(vr_ckpt_init(&c, file, 0), -3 /* VR_ERR_IO */);
  snprintf(p, sizeof p, "%s/sub", file);
  assert_int_equal(vr_ckpt_init(&c, p, 0), -3 /* VR_ERR_IO */);
  /* the probe file is gone again */
  assert_int_equal(vr_ckpt_init(&c, root, 0), 0);
  DIR *d = opendir(root);
  assert_non_null(d);
  for (struct dirent *e; (e = readdir(d));) assert_null(strstr(e->d_name, "probe"));
  closedir(d);
}

/* Two actor members, two mini-batches each (gradient_accumulation 2, then 1), three micro-batches
 * each (a, b | c and d, e | f), plus a member that got no sequences; one critic member. The
 * expected values are worked out in the comments as verl's update_policy / update_critic and
 * reduce_metrics compute them. */
static void test_update_metrics(void **st) {
  (void)st;
  static const vr_rls_micro_t mb[6] = {
      /* n_tok   wpg  went  wkl  clip low neg_kl */
      {4, 0.8, 2.0, 0.1, 1, 0, 0.2, 0, 0, 0},  /* a: clipfrac 1/4, lower 0, ppo_kl 0.05 */
      {2, -0.4, 1.0, 0.3, 2, 1, -0.1, 0, 0, 0}, /* b: 1, 0.5, -0.05 */
      {5, 0.5, 1.5, 0.2, 0, 0, 0.5, 0, 0, 0},  /* c: 0, 0, 0.1 */
      {1, 1.0, 0.5, 0.0, 1, 1, 0.1, 0, 0, 0},  /* d: 1, 1, 0.1 */
      {4, 0.2, 0.7, 0.4, 0, 0, 0.4, 0, 0, 0},  /* e: 0, 0, 0.1 */
      {2, 0.0, 0.3, 0.1, 1, 0, 0.2, 0, 0, 0},  /* f: 0.5, 0, 0.1 */
  };
  double m[3 * VR_ST_COUNT] = {0}, out[VR_ST_COUNT];
  for (int k = 0; k < 2; k++) {
    double *s = m + k * VR_ST_COUNT;
    vr_rls_add_micro(s, &mb[3 * k], 0.5);
    vr_rls_add_micro(s, &mb[3 * k + 1], 0.5);
    vr_rls_add_micro(s, &mb[3 * k + 2], 1.0);
    s[VR_ST_GRAD_NORM] = 3.0 + 5.0, s[VR_ST_UPDATES] = 2; /* the same all-reduced steps */
  }
  m[2 * VR_ST_COUNT + VR_ST_UPDATES] = 2, m[2 * VR_ST_COUNT + VR_ST_GRAD_NORM] = 8;
  for (int n = 2; n <= 3; n++) { /* the empty member changes nothing */
    vr_rls_reduce(m, n, out);
    /* pg_loss: member 0 0.8/2 - 0.4/2 + 0.5 = 0.7, member 1 1.0/2 + 0.2/2 + 0 = 0.6; mean 0.65 */
    assert_true(fabs(out[VR_ST_PG_LOSS] - 0.65) < 1e-12);
    /* kl_loss: 0.05 + 0.15 + 0.2 = 0.4 and 0 + 0.2 + 0.1 = 0.3; mean 0.35 */
    assert_true(fabs(out[VR_ST_KL_LOSS] - 0.35) < 1e-12);
    /* per micro-batch means over the six: clipfrac (0.25 + 1 + 0 + 1 + 0 + 0.5) / 6 */
    assert_true(fabs(out[VR_ST_CLIPFRAC] - 2.75 / 6) < 1e-7);
    assert_true(fabs(out[VR_ST_CLIPFRAC_LOWER] - 1.5 / 6) < 1e-7);            /* (0.5 + 1) / 6 */
    assert_true(fabs(out[VR_ST_PPO_KL] - 0.4 / 6) < 1e-7);                    /* 0.05 - 0.05 + 4 x 0.1 */
    assert_true(fabs(out[VR_ST_ENTROPY] - 1.0) < 1e-12);                      /* (2 + 1 + 1.5 + .5 + .7 + .3) / 6 */
    assert_true(fabs(out[VR_ST_GRAD_NORM] - 4.0) < 1e-12);                    /* (3 + 5) / 2 steps */
    assert_true(out[VR_ST_MICRO] == 6 && out[VR_ST_UPDATES] == 2);
  }
  /* critic: micro-batches (2 tokens, sum w*max(vf1,vf2) 0.6, 1 clipped, values 1.0) with scale 1/2
   * and (3 tokens, 0.9, 0 clipped, values -0.3) with 1/2: vf_loss 0.5 * (0.6 + 0.9) / 2 = 0.375,
   * vf_clipfrac (0.5 + 0) / 2, vpred_mean (0.5 - 0.1) / 2 */
  double c[VR_ST_COUNT] = {0};
  const vr_rls_micro_t v1 = {.n_tok = 2, .wvf = 0.6, .vclip = 1, .vpred = 1.0};
  const vr_rls_micro_t v2 = {.n_tok = 3, .wvf = 0.9, .vclip = 0, .vpred = -0.3};
  vr_rls_add_micro(c, &v1, 0.5);
  vr_rls_add_micro(c, &v2, 0.5);
  c[VR_ST_GRAD_NORM] = 1.5, c[VR_ST_UPDATES] = 1;
  vr_rls_reduce(c, 1, out);
  assert_true(fabs(out[VR_ST_VF_LOSS] - 0.375) < 1e-12);
  assert_true(fabs(out[VR_ST_VF_CLIPFRAC] - 0.25) < 1e-7);
  assert_true(fabs(out[VR_ST_VPRED] - 0.2) < 1e-7);
  assert_true(fabs(out[VR_ST_GRAD_NORM] - 1.5) < 1e-12);
  /* a micro-batch without tokens: masked means of 0 (torch: 0 / (0 + 1e-8)) */
  double z[VR_ST_COUNT] = {0};
  const vr_rls_micro_t none = {0};
  vr_rls_add_micro(z, &none, 1.0);
  vr_rls_reduce(z, 1, out);
  assert_true(out[VR_ST_CLIPFRAC] == 0 && out[VR_ST_PG_LOSS] == 0 && out[VR_ST_MICRO] == 1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_truncation),      cmocka_unit_test(test_dataset_rows_and_errors),
      cmocka_unit_test(test_sampler),         cmocka_unit_test(test_extras_msgpack),
      cmocka_unit_test(test_config_keys),     cmocka_unit_test(test_ckpt_tracker),
      cmocka_unit_test(test_update_metrics),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
