/* fuzz_rl_dataset.c: libFuzzer harness for the RL prompt rows (vr_dataset.h) and the RL config
 * (vr_tconfig.h + vr_rlconfig.h). Each input line must parse to a row with 1..max ids, each in
 * [0, vocab), a non-NULL data_source, or to a documented error with a reason and a zeroed row.
 * The whole input is also written to a file and loaded as ppo.yaml: 0 or -2 with a message.
 * Build: CC=clang cmake -DVR_FUZZ=ON; run: build/bin/fuzz_rl_dataset -max_total_time=60 DIR. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "verl_reward/status.h"
#include "vr_dataset.h"
#include "vr_rlconfig.h"
#include "vr_tconfig.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const vr_dataset_options_t opt = {"prompt", 16, (int)(size % 4), 1000, NULL};
  size_t s = 0;
  while (s <= size) {
    const uint8_t *nl = memchr(data + s, '\n', size - s);
    size_t e = nl ? (size_t)(nl - data) : size;
    char why[256] = "";
    vr_prompt_row_t r;
    int rc = vr_dataset_parse_line((const char *)data + s, e - s, &opt, &r, why, sizeof why);
    if (rc >= 0) {
      if (rc > 1 || r.n_ids < 1 || r.n_ids > opt.max_prompt_length || !r.data_source) __builtin_trap();
      for (uint32_t i = 0; i < r.n_ids; i++)
        if (r.ids[i] < 0 || r.ids[i] >= opt.vocab_size) __builtin_trap();
      vr_prompt_row_free(&r);
    } else if (!why[0] || r.ids || r.data_source || r.ground_truth || r.extra_info) {
      __builtin_trap();
    }
    if (!nl) break;
    s = e + 1;
  }
  char path[64];
  snprintf(path, sizeof path, "/tmp/fuzz_rl_config_%d.yaml", (int)getpid());
  FILE *f = fopen(path, "wb");
  if (!f) return 0;
  fwrite(data, 1, size, f);
  fclose(f);
  static vr_tconfig_t c;
  static char err[8192];
  int rc = vr_tconfig_load(path, &c, err, sizeof err);
  if (rc != 0 && (rc != -2 || !err[0])) __builtin_trap();
  unlink(path);
  return 0;
}
