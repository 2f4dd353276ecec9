/* fuzz_trainer_tids.c: libFuzzer harness for the token-id JSON lines parser (vr_tids.h). A line
 * must parse to 0 or a documented error with a reason; an accepted line must add exactly one
 * sequence of 1..max_len ids, each in [0, vocab), and leave the earlier ones untouched; a
 * rejected one must leave the table as it was, and an accepted line followed by a junk byte must
 * be refused (one object per line). Lines are split at '\n' as vr_tids_read does.
 * Build: CC=clang cmake -DVR_FUZZ=ON; run: build/bin/fuzz_trainer_tids -max_total_time=60 DIR. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_tids.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const int vocab = 1000, max_len = 64;
  vr_tids_t t = {0};
  size_t s = 0;
  uint32_t line = 0;
  while (s <= size) {
    const uint8_t *nl = memchr(data + s, '\n', size - s);
    size_t e = nl ? (size_t)(nl - data) : size;
    char why[160] = "";
    uint32_t n0 = t.n;
    size_t T0 = t.T;
    int rc = vr_tids_parse_line((const char *)data + s, e - s, vocab, max_len, ++line, &t, why, sizeof why);
    if (rc == 0) {
      if (t.n != n0 + 1 || t.cu[t.n] != t.T || t.T - T0 < 1 || t.T - T0 > (size_t)max_len) __builtin_trap();
      for (size_t i = T0; i < t.T; i++)
        if (t.ids[i] < 0 || t.ids[i] >= vocab) __builtin_trap();
      /* a line is exactly one object: the same line with a byte of junk after it is refused */
      if (e - s < 4096) {
        char junk[4097];
        memcpy(junk, data + s, e - s);
        junk[e - s] = 'x';
        vr_tids_t u = {0};
        if (vr_tids_parse_line(junk, e - s + 1, vocab, max_len, line, &u, why, sizeof why) != VR_ERR_PARSE)
          __builtin_trap();
        vr_tids_free(&u);
      }
    } else {
      if (t.n != n0 || t.T != T0 || !why[0]) __builtin_trap();
      if (rc != VR_ERR_PARSE && rc != VR_ERR_EMPTY_SEQ && rc != VR_ERR_SEQ_TOO_LONG && rc != VR_ERR_TOKEN_RANGE &&
          rc != VR_ERR_NOMEM)
        __builtin_trap();
    }
    if (!nl) break;
    s = e + 1;
  }
  vr_tids_free(&t);
  return 0;
}
