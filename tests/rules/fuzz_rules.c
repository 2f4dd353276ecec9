/* libFuzzer target for vr_rules (built with -DVR_FUZZ=ON and clang):
 *   build/tests/fuzz_rules -max_total_time=60 [corpus_dir]
 * Every input goes through msgpack and JSON extras parsing, math/gsm8k
 * extraction and reward-spec parsing (rules_fuzz_one.c). */
#include "rules_fuzz_one.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  return vr_rules_fuzz_one(data, size);
}
