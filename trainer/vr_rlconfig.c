/* vr_rlconfig.c: the RL sections of ppo.yaml (vr_rlconfig.h), one table of verl's keys. */
#include "vr_rlconfig.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* K_REAL_GT: a number in (lo, hi], lo itself out of range */
/* K_PATH_OFF: a path, or "off" kept as it is */
typedef enum { K_INT, K_U64, K_REAL, K_REAL_GT, K_BOOL, K_STR, K_PATH, K_PATH_OFF, K_ENUM, K_KL, K_AGG, K_ADV } kind_t;

typedef struct key {
  const char *path; /* dotted, from the section name */
  kind_t kind;
  size_t off;
  double lo, hi;    /* numbers */
  const char *const *names; /* K_ENUM */
  int n_names;
} rl_key_t;

static const char *const trunc_names[] = {"error", "left", "right", "middle"};
static const char *const ctrl_names[] = {"fixed", "adaptive"};

#define O(f) offsetof(vr_rlconfig_t, f)
#define OPTIM(sec, f)                                                                                          \
  {sec ".ppo_mini_batch_size", K_INT, O(f.ppo_mini_batch_size), 1, 1 << 20, 0, 0},                             \
      {sec ".ppo_micro_batch_size_per_gpu", K_INT, O(f.ppo_micro_batch_size_per_gpu), 1, 1 << 20, 0, 0},       \
      {sec ".ppo_epochs", K_INT, O(f.ppo_epochs), 1, 1000, 0, 0},                                              \
      {sec ".grad_clip", K_REAL, O(f.grad_clip), 0, 1e9, 0, 0},                                                \
      {sec ".loss_agg_mode", K_AGG, O(f.loss_agg_mode), 0, 0, 0, 0},                                           \
      {sec ".optim.lr", K_REAL, O(f.lr), 0, 10, 0, 0},                                                         \
      {sec ".optim.weight_decay", K_REAL, O(f.weight_decay), 0, 10, 0, 0},                                      \
      {sec ".optim.zero1", K_BOOL, O(f.zero1), 0, 0, 0, 0}

static const rl_key_t keys[] = {
    {"data.train_files", K_PATH, O(train_files), 0, 0, 0, 0},
    {"data.prompt_key", K_STR, O(prompt_key), 0, 0, 0, 0},
    {"data.train_batch_size", K_INT, O(train_batch_size), 1, 1 << 20, 0, 0},
    {"data.max_prompt_length", K_INT, O(max_prompt_length), 1, 1 << 20, 0, 0},
    {"data.max_response_length", K_INT, O(max_response_length), 1, 1 << 20, 0, 0},
    {"data.truncation", K_ENUM, O(truncation), 0, 0, trunc_names, 4},
    {"data.shuffle", K_BOOL, O(shuffle), 0, 0, 0, 0},
    {"data.seed", K_U64, O(seed), 0, 0, 0, 0},
    {"actor_rollout_ref.model.path", K_PATH, O(model_path), 0, 0, 0, 0},
    OPTIM("actor_rollout_ref.actor", actor),
    {"actor_rollout_ref.actor.clip_ratio", K_REAL, O(clip_ratio), 0, 10, 0, 0},
    {"actor_rollout_ref.actor.clip_ratio_low", K_REAL, O(clip_ratio_low), 0, 10, 0, 0},
    {"actor_rollout_ref.actor.clip_ratio_high", K_REAL, O(clip_ratio_high), 0, 10, 0, 0},
    {"actor_rollout_ref.actor.clip_ratio_c", K_REAL_GT, O(clip_ratio_c), 1, 1e6, 0, 0}, /* verl: c > 1 */
    {"actor_rollout_ref.actor.entropy_coeff", K_REAL, O(entropy_coeff), -1e3, 1e3, 0, 0},
    {"actor_rollout_ref.actor.use_kl_loss", K_BOOL, O(use_kl_loss), 0, 0, 0, 0},
    {"actor_rollout_ref.actor.kl_loss_coef", K_REAL, O(kl_loss_coef), 0, 1e6, 0, 0},
    {"actor_rollout_ref.actor.kl_loss_type", K_KL, O(kl_loss_type), 0, 0, 0, 0},
    {"actor_rollout_ref.actor.checkpoint.async_save", K_BOOL, O(async_save), 0, 0, 0, 0},
    {"actor_rollout_ref.rollout.n", K_INT, O(rollout_n), 1, 4096, 0, 0},
    {"actor_rollout_ref.rollout.temperature", K_REAL, O(temperature), 0, 100, 0, 0},
    {"actor_rollout_ref.rollout.top_p", K_REAL, O(top_p), 1e-9, 1, 0, 0},
    {"actor_rollout_ref.rollout.top_k", K_INT, O(top_k), -1, 1 << 30, 0, 0},
    {"actor_rollout_ref.rollout.max_num_seqs", K_INT, O(max_num_seqs), 1, 1 << 20, 0, 0},
    {"actor_rollout_ref.rollout.max_num_batched_tokens", K_INT, O(max_num_batched_tokens), 1, 1 << 24, 0, 0},
    {"actor_rollout_ref.rollout.kv_cache_bytes", K_U64, O(kv_cache_bytes), 0, 0, 0, 0},
    {"actor_rollout_ref.rollout.gemm_tune", K_BOOL, O(gemm_tune), 0, 0, 0, 0},
    {"actor_rollout_ref.rollout.gemm_cache", K_PATH_OFF, O(gemm_cache), 0, 0, 0, 0},
    {"critic.model.path", K_PATH, O(critic_model_path), 0, 0, 0, 0},
    OPTIM("critic", critic),
    {"critic.cliprange_value", K_REAL, O(cliprange_value), 0, 1e9, 0, 0},
    {"algorithm.adv_estimator", K_ADV, O(adv_estimator), 0, 0, 0, 0},
    {"algorithm.gamma", K_REAL, O(gamma), 0, 1, 0, 0},
    {"algorithm.lam", K_REAL, O(lam), 0, 1, 0, 0},
    {"algorithm.norm_adv_by_std_in_grpo", K_BOOL, O(norm_adv_by_std_in_grpo), 0, 0, 0, 0},
    {"algorithm.use_kl_in_reward", K_BOOL, O(use_kl_in_reward), 0, 0, 0, 0},
    {"algorithm.kl_penalty", K_KL, O(kl_penalty), 0, 0, 0, 0},
    {"algorithm.kl_ctrl.type", K_ENUM, O(kl_ctrl_adaptive), 0, 0, ctrl_names, 2},
    {"algorithm.kl_ctrl.kl_coef", K_REAL, O(kl_coef), 0, 1e6, 0, 0},
    {"algorithm.kl_ctrl.target_kl", K_REAL, O(target_kl), 1e-12, 1e6, 0, 0},
    {"algorithm.kl_ctrl.horizon", K_REAL, O(horizon), 1, 1e12, 0, 0},
};
#define N_KEYS (int)(sizeof keys / sizeof *keys)

void vr_rlconfig_defaults(vr_rlconfig_t *c) {
  memset(c, 0, sizeof *c);
  snprintf(c->prompt_key, sizeof c->prompt_key, "prompt");
  c->train_batch_size = 1024;
  c->max_prompt_length = 512;
  c->max_response_length = 512;
  c->truncation = VR_TRUNC_ERROR;
  c->shuffle = 1;
  c->seed = 1;
  const vr_optim_cfg_t actor = {1e-6, 0.01, 1.0, 256, 4, 1, VR_AGG_TOKEN_MEAN, 0};
  c->actor = actor;
  c->critic = actor;
  c->critic.lr = 1e-5;
  c->clip_ratio = 0.2;
  c->clip_ratio_low = c->clip_ratio_high = NAN; /* = clip_ratio unless given */
  c->clip_ratio_c = 3.0;
  c->kl_loss_coef = 0.001;
  c->kl_loss_type.type = VR_KL_K3; /* verl: low_var_kl */
  c->rollout_n = 1;
  c->temperature = 1.0;
  c->top_p = 1.0;
  c->top_k = -1;
  c->gemm_tune = 1;
  c->cliprange_value = 0.5;
  c->adv_estimator = VR_ADV_GAE;
  c->gamma = 1.0;
  c->lam = 1.0;
  c->norm_adv_by_std_in_grpo = 1;
  c->kl_penalty.type = VR_KL_K1; /* verl: kl */
  c->kl_coef = 0.001;
  c->target_kl = 0.1;
  c->horizon = 10000;
}

int vr_rlconfig_is_section(const char *name) {
  return !strcmp(name, "data") || !strcmp(name, "actor_rollout_ref") || !strcmp(name, "critic") ||
         !strcmp(name, "algorithm");
}

static int parse_bool(const char *s, int *out) {
  static const char *const t[] = {"true", "True", "TRUE", "yes", "on", "1"}, *const f[] = {"false", "False",
                                                                                               "FALSE", "no", "off", "0"};
  for (int i = 0; i < 6; i++) {
    if (!strcmp(s, t[i])) return *out = 1, 0;
    if (!strcmp(s, f[i])) return *out = 0, 0;
  }
  return -1;
}

static void leaf(vr_yaml_t *y, const rl_key_t *k, const yaml_node_t *v, const char *base_dir, vr_rlconfig_t *c) {
  char *p = (char *)c + k->off;
  const char *s = vr_yaml_str(v);
  if (!s) {
    vr_yaml_error(y, v, "%s must be a value, not %s", k->path, vr_yaml_kind(v));
    return;
  }
  char *end = NULL;
  switch (k->kind) {
    case K_INT:
    case K_U64: {
      long x;
      if (k->kind == K_U64) {
        errno = 0;
        unsigned long long u = strtoull(s, &end, 10);
        if (!*s || *end || s[0] < '0' || s[0] > '9' || errno == ERANGE) { /* strtoull takes " -1", wraps past 2^64 */
          vr_yaml_error(y, v, "%s must be an integer in 0..18446744073709551615, not \"%s\"", k->path, s);
          return;
        }
        *(uint64_t *)p = u;
        return;
      }
      if (vr_yaml_parse_int(s, (long)k->lo, (long)k->hi, &x) != 0) {
        vr_yaml_error(y, v, "%s must be an integer in %.0f..%.0f, not \"%s\"", k->path, k->lo, k->hi, s);
        return;
      }
      *(int *)p = (int)x;
      return;
    }
    case K_REAL:
    case K_REAL_GT: {
      const int open = k->kind == K_REAL_GT;
      double x = strtod(s, &end);
      if (!*s || *end || !isfinite(x) || x < k->lo || (open && x == k->lo) || x > k->hi) {
        vr_yaml_error(y, v, "%s must be a number in %s%g, %g], not \"%s\"", k->path, open ? "(" : "[", k->lo, k->hi, s);
        return;
      }
      *(double *)p = x;
      return;
    }
    case K_BOOL:
      if (parse_bool(s, (int *)p) != 0) vr_yaml_error(y, v, "%s must be true or false, not \"%s\"", k->path, s);
      return;
    case K_STR:
      if (!*s || strlen(s) >= 64) vr_yaml_error(y, v, "%s must be a name of 1..63 bytes", k->path);
      else snprintf(p, 64, "%s", s);
      return;
    case K_PATH_OFF:
      if (!strcmp(s, "off")) {
        snprintf(p, 1024, "off");
        return;
      }
      /* fall through */
    case K_PATH:
      if ((size_t)snprintf(p, 1024, "%s%s%s", s[0] == '/' || !base_dir[0] ? "" : base_dir,
                           s[0] == '/' || !base_dir[0] ? "" : "/", s) >= 1024)
        vr_yaml_error(y, v, "%s is too long", k->path);
      return;
    case K_ENUM: {
      int i = vr_yaml_enum(y, v, k->path, k->names, k->n_names);
      if (i >= 0) *(int *)p = i;
      return;
    }
    case K_KL:
      if (vr_kl_parse(s, (vr_kl_est_t *)p) != 0)
        vr_yaml_error(y, v, "%s: unknown KL estimator \"%s\". HINT: kl (k1), abs, mse (k2), low_var_kl (k3), "
                            "optionally with '+'", k->path, s);
      return;
    case K_AGG:
      if ((*(int *)p = vr_agg_parse(s)) < 0)
        vr_yaml_error(y, v, "%s: unknown mode \"%s\". HINT: token-mean, seq-mean-token-sum, seq-mean-token-mean, "
                            "seq-mean-token-sum-norm", k->path, s);
      return;
    case K_ADV:
      if ((*(int *)p = vr_adv_est_parse(s)) < 0)
        vr_yaml_error(y, v, "%s: \"%s\" is not built. HINT: gae, grpo, rloo, reinforce_plus_plus", k->path, s);
      return;
  }
}

/* The mapping at `prefix`: its keys are the next path segments of the table's entries. */
static int walk(vr_yaml_t *y, const yaml_node_t *map, const char *prefix, const char *base_dir, vr_rlconfig_t *c) {
  if (!vr_yaml_is_map(map)) {
    if (vr_yaml_is_null(map)) return 0;
    vr_yaml_error(y, map, "%s must be a mapping, not %s", prefix, vr_yaml_kind(map));
    return 1;
  }
  vr_yaml_field_t f[32];
  char names[32][64];
  int n = 0;
  const size_t pl = strlen(prefix);
  for (int i = 0; i < N_KEYS; i++) {
    if (strncmp(keys[i].path, prefix, pl) != 0 || keys[i].path[pl] != '.') continue;
    const char *seg = keys[i].path + pl + 1;
    size_t sl = strcspn(seg, ".");
    int dup = 0;
    for (int j = 0; j < n; j++) dup |= strlen(names[j]) == sl && !strncmp(names[j], seg, sl);
    if (dup || n == 32) continue;
    snprintf(names[n], sizeof names[n], "%.*s", (int)sl, seg);
    f[n] = (vr_yaml_field_t){.name = names[n]};
    n++;
  }
  int errs = vr_yaml_fields(y, map, prefix, f, n);
  for (int j = 0; j < n; j++) {
    if (!f[j].value) continue;
    char path[2200];
    snprintf(path, sizeof path, "%s.%s", prefix, names[j]);
    int found = 0;
    for (int i = 0; i < N_KEYS && !found; i++)
      if (!strcmp(keys[i].path, path)) {
        leaf(y, &keys[i], f[j].value, base_dir, c);
        found = 1;
      }
    if (!found) errs += walk(y, f[j].value, path, base_dir, c);
  }
  return errs;
}

int vr_rlconfig_section(vr_yaml_t *y, const char *name, const yaml_node_t *v, const char *base_dir, vr_rlconfig_t *c) {
  c->present = 1;
  const int before = y->diag->n_errors;
  walk(y, v, name, base_dir, c);
  return y->diag->n_errors - before;
}
