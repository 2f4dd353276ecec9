/* model_test_util.h: helpers shared by the model runtime tests (fixtures, golden
 * files, log capture, scratch model directories, safetensors rewriting). */
#ifndef MODEL_TEST_UTIL_H
#define MODEL_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

/* Score tolerances, stated once for every model test (the Python suites' twins are in
 * tests/python/vr_testlib.py). Exact floats are promised by the checksum scorer and by the cpu
 * backend against itself (MT_TOL_CPU_BATCH); the others bound
 * the relative error mt_rel_err() = |got - want| / max(1, |want|) unless stated otherwise.
 *   MT_TOL_TRANSFORMERS       the cpu backend (f32) vs transformers' golden scores (f32 torch,
 *                             tools/make_fixtures.py): another summation order, other BLAS
 *                             kernels on another CPU
 *   MT_TOL_CPU_BATCH          the cpu backend vs itself on the same sequences in another batch
 *                             (packed, split, pipelined, other threads): 0, exact, because the
 *                             backend promises bit-identical scores (docs/protocol.md)
 *   MT_TOL_HALF_SAVE          a bf16 / f16 save vs transformers' scores of its f32 source
 *   MT_TOL_ROPE               the loader's RoPE inv_freq table vs transformers' (f32 rounding),
 *                             relative to the value itself
 *   MT_TOL_CUDA_TRANSFORMERS  the cuda backend (bf16 compute) vs the golden scores, as
 *                             ||cuda - golden|| / ||golden|| over a batch (tests/cuda) */
#define MT_TOL_TRANSFORMERS 1e-4
#define MT_TOL_CPU_BATCH 0.0
#define MT_TOL_HALF_SAVE 5e-2
#define MT_TOL_ROPE 1e-6
#define MT_TOL_CUDA_TRANSFORMERS 1e-2

/* |got - want| / max(1, |want|); INFINITY when either is NaN. */
double mt_rel_err(double got, double want);
/* The largest mt_rel_err over n scores. */
double mt_max_rel(const float *got, const double *want, uint32_t n);
double mt_max_rel_ff(const float *got, const float *want, uint32_t n);

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

/* Copies fixture model `name` to dst (a new directory it creates) with NaN weights: every
 * F32 tensor entirely NaN when token < 0, else only row `token` of the token embedding
 * (so only sequences containing that token score NaN). */
void mt_make_nan_model(const char *name, const char *dst, int token);

#endif
