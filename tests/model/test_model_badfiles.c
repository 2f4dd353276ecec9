/* Bad model directories: every broken file is refused with the status and a log
 * line naming the file / tensor / key and the problem; nothing crashes or leaks
 * (this suite also runs under ASan + UBSan). Fixtures are copied to a scratch
 * directory and edited there. */
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "model_test_util.h"
#include "verl_reward/status.h"
#include "vr_log.h"
#include "vr_model.h"

static void copy_fixture(const char *name) {
  char src[1200];
  mt_model_path(src, sizeof src, name);
  mt_copy_dir(src, mt_tmp);
}

static void file_in_tmp(char *path, size_t cap, const char *base) { snprintf(path, cap, "%s/%s", mt_tmp, base); }

/* Loads mt_tmp (optionally with a device/dtype) and checks the status and that every
 * needle appears in the captured log. */
static void expect_fail_opt(const char *device, const char *dtype, int want_rc, const char *n1,
                            const char *n2) {
  vr_model_options_t opt;
  vr_model_options_init(&opt);
  opt.n_threads = 1;
  if (device) opt.device = device;
  opt.dtype = dtype;
  vr_model_t *m = (vr_model_t *)0x1;
  mt_log_start();
  int rc = vr_model_load(mt_tmp, &opt, &m);
  const char *log = mt_log_text();
  printf("  -> %s: %s", vr_status_name(rc), log);
  if (rc != want_rc) fail_msg("want %s, got %s; log: %s", vr_status_name(want_rc), vr_status_name(rc), log);
  assert_null(m);
  if (n1 && !strstr(log, n1)) fail_msg("log lacks \"%s\": %s", n1, log);
  if (n2 && !strstr(log, n2)) fail_msg("log lacks \"%s\": %s", n2, log);
  mt_log_stop();
}

static void expect_fail(int want_rc, const char *n1, const char *n2) {
  expect_fail_opt(NULL, NULL, want_rc, n1, n2);
}

/* Edits one tensor entry of mt_tmp/<file>: callback gets the entry object. */
typedef void (*edit_fn)(cJSON *header, cJSON *entry, mt_st_t *st);
static void edit_tensor(const char *file, const char *tensor, edit_fn fn) {
  char path[1300];
  file_in_tmp(path, sizeof path, file);
  mt_st_t st;
  mt_st_read(path, &st);
  cJSON *e = cJSON_GetObjectItemCaseSensitive(st.header, tensor);
  assert_non_null(e);
  fn(st.header, e, &st);
  mt_st_write(path, &st);
  mt_st_free(&st);
}

static void set_offsets(cJSON *entry, double a, double b) {
  cJSON_ReplaceItemInObject(entry, "data_offsets", cJSON_CreateDoubleArray((double[]){a, b}, 2));
}

static void edit_config(const char *key, cJSON *value) {
  char path[1300];
  file_in_tmp(path, sizeof path, "config.json");
  char *text = mt_read_file(path, NULL);
  cJSON *cfg = cJSON_Parse(text);
  free(text);
  if (value) {
    if (cJSON_GetObjectItemCaseSensitive(cfg, key)) cJSON_ReplaceItemInObject(cfg, key, value);
    else cJSON_AddItemToObject(cfg, key, value);
  } else {
    cJSON_DeleteItemFromObject(cfg, key);
  }
  char *out = cJSON_Print(cfg);
  mt_write_file(path, out, strlen(out));
  free(out);
  cJSON_Delete(cfg);
}

/* ---- safetensors damage ---------------------------------------------------------- */

static void drop(cJSON *h, cJSON *e, mt_st_t *st) {
  (void)st;
  cJSON_DetachItemViaPointer(h, e);
  cJSON_Delete(e);
}
static void test_missing_tensor(void **state) {
  (void)state;
  copy_fixture("llama_gqa");
  edit_tensor("model.safetensors", "model.layers.1.mlp.up_proj.weight", drop);
  expect_fail(VR_ERR_MODEL_FORMAT, "'model.layers.1.mlp.up_proj.weight' is missing", "model.safetensors");
}

static void reshape(cJSON *h, cJSON *e, mt_st_t *st) {
  (void)h, (void)st;
  cJSON_ReplaceItemInObject(e, "shape", cJSON_CreateIntArray((int[]){16, 64}, 2));
}
static void test_wrong_shape(void **state) {
  (void)state;
  copy_fixture("llama_gqa");
  edit_tensor("model.safetensors", "model.layers.0.self_attn.q_proj.weight", reshape);
  expect_fail(VR_ERR_MODEL_FORMAT, "'model.layers.0.self_attn.q_proj.weight' has shape [16, 64], expected [32, 32]",
              "model.safetensors");
}

static void test_truncated(void **state) {
  (void)state;
  copy_fixture("llama_gqa");
  char path[1300];
  file_in_tmp(path, sizeof path, "model.safetensors");
  size_t n;
  char *b = mt_read_file(path, &n);
  mt_write_file(path, b, n / 2);
  free(b);
  expect_fail(VR_ERR_MODEL_FORMAT, "outside the data section", "model.safetensors");
  /* shorter than the 8-byte length prefix, and empty */
  mt_write_file(path, "\x10\x00", 2);
  expect_fail(VR_ERR_MODEL_FORMAT, "too short", "model.safetensors");
  mt_write_file(path, "", 0);
  expect_fail(VR_ERR_MODEL_FORMAT, "too short", "model.safetensors");
}

static void test_header_length_beyond_file(void **state) {
  (void)state;
  copy_fixture("llama_gqa");
  char path[1300];
  file_in_tmp(path, sizeof path, "model.safetensors");
  size_t n;
  char *b = mt_read_file(path, &n);
  uint64_t h = (uint64_t)n; /* 8 + n > n */
  for (int i = 0; i < 8; i++) b[i] = (char)(h >> (8 * i));
  mt_write_file(path, b, n);
  expect_fail(VR_ERR_MODEL_FORMAT, "header length", "model.safetensors");
  for (int i = 0; i < 8; i++) b[i] = (char)0xff; /* 2^64 - 1: no overflow in the check */
  mt_write_file(path, b, n);
  expect_fail(VR_ERR_MODEL_FORMAT, "header length", "model.safetensors");
  free(b);
}

static double score_begin;
static void overlap(cJSON *h, cJSON *e, mt_st_t *st) {
  (void)st;
  const cJSON *score = cJSON_GetObjectItemCaseSensitive(h, "score.weight");
  const cJSON *off = cJSON_GetObjectItemCaseSensitive(score, "data_offsets");
  score_begin = cJSON_GetArrayItem(off, 0)->valuedouble;
  set_offsets(e, score_begin, score_begin + 128); /* model.norm.weight: 32 floats */
}
static void out_of_bounds(cJSON *h, cJSON *e, mt_st_t *st) {
  (void)h;
  set_offsets(e, (double)st->data_len, (double)st->data_len + 128);
}
static void test_bad_offsets(void **state) {
  (void)state;
  copy_fixture("llama_gqa");
  edit_tensor("model.safetensors", "model.norm.weight", overlap);
  expect_fail(VR_ERR_MODEL_FORMAT, "overlap", "model.norm.weight");
  copy_fixture("llama_gqa");
  edit_tensor("model.safetensors", "model.norm.weight", out_of_bounds);
  expect_fail(VR_ERR_MODEL_FORMAT, "'model.norm.weight': data_offsets", "outside the data section");
}

static void duplicate(cJSON *h, cJSON *e, mt_st_t *st) {
  (void)st;
  cJSON_AddItemToObject(h, "model.norm.weight", cJSON_Duplicate(e, 1)); /* same key twice */
}
static void test_duplicate_names(void **state) {
  (void)state;
  copy_fixture("llama_gqa");
  edit_tensor("model.safetensors", "model.norm.weight", duplicate);
  expect_fail(VR_ERR_MODEL_FORMAT, "key \"model.norm.weight\" appears more than once", "model.safetensors");
}

static void dtype_f17(cJSON *h, cJSON *e, mt_st_t *st) {
  (void)h, (void)st;
  cJSON_ReplaceItemInObject(e, "dtype", cJSON_CreateString("F17"));
}
static void dtype_i32(cJSON *h, cJSON *e, mt_st_t *st) {
  (void)h, (void)st;
  cJSON_ReplaceItemInObject(e, "dtype", cJSON_CreateString("I32")); /* same byte count */
}
static void test_dtypes(void **state) {
  (void)state;
  copy_fixture("llama_gqa");
  edit_tensor("model.safetensors", "model.norm.weight", dtype_f17);
  expect_fail(VR_ERR_MODEL_FORMAT, "unknown dtype \"F17\"", "model.norm.weight");
  copy_fixture("llama_gqa");
  edit_tensor("model.safetensors", "model.norm.weight", dtype_i32);
  expect_fail(VR_ERR_UNSUPPORTED, "'model.norm.weight' has dtype I32", "model.safetensors");
}

static void test_malformed_header_json(void **state) {
  (void)state;
  copy_fixture("llama_gqa");
  char path[1300];
  file_in_tmp(path, sizeof path, "model.safetensors");
  static const char bad[] = "{\"model.norm.weight\": {\"dtype\": \"F32\", \"shape\": [32";
  mt_st_write_raw(path, bad, sizeof bad - 1, NULL, 16);
  expect_fail(VR_ERR_MODEL_FORMAT, "malformed JSON", "model.safetensors");
  /* valid JSON of the wrong shape */
  static const char arr[] = "[1, 2, 3]";
  mt_st_write_raw(path, arr, sizeof arr - 1, NULL, 0);
  expect_fail(VR_ERR_MODEL_FORMAT, "not a JSON object", "model.safetensors");
}

/* ---- config.json ------------------------------------------------------------------ */

static void test_config_errors(void **state) {
  (void)state;
  char path[1300];
  copy_fixture("llama_gqa");
  file_in_tmp(path, sizeof path, "config.json");
  static const char trunc_cfg[] = "{ \"architectures\": [\"LlamaForSequenceClassification\"";
  mt_write_file(path, trunc_cfg, strlen(trunc_cfg));
  expect_fail(VR_ERR_MODEL_FORMAT, "config.json", "malformed JSON");

  copy_fixture("llama_gqa");
  edit_config("hidden_size", NULL);
  expect_fail(VR_ERR_MODEL_FORMAT, "config.json", "\"hidden_size\" missing");

  copy_fixture("llama_gqa");
  edit_config("num_attention_heads", cJSON_CreateString("four"));
  expect_fail(VR_ERR_MODEL_FORMAT, "config.json", "\"num_attention_heads\" must be an integer");

  copy_fixture("llama_gqa");
  cJSON *arch = cJSON_CreateArray();
  cJSON_AddItemToArray(arch, cJSON_CreateString("GPT2ForSequenceClassification"));
  edit_config("architectures", arch);
  expect_fail(VR_ERR_UNSUPPORTED, "GPT2ForSequenceClassification", "supported: BertForSequenceClassification");

  copy_fixture("llama_gqa");
  cJSON *rope = cJSON_CreateObject();
  cJSON_AddStringToObject(rope, "rope_type", "yarn");
  cJSON_AddNumberToObject(rope, "factor", 4.0);
  edit_config("rope_parameters", rope);
  expect_fail(VR_ERR_UNSUPPORTED, "rope_type \"yarn\"", "default, linear, llama3");

  copy_fixture("llama_gqa");
  edit_config("hidden_act", cJSON_CreateString("mish"));
  expect_fail(VR_ERR_UNSUPPORTED, "hidden_act \"mish\"", NULL);

  copy_fixture("bert");
  edit_config("position_embedding_type", cJSON_CreateString("relative_key"));
  expect_fail(VR_ERR_UNSUPPORTED, "position_embedding_type relative_key", NULL);

  copy_fixture("roberta");
  edit_config("pad_token_id", NULL);
  expect_fail(VR_ERR_MODEL_FORMAT, "roberta needs pad_token_id", NULL);

  copy_fixture("llama_gqa");
  unlink(path);
  expect_fail(VR_ERR_NOT_FOUND, "config.json", "not found");
}

/* num_labels != 1: config disagreeing with the head, and a real two-row head. */
static void two_rows(cJSON *h, cJSON *e, mt_st_t *st) {
  (void)h;
  size_t old = st->data_len;
  st->data = realloc(st->data, old + 256);
  memset(st->data + old, 0, 256);
  st->data_len = old + 256;
  cJSON_ReplaceItemInObject(e, "shape", cJSON_CreateIntArray((int[]){2, 32}, 2));
  set_offsets(e, (double)old, (double)old + 256);
}
static void test_num_labels(void **state) {
  (void)state;
  copy_fixture("llama_gqa");
  edit_config("num_labels", cJSON_CreateNumber(2));
  expect_fail(VR_ERR_MODEL_FORMAT, "num_labels 2 but the score head has 1 rows", NULL);

  copy_fixture("llama_gqa");
  edit_config("id2label", NULL);
  edit_config("label2id", NULL);
  edit_tensor("model.safetensors", "score.weight", two_rows);
  expect_fail(VR_ERR_UNSUPPORTED, "num_labels is 2", "LlamaForSequenceClassification");
}

static void test_no_weights(void **state) {
  (void)state;
  char path[1300];
  copy_fixture("llama_gqa");
  file_in_tmp(path, sizeof path, "model.safetensors");
  unlink(path);
  expect_fail(VR_ERR_NOT_FOUND, "neither model.safetensors nor model.safetensors.index.json", NULL);
}

/* ---- sharded index ------------------------------------------------------------------ */

static void edit_index(const char *tensor, const char *file) {
  char path[1300];
  file_in_tmp(path, sizeof path, "model.safetensors.index.json");
  char *text = mt_read_file(path, NULL);
  cJSON *idx = cJSON_Parse(text);
  free(text);
  cJSON *wm = cJSON_GetObjectItemCaseSensitive(idx, "weight_map");
  cJSON_ReplaceItemInObject(wm, tensor, cJSON_CreateString(file));
  char *out = cJSON_Print(idx);
  mt_write_file(path, out, strlen(out));
  free(out);
  cJSON_Delete(idx);
}

static void rename_to_embed_clone(cJSON *h, cJSON *e, mt_st_t *st) {
  (void)h, (void)st;
  free(e->string); /* rename the entry: its bytes stay its own */
  e->string = strdup("model.layers.0.self_attn.q_proj.weight");
}

static void test_sharded_errors(void **state) {
  (void)state;
  char path[1300];
  copy_fixture("llama_gqa_sharded");
  file_in_tmp(path, sizeof path, "model-00003-of-00004.safetensors");
  unlink(path);
  expect_fail(VR_ERR_NOT_FOUND, "model-00003-of-00004.safetensors", "cannot open");

  copy_fixture("llama_gqa_sharded");
  edit_index("model.norm.weight", "../outside.safetensors");
  expect_fail(VR_ERR_MODEL_FORMAT, "weight_map entry 'model.norm.weight'", "model.safetensors.index.json");

  copy_fixture("llama_gqa_sharded");
  edit_index("model.embed_tokens.weight", "model-00004-of-00004.safetensors");
  expect_fail(VR_ERR_MODEL_FORMAT, "index puts tensor 'model.embed_tokens.weight' in model-00004-of-00004.safetensors",
              "another file");

  /* a tensor in two shards (an entry of shard 4 renamed like one of shard 1) */
  copy_fixture("llama_gqa_sharded");
  edit_tensor("model-00004-of-00004.safetensors", "model.norm.weight", rename_to_embed_clone);
  expect_fail(VR_ERR_MODEL_FORMAT, "'model.layers.0.self_attn.q_proj.weight' is in both", NULL);

  copy_fixture("llama_gqa_sharded");
  file_in_tmp(path, sizeof path, "model.safetensors.index.json");
  mt_write_file(path, "{\"weight_map\": ", 15);
  expect_fail(VR_ERR_MODEL_FORMAT, "model.safetensors.index.json", "malformed JSON");
}

/* ---- one JSON value per file; duplicate keys as HF's readers take them ------------------ */

static void expect_load(void) {
  vr_model_options_t opt;
  vr_model_options_init(&opt);
  opt.n_threads = 1;
  vr_model_t *m = NULL;
  mt_log_start();
  int rc = vr_model_load(mt_tmp, &opt, &m);
  if (rc != 0) fail_msg("load failed: %s; log: %s", vr_status_name(rc), mt_log_text());
  mt_log_stop();
  vr_model_free(m);
}

/* Rewrites mt_tmp/<base>: its text (trailing blanks cut) with pre inserted after the first '{'
 * and post[0, nq) appended. */
static void wrap_file(const char *base, const char *pre, const char *post, size_t nq) {
  char path[1300];
  file_in_tmp(path, sizeof path, base);
  size_t n = 0;
  char *text = mt_read_file(path, &n);
  while (n && (text[n - 1] == '\n' || text[n - 1] == ' ')) n--;
  const char *brace = memchr(text, '{', n);
  assert_non_null(brace);
  size_t at = (size_t)(brace - text) + 1, np = strlen(pre);
  char *out = malloc(n + np + nq + 1);
  memcpy(out, text, at);
  memcpy(out + at, pre, np);
  memcpy(out + at + np, text + at, n - at);
  memcpy(out + n + np, post, nq);
  mt_write_file(path, out, n + np + nq);
  free(out);
  free(text);
}

/* A safetensors header (its JSON text followed by pad) with the data of the fixture's file. */
static void pad_header(const char *pad, size_t npad, const char *from, const char *to) {
  char path[1300];
  file_in_tmp(path, sizeof path, "model.safetensors");
  mt_st_t st;
  mt_st_read(path, &st);
  char *h = cJSON_PrintUnformatted(st.header);
  size_t n = strlen(h);
  char *buf = malloc(n + npad + strlen(to) + 1);
  const char *hit = from ? strstr(h, from) : NULL;
  size_t k = hit ? (size_t)(hit - h) : n;
  memcpy(buf, h, k);
  size_t o = k;
  if (hit) {
    memcpy(buf + o, to, strlen(to));
    o += strlen(to);
    memcpy(buf + o, h + k + strlen(from), n - k - strlen(from));
    o += n - k - strlen(from);
  }
  memcpy(buf + o, pad, npad);
  mt_st_write_raw(path, buf, o + npad, st.data, st.data_len);
  free(buf);
  free(h);
  mt_st_free(&st);
}

static void test_one_value_per_file(void **state) {
  (void)state;
  /* config.json: text after the object is Python's "Extra data" (cJSON dropped it) */
  copy_fixture("llama_gqa");
  wrap_file("config.json", "", "\n}", 2);
  expect_fail(VR_ERR_MODEL_FORMAT, "config.json: text after the JSON value at byte offset", "Extra data");
  copy_fixture("llama_gqa");
  wrap_file("config.json", "", "\n\0", 2);
  expect_fail(VR_ERR_MODEL_FORMAT, "config.json: text after the JSON value at byte offset", NULL);
  /* a repeated key counts as its last, as json.load reads it (cJSON found the first) */
  copy_fixture("llama_gqa");
  wrap_file("config.json", "\"num_attention_heads\": \"four\", ", "", 0);
  expect_load();
  copy_fixture("llama_gqa");
  wrap_file("config.json", "", "", 0);
  {
    char path[1300];
    file_in_tmp(path, sizeof path, "config.json");
    size_t n = 0;
    char *t = mt_read_file(path, &n);
    assert_true(n > 1 && t[n - 1] == '}');
    static const char tail[] = ", \"num_attention_heads\": \"four\"}";
    char *o = malloc(n + sizeof tail);
    memcpy(o, t, n - 1);
    memcpy(o + n - 1, tail, sizeof tail - 1);
    mt_write_file(path, o, n - 1 + sizeof tail - 1);
    free(o), free(t);
  }
  expect_fail(VR_ERR_MODEL_FORMAT, "config.json", "\"num_attention_heads\" must be an integer");
  /* the safetensors header: JSON blanks may pad it (serde_json::from_str skips them), nothing else */
  copy_fixture("llama_gqa");
  pad_header("    \n\t\r ", 8, NULL, "");
  expect_load();
  pad_header("\0\0\0\0", 4, NULL, "");
  expect_fail(VR_ERR_MODEL_FORMAT, "model.safetensors: text after the JSON value at byte offset", "(the header)");
  copy_fixture("llama_gqa");
  pad_header(" {}", 3, NULL, "");
  expect_fail(VR_ERR_MODEL_FORMAT, "model.safetensors: text after the JSON value at byte offset", NULL);
  copy_fixture("llama_gqa");
  pad_header("", 0, "\"dtype\":\"F32\"", "\"dtype\":\"F17\",\"dtype\":\"F32\"");
  expect_fail(VR_ERR_MODEL_FORMAT, "model.safetensors: key \"dtype\" appears more than once", NULL);
  /* the shard index: one value; a tensor named twice counts as its last (json.load) */
  copy_fixture("llama_gqa_sharded");
  wrap_file("model.safetensors.index.json", "", "{}", 2);
  expect_fail(VR_ERR_MODEL_FORMAT, "model.safetensors.index.json: text after the JSON value", NULL);
  copy_fixture("llama_gqa_sharded");
  {
    char path[1300];
    file_in_tmp(path, sizeof path, "model.safetensors.index.json");
    char *t = mt_read_file(path, NULL);
    const char *wm = strstr(t, "\"weight_map\"");
    assert_non_null(wm);
    const char *br = strchr(wm, '{');
    static const char dup[] = "\"model.norm.weight\": \"model-00001-of-00004.safetensors\", ";
    size_t at = (size_t)(br - t) + 1, n = strlen(t);
    char *o = malloc(n + sizeof dup);
    memcpy(o, t, at);
    memcpy(o + at, dup, sizeof dup - 1);
    memcpy(o + at + sizeof dup - 1, t + at, n - at);
    mt_write_file(path, o, n + sizeof dup - 1);
    free(o), free(t);
  }
  expect_load();
}

/* ---- options ---------------------------------------------------------------------------- */

static void test_bad_options(void **state) {
  (void)state;
  copy_fixture("bert");
  expect_fail_opt("tpu", NULL, VR_ERR_INVAL, "device \"tpu\" not understood", NULL);
  expect_fail_opt("cuda:x", NULL, VR_ERR_INVAL, "not understood", NULL);
  if (!strstr(vr_model_backends(), "cuda"))
    expect_fail_opt("cuda:0", NULL, VR_ERR_UNSUPPORTED, "no CUDA backend", NULL);
  expect_fail_opt("cpu", "bf16", VR_ERR_UNSUPPORTED, "f32 only", NULL);
}

/* Old BERT checkpoints call LayerNorm parameters gamma/beta; they load and score the same. */
static void test_bert_gamma_beta(void **state) {
  (void)state;
  copy_fixture("bert");
  char path[1300];
  file_in_tmp(path, sizeof path, "model.safetensors");
  mt_st_t st;
  mt_st_read(path, &st);
  int renamed = 0;
  for (cJSON *e = st.header->child; e; e = e->next) {
    size_t n = strlen(e->string);
    if (!strstr(e->string, "LayerNorm.")) continue;
    char nm[256];
    if (n > 7 && strcmp(e->string + n - 7, ".weight") == 0)
      snprintf(nm, sizeof nm, "%.*s.gamma", (int)(n - 7), e->string);
    else
      snprintf(nm, sizeof nm, "%.*s.beta", (int)(n - 5), e->string);
    free(e->string);
    e->string = strdup(nm);
    renamed++;
  }
  assert_true(renamed >= 5);
  mt_st_write(path, &st);
  mt_st_free(&st);
  mt_golden_t g;
  char src[1200];
  mt_model_path(src, sizeof src, "bert");
  mt_golden_load(src, &g);
  vr_model_options_t opt;
  vr_model_options_init(&opt);
  vr_model_t *m = NULL;
  assert_int_equal(vr_model_load(mt_tmp, &opt, &m), 0);
  float *s = calloc(g.n_seqs, sizeof *s);
  assert_int_equal(vr_model_score(m, g.ids, g.cu, g.n_seqs, s, NULL), 0);
  assert_true(mt_max_rel(s, g.scores, g.n_seqs) <= MT_TOL_TRANSFORMERS);
  free(s);
  vr_model_free(m);
  mt_golden_free(&g);
}

/* A header whose length is not a multiple of 4 leaves F32 data unaligned: the cpu
 * backend converts those tensors instead of using the mapping; same scores. */
static void test_unaligned_f32(void **state) {
  (void)state;
  copy_fixture("llama_gqa");
  char path[1300];
  file_in_tmp(path, sizeof path, "model.safetensors");
  mt_st_t st;
  mt_st_read(path, &st);
  cJSON *meta = cJSON_GetObjectItemCaseSensitive(st.header, "__metadata__");
  char *js = cJSON_PrintUnformatted(st.header);
  size_t hl = strlen(js);
  free(js);
  /* pad the metadata until 8 + header length is odd */
  cJSON_AddStringToObject(meta, "pad", hl % 2 ? "x" : ""); /* adds 10 or 9 bytes */
  mt_st_write(path, &st);
  mt_st_free(&st);
  size_t n;
  char *b = mt_read_file(path, &n);
  uint64_t h = 0;
  for (int i = 7; i >= 0; i--) h = (h << 8) | (uint8_t)b[i];
  free(b);
  assert_true((8 + h) % 2 == 1);
  mt_golden_t g;
  char src[1200];
  mt_model_path(src, sizeof src, "llama_gqa");
  mt_golden_load(src, &g);
  vr_model_options_t opt;
  vr_model_options_init(&opt);
  vr_model_t *m = NULL;
  assert_int_equal(vr_model_load(mt_tmp, &opt, &m), 0);
  assert_true(vr_model_info(m)->host_bytes >= 4 * vr_model_info(m)->param_count); /* converted copies */
  float *s = calloc(g.n_seqs, sizeof *s);
  assert_int_equal(vr_model_score(m, g.ids, g.cu, g.n_seqs, s, NULL), 0);
  assert_true(mt_max_rel(s, g.scores, g.n_seqs) <= MT_TOL_TRANSFORMERS);
  free(s);
  vr_model_free(m);
  mt_golden_free(&g);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_missing_tensor, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_wrong_shape, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_truncated, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_header_length_beyond_file, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_bad_offsets, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_duplicate_names, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_dtypes, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_malformed_header_json, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_config_errors, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_num_labels, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_no_weights, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_sharded_errors, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_one_value_per_file, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_bad_options, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_bert_gamma_beta, mt_setup_tmp, mt_teardown_tmp),
      cmocka_unit_test_setup_teardown(test_unaligned_f32, mt_setup_tmp, mt_teardown_tmp),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
