/* fuzz_tok_json: libFuzzer harness for the tokenizer.json loader (every component parser) on
 * mutated JSON; a file that loads is then used: encode of fixed texts and decode of its ids.
 * Build: -DVR_FUZZ=ON with clang. Seeds: tests/fixtures/fuzz_tok_json. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vr_tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  vr_tok_t *t = NULL;
  char err[512];
  if (vr_tok_load_json((const char *)data, size, "fuzz.json", &t, err, sizeof err) != 0) return 0;
  static const char *const texts[] = {"", " ", "Hello, world! 123", "  a\tb\n\nc  ", "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80",
                                      "<s>x</s>[CLS]<mask>"};
  for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
    int32_t *ids = NULL;
    size_t n = 0;
    if (vr_tok_encode(t, texts[i], strlen(texts[i]), 1, &ids, &n, err, sizeof err) == 0) {
      char *out = NULL;
      size_t on = 0;
      if (vr_tok_decode(t, ids, n, i & 1, &out, &on, err, sizeof err) == 0) free(out);
    }
    free(ids);
  }
  int32_t some[] = {0, 1, 2, 3, 100, 5000};
  char *out = NULL;
  size_t on = 0;
  if (vr_tok_decode(t, some, 6, 0, &out, &on, err, sizeof err) == 0) free(out);
  vr_tok_free(t);
  return 0;
}
