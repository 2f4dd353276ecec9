/* vr_rlstats.h: the actor / critic update metrics exactly as verl v0.7.1 logs them
 * (verl/workers/actor/dp_actor.py update_policy, verl/workers/critic/dp_critic.py update_critic,
 * DataProto.concat's metrics merge over the data-parallel workers, reduce_metrics in
 * verl/trainer/ppo/ray_trainer.py):
 *
 *   per micro-batch (its own tokens; agg_loss without global_batch_info, i.e. the micro-batch's own
 *   token / sequence counts):
 *     pg_loss_m  = agg_loss(pg_losses)          kl_loss_m = agg_loss(kld)
 *     entropy_m  = agg_loss(entropy)            vf_loss_m = 0.5 * agg_loss(max(vf1, vf2))
 *     pg_clipfrac_m, pg_clipfrac_lower_m, ppo_kl_m, vf_clipfrac_m, vpred_mean_m: masked means
 *   per worker, over epochs x mini-batches x micro-batches:
 *     actor/pg_loss, actor/kl_loss, critic/vf_loss   = sum of loss_m * loss_scale_factor
 *                                                      (1 / gradient_accumulation: a float, summed)
 *     actor/pg_clipfrac, ppo_kl, pg_clipfrac_lower,   = append_to_dict: one value per micro-batch
 *     actor/entropy, critic/vf_clipfrac, vpred_mean
 *     actor/grad_norm, critic/grad_norm               = one value per optimizer step
 *   over the workers (concat makes a list per key, reduce_metrics takes np.mean): the summed losses
 *   are averaged over the workers, the per-micro-batch and per-step values averaged over all of
 *   them (every worker has the same count in verl; here, where slices may differ, the flat mean).
 *
 * gradient_accumulation = ppo_mini_batch_size (per worker) // ppo_micro_batch_size_per_gpu, as
 * verl computes it: here the worker's slice of the mini-batch // micro_batch, at least 1.
 *
 * The training gradient itself is not this: the loop weights each token over the whole mini-batch
 * (vr_agg_weights, verl's global_batch_info); only the logged values follow dp_actor.
 * Pure functions; no state. */
#ifndef VR_RLSTATS_H
#define VR_RLSTATS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What one update replies, per member (the wire: VR_ST_COUNT doubles). Sums as the comments say. */
enum {
  VR_ST_PG_LOSS,         /* sum of pg_loss_m * scale */
  VR_ST_CLIPFRAC,        /* sum of pg_clipfrac_m */
  VR_ST_PPO_KL,          /* sum of ppo_kl_m */
  VR_ST_CLIPFRAC_LOWER,  /* sum of pg_clipfrac_lower_m */
  VR_ST_ENTROPY,         /* sum of entropy_m */
  VR_ST_KL_LOSS,         /* sum of kl_loss_m * scale */
  VR_ST_MICRO,           /* micro-batches */
  VR_ST_GRAD_NORM,       /* sum of the optimizer steps' norms */
  VR_ST_UPDATES,         /* optimizer steps */
  VR_ST_VF_LOSS,         /* sum of vf_loss_m * scale */
  VR_ST_VF_CLIPFRAC,     /* sum of vf_clipfrac_m */
  VR_ST_VPRED,           /* sum of vpred_mean_m */
  VR_ST_COUNT
};

/* One micro-batch's token sums, filled by the update loop: w[t] are the micro-batch's own agg_loss
 * weights (vr_agg_weights over the micro-batch's responses). */
typedef struct vr_rls_micro {
  double n_tok;                    /* response tokens */
  double wpg, went, wkl;           /* actor: sum w * pg_loss, w * entropy, w * kld */
  double clip, clip_lower, neg_kl; /* actor: clipped tokens (upper, lower), sum of -(log ratio) */
  double wvf, vclip, vpred;        /* critic: sum w * max(vf1, vf2), clipped tokens, sum of values */
} vr_rls_micro_t;

/* Adds one micro-batch to a member's st (VR_ST_COUNT). scale = 1 / gradient_accumulation. A
 * micro-batch without tokens adds masked means of 0, as torch's masked_mean (sum / (count + 1e-8))
 * would give 0 for it. */
void vr_rls_add_micro(double *st, const vr_rls_micro_t *m, double scale);

/* The logged values: members[n * VR_ST_COUNT] -> out (VR_ST_COUNT), out[VR_ST_X] the metric of X
 * (the loss sums averaged over members that ran at least one micro-batch, the per-micro-batch
 * values over all micro-batches, grad_norm over the optimizer steps of member 0: every member
 * applies the same all-reduced step); out[VR_ST_MICRO] / [VR_ST_UPDATES] the totals. */
void vr_rls_reduce(const double *members, int n, double *out);

#ifdef __cplusplus
}
#endif
#endif /* VR_RLSTATS_H */
