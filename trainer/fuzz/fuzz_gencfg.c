/* fuzz_gencfg.c: libFuzzer harness for the eos_token_id parser (vr_gencfg.h). Every input must give
 * 1 (ids found), 0 (none named) or VR_ERR_MODEL_FORMAT, never more ids than the capacity, every id
 * inside the vocabulary (checked here, trap otherwise).
 * Build: CC=clang cmake -DVR_FUZZ=ON; run: build/bin/fuzz_gencfg -max_total_time=60 DIR. */
#include <stddef.h>
#include <stdint.h>

#include "verl_reward/status.h"
#include "vr_gencfg.h"
#include "vr_log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int quiet;
  if (!quiet) {
    vr_log_set_level(VR_LOG_FATAL);
    quiet = 1;
  }
  int32_t ids[4];
  uint32_t n = 99;
  const int vocab = 1000;
  int rc = vr_gencfg_eos_parse((const char *)data, size, "fuzz", vocab, ids, 4, &n);
  if (rc != 0 && rc != 1 && rc != VR_ERR_MODEL_FORMAT) __builtin_trap();
  if (n > 4 || (rc != 1 && n != 0)) __builtin_trap();
  for (uint32_t i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= vocab) __builtin_trap();
  return 0;
}
