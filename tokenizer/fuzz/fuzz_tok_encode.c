/* fuzz_tok_encode: libFuzzer harness for encode on random bytes with real tokenizers: the
 * directories of VR_TOK_FUZZ_DIRS (colon-separated, loaded once). Invalid UTF-8 must be refused;
 * the same bytes made valid (U+FFFD for each bad sequence) must encode, with the same ids through a
 * scratch kept across inputs (warm word cache) as through a fresh one, and the ids must decode.
 * Build: -DVR_FUZZ=ON with clang. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vr_tok_util.h"
#include "vr_tokenizer.h"

static vr_tok_t *toks[8];
static vr_tok_scratch_t *scratch[8]; /* one per tokenizer, kept across inputs: its word cache warms up */
static int ntoks = -1;

static void load_all(void) {
  ntoks = 0;
  const char *env = getenv("VR_TOK_FUZZ_DIRS");
  if (!env) {
    fprintf(stderr, "fuzz_tok_encode: set VR_TOK_FUZZ_DIRS=dir[:dir...]\n");
    abort();
  }
  char *list = strdup(env), *save = NULL;
  for (char *d = strtok_r(list, ":", &save); d && ntoks < 8; d = strtok_r(NULL, ":", &save)) {
    char err[512];
    if (vr_tok_load(d, &toks[ntoks], err, sizeof err)) {
      fprintf(stderr, "fuzz_tok_encode: %s\n", err);
      abort();
    }
    scratch[ntoks] = vr_tok_scratch_new();
    if (!scratch[ntoks]) abort();
    ntoks++;
  }
  free(list);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (ntoks < 0) load_all();
  const char *s = (const char *)data;
  int valid = vr_tok_utf8_check(s, size) == size;
  vr_tok_buf_t fixed = {0};
  if (vr_tok_utf8_lossy(&fixed, s, size)) abort();
  for (int k = 0; k < ntoks; k++) {
    char err[512];
    int32_t *ids = NULL;
    size_t n = 0;
    int rc = vr_tok_encode(toks[k], s, size, k & 1, &ids, &n, err, sizeof err);
    if ((rc == 0) != valid) abort(); /* refused exactly when the bytes are not UTF-8 */
    free(ids);
    ids = NULL;
    if (vr_tok_encode(toks[k], fixed.p ? fixed.p : "", fixed.n, 0, &ids, &n, err, sizeof err)) abort();
    /* the warm scratch (word cache) gives the same ids as a fresh one */
    int32_t *ids2 = NULL;
    size_t n2 = 0;
    if (vr_tok_encode_with(toks[k], scratch[k], fixed.p ? fixed.p : "", fixed.n, 0, &ids2, &n2, err, sizeof err) ||
        n2 != n || (n && memcmp(ids, ids2, n * sizeof *ids)))
      abort();
    free(ids2);
    char *out = NULL;
    size_t on = 0;
    if (vr_tok_decode(toks[k], ids, n, 0, &out, &on, err, sizeof err)) abort();
    free(out);
    free(ids);
  }
  vr_tok_buf_free(&fixed);
  return 0;
}
