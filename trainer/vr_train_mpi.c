/* vr_train_mpi.c: the data-parallel comm of the training engine over a bare MPI communicator
 * (vr_train_comm_mpi, vr_train.h) and over a role group of the world (vr_train_comm.h). */
#include <mpi.h>
#include <stdlib.h>

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

/* Non-blocking all-reduce: req is a malloc'd MPI_Request (n <= 2^30: the engine's buckets). */
static int vr_train_mpi_iallreduce(void *ctx, float *buf, size_t n, void **req) {
  MPI_Comm comm = *(MPI_Comm *)ctx;
  *req = NULL;
  if (n > (size_t)1 << 30) return VR_ERR_INVAL;
  MPI_Request *r = malloc(sizeof *r);
  if (!r) return VR_ERR_NOMEM;
  if (MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, comm, r) != MPI_SUCCESS) {
    free(r);
    return VR_COMM_EFAIL;
  }
  *req = r;
  return 0;
}

static int vr_train_mpi_wait(void *ctx, void *req) {
  (void)ctx;
  int rc = MPI_Wait(req, MPI_STATUS_IGNORE) == MPI_SUCCESS ? 0 : VR_COMM_EFAIL;
  free(req);
  return rc;
}

static int vr_train_mpi_test(void *ctx, void *req, int *done) {
  (void)ctx;
  return MPI_Test(req, done, MPI_STATUS_IGNORE) == MPI_SUCCESS ? 0 : VR_COMM_EFAIL;
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
}
