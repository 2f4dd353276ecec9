/* test_tids.c: the token-id line parser's bounds that the CLI tests cannot reach (vr_tids.h):
 * past 2^32 - 1 tokens in all the 32-bit cu offsets would wrap, so the line is refused with
 * VR_ERR_TOO_LARGE, out unchanged and nothing allocated; an ordinary line still parses. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_tids.h"

static int fails;
#define CHECK(c)                                                        \
  do {                                                                  \
    if (!(c)) {                                                         \
      fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
      fails++;                                                          \
    }                                                                   \
  } while (0)

int main(void) {
  char why[256] = "";
  static const char line[] = "{\"input_ids\": [5, 6, 7]}";
  vr_tids_t t;
  memset(&t, 0, sizeof t);
  CHECK(vr_tids_parse_line(line, strlen(line), 100, 16, 1, &t, why, sizeof why) == 0);
  CHECK(t.n == 1 && t.T == 3 && t.cu[1] == 3 && t.ids[2] == 7 && t.line[0] == 1);
  vr_tids_free(&t);

  /* a run already holding 2^32 - 2 tokens (as if read before): three more would wrap cu */
  memset(&t, 0, sizeof t);
  t.T = UINT32_MAX - 1;
  CHECK(vr_tids_parse_line(line, strlen(line), 100, 16, 7, &t, why, sizeof why) == VR_ERR_TOO_LARGE);
  CHECK(strstr(why, "2^32") != NULL);
  CHECK(t.n == 0 && t.T == UINT32_MAX - 1 && t.ids == NULL && t.cu == NULL);
  printf("past 2^32 - 1 tokens: %s\n", why);
  t.T = 0;
  vr_tids_free(&t);
  printf("%s\n", fails ? "FAILED" : "test_tids: all passed");
  return fails != 0;
}
