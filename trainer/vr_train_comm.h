/* vr_train_comm.h: the training engine's data-parallel comm (vr_train_comm_t) over a role group
 * of the trainer's world (vr_comm.h): the gradient all-reduce and the ZeRO-1 broadcasts run as
 * that group's collectives (MPI on cpu groups, NCCL on GPU groups: then the engine's buffers must
 * be device buffers, i.e. a device backend), bounded by the world's timeout and recorded by the
 * communication profile. vr_train_comm_mpi (vr_train.h) is the same over a bare MPI communicator.
 *
 * ref must outlive c (it is c->ctx); w and g must outlive ref. */
#ifndef VR_TRAIN_COMM_H
#define VR_TRAIN_COMM_H

#include "vr_comm.h"
#include "vr_train.h"

typedef struct vr_train_group_ref {
  vr_world_t *world;
  vr_group_t *group;
} vr_train_group_ref_t;

/* Fills c for group g (this process must be a member: g non-NULL). */
void vr_train_comm_group(vr_train_comm_t *c, vr_train_group_ref_t *ref, vr_world_t *w, vr_group_t *g);

#endif /* VR_TRAIN_COMM_H */
