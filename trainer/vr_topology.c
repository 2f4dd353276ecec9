/* vr_topology.c: topology files, --gpus N, the local machine through CUDA, and the check of a
 * device map's collective groups against the links; see vr_topology.h. */
#include "vr_topology.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vr_text.h"
#include "vr_yaml.h"

#ifdef VR_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

const char *vr_link_name(vr_link_t l) {
  switch (l) {
    case VR_LINK_SELF: return "self";
    case VR_LINK_NVLINK: return "nvlink";
    case VR_LINK_PCIE: return "pcie";
    case VR_LINK_NONE: return "none (no p2p)";
    case VR_LINK_NETWORK: return "network";
    default: return "unknown";
  }
}

static void topo_reset(vr_topology_t *t, const char *source) {
  memset(t, 0, sizeof *t);
  snprintf(t->source, sizeof t->source, "%s", source);
}

/* Node k of n GPUs, every pair given link l (self on the diagonal). */
static void fill_node(vr_topology_t *t, int k, int n, vr_link_t l) {
  t->shape.gpus_per_node[k] = n;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) t->link[k][i][j] = (unsigned char)(i == j ? VR_LINK_SELF : l);
}

void vr_topology_gpus(int n, vr_topology_t *t) {
  char src[32];
  if (n < 0) n = 0;
  if (n > VR_TOPO_MAX_GPUS) n = VR_TOPO_MAX_GPUS;
  snprintf(src, sizeof src, "--gpus %d", n);
  topo_reset(t, src);
  t->shape.n_nodes = 1;
  fill_node(t, 0, n, VR_LINK_UNKNOWN);
}

/* ---- --topology FILE --------------------------------------------------------------------- */

/* One nvlink domain (a list of GPU ids of node k): fills domain_of[] and the NVLink pairs. */
static void parse_domain(vr_yaml_t *y, vr_topology_t *t, int k, int gpus, const yaml_node_t *dom, int di,
                         int *domain_of, const yaml_node_t **where) {
  int ids[VR_TOPO_MAX_GPUS], n = 0;
  for (int i = 0; i < vr_yaml_seq_len(dom); i++) {
    const yaml_node_t *it = vr_yaml_seq_at(y, dom, i);
    long g;
    if (!it) continue;
    if (vr_yaml_parse_int(vr_yaml_str(it), 0, gpus - 1, &g)) {
      const char *s = vr_yaml_str(it);
      char sb[36];
      vr_yaml_error(y, it, "nodes[%d].nvlink holds %s%s%s, not a GPU id of this node. HINT: ids go from 0 to %d "
                    "(gpus: %d)", k, s ? "'" : "", s ? vr_text_clip(s, sb, sizeof sb) : vr_yaml_kind(it), s ? "'" : "",
                    gpus - 1, gpus);
      continue;
    }
    if (domain_of[g] >= 0) {
      const yaml_node_t *p = where[g];
      vr_yaml_error(y, it, "GPU %ld of nodes[%d] is in %s nvlink domain already (line %d, column %d). HINT: each "
                    "GPU belongs to one NVLink domain; list it once", g, k, domain_of[g] == di ? "this" : "another",
                    vr_yaml_line(p), vr_yaml_col(p));
      continue;
    }
    domain_of[g] = di;
    where[g] = it;
    ids[n++] = (int)g;
  }
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++)
      if (a != b) t->link[k][ids[a]][ids[b]] = VR_LINK_NVLINK;
}

static void parse_nvlink(vr_yaml_t *y, vr_topology_t *t, int k, int gpus, const vr_yaml_field_t *f) {
  static const char *const forms[] = {"all", "none"};
  if (!f->key) {
    fill_node(t, k, gpus, VR_LINK_NVLINK); /* no nvlink key: one NVSwitch domain */
    return;
  }
  fill_node(t, k, gpus, VR_LINK_PCIE);
  const yaml_node_t *v = f->value;
  if (!vr_yaml_is_seq(v)) {
    char what[40];
    snprintf(what, sizeof what, "nodes[%d].nvlink", k);
    int i = vr_yaml_enum(y, vr_yaml_is_null(v) ? f->key : v, what, forms, 2);
    if (i == 0) fill_node(t, k, gpus, VR_LINK_NVLINK);
    return;
  }
  int domain_of[VR_TOPO_MAX_GPUS];
  const yaml_node_t *where[VR_TOPO_MAX_GPUS] = {0};
  for (int g = 0; g < VR_TOPO_MAX_GPUS; g++) domain_of[g] = -1;
  int n = vr_yaml_seq_len(v);
  if (n > 0 && !vr_yaml_is_seq(vr_yaml_seq_at(y, v, 0))) {
    parse_domain(y, t, k, gpus, v, 0, domain_of, where); /* one flat list: a single domain */
    return;
  }
  for (int i = 0; i < n; i++) {
    const yaml_node_t *dom = vr_yaml_seq_at(y, v, i);
    if (vr_yaml_is_seq(dom))
      parse_domain(y, t, k, gpus, dom, i, domain_of, where);
    else if (dom)
      vr_yaml_error(y, dom, "nodes[%d].nvlink mixes GPU ids and lists (this element is %s). HINT: a list of "
                    "domains, e.g. nvlink: [[0, 1, 2, 3], [4, 5, 6, 7]]", k, vr_yaml_kind(dom));
  }
}

static void parse_topology_doc(vr_yaml_t *y, vr_topology_t *t) {
  const yaml_node_t *root = vr_yaml_root(y);
  vr_yaml_field_t top[1] = {{.name = "nodes"}};
  vr_yaml_fields(y, root, "the topology", top, 1);
  const yaml_node_t *nodes = top[0].value;
  if (!top[0].key) {
    vr_yaml_error(y, root, "the topology has no nodes. HINT: nodes: [{gpus: 8}] (one entry per machine)");
    return;
  }
  if (!vr_yaml_is_seq(nodes) || vr_yaml_seq_len(nodes) == 0) {
    vr_yaml_error(y, vr_yaml_is_null(nodes) ? top[0].key : nodes, "nodes is %s, not a list of nodes. HINT: nodes: "
                  "[{gpus: 8}] (one entry per machine)", vr_yaml_is_seq(nodes) ? "empty" : vr_yaml_kind(nodes));
    return;
  }
  int n = vr_yaml_seq_len(nodes);
  if (n > VR_DEVMAP_MAX_NODES) {
    vr_yaml_error(y, nodes, "the topology has %d nodes, more than %d. HINT: at most %d nodes", n,
                  VR_DEVMAP_MAX_NODES, VR_DEVMAP_MAX_NODES);
    n = VR_DEVMAP_MAX_NODES;
  }
  t->shape.n_nodes = n;
  for (int k = 0; k < n; k++) {
    const yaml_node_t *node = vr_yaml_seq_at(y, nodes, k);
    char where[32];
    snprintf(where, sizeof where, "nodes[%d]", k);
    if (!vr_yaml_is_map(node)) {
      vr_yaml_error(y, node, "%s is %s, not a mapping. HINT: - gpus: 8", where, vr_yaml_kind(node));
      continue;
    }
    vr_yaml_field_t f[2] = {{.name = "gpus"}, {.name = "nvlink"}};
    vr_yaml_fields(y, node, where, f, 2);
    long gpus = 0;
    if (!f[0].key) {
      vr_yaml_error(y, node, "%s has no gpus. HINT: gpus: 8 (the number of GPUs of that machine)", where);
      continue;
    }
    if (vr_yaml_parse_int(vr_yaml_str(f[0].value), 0, VR_TOPO_MAX_GPUS, &gpus)) {
      const char *s = vr_yaml_str(f[0].value);
      char sb[36];
      vr_yaml_error(y, vr_yaml_is_null(f[0].value) ? f[0].key : f[0].value, "%s.gpus is %s%s%s, not a number "
                    "of GPUs from 0 to %d. HINT: gpus: 8", where, s ? "'" : "",
                    s ? vr_text_clip(s, sb, sizeof sb) : vr_yaml_kind(f[0].value), s ? "'" : "", VR_TOPO_MAX_GPUS);
      continue;
    }
    parse_nvlink(y, t, k, (int)gpus, &f[1]);
  }
}

int vr_topology_parse(const char *name, const char *text, size_t len, vr_topology_t *t, char *err, size_t cap) {
  vr_diag_t d;
  vr_diag_init(&d, name, err, cap);
  char src[sizeof t->source];
  snprintf(src, sizeof src, "file %s", d.name);
  topo_reset(t, src);
  vr_yaml_t y;
  if (vr_yaml_load(&y, text, len, &d) == 0) {
    parse_topology_doc(&y, t);
    vr_yaml_free(&y);
  }
  vr_diag_finish(&d);
  return d.n_errors ? VR_DEVMAP_EBAD : 0;
}

int vr_topology_load(const char *path, vr_topology_t *t, char *err, size_t cap) {
  size_t len;
  char *text = vr_yaml_read_path(path, &len, err, cap);
  if (!text) {
    topo_reset(t, "none (unreadable topology file)");
    return VR_DEVMAP_EBAD;
  }
  int rc = vr_topology_parse(path, text, len, t, err, cap);
  free(text);
  return rc;
}

/* ---- the local machine ----------------------------------------------------------------- */

const char *vr_topology_runtime(char *buf, size_t n) {
#ifndef VR_HAVE_CUDA
  snprintf(buf, n, "cpu only");
#else
  int rt = 0;
  cudaRuntimeGetVersion(&rt);
  snprintf(buf, n, "CUDA %d.%d", rt / 1000, rt % 1000 / 10);
#endif
  return buf;
}

void vr_topology_local(vr_topology_t *t) {
#ifndef VR_HAVE_CUDA
  topo_reset(t, "none (built without CUDA)");
  t->shape.n_nodes = 1;
#else
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n <= 0) {
    char src[sizeof t->source];
    snprintf(src, sizeof src, "none (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device");
    topo_reset(t, src);
    t->shape.n_nodes = 1;
    (void)cudaGetLastError(); /* the failed call's error is not sticky; clear it for later callers */
    return;
  }
  if (n > VR_TOPO_MAX_GPUS) n = VR_TOPO_MAX_GPUS;
  topo_reset(t, "cuda");
  t->shape.n_nodes = 1;
  fill_node(t, 0, n, VR_LINK_UNKNOWN);
  /* pass 1: access, native atomics and the performance rank of every pair (both directions) */
  static const int k_unknown = -1;
  int access[VR_TOPO_MAX_GPUS][VR_TOPO_MAX_GPUS], atomic[VR_TOPO_MAX_GPUS][VR_TOPO_MAX_GPUS];
  int rank[VR_TOPO_MAX_GPUS][VR_TOPO_MAX_GPUS];
  int best = -1;
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      access[i][j] = atomic[i][j] = rank[i][j] = k_unknown;
      if (i == j) continue;
      int a = 0, at = 0, r = 0;
      if (cudaDeviceGetP2PAttribute(&a, cudaDevP2PAttrAccessSupported, i, j) != cudaSuccess ||
          cudaDeviceGetP2PAttribute(&at, cudaDevP2PAttrNativeAtomicSupported, i, j) != cudaSuccess ||
          cudaDeviceGetP2PAttribute(&r, cudaDevP2PAttrPerformanceRank, i, j) != cudaSuccess) {
        (void)cudaGetLastError();
        continue;
      }
      access[i][j] = a;
      atomic[i][j] = at;
      rank[i][j] = r;
      if (a && (best < 0 || r < best)) best = r;
    }
  /* pass 2: the rule of vr_topology.h ("NVLink from the CUDA runtime") */
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) {
      if (i == j || access[i][j] == k_unknown || access[j][i] == k_unknown) continue;
      vr_link_t l;
      if (!access[i][j] || !access[j][i]) l = VR_LINK_NONE;
      else if (atomic[i][j] && atomic[j][i] && rank[i][j] == best && rank[j][i] == best) l = VR_LINK_NVLINK;
      else l = VR_LINK_PCIE;
      t->link[0][i][j] = (unsigned char)l;
    }
#endif
}

/* ---- links and the check --------------------------------------------------------------- */

vr_link_t vr_topology_link(const vr_topology_t *t, const vr_device_t *a, const vr_device_t *b) {
  if (a->kind != VR_DEVICE_GPU || b->kind != VR_DEVICE_GPU) return VR_LINK_UNKNOWN;
  if (a->node != b->node) return VR_LINK_NETWORK;
  if (a->index == b->index) return VR_LINK_SELF;
  if (a->node < 0 || a->node >= t->shape.n_nodes) return VR_LINK_UNKNOWN;
  int g = t->shape.gpus_per_node[a->node];
  if (a->index < 0 || b->index < 0 || a->index >= g || b->index >= g) return VR_LINK_UNKNOWN;
  return (vr_link_t)t->link[a->node][a->index][b->index];
}

/* The NVLink domains of a node (GPUs joined by NVLink pairs) as "[0, 1, 2, 3], [4, 5, 6, 7]". */
static void nvlink_domains(const vr_topology_t *t, int node, char *buf, size_t cap) {
  vr_text_t out;
  vr_text_init(&out, buf, cap);
  int g = t->shape.gpus_per_node[node], seen[VR_TOPO_MAX_GPUS] = {0}, any = 0;
  for (int i = 0; i < g; i++) {
    if (seen[i]) continue;
    int members[VR_TOPO_MAX_GPUS], n = 0;
    members[n++] = i;
    seen[i] = 1;
    for (int m = 0; m < n; m++) /* breadth-first over NVLink pairs */
      for (int j = 0; j < g; j++)
        if (!seen[j] && t->link[node][members[m]][j] == VR_LINK_NVLINK) {
          seen[j] = 1;
          members[n++] = j;
        }
    if (n < 2) continue;
    vr_text_add(&out, "%s[", any++ ? ", " : "");
    for (int m = 0; m < n; m++) vr_text_add(&out, "%s%d", m ? ", " : "", members[m]);
    vr_text_add(&out, "]");
  }
}

static int warn_pair(const vr_topology_t *t, const char *group, const vr_device_t *a, const vr_device_t *b,
                     vr_text_t *out) {
  vr_link_t l = vr_topology_link(t, a, b);
  if (l != VR_LINK_PCIE && l != VR_LINK_NONE) return 0;
  char da[48], db[48], doms[400];
  vr_device_str(a, da, sizeof da);
  vr_device_str(b, db, sizeof db);
  nvlink_domains(t, a->node, doms, sizeof doms);
  const char *speed = l == VR_LINK_PCIE ? "run at PCIe speed" : "go through host memory";
  if (doms[0])
    vr_text_add(out, "warning: %s spans %s and %s over %s (no NVLink): its collectives %s. HINT: keep %s inside one "
                "NVLink domain of node%d: %s\n", group, da, db, vr_link_name(l), speed, group, a->node, doms);
  else
    vr_text_add(out, "warning: %s spans %s and %s over %s (no NVLink): its collectives %s. HINT: node%d has no "
                "NVLink; fewer GPUs in %s keep its collectives off the slow link\n", group, da, db, vr_link_name(l),
                speed, a->node, group);
  return 1;
}

static int in_group(const vr_role_map_t *rm, const vr_device_t *d) {
  for (int i = 0; i < rm->n_devices; i++)
    if (vr_device_eq(&rm->devices[i], d)) return 1;
  return 0;
}

int vr_topology_check(const vr_topology_t *t, const vr_devmap_t *m, char *out, size_t cap) {
  vr_text_t o;
  vr_text_init(&o, out, cap);
  int n = 0;
  /* each role's data-parallel group */
  for (int r = 0; r < VR_ROLE_COUNT; r++) {
    const vr_role_map_t *rm = &m->roles[r];
    for (int i = 0; i < rm->n_devices; i++)
      for (int j = i + 1; j < rm->n_devices; j++)
        n += warn_pair(t, vr_role_name((vr_role_t)r), &rm->devices[i], &rm->devices[j], &o);
  }
  /* the weight sync (actor -> rollout): the pairs between the two groups; those inside either
   * group were reported above */
  const vr_role_map_t *ac = &m->roles[VR_ROLE_ACTOR], *ro = &m->roles[VR_ROLE_ROLLOUT];
  for (int i = 0; i < ac->n_devices; i++)
    for (int j = 0; j < ro->n_devices; j++)
      if (!in_group(ac, &ro->devices[j]) && !in_group(ro, &ac->devices[i]))
        n += warn_pair(t, "weight sync (actor + rollout)", &ac->devices[i], &ro->devices[j], &o);
  return n;
}
