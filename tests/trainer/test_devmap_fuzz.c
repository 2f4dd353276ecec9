/* test_devmap_fuzz.c: seeded random mutations of the good device maps and topologies fed to
 * vr_devmap_parse and vr_topology_parse. Each must return 0 or VR_DEVMAP_EBAD with a message
 * (never crash, never fail silently), and a map it accepts must hold the invariants the trainer
 * relies on. The seed is printed; VR_TEST_SEED=N replays a run, VR_TEST_ROUNDS=N changes its
 * length (2000 by default). Runs under ASan + UBSan in the sanitizer build. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "trainer_test_util.h"
#include "vr_devmap.h"
#include "vr_topology.h"

static const char *const k_files[] = {
    "device_maps/good/seed_8gpu.yaml", "device_maps/good/one_gpu.yaml",  "device_maps/good/two_gpu.yaml",
    "device_maps/good/cpu.yaml",       "device_maps/good/multinode.yaml", "topologies/good/two_domains.yaml",
    "topologies/good/pcie_only.yaml",
};
#define N_FILES (sizeof k_files / sizeof k_files[0])

/* Pieces that make mutations likely to reach the parsers' checks rather than libyaml's. */
static const char *const k_tokens[] = {
    "[", "]", "{", "}", ",", ":", ": ", "\n", "  ", "- ", "#", "\"", "'", "&a ", "*a", "---\n", "~", "-1", "0", "9",
    "255", "256", "99999999999999999999", "node1:", "nodeX:", "cpu:", "cpu:0", "cuda:0", "actor", "critic",
    "rollout", "reference", "reward", "colocate", "device_group", "placement_policy", "hybrid", "offload_strategy",
    "cpu_prefetch", "nccl_backend", "mpi", "nccl", "shared_mem_name", "service_url", "http://", "https://h:1",
    "nodes", "gpus", "nvlink", "all", "none", "\t", "\xff", "\xc3\xa9", "\\0", "!!str ", "? ", "\"a\\nb\": ",
    "\"\\x01\"",
};
#define N_TOKENS (sizeof k_tokens / sizeof k_tokens[0])

static uint64_t g_rng;
static uint32_t rnd(uint32_t n) { /* xorshift64*, uniform enough for mutation choices */
  g_rng ^= g_rng >> 12;
  g_rng ^= g_rng << 25;
  g_rng ^= g_rng >> 27;
  return (uint32_t)((g_rng * 2685821657736338717ull) >> 33) % (n ? n : 1);
}

typedef struct buf {
  char *p;
  size_t len, cap;
} buf_t;

static void splice(buf_t *b, size_t at, size_t del, const char *ins, size_t n) {
  if (at > b->len) at = b->len;
  if (del > b->len - at) del = b->len - at;
  if (b->len - del + n + 1 > b->cap) {
    b->cap = (b->len - del + n + 1) * 2;
    b->p = realloc(b->p, b->cap);
    assert_non_null(b->p);
  }
  memmove(b->p + at + n, b->p + at + del, b->len - at - del);
  memcpy(b->p + at, ins, n);
  b->len = b->len - del + n;
  b->p[b->len] = '\0';
}

/* n bytes (NULs included: a flipped byte may be 0) in a buffer of their own. */
static char *copy_run(const char *p, size_t n) {
  char *r = malloc(n + 1);
  assert_non_null(r);
  memcpy(r, p, n);
  return r;
}

static void mutate(buf_t *b) {
  size_t at = b->len ? rnd((uint32_t)b->len + 1) : 0;
  switch (rnd(7)) {
    case 0: { /* flip a byte */
      if (!b->len) break;
      char c = (char)rnd(256);
      splice(b, at, 1, &c, 1);
      break;
    }
    case 1: { /* insert a token */
      const char *t = k_tokens[rnd(N_TOKENS)];
      splice(b, at, 0, t, strlen(t));
      break;
    }
    case 2: /* delete a run */
      splice(b, at, 1 + rnd(12), "", 0);
      break;
    case 3: { /* replace a run with a token */
      const char *t = k_tokens[rnd(N_TOKENS)];
      splice(b, at, 1 + rnd(6), t, strlen(t));
      break;
    }
    case 4: { /* duplicate a line */
      size_t s = at;
      while (s > 0 && b->p[s - 1] != '\n') s--;
      size_t e = at;
      while (e < b->len && b->p[e] != '\n') e++;
      size_t n = e - s + (e < b->len);
      char *line = copy_run(b->p + s, n);
      splice(b, s, 0, line, n);
      free(line);
      break;
    }
    case 5: /* cut the text short */
      b->len = at;
      b->p[b->len] = '\0';
      break;
    default: { /* copy a run of the text elsewhere */
      size_t from = b->len ? rnd((uint32_t)b->len) : 0, n = rnd(24);
      if (from + n > b->len) n = b->len - from;
      char *run = copy_run(b->p + from, n);
      splice(b, at, 0, run, n);
      free(run);
      break;
    }
  }
}

static void check_accepted(const vr_devmap_t *m) {
  assert_true(m->roles[VR_ROLE_ACTOR].present && m->roles[VR_ROLE_ACTOR].n_devices > 0);
  assert_true(m->roles[VR_ROLE_ROLLOUT].present && m->roles[VR_ROLE_ROLLOUT].n_devices > 0);
  for (int w = 1; w < m->n_workers; w++) {
    const vr_device_t *a = &m->workers[w - 1], *b = &m->workers[w];
    long ka = ((long)a->node << 20) | ((long)a->kind << 16) | a->index;
    long kb = ((long)b->node << 20) | ((long)b->kind << 16) | b->index;
    assert_true(ka < kb);
  }
  for (int r = 0; r < VR_ROLE_COUNT; r++)
    for (int i = 0; i < m->roles[r].n_devices; i++) {
      int found = 0;
      for (int w = 0; w < m->n_workers; w++)
        if (vr_device_eq(&m->workers[w], &m->roles[r].devices[i])) found = (m->worker_roles[w] >> r) & 1;
      assert_true(found);
      for (int q = 0; q < r; q++) /* sharing implies colocate */
        for (int j = 0; j < m->roles[q].n_devices; j++)
          if (vr_device_eq(&m->roles[q].devices[j], &m->roles[r].devices[i]))
            assert_true((m->colocate[q] >> r) & 1);
    }
  char out[1 << 14];
  size_t n = vr_devmap_describe(m, out, sizeof out);
  assert_int_equal(n, strlen(out));
  assert_true(!strncmp(out, "Device mapping resolved:\n", 25));
  n = vr_devmap_json(m, out, sizeof out);
  assert_int_equal(n, strlen(out));
}

static void test_mutations(void **state) {
  (void)state;
  const char *env = getenv("VR_TEST_SEED"), *rounds_env = getenv("VR_TEST_ROUNDS");
  uint64_t seed = env ? strtoull(env, NULL, 0) : 20240611;
  int rounds = rounds_env ? atoi(rounds_env) : 2000;
  printf("test_devmap_fuzz: seed %llu (VR_TEST_SEED=%llu replays it), %d rounds\n", (unsigned long long)seed,
         (unsigned long long)seed, rounds);
  g_rng = seed * 0x9E3779B97F4A7C15ull + 1;
  char *texts[N_FILES];
  size_t lens[N_FILES];
  for (size_t f = 0; f < N_FILES; f++) {
    char path[1200];
    tt_fixture(path, sizeof path, k_files[f]);
    texts[f] = tt_read(path, &lens[f]);
  }
  static vr_devmap_t m;
  static vr_topology_t t;
  static char err[8192];
  vr_topology_shape_t shape = {.n_nodes = 2, .gpus_per_node = {8, 8}};
  int accepted = 0, refused = 0;
  buf_t b = {0};
  for (int i = 0; i < rounds; i++) {
    size_t f = rnd(N_FILES);
    b.len = 0;
    splice(&b, 0, 0, texts[f], lens[f]);
    int k = 1 + (int)rnd(4);
    for (int j = 0; j < k; j++) mutate(&b);
    int rc = vr_devmap_parse("fuzz.yaml", b.p, b.len, rnd(2) ? &shape : NULL, &m, err, sizeof err);
    if (rc != 0 && rc != VR_DEVMAP_EBAD) fail_msg("round %d: rc %d for:\n%s", i, rc, b.p);
    if (rc == VR_DEVMAP_EBAD && !err[0]) fail_msg("round %d: refused without a message:\n%s", i, b.p);
    int map_ok = rc == 0;
    if (map_ok) {
      check_accepted(&m);
      accepted++;
    } else {
      assert_true(strstr(err, ": error: ") != NULL);
      refused++;
    }
    tt_check_format(err, "fuzz.yaml"); /* one message a line, each with its HINT, whatever the text held */
    rc = vr_topology_parse("fuzz.yaml", b.p, b.len, &t, err, sizeof err);
    if (rc != 0 && (rc != VR_DEVMAP_EBAD || !err[0])) fail_msg("round %d: topology rc %d for:\n%s", i, rc, b.p);
    tt_check_format(err, "fuzz.yaml");
    if (rc == 0) {
      assert_true(t.shape.n_nodes >= 1 && t.shape.n_nodes <= VR_DEVMAP_MAX_NODES);
      if (map_ok) vr_topology_check(&t, &m, err, sizeof err);
    }
  }
  printf("test_devmap_fuzz: %d maps accepted, %d refused\n", accepted, refused);
  /* the mutations are not all fatal, nor all harmless: both paths ran */
  assert_true(accepted > 0 && refused > 0);
  free(b.p);
  for (size_t f = 0; f < N_FILES; f++) free(texts[f]);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_mutations)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
