/* vr_tconfig.c: ppo.yaml (vr_tconfig.h). */
#include "vr_tconfig.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vr_yaml.h"

static const char *const vr_verl_sections[] = {"data", "actor_rollout_ref", "critic", "reward_model", "reward",
                                               "algorithm", "custom_reward_function", "ray_kwargs",
                                               "global_profiler"};
#define N_VERL_SECTIONS (int)(sizeof vr_verl_sections / sizeof *vr_verl_sections)

enum {
  F_DEVICE_MAP, F_STEPS, F_TIMEOUT, F_AR_BYTES, F_SYNC_BYTES, F_METRICS, F_RUN_DIR, F_NNODES, F_NGPUS,
  F_EPOCHS, F_SAVE_FREQ, F_LOCAL_DIR, F_RESUME_MODE, F_RESUME_PATH, F_KEEP_ACTOR, F_KEEP_CRITIC, F_WARMUP,
  F_REWARD_TIMEOUT,
  F_VERL_FIRST /* verl keys accepted, not used */
};
static const char *const vr_verl_trainer_keys[] = {"project_name", "experiment_name", "logger", "test_freq",
                                                   "val_before_train", "balance_batch"};
static const char *const vr_resume_modes[] = {"auto", "disable", "resume_path"};
#define N_VERL_KEYS (int)(sizeof vr_verl_trainer_keys / sizeof *vr_verl_trainer_keys)

void vr_tconfig_defaults(vr_tconfig_t *c) {
  memset(c, 0, sizeof *c);
  c->total_training_steps = 1;
  c->comm_timeout_s = 300;
  c->reward_timeout_s = 120;
  c->allreduce_bytes = 64ull << 20;
  c->sync_bytes = 256ull << 20;
  c->total_epochs = 1;
  c->save_freq = -1;
  snprintf(c->default_local_dir, sizeof c->default_local_dir, "checkpoints");
  vr_rlconfig_defaults(&c->rl);
}

static void add_unused(vr_tconfig_t *c, const char *name) {
  size_t k = strlen(c->unused);
  snprintf(c->unused + k, sizeof c->unused - k, "%s%s", k ? ", " : "", name);
}

static int get_long(vr_yaml_t *y, const yaml_node_t *v, const char *what, long lo, long hi, long *out) {
  const char *s = vr_yaml_str(v);
  if (!s || vr_yaml_parse_int(s, lo, hi, out) != 0) {
    vr_yaml_error(y, v, "trainer.%s must be an integer in %ld..%ld, not %s%s%s. HINT: e.g. %s: %ld", what, lo, hi,
                  s ? "\"" : "", s ? s : vr_yaml_kind(v), s ? "\"" : "", what, lo > 1 ? lo : 1);
    return -1;
  }
  return 0;
}

static void get_path(vr_yaml_t *y, const yaml_node_t *v, const char *what, const char *base_dir, char *out,
                     size_t cap) {
  const char *s = vr_yaml_str(v);
  if (!s && !vr_yaml_is_null(v)) {
    vr_yaml_error(y, v, "trainer.%s must be a path, not %s. HINT: %s: some/file", what, vr_yaml_kind(v), what);
    return;
  }
  if (!s || !*s) {
    out[0] = 0;
  } else if (s[0] == '/' || !base_dir[0]) {
    if ((size_t)snprintf(out, cap, "%s", s) >= cap) vr_yaml_error(y, v, "trainer.%s is too long", what);
  } else if ((size_t)snprintf(out, cap, "%s/%s", base_dir, s) >= cap) {
    vr_yaml_error(y, v, "trainer.%s is too long", what);
  }
}

int vr_tconfig_load(const char *path, vr_tconfig_t *c, char *err, size_t cap) {
  vr_tconfig_defaults(c);
  snprintf(c->path, sizeof c->path, "%s", path);
  vr_diag_t d;
  vr_diag_init(&d, path, err, cap);
  char *text = NULL;
  size_t len = 0;
  if (vr_yaml_read_file(path, &text, &len, &d) != 0) {
    vr_diag_finish(&d);
    return -2;
  }
  vr_yaml_t y;
  if (vr_yaml_load(&y, text, len, &d) != 0) {
    free(text);
    vr_diag_finish(&d);
    return -2;
  }
  free(text);
  char base_dir[1024] = "";
  const char *slash = strrchr(path, '/');
  if (slash) snprintf(base_dir, sizeof base_dir, "%.*s", (int)(slash - path), path);

  vr_yaml_field_t top[1 + N_VERL_SECTIONS];
  top[0] = (vr_yaml_field_t){.name = "trainer"};
  for (int i = 0; i < N_VERL_SECTIONS; i++) top[1 + i] = (vr_yaml_field_t){.name = vr_verl_sections[i]};
  vr_yaml_fields(&y, vr_yaml_root(&y), "the config", top, 1 + N_VERL_SECTIONS);
  if (base_dir[0]) snprintf(c->default_local_dir, sizeof c->default_local_dir, "%.1000s/checkpoints", base_dir);
  for (int i = 0; i < N_VERL_SECTIONS; i++) {
    if (!top[1 + i].value) continue;
    if (vr_rlconfig_is_section(vr_verl_sections[i]))
      vr_rlconfig_section(&y, vr_verl_sections[i], top[1 + i].value, base_dir, &c->rl);
    else
      add_unused(c, vr_verl_sections[i]);
  }

  const yaml_node_t *tr = top[0].value;
  if (tr && !vr_yaml_is_map(tr) && !vr_yaml_is_null(tr)) {
    vr_yaml_error(&y, tr, "trainer must be a mapping, not %s. HINT: trainer: {total_training_steps: 20}",
                  vr_yaml_kind(tr));
  } else if (tr && vr_yaml_is_map(tr)) {
    vr_yaml_field_t f[F_VERL_FIRST + N_VERL_KEYS] = {
        [F_DEVICE_MAP] = {.name = "device_map"},
        [F_STEPS] = {.name = "total_training_steps"},
        [F_TIMEOUT] = {.name = "comm_timeout_s"},
        [F_AR_BYTES] = {.name = "comm_check_allreduce_bytes"},
        [F_SYNC_BYTES] = {.name = "comm_check_sync_bytes"},
        [F_METRICS] = {.name = "metrics_file"},
        [F_RUN_DIR] = {.name = "run_dir"},
        [F_NNODES] = {.name = "nnodes"},
        [F_NGPUS] = {.name = "n_gpus_per_node"},
        [F_EPOCHS] = {.name = "total_epochs"},
        [F_SAVE_FREQ] = {.name = "save_freq"},
        [F_LOCAL_DIR] = {.name = "default_local_dir"},
        [F_RESUME_MODE] = {.name = "resume_mode"},
        [F_RESUME_PATH] = {.name = "resume_from_path"},
        [F_KEEP_ACTOR] = {.name = "max_actor_ckpt_to_keep"},
        [F_KEEP_CRITIC] = {.name = "max_critic_ckpt_to_keep"},
        [F_WARMUP] = {.name = "critic_warmup"},
        [F_REWARD_TIMEOUT] = {.name = "reward_timeout_s"},
    };
    for (int i = 0; i < N_VERL_KEYS; i++) f[F_VERL_FIRST + i].name = vr_verl_trainer_keys[i];
    vr_yaml_fields(&y, tr, "trainer", f, F_VERL_FIRST + N_VERL_KEYS);
    long v;
    if (f[F_DEVICE_MAP].value)
      get_path(&y, f[F_DEVICE_MAP].value, "device_map", base_dir, c->device_map, sizeof c->device_map);
    if (f[F_STEPS].value && !vr_yaml_is_null(f[F_STEPS].value) &&
        get_long(&y, f[F_STEPS].value, "total_training_steps", 1, 100000000, &v) == 0)
      c->total_training_steps = (int)v, c->steps_given = 1;
    if (f[F_EPOCHS].value && get_long(&y, f[F_EPOCHS].value, "total_epochs", 1, 1000000, &v) == 0)
      c->total_epochs = (int)v;
    if (f[F_SAVE_FREQ].value && get_long(&y, f[F_SAVE_FREQ].value, "save_freq", -1, 100000000, &v) == 0)
      c->save_freq = v == 0 ? -1 : (int)v;
    if (f[F_LOCAL_DIR].value)
      get_path(&y, f[F_LOCAL_DIR].value, "default_local_dir", base_dir, c->default_local_dir, sizeof c->default_local_dir);
    if (f[F_RESUME_MODE].value) {
      int m = vr_yaml_enum(&y, f[F_RESUME_MODE].value, "trainer.resume_mode", vr_resume_modes, 3);
      if (m >= 0) c->resume_mode = m;
    }
    if (f[F_RESUME_PATH].value)
      get_path(&y, f[F_RESUME_PATH].value, "resume_from_path", base_dir, c->resume_from_path, sizeof c->resume_from_path);
    for (int k = F_KEEP_ACTOR; k <= F_KEEP_CRITIC; k++)
      if (f[k].value && !vr_yaml_is_null(f[k].value) && get_long(&y, f[k].value, f[k].name, -1, 1000000, &v) == 0 && v > 0)
        c->max_ckpt_to_keep = c->max_ckpt_to_keep && c->max_ckpt_to_keep < v ? c->max_ckpt_to_keep : (int)v;
    if (f[F_WARMUP].value && get_long(&y, f[F_WARMUP].value, "critic_warmup", 0, 100000000, &v) == 0)
      c->critic_warmup = (int)v;
    if (f[F_TIMEOUT].value && get_long(&y, f[F_TIMEOUT].value, "comm_timeout_s", 1, 86400, &v) == 0)
      c->comm_timeout_s = (double)v;
    if (f[F_REWARD_TIMEOUT].value &&
        get_long(&y, f[F_REWARD_TIMEOUT].value, "reward_timeout_s", 1, 86400, &v) == 0)
      c->reward_timeout_s = (double)v;
    if (f[F_AR_BYTES].value &&
        get_long(&y, f[F_AR_BYTES].value, "comm_check_allreduce_bytes", 4, 1L << 36, &v) == 0)
      c->allreduce_bytes = (uint64_t)v;
    if (f[F_SYNC_BYTES].value && get_long(&y, f[F_SYNC_BYTES].value, "comm_check_sync_bytes", 1, 1L << 36, &v) == 0)
      c->sync_bytes = (uint64_t)v;
    if (f[F_METRICS].value) get_path(&y, f[F_METRICS].value, "metrics_file", "", c->metrics_file, sizeof c->metrics_file);
    if (f[F_RUN_DIR].value) get_path(&y, f[F_RUN_DIR].value, "run_dir", "", c->run_dir, sizeof c->run_dir);
    if (f[F_NNODES].value && get_long(&y, f[F_NNODES].value, "nnodes", 1, 64, &v) == 0) c->nnodes = (int)v;
    if (f[F_NGPUS].value && get_long(&y, f[F_NGPUS].value, "n_gpus_per_node", 0, 64, &v) == 0)
      c->n_gpus_per_node = (int)v;
    for (int i = 0; i < N_VERL_KEYS; i++)
      if (f[F_VERL_FIRST + i].value) {
        char name[64];
        snprintf(name, sizeof name, "trainer.%s", vr_verl_trainer_keys[i]);
        add_unused(c, name);
      }
  }
  vr_yaml_free(&y);
  vr_diag_finish(&d);
  return d.n_errors ? -2 : 0;
}
