/* model_test_util.h: helpers shared by the model runtime tests (fixtures, golden
 * files, log capture, scratch model directories, safetensors rewriting). */
#ifndef MODEL_TEST_UTIL_H
#define MODEL_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

/* A golden.json written by tools/make_fixtures.py. */
typedef struct mt_golden {
  char name[64];
  char source[64];        /* "" when not derived */
  char weights_dtype[8];
  int vocab_size, max_seq_len, pad_token_id; /* pad -1 when null */
  uint32_t n_seqs;
  int32_t *ids;           /* packed */
  uint32_t *cu;           /* n_seqs + 1 */
  double *scores, *batch_scores, *source_scores; /* batch/source NULL when absent */
  double *inv_freq;       /* NULL for encoders */
  int n_inv_freq;
} mt_golden_t;

/* $VR_FIXTURES/models (or the source tree's tests/fixtures/models). */
const char *mt_models_dir(void);
/* Fills path with $VR_FIXTURES/models/<name>. */
void mt_model_path(char *path, size_t cap, const char *name);
/* Loads <model dir>/golden.json; aborts the test on a malformed file. */
void mt_golden_load(const char *model_dir, mt_golden_t *g);
void mt_golden_free(mt_golden_t *g);
/* Names of the fixture model directories (sorted); returns the count. */
int mt_list_models(char names[][64], int cap);

/* Log capture: every line goes into one buffer (mt_log_text) until mt_log_stop. */
void mt_log_start(void);
const char *mt_log_text(void);
void mt_log_stop(void);

/* Scratch directory under $TMPDIR; removed (with its files) by mt_tmpdir_remove. */
void mt_tmpdir(char *path, size_t cap);
void mt_tmpdir_remove(const char *path);
/* cmocka setup/teardown pair: a fresh scratch directory in mt_tmp per test,
 * removed afterwards (and log capture stopped). */
extern char mt_tmp[1200];
int mt_setup_tmp(void **state);
int mt_teardown_tmp(void **state);
/* Copies every regular file of src into dst. */
void mt_copy_dir(const char *src, const char *dst);
void mt_write_file(const char *path, const void *data, size_t len);
/* Reads a whole file (malloc'd, NUL-terminated). */
char *mt_read_file(const char *path, size_t *len);

/* A safetensors file split into its header (cJSON) and data section for editing. */
typedef struct mt_st {
  cJSON *header;
  uint8_t *data;
  size_t data_len;
} mt_st_t;
void mt_st_read(const char *path, mt_st_t *st);
/* Writes header + data (header length = serialised JSON length). */
void mt_st_write(const char *path, const mt_st_t *st);
/* Writes a safetensors file from raw parts: the 8-byte little-endian length of the header
 * text, the header text (any bytes, h of them), then data_len bytes of data (zeros when
 * data is NULL). */
void mt_st_write_raw(const char *path, const char *header, size_t h, const void *data, size_t data_len);
void mt_st_free(mt_st_t *st);

#endif
