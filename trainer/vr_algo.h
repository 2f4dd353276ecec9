/* vr_algo.h: the RL formulas of verl (issue 22), transcribed from verl v0.7.1
 * verl/trainer/ppo/core_algos.py (and masked_whiten / masked_var of verl/utils/torch_functional.py,
 * apply_kl_penalty of verl/trainer/ppo/ray_trainer.py). Golden tests: tests/trainer/test_algo.c
 * against tests/trainer/algo_ref.py (a stdlib transcription of those functions).
 *
 * ---- Data layout ---------------------------------------------------------------------------
 * Responses are packed: response r owns tokens [cu[r], cu[r+1]) of every per-token array (only
 * response tokens; verl's response_mask is 1 on exactly these). verl's padded (bs, L) tensors
 * with mask 0 after each response give the same numbers: every verl loop that runs over padding
 * carries the state of the last masked token through it unchanged (GAE, REINFORCE++), so running
 * over the real tokens only is equivalent. A response may be empty (cu[r] == cu[r+1]).
 * Group ids (GRPO / RLOO's `index`, verl's uid): group[r] is any integer; responses with the same
 * id form a group. Arithmetic is double throughout (verl's is fp32 torch; tests hold 1e-5).
 *
 * Threading: pure functions, no state (the KL controller is a caller-owned struct). */
#ifndef VR_ALGO_H
#define VR_ALGO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- advantage estimators (algorithm.adv_estimator) ----------------------------------------- */
typedef enum vr_adv_est { VR_ADV_GAE = 0, VR_ADV_GRPO, VR_ADV_RLOO, VR_ADV_REINFORCE_PP } vr_adv_est_t;
/* "gae", "grpo", "rloo", "reinforce_plus_plus"; -1 for anything else. */
int vr_adv_est_parse(const char *s);
const char *vr_adv_est_name(vr_adv_est_t e);
/* 1 when the estimator needs a critic (gae). */
int vr_adv_est_needs_critic(vr_adv_est_t e);

/* masked_whiten over every token of x (n >= 2; unbiased variance, as verl): x <- (x - mean) *
 * rsqrt(var + 1e-8). n < 2 is VR_ERR_INVAL (verl raises ValueError: "sum of the mask is one"). */
int vr_algo_whiten(double *x, size_t n);

/* compute_gae_advantage_return: rewards and values per token; adv (whitened over all tokens of
 * the batch) and ret = adv_before_whitening + values. 0 or VR_ERR_INVAL (fewer than 2 tokens). */
int vr_algo_gae(const double *rewards, const double *values, const uint32_t *cu, uint32_t n_resp, double gamma,
                double lam, double *adv, double *ret);

/* compute_grpo_outcome_advantage: score[r] = sum of response r's token rewards (given here per
 * response); adv[r] = (score - mean_g) / (std_g + eps) with norm_by_std (torch.std: unbiased),
 * score - mean_g without; a group of one gets mean 0, std 1. Per response; the caller spreads it
 * over the response's tokens (verl: scores.unsqueeze(-1) * response_mask; returns = advantages). */
void vr_algo_grpo(const double *score, const int64_t *group, uint32_t n_resp, double eps, int norm_by_std,
                  double *adv);
/* compute_rloo_outcome_advantage: adv = score * k/(k-1) - mean_g * k/(k-1) for a group of k > 1,
 * score itself for k = 1. Per response. */
void vr_algo_rloo(const double *score, const int64_t *group, uint32_t n_resp, double *adv);
/* compute_reinforce_plus_plus_outcome_advantage: ret[t] = r[t] + gamma * ret[t+1] within a
 * response; adv = masked_whiten(ret) over all tokens. 0 or VR_ERR_INVAL (< 2 tokens). */
int vr_algo_reinforce_pp(const double *rewards, const uint32_t *cu, uint32_t n_resp, double gamma, double *adv,
                         double *ret);

/* ---- KL estimators (algorithm.kl_penalty, actor.kl_loss_type) ------------------------------- */
typedef enum vr_kl_type { VR_KL_K1 = 0, VR_KL_ABS, VR_KL_K2, VR_KL_K3 } vr_kl_type_t;
typedef struct vr_kl_est {
  vr_kl_type_t type;
  int straight_through; /* "k1+"/"k3+"/...: value of the estimator, gradient of k2 (verl's "+") */
} vr_kl_est_t;
/* "kl"/"k1", "abs", "mse"/"k2", "low_var_kl"/"k3", each optionally with "+". 0 or -1. */
int vr_kl_parse(const char *s, vr_kl_est_t *out);
/* kl_penalty(logprob, ref_logprob): value and d value / d logprob (grad may be NULL).
 *   k1: lp - ref;  abs: |lp - ref|;  k2: 0.5 (lp - ref)^2;
 *   k3: kl = clamp(ref - lp, -20, 20); clamp(exp(kl) - kl - 1, -10, 10)
 * Gradients as torch's autograd gives them (clamp passes gradient on its closed interval, abs
 * has gradient 0 at 0); straight-through: gradient (lp - ref). */
double vr_kl_value(const vr_kl_est_t *k, double lp, double ref, double *grad);

/* ---- loss aggregation (actor.loss_agg_mode) --------------------------------------------------- */
typedef enum vr_agg_mode { VR_AGG_TOKEN_MEAN = 0, VR_AGG_SEQ_MEAN_TOKEN_SUM, VR_AGG_SEQ_MEAN_TOKEN_MEAN,
                           VR_AGG_SEQ_MEAN_TOKEN_SUM_NORM } vr_agg_mode_t;
/* "token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"; -1 else. */
int vr_agg_parse(const char *s);
const char *vr_agg_name(vr_agg_mode_t m);
/* agg_loss written as weights: loss = sum_t w[t] * loss_mat[t] over the responses of one
 * (mini-)batch as a whole (verl's global_batch_info: the count of tokens / non-empty sequences of
 * the global batch), so the gradient of token t's loss is w[t]:
 *   token-mean:               w = 1 / N_tokens
 *   seq-mean-token-sum:       w = 1 / N_seqs             (N_seqs: responses with >= 1 token)
 *   seq-mean-token-mean:      w = 1 / (len_r + 1e-8) / N_seqs
 *   seq-mean-token-sum-norm:  w = 1 / N_seqs / horizon  (verl: loss_mask.shape[-1], the padded
 *                             response length; give max_response_length)
 * All w = 0 when there is no token. */
void vr_agg_weights(vr_agg_mode_t m, const uint32_t *cu, uint32_t n_resp, double horizon, double *w);
/* sum_t w[t] * x[t] */
double vr_agg_apply(const double *w, const double *x, size_t n);

/* ---- PPO clipped objective (compute_policy_loss_vanilla) ------------------------------------- */
typedef struct vr_pg_clip {
  double clip_ratio_low, clip_ratio_high; /* eps_low / eps_high (verl: clip_ratio when unset) */
  double clip_ratio_c;                    /* dual clip, > 1 (default 3) */
} vr_pg_clip_t;
/* One token: nkl = clamp(lp - old, -20, 20); ratio = exp(nkl);
 *   l1 = -A ratio; l2 = -A clamp(ratio, 1 - lo, 1 + hi); c1 = max(l1, l2);
 *   l3 = -A c; c2 = min(l3, c1); loss = A < 0 ? c2 : c1.
 * Returns loss; *grad = d loss / d lp (torch autograd: ties of max/min split the gradient in
 * half); *clipped = l2 > l1; *clipped_lower = c1 > l3 && A < 0; *neg_kl = nkl (ppo_kl is the
 * masked mean of -nkl). */
double vr_pg_token(const vr_pg_clip_t *c, double lp, double old, double adv, double *grad, int *clipped,
                   int *clipped_lower, double *neg_kl);

/* ---- value loss (compute_value_loss) ------------------------------------------------------- */
/* One token: vclip = clamp(v, old - cv, old + cv); l1 = (v - ret)^2; l2 = (vclip - ret)^2;
 * token loss = max(l1, l2) (the caller aggregates and multiplies by 0.5, as verl:
 * vf_loss = 0.5 * agg_loss(max(l1, l2))). Returns the token loss; *grad = d/dv; *clipped = l2 > l1. */
double vr_vf_token(double v, double ret, double old, double cliprange_value, double *grad, int *clipped);

/* ---- KL controllers (algorithm.kl_ctrl) --------------------------------------------------- */
typedef struct vr_kl_ctrl {
  int adaptive;        /* type: fixed (0) / adaptive (1) */
  double value;        /* current coefficient (kl_coef at start) */
  double target, horizon;
} vr_kl_ctrl_t;
/* AdaptiveKLController.update: e = clip(current_kl / target - 1, -0.2, 0.2);
 * value *= 1 + e * n_steps / horizon. Fixed: nothing. */
void vr_kl_ctrl_update(vr_kl_ctrl_t *k, double current_kl, double n_steps);

#ifdef __cplusplus
}
#endif
#endif /* VR_ALGO_H */
