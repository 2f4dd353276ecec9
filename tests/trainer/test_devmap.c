/* test_devmap.c: the device map's contract (trainer/vr_devmap.h) as a table of good and bad
 * files under tests/fixtures/device_maps/, the printed forms of the seed's maps, the JSON read
 * back with cJSON, and the message rules (every problem reported, each on a line with its
 * position and a HINT, whole lines when the buffer is short). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <cjson/cJSON.h>

#include "trainer_test_util.h"
#include "vr_devmap.h"
#include "vr_text.h"
#include "vr_yaml.h"

static const vr_topology_shape_t k_one_node = {.n_nodes = 1, .gpus_per_node = {8}};
static const vr_topology_shape_t k_two_nodes = {.n_nodes = 2, .gpus_per_node = {8, 8}};

static char g_err[1 << 16];

static int load(const char *rel, const vr_topology_shape_t *shape, vr_devmap_t *m, char *path, size_t cap) {
  tt_fixture(path, cap, rel);
  int rc = vr_devmap_load(path, shape, m, g_err, sizeof g_err);
  printf("  %s -> %d\n%s", rel, rc, g_err);
  return rc;
}

/* ---- the bad files: one problem each ------------------------------------------------------ */

typedef struct bad_case {
  const char *file;
  const vr_topology_shape_t *shape;
  int line;         /* where the problem is reported (0: the file as a whole) */
  const char *frag; /* what the message must say */
  int n_errors;     /* how many error lines the file gives */
} bad_case_t;

static const bad_case_t k_bad[] = {
    {"not_yaml.yaml", NULL, 3, "not valid YAML: did not find expected ',' or ']'", 1},
    {"empty.yaml", NULL, 0, "the file is empty", 1},
    {"top_list.yaml", NULL, 1, "the top level is a list, not a mapping", 1},
    {"second_document.yaml", NULL, 4, "a second YAML document", 1},
    {"not_utf8.yaml", NULL, 3, "not a YAML text: invalid leading UTF-8 octet (byte 0xff)", 1},
    {"unknown_top_key.yaml", NULL, 3, "unknown key 'colocat' in the device map. HINT: did you mean 'colocate'?", 1},
    {"unknown_role_key.yaml", NULL, 3, "unknown key 'placement_polcy' in actor. HINT: did you mean "
                                       "'placement_policy'?", 1},
    {"dup_key.yaml", NULL, 3, "duplicate key 'actor' in the device map (first at line 1)", 1},
    {"dup_nested_key.yaml", NULL, 2, "duplicate key 'device_group' in rollout (first at line 2)", 1},
    {"group_scalar.yaml", NULL, 2, "actor.device_group is a number, not a list. HINT: write a list, even for one "
                                   "device: device_group: [0]", 1},
    {"role_not_map.yaml", NULL, 3, "critic is a list, not a mapping", 1},
    {"empty_group.yaml", NULL, 2, "actor.device_group is empty", 1},
    {"missing_group.yaml", NULL, 3, "critic has no device_group. HINT: add `device_group: [0]`", 1},
    {"bad_node.yaml", NULL, 1, "bad node in 'nodeX:1' (actor.device_group): nodes are named node0 .. node63. HINT: "
                               "write \"node1:1\"", 1},
    {"negative_id.yaml", NULL, 1, "negative GPU '-1' in actor.device_group", 1},
    {"not_a_number.yaml", NULL, 2, "'abc' in rollout.device_group is not a device id", 1},
    {"bad_cpu_id.yaml", NULL, 2, "bad cpu slot 'cpu:x' in rollout.device_group. HINT: cpu slots are written cpu:0", 1},
    {"cuda_syntax.yaml", NULL, 1, "'cuda:0' in actor.device_group: GPUs are written as plain numbers here. HINT: "
                                  "write 0", 1},
    {"dup_id.yaml", NULL, 2, "cuda:0 appears twice in actor.device_group (first at line 2, column 18)", 1},
    {"beyond_gpus.yaml", &k_one_node, 1, "cuda:8 (actor.device_group) does not exist: node0 has 8 GPUs (0-7)", 1},
    {"beyond_nodes.yaml", &k_one_node, 2, "node1:cuda:0 (rollout.device_group) is on node1, but the topology has 1 "
                                          "node (node0)", 1},
    {"mixed_group.yaml", NULL, 1, "actor.device_group mixes GPUs and cpu slots (cpu:1 here, GPUs at line 1)", 1},
    {"mixed_map.yaml", NULL, 2, "rollout runs on cpu slots but actor on GPUs", 1},
    {"share_no_colocate.yaml", NULL, 12, "critic and reference share cuda:4, but colocate does not list them "
                                         "together. HINT: add the line `colocate: [critic, reference]`, or give "
                                         "them different devices", 1},
    {"share_partial_colocate.yaml", NULL, 5, "rollout and reference share cuda:1, but colocate does not list them "
                                             "together. HINT: add the line `colocate: [[actor, critic], [rollout, "
                                             "reference]]` (replacing the one at line 7)", 1},
    {"reward_neither.yaml", NULL, 3, "reward has neither shared_mem_name nor service_url", 1},
    {"reward_devices.yaml", NULL, 3, "reward.device_group is not empty: the trainer does not run the reward model", 1},
    {"no_actor.yaml", NULL, 2, "the device map has no actor", 1},
    {"no_rollout.yaml", NULL, 1, "the device map has no rollout", 1},
    {"url_no_scheme.yaml", NULL, 4, "reward.service_url 'localhost:8080' is not http://host:port[/path]: it does "
                                    "not start with http://", 1},
    {"url_no_port.yaml", NULL, 4, "it has no port", 1},
    {"url_https.yaml", NULL, 4, "https is not supported", 1},
    {"shm_slash.yaml", NULL, 4, "reward.shared_mem_name is not a verl-reward shm name: abstract name "
                                "'@verl/reward_shm' must not contain '/'", 1},
    {"shm_too_long.yaml", NULL, 4, "is too long", 1},
    {"nccl_on_cpu.yaml", NULL, 4, "rollout.nccl_backend is nccl, but rollout runs on cpu slots (NCCL needs GPUs). "
                                  "HINT: write `nccl_backend: mpi`", 1},
    {"bad_enum.yaml", NULL, 3, "actor.placement_policy 'Hybrid' is not one of static, hybrid. HINT: did you mean "
                               "'hybrid'?", 1},
    {"colocate_unknown_role.yaml", NULL, 5, "unknown role 'referance' in colocate. HINT: did you mean 'reference'?", 1},
    {"colocate_scalar.yaml", NULL, 4, "colocate is a string, not a list", 2}, /* + the sharing it fails to permit */
    {"colocate_mixed.yaml", NULL, 3, "colocate holds a list where a role name belongs", 1},
    {"colocate_reward.yaml", NULL, 3, "reward cannot be colocated", 1},
    {"colocate_absent_role.yaml", NULL, 3, "colocate names critic, which has no section in this map", 1},
};

static void test_bad_files(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) {
    const bad_case_t *b = &k_bad[i];
    char rel[256], path[1200];
    snprintf(rel, sizeof rel, "device_maps/bad/%s", b->file);
    vr_devmap_t m;
    int rc = load(rel, b->shape, &m, path, sizeof path);
    if (rc != VR_DEVMAP_EBAD) fail_msg("%s: want VR_DEVMAP_EBAD, got %d", b->file, rc);
    tt_expect_line(g_err, path, b->line, b->frag);
    tt_check_format(g_err, path);
    int n = tt_count(g_err, ": error: ");
    if (n != b->n_errors) fail_msg("%s: want %d error line(s), got %d:\n%s", b->file, b->n_errors, n, g_err);
  }
}

/* Every file under device_maps/bad/ is in the table (a fixture nobody checks is a defect). */
static void test_bad_table_complete(void **state) {
  (void)state;
  char dir[1200], cmd[1400];
  tt_fixture(dir, sizeof dir, "device_maps/bad");
  snprintf(cmd, sizeof cmd, "ls '%s'", dir);
  FILE *p = popen(cmd, "r");
  assert_non_null(p);
  char name[256];
  int n = 0;
  while (fgets(name, sizeof name, p)) {
    name[strcspn(name, "\n")] = '\0';
    int found = 0;
    for (size_t i = 0; i < sizeof k_bad / sizeof k_bad[0]; i++) found |= !strcmp(k_bad[i].file, name);
    if (!found && strcmp(name, "several_problems.yaml")) fail_msg("device_maps/bad/%s is not in k_bad", name);
    n++;
  }
  pclose(p);
  assert_int_equal(n, (int)(sizeof k_bad / sizeof k_bad[0]) + 1);
}

/* All problems of a file are reported, not only the first. */
static void test_several_problems(void **state) {
  (void)state;
  vr_devmap_t m;
  char path[1200];
  assert_int_equal(load("device_maps/bad/several_problems.yaml", NULL, &m, path, sizeof path), VR_DEVMAP_EBAD);
  tt_expect_line(g_err, path, 2, "cuda:0 appears twice in actor.device_group");
  tt_expect_line(g_err, path, 3, "actor.offload_strategy 'gpu' is not one of none, cpu, cpu_prefetch. HINT: did you "
                                 "mean 'cpu'?");
  tt_expect_line(g_err, path, 4, "rollout.nccl_backend 'gloo' is not one of nccl, mpi");
  tt_expect_line(g_err, path, 5, "unknown key 'rewards' in the device map. HINT: did you mean 'reward'?");
  tt_check_format(g_err, path);
  assert_int_equal(tt_count(g_err, ": error: "), 4);
  /* in the order of the file, although the top-level key is checked first */
  char at2[1300], at5[1300];
  snprintf(at2, sizeof at2, "%s:2:", path);
  snprintf(at5, sizeof at5, "%s:5:", path);
  assert_true(strstr(g_err, at2) == g_err);
  assert_true(strstr(g_err, at5) > strstr(g_err, at2));
}

/* Every pair that shares a device gets its error, and each names the one colocate line that
 * fixes them all. */
static void test_sharing_hint(void **state) {
  (void)state;
  const char *text = "actor: {device_group: [0]}\ncritic: {device_group: [0]}\nrollout: {device_group: [0]}\n"
                     "reference: {device_group: [0, 1]}\n";
  vr_devmap_t m;
  assert_int_equal(vr_devmap_parse("s.yaml", text, strlen(text), &k_one_node, &m, g_err, sizeof g_err),
                   VR_DEVMAP_EBAD);
  printf("%s", g_err);
  assert_int_equal(tt_count(g_err, ": error: "), 6);
  assert_int_equal(tt_count(g_err, "HINT: add the line `colocate: [actor, critic, rollout, reference]`, or give"), 6);
  tt_expect_line(g_err, "s.yaml", 2, "actor and critic share cuda:0");
  tt_expect_line(g_err, "s.yaml", 4, "rollout and reference share cuda:0");
  /* with that line the map is accepted */
  char fixed[512];
  snprintf(fixed, sizeof fixed, "%scolocate: [actor, critic, rollout, reference]\n", text);
  assert_int_equal(vr_devmap_parse("s.yaml", fixed, strlen(fixed), &k_one_node, &m, g_err, sizeof g_err), 0);
}

/* ---- the good files ----------------------------------------------------------------------- */

static void expect_good(const char *rel, const vr_topology_shape_t *shape, vr_devmap_t *m) {
  char path[1200];
  int rc = load(rel, shape, m, path, sizeof path);
  if (rc != 0) fail_msg("%s: want 0, got %d:\n%s", rel, rc, g_err);
  assert_int_equal(tt_count(g_err, "error"), 0);
  tt_check_format(g_err, path);
}

static void expect_describe(const vr_devmap_t *m, const char *want) {
  char out[4096];
  size_t n = vr_devmap_describe(m, out, sizeof out);
  assert_int_equal(n, strlen(out));
  if (strcmp(out, want)) fail_msg("describe:\n%s\nwant:\n%s", out, want);
}

static void test_seed_describe(void **state) {
  (void)state;
  vr_devmap_t m;
  expect_good("device_maps/good/seed_8gpu.yaml", &k_one_node, &m);
  assert_string_equal(g_err, ""); /* shape given: no warning */
  expect_describe(&m, "Device mapping resolved:\n"
                      "  Actor: cuda:0, cuda:1, cuda:2, cuda:3 (hybrid placement)\n"
                      "  Critic: cuda:4 (static placement)\n"
                      "  Rollout: cuda:5, cuda:6, cuda:7 (cpu_prefetch enabled)\n"
                      "  Reference: cuda:4 (colocated with critic)\n"
                      "  Reward: service at http://localhost:8080 (shared mem: verl_reward_shm)\n");
  assert_int_equal(m.n_workers, 8);
  for (int w = 0; w < 8; w++) {
    assert_int_equal(m.workers[w].kind, VR_DEVICE_GPU);
    assert_int_equal(m.workers[w].node, 0);
    assert_int_equal(m.workers[w].index, w);
  }
  assert_int_equal(m.worker_roles[0], 1u << VR_ROLE_ACTOR);
  assert_int_equal(m.worker_roles[4], (1u << VR_ROLE_CRITIC) | (1u << VR_ROLE_REFERENCE));
  assert_int_equal(m.worker_roles[7], 1u << VR_ROLE_ROLLOUT);
  assert_int_equal(m.roles[VR_ROLE_ACTOR].line, 2);
  assert_int_equal(m.roles[VR_ROLE_ACTOR].placement, VR_PLACEMENT_HYBRID);
  assert_int_equal(m.roles[VR_ROLE_ROLLOUT].offload, VR_OFFLOAD_CPU_PREFETCH);
  assert_int_equal(m.roles[VR_ROLE_CRITIC].backend, VR_COMM_NCCL);
  assert_int_equal(m.colocate[VR_ROLE_CRITIC], 1u << VR_ROLE_REFERENCE);
  assert_int_equal(m.colocate[VR_ROLE_REFERENCE], 1u << VR_ROLE_CRITIC);
  assert_int_equal(m.colocate[VR_ROLE_ACTOR], 0);
  assert_string_equal(m.reward.shm_name, "verl_reward_shm");
  assert_string_equal(m.reward.service_url, "http://localhost:8080");
}

static void test_no_shape_warns(void **state) {
  (void)state;
  vr_devmap_t m;
  expect_good("device_maps/good/seed_8gpu.yaml", NULL, &m);
  assert_non_null(strstr(g_err, ": warning: GPU ids not checked against a machine (no topology given). HINT:"));
  assert_int_equal(tt_count(g_err, "\n"), 1);
  /* cpu slots are never checked against a shape: no warning */
  expect_good("device_maps/good/cpu.yaml", NULL, &m);
  assert_string_equal(g_err, "");
}

static void test_one_gpu(void **state) {
  (void)state;
  vr_devmap_t m;
  expect_good("device_maps/good/one_gpu.yaml", &k_one_node, &m);
  expect_describe(&m, "Device mapping resolved:\n"
                      "  Actor: cuda:0 (hybrid placement, cpu offload)\n"
                      "  Critic: cuda:0 (colocated with actor, hybrid placement)\n"
                      "  Rollout: cuda:0 (colocated with actor, cpu_prefetch enabled)\n"
                      "  Reference: cuda:0 (colocated with actor)\n"
                      "  Reward: shared mem verl_reward_shm\n");
  assert_int_equal(m.n_workers, 1);
  assert_int_equal(m.worker_roles[0], 0xf);
}

static void test_two_gpu(void **state) {
  (void)state;
  vr_devmap_t m;
  expect_good("device_maps/good/two_gpu.yaml", &k_one_node, &m);
  expect_describe(&m, "Device mapping resolved:\n"
                      "  Actor: cuda:0 (static placement)\n"
                      "  Critic: cuda:0 (colocated with actor)\n"
                      "  Rollout: cuda:1 (static placement)\n"
                      "  Reference: cuda:1 (colocated with rollout)\n"
                      "  Reward: service at http://reward-host:8080\n");
  assert_int_equal(m.n_workers, 2);
  assert_int_equal(m.worker_roles[0], (1u << VR_ROLE_ACTOR) | (1u << VR_ROLE_CRITIC));
  assert_int_equal(m.worker_roles[1], (1u << VR_ROLE_ROLLOUT) | (1u << VR_ROLE_REFERENCE));
  assert_int_equal(m.colocate[VR_ROLE_ACTOR], 1u << VR_ROLE_CRITIC);
  assert_int_equal(m.colocate[VR_ROLE_ROLLOUT], 1u << VR_ROLE_REFERENCE);
}

static void test_cpu(void **state) {
  (void)state;
  vr_devmap_t m;
  expect_good("device_maps/good/cpu.yaml", &k_one_node, &m);
  expect_describe(&m, "Device mapping resolved:\n"
                      "  Actor: cpu:0, cpu:1 (static placement)\n"
                      "  Rollout: cpu:2 (static placement)\n"
                      "  Reference: cpu:2 (colocated with rollout)\n"
                      "  Reward: shared mem verl_reward_shm\n");
  assert_int_equal(m.n_workers, 3);
  for (int w = 0; w < 3; w++) {
    assert_int_equal(m.workers[w].kind, VR_DEVICE_CPU);
    assert_int_equal(m.workers[w].index, w);
  }
  for (int r = 0; r < VR_ROLE_COUNT; r++)
    if (m.roles[r].present) assert_int_equal(m.roles[r].backend, VR_COMM_MPI); /* the default for cpu groups */
  assert_false(m.roles[VR_ROLE_CRITIC].present);
}

static void test_multinode(void **state) {
  (void)state;
  vr_devmap_t m;
  expect_good("device_maps/good/multinode.yaml", &k_two_nodes, &m);
  expect_describe(&m, "Device mapping resolved:\n"
                      "  Actor: cuda:0, cuda:1, cuda:2, cuda:3 (static placement)\n"
                      "  Critic: node1:cuda:3 (static placement)\n"
                      "  Rollout: node1:cuda:0, node1:cuda:1, node1:cuda:2 (static placement)\n"
                      "  Reward: service at http://10.0.0.5:8080/score\n");
  /* workers sorted by (node, kind, index), whatever the order in the file */
  assert_int_equal(m.n_workers, 8);
  for (int w = 0; w < 8; w++) {
    assert_int_equal(m.workers[w].node, w / 4);
    assert_int_equal(m.workers[w].index, w % 4);
  }
  assert_int_equal(m.worker_roles[7], 1u << VR_ROLE_CRITIC);
  /* the same map on a one-node machine: node1 does not exist */
  char path[1200];
  assert_int_equal(load("device_maps/good/multinode.yaml", &k_one_node, &m, path, sizeof path), VR_DEVMAP_EBAD);
  assert_int_equal(tt_count(g_err, "is on node1, but the topology has 1 node"), 4);
}

/* ---- JSON ------------------------------------------------------------------------------------ */

static cJSON *json_of(const vr_devmap_t *m) {
  char out[1 << 16];
  size_t n = vr_devmap_json(m, out, sizeof out);
  assert_int_equal(n, strlen(out));
  cJSON *j = cJSON_Parse(out);
  if (!j) fail_msg("not JSON: %s", out);
  return j;
}

static const char *jstr(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void test_json(void **state) {
  (void)state;
  vr_devmap_t m;
  expect_good("device_maps/good/seed_8gpu.yaml", &k_one_node, &m);
  cJSON *j = json_of(&m);
  const cJSON *actor = cJSON_GetObjectItemCaseSensitive(j, "actor");
  const cJSON *devs = cJSON_GetObjectItemCaseSensitive(actor, "devices");
  assert_int_equal(cJSON_GetArraySize(devs), 4);
  assert_string_equal(cJSON_GetArrayItem(devs, 3)->valuestring, "cuda:3");
  assert_string_equal(jstr(actor, "placement"), "hybrid");
  assert_string_equal(jstr(actor, "offload"), "none");
  assert_string_equal(jstr(actor, "backend"), "nccl");
  assert_string_equal(jstr(cJSON_GetObjectItemCaseSensitive(j, "rollout"), "offload"), "cpu_prefetch");
  const cJSON *rw = cJSON_GetObjectItemCaseSensitive(j, "reward");
  assert_string_equal(jstr(rw, "shared_mem_name"), "verl_reward_shm");
  assert_string_equal(jstr(rw, "service_url"), "http://localhost:8080");
  const cJSON *co = cJSON_GetObjectItemCaseSensitive(j, "colocate");
  assert_int_equal(cJSON_GetArraySize(co), 1);
  assert_string_equal(cJSON_GetArrayItem(cJSON_GetArrayItem(co, 0), 0)->valuestring, "critic");
  assert_string_equal(cJSON_GetArrayItem(cJSON_GetArrayItem(co, 0), 1)->valuestring, "reference");
  const cJSON *ws = cJSON_GetObjectItemCaseSensitive(j, "workers");
  assert_int_equal(cJSON_GetArraySize(ws), 8);
  const cJSON *w4 = cJSON_GetArrayItem(ws, 4);
  assert_string_equal(jstr(w4, "device"), "cuda:4");
  const cJSON *w4r = cJSON_GetObjectItemCaseSensitive(w4, "roles");
  assert_int_equal(cJSON_GetArraySize(w4r), 2);
  assert_string_equal(cJSON_GetArrayItem(w4r, 0)->valuestring, "critic");
  assert_string_equal(cJSON_GetArrayItem(w4r, 1)->valuestring, "reference");
  cJSON_Delete(j);

  /* absent roles and a one-sided reward are null */
  expect_good("device_maps/good/cpu.yaml", NULL, &m);
  j = json_of(&m);
  assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(j, "critic")));
  const cJSON *cpu_rw = cJSON_GetObjectItemCaseSensitive(j, "reward");
  assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(cpu_rw, "service_url")));
  assert_string_equal(jstr(cJSON_GetObjectItemCaseSensitive(j, "actor"), "backend"), "mpi");
  cJSON_Delete(j);
}

/* Strings from the file are escaped: a quote, a backslash and a tab survive the round trip. */
static void test_json_escapes(void **state) {
  (void)state;
  const char *text = "actor: {device_group: [0]}\nrollout: {device_group: [1]}\n"
                     "reward: {shared_mem_name: \"a\\\"b\\\\c\\td\", service_url: 'http://h:1/p\"q\\r'}\n";
  vr_devmap_t m;
  int rc = vr_devmap_parse("esc.yaml", text, strlen(text), &k_one_node, &m, g_err, sizeof g_err);
  if (rc) fail_msg("%s", g_err);
  assert_string_equal(m.reward.shm_name, "a\"b\\c\td");
  cJSON *j = json_of(&m);
  const cJSON *rw = cJSON_GetObjectItemCaseSensitive(j, "reward");
  assert_string_equal(jstr(rw, "shared_mem_name"), "a\"b\\c\td");
  assert_string_equal(jstr(rw, "service_url"), "http://h:1/p\"q\\r");
  assert_string_equal(jstr(j, "path"), "esc.yaml");
  cJSON_Delete(j);
}

/* ---- messages and limits ----------------------------------------------------------------- */

/* A short buffer holds whole lines and says how many it left out; it is never empty. */
static void test_short_buffer(void **state) {
  (void)state;
  char path[1200];
  tt_fixture(path, sizeof path, "device_maps/bad/several_problems.yaml");
  vr_devmap_t m;
  char small[400];
  memset(small, 'x', sizeof small);
  assert_int_equal(vr_devmap_load(path, NULL, &m, small, sizeof small), VR_DEVMAP_EBAD);
  assert_true(strlen(small) < sizeof small);
  printf("%s", small);
  assert_non_null(strstr(small, "more messages not shown"));
  assert_int_equal(small[strlen(small) - 1], '\n');
  /* one byte more than nothing still holds a (cut) first line */
  char tiny[16];
  assert_int_equal(vr_devmap_load(path, NULL, &m, tiny, sizeof tiny), VR_DEVMAP_EBAD);
  assert_int_equal(strlen(tiny), sizeof tiny - 1);
  assert_int_equal(vr_devmap_load(path, NULL, &m, NULL, 0), VR_DEVMAP_EBAD);
}

static void test_unreadable_and_large(void **state) {
  (void)state;
  vr_devmap_t m;
  assert_int_equal(vr_devmap_load("/nonexistent/device_map.yaml", NULL, &m, g_err, sizeof g_err), VR_DEVMAP_EBAD);
  tt_expect_line(g_err, "/nonexistent/device_map.yaml", 0, "cannot open: No such file or directory");

  char path[] = "/tmp/vr_devmap_large_XXXXXX";
  int fd = mkstemp(path);
  assert_true(fd >= 0);
  size_t n = VR_YAML_MAX_BYTES + 1;
  char *big = malloc(n);
  assert_non_null(big);
  memset(big, '#', n); /* one long comment: valid YAML, only too large */
  assert_int_equal(write(fd, big, n), (ssize_t)n);
  close(fd);
  assert_int_equal(vr_devmap_load(path, NULL, &m, g_err, sizeof g_err), VR_DEVMAP_EBAD);
  tt_expect_line(g_err, path, 0, "file is larger than 1048576 bytes (1 MiB)");
  unlink(path);
  assert_int_equal(vr_devmap_parse("big", big, n, NULL, &m, g_err, sizeof g_err), VR_DEVMAP_EBAD);
  tt_expect_line(g_err, "big", 0, "text is larger than 1048576 bytes");
  /* exactly the limit is read (and is a file of comments: empty) */
  assert_int_equal(vr_devmap_parse("limit", big, n - 1, NULL, &m, g_err, sizeof g_err), VR_DEVMAP_EBAD);
  tt_expect_line(g_err, "limit", 0, "the file is empty");
  free(big);
}

/* Deep nesting is refused quickly (libyaml alone takes time quadratic in the depth). */
static void test_deep_nesting(void **state) {
  (void)state;
  size_t depth = 400000;
  char *t = malloc(2 * depth + 16);
  assert_non_null(t);
  memcpy(t, "actor: ", 7);
  memset(t + 7, '[', depth);
  memset(t + 7 + depth, ']', depth);
  vr_devmap_t m;
  assert_int_equal(vr_devmap_parse("deep", t, 7 + 2 * depth, NULL, &m, g_err, sizeof g_err), VR_DEVMAP_EBAD);
  tt_expect_line(g_err, "deep", 1, "lists and mappings nested deeper than 32 levels");
  free(t);
  /* an alias that makes a list its own element is harmless (nothing recurses) */
  const char *self = "actor: {device_group: &g [0, *g]}\nrollout: {device_group: [1]}\n";
  assert_int_equal(vr_devmap_parse("alias", self, strlen(self), NULL, &m, g_err, sizeof g_err), VR_DEVMAP_EBAD);
  tt_expect_line(g_err, "alias", 1, "actor.device_group holds a list, not a device id");
}

/* Text from the file is quoted in messages with its control bytes replaced and cut short, so
 * a message stays one line of reasonable length. */
static void test_quoted_text(void **state) {
  (void)state;
  const char *text = "actor: {device_group: [0]}\nrollout: {device_group: [1]}\n\"col\\nocate\": []\n"
                     "reference: {device_group: [\"node1:\\tx\"], placement_policy: \"st\\x01atic\"}\n";
  vr_devmap_t m;
  assert_int_equal(vr_devmap_parse("q.yaml", text, strlen(text), NULL, &m, g_err, sizeof g_err), VR_DEVMAP_EBAD);
  printf("%s", g_err);
  tt_check_format(g_err, "q.yaml");
  assert_int_equal(tt_count(g_err, "\n"), 3);
  tt_expect_line(g_err, "q.yaml", 3, "unknown key 'col?ocate' in the device map. HINT: did you mean 'colocate'?");
  tt_expect_line(g_err, "q.yaml", 4, "'node1:?x' in reference.device_group is not a device id: '?x' is not a number");
  tt_expect_line(g_err, "q.yaml", 4, "reference.placement_policy 'st?atic' is not one of static, hybrid");
  char b[8];
  assert_string_equal(vr_text_clip("abcdefghij", b, sizeof b), "abcd...");
  assert_string_equal(vr_text_clip("abc\xc3\xa9\xc3\xa9x", b, sizeof b), "abc..."); /* not inside a character */
  assert_string_equal(vr_text_clip("a\nb", b, sizeof b), "a?b");
}

static void test_closest(void **state) {
  (void)state;
  static const char *const keys[] = {"device_group", "placement_policy", "offload_strategy", "nccl_backend"};
  assert_int_equal(vr_yaml_edit_distance("kitten", "sitting"), 3);
  assert_int_equal(vr_yaml_edit_distance("", "abc"), 3);
  assert_int_equal(vr_yaml_edit_distance("same", "same"), 0);
  assert_string_equal(vr_yaml_closest("devices_group", keys, 4), "device_group");
  assert_string_equal(vr_yaml_closest("offload", keys, 4) ? "found" : "none", "none");
  assert_string_equal(vr_yaml_closest("nccl_backnd", keys, 4), "nccl_backend");
  assert_null(vr_yaml_closest("zzz", keys, 4));
}

static void test_names(void **state) {
  (void)state;
  char b[64];
  vr_device_t d = {VR_DEVICE_GPU, 0, 3};
  vr_device_str(&d, b, sizeof b);
  assert_string_equal(b, "cuda:3");
  d.node = 2;
  vr_device_str(&d, b, sizeof b);
  assert_string_equal(b, "node2:cuda:3");
  d = (vr_device_t){VR_DEVICE_CPU, 0, 1};
  vr_device_str(&d, b, sizeof b);
  assert_string_equal(b, "cpu:1");
  assert_string_equal(vr_role_name(VR_ROLE_REFERENCE), "reference");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bad_files),
      cmocka_unit_test(test_bad_table_complete),
      cmocka_unit_test(test_several_problems),
      cmocka_unit_test(test_sharing_hint),
      cmocka_unit_test(test_seed_describe),
      cmocka_unit_test(test_no_shape_warns),
      cmocka_unit_test(test_one_gpu),
      cmocka_unit_test(test_two_gpu),
      cmocka_unit_test(test_cpu),
      cmocka_unit_test(test_multinode),
      cmocka_unit_test(test_json),
      cmocka_unit_test(test_json_escapes),
      cmocka_unit_test(test_short_buffer),
      cmocka_unit_test(test_unreadable_and_large),
      cmocka_unit_test(test_deep_nesting),
      cmocka_unit_test(test_quoted_text),
      cmocka_unit_test(test_closest),
      cmocka_unit_test(test_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
