/* vr_rlwork.h: the RL loop's worker side (issue 22) and the messages between the controller and
 * the role groups (vr_control.h carries them).
 *
 * A worker holds an engine per role it serves (vr_devmap: roles sharing a device share the
 * process): actor (vr_train on the causal LM, data parallel over the actor group), critic
 * (vr_train on the value head, DP over the critic group), reference (vr_train forward only) and
 * rollout (vr_rollout on the same checkpoint). Every command that splits work gives member k of
 * a group of K the contiguous slice [k*n/K, (k+1)*n/K) of the n sequences / prompts, and replies
 * with that slice's results in order, so the controller's gather (replies concatenated in
 * group-rank order) is the whole batch. Generation and log-prob / value passes do not depend on K
 * (cpu: bit-identical); an update's gradients are all-reduced over the group, so they equal one
 * rank's up to the order of that sum.
 *
 * ---- the batch on the wire (vr_rlw_*) -----------------------------------------------------------
 * header vr_rlw_hdr_t, then u32 cu[n+1] (sequence q = prompt ++ response is ids[cu[q], cu[q+1])),
 * u32 resp[n] (where q's response starts, relative to cu[q]; >= 1, < the sequence length),
 * i32 ids[T], then for each bit set in flags, in bit order, one f32 array of T entries (values
 * at the response tokens' rows; 0 elsewhere), then the command's parameters (vr_rlw_update_t).
 *
 * Threading: the worker's thread only. */
#ifndef VR_RLWORK_H
#define VR_RLWORK_H

#include <stddef.h>
#include <stdint.h>

#include "vr_comm.h"
#include "vr_control.h"
#include "vr_rlstats.h"
#include "vr_tconfig.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Commands (vr_ctl_msg_t.cmd; 0 = stop). */
enum {
  VR_RLC_STOP = 0,
  VR_RLC_GEN = 1,          /* rollout: payload vr_rlw_gen_t + cu + ids + seeds; reply vr_rlw_gen_reply */
  VR_RLC_LOGP = 2,         /* actor / reference: batch; reply f32 logp (T_slice) */
  VR_RLC_VALUES = 3,       /* critic: batch; reply f32 values (T_slice) */
  VR_RLC_UPDATE_ACTOR = 4, /* actor: batch (OLD, ADV[, REF]) + vr_rlw_update_t; reply f64 stats */
  VR_RLC_UPDATE_CRITIC = 5,/* critic: batch (VALUES, RETURNS) + vr_rlw_update_t; reply f64 stats */
  VR_RLC_SYNC = 6,         /* weight sync group: the actor's parameters to the rollout engines */
  VR_RLC_SAVE = 7,         /* actor / critic: payload = checkpoint directory (being written) */
  VR_RLC_LOAD = 8,         /* actor / critic: payload = checkpoint directory */
  VR_RLC_COUNT
};
extern const char *const vr_rlc_names[VR_RLC_COUNT];

enum { VR_RLW_OLD = 1, VR_RLW_REF = 2, VR_RLW_ADV = 4, VR_RLW_VALUES = 8, VR_RLW_RETURNS = 16, VR_RLW_NARR = 5 };

typedef struct vr_rlw_hdr {
  uint32_t magic; /* VR_RLW_MAGIC */
  uint32_t n, T, flags;
} vr_rlw_hdr_t;
#define VR_RLW_MAGIC 0x57524c56u /* "VLRW" */

/* The controller's view of a batch (arrays it owns). */
typedef struct vr_rlw_batch {
  uint32_t n, T;
  uint32_t *cu, *resp;
  int32_t *ids;
  float *arr[VR_RLW_NARR]; /* by bit: OLD, REF, ADV, VALUES, RETURNS; NULL when absent */
} vr_rlw_batch_t;

/* Parameters of an update (verl's names in the comments). */
typedef struct vr_rlw_update {
  double lr, weight_decay, grad_clip;
  double clip_low, clip_high, clip_c;        /* actor.clip_ratio_low/high/c */
  double entropy_coeff, kl_loss_coef;        /* actor.entropy_coeff, kl_loss_coef (use_kl_loss) */
  double cliprange_value;                    /* critic.cliprange_value */
  double temperature;                        /* rollout.temperature (log-probs at it) */
  double horizon;                            /* seq-mean-token-sum-norm: max_response_length */
  int32_t agg_mode, use_kl_loss, kl_type, kl_straight;
  uint32_t mini_batch;                       /* sequences per mini-batch (ppo_mini_batch_size * n) */
  uint32_t micro_batch;                      /* sequences per micro-batch per rank */
  uint32_t epochs;                           /* ppo_epochs */
  uint32_t pad;
} vr_rlw_update_t;

/* Stats an update replies: VR_ST_COUNT doubles per member (vr_rlstats.h: verl's metric sums). */

typedef struct vr_rlw_gen {
  uint32_t magic, n_prompts, T, n, max_new_tokens, n_stop_unused;
  float temperature, top_p;
  int32_t top_k, pad;
} vr_rlw_gen_t;

/* Serialises b (+ the update parameters when up != NULL) into a malloc'd buffer. */
void *vr_rlw_pack(const vr_rlw_batch_t *b, uint32_t flags, const vr_rlw_update_t *up, size_t *bytes);

/* The slice [lo, hi) of n items for member k of K. */
void vr_rlw_slice(uint32_t n, int k, int K, uint32_t *lo, uint32_t *hi);

typedef struct vr_rlworker vr_rlworker_t;

/* Builds this worker's engines from the config (model paths, rollout sizes). 0 or a negative
 * vr_status_t after a message naming the role and the problem. */
int vr_rlworker_init(vr_world_t *w, const vr_tconfig_t *cfg, vr_rlworker_t **out);
void vr_rlworker_free(vr_rlworker_t *wk);
/* Serves commands until stop. Returns 0, or aborts the run on a failure it cannot report. */
int vr_rlworker_loop(vr_rlworker_t *wk, vr_ctl_t *c);

#ifdef __cplusplus
}
#endif
#endif /* VR_RLWORK_H */
