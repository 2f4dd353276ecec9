/* fuzz_gemm_tune.c: libFuzzer harness for the GEMM-choice cache file's parser (vr_gemm_tune.h).
 * Input: the file's bytes. A file that parses must serialise to a text that parses back to the same
 * entries, with no key twice. Build: CC=clang cmake -DVR_FUZZ=ON; run:
 * build/bin/fuzz_gemm_tune -max_total_time=60 CORPUS tests/fixtures/fuzz_gemm_tune. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vr_gemm_tune.h"
#include "vr_log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int quiet;
  if (!quiet) {
    vr_log_set_level(VR_LOG_OFF);
    quiet = 1;
  }
  vr_gemm_tune_set_t s, t;
  char err[2048];
  if (vr_gemm_tune_parse((const char *)data, size, "fuzz", &s, err, sizeof err) != 0) {
    if (!err[0]) __builtin_trap(); /* a refusal says why */
    return 0;
  }
  size_t len = 0;
  char *text = vr_gemm_tune_serialise(&s, &len);
  if (text) {
    if (vr_gemm_tune_parse(text, len, "fuzz", &t, err, sizeof err) != 0 || t.n != s.n) __builtin_trap();
    for (size_t i = 0; i < s.n; i++)
      if (!vr_gemm_tune_same_key(&s.e[i], &t.e[i]) || memcmp(s.e[i].algo, t.e[i].algo, sizeof s.e[i].algo))
        __builtin_trap();
    vr_gemm_tune_set_free(&t);
    free(text);
  }
  for (size_t i = 0; i < s.n; i++)
    if (vr_gemm_tune_find(&s, &s.e[i]) != (long)i) __builtin_trap();
  vr_gemm_tune_set_free(&s);
  return 0;
}
