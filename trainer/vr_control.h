/* vr_control.h: the control plane between verl-trainer's controller (rank 0) and its workers.
 *
 * The controller sends a command to the members of a group and gathers one reply from each,
 * in verl's dispatch modes:
 *   VR_DISPATCH_ONE_TO_ALL  every member gets the same payload
 *   VR_DISPATCH_DP_SPLIT    the payload (n elements of elem_size bytes) is cut into contiguous
 *                           chunks, one per member in group-rank order (the first n % k members
 *                           get one element more); the replies' payloads are gathered back in
 *                           the same order (DP split / gather)
 * Messages travel over MPI point-to-point (tags VR_CTL_TAG_*): a fixed header (vr_ctl_msg_t)
 * then the payload bytes. Every wait of the controller is bounded by the world's timeout: a
 * worker that does not answer ends the run (vr_world_abort) with a message naming its rank,
 * roles, device, host, pid and the command it was given, never a silent hang.
 *
 * Workers record what they are doing in <run_dir>/rank-<R>.status (one line, replaced on every
 * command: "rank R pid P host H device D roles R1,R2 state S command NAME seq N"), so the
 * launcher can name the command a killed worker died in.
 *
 * Threading: the controller's thread or the worker's thread only. */
#ifndef VR_CONTROL_H
#define VR_CONTROL_H

#include <stddef.h>
#include <stdint.h>

#include "vr_comm.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VR_CTL_MAGIC 0x56524354u /* "VRCT" */

typedef enum vr_dispatch { VR_DISPATCH_ONE_TO_ALL = 0, VR_DISPATCH_DP_SPLIT = 1 } vr_dispatch_t;

typedef struct vr_ctl_msg {
  uint32_t magic;
  uint32_t cmd;       /* the caller's command id; 0 = stop (workers leave their loop) */
  uint32_t seq;       /* controller's sequence number, echoed in the reply */
  uint32_t group;     /* vr_group_id_t the command is for */
  int32_t status;     /* reply: 0 or a negative error */
  uint32_t reserved;
  uint64_t arg[4];    /* command arguments */
  double value[4];    /* reply values (e.g. seconds, bandwidth) */
  uint64_t payload_bytes;
} vr_ctl_msg_t;

/* One member's reply, as the controller gathers it. */
typedef struct vr_ctl_reply {
  int rank;
  int32_t status;
  double value[4];
} vr_ctl_reply_t;

typedef struct vr_ctl {
  vr_world_t *w;
  uint32_t seq;
  const char *const *cmd_names; /* names for messages, indexed by cmd (may be NULL) */
  int n_cmd_names;
  char run_dir[1024];           /* status files; "" = none */
  /* controller: last command sent to each rank */
  uint32_t *last_cmd;
  uint32_t *last_seq;
} vr_ctl_t;

/* run_dir: where workers write their status files ("" or NULL: nowhere). */
int vr_ctl_init(vr_ctl_t *c, vr_world_t *w, const char *run_dir, const char *const *cmd_names, int n_cmd_names);
void vr_ctl_free(vr_ctl_t *c);

/* Members of group g in group-rank order as world ranks; returns the count (0: nobody). */
int vr_ctl_members(const vr_world_t *w, vr_group_id_t g, int *ranks, int cap);

/* Controller: sends cmd to every member of g and waits for all replies. ONE_TO_ALL: payload
 * is sent whole; DP_SPLIT: n_elems elements of elem_size split as above. Reply payloads are
 * concatenated into out (out_cap bytes; *out_len gets the total); replies[] gets one entry per
 * member (cap max_replies). Returns the number of members, or aborts the run on a timeout or a
 * malformed reply. */
int vr_ctl_dispatch(vr_ctl_t *c, vr_group_id_t g, vr_dispatch_t mode, uint32_t cmd, const uint64_t arg[4],
                    const void *payload, size_t elem_size, size_t n_elems, void *out, size_t out_cap,
                    size_t *out_len, vr_ctl_reply_t *replies, int max_replies);
/* Controller: tells every worker to leave its loop (and waits for their acknowledgement). */
void vr_ctl_stop(vr_ctl_t *c);

/* Worker: waits for the next command; *payload (malloc'd, caller frees; NULL when empty). */
int vr_ctl_recv(vr_ctl_t *c, vr_ctl_msg_t *msg, void **payload);
/* Worker: answers msg with status, up to 4 values and a payload. */
int vr_ctl_reply(vr_ctl_t *c, const vr_ctl_msg_t *msg, int32_t status, const double value[4], const void *payload,
                 size_t bytes);
/* Worker: records state ("starting", "running", "idle", "done") in the status file. */
void vr_ctl_status(vr_ctl_t *c, const char *state, const vr_ctl_msg_t *msg);

/* "actor,rollout" for a role mask. */
void vr_roles_str(uint32_t roles, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* VR_CONTROL_H */
