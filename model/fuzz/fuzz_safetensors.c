/* fuzz_safetensors.c: libFuzzer harness for the safetensors header parser.
 * Input: the first 8 bytes are the data-section size (little endian, masked to
 * 40 bits), the rest is the header JSON. Build: CC=clang cmake -DVR_FUZZ=ON;
 * run: build/bin/fuzz_safetensors -max_total_time=60 [corpus dir]. */
#include <stddef.h>
#include <stdint.h>

#include "vr_log.h"
#include "vr_safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static int quiet;
  if (!quiet) {
    vr_log_set_level(VR_LOG_OFF);
    quiet = 1;
  }
  if (size < 8) return 0;
  uint64_t data_size = 0;
  for (int i = 7; i >= 0; i--) data_size = (data_size << 8) | data[i];
  data_size &= ((uint64_t)1 << 40) - 1;
  vr_st_entry_t *e = NULL;
  size_t n = 0;
  if (vr_st_parse_header((const char *)data + 8, size - 8, data_size, "fuzz", &e, &n) == 0) {
    /* invariants the loader relies on */
    for (size_t i = 0; i < n; i++) {
      if (e[i].begin > e[i].end || e[i].end > data_size || e[i].end - e[i].begin != e[i].t.nbytes)
        __builtin_trap();
      if (i > 0 && __builtin_strcmp(e[i - 1].name, e[i].name) >= 0) __builtin_trap();
    }
    vr_st_entries_free(e, n);
  }
  return 0;
}
