/* test_topology.c: topology files (tests/fixtures/topologies/), --gpus N, the local machine,
 * links between devices, and vr_topology_check's warnings, the NVLink-domain trap among them. */
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

static char g_err[1 << 16];
static vr_topology_t g_t; /* 256 KiB: not on the stack */

static int load_topo(const char *rel, char *path, size_t cap) {
  tt_fixture(path, cap, rel);
  int rc = vr_topology_load(path, &g_t, g_err, sizeof g_err);
  printf("  %s -> %d\n%s", rel, rc, g_err);
  return rc;
}

static vr_link_t link_of(int na, int a, int nb, int b) {
  vr_device_t x = {VR_DEVICE_GPU, na, a}, y = {VR_DEVICE_GPU, nb, b};
  return vr_topology_link(&g_t, &x, &y);
}

static void map_of(const char *text, vr_devmap_t *m) {
  int rc = vr_devmap_parse("map.yaml", text, strlen(text), &g_t.shape, m, g_err, sizeof g_err);
  if (rc) fail_msg("map does not parse:\n%s", g_err);
}

static void test_two_domains(void **state) {
  (void)state;
  char path[1200];
  assert_int_equal(load_topo("topologies/good/two_domains.yaml", path, sizeof path), 0);
  assert_string_equal(g_err, "");
  assert_int_equal(g_t.shape.n_nodes, 1);
  assert_int_equal(g_t.shape.gpus_per_node[0], 8);
  char src[1300];
  snprintf(src, sizeof src, "file %s", path);
  assert_string_equal(g_t.source, src);
  assert_int_equal(link_of(0, 0, 0, 3), VR_LINK_NVLINK);
  assert_int_equal(link_of(0, 5, 0, 4), VR_LINK_NVLINK);
  assert_int_equal(link_of(0, 3, 0, 4), VR_LINK_PCIE);
  assert_int_equal(link_of(0, 0, 0, 7), VR_LINK_PCIE);
  assert_int_equal(link_of(0, 2, 0, 2), VR_LINK_SELF);
  assert_int_equal(link_of(0, 2, 0, 8), VR_LINK_UNKNOWN); /* no GPU 8 */
  vr_device_t c0 = {VR_DEVICE_CPU, 0, 0}, g0 = {VR_DEVICE_GPU, 0, 0};
  assert_int_equal(vr_topology_link(&g_t, &c0, &g0), VR_LINK_UNKNOWN);
}

static void test_other_good_files(void **state) {
  (void)state;
  char path[1200];
  assert_int_equal(load_topo("topologies/good/nvswitch_2nodes.yaml", path, sizeof path), 0);
  assert_int_equal(g_t.shape.n_nodes, 2);
  assert_int_equal(link_of(0, 0, 0, 7), VR_LINK_NVLINK);
  assert_int_equal(link_of(1, 1, 1, 6), VR_LINK_NVLINK);
  assert_int_equal(link_of(0, 1, 1, 1), VR_LINK_NETWORK);

  assert_int_equal(load_topo("topologies/good/pcie_only.yaml", path, sizeof path), 0);
  assert_int_equal(g_t.shape.n_nodes, 2);
  assert_int_equal(g_t.shape.gpus_per_node[1], 0);
  assert_int_equal(link_of(0, 0, 0, 1), VR_LINK_PCIE);

  assert_int_equal(load_topo("topologies/good/one_pair.yaml", path, sizeof path), 0);
  assert_int_equal(link_of(0, 0, 0, 1), VR_LINK_NVLINK);
  assert_int_equal(link_of(0, 1, 0, 2), VR_LINK_PCIE);
  assert_int_equal(link_of(0, 2, 0, 3), VR_LINK_PCIE);
}

typedef struct bad_case {
  const char *file;
  int line;
  const char *frag;
} bad_case_t;

static const bad_case_t k_bad[] = {
    {"gpu_in_two_domains.yaml", 3, "GPU 3 of nodes[0] is in another nvlink domain already (line 3, column 24)"},
    {"id_beyond_gpus.yaml", 3, "nodes[0].nvlink holds '4', not a GPU id of this node. HINT: ids go from 0 to 3"},
    {"unknown_key.yaml", 3, "unknown key 'nvlinks' in nodes[0]. HINT: did you mean 'nvlink'?"},
    {"gpus_not_number.yaml", 2, "nodes[0].gpus is 'eight', not a number of GPUs from 0 to 64"},
    {"gpus_too_many.yaml", 2, "nodes[0].gpus is '65'"},
    {"no_nodes.yaml", 1, "unknown key 'machines' in the topology"},
    {"nodes_not_list.yaml", 1, "nodes is a number, not a list of nodes"},
    {"node_without_gpus.yaml", 2, "nodes[0] has no gpus"},
    {"nvlink_bad_word.yaml", 3, "nodes[0].nvlink 'some' is not one of all, none"},
    {"nvlink_mixed.yaml", 3, "nodes[0].nvlink mixes GPU ids and lists (this element is a number)"},
    {"not_yaml.yaml", 2, "not valid YAML"},
};

static void test_bad_files(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
    char rel[256], path[1200];
    snprintf(rel, sizeof rel, "topologies/bad/%s", k_bad[i].file);
    if (load_topo(rel, path, sizeof path) != VR_DEVMAP_EBAD) fail_msg("%s: want VR_DEVMAP_EBAD", k_bad[i].file);
    tt_expect_line(g_err, path, k_bad[i].line, k_bad[i].frag);
    tt_check_format(g_err, path);
  }
  /* no nodes key at all is also said (after the unknown key) */
  char path[1200];
  load_topo("topologies/bad/no_nodes.yaml", path, sizeof path);
  tt_expect_line(g_err, path, 1, "the topology has no nodes");
}

/* The seed's trap: actor on 0, 2, 4, 6 of a node whose NVLink domains are 0-3 and 4-7. */
static void test_nvlink_domain_trap(void **state) {
  (void)state;
  char path[1200];
  assert_int_equal(load_topo("topologies/good/two_domains.yaml", path, sizeof path), 0);
  vr_devmap_t m;
  map_of("actor: {device_group: [0, 2, 4, 6]}\n"
         "rollout: {device_group: [1, 3]}\n"
         "critic: {device_group: [5]}\n",
         &m);
  char out[8192];
  int n = vr_topology_check(&g_t, &m, out, sizeof out);
  printf("%s", out);
  const char *hint = "HINT: keep actor inside one NVLink domain of node0: [0, 1, 2, 3], [4, 5, 6, 7]\n";
  const char *hint_ws = "HINT: keep weight sync (actor + rollout) inside one NVLink domain of node0: [0, 1, 2, 3], "
                        "[4, 5, 6, 7]\n";
  char want[8192];
  snprintf(want, sizeof want,
           "warning: actor spans cuda:0 and cuda:4 over pcie (no NVLink): its collectives run at PCIe speed. %s"
           "warning: actor spans cuda:0 and cuda:6 over pcie (no NVLink): its collectives run at PCIe speed. %s"
           "warning: actor spans cuda:2 and cuda:4 over pcie (no NVLink): its collectives run at PCIe speed. %s"
           "warning: actor spans cuda:2 and cuda:6 over pcie (no NVLink): its collectives run at PCIe speed. %s"
           "warning: weight sync (actor + rollout) spans cuda:4 and cuda:1 over pcie (no NVLink): its collectives "
           "run at PCIe speed. %s"
           "warning: weight sync (actor + rollout) spans cuda:4 and cuda:3 over pcie (no NVLink): its collectives "
           "run at PCIe speed. %s"
           "warning: weight sync (actor + rollout) spans cuda:6 and cuda:1 over pcie (no NVLink): its collectives "
           "run at PCIe speed. %s"
           "warning: weight sync (actor + rollout) spans cuda:6 and cuda:3 over pcie (no NVLink): its collectives "
           "run at PCIe speed. %s",
           hint, hint, hint, hint, hint_ws, hint_ws, hint_ws, hint_ws);
  assert_string_equal(out, want);
  assert_int_equal(n, 8);

  /* the fix: each group inside a domain, actor and rollout together in one */
  map_of("actor: {device_group: [0, 1]}\nrollout: {device_group: [2, 3]}\ncritic: {device_group: [4, 5]}\n", &m);
  assert_int_equal(vr_topology_check(&g_t, &m, out, sizeof out), 0);
  assert_string_equal(out, "");
}

static void test_seed_fits_nvswitch(void **state) {
  (void)state;
  char path[1200];
  assert_int_equal(load_topo("topologies/good/nvswitch_2nodes.yaml", path, sizeof path), 0);
  char *text = NULL;
  size_t len;
  char seed[1200];
  tt_fixture(seed, sizeof seed, "device_maps/good/seed_8gpu.yaml");
  text = tt_read(seed, &len);
  vr_devmap_t m;
  assert_int_equal(vr_devmap_parse(seed, text, len, &g_t.shape, &m, g_err, sizeof g_err), 0);
  free(text);
  char out[4096];
  assert_int_equal(vr_topology_check(&g_t, &m, out, sizeof out), 0);
  assert_string_equal(out, "");
  /* a group across nodes is network, not a warning */
  map_of("actor: {device_group: [0, \"node1:0\"]}\nrollout: {device_group: [\"node1:1\"]}\n", &m);
  assert_int_equal(vr_topology_check(&g_t, &m, out, sizeof out), 0);
}

static void test_pcie_and_no_p2p(void **state) {
  (void)state;
  char path[1200];
  assert_int_equal(load_topo("topologies/good/pcie_only.yaml", path, sizeof path), 0);
  vr_devmap_t m;
  map_of("actor: {device_group: [0, 1]}\nrollout: {device_group: [0, 1]}\ncolocate: [actor, rollout]\n", &m);
  char out[4096];
  assert_int_equal(vr_topology_check(&g_t, &m, out, sizeof out), 2); /* actor's pair, rollout's pair */
  assert_non_null(strstr(out, "warning: actor spans cuda:0 and cuda:1 over pcie (no NVLink): its collectives run at "
                              "PCIe speed. HINT: node0 has no NVLink"));
  assert_non_null(strstr(out, "warning: rollout spans cuda:0 and cuda:1"));
  /* a pair without P2P (set by hand: the files have no such link) */
  g_t.link[0][0][1] = g_t.link[0][1][0] = VR_LINK_NONE;
  map_of("actor: {device_group: [0, 1]}\nrollout: {device_group: [2]}\n", &m);
  assert_int_equal(vr_topology_check(&g_t, &m, out, sizeof out), 3);
  assert_non_null(strstr(out, "warning: actor spans cuda:0 and cuda:1 over none (no p2p) (no NVLink): its "
                              "collectives go through host memory."));
  assert_string_equal(vr_link_name(VR_LINK_NONE), "none (no p2p)");
  assert_string_equal(vr_link_name(VR_LINK_NVLINK), "nvlink");
  /* a short buffer is cut, the count stays */
  char tiny[40];
  assert_int_equal(vr_topology_check(&g_t, &m, tiny, sizeof tiny), 3);
  assert_int_equal(strlen(tiny), sizeof tiny - 1);
}

static void test_gpus_n(void **state) {
  (void)state;
  vr_topology_gpus(4, &g_t);
  assert_string_equal(g_t.source, "--gpus 4");
  assert_int_equal(g_t.shape.n_nodes, 1);
  assert_int_equal(g_t.shape.gpus_per_node[0], 4);
  assert_int_equal(link_of(0, 0, 0, 1), VR_LINK_UNKNOWN);
  assert_int_equal(link_of(0, 1, 0, 1), VR_LINK_SELF);
  vr_devmap_t m;
  map_of("actor: {device_group: [0, 1, 2]}\nrollout: {device_group: [3]}\n", &m);
  char out[256];
  assert_int_equal(vr_topology_check(&g_t, &m, out, sizeof out), 0); /* links unknown: nothing to say */
  /* existence is checked through the shape */
  const char *bad = "actor: {device_group: [4]}\nrollout: {device_group: [3]}\n";
  assert_int_equal(vr_devmap_parse("m", bad, strlen(bad), &g_t.shape, &m, g_err, sizeof g_err), VR_DEVMAP_EBAD);
  tt_expect_line(g_err, "m", 1, "cuda:4 (actor.device_group) does not exist: node0 has 4 GPUs (0-3)");
  vr_topology_gpus(1000, &g_t);
  assert_int_equal(g_t.shape.gpus_per_node[0], VR_TOPO_MAX_GPUS);
}

static void test_local(void **state) {
  (void)state;
  vr_topology_local(&g_t);
  printf("  local: %s, %d GPU(s)\n", g_t.source, g_t.shape.gpus_per_node[0]);
  assert_int_equal(g_t.shape.n_nodes, 1);
#ifndef VR_HAVE_CUDA
  assert_string_equal(g_t.source, "none (built without CUDA)");
  assert_int_equal(g_t.shape.gpus_per_node[0], 0);
#else
  if (g_t.shape.gpus_per_node[0] == 0) assert_true(!strncmp(g_t.source, "none (", 6));
  else assert_string_equal(g_t.source, "cuda");
  for (int i = 0; i < g_t.shape.gpus_per_node[0]; i++) assert_int_equal(g_t.link[0][i][i], VR_LINK_SELF);
#endif
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_two_domains),
      cmocka_unit_test(test_other_good_files),
      cmocka_unit_test(test_bad_files),
      cmocka_unit_test(test_nvlink_domain_trap),
      cmocka_unit_test(test_seed_fits_nvswitch),
      cmocka_unit_test(test_pcie_and_no_p2p),
      cmocka_unit_test(test_gpus_n),
      cmocka_unit_test(test_local),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
