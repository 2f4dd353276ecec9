/* fuzz_trainer_yaml.c: libFuzzer harness for the device-map and topology parsers. Every input
 * goes through both; a parse must return 0 or VR_DEVMAP_EBAD with a message, and a map it
 * accepts must hold the invariants the trainer relies on (checked here, trap otherwise).
 * Build: CC=clang cmake -DVR_FUZZ=ON; run: build/bin/fuzz_trainer_yaml -max_total_time=60 DIR. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vr_devmap.h"
#include "vr_topology.h"

static void check_map(const vr_devmap_t *m) {
  for (int w = 1; w < m->n_workers; w++) {
    const vr_device_t *a = &m->workers[w - 1], *b = &m->workers[w];
    long ka = ((long)a->node << 20) | ((long)a->kind << 16) | a->index;
    long kb = ((long)b->node << 20) | ((long)b->kind << 16) | b->index;
    if (ka >= kb) __builtin_trap(); /* sorted by (node, kind, index), no device twice */
  }
  for (int r = 0; r < VR_ROLE_COUNT; r++)
    for (int i = 0; i < m->roles[r].n_devices; i++) {
      int found = 0;
      for (int w = 0; w < m->n_workers; w++)
        if (vr_device_eq(&m->workers[w], &m->roles[r].devices[i])) found = (m->worker_roles[w] >> r) & 1;
      if (!found) __builtin_trap();
    }
  static char out[1 << 16];
  vr_devmap_describe(m, out, sizeof out);
  vr_devmap_json(m, out, sizeof out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char err[8192];
  static vr_devmap_t m;
  static vr_topology_t t;
  vr_topology_shape_t shape = {.n_nodes = 2, .gpus_per_node = {8, 4}};
  int rc = vr_devmap_parse("fuzz", (const char *)data, size, size && (data[0] & 1) ? &shape : NULL, &m, err,
                           sizeof err);
  if (rc != 0 && (rc != VR_DEVMAP_EBAD || !err[0])) __builtin_trap();
  if (rc == 0) {
    check_map(&m);
    vr_topology_gpus(8, &t);
    vr_topology_check(&t, &m, err, sizeof err);
  }
  rc = vr_topology_parse("fuzz", (const char *)data, size, &t, err, sizeof err);
  if (rc != 0 && (rc != VR_DEVMAP_EBAD || !err[0])) __builtin_trap();
  if (rc == 0 && (t.shape.n_nodes < 1 || t.shape.n_nodes > VR_DEVMAP_MAX_NODES)) __builtin_trap();
  return 0;
}
