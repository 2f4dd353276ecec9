/* vr_comm.h: verl-trainer's process world and role groups (MPI for control and cpu groups,
 * NCCL for GPU groups).
 *
 * Processes: rank 0 of MPI_COMM_WORLD is the controller (no device); ranks 1..W are the
 * workers, worker w = rank w + 1 serving device devmap->workers[w] and every role whose bit is
 * set in devmap->worker_roles[w] (roles that share a device share its process). The world must
 * have exactly 1 + W ranks.
 *
 * Groups: one per role present (its workers, in worker order), and the weight-sync group
 * (actor and rollout workers, actor's first worker at group rank 0, the broadcast root).
 * On GPU groups with nccl_backend nccl the collectives run on NCCL communicators: one over all
 * workers (the NCCL unique id broadcast through MPI), split per group with ncclCommSplit; on cpu
 * groups (and nccl_backend mpi) they run through MPI communicators split from the world.
 *
 * Buffers: a group's collectives take device pointers on NCCL groups and host pointers on MPI
 * groups (vr_group_is_device says which). Every collective is bounded by the world's timeout:
 * a peer that died or hangs makes it return VR_COMM_ETIMEDOUT (NCCL: the communicator is
 * aborted). After a timeout the group is unusable and a timed-out MPI collective may still write
 * into its buffer: the caller must not free or reuse it and should end the run. Every collective
 * is recorded by the communication profile when it is on (vr_commprof.h).
 * Not bounded: set-up (MPI_Comm_split, ncclCommInitRank / ncclCommSplit, blocking NCCL init) and
 * the end-of-run profile gather; a rank that dies there is reported by mpirun, which ends the job.
 *
 * Threading: one thread per process uses a world (the MPI thread level is FUNNELED). */
#ifndef VR_COMM_H
#define VR_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "vr_commprof.h"
#include "vr_devmap.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VR_COMM_ETIMEDOUT (-4) /* same value as VR_ERR_TIMEOUT */
#define VR_COMM_EFAIL (-21)    /* a collective failed (VR_ERR_DEVICE) */

typedef struct vr_group vr_group_t;

typedef enum vr_group_id {
  VR_GROUP_ACTOR = VR_ROLE_ACTOR,
  VR_GROUP_CRITIC = VR_ROLE_CRITIC,
  VR_GROUP_ROLLOUT = VR_ROLE_ROLLOUT,
  VR_GROUP_REFERENCE = VR_ROLE_REFERENCE,
  VR_GROUP_WEIGHT_SYNC = VR_ROLE_COUNT,
  VR_GROUP_COUNT
} vr_group_id_t;

/* What the controller knows of every worker after start-up (exchanged once). */
typedef struct vr_peer {
  int rank;
  int pid;
  char host[64];
  char device[32]; /* "cuda:N", "node1:cuda:N", "cpu:N" */
  uint32_t roles;
} vr_peer_t;

typedef struct vr_world {
  int rank, size;             /* MPI_COMM_WORLD */
  int worker;                 /* worker index, -1 on the controller */
  const vr_devmap_t *map;
  double timeout_s;           /* bound on every collective and control wait */
  vr_peer_t *peers;           /* size entries (controller: all filled; workers: their own) */
  vr_group_t *groups[VR_GROUP_COUNT]; /* NULL where this process is not a member */
  vr_commprof_t *prof;        /* NULL when the profile is off */
  int cuda_device;            /* this worker's local GPU, -1 for cpu workers and the controller */
  void *mpi_world;            /* MPI_Comm (opaque here so callers need no mpi.h) */
} vr_world_t;

/* Initialises MPI (if not yet), checks the world size against the map, exchanges the peers,
 * selects the worker's GPU, builds every group this process belongs to. On error returns a
 * negative code after printing "verl-trainer: rank R: ..." with a HINT to stderr; the caller
 * exits with status 2 (configuration) or 1 (runtime). prof: NULL = off. host: the name this
 * process reports as its host for the node check (workers of one node of the map on one host,
 * of different nodes on different hosts) and in messages; NULL or "" = gethostname(). A name
 * per node lets one machine stand in for several (verl-trainer: VR_TRAINER_HOST, with each
 * simulated node's CUDA_VISIBLE_DEVICES; docs/operations.md "Multi-GPU runs"). */
int vr_world_init(vr_world_t *w, const vr_devmap_t *map, double timeout_s, vr_commprof_t *prof, const char *host);
void vr_world_free(vr_world_t *w);
/* Ends the job from any rank with a message (MPI_Abort): for errors one rank cannot recover. */
_Noreturn void vr_world_abort(vr_world_t *w, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A human name ("actor", ..., "weight_sync") and group size / this process's group rank. */
const char *vr_group_name(vr_group_id_t g);
int vr_group_size(const vr_group_t *g);
int vr_group_rank(const vr_group_t *g);
int vr_group_is_device(const vr_group_t *g); /* 1: NCCL, device buffers; 0: MPI, host buffers */

/* In-place sum all-reduce of n floats. 0 or VR_COMM_ETIMEDOUT / VR_COMM_EFAIL. */
int vr_group_allreduce_f32(vr_world_t *w, vr_group_t *g, float *buf, size_t n);
/* Broadcast of bytes from group rank root. */
int vr_group_bcast(vr_world_t *w, vr_group_t *g, void *buf, size_t bytes, int root);
/* Waits until every member has reached this point (bounded by the timeout). */
int vr_group_barrier(vr_world_t *w, vr_group_t *g);

/* Device buffers for a group's collectives (cudaMalloc on NCCL groups, malloc on MPI groups);
 * copies between such a buffer and host memory. */
void *vr_group_alloc(const vr_group_t *g, size_t bytes);
void vr_group_free_buf(const vr_group_t *g, void *p);
int vr_group_upload(const vr_group_t *g, void *dst, const void *src, size_t bytes);
int vr_group_download(const vr_group_t *g, void *dst, const void *src, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif /* VR_COMM_H */
