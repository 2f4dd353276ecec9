/* vr_devmap.c: device_map.yaml -> vr_devmap_t, and its two printed forms; see vr_devmap.h for
 * the schema and the rules. Parsing reports every problem it finds (into a vr_diag_t) and
 * carries on, so one run shows the user all of them. */
#include "vr_devmap.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/protocol.h" /* vr_shm_path: the server's rule for an shm name */
#include "vr_log.h"
#include "vr_text.h"
#include "vr_yaml.h"

static const char *const k_roles[VR_ROLE_COUNT] = {"actor", "critic", "rollout", "reference"};
static const char *const k_roles_cap[VR_ROLE_COUNT] = {"Actor", "Critic", "Rollout", "Reference"};
static const char *const k_placements[] = {"static", "hybrid"};
static const char *const k_offloads[] = {"none", "cpu", "cpu_prefetch"};
static const char *const k_backends[] = {"nccl", "mpi"};

enum { TOP_REWARD = VR_ROLE_COUNT, TOP_COLOCATE, TOP_N };
enum { RK_DEVICES, RK_PLACEMENT, RK_OFFLOAD, RK_BACKEND, RK_N };
enum { WK_DEVICES, WK_SHM, WK_URL, WK_N };

typedef struct parse_ctx {
  vr_yaml_t y;
  const vr_topology_shape_t *shape;
  vr_devmap_t *m;
  const yaml_node_t *dev_node[VR_ROLE_COUNT][VR_DEVMAP_MAX_DEVICES]; /* where each device is written */
  const yaml_node_t *colocate_key;
} parse_ctx_t;

#define ERR(c, node, ...) vr_yaml_error(&(c)->y, (node), __VA_ARGS__)

const char *vr_role_name(vr_role_t r) { return (unsigned)r < VR_ROLE_COUNT ? k_roles[r] : "?"; }

void vr_device_str(const vr_device_t *d, char *buf, size_t cap) {
  if (d->kind == VR_DEVICE_CPU) snprintf(buf, cap, "cpu:%d", d->index);
  else if (d->node == 0) snprintf(buf, cap, "cuda:%d", d->index);
  else snprintf(buf, cap, "node%d:cuda:%d", d->node, d->index);
}

int vr_device_eq(const vr_device_t *a, const vr_device_t *b) {
  return a->kind == b->kind && a->node == b->node && a->index == b->index;
}

/* ---- one device id --------------------------------------------------------------------- */

/* The index part of an id (all of "3", the "3" of "node1:3" or "cpu:3"). */
static int parse_index(parse_ctx_t *c, const yaml_node_t *n, const char *role, const char *id, const char *num,
                       const char *unit, long *v) {
  if (vr_yaml_parse_int(num, 0, VR_DEVMAP_MAX_DEVICES - 1, v) == 0) return 0;
  long big;
  char nb[32];
  if (vr_yaml_parse_int(num, LONG_MIN + 1, -1, &big) == 0)
    ERR(c, n, "negative %s '%s' in %s.device_group. HINT: %s ids count from 0", unit, id, role, unit);
  else if (num[0] >= '0' && num[0] <= '9' && strspn(num, "0123456789") == strlen(num))
    ERR(c, n, "%s '%s' in %s.device_group is out of range. HINT: ids go from 0 to %d", unit, id, role,
        VR_DEVMAP_MAX_DEVICES - 1);
  else
    ERR(c, n, "'%s' in %s.device_group is not a device id: '%s' is not a number. HINT: ids are N (GPU N of "
        "this node), \"nodeK:N\" (GPU N of node K) or \"cpu:N\" (cpu slot N)", id, role,
        vr_text_clip(num, nb, sizeof nb));
  return -1;
}

static int parse_device(parse_ctx_t *c, const yaml_node_t *n, const char *role, vr_device_t *d) {
  const char *s = vr_yaml_str(n);
  if (!s || n->type != YAML_SCALAR_NODE) {
    ERR(c, n, "%s.device_group holds %s, not a device id. HINT: ids are N (GPU N of this node), \"nodeK:N\" "
        "or \"cpu:N\", e.g. device_group: [0, 1]", role, vr_yaml_kind(n));
    return -1;
  }
  char id[48], rest[20];
  vr_text_clip(s, id, sizeof id);
  vr_text_clip(strchr(s, ':') ? strchr(s, ':') + 1 : "0", rest, sizeof rest); /* what follows the ':' */
  long v = 0;
  memset(d, 0, sizeof *d);
  if (!strncmp(s, "cpu:", 4)) {
    if (vr_yaml_parse_int(s + 4, 0, VR_DEVMAP_MAX_DEVICES - 1, &v)) {
      ERR(c, n, "bad cpu slot '%s' in %s.device_group. HINT: cpu slots are written cpu:0, cpu:1, ... up to cpu:%d",
          id, role, VR_DEVMAP_MAX_DEVICES - 1);
      return -1;
    }
    d->kind = VR_DEVICE_CPU;
  } else if (!strncmp(s, "node", 4)) {
    const char *colon = strchr(s, ':');
    char node[24];
    size_t nl = colon ? (size_t)(colon - (s + 4)) : strlen(s + 4);
    snprintf(node, sizeof node, "%.*s", (int)(nl < sizeof node - 1 ? nl : sizeof node - 1), s + 4);
    long k;
    if (nl >= sizeof node - 1 || vr_yaml_parse_int(node, 0, VR_DEVMAP_MAX_NODES - 1, &k)) {
      ERR(c, n, "bad node in '%s' (%s.device_group): nodes are named node0 .. node%d. HINT: write \"node1:%s\" "
          "for GPU %s of the second node", id, role, VR_DEVMAP_MAX_NODES - 1, rest, rest);
      return -1;
    }
    if (!colon) {
      ERR(c, n, "'%s' in %s.device_group names a node but no GPU. HINT: write \"node%ld:0\" for GPU 0 of node%ld", id,
          role, k, k);
      return -1;
    }
    if (parse_index(c, n, role, id, colon + 1, "GPU", &v)) return -1;
    d->node = (int)k;
  } else if (!strncmp(s, "cuda:", 5) || !strncmp(s, "gpu:", 4)) {
    ERR(c, n, "'%s' in %s.device_group: GPUs are written as plain numbers here. HINT: write %s for that GPU of "
        "this node, or \"nodeK:%s\" for one of node K", id, role, rest, rest);
    return -1;
  } else if (parse_index(c, n, role, id, s, "GPU", &v)) {
    return -1;
  }
  d->index = (int)v;
  return 0;
}

/* ---- a role ---------------------------------------------------------------------------- */

/* The node to point at for a value that may be a null scalar (its mark is past the key). */
static const yaml_node_t *at(const yaml_node_t *key, const yaml_node_t *value) {
  return value && !vr_yaml_is_null(value) ? value : key;
}

static int check_shape(parse_ctx_t *c, const yaml_node_t *n, const char *role, const vr_device_t *d) {
  const vr_topology_shape_t *sh = c->shape;
  if (!sh || sh->n_nodes == 0 || d->kind != VR_DEVICE_GPU) return 0;
  char ds[48];
  vr_device_str(d, ds, sizeof ds);
  if (d->node >= sh->n_nodes) {
    char range[32] = "node0";
    if (sh->n_nodes > 1) snprintf(range, sizeof range, "node0 .. node%d", sh->n_nodes - 1);
    ERR(c, n, "%s (%s.device_group) is on node%d, but the topology has %d node%s (%s). HINT: use nodes that "
        "exist, or give a --topology file that lists node%d", ds, role, d->node, sh->n_nodes,
        sh->n_nodes == 1 ? "" : "s", range, d->node);
    return -1;
  }
  int g = sh->gpus_per_node[d->node];
  if (d->index >= g) {
    if (g == 0)
      ERR(c, n, "%s (%s.device_group): node%d has no GPUs. HINT: on a machine without GPUs use cpu slots "
          "(cpu:0, cpu:1, ...)", ds, role, d->node);
    else
      ERR(c, n, "%s (%s.device_group) does not exist: node%d has %d GPU%s (0-%d). HINT: use ids below %d, or "
          "check --topology / --gpus", ds, role, d->node, g, g == 1 ? "" : "s", g - 1, g);
    return -1;
  }
  return 0;
}

static void parse_group(parse_ctx_t *c, vr_role_t r, const yaml_node_t *role_key, const vr_yaml_field_t *f) {
  vr_role_map_t *rm = &c->m->roles[r];
  const char *role = k_roles[r];
  if (!f->key) {
    ERR(c, role_key, "%s has no device_group. HINT: add `device_group: [0]` (the devices %s runs on) to %s",
        role, role, role);
    return;
  }
  if (!vr_yaml_is_seq(f->value)) {
    char sb[28];
    const char *s = vr_yaml_str(f->value);
    ERR(c, at(f->key, f->value), "%s.device_group is %s, not a list. HINT: write a list, even for one device: "
        "device_group: [%s]", role, vr_yaml_kind(f->value), s ? vr_text_clip(s, sb, sizeof sb) : "0");
    return;
  }
  int n = vr_yaml_seq_len(f->value);
  if (n == 0) {
    ERR(c, f->value, "%s.device_group is empty. HINT: give at least one device, e.g. [0]%s%s%s", role,
        r == VR_ROLE_CRITIC || r == VR_ROLE_REFERENCE ? "; to run without a " : "",
        r == VR_ROLE_CRITIC || r == VR_ROLE_REFERENCE ? role : "",
        r == VR_ROLE_CRITIC || r == VR_ROLE_REFERENCE ? ", remove its section" : "");
    return;
  }
  if (n > VR_DEVMAP_MAX_DEVICES) {
    ERR(c, f->value, "%s.device_group has %d devices, more than %d. HINT: a group holds at most %d devices", role,
        n, VR_DEVMAP_MAX_DEVICES, VR_DEVMAP_MAX_DEVICES);
    n = VR_DEVMAP_MAX_DEVICES;
  }
  const yaml_node_t *first_kind = NULL; /* the group's first id: its kind is the group's */
  vr_device_kind_t kind = VR_DEVICE_GPU;
  for (int i = 0; i < n; i++) {
    const yaml_node_t *item = vr_yaml_seq_at(&c->y, f->value, i);
    vr_device_t d;
    if (!item || parse_device(c, item, role, &d)) continue;
    char ds[48];
    vr_device_str(&d, ds, sizeof ds);
    if (!first_kind) {
      first_kind = item;
      kind = d.kind;
    } else if (d.kind != kind) {
      ERR(c, item, "%s.device_group mixes GPUs and cpu slots (%s here, %s at line %d). HINT: a group is all GPU "
          "ids or all cpu:N slots", role, ds, d.kind == VR_DEVICE_CPU ? "GPUs" : "cpu slots", vr_yaml_line(first_kind));
      continue;
    }
    int dup = -1;
    for (int j = 0; j < rm->n_devices && dup < 0; j++)
      if (vr_device_eq(&rm->devices[j], &d)) dup = j;
    if (dup >= 0) {
      const yaml_node_t *prev = c->dev_node[r][dup];
      ERR(c, item, "%s appears twice in %s.device_group (first at line %d, column %d). HINT: list each device once",
          ds, role, vr_yaml_line(prev), vr_yaml_col(prev));
      continue;
    }
    if (check_shape(c, item, role, &d)) continue;
    c->dev_node[r][rm->n_devices] = item;
    rm->devices[rm->n_devices++] = d;
  }
}

/* The index of an optional enum key's value in names, or -1 (absent, or reported). */
static int role_enum(parse_ctx_t *c, const char *role, const vr_yaml_field_t *f, const char *const *names, int n) {
  if (!f->key) return -1;
  char what[64];
  snprintf(what, sizeof what, "%s.%s", role, f->name);
  return vr_yaml_enum(&c->y, at(f->key, f->value), what, names, n);
}

static void parse_role(parse_ctx_t *c, vr_role_t r, const yaml_node_t *key, const yaml_node_t *val) {
  vr_role_map_t *rm = &c->m->roles[r];
  const char *role = k_roles[r];
  rm->present = 1;
  rm->line = vr_yaml_line(key);
  if (!vr_yaml_is_map(val)) {
    ERR(c, at(key, val), "%s is %s, not a mapping. HINT: write its keys, e.g. `%s: {device_group: [0]}`", role,
        vr_yaml_kind(val), role);
    return;
  }
  vr_yaml_field_t f[RK_N] = {
      {.name = "device_group"}, {.name = "placement_policy"}, {.name = "offload_strategy"}, {.name = "nccl_backend"}};
  vr_yaml_fields(&c->y, val, role, f, RK_N);
  parse_group(c, r, key, &f[RK_DEVICES]);
  int i;
  if ((i = role_enum(c, role, &f[RK_PLACEMENT], k_placements, 2)) >= 0) rm->placement = (vr_placement_t)i;
  if ((i = role_enum(c, role, &f[RK_OFFLOAD], k_offloads, 3)) >= 0) rm->offload = (vr_offload_t)i;
  int cpu = rm->n_devices > 0 && rm->devices[0].kind == VR_DEVICE_CPU;
  rm->backend = cpu ? VR_COMM_MPI : VR_COMM_NCCL;
  if ((i = role_enum(c, role, &f[RK_BACKEND], k_backends, 2)) >= 0) {
    if (i == VR_COMM_NCCL && cpu)
      ERR(c, f[RK_BACKEND].value, "%s.nccl_backend is nccl, but %s runs on cpu slots (NCCL needs GPUs). HINT: write "
          "`nccl_backend: mpi` (the default for cpu groups) or remove the key", role, role);
    else
      rm->backend = (vr_comm_backend_t)i;
  }
}

/* ---- reward ---------------------------------------------------------------------------- */

/* NULL when s is http://host:port[/path], else what is wrong with it. */
static const char *url_problem(const char *s) {
  if (!strncmp(s, "https://", 8)) return "https is not supported (verl-reward-server speaks plain HTTP)";
  if (strncmp(s, "http://", 7)) return "it does not start with http://";
  const char *h = s + 7, *e;
  if (*h == '[') { /* IPv6 literal */
    e = strchr(h, ']');
    if (!e || e == h + 1 || strspn(h + 1, "0123456789abcdefABCDEF:.") != (size_t)(e - h - 1))
      return "the IPv6 host is not a valid [address]";
    e++;
  } else {
    e = h + strspn(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-");
    if (e == h) return "it has no host";
  }
  if (*e != ':') return *e == '\0' || *e == '/' ? "it has no port" : "the host holds a character hosts do not have";
  const char *p = e + 1, *pe = p + strspn(p, "0123456789");
  long port = 0;
  if (pe == p || pe - p > 5) return "the port is not a number";
  for (const char *q = p; q < pe; q++) port = port * 10 + (*q - '0');
  if (port < 1 || port > 65535) return "the port is not in 1-65535";
  if (*pe != '\0' && *pe != '/') return "something other than a path follows the port";
  for (const unsigned char *q = (const unsigned char *)pe; *q; q++)
    if (*q <= ' ' || *q == 0x7f) return "the path holds a space or a control character";
  return NULL;
}

static int given(const vr_yaml_field_t *f) { return f->key && !vr_yaml_is_null(f->value); }

static void parse_reward(parse_ctx_t *c, const yaml_node_t *key, const yaml_node_t *val) {
  vr_reward_map_t *rw = &c->m->reward;
  rw->present = 1;
  if (!vr_yaml_is_map(val)) {
    ERR(c, at(key, val), "reward is %s, not a mapping. HINT: write `reward: {shared_mem_name: verl_reward_shm}` "
        "(the server's --shm-name) or `reward: {service_url: http://host:8080}`", vr_yaml_kind(val));
    return;
  }
  vr_yaml_field_t f[WK_N] = {{.name = "device_group"}, {.name = "shared_mem_name"}, {.name = "service_url"}};
  vr_yaml_fields(&c->y, val, "reward", f, WK_N);
  const yaml_node_t *dg = f[WK_DEVICES].value;
  if (given(&f[WK_DEVICES]) && (!vr_yaml_is_seq(dg) || vr_yaml_seq_len(dg) > 0))
    ERR(c, dg, "reward.device_group is %s: the trainer does not run the reward model. HINT: give its GPU to "
        "verl-reward-server and write `device_group: []` or remove the key",
        vr_yaml_is_seq(dg) ? "not empty" : vr_yaml_kind(dg));
  if (given(&f[WK_SHM])) {
    const char *s = vr_yaml_str(f[WK_SHM].value);
    char path[300], why[200], whys[200];
    if (!s || f[WK_SHM].value->type != YAML_SCALAR_NODE)
      ERR(c, f[WK_SHM].value, "reward.shared_mem_name is %s, not a name. HINT: the server's --shm-name, e.g. "
          "`shared_mem_name: verl_reward_shm`", vr_yaml_kind(f[WK_SHM].value));
    else if (vr_shm_path(s, path, sizeof path, why, sizeof why) || strlen(s) >= sizeof rw->shm_name)
      ERR(c, f[WK_SHM].value, "reward.shared_mem_name is not a verl-reward shm name: %s. HINT: give the "
          "server's --shm-name as it is, e.g. verl_reward_shm, or the socket's path",
          vr_text_clip(why, whys, sizeof whys));
    else
      snprintf(rw->shm_name, sizeof rw->shm_name, "%s", s);
  }
  if (given(&f[WK_URL])) {
    const char *s = vr_yaml_str(f[WK_URL].value);
    const char *why = s && f[WK_URL].value->type == YAML_SCALAR_NODE ? url_problem(s) : "it is not a string";
    if (!why && strlen(s) >= sizeof rw->service_url) why = "it is longer than 511 bytes";
    if (why) {
      char sb[52];
      vr_text_clip(s, sb, sizeof sb);
      ERR(c, f[WK_URL].value, "reward.service_url '%s' is not http://host:port[/path]: %s. HINT: the server's "
          "address, e.g. `service_url: http://localhost:8080`", sb, why);
    } else {
      snprintf(rw->service_url, sizeof rw->service_url, "%s", s);
    }
  }
  if (!given(&f[WK_SHM]) && !given(&f[WK_URL]))
    ERR(c, key, "reward has neither shared_mem_name nor service_url. HINT: add `shared_mem_name: verl_reward_shm` "
        "(the server's --shm-name, same host) or `service_url: http://host:8080` (another host)");
}

/* ---- colocate -------------------------------------------------------------------------- */

static void colocate_list(parse_ctx_t *c, const yaml_node_t *seq) {
  uint32_t members = 0;
  char sb[64];
  for (int i = 0; i < vr_yaml_seq_len(seq); i++) {
    const yaml_node_t *it = vr_yaml_seq_at(&c->y, seq, i);
    const char *s = vr_yaml_str(it);
    if (!it) continue;
    int r = -1;
    for (int q = 0; s && q < VR_ROLE_COUNT; q++)
      if (!strcmp(s, k_roles[q])) r = q;
    vr_text_clip(s, sb, sizeof sb);
    if (!s || it->type != YAML_SCALAR_NODE) {
      ERR(c, it, "colocate holds %s where a role name belongs. HINT: colocate: [critic, reference], or a list of "
          "such lists", vr_yaml_kind(it));
    } else if (!strcmp(s, "reward")) {
      ERR(c, it, "reward cannot be colocated: it is a service with no devices in this map. HINT: remove reward "
          "from colocate");
    } else if (r < 0) {
      const char *near = vr_yaml_closest(s, k_roles, VR_ROLE_COUNT);
      ERR(c, it, "unknown role '%s' in colocate. HINT: %s%s%s(roles: actor, critic, rollout, reference)", sb,
          near ? "did you mean '" : "", near ? near : "", near ? "'? " : "");
    } else if (!c->m->roles[r].present) {
      ERR(c, it, "colocate names %s, which has no section in this map. HINT: add a %s section or remove %s from "
          "colocate", s, s, s);
    } else if (members & (1u << r)) {
      ERR(c, it, "%s is named twice in one colocate list. HINT: name each role once", s);
    } else {
      members |= 1u << r;
    }
  }
  for (int q = 0; q < VR_ROLE_COUNT; q++)
    if (members & (1u << q)) c->m->colocate[q] |= members & ~(1u << q);
}

static void parse_colocate(parse_ctx_t *c, const yaml_node_t *key, const yaml_node_t *val) {
  c->colocate_key = key;
  if (vr_yaml_is_null(val)) return;
  if (!vr_yaml_is_seq(val)) {
    ERR(c, val, "colocate is %s, not a list. HINT: colocate: [critic, reference], or a list of lists "
        "[[actor, rollout], [critic, reference]]", vr_yaml_kind(val));
    return;
  }
  int n = vr_yaml_seq_len(val);
  if (n == 0) return;
  if (!vr_yaml_is_seq(vr_yaml_seq_at(&c->y, val, 0))) {
    colocate_list(c, val); /* one flat list; an odd element is reported there */
    return;
  }
  for (int i = 0; i < n; i++) {
    const yaml_node_t *it = vr_yaml_seq_at(&c->y, val, i);
    if (vr_yaml_is_seq(it))
      colocate_list(c, it);
    else if (it)
      ERR(c, it, "colocate mixes role names and lists (this element is %s). HINT: write either one list "
          "[critic, reference] or a list of lists [[actor, rollout], [critic, reference]]", vr_yaml_kind(it));
  }
}

/* ---- checks across roles ----------------------------------------------------------------- */

/* "colocate: [a, b]" for one group of roles (bit r = role r), "colocate: [[a, b], [c, d]]" for
 * several. */
static void colocate_line(const uint32_t *groups, int n, char *buf, size_t cap) {
  vr_text_t t;
  vr_text_init(&t, buf, cap);
  vr_text_add(&t, "colocate: %s", n > 1 ? "[" : "");
  for (int g = 0; g < n; g++) {
    vr_text_add(&t, "%s[", g ? ", " : "");
    const char *sep = "";
    for (int r = 0; r < VR_ROLE_COUNT; r++)
      if (groups[g] & (1u << r)) {
        vr_text_add(&t, "%s%s", sep, k_roles[r]);
        sep = ", ";
      }
    vr_text_add(&t, "]");
  }
  vr_text_add(&t, "%s", n > 1 ? "]" : "");
}

static int shares(const vr_role_map_t *a, const vr_role_map_t *b, int *first_in_b) {
  for (int j = 0; j < b->n_devices; j++)
    for (int i = 0; i < a->n_devices; i++)
      if (vr_device_eq(&a->devices[i], &b->devices[j])) {
        if (first_in_b) *first_in_b = j;
        return 1;
      }
  return 0;
}

/* Roles sharing a device must be listed together in colocate. The HINT gives one colocate line
 * that fixes every such pair at once: the lists already written, merged with each group of
 * roles that share devices. */
static void check_sharing(parse_ctx_t *c) {
  vr_devmap_t *m = c->m;
  uint32_t comp[VR_ROLE_COUNT]; /* union of roles: comp[r] = the set r belongs to */
  for (int r = 0; r < VR_ROLE_COUNT; r++) comp[r] = 1u << r;
  int missing = 0;
  for (int q = 0; q < VR_ROLE_COUNT; q++)
    for (int r = q + 1; r < VR_ROLE_COUNT; r++) {
      int together = (m->colocate[q] >> r) & 1;
      if (together || shares(&m->roles[q], &m->roles[r], NULL)) {
        uint32_t u = comp[q] | comp[r];
        for (int k = 0; k < VR_ROLE_COUNT; k++)
          if (u & (1u << k)) comp[k] = u;
        missing += !together;
      }
    }
  if (!missing) return;
  uint32_t groups[VR_ROLE_COUNT];
  int ng = 0;
  for (int r = 0; r < VR_ROLE_COUNT; r++)
    if (comp[r] != (1u << r) && (comp[r] & ((1u << r) - 1)) == 0) groups[ng++] = comp[r];
  char line[160], where[64] = "";
  colocate_line(groups, ng, line, sizeof line);
  if (c->colocate_key) snprintf(where, sizeof where, " (replacing the one at line %d)", vr_yaml_line(c->colocate_key));
  for (int q = 0; q < VR_ROLE_COUNT; q++)
    for (int r = q + 1; r < VR_ROLE_COUNT; r++) {
      int j;
      if ((m->colocate[q] >> r) & 1 || !shares(&m->roles[q], &m->roles[r], &j)) continue;
      char devs[160];
      vr_text_t t;
      vr_text_init(&t, devs, sizeof devs);
      for (int k = j, shown = 0; k < m->roles[r].n_devices; k++) {
        int in_q = 0;
        for (int i = 0; i < m->roles[q].n_devices; i++)
          in_q |= vr_device_eq(&m->roles[q].devices[i], &m->roles[r].devices[k]);
        if (!in_q) continue;
        char ds[48];
        vr_device_str(&m->roles[r].devices[k], ds, sizeof ds);
        vr_text_add(&t, "%s%s", shown++ ? ", " : "", ds);
      }
      ERR(c, c->dev_node[r][j], "%s and %s share %s, but colocate does not list them together. HINT: add the line "
          "`%s`%s, or give them different devices", k_roles[q], k_roles[r], devs, line, where);
    }
}

/* A map runs on GPUs or on cpu slots, not both (one communication world). */
static void check_kinds(parse_ctx_t *c) {
  int first = -1;
  for (int r = 0; r < VR_ROLE_COUNT; r++) {
    const vr_role_map_t *rm = &c->m->roles[r];
    if (rm->n_devices == 0) continue;
    if (first < 0) {
      first = r;
    } else if (rm->devices[0].kind != c->m->roles[first].devices[0].kind) {
      int cpu = rm->devices[0].kind == VR_DEVICE_CPU;
      ERR(c, c->dev_node[r][0], "%s runs on %s but %s on %s: a device map is all GPUs or all cpu slots. HINT: "
          "write %s's device_group in the same kind as %s's", k_roles[r], cpu ? "cpu slots" : "GPUs", k_roles[first],
          cpu ? "GPUs" : "cpu slots", k_roles[r], k_roles[first]);
    }
  }
}

static int device_cmp(const void *pa, const void *pb) {
  const vr_device_t *a = pa, *b = pb;
  if (a->node != b->node) return a->node < b->node ? -1 : 1;
  if (a->kind != b->kind) return a->kind < b->kind ? -1 : 1;
  return (a->index > b->index) - (a->index < b->index);
}

static void resolve_workers(parse_ctx_t *c, const yaml_node_t *root) {
  vr_devmap_t *m = c->m;
  m->n_workers = 0;
  for (int r = 0; r < VR_ROLE_COUNT; r++)
    for (int i = 0; i < m->roles[r].n_devices; i++) {
      const vr_device_t *d = &m->roles[r].devices[i];
      int w = 0;
      while (w < m->n_workers && !vr_device_eq(&m->workers[w], d)) w++;
      if (w < m->n_workers) continue;
      if (m->n_workers == VR_DEVMAP_MAX_DEVICES) {
        ERR(c, root, "the map uses more than %d distinct devices. HINT: at most %d workers per trainer",
            VR_DEVMAP_MAX_DEVICES, VR_DEVMAP_MAX_DEVICES);
        return;
      }
      m->workers[m->n_workers++] = *d;
    }
  qsort(m->workers, (size_t)m->n_workers, sizeof m->workers[0], device_cmp);
  for (int w = 0; w < m->n_workers; w++) {
    m->worker_roles[w] = 0;
    for (int r = 0; r < VR_ROLE_COUNT; r++)
      for (int i = 0; i < m->roles[r].n_devices; i++)
        if (vr_device_eq(&m->roles[r].devices[i], &m->workers[w])) m->worker_roles[w] |= 1u << r;
  }
}

/* ---- entry points ---------------------------------------------------------------------- */

static void parse_doc(parse_ctx_t *c) {
  const yaml_node_t *root = vr_yaml_root(&c->y);
  vr_yaml_field_t f[TOP_N] = {{.name = "actor"},     {.name = "critic"}, {.name = "rollout"},
                              {.name = "reference"}, {.name = "reward"}, {.name = "colocate"}};
  vr_yaml_fields(&c->y, root, "the device map", f, TOP_N);
  for (int r = 0; r < VR_ROLE_COUNT; r++)
    if (f[r].key) parse_role(c, (vr_role_t)r, f[r].key, f[r].value);
  if (f[TOP_REWARD].key) parse_reward(c, f[TOP_REWARD].key, f[TOP_REWARD].value);
  if (f[TOP_COLOCATE].key) parse_colocate(c, f[TOP_COLOCATE].key, f[TOP_COLOCATE].value);
  if (!f[VR_ROLE_ACTOR].key)
    ERR(c, root, "the device map has no actor. HINT: add `actor: {device_group: [0]}` (the devices that train the "
        "policy)");
  if (!f[VR_ROLE_ROLLOUT].key)
    ERR(c, root, "the device map has no rollout. HINT: add `rollout: {device_group: [1]}` (the devices that "
        "generate), or the actor's devices with `colocate: [actor, rollout]`");
  check_kinds(c);
  check_sharing(c);
  resolve_workers(c, root);
}

int vr_devmap_parse(const char *name, const char *text, size_t len, const vr_topology_shape_t *shape,
                    vr_devmap_t *out, char *err, size_t cap) {
  VR_ASSERT(!shape || (shape->n_nodes >= 0 && shape->n_nodes <= VR_DEVMAP_MAX_NODES));
  vr_diag_t d;
  vr_diag_init(&d, name, err, cap);
  memset(out, 0, sizeof *out);
  snprintf(out->path, sizeof out->path, "%s", d.name);
  parse_ctx_t *c = calloc(1, sizeof *c);
  if (!c) {
    vr_diag_error(&d, 0, 0, "out of memory. HINT: none");
    return VR_DEVMAP_EBAD;
  }
  c->shape = shape;
  c->m = out;
  if (vr_yaml_load(&c->y, text, len, &d) == 0) {
    parse_doc(c);
    vr_yaml_free(&c->y);
    int gpus = 0;
    for (int r = 0; r < VR_ROLE_COUNT; r++)
      gpus |= out->roles[r].n_devices && out->roles[r].devices[0].kind == VR_DEVICE_GPU;
    if (gpus && (!shape || shape->n_nodes == 0) && d.n_errors == 0)
      vr_diag_warning(&d, 0, 0, "GPU ids not checked against a machine (no topology given). HINT: --topology FILE "
                      "or --gpus N checks them; on the machine itself verl-trainer asks CUDA");
  }
  free(c);
  vr_diag_finish(&d);
  return d.n_errors ? VR_DEVMAP_EBAD : 0;
}

int vr_devmap_load(const char *path, const vr_topology_shape_t *shape, vr_devmap_t *out, char *err, size_t cap) {
  size_t len;
  char *text = vr_yaml_read_path(path, &len, err, cap);
  if (!text) {
    memset(out, 0, sizeof *out);
    return VR_DEVMAP_EBAD;
  }
  int rc = vr_devmap_parse(path, text, len, shape, out, err, cap);
  free(text);
  return rc;
}

/* ---- printed forms --------------------------------------------------------------------- */

static void add_devices(vr_text_t *t, const vr_role_map_t *rm, const char *open, const char *sep, const char *close) {
  for (int i = 0; i < rm->n_devices; i++) {
    char ds[48];
    vr_device_str(&rm->devices[i], ds, sizeof ds);
    vr_text_add(t, "%s%s%s%s", i ? sep : "", open, ds, close);
  }
}

/* The role's own note: rollout by its offload first, the others by placement (+ offload). */
static void own_note(vr_text_t *t, vr_role_t r, const vr_role_map_t *rm, int skip_default) {
  static const char *const off[] = {"", "cpu offload", "cpu_prefetch enabled"};
  const char *place = rm->placement == VR_PLACEMENT_HYBRID ? "hybrid placement" : "static placement";
  int place_default = rm->placement == VR_PLACEMENT_STATIC;
  const char *sep = skip_default ? ", " : "";
  if (r == VR_ROLE_ROLLOUT && rm->offload != VR_OFFLOAD_NONE) {
    vr_text_add(t, "%s%s", sep, off[rm->offload]);
    return;
  }
  if (!(skip_default && place_default)) {
    vr_text_add(t, "%s%s", sep, place);
    sep = ", ";
  }
  if (rm->offload != VR_OFFLOAD_NONE) vr_text_add(t, "%s%s", sep, off[rm->offload]);
}

size_t vr_devmap_describe(const vr_devmap_t *m, char *buf, size_t cap) {
  vr_text_t t;
  vr_text_init(&t, buf, cap);
  vr_text_add(&t, "Device mapping resolved:\n");
  for (int r = 0; r < VR_ROLE_COUNT; r++) {
    const vr_role_map_t *rm = &m->roles[r];
    if (!rm->present) continue;
    vr_text_add(&t, "  %s: ", k_roles_cap[r]);
    add_devices(&t, rm, "", ", ", "");
    int with = -1;
    for (int q = 0; q < r && with < 0; q++)
      if (m->roles[q].present && shares(&m->roles[q], rm, NULL)) with = q;
    if (with >= 0) {
      vr_text_add(&t, " (colocated with %s", k_roles[with]);
      own_note(&t, (vr_role_t)r, rm, 1);
    } else {
      vr_text_add(&t, " (");
      own_note(&t, (vr_role_t)r, rm, 0);
    }
    vr_text_add(&t, ")\n");
  }
  const vr_reward_map_t *rw = &m->reward;
  if (!rw->present) vr_text_add(&t, "  Reward: none (no reward section)\n");
  else if (rw->service_url[0] && rw->shm_name[0])
    vr_text_add(&t, "  Reward: service at %s (shared mem: %s)\n", rw->service_url, rw->shm_name);
  else if (rw->shm_name[0]) vr_text_add(&t, "  Reward: shared mem %s\n", rw->shm_name);
  else vr_text_add(&t, "  Reward: service at %s\n", rw->service_url);
  return t.len;
}

size_t vr_devmap_json(const vr_devmap_t *m, char *buf, size_t cap) {
  vr_text_t t;
  vr_text_init(&t, buf, cap);
  vr_text_add(&t, "{\"path\": ");
  vr_text_json_str(&t, m->path);
  for (int r = 0; r < VR_ROLE_COUNT; r++) {
    const vr_role_map_t *rm = &m->roles[r];
    vr_text_add(&t, ", \"%s\": ", k_roles[r]);
    if (!rm->present) {
      vr_text_add(&t, "null");
      continue;
    }
    vr_text_add(&t, "{\"devices\": [");
    add_devices(&t, rm, "\"", ", ", "\"");
    vr_text_add(&t, "], \"placement\": \"%s\", \"offload\": \"%s\", \"backend\": \"%s\"}", k_placements[rm->placement],
                k_offloads[rm->offload], k_backends[rm->backend]);
  }
  vr_text_add(&t, ", \"reward\": ");
  if (m->reward.present) {
    vr_text_add(&t, "{\"shared_mem_name\": ");
    vr_text_json_str(&t, m->reward.shm_name[0] ? m->reward.shm_name : NULL);
    vr_text_add(&t, ", \"service_url\": ");
    vr_text_json_str(&t, m->reward.service_url[0] ? m->reward.service_url : NULL);
    vr_text_add(&t, "}");
  } else {
    vr_text_add(&t, "null");
  }
  vr_text_add(&t, ", \"colocate\": [");
  const char *sep = "";
  for (int q = 0; q < VR_ROLE_COUNT; q++)
    for (int r = q + 1; r < VR_ROLE_COUNT; r++)
      if ((m->colocate[q] >> r) & 1) {
        vr_text_add(&t, "%s[\"%s\", \"%s\"]", sep, k_roles[q], k_roles[r]);
        sep = ", ";
      }
  vr_text_add(&t, "], \"workers\": [");
  for (int w = 0; w < m->n_workers; w++) {
    char ds[48];
    vr_device_str(&m->workers[w], ds, sizeof ds);
    vr_text_add(&t, "%s{\"device\": \"%s\", \"roles\": [", w ? ", " : "", ds);
    const char *rs = "";
    for (int r = 0; r < VR_ROLE_COUNT; r++)
      if ((m->worker_roles[w] >> r) & 1) {
        vr_text_add(&t, "%s\"%s\"", rs, k_roles[r]);
        rs = ", ";
      }
    vr_text_add(&t, "]}");
  }
  vr_text_add(&t, "]}");
  return t.len;
}
