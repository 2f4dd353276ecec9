/* vr_topology.h: what links the GPUs of a machine (or a planned cluster), and whether a device
 * map's groups fit it.
 *
 * Sources, in the order verl-trainer tries them:
 *   --topology FILE   a YAML description, for planning a layout without the machine:
 *                       nodes:
 *                         - gpus: 8
 *                           nvlink: [[0, 1, 2, 3], [4, 5, 6, 7]]   # NVLink domains (all pairs
 *                                                                 # inside one are NVLink; others PCIe)
 *                         - gpus: 8                                # no nvlink key: all pairs NVLink
 *                     (also `nvlink: all` / `nvlink: none` (all PCIe), and a flat list
 *                     `nvlink: [0, 1]` for one domain). gpus: 0 .. 64 per node, 1 .. 64 nodes;
 *                     a GPU in no domain reaches the others over PCIe; a GPU in two domains, an
 *                     id >= gpus, unknown keys and wrong types are errors ("path:line:col:
 *                     error: ... HINT: ..." lines, as in vr_devmap.h).
 *   --gpus N          one node of N GPUs, links unknown (existence checked, links not)
 *   the local machine cudaGetDeviceCount + cudaDeviceGetP2PAttribute for every pair (NVML is
 *                     not used yet). Without a usable GPU (no device, or any cudaGetDeviceCount
 *                     error such as "CUDA driver version is insufficient for CUDA runtime
 *                     version") the local machine has 0 GPUs and source says why.
 * Pairs on different nodes are always VR_LINK_NETWORK.
 *
 * NVLink from the CUDA runtime (it has no "link type" attribute). For a pair i, j, in both
 * directions: no cudaDevP2PAttrAccessSupported -> VR_LINK_NONE; access, native atomics
 * (cudaDevP2PAttrNativeAtomicSupported) and cudaDevP2PAttrPerformanceRank equal to the best
 * (lowest) rank of any accessible pair of the node -> VR_LINK_NVLINK; other accessible pairs
 * -> VR_LINK_PCIE; a failed query -> VR_LINK_UNKNOWN. Why: rank 0 is "the most performant
 * link" of the machine but is also what a PCIe-only machine reports for its pairs, so the rank
 * alone cannot tell; native atomics hold over NVLink / NVSwitch and, on the machines we know of,
 * not over PCIe P2P. Where that is wrong (a PCIe fabric with peer atomics at the best rank) a
 * PCIe pair reads as NVLink and vr_topology_check stays silent about it: the rule errs towards
 * missing a warning, never towards a false one on an NVSwitch machine. NVML's
 * nvmlDeviceGetNvLinkState, when added, overrides it.
 *
 * Threading: plain data. vr_topology_local() initialises the CUDA runtime (call it before
 * fork()ing workers, or in each). */
#ifndef VR_TOPOLOGY_H
#define VR_TOPOLOGY_H

#include <stddef.h>

#include "vr_devmap.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vr_link {
  VR_LINK_UNKNOWN = 0, /* not known (--gpus N) */
  VR_LINK_SELF = 1,
  VR_LINK_NVLINK = 2,  /* NVLink / NVSwitch: P2P with the best performance rank */
  VR_LINK_PCIE = 3,    /* P2P over PCIe (same switch or host bridge) */
  VR_LINK_NONE = 4,    /* no P2P: copies go through host memory */
  VR_LINK_NETWORK = 5, /* different nodes */
} vr_link_t;

#define VR_TOPO_MAX_GPUS 64 /* per node */

typedef struct vr_topology {
  vr_topology_shape_t shape;
  char source[256]; /* "file PATH", "--gpus N", "cuda", "none (why)" (a long path is cut) */
  /* links within one node: link[node][i][j] */
  unsigned char link[VR_DEVMAP_MAX_NODES][VR_TOPO_MAX_GPUS][VR_TOPO_MAX_GPUS];
} vr_topology_t;

/* Parses a --topology file. Returns 0 or VR_DEVMAP_EBAD with "path:line:col: error: ..."
 * lines in err (every problem, as vr_devmap_load). On error *t is unspecified. */
int vr_topology_load(const char *path, vr_topology_t *t, char *err, size_t cap);
/* The same from a YAML text in memory (name in place of a path, in messages and source). */
int vr_topology_parse(const char *name, const char *text, size_t len, vr_topology_t *t, char *err, size_t cap);
/* One node of n GPUs (clamped to 0 .. VR_TOPO_MAX_GPUS), links unknown. */
void vr_topology_gpus(int n, vr_topology_t *t);
/* The local machine through CUDA (compiled with VR_HAVE_CUDA; otherwise 0 GPUs). Never fails:
 * no usable GPU gives a one-node topology of 0 GPUs and source "none (reason)". */
void vr_topology_local(vr_topology_t *t);
/* For --version: "CUDA 13.0" (the runtime the process runs with) or "cpu only" without VR_HAVE_CUDA.
 * Touches no device. Returns buf. */
const char *vr_topology_runtime(char *buf, size_t n);

/* The link between two devices of the map (GPU ids; cpu devices: VR_LINK_UNKNOWN). */
vr_link_t vr_topology_link(const vr_topology_t *t, const vr_device_t *a, const vr_device_t *b);
/* "nvlink", "pcie", "none (no p2p)", "network", "self", "unknown". */
const char *vr_link_name(vr_link_t l);

/* Checks the groups that run collectives: each role with more than one GPU (its data-parallel
 * all-reduce) and the weight-sync group (actor + rollout GPUs: there the pairs of one actor
 * GPU and one rollout GPU, the pairs inside either role being reported under the role). Every
 * pair of GPUs of one node in such a group whose link is PCIe or none gets one line
 *   "warning: actor spans cuda:0 and cuda:4 over pcie (no NVLink): its collectives run at PCIe
 *    speed. HINT: keep actor inside one NVLink domain of node0: [0, 1, 2, 3], [4, 5, 6, 7]"
 * (over "none (no p2p)": "... go through host memory"; a node without NVLink gets another
 * HINT) in out, each ending in '\n', truncated to cap. Unknown links (--gpus N, cpu slots)
 * and pairs on different nodes give no warning. Returns the number of such pairs (0: the
 * layout fits the machine). */
int vr_topology_check(const vr_topology_t *t, const vr_devmap_t *m, char *out, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* VR_TOPOLOGY_H */
