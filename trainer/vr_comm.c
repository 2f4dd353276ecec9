/* vr_comm.c: the process world, role groups and their collectives (vr_comm.h).
 *
 * Every group has an MPI communicator (split from MPI_COMM_WORLD; used for barriers and, on
 * MPI groups, for the collectives). GPU groups with the nccl backend also have an NCCL
 * communicator split from one NCCL world over the GPU workers, and a CUDA stream of their own.
 * Waiting is always a poll against a deadline (MPI_Test on non-blocking collectives,
 * cudaStreamQuery + ncclCommGetAsyncError on NCCL), so a dead or stuck peer becomes
 * VR_COMM_ETIMEDOUT instead of a hang; an NCCL communicator that timed out is aborted. */
#include "vr_comm.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef VR_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

struct vr_group {
  vr_group_id_t id;
  MPI_Comm mpi;
  int size, rank;
  int device;      /* 1: NCCL with device buffers */
#ifdef VR_HAVE_NCCL
  ncclComm_t nccl;
  cudaStream_t stream;
  cudaEvent_t ev0, ev1; /* around the last operation: its duration */
  double enq_us;         /* host time when the last operation was enqueued: its start in the trace */
#endif
};

static const char *const vr_group_names[VR_GROUP_COUNT] = {"actor", "critic", "rollout", "reference",
                                                            "weight_sync"};

const char *vr_group_name(vr_group_id_t g) { return g >= 0 && g < VR_GROUP_COUNT ? vr_group_names[g] : "?"; }
int vr_group_size(const vr_group_t *g) { return g ? g->size : 0; }
int vr_group_rank(const vr_group_t *g) { return g ? g->rank : -1; }
int vr_group_is_device(const vr_group_t *g) { return g ? g->device : 0; }

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void nap(void) {
  struct timespec ts = {0, 20000}; /* 20 us: a poll, not a spin */
  nanosleep(&ts, NULL);
}

_Noreturn void vr_world_abort(vr_world_t *w, int code, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "verl-trainer: rank %d: %s\n", w ? w->rank : -1, msg);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  _exit(code); /* MPI_Abort does not return; keep the promise if it ever does */
}

/* Waits for an MPI request until the world's deadline. */
static int mpi_wait(vr_world_t *w, MPI_Request *req) {
  const double end = now_s() + w->timeout_s;
  for (;;) {
    int done = 0;
    if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return VR_COMM_EFAIL;
    if (done) return 0;
    if (now_s() > end) return VR_COMM_ETIMEDOUT;
    nap();
  }
}

static void prof_event(vr_world_t *w, const vr_group_t *g, int op, uint64_t bytes, int stream, double t0,
                       double t1) {
  if (!w->prof) return;
  vr_commprof_event_t e;
  memset(&e, 0, sizeof e);
  snprintf(e.role, sizeof e.role, "%s", vr_group_name(g->id));
  /* NCCL groups run their barriers through MPI, timed on the host (stream 0) */
  snprintf(e.comm, sizeof e.comm, "%s", g->device && stream > 0 ? "nccl" : "mpi");
  e.op = op;
  e.ranks = g->size;
  e.stream = stream;
  e.bytes = bytes;
  e.t0_us = t0;
  e.t1_us = t1;
  vr_commprof_add(w->prof, &e);
}

#ifdef VR_HAVE_NCCL
/* Waits for the group's stream until the deadline; aborts the communicator on timeout or on
 * an asynchronous NCCL error. */
static int nccl_wait(vr_world_t *w, vr_group_t *g) {
  const double end = now_s() + w->timeout_s;
  for (;;) {
    cudaError_t ce = cudaStreamQuery(g->stream);
    if (ce == cudaSuccess) return 0;
    if (ce != cudaErrorNotReady) {
      fprintf(stderr, "verl-trainer: rank %d: %s: CUDA error %s\n", w->rank, vr_group_name(g->id),
              cudaGetErrorString(ce));
      return VR_COMM_EFAIL;
    }
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(g->nccl, &async) == ncclSuccess && async != ncclSuccess &&
        async != ncclInProgress) {
      fprintf(stderr, "verl-trainer: rank %d: %s: NCCL error %s\n", w->rank, vr_group_name(g->id),
              ncclGetErrorString(async));
      ncclCommAbort(g->nccl);
      g->nccl = NULL;
      return VR_COMM_EFAIL;
    }
    if (now_s() > end) {
      ncclCommAbort(g->nccl);
      g->nccl = NULL;
      return VR_COMM_ETIMEDOUT;
    }
    nap();
  }
}

/* Records the finished NCCL operation in the profile: its duration between ev0 and ev1 (float
 * milliseconds between two close events keep sub-microsecond resolution), placed at the host
 * time of its enqueue (the stream was idle: every operation is waited for). */
static void nccl_prof(vr_world_t *w, vr_group_t *g, int op, uint64_t bytes) {
  if (!w->prof) return;
  float ms = 0;
  if (cudaEventElapsedTime(&ms, g->ev0, g->ev1) != cudaSuccess) return;
  prof_event(w, g, op, bytes, 1 + (int)g->id, g->enq_us, g->enq_us + ms * 1e3);
}

/* Enqueues ev0 (and notes the host time) before an NCCL operation; 0 or VR_COMM_EFAIL. */
static int nccl_begin(vr_world_t *w, vr_group_t *g) {
  g->enq_us = w->prof ? vr_commprof_now_us() : 0;
  return cudaEventRecord(g->ev0, g->stream) == cudaSuccess ? 0 : VR_COMM_EFAIL;
}
#endif

int vr_group_allreduce_f32(vr_world_t *w, vr_group_t *g, float *buf, size_t n) {
  if (!g) return VR_COMM_EFAIL;
#ifdef VR_HAVE_NCCL
  if (g->device) {
    if (!g->nccl) return VR_COMM_EFAIL;
    if (nccl_begin(w, g) != 0) return VR_COMM_EFAIL;
    ncclResult_t nr = ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, g->nccl, g->stream);
    if (nr != ncclSuccess) {
      fprintf(stderr, "verl-trainer: rank %d: %s all-reduce: %s. HINT: NCCL_DEBUG=WARN names the cause\n", w->rank,
              vr_group_name(g->id), ncclGetErrorString(nr));
      return VR_COMM_EFAIL;
    }
    if (cudaEventRecord(g->ev1, g->stream) != cudaSuccess) return VR_COMM_EFAIL;
    int rc = nccl_wait(w, g);
    if (rc == 0) nccl_prof(w, g, VR_PROF_ALLREDUCE, n * sizeof(float));
    return rc;
  }
#endif
  const double t0 = w->prof ? vr_commprof_now_us() : 0;
  for (size_t off = 0; off < n;) {
    int chunk = n - off > (size_t)(1 << 28) ? (1 << 28) : (int)(n - off);
    MPI_Request req;
    if (MPI_Iallreduce(MPI_IN_PLACE, buf + off, chunk, MPI_FLOAT, MPI_SUM, g->mpi, &req) != MPI_SUCCESS)
      return VR_COMM_EFAIL;
    int rc = mpi_wait(w, &req);
    if (rc != 0) return rc;
    off += (size_t)chunk;
  }
  prof_event(w, g, VR_PROF_ALLREDUCE, n * sizeof(float), 0, t0, w->prof ? vr_commprof_now_us() : 0);
  return 0;
}

int vr_group_bcast(vr_world_t *w, vr_group_t *g, void *buf, size_t bytes, int root) {
  if (!g || root < 0 || root >= g->size) return VR_COMM_EFAIL;
#ifdef VR_HAVE_NCCL
  if (g->device) {
    if (!g->nccl) return VR_COMM_EFAIL;
    if (nccl_begin(w, g) != 0) return VR_COMM_EFAIL;
    ncclResult_t nr = ncclBroadcast(buf, buf, bytes, ncclUint8, root, g->nccl, g->stream);
    if (nr != ncclSuccess) {
      fprintf(stderr, "verl-trainer: rank %d: %s broadcast: %s. HINT: NCCL_DEBUG=WARN names the cause\n", w->rank,
              vr_group_name(g->id), ncclGetErrorString(nr));
      return VR_COMM_EFAIL;
    }
    if (cudaEventRecord(g->ev1, g->stream) != cudaSuccess) return VR_COMM_EFAIL;
    int rc = nccl_wait(w, g);
    if (rc == 0) nccl_prof(w, g, VR_PROF_BROADCAST, bytes);
    return rc;
  }
#endif
  const double t0 = w->prof ? vr_commprof_now_us() : 0;
  for (size_t off = 0; off < bytes;) {
    int chunk = bytes - off > (size_t)(1 << 30) ? (1 << 30) : (int)(bytes - off);
    MPI_Request req;
    if (MPI_Ibcast((char *)buf + off, chunk, MPI_BYTE, root, g->mpi, &req) != MPI_SUCCESS) return VR_COMM_EFAIL;
    int rc = mpi_wait(w, &req);
    if (rc != 0) return rc;
    off += (size_t)chunk;
  }
  prof_event(w, g, VR_PROF_BROADCAST, bytes, 0, t0, w->prof ? vr_commprof_now_us() : 0);
  return 0;
}

int vr_group_barrier(vr_world_t *w, vr_group_t *g) {
  if (!g) return VR_COMM_EFAIL;
  const double t0 = w->prof ? vr_commprof_now_us() : 0;
  MPI_Request req;
  if (MPI_Ibarrier(g->mpi, &req) != MPI_SUCCESS) return VR_COMM_EFAIL;
  int rc = mpi_wait(w, &req);
  if (rc == 0) prof_event(w, g, VR_PROF_BARRIER, 0, 0, t0, w->prof ? vr_commprof_now_us() : 0);
  return rc;
}

void *vr_group_alloc(const vr_group_t *g, size_t bytes) {
#ifdef VR_HAVE_NCCL
  if (g && g->device) {
    void *p = NULL;
    return cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
  }
#endif
  (void)g;
  return malloc(bytes ? bytes : 1);
}

void vr_group_free_buf(const vr_group_t *g, void *p) {
  if (!p) return;
#ifdef VR_HAVE_NCCL
  if (g && g->device) {
    cudaFree(p);
    return;
  }
#endif
  (void)g;
  free(p);
}

/* Copies between host memory and a group buffer. On NCCL groups: on the group's own
 * (non-blocking) stream and waited for, so the collective that follows on that stream is
 * ordered after the copy (a pageable cudaMemcpy may return before its DMA is done). */
static int group_copy(const vr_group_t *g, void *dst, const void *src, size_t bytes, int to_device) {
#ifdef VR_HAVE_NCCL
  if (g && g->device)
    return cudaMemcpyAsync(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                           g->stream) == cudaSuccess &&
                   cudaStreamSynchronize(g->stream) == cudaSuccess
               ? 0
               : VR_COMM_EFAIL;
#endif
  (void)g;
  (void)to_device;
  memcpy(dst, src, bytes);
  return 0;
}

int vr_group_upload(const vr_group_t *g, void *dst, const void *src, size_t bytes) {
  return group_copy(g, dst, src, bytes, 1);
}

int vr_group_download(const vr_group_t *g, void *dst, const void *src, size_t bytes) {
  return group_copy(g, dst, src, bytes, 0);
}

/* ---- world set-up ---------------------------------------------------------------------- */

/* Roles of group g that make a worker a member, as a role bitmask. */
static uint32_t group_roles(vr_group_id_t g) {
  return g == VR_GROUP_WEIGHT_SYNC ? (1u << VR_ROLE_ACTOR) | (1u << VR_ROLE_ROLLOUT) : 1u << (unsigned)g;
}

/* A group runs on NCCL when every member is a GPU worker and the roles ask for nccl. */
static int group_uses_nccl(const vr_devmap_t *m, vr_group_id_t g) {
  uint32_t roles = group_roles(g);
  int any = 0;
  for (int r = 0; r < VR_ROLE_COUNT; r++) {
    if (!(roles & (1u << r)) || !m->roles[r].present) continue;
    if (m->roles[r].backend != VR_COMM_NCCL) return 0;
    for (int i = 0; i < m->roles[r].n_devices; i++)
      if (m->roles[r].devices[i].kind != VR_DEVICE_GPU) return 0;
    any = 1;
  }
  return any;
}

static void fail(vr_world_t *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(vr_world_t *w, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "verl-trainer: rank %d: %s\n", w->rank, msg);
  fflush(stderr);
}

int vr_world_init(vr_world_t *w, const vr_devmap_t *map, double timeout_s, vr_commprof_t *prof, const char *host) {
  memset(w, 0, sizeof *w);
  w->map = map;
  w->timeout_s = timeout_s > 0 ? timeout_s : 300;
  w->prof = prof;
  w->cuda_device = -1;
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited) {
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
      fprintf(stderr, "verl-trainer: MPI_Init failed. HINT: run under mpirun, or without a launcher on one node\n");
      return -1;
    }
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &w->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &w->size);
  w->mpi_world = (void *)MPI_COMM_WORLD;
  if (w->size != 1 + map->n_workers) {
    if (w->rank == 0)
      fail(w, "the world has %d ranks but %s needs %d (1 controller + %d workers, one per device). HINT: mpirun -np %d, "
              "or start verl-trainer without a launcher on one node and it runs mpirun itself",
           w->size, map->path, 1 + map->n_workers, map->n_workers, 1 + map->n_workers);
    return -2;
  }
  w->worker = w->rank - 1;

  /* this process's identity, gathered on the controller */
  vr_peer_t me;
  memset(&me, 0, sizeof me);
  me.rank = w->rank;
  me.pid = (int)getpid();
  if (host && *host) snprintf(me.host, sizeof me.host, "%s", host);
  else if (gethostname(me.host, sizeof me.host - 1) != 0) snprintf(me.host, sizeof me.host, "?");
  if (w->worker >= 0) {
    vr_device_str(&map->workers[w->worker], me.device, sizeof me.device);
    me.roles = map->worker_roles[w->worker];
  } else {
    snprintf(me.device, sizeof me.device, "controller");
  }
  w->peers = calloc((size_t)w->size, sizeof *w->peers);
  if (!w->peers) return -1;
  if (MPI_Gather(&me, (int)sizeof me, MPI_BYTE, w->peers, (int)sizeof me, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
    return -1;
  if (w->rank != 0) w->peers[w->rank] = me;

  /* workers of one node must share a host, workers of different nodes must not */
  int bad = 0;
  if (w->rank == 0) {
    for (int a = 1; a < w->size && !bad; a++)
      for (int b = a + 1; b < w->size && !bad; b++) {
        int same_node = map->workers[a - 1].node == map->workers[b - 1].node;
        int same_host = strcmp(w->peers[a].host, w->peers[b].host) == 0;
        if (same_node && !same_host) {
          fail(w, "workers %s (rank %d) and %s (rank %d) are on one node of the map but run on hosts %s and %s. "
                  "HINT: give mpirun a hostfile whose slots follow the map's nodes in order",
               w->peers[a].device, a, w->peers[b].device, b, w->peers[a].host, w->peers[b].host);
          bad = 1;
        } else if (!same_node && same_host && map->workers[a - 1].kind == VR_DEVICE_GPU) {
          fail(w, "workers %s (rank %d) and %s (rank %d) are on different nodes of the map but both run on host %s. "
                  "HINT: a hostfile with one host per node of the map",
               w->peers[a].device, a, w->peers[b].device, b, w->peers[a].host);
          bad = 1;
        }
      }
  }
  MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (bad) return -2;

  if (w->worker >= 0) {
    const vr_device_t *d = &map->workers[w->worker];
    if (d->kind == VR_DEVICE_GPU) w->cuda_device = d->index;
  }
  if (prof) {
    char label[128];
    snprintf(label, sizeof label, "rank %d %s", w->rank, me.device);
    vr_commprof_set_label(prof, label);
  }

  /* MPI communicators of every group (collective over the world: the controller too) */
  for (int g = 0; g < VR_GROUP_COUNT; g++) {
    uint32_t roles = group_roles((vr_group_id_t)g);
    int member = w->worker >= 0 && (map->worker_roles[w->worker] & roles);
    int present = 0;
    for (int r = 0; r < VR_ROLE_COUNT; r++)
      if ((roles & (1u << r)) && map->roles[r].present) present = 1;
    if (!present) continue;
    /* weight sync: actor workers first, so group rank 0 (the root) is the first actor worker */
    int key = w->worker;
    if (g == VR_GROUP_WEIGHT_SYNC && w->worker >= 0 && !(map->worker_roles[w->worker] & (1u << VR_ROLE_ACTOR)))
      key += map->n_workers;
    MPI_Comm c = MPI_COMM_NULL;
    if (MPI_Comm_split(MPI_COMM_WORLD, member ? g : MPI_UNDEFINED, key, &c) != MPI_SUCCESS) return -1;
    if (!member) continue;
    vr_group_t *grp = calloc(1, sizeof *grp);
    if (!grp) return -1;
    grp->id = (vr_group_id_t)g;
    grp->mpi = c;
    MPI_Comm_size(c, &grp->size);
    MPI_Comm_rank(c, &grp->rank);
    w->groups[g] = grp;
  }

#ifdef VR_HAVE_NCCL
  /* NCCL: one world over the GPU workers, split per NCCL group */
  int any_nccl = 0;
  for (int g = 0; g < VR_GROUP_COUNT; g++) any_nccl |= group_uses_nccl(map, (vr_group_id_t)g);
  if (any_nccl) {
    int gpu_worker = w->worker >= 0 && map->workers[w->worker].kind == VR_DEVICE_GPU;
    MPI_Comm gw = MPI_COMM_NULL;
    if (MPI_Comm_split(MPI_COMM_WORLD, gpu_worker ? 0 : MPI_UNDEFINED, w->rank, &gw) != MPI_SUCCESS) return -1;
    if (gpu_worker) {
      int gsize = 0, grank = 0;
      MPI_Comm_size(gw, &gsize);
      MPI_Comm_rank(gw, &grank);
      cudaError_t ce = cudaSetDevice(w->cuda_device);
      if (ce != cudaSuccess) {
        fail(w, "cudaSetDevice(%d) for %s: %s. HINT: the device map names a GPU this host does not have",
             w->cuda_device, me.device, cudaGetErrorString(ce));
        return -1;
      }
      ncclUniqueId id;
      if (grank == 0 && ncclGetUniqueId(&id) != ncclSuccess) {
        fail(w, "ncclGetUniqueId failed. HINT: NCCL_DEBUG=WARN names the cause (network interfaces, /dev/shm)");
        return -1;
      }
      MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, gw);
      ncclComm_t world_nccl;
      ncclResult_t nr = ncclCommInitRank(&world_nccl, gsize, id, grank);
      if (nr != ncclSuccess) {
        fail(w, "ncclCommInitRank (%d ranks): %s. HINT: NCCL_DEBUG=WARN names the cause; every GPU worker must "
                "reach the others (NCCL_SOCKET_IFNAME on several hosts)", gsize, ncclGetErrorString(nr));
        return -1;
      }
      for (int g = 0; g < VR_GROUP_COUNT; g++) {
        if (!group_uses_nccl(map, (vr_group_id_t)g)) continue;
        vr_group_t *grp = w->groups[g];
        ncclComm_t sub = NULL;
        int key = grp ? grp->rank : 0;
        nr = ncclCommSplit(world_nccl, grp ? g : NCCL_SPLIT_NOCOLOR, key, &sub, NULL);
        if (nr != ncclSuccess) {
          fail(w, "ncclCommSplit for %s: %s. HINT: NCCL_DEBUG=WARN names the cause", vr_group_name((vr_group_id_t)g),
               ncclGetErrorString(nr));
          return -1;
        }
        if (!grp) continue;
        grp->device = 1;
        grp->nccl = sub;
        if (cudaStreamCreateWithFlags(&grp->stream, cudaStreamNonBlocking) != cudaSuccess ||
            cudaEventCreate(&grp->ev0) != cudaSuccess || cudaEventCreate(&grp->ev1) != cudaSuccess) {
          fail(w, "cannot create the CUDA stream and events of group %s on %s", vr_group_name((vr_group_id_t)g),
               me.device);
          return -1;
        }
      }
      ncclCommDestroy(world_nccl);
      MPI_Comm_free(&gw);
    }
  }
#else
  for (int g = 0; g < VR_GROUP_COUNT; g++) {
    if (group_uses_nccl(map, (vr_group_id_t)g)) {
      if (w->rank == 0)
        fail(w, "group %s asks for nccl but this build has no NCCL. HINT: build with CUDA + NCCL, or set "
                "nccl_backend: mpi (host buffers) in the device map",
             vr_group_name((vr_group_id_t)g));
      return -2;
    }
  }
#endif
  return 0;
}

void vr_world_free(vr_world_t *w) {
  for (int g = 0; g < VR_GROUP_COUNT; g++) {
    vr_group_t *grp = w->groups[g];
    if (!grp) continue;
#ifdef VR_HAVE_NCCL
    if (grp->device) {
      if (grp->nccl) ncclCommDestroy(grp->nccl);
      cudaEventDestroy(grp->ev0);
      cudaEventDestroy(grp->ev1);
      cudaStreamDestroy(grp->stream);
    }
#endif
    MPI_Comm_free(&grp->mpi);
    free(grp);
    w->groups[g] = NULL;
  }
  free(w->peers);
  w->peers = NULL;
}
