/* vr_devmap.h: verl-trainer's device map (device_map.yaml): which devices each role runs on.
 *
 * The file, as users write it (our vocabulary; ARCHITECTURE.md "The trainer"):
 *
 *   actor:     {device_group: [0, 1, 2, 3], placement_policy: hybrid}
 *   critic:    {device_group: [4], placement_policy: static}
 *   rollout:   {device_group: [5, 6, 7], offload_strategy: cpu_prefetch}
 *   reference: {device_group: [4]}
 *   reward:    {device_group: [], shared_mem_name: verl_reward_shm, service_url: http://localhost:8080}
 *   colocate:  [[critic, reference]]        # roles that may share devices (or one flat list)
 *
 * Top-level keys: the roles actor, critic, rollout, reference, reward, plus colocate (nothing
 * else; keys and values are case-sensitive, values lowercase as written here). actor and rollout
 * are required; critic and reference are optional (leave the section out to run without one).
 * Per role (actor / critic / rollout / reference), a mapping:
 *   device_group      list of device ids (required, at least one id; an empty list is an error:
 *                     a role that does not run has no section):
 *                       N            GPU N of the local node ("node0"), 0 <= N < 256
 *                       "nodeK:N"    GPU N of node K (multi-node; nodes are named node0 .. node63)
 *                       "cpu:N"      CPU worker slot N (machines without GPUs; one MPI rank each)
 *                     a group is all GPUs or all cpu slots, never mixed, and so is the whole map
 *                     (one communication world); no id twice in a group. "cuda:N" is refused
 *                     with a HINT (here GPUs are plain numbers; cuda:N is the printed form).
 *   placement_policy  static (default: the role's state stays resident on its devices) or
 *                     hybrid (the role time-shares its devices with the roles colocated on them,
 *                     offloading between phases)
 *   offload_strategy  none (default), cpu (state offloaded to host memory between phases) or
 *                     cpu_prefetch (offloaded, and brought back ahead of the phase that needs it)
 *   nccl_backend      nccl (default for GPU groups) or mpi (collectives through MPI; the only
 *                     choice, and the default, for cpu groups: nccl there is an error)
 * reward (an external verl-reward-server; the trainer never loads the reward model), optional:
 *   device_group      must be empty or absent
 *   shared_mem_name   the server's --shm-name (same host): the protocol's rule (vr_shm_path:
 *                     not empty, no '/', at most NAME_MAX - 1 bytes)
 *   service_url       http://host:port[/path] of the server (other hosts): host a name, an IPv4
 *                     address or [IPv6], port 1-65535 required, no https
 *   at least one of the two; both: shared memory first, HTTP when the segment is absent
 * colocate: a list of roles, or a list of lists of roles; each list names roles that are allowed
 *   to share devices (a role listed alone is fine; reward, unknown roles, roles without a
 *   section and a role named twice in one list are errors). Two roles that share a device
 *   without being listed together are an error whose HINT is the one colocate line that
 *   permits every sharing pair of the map.
 *
 * Validation (vr_devmap_load): every problem is an error naming the file, the line and column
 * and the key or value, with a HINT: unknown keys (with the closest known key), duplicate keys,
 * wrong types, bad ids, duplicate ids inside a group, ids the topology does not have, mixed
 * GPU/cpu groups, roles sharing a device without colocate, a reward role with neither
 * shared_mem_name nor service_url (or a bad one), a missing actor or rollout; files that are
 * not YAML (libyaml's message and position), empty, not a mapping at the top, larger than
 * 1 MiB or nested deeper than 32 levels. The caller exits with status 2 on any of them.
 *
 * Threading: plain data; the functions keep no state (several threads may parse at once, each
 * into its own out and err). */
#ifndef VR_DEVMAP_H
#define VR_DEVMAP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vr_role {
  VR_ROLE_ACTOR = 0,
  VR_ROLE_CRITIC = 1,
  VR_ROLE_ROLLOUT = 2,
  VR_ROLE_REFERENCE = 3,
  VR_ROLE_COUNT = 4 /* roles that run on devices; reward is a service, kept apart */
} vr_role_t;

typedef enum vr_placement { VR_PLACEMENT_STATIC = 0, VR_PLACEMENT_HYBRID = 1 } vr_placement_t;
typedef enum vr_offload { VR_OFFLOAD_NONE = 0, VR_OFFLOAD_CPU = 1, VR_OFFLOAD_CPU_PREFETCH = 2 } vr_offload_t;
typedef enum vr_comm_backend { VR_COMM_NCCL = 0, VR_COMM_MPI = 1 } vr_comm_backend_t;
typedef enum vr_device_kind { VR_DEVICE_GPU = 0, VR_DEVICE_CPU = 1 } vr_device_kind_t;

#define VR_DEVMAP_MAX_DEVICES 256 /* per group and per map */
#define VR_DEVMAP_MAX_NODES 64

/* One device: a GPU of a node, or a cpu worker slot. */
typedef struct vr_device {
  vr_device_kind_t kind;
  int node;  /* 0 for "N" and cpu slots */
  int index; /* GPU index on its node, or the cpu slot */
} vr_device_t;

typedef struct vr_role_map {
  int present;                 /* the role appears in the file */
  int n_devices;
  vr_device_t devices[VR_DEVMAP_MAX_DEVICES];
  vr_placement_t placement;
  vr_offload_t offload;
  vr_comm_backend_t backend;
  int line;                    /* line of the role's key in the file (1-based), for messages */
} vr_role_map_t;

typedef struct vr_reward_map {
  int present;
  char shm_name[256];          /* "" when absent */
  char service_url[512];       /* "" when absent */
} vr_reward_map_t;

/* What the map is checked against: how many GPUs each node has. n_nodes = 0: unknown (ids are
 * then not checked for existence, and vr_devmap_load says so in a warning). */
typedef struct vr_topology_shape {
  int n_nodes;
  int gpus_per_node[VR_DEVMAP_MAX_NODES];
} vr_topology_shape_t;

typedef struct vr_devmap {
  char path[1024];
  vr_role_map_t roles[VR_ROLE_COUNT];
  vr_reward_map_t reward;
  uint32_t colocate[VR_ROLE_COUNT]; /* bit r of colocate[q]: roles q and r may share devices */
  /* resolved workers: one per distinct device over all roles, in order (node, kind, index);
   * worker w serves the roles whose bit is set in worker_roles[w] */
  int n_workers;
  vr_device_t workers[VR_DEVMAP_MAX_DEVICES];
  uint32_t worker_roles[VR_DEVMAP_MAX_DEVICES];
} vr_devmap_t;

/* Parses and validates path against shape (NULL or n_nodes 0: existence not checked).
 * Returns 0, or -2 (VR_DEVMAP_EBAD) after writing every problem into err, one per line:
 *   "path:line:col: error: <what>. HINT: <fix>"   (line, col 1-based)
 *   "path: error: <what>. HINT: <fix>"            (the file as a whole: unreadable, too large)
 * in the order of the file (whole-file problems first). On success err holds warnings
 * ("path: warning: ...") or "": today one, when GPU ids could not be checked because shape is
 * unknown. err is NUL-terminated; lines that do not fit in cap are left out whole and counted
 * in a last "note:" line. On error *out is unspecified. */
#define VR_DEVMAP_EBAD (-2)
int vr_devmap_load(const char *path, const vr_topology_shape_t *shape, vr_devmap_t *out, char *err, size_t cap);

/* The same from a YAML text in memory (name is used in messages in place of a path). */
int vr_devmap_parse(const char *name, const char *text, size_t len, const vr_topology_shape_t *shape,
                    vr_devmap_t *out, char *err, size_t cap);

/* "actor", "critic", "rollout", "reference". */
const char *vr_role_name(vr_role_t r);

/* Writes the "Device mapping resolved:" block (the lines after the log prefix, each ending in
 * '\n') into buf; returns the length (truncated to cap - 1). One line per role in the file:
 *   "  Actor: cuda:0, cuda:1 (hybrid placement)"
 * The note: a role that shares a device with an earlier role (order actor, critic, rollout,
 * reference) says "colocated with <that role>", followed by its own note unless that is the
 * default "static placement"; otherwise its own note: rollout by its offload ("cpu_prefetch
 * enabled", "cpu offload"), else by placement; the other roles "hybrid placement" / "static
 * placement", then ", cpu offload" / ", cpu_prefetch enabled" when they offload. Last the reward:
 *   "  Reward: service at URL (shared mem: NAME)" / "  Reward: shared mem NAME" /
 *   "  Reward: service at URL" / "  Reward: none (no reward section)" */
size_t vr_devmap_describe(const vr_devmap_t *m, char *buf, size_t cap);

/* One JSON object (no newline) with the same content: {"path": "...", "actor": {"devices":
 * ["cuda:0", ...], "placement": "hybrid", "offload": "none", "backend": "nccl"}, "critic": null
 * (a role not in the file), ..., "reward": {"shared_mem_name": "..." or null, "service_url": ...}
 * or null, "colocate": [["critic", "reference"], ...] (every permitted pair once),
 * "workers": [{"device": "cuda:0", "roles": ["actor"]}, ...]}. Returns the length (truncated to
 * cap - 1: a truncated text is not JSON; 64 KiB always holds a map). */
size_t vr_devmap_json(const vr_devmap_t *m, char *buf, size_t cap);

/* "cuda:N" (node 0), "node1:cuda:N", "cpu:N". */
void vr_device_str(const vr_device_t *d, char *buf, size_t cap);
/* Same kind, node and index. */
int vr_device_eq(const vr_device_t *a, const vr_device_t *b);

#ifdef __cplusplus
}
#endif
#endif /* VR_DEVMAP_H */
