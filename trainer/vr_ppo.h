/* vr_ppo.h: the RL loop's controller (issue 22): PPO / GRPO / RLOO / REINFORCE++ steps in verl's
 * order (verl v0.7.1 ray_trainer.py RayPPOTrainer.fit), each phase timed under verl's name:
 *
 *   gen            rollout group: n responses per prompt (vr_rlwork.h VR_RLC_GEN)
 *   reward         verl-reward-server (vr_rlreward.h): submitted right after gen, collected after
 *                  the values, so scoring overlaps old_log_prob / ref / values; the time is the
 *                  submit plus what was left to wait
 *   old_log_prob   actor group: log-probs of the responses at rollout.temperature
 *   ref            reference group (use_kl_loss or use_kl_in_reward)
 *   values         critic group (adv_estimator gae)
 *   adv            controller: KL in reward (apply_kl_penalty + kl_ctrl), the estimator
 *   update_critic  critic group: ppo_epochs x mini-batches of clipped value loss
 *   update_actor   actor group (from step trainer.critic_warmup on): dual-clip PPO loss,
 *                  entropy bonus, KL loss
 *   update_weights weight-sync group: actor -> rollout parameters
 *   step           the whole step
 * then the metrics (verl's names: compute_data_metrics, the actor's / critic's update metrics,
 * timing_s/..., perf/...) to the JSON lines file and a console line with a progress bar
 * (vr_rlmetrics.h), and a checkpoint every trainer.save_freq steps and at the last step when
 * save_freq > 0 (verl), and on SIGTERM (vr_ckpt.h).
 *
 * Update metrics over several mini-batches / epochs: losses, entropy and grad_norm are the mean
 * over the optimizer steps; clip fractions and ppo_kl are token fractions / means over every
 * token the update saw (verl averages per micro-batch: equal when micro-batches hold equal
 * token counts).
 *
 * Threading: the controller's thread (rank 0). */
#ifndef VR_PPO_H
#define VR_PPO_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "vr_comm.h"
#include "vr_control.h"
#include "vr_tconfig.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vr_ppo_args {
  const char *metrics;               /* overrides trainer.metrics_file (NULL: the config's) */
  int steps;                         /* overrides the step count (0: the config's) */
  volatile sig_atomic_t *stop;       /* set by SIGTERM/SIGINT: save and leave after the step */
  int64_t crash_in_save;             /* tests: _exit(9) inside the save of this step (0 = off) */
  int64_t hold_save;                 /* tests: the workers write this step's checkpoint files only once
                                      * global_step_N.tmp/{actor,critic}/.release exists (0 = off) */
} vr_ppo_args_t;

/* Checks the RL settings against the device map before anything starts (a critic for gae, a
 * reference for KL, a reward shared_mem_name, batch sizes that divide, paths set). 0, or -2 with
 * the problems ("path: error: ... HINT: ...") in err. */
int vr_ppo_check(const vr_tconfig_t *cfg, const vr_devmap_t *map, char *err, size_t cap);

/* Runs the loop on the controller. 0, 1 (a run-time failure, logged) or 2 (bad data / config). */
int vr_ppo_run(vr_world_t *w, vr_ctl_t *c, const vr_tconfig_t *cfg, const vr_ppo_args_t *a);

#ifdef __cplusplus
}
#endif
#endif /* VR_PPO_H */
