/* vr_gemm_tune.h: the GEMM-choice cache file (issue 21: a rollout run reproducible across processes).
 *
 * The cuda GEMM context (model/cuda/vr_cuda_gemm.cu) tunes a plan by timing cuBLASLt's candidates
 * and keeps the fastest for the process. Timing picks among near-equal candidates by noise, and
 * candidates round differently, so two processes could give different bits. This file keeps each
 * tuned choice so that every later process on the same device and cuBLASLt takes the first one's.
 * This module is the file (format, strict parsing, merge, atomic write); it has no CUDA in it, so
 * the CPU build compiles and tests it. The CUDA side only compares the stored algorithm bytes with
 * the candidates cuBLASLt's heuristic returns for the plan: bytes from the file are never handed to
 * cuBLASLt.
 *
 * Format (UTF-8 JSON, one value, every member required, no others; an integer is a number of integral value in the range given):
 *   {"format": "verl-reward gemm-tune", "version": 1, "entries": [ENTRY, ...]}
 *   ENTRY: {"device": cudaDeviceProp.name (1..255 bytes), "cc_major": 0..99, "cc_minor": 0..99,
 *           "sms": multiprocessors 1..65535, "cublaslt": cublasLtGetVersion() 1..2^31-1,
 *           the plan's key (vr_gemm_tune_key_names, in vr_gemm_tune_entry_t.key's order):
 *           "m", "n", "k" (rows of D, columns of D, the inner dimension: 1..2^31-1),
 *           "out_f32", "bias", "beta1" (0|1), "gelu" (0..2), "op_a", "op_b" (0 = N, 1 = T),
 *           "bias_fallback" (0|1: bias added by a kernel), "candidates" (1..64: the plan's candidate
 *           count), "cold" (0|1: timed with operands from HBM), "workspace_4k" (workspace bytes >> 12),
 *           "algo": cublasLtMatmulAlgo_t.data as 8 strings of 16 lowercase hex digits,
 *           "us": the choice's median time in microseconds (a number >= 0; information only)}
 * No two entries have the same key (device .. workspace_4k). At most VR_GEMM_TUNE_MAX_ENTRIES
 * entries and VR_GEMM_TUNE_MAX_BYTES bytes. Anything else refuses the whole file with an error
 * that names it and the entry (0-based) and member at fault.
 *
 * Where it lives: vr_gemm_tune_default_path. Files it creates: the file and PATH.lock, mode 0600, in
 * a directory made 0700 when missing; an existing file or directory owned by another user or
 * writable by group or others is refused (VR_ERR_PERM), as is a symlink at the file. The checks are
 * made on open descriptors (fstat), and a store works relative to the directory it opened and
 * checked (openat / renameat), so a rename between a check and its use changes nothing.
 * Threading: none inside; the functions share no state. */
#ifndef VR_GEMM_TUNE_H
#define VR_GEMM_TUNE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VR_GEMM_TUNE_VERSION 1
#define VR_GEMM_TUNE_FORMAT "verl-reward gemm-tune"
#define VR_GEMM_TUNE_KEY 13
#define VR_GEMM_TUNE_ALGO 8 /* uint64 words of cublasLtMatmulAlgo_t */
#define VR_GEMM_TUNE_DEVICE 256
#define VR_GEMM_TUNE_MAX_ENTRIES 4096
#define VR_GEMM_TUNE_MAX_BYTES (8u << 20)
#define VR_GEMM_TUNE_LOCK_WAIT_MS 5000 /* vr_gemm_tune_store's longest wait for PATH.lock */

/* key[] indices */
enum {
  VR_GT_M, VR_GT_N, VR_GT_K, VR_GT_OUT_F32, VR_GT_BIAS, VR_GT_BETA1, VR_GT_GELU, VR_GT_OP_A, VR_GT_OP_B,
  VR_GT_BIAS_FALLBACK, VR_GT_CANDIDATES, VR_GT_COLD, VR_GT_WORKSPACE_4K
};
extern const char *const vr_gemm_tune_key_names[VR_GEMM_TUNE_KEY];

typedef struct vr_gemm_tune_entry {
  /* the key: where the choice is valid */
  char device[VR_GEMM_TUNE_DEVICE]; /* NUL-terminated; the rest of the array zero (compared whole) */
  int32_t cc_major, cc_minor, sms;
  int64_t cublaslt;
  int32_t key[VR_GEMM_TUNE_KEY];
  /* the choice */
  uint64_t algo[VR_GEMM_TUNE_ALGO];
  double us;
  /* not in the file: 0 read from one; 1 tuned by this process (a file's entry of the same key wins
   * at a merge); 2 tuned by this process in place of a loaded entry that was not valid here (it
   * replaces the file's); -1 (the cuda side's) read from one and found not valid here: not written */
  int fresh;
} vr_gemm_tune_entry_t;

typedef struct vr_gemm_tune_set {
  vr_gemm_tune_entry_t *e;
  size_t n, cap;
} vr_gemm_tune_set_t;

void vr_gemm_tune_set_free(vr_gemm_tune_set_t *s); /* and zeroes it; NULL-safe */
/* 1 when a and b have the same key (device .. key[]). */
int vr_gemm_tune_same_key(const vr_gemm_tune_entry_t *a, const vr_gemm_tune_entry_t *b);
/* The index of the entry with e's key, or -1. Linear. */
long vr_gemm_tune_find(const vr_gemm_tune_set_t *s, const vr_gemm_tune_entry_t *e);
/* Appends a copy of e (no check for its key): 0, VR_ERR_NOMEM, or VR_ERR_TOO_LARGE at
 * VR_GEMM_TUNE_MAX_ENTRIES. */
int vr_gemm_tune_append(vr_gemm_tune_set_t *s, const vr_gemm_tune_entry_t *e);
/* Merges mine's fresh entries (fresh > 0) into into: a key into lacks is appended, an entry with fresh 2
 * replaces into's of its key, one with fresh 1 leaves into's (the first choice written stays).
 * *added (may be NULL) counts the appended and replaced. 0, VR_ERR_NOMEM, VR_ERR_TOO_LARGE (the
 * entries that fit are in). */
int vr_gemm_tune_merge(vr_gemm_tune_set_t *into, const vr_gemm_tune_set_t *mine, size_t *added);

/* Parses text[0, len) (the file at path, named in errors) into *out (entries with fresh 0; *out
 * zeroed first, owned by the caller on success, empty on failure). 0; VR_ERR_PARSE with err =
 * "PATH: entry I: what" (or "PATH: what" for the file as a whole); VR_ERR_UNSUPPORTED for a
 * well-formed file of a newer version than VR_GEMM_TUNE_VERSION; VR_ERR_NOMEM. */
int vr_gemm_tune_parse(const char *text, size_t len, const char *path, vr_gemm_tune_set_t *out, char *err,
                       size_t cap);
/* The file's text for s (one entry a line, sorted by nothing: s's order), malloc'd, NUL-terminated,
 * *len without the NUL; NULL when out of memory. vr_gemm_tune_parse reads it back to s's entries
 * (a non-finite or negative us is written as 0). */
char *vr_gemm_tune_serialise(const vr_gemm_tune_set_t *s, size_t *len);

/* The file to use, into out (cap bytes): configured (a path, "off" or NULL/"" for the default) else
 * env (VERL_GEMM_CACHE's value: a path or "off"; NULL/"" unset) else
 * ${xdg:-$home/.cache}/verl-reward/gemm-tune.json (xdg = XDG_CACHE_HOME, home = HOME; a relative
 * XDG_CACHE_HOME is ignored, as the XDG spec says). 0: out is the path; 1: "off" (no file); -1:
 * none (no HOME, or a path past cap), out holds why. The caller reads the environment. */
int vr_gemm_tune_resolve(const char *configured, const char *env, const char *xdg, const char *home, char *out,
                         size_t cap);

/* Reads the file at path into *out (zeroed first). 0 with the entries, or with none when the file
 * does not exist (*exists 0, else 1); VR_ERR_PERM (a symlink, not a regular file, another owner,
 * group/other-writable), VR_ERR_TOO_LARGE, VR_ERR_IO, VR_ERR_PARSE, VR_ERR_UNSUPPORTED (a newer
 * version's file), VR_ERR_NOMEM with err. */
int vr_gemm_tune_load(const char *path, vr_gemm_tune_set_t *out, int *exists, char *err, size_t cap);
/* Makes path's directory when missing (each missing level 0700) and checks it is a directory of
 * ours that group and others cannot write. 0, or VR_ERR_PERM / VR_ERR_IO with err. */
int vr_gemm_tune_prepare(const char *path, char *err, size_t cap);
/* Merges mine's fresh entries into the file (vr_gemm_tune_merge) under an exclusive flock of
 * PATH.lock, writing PATH.tmp.PID (0600) and renaming it over path: a reader sees the old file or
 * the new one, and writers one after the other each keep what the other added. A file that does not
 * parse is replaced (*replaced 1, its error in err; may be NULL). *added: entries mine added or
 * replaced; *total: the file's entries after. 0 (err may hold the replaced file's error, or say
 * that the file is full and how many new choices were not written), or VR_ERR_PERM / VR_ERR_IO /
 * VR_ERR_NOMEM / VR_ERR_UNSUPPORTED (a newer version's file) with err (the file is as it was), or
 * VR_ERR_BUSY when another
 * process held the lock for VR_GEMM_TUNE_LOCK_WAIT_MS (nothing written). */
int vr_gemm_tune_store(const char *path, const vr_gemm_tune_set_t *mine, size_t *added, size_t *total,
                       int *replaced, char *err, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* VR_GEMM_TUNE_H */
