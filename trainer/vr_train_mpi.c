/* vr_train_mpi.c: the data-parallel comm of the training engine over a bare MPI communicator
 * (vr_train_comm_mpi, vr_train.h) and over a role group of the world (vr_train_comm.h). */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"

#include "vr_comm.h"
#include "vr_train.h"
#include "vr_train_comm.h"

static int vr_train_mpi_allreduce(void *ctx, float *buf, size_t n) {
  MPI_Comm comm = *(MPI_Comm *)ctx;
  while (n > 0) { /* MPI counts are int */
    int k = n > (size_t)1 << 30 ? 1 << 30 : (int)n;
    if (MPI_Allreduce(MPI_IN_PLACE, buf, k, MPI_FLOAT, MPI_SUM, comm) != MPI_SUCCESS) return VR_COMM_EFAIL;
    buf += k;
    n -= (size_t)k;
  }
  return 0;
}

static int vr_train_mpi_bcast(void *ctx, void *buf, size_t bytes, int root) {
  MPI_Comm comm = *(MPI_Comm *)ctx;
  char *p = buf;
  while (bytes > 0) {
    int k = bytes > (size_t)1 << 30 ? 1 << 30 : (int)bytes;
    if (MPI_Bcast(p, k, MPI_BYTE, root, comm) != MPI_SUCCESS) return VR_COMM_EFAIL;
    p += k;
    bytes -= (size_t)k;
  }
  return 0;
}

/* A started non-blocking collective (n <= 2^30: the engine's buckets). A reduce-scatter in place
 * leaves this rank's sums at buf[0, cnt); wait moves them to buf + to, where the caller wants them. */
typedef struct vr_train_mpi_req {
  MPI_Request r;
  float *buf;
  size_t to, cnt;
  int counts[]; /* reduce-scatter: the ranks' piece sizes, alive until completion */
} vr_train_mpi_req_t;

static int vr_train_mpi_iallreduce(void *ctx, float *buf, size_t n, void **req) {
  MPI_Comm comm = *(MPI_Comm *)ctx;
  *req = NULL;
  if (n > (size_t)1 << 30) return VR_ERR_INVAL;
  vr_train_mpi_req_t *r = calloc(1, sizeof *r);
  if (!r) return VR_ERR_NOMEM;
  if (MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, comm, &r->r) != MPI_SUCCESS) {
    free(r);
    return VR_COMM_EFAIL;
  }
  *req = r;
  return 0;
}

/* counts (size) from off (size + 1); the rank's target offset and count. */
static vr_train_mpi_req_t *vr_train_mpi_rs_req(MPI_Comm comm, float *buf, size_t n, const size_t *off) {
  int rank, size;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (n > (size_t)1 << 30 || off[0] != 0 || off[size] != n) return NULL;
  vr_train_mpi_req_t *r = calloc(1, sizeof *r + (size_t)size * sizeof(int));
  if (!r) return NULL;
  for (int q = 0; q < size; q++) r->counts[q] = (int)(off[q + 1] - off[q]);
  r->buf = buf, r->to = off[rank], r->cnt = off[rank + 1] - off[rank];
  return r;
}

static void vr_train_mpi_rs_finish(vr_train_mpi_req_t *r) {
  if (r->cnt && r->to) memmove(r->buf + r->to, r->buf, r->cnt * sizeof *r->buf);
}

static int vr_train_mpi_reduce_scatter(void *ctx, float *buf, size_t n, const size_t *off) {
  MPI_Comm comm = *(MPI_Comm *)ctx;
  vr_train_mpi_req_t *r = vr_train_mpi_rs_req(comm, buf, n, off);
  if (!r) return VR_ERR_INVAL;
  int rc = MPI_Reduce_scatter(MPI_IN_PLACE, buf, r->counts, MPI_FLOAT, MPI_SUM, comm) == MPI_SUCCESS ? 0 : VR_COMM_EFAIL;
  if (rc == 0) vr_train_mpi_rs_finish(r);
  free(r);
  return rc;
}

static int vr_train_mpi_ireduce_scatter(void *ctx, float *buf, size_t n, const size_t *off, void **req) {
  MPI_Comm comm = *(MPI_Comm *)ctx;
  *req = NULL;
  vr_train_mpi_req_t *r = vr_train_mpi_rs_req(comm, buf, n, off);
  if (!r) return VR_ERR_INVAL;
  if (MPI_Ireduce_scatter(MPI_IN_PLACE, buf, r->counts, MPI_FLOAT, MPI_SUM, comm, &r->r) != MPI_SUCCESS) {
    free(r);
    return VR_COMM_EFAIL;
  }
  *req = r;
  return 0;
}

static int vr_train_mpi_wait(void *ctx, void *req) {
  (void)ctx;
  vr_train_mpi_req_t *r = req;
  int rc = MPI_Wait(&r->r, MPI_STATUS_IGNORE) == MPI_SUCCESS ? 0 : VR_COMM_EFAIL;
  if (rc == 0) vr_train_mpi_rs_finish(r);
  free(r);
  return rc;
}

static int vr_train_mpi_test(void *ctx, void *req, int *done) {
  (void)ctx;
  return MPI_Test(&((vr_train_mpi_req_t *)req)->r, done, MPI_STATUS_IGNORE) == MPI_SUCCESS ? 0 : VR_COMM_EFAIL;
}

void vr_train_comm_mpi(vr_train_comm_t *c, void *mpi_comm) {
  MPI_Comm comm = *(MPI_Comm *)mpi_comm;
  MPI_Comm_rank(comm, &c->rank);
  MPI_Comm_size(comm, &c->size);
  c->allreduce_sum = vr_train_mpi_allreduce;
  c->bcast = vr_train_mpi_bcast;
  c->ctx = mpi_comm;
  c->iallreduce_sum = vr_train_mpi_iallreduce;
  c->wait = vr_train_mpi_wait;
  c->test = vr_train_mpi_test;
  c->reduce_scatter_sum = vr_train_mpi_reduce_scatter;
  c->ireduce_scatter_sum = vr_train_mpi_ireduce_scatter;
}

/* ---- over a role group of the world (vr_train_comm.h) ---------------------------------- */

static int vr_train_group_allreduce(void *ctx, float *buf, size_t n) {
  vr_train_group_ref_t *r = ctx;
  return vr_group_allreduce_f32(r->world, r->group, buf, n);
}

static int vr_train_group_bcast(void *ctx, void *buf, size_t bytes, int root) {
  vr_train_group_ref_t *r = ctx;
  return vr_group_bcast(r->world, r->group, buf, bytes, root);
}

void vr_train_comm_group(vr_train_comm_t *c, vr_train_group_ref_t *ref, vr_world_t *w, vr_group_t *g) {
  ref->world = w;
  ref->group = g;
  c->rank = vr_group_rank(g);
  c->size = vr_group_size(g);
  c->allreduce_sum = vr_train_group_allreduce;
  c->bcast = vr_train_group_bcast;
  c->ctx = ref;
  c->iallreduce_sum = NULL; /* vr_comm's collectives are blocking: buckets reduce one by one */
  c->wait = NULL;
  c->test = NULL;
  c->reduce_scatter_sum = NULL; /* ZeRO-1 over a role group all-reduces */
  c->ireduce_scatter_sum = NULL;
}
