/* vr_tconfig.h: verl-trainer's run configuration (ppo.yaml).
 *
 * The file is a verl-style config: top-level sections as verl names them. This build reads
 * `trainer:` (below); the other verl sections (data, actor_rollout_ref, critic, reward_model,
 * reward, algorithm, custom_reward_function, ray_kwargs, global_profiler) are accepted and
 * reported as not used yet, so a verl config can be brought over as it is. Any other top-level
 * key is an error with the closest known name.
 *
 *   trainer:
 *     device_map: device_map.yaml     # relative to this file; --device-map overrides
 *     total_training_steps: 20        # steps of the run (--steps overrides)
 *     comm_timeout_s: 300             # bound on every collective and control wait
 *     reward_timeout_s: 120           # bound on one reward request (verl-reward-server's answer)
 *                                     # and on waiting for the server (at start, after a restart)
 *     comm_check_allreduce_bytes: 67108864   # per role group, per step (--comm-check)
 *     comm_check_sync_bytes: 268435456       # actor -> rollout broadcast, per step
 *     metrics_file: metrics.jsonl     # JSON lines, one per step ("" = none)
 *     run_dir: ""                     # workers' status files ("" = a fresh $TMPDIR directory)
 *     nnodes: 1                       # verl's; when given, checked against the device map
 *     n_gpus_per_node: 8              # verl's; when given, checked against the device map
 *   the RL loop's (verl's names and defaults; docs/operations.md "RL loop"):
 *     total_epochs: 1                 # passes over data.train_files (total_training_steps, when
 *                                     # given, wins; else epochs * batches per epoch)
 *     save_freq: -1                   # a checkpoint every N steps and at the last (-1: none; SIGTERM saves)
 *     default_local_dir: checkpoints  # where global_step_N/ go (relative to the config's directory)
 *     resume_mode: auto               # auto | disable | resume_path (+ resume_from_path)
 *     resume_from_path: ""            # a global_step_N directory for resume_mode resume_path
 *     max_actor_ckpt_to_keep: null    # keep the newest N checkpoints (null: all)
 *     max_critic_ckpt_to_keep: null   # (checkpoints hold both: the smaller of the two wins)
 *     critic_warmup: 0                # the actor updates from step critic_warmup on (verl: warmup <= step)
 *     project_name / experiment_name / logger / test_freq / val_before_train / balance_batch:
 *                                     verl's, accepted, not used
 * The RL sections data / actor_rollout_ref / critic / algorithm are vr_rlconfig.h's.
 *
 * Errors are "path:line:col: error: ... HINT: ..." lines (vr_text.h diagnostics). */
#ifndef VR_TCONFIG_H
#define VR_TCONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "vr_rlconfig.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vr_tconfig {
  char path[1024];
  char device_map[1024];     /* resolved against the config's directory; "" = not given */
  int total_training_steps;  /* default 1 */
  double comm_timeout_s;     /* default 300 */
  double reward_timeout_s;   /* default 120 */
  uint64_t allreduce_bytes;  /* default 64 MiB */
  uint64_t sync_bytes;       /* default 256 MiB */
  char metrics_file[1024];   /* default "" */
  char run_dir[1024];        /* default "" */
  int nnodes, n_gpus_per_node; /* 0 when absent */
  char unused[512];          /* verl sections / keys read but not used, comma-separated */
  /* the RL loop (trainer.*) */
  int total_epochs;          /* default 1 */
  int steps_given;           /* total_training_steps was in the file */
  int save_freq;             /* -1 default */
  char default_local_dir[1024]; /* default "<config dir>/checkpoints" */
  int resume_mode;           /* 0 auto, 1 disable, 2 resume_path */
  char resume_from_path[1024];
  int max_ckpt_to_keep;      /* 0 = all */
  int critic_warmup;
  vr_rlconfig_t rl;
} vr_tconfig_t;

void vr_tconfig_defaults(vr_tconfig_t *c);
/* Parses path. Returns 0, or -2 with the problems in err. */
int vr_tconfig_load(const char *path, vr_tconfig_t *c, char *err, size_t cap);

#ifdef __cplusplus
}
#endif
#endif /* VR_TCONFIG_H */
