/* model_test_util.c: see model_test_util.h. Failures abort the test via cmocka. */
#include "model_test_util.h"

#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "vr_log.h"

double mt_rel_err(double got, double want) {
  double d = fabs(got - want) / fmax(1.0, fabs(want));
  return isnan(d) ? INFINITY : d;
}

double mt_max_rel(const float *got, const double *want, uint32_t n) {
  double mx = 0;
  for (uint32_t i = 0; i < n; i++) mx = fmax(mx, mt_rel_err(got[i], want[i]));
  return mx;
}

double mt_max_rel_ff(const float *got, const float *want, uint32_t n) {
  double mx = 0;
  for (uint32_t i = 0; i < n; i++) mx = fmax(mx, mt_rel_err(got[i], want[i]));
  return mx;
}

const char *mt_models_dir(void) {
  static char dir[1024];
  const char *fx = getenv("VR_FIXTURES");
  snprintf(dir, sizeof dir, "%s/models", fx && *fx ? fx : "tests/fixtures");
  return dir;
}

void mt_model_path(char *path, size_t cap, const char *name) {
  snprintf(path, cap, "%s/%s", mt_models_dir(), name);
}

char *mt_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) fail_msg("cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  assert_non_null(b);
  assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  b[n] = 0;
  if (len) *len = (size_t)n;
  return b;
}

void mt_write_file(const char *path, const void *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f) fail_msg("cannot create %s", path);
  assert_int_equal(fwrite(data, 1, len, f), len);
  assert_int_equal(fclose(f), 0);
}

static double *mt_doubles(const cJSON *arr, uint32_t want) {
  if (!cJSON_IsArray(arr)) return NULL;
  assert_int_equal((uint32_t)cJSON_GetArraySize(arr), want);
  double *d = calloc(want ? want : 1, sizeof *d);
  uint32_t i = 0;
  for (const cJSON *it = arr->child; it; it = it->next) d[i++] = it->valuedouble;
  return d;
}

void mt_golden_load(const char *model_dir, mt_golden_t *g) {
  char path[1200];
  memset(g, 0, sizeof *g);
  snprintf(path, sizeof path, "%s/golden.json", model_dir);
  char *text = mt_read_file(path, NULL);
  cJSON *r = cJSON_Parse(text);
  free(text);
  if (!r) fail_msg("%s: malformed golden file", path);
  const cJSON *fmt = cJSON_GetObjectItem(r, "format");
  assert_true(cJSON_IsString(fmt) && strcmp(fmt->valuestring, "verl-reward-golden") == 0);
  snprintf(g->name, sizeof g->name, "%s", cJSON_GetObjectItem(r, "name")->valuestring);
  const cJSON *src = cJSON_GetObjectItem(r, "source");
  if (cJSON_IsString(src)) snprintf(g->source, sizeof g->source, "%s", src->valuestring);
  snprintf(g->weights_dtype, sizeof g->weights_dtype, "%s", cJSON_GetObjectItem(r, "weights_dtype")->valuestring);
  g->vocab_size = cJSON_GetObjectItem(r, "vocab_size")->valueint;
  g->max_seq_len = cJSON_GetObjectItem(r, "max_seq_len")->valueint;
  const cJSON *pad = cJSON_GetObjectItem(r, "pad_token_id");
  g->pad_token_id = cJSON_IsNumber(pad) ? pad->valueint : -1;
  const cJSON *seqs = cJSON_GetObjectItem(r, "sequences");
  assert_true(cJSON_IsArray(seqs));
  g->n_seqs = (uint32_t)cJSON_GetArraySize(seqs);
  uint32_t total = 0;
  for (const cJSON *s = seqs->child; s; s = s->next) total += (uint32_t)cJSON_GetArraySize(s);
  g->ids = malloc((total ? total : 1) * sizeof *g->ids);
  g->cu = malloc((g->n_seqs + 1) * sizeof *g->cu);
  uint32_t k = 0, q = 0;
  g->cu[0] = 0;
  for (const cJSON *s = seqs->child; s; s = s->next) {
    for (const cJSON *t = s->child; t; t = t->next) g->ids[k++] = t->valueint;
    g->cu[++q] = k;
  }
  g->scores = mt_doubles(cJSON_GetObjectItem(r, "scores"), g->n_seqs);
  assert_non_null(g->scores);
  g->batch_scores = mt_doubles(cJSON_GetObjectItem(r, "batch_scores"), g->n_seqs);
  g->source_scores = mt_doubles(cJSON_GetObjectItem(r, "source_scores"), g->n_seqs);
  const cJSON *inv = cJSON_GetObjectItem(r, "rope_inv_freq");
  if (cJSON_IsArray(inv)) {
    g->n_inv_freq = cJSON_GetArraySize(inv);
    g->inv_freq = mt_doubles(inv, (uint32_t)g->n_inv_freq);
  }
  cJSON_Delete(r);
}

void mt_golden_free(mt_golden_t *g) {
  free(g->ids);
  free(g->cu);
  free(g->scores);
  free(g->batch_scores);
  free(g->source_scores);
  free(g->inv_freq);
  memset(g, 0, sizeof *g);
}

static int mt_cmp_name(const void *a, const void *b) { return strcmp(a, b); }

int mt_list_models(char names[][64], int cap) {
  DIR *d = opendir(mt_models_dir());
  if (!d) fail_msg("no fixture folder %s", mt_models_dir());
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) && n < cap) {
    char p[1200];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s/golden.json", mt_models_dir(), e->d_name);
    if (e->d_name[0] != '.' && stat(p, &st) == 0) snprintf(names[n++], 64, "%.63s", e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)n, 64, mt_cmp_name);
  return n;
}

static char *mt_log_buf;
static size_t mt_log_len;

static void mt_log_sink(vr_log_level_t level, const char *line, void *user) {
  (void)level, (void)user;
  size_t n = strlen(line);
  char *p = realloc(mt_log_buf, mt_log_len + n + 2);
  if (!p) return;
  mt_log_buf = p;
  memcpy(mt_log_buf + mt_log_len, line, n);
  mt_log_len += n;
  mt_log_buf[mt_log_len++] = '\n';
  mt_log_buf[mt_log_len] = 0;
}

void mt_log_start(void) {
  free(mt_log_buf);
  mt_log_buf = NULL;
  mt_log_len = 0;
  vr_log_set_level(VR_LOG_WARN);
  vr_log_set_sink(mt_log_sink, NULL);
}

const char *mt_log_text(void) { return mt_log_buf ? mt_log_buf : ""; }

void mt_log_stop(void) {
  vr_log_set_sink(NULL, NULL);
  free(mt_log_buf);
  mt_log_buf = NULL;
  mt_log_len = 0;
}

void mt_tmpdir(char *path, size_t cap) {
  const char *t = getenv("TMPDIR");
  snprintf(path, cap, "%s/vr-model-test-%d-XXXXXX", t && *t ? t : "/tmp", (int)getpid());
  if (!mkdtemp(path)) fail_msg("mkdtemp %s failed", path);
}

void mt_tmpdir_remove(const char *path) {
  DIR *d = opendir(path);
  if (!d) return;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", path, e->d_name);
    unlink(p);
  }
  closedir(d);
  rmdir(path);
}

char mt_tmp[1200];

int mt_setup_tmp(void **state) {
  (void)state;
  mt_tmpdir(mt_tmp, sizeof mt_tmp);
  return 0;
}

int mt_teardown_tmp(void **state) {
  (void)state;
  mt_tmpdir_remove(mt_tmp);
  mt_log_stop();
  return 0;
}

void mt_copy_dir(const char *src, const char *dst) {
  DIR *d = opendir(src);
  if (!d) fail_msg("cannot open %s", src);
  struct dirent *e;
  while ((e = readdir(d))) {
    char p[1200], q[1200];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", src, e->d_name);
    if (stat(p, &st) != 0 || !S_ISREG(st.st_mode)) continue;
    snprintf(q, sizeof q, "%s/%s", dst, e->d_name);
    size_t n;
    char *b = mt_read_file(p, &n);
    mt_write_file(q, b, n);
    free(b);
  }
  closedir(d);
}

void mt_st_read(const char *path, mt_st_t *st) {
  size_t n;
  char *b = mt_read_file(path, &n);
  assert_true(n >= 8);
  uint64_t h = 0;
  for (int i = 7; i >= 0; i--) h = (h << 8) | (uint8_t)b[i];
  assert_true(h <= n - 8);
  st->header = cJSON_ParseWithLength(b + 8, (size_t)h);
  assert_non_null(st->header);
  st->data_len = n - 8 - (size_t)h;
  st->data = malloc(st->data_len ? st->data_len : 1);
  memcpy(st->data, b + 8 + h, st->data_len);
  free(b);
}

void mt_st_write_raw(const char *path, const char *header, size_t h, const void *data, size_t data_len) {
  const size_t n = 8 + h + data_len;
  uint8_t *b = malloc(n);
  assert_non_null(b);
  for (int i = 0; i < 8; i++) b[i] = (uint8_t)((uint64_t)h >> (8 * i));
  memcpy(b + 8, header, h);
  if (data) memcpy(b + 8 + h, data, data_len);
  else memset(b + 8 + h, 0, data_len);
  mt_write_file(path, b, n);
  free(b);
}

void mt_st_write(const char *path, const mt_st_t *st) {
  char *js = cJSON_PrintUnformatted(st->header);
  mt_st_write_raw(path, js, strlen(js), st->data, st->data_len);
  free(js);
}

void mt_st_free(mt_st_t *st) {
  cJSON_Delete(st->header);
  free(st->data);
  memset(st, 0, sizeof *st);
}

void mt_make_nan_model(const char *name, const char *dst, int token) {
  char src[1200], path[1400];
  mt_model_path(src, sizeof src, name);
  assert_true(mkdir(dst, 0700) == 0);
  mt_copy_dir(src, dst);
  snprintf(path, sizeof path, "%s/model.safetensors", dst);
  mt_st_t st;
  mt_st_read(path, &st);
  int hit = 0;
  for (cJSON *t = st.header->child; t; t = t->next) {
    const cJSON *dt = cJSON_GetObjectItem(t, "dtype"), *off = cJSON_GetObjectItem(t, "data_offsets");
    const cJSON *shape = cJSON_GetObjectItem(t, "shape");
    if (!cJSON_IsString(dt) || strcmp(dt->valuestring, "F32") != 0 || cJSON_GetArraySize(off) != 2) continue;
    size_t b = (size_t)cJSON_GetArrayItem(off, 0)->valuedouble, e = (size_t)cJSON_GetArrayItem(off, 1)->valuedouble;
    assert_true(b <= e && e <= st.data_len);
    if (token >= 0) {
      if (!strstr(t->string, "embed_tokens")) continue;
      size_t row = (size_t)cJSON_GetArrayItem(shape, 1)->valuedouble * sizeof(float);
      assert_true(b + (size_t)(token + 1) * row <= e);
      b += (size_t)token * row;
      e = b + row;
    }
    const float nan = NAN;
    for (size_t k = b; k + sizeof nan <= e; k += sizeof nan) memcpy(st.data + k, &nan, sizeof nan);
    hit = 1;
  }
  assert_true(hit);
  mt_st_write(path, &st);
  mt_st_free(&st);
}
