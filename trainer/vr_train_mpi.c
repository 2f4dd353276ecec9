/* vr_train_mpi.c: the data-parallel comm of a cpu group over an MPI communicator (vr_train.h). */
#include <mpi.h>

#include "vr_comm.h"
#include "vr_train.h"

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
