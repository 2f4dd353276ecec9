/* vr_rlconfig.h: the RL sections of ppo.yaml (issue 22), with verl's key names and defaults
 * (verl v0.7.1 verl/trainer/config/ppo_trainer.yaml and its actor/critic/rollout/data parts):
 *
 *   data:              train_files, prompt_key (prompt), train_batch_size (prompts per step),
 *                      max_prompt_length, max_response_length, truncation (error|left|right|middle),
 *                      shuffle, seed
 *   actor_rollout_ref: model.path
 *                      actor.{ppo_mini_batch_size (prompts), ppo_micro_batch_size_per_gpu
 *                      (sequences), ppo_epochs, clip_ratio, clip_ratio_low, clip_ratio_high,
 *                      clip_ratio_c, entropy_coeff, use_kl_loss, kl_loss_coef, kl_loss_type,
 *                      loss_agg_mode, grad_clip, optim.{lr, weight_decay, zero1 (ours: ZeRO-1)},
 *                      checkpoint.async_save}
 *                      rollout.{n, temperature, top_p, top_k, max_num_seqs, max_num_batched_tokens,
 *                      kv_cache_bytes (ours: the K/V pool; vLLM sizes it from gpu_memory_utilization),
 *                      gemm_tune, gemm_cache (ours: vr_rollout_options_t's, the GEMM-choice cache)}
 *   critic:            model.path (default: the actor's), ppo_mini_batch_size,
 *                      ppo_micro_batch_size_per_gpu, ppo_epochs, cliprange_value, grad_clip,
 *                      loss_agg_mode, optim.{lr, weight_decay, zero1}
 *   algorithm:         adv_estimator (gae|grpo|rloo|reinforce_plus_plus), gamma, lam,
 *                      norm_adv_by_std_in_grpo, use_kl_in_reward, kl_penalty,
 *                      kl_ctrl.{type (fixed|adaptive), kl_coef, target_kl, horizon}
 * Every key of these sections is checked: an unknown one is an error naming it (with the
 * closest known key), as are values of the wrong type or out of range. Paths are relative to the
 * config file's directory. Threading: plain data. */
#ifndef VR_RLCONFIG_H
#define VR_RLCONFIG_H

#include <stdint.h>

#include "vr_algo.h"
#include "vr_yaml.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vr_trunc { VR_TRUNC_ERROR = 0, VR_TRUNC_LEFT, VR_TRUNC_RIGHT, VR_TRUNC_MIDDLE } vr_trunc_t;

typedef struct vr_optim_cfg {
  double lr, weight_decay, grad_clip;
  int ppo_mini_batch_size, ppo_micro_batch_size_per_gpu, ppo_epochs;
  int loss_agg_mode; /* vr_agg_mode_t */
  int zero1;         /* optim.zero1 (ours): AdamW moments sharded over the role's data-parallel group */
} vr_optim_cfg_t;

typedef struct vr_rlconfig {
  int present;                /* 1 when any RL section was given (the loop runs) */
  /* data */
  char train_files[1024];
  char prompt_key[64];
  int train_batch_size, max_prompt_length, max_response_length;
  int truncation;             /* vr_trunc_t */
  int shuffle;
  uint64_t seed;
  /* actor_rollout_ref */
  char model_path[1024];
  vr_optim_cfg_t actor;
  double clip_ratio, clip_ratio_low, clip_ratio_high, clip_ratio_c, entropy_coeff;
  int use_kl_loss;
  double kl_loss_coef;
  vr_kl_est_t kl_loss_type;
  int async_save;
  int rollout_n;
  double temperature, top_p;
  int top_k;
  int max_num_seqs, max_num_batched_tokens; /* 0 = the rollout engine's defaults */
  uint64_t kv_cache_bytes;                  /* 0 = default (64 MiB) */
  int gemm_tune;                            /* ours: 1 (default) tune the cuda decode GEMMs; 0 heuristic's first */
  char gemm_cache[1024];                    /* ours: the GEMM-choice cache file, "off", "" = the default */
  /* critic */
  char critic_model_path[1024]; /* "" = the actor's */
  vr_optim_cfg_t critic;
  double cliprange_value;
  /* algorithm */
  int adv_estimator;          /* vr_adv_est_t */
  double gamma, lam;
  int norm_adv_by_std_in_grpo, use_kl_in_reward;
  vr_kl_est_t kl_penalty;
  int kl_ctrl_adaptive;
  double kl_coef, target_kl, horizon;
} vr_rlconfig_t;

void vr_rlconfig_defaults(vr_rlconfig_t *c);
/* Parses section `name` (one of "data", "actor_rollout_ref", "critic", "algorithm") at node v
 * into c; errors go to y's diagnostics. base_dir resolves relative paths. Returns the number of
 * errors. */
int vr_rlconfig_section(vr_yaml_t *y, const char *name, const yaml_node_t *v, const char *base_dir, vr_rlconfig_t *c);
/* 1 when name is one of the sections above. */
int vr_rlconfig_is_section(const char *name);

#ifdef __cplusplus
}
#endif
#endif /* VR_RLCONFIG_H */
