/* vr_train_mpi.c: the data-parallel comm of the training engine over a bare MPI communicator
 * (vr_train_comm_mpi, vr_train.h) and over a role group of the world (vr_train_comm.h). */
#include <mpi.h>

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

void vr_train_comm_mpi(vr_train_comm_t *c, void *mpi_comm) {
  MPI_Comm comm = *(MPI_Comm *)mpi_comm;
  MPI_Comm_rank(comm, &c->rank);
  MPI_Comm_size(comm, &c->size);
  c->allreduce_sum = vr_train_mpi_allreduce;
  c->bcast = vr_train_mpi_bcast;
  c->ctx = mpi_comm;
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
}
