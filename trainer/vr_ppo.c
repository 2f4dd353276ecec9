/* vr_ppo.c: the RL loop's controller (vr_ppo.h). */
#include "vr_ppo.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "verl_reward/status.h"
#include "vr_algo.h"
#include "vr_ckpt.h"
#include "vr_dataset.h"
#include "vr_jsonl.h"
#include "vr_rlmetrics.h"
#include "vr_rlreward.h"
#include "vr_rlwork.h"
#include "vr_sample.h"
#include "vr_tmetrics.h"
#include "vr_tokenizer.h"

#define MAXR VR_DEVMAP_MAX_DEVICES

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int vr_ppo_check(const vr_tconfig_t *cfg, const vr_devmap_t *map, char *err, size_t cap) {
  const vr_rlconfig_t *rl = &cfg->rl;
  size_t k = 0;
  err[0] = 0;
#define BAD(...) (k += (size_t)snprintf(err + k, k < cap ? cap - k : 0, __VA_ARGS__), k = k < cap ? k : cap)
  if (!rl->model_path[0]) BAD("%s: error: actor_rollout_ref.model.path is not set. HINT: a Hugging Face causal-LM directory\n", cfg->path);
  if (!rl->train_files[0]) BAD("%s: error: data.train_files is not set. HINT: a JSON lines prompt file\n", cfg->path);
  if (vr_adv_est_needs_critic((vr_adv_est_t)rl->adv_estimator) && !map->roles[VR_ROLE_CRITIC].present)
    BAD("%s: error: algorithm.adv_estimator gae needs a critic but the device map %s has no critic role. HINT: add "
        "critic: {device_group: [...]} or use grpo\n", cfg->path, map->path);
  if ((rl->use_kl_loss || rl->use_kl_in_reward) && !map->roles[VR_ROLE_REFERENCE].present)
    BAD("%s: error: %s needs the reference policy but the device map %s has no reference role. HINT: add "
        "reference: {device_group: [...]}\n", cfg->path, rl->use_kl_loss ? "actor.use_kl_loss" : "algorithm.use_kl_in_reward",
        map->path);
  if (!map->reward.shm_name[0])
    BAD("%s: error: the RL loop reads rewards over shared memory but reward.shared_mem_name is not set in %s. HINT: "
        "reward: {shared_mem_name: verl_reward_shm} and verl-reward-server --shm-name verl_reward_shm\n", map->path,
        map->path);
  if (rl->actor.ppo_mini_batch_size > rl->train_batch_size || rl->train_batch_size % rl->actor.ppo_mini_batch_size)
    BAD("%s: error: actor_rollout_ref.actor.ppo_mini_batch_size %d must divide data.train_batch_size %d\n", cfg->path,
        rl->actor.ppo_mini_batch_size, rl->train_batch_size);
  if (map->roles[VR_ROLE_CRITIC].present &&
      (rl->critic.ppo_mini_batch_size > rl->train_batch_size || rl->train_batch_size % rl->critic.ppo_mini_batch_size))
    BAD("%s: error: critic.ppo_mini_batch_size %d must divide data.train_batch_size %d\n", cfg->path,
        rl->critic.ppo_mini_batch_size, rl->train_batch_size);
  if ((rl->adv_estimator == VR_ADV_GRPO || rl->adv_estimator == VR_ADV_RLOO) && rl->rollout_n < 2)
    BAD("%s: error: algorithm.adv_estimator %s compares responses of one prompt: actor_rollout_ref.rollout.n must be "
        ">= 2, not %d\n", cfg->path, vr_adv_est_name((vr_adv_est_t)rl->adv_estimator), rl->rollout_n);
  if (cfg->resume_mode == 2 && !cfg->resume_from_path[0])
    BAD("%s: error: trainer.resume_mode resume_path needs trainer.resume_from_path (a global_step_N directory)\n",
        cfg->path);
#undef BAD
  return k ? -2 : 0;
}

/* vocab_size of the model's config.json (the controller loads no weights). */
static int read_vocab(const char *dir, int *vocab) {
  char path[1200];
  snprintf(path, sizeof path, "%s/config.json", dir);
  FILE *f = fopen(path, "rb");
  if (!f) return VR_ERR_NOT_FOUND;
  char *buf = malloc(1 << 20);
  size_t n = buf ? fread(buf, 1, (1 << 20) - 1, f) : 0;
  fclose(f);
  if (!buf) return VR_ERR_NOMEM;
  buf[n] = 0;
  /* as the loader reads it (vr_jsonl.h): one value, a repeated key its last */
  char jerr[1400] = "";
  cJSON *j = vr_json_parse_file(buf, n, path, VR_JSON_DUP_LAST, jerr, sizeof jerr);
  free(buf);
  if (!j) fprintf(stderr, "verl-trainer: %s\n", jerr);
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, "vocab_size");
  int rc = cJSON_IsNumber(v) && v->valuedouble >= 1 ? 0 : VR_ERR_PARSE;
  if (rc == 0) *vocab = (int)v->valuedouble;
  cJSON_Delete(j);
  return rc;
}

/* Every member replied 0, else the run ends naming the member. */
static void expect_ok(vr_world_t *w, const char *what, const vr_ctl_reply_t *r, int n) {
  for (int k = 0; k < n; k++)
    if (r[k].status != 0) {
      const vr_peer_t *p = &w->peers[r[k].rank];
      vr_world_abort(w, 1, "%s failed on worker rank %d (device %s, host %s): %s", what, r[k].rank, p->device,
                     p->host, vr_strerror(r[k].status));
    }
}

/* A log-prob / value pass over group g: replies concatenated = one float per batch token. */
static void rows_pass(vr_world_t *w, vr_ctl_t *c, vr_group_id_t g, uint32_t cmd, const void *pk, size_t pkb,
                      double temperature, float *out, uint32_t T) {
  vr_ctl_reply_t rep[MAXR];
  uint64_t arg[4] = {0};
  memcpy(&arg[0], &temperature, sizeof temperature);
  size_t got = 0;
  int n = vr_ctl_dispatch(c, g, VR_DISPATCH_ONE_TO_ALL, cmd, arg, pk, pkb, 1, out, (size_t)T * sizeof *out, &got, rep,
                          MAXR);
  expect_ok(w, vr_rlc_names[cmd], rep, n);
  if (got != (size_t)T * sizeof *out)
    vr_world_abort(w, 1, "%s: the %s group returned %zu bytes, want %zu", vr_rlc_names[cmd], vr_group_name(g), got,
                   (size_t)T * sizeof *out);
}

/* An update over group g: the logged metrics from the members' stats. */
static void update_pass(vr_world_t *w, vr_ctl_t *c, vr_group_id_t g, uint32_t cmd, const void *pk, size_t pkb,
                        double *st) {
  vr_ctl_reply_t rep[MAXR];
  double buf[MAXR * VR_ST_COUNT];
  uint64_t arg[4] = {0};
  size_t got = 0;
  int n = vr_ctl_dispatch(c, g, VR_DISPATCH_ONE_TO_ALL, cmd, arg, pk, pkb, 1, buf, sizeof buf, &got, rep, MAXR);
  expect_ok(w, vr_rlc_names[cmd], rep, n);
  if (got != (size_t)n * VR_ST_COUNT * sizeof(double)) vr_world_abort(w, 1, "%s: malformed replies", vr_rlc_names[cmd]);
  vr_rls_reduce(buf, n, st); /* verl's values (vr_rlstats.h) */
}

static void sync_weights(vr_world_t *w, vr_ctl_t *c) {
  vr_ctl_reply_t rep[MAXR];
  uint64_t arg[4] = {0};
  int n = vr_ctl_dispatch(c, VR_GROUP_WEIGHT_SYNC, VR_DISPATCH_ONE_TO_ALL, VR_RLC_SYNC, arg, NULL, 0, 0, NULL, 0, NULL,
                          rep, MAXR);
  expect_ok(w, "update_weights", rep, n);
}

/* Save or load on the actor and critic groups; n[0] / n[1] (may be NULL) get their member counts.
 * hold (tests, --hold-save): the workers' writes wait for a .release file in their directory. */
static void ckpt_cmd(vr_world_t *w, vr_ctl_t *c, uint32_t cmd, const char *dir, int async, int hold, int *members) {
  vr_ctl_reply_t rep[MAXR];
  uint64_t arg[4] = {(uint64_t)async, (uint64_t)hold, 0, 0};
  int n = vr_ctl_dispatch(c, VR_GROUP_ACTOR, VR_DISPATCH_ONE_TO_ALL, cmd, arg, dir, strlen(dir), 1, NULL, 0, NULL, rep,
                          MAXR);
  expect_ok(w, vr_rlc_names[cmd], rep, n);
  if (members) members[0] = n, members[1] = 0;
  if (w->map->roles[VR_ROLE_CRITIC].present) {
    n = vr_ctl_dispatch(c, VR_GROUP_CRITIC, VR_DISPATCH_ONE_TO_ALL, cmd, arg, dir, strlen(dir), 1, NULL, 0, NULL, rep,
                        MAXR);
    expect_ok(w, vr_rlc_names[cmd], rep, n);
    if (members) members[1] = n;
  }
}

/* The response as text for solution_str: decoded with the tokenizer, else its ids in decimal. */
static char *solution_text(const vr_tok_t *tok, const int32_t *ids, uint32_t n) {
  if (tok) {
    char *text = NULL, e[256];
    size_t len;
    if (vr_tok_decode(tok, ids, n, 1, &text, &len, e, sizeof e) == 0) return text;
  }
  char *s = malloc((size_t)n * 12 + 1), *p = s;
  if (!s) return NULL;
  *p = 0;
  for (uint32_t i = 0; i < n; i++) p += sprintf(p, "%s%d", i ? " " : "", ids[i]);
  return s;
}

typedef struct run {
  vr_world_t *w;
  vr_ctl_t *c;
  const vr_tconfig_t *cfg;
  const vr_rlconfig_t *rl;
  vr_dataset_t ds;
  vr_sampler_t smp;
  vr_tok_t *tok;
  vr_rlreward_t *rw;
  vr_tmetrics_t tm;
  vr_ckpt_t ck;
  vr_kl_ctrl_t klc;
  int has_critic, need_ref;
  int64_t hold_save; /* tests: the workers' writes of this step's save wait for .release files */
} run_t;

static int save(run_t *R, int64_t step) {
  char dir[1200];
  const double t0 = mono_s();
  int rc = vr_ckpt_begin(&R->ck, step, dir, sizeof dir);
  if (rc != 0) return rc;
  int members[2];
  ckpt_cmd(R->w, R->c, VR_RLC_SAVE, dir, R->rl->async_save, R->hold_save == step, members);
  /* every save ends with each worker rank's marker (written after its files) */
  for (int r = 0; r < 2; r++)
    for (int k = 0; k < members[r]; k++) {
      char rel[64];
      snprintf(rel, sizeof rel, "%s/.rank_%d_complete", r ? "critic" : "actor", k);
      if (rc == 0) rc = vr_ckpt_expect(&R->ck, rel);
    }
  if (rc != 0) return rc;
  vr_ckpt_state_t st = {step, R->smp.epoch, R->smp.index, R->smp.seed, R->smp.shuffle, R->klc.value};
  rc = R->rl->async_save ? vr_ckpt_finish_async(&R->ck, &st) : vr_ckpt_finish(&R->ck, &st);
  vr_tm_time(&R->tm, "save_checkpoint", mono_s() - t0);
  return rc;
}

/* The controller cannot go on without memory: the run ends (the workers with it). */
#define NEED(x)                                                                   \
  do {                                                                            \
    if (!(x)) vr_world_abort(w, 1, "controller: out of memory (%s:%d)", __FILE__, __LINE__); \
  } while (0)

/* One step; returns 0 or aborts the run. */
static void step(run_t *R, int64_t gstep) {
  vr_world_t *w = R->w;
  vr_ctl_t *c = R->c;
  const vr_rlconfig_t *rl = R->rl;
  const uint32_t B = (uint32_t)rl->train_batch_size, N = (uint32_t)rl->rollout_n, NR = B * N;
  const double t_step = mono_s();
  double t0 = t_step;
  uint32_t *rows = malloc((size_t)B * sizeof *rows);
  uint64_t epoch;
  NEED(rows);
  NEED(vr_sampler_next(&R->smp, rows, &epoch) == 0);
  /* ---- gen */
  uint32_t PT = 0;
  for (uint32_t p = 0; p < B; p++) PT += R->ds.rows[rows[p]].n_ids;
  vr_rlw_gen_t gh = {VR_RLW_MAGIC, B, PT, N, (uint32_t)rl->max_response_length, 0, (float)rl->temperature,
                     (float)rl->top_p, rl->top_k, 0};
  const size_t gb = sizeof gh + ((size_t)B + 1) * 4 + (size_t)PT * 4 + (size_t)B * 8;
  unsigned char *gp = malloc(gb);
  NEED(gp);
  uint32_t *pcu = (uint32_t *)(gp + sizeof gh);
  int32_t *pids = (int32_t *)(pcu + B + 1);
  unsigned char *seeds = (unsigned char *)(pids + PT); /* (B) u64, not 8-aligned: memcpy */
  memcpy(gp, &gh, sizeof gh);
  pcu[0] = 0;
  for (uint32_t p = 0; p < B; p++) {
    const vr_prompt_row_t *r = &R->ds.rows[rows[p]];
    memcpy(pids + pcu[p], r->ids, (size_t)r->n_ids * 4);
    pcu[p + 1] = pcu[p] + r->n_ids;
    /* the sampling key of (step, prompt position): independent of how prompts are split */
    const uint64_t key = vr_sample_prompt_key(rl->seed ^ ((uint64_t)gstep * 0x9e3779b97f4a7c15ull), p);
    memcpy(seeds + (size_t)p * 8, &key, 8);
  }
  const size_t rcap = (size_t)MAXR * 8 + (size_t)NR * 4 * (1 + (size_t)rl->max_response_length);
  uint32_t *gout = malloc(rcap);
  NEED(gout);
  vr_ctl_reply_t rep[MAXR];
  uint64_t arg[4] = {0};
  size_t got = 0;
  int nm = vr_ctl_dispatch(c, VR_GROUP_ROLLOUT, VR_DISPATCH_ONE_TO_ALL, VR_RLC_GEN, arg, gp, gb, 1, gout, rcap, &got,
                           rep, MAXR);
  expect_ok(w, "generate", rep, nm);
  /* the batch: sequence r = prompt(r / N) ++ response r */
  vr_rlw_batch_t b = {0};
  b.n = NR;
  b.cu = calloc((size_t)NR + 1, 4), b.resp = calloc(NR, 4);
  uint32_t *rlen = calloc(NR, 4);
  const int32_t **rtok = calloc(NR, sizeof *rtok);
  NEED(b.cu && b.resp && rlen && rtok);
  {
    size_t off = 0;
    uint32_t r = 0;
    for (int k = 0; k < nm; k++) {
      if (off + 8 > got) vr_world_abort(w, 1, "generate: malformed replies");
      const uint32_t nr = gout[off / 4], nt = gout[off / 4 + 1];
      const uint32_t *lens = gout + off / 4 + 2;
      const int32_t *toks = (const int32_t *)(lens + nr);
      off += 8 + (size_t)nr * 4 + (size_t)nt * 4;
      if (off > got || r + nr > NR) vr_world_abort(w, 1, "generate: malformed replies");
      for (uint32_t i = 0, o = 0; i < nr; i++, r++) rlen[r] = lens[i], rtok[r] = toks + o, o += lens[i];
    }
    if (r != NR) vr_world_abort(w, 1, "generate: %u responses, want %u", r, NR);
  }
  for (uint32_t r = 0; r < NR; r++) {
    const uint32_t pl = R->ds.rows[rows[r / N]].n_ids;
    b.resp[r] = pl;
    b.cu[r + 1] = b.cu[r] + pl + rlen[r];
    if (rlen[r] == 0) vr_world_abort(w, 1, "generate: response %u is empty", r);
  }
  b.T = b.cu[NR];
  b.ids = malloc((size_t)b.T * 4);
  NEED(b.ids);
  for (uint32_t r = 0; r < NR; r++) {
    const vr_prompt_row_t *pr = &R->ds.rows[rows[r / N]];
    memcpy(b.ids + b.cu[r], pr->ids, (size_t)pr->n_ids * 4);
    memcpy(b.ids + b.cu[r] + pr->n_ids, rtok[r], (size_t)rlen[r] * 4);
  }
  free(gp);
  vr_tm_time(&R->tm, "gen", mono_s() - t0);
  /* ---- reward: submitted now, collected after the values */
  t0 = mono_s();
  uint8_t **ex = calloc(NR, sizeof *ex);
  uint32_t *exl = calloc(NR, 4);
  NEED(ex && exl);
  for (uint32_t r = 0; r < NR; r++) {
    const vr_prompt_row_t *pr = &R->ds.rows[rows[r / N]];
    char *sol = solution_text(R->tok, b.ids + b.cu[r] + b.resp[r], rlen[r]);
    ex[r] = vr_rlreward_extras(pr->data_source, sol, pr->ground_truth, pr->extra_info, &exl[r]);
    NEED(sol && ex[r]);
    free(sol);
  }
  int rc = vr_rlreward_submit(R->rw, NR, b.ids, b.cu, ex, exl);
  for (uint32_t r = 0; r < NR; r++) free(ex[r]);
  free(ex), free(exl);
  if (rc != 0) vr_world_abort(w, 1, "reward: submitting the batch failed: %s", vr_strerror(rc));
  double t_reward = mono_s() - t0;
  /* ---- old_log_prob, ref, values */
  size_t pkb;
  void *pk = vr_rlw_pack(&b, 0, NULL, &pkb);
  NEED(pk);
  for (int k = 0; k < VR_RLW_NARR; k++) NEED(b.arr[k] = calloc(b.T ? b.T : 1, sizeof(float)));
  t0 = mono_s();
  rows_pass(w, c, VR_GROUP_ACTOR, VR_RLC_LOGP, pk, pkb, rl->temperature, b.arr[0], b.T);
  vr_tm_time(&R->tm, "old_log_prob", mono_s() - t0);
  if (R->need_ref) {
    t0 = mono_s();
    rows_pass(w, c, VR_GROUP_REFERENCE, VR_RLC_LOGP, pk, pkb, rl->temperature, b.arr[1], b.T);
    vr_tm_time(&R->tm, "ref", mono_s() - t0);
  }
  if (R->has_critic) {
    t0 = mono_s();
    rows_pass(w, c, VR_GROUP_CRITIC, VR_RLC_VALUES, pk, pkb, 1.0, b.arr[3], b.T);
    vr_tm_time(&R->tm, "values", mono_s() - t0);
  }
  free(pk);
  t0 = mono_s();
  float *score = malloc((size_t)NR * sizeof *score);
  NEED(score);
  rc = vr_rlreward_wait(R->rw, score);
  if (rc != 0) vr_world_abort(w, 1, "reward: %s", vr_strerror(rc));
  vr_tm_time(&R->tm, "reward", t_reward + mono_s() - t0);
  /* ---- adv: packed over response tokens */
  t0 = mono_s();
  uint32_t *rcu = malloc(((size_t)NR + 1) * 4);
  rcu[0] = 0;
  for (uint32_t r = 0; r < NR; r++) rcu[r + 1] = rcu[r] + rlen[r];
  const size_t NT = rcu[NR];
  double *rew = calloc(NT, sizeof *rew), *val = calloc(NT, sizeof *val), *adv = calloc(NT, sizeof *adv),
         *ret = calloc(NT, sizeof *ret), *seq_score = malloc(NR * sizeof(double)), *seq_rew = malloc(NR * sizeof(double));
  int64_t *grp = malloc(NR * sizeof *grp);
  NEED(rcu && rew && val && adv && ret && seq_score && seq_rew && grp);
  for (uint32_t r = 0; r < NR; r++) {
    rew[rcu[r + 1] - 1] = score[r]; /* the score on the last response token (verl's reward manager) */
    seq_score[r] = score[r];
    grp[r] = r / N;
    for (uint32_t j = 0; j < rlen[r]; j++) val[rcu[r] + j] = b.arr[3][b.cu[r] + b.resp[r] + j];
  }
  if (rl->use_kl_in_reward) {
    double cur = 0;
    for (uint32_t r = 0; r < NR; r++) {
      double s = 0;
      for (uint32_t j = 0; j < rlen[r]; j++) {
        const uint32_t t = b.cu[r] + b.resp[r] + j;
        const double kld = vr_kl_value(&rl->kl_penalty, b.arr[0][t], b.arr[1][t], NULL);
        rew[rcu[r] + j] -= R->klc.value * kld;
        s += kld;
      }
      cur += s / (rlen[r] + 1e-8);
    }
    cur /= NR;
    vr_tm_set(&R->tm, "actor/reward_kl_penalty", cur);
    vr_tm_set(&R->tm, "actor/reward_kl_penalty_coeff", R->klc.value);
    vr_kl_ctrl_update(&R->klc, cur, NR);
  }
  for (uint32_t r = 0; r < NR; r++) {
    seq_rew[r] = 0;
    for (uint32_t j = 0; j < rlen[r]; j++) seq_rew[r] += rew[rcu[r] + j];
  }
  switch ((vr_adv_est_t)rl->adv_estimator) {
    case VR_ADV_GAE: rc = vr_algo_gae(rew, val, rcu, NR, rl->gamma, rl->lam, adv, ret); break;
    case VR_ADV_REINFORCE_PP: rc = vr_algo_reinforce_pp(rew, rcu, NR, rl->gamma, adv, ret); break;
    case VR_ADV_GRPO:
    case VR_ADV_RLOO: {
      double *a1 = malloc(NR * sizeof *a1);
      NEED(a1);
      if (rl->adv_estimator == VR_ADV_GRPO) vr_algo_grpo(seq_rew, grp, NR, 1e-6, rl->norm_adv_by_std_in_grpo, a1);
      else vr_algo_rloo(seq_rew, grp, NR, a1);
      for (uint32_t r = 0; r < NR; r++)
        for (uint32_t j = 0; j < rlen[r]; j++) adv[rcu[r] + j] = ret[rcu[r] + j] = a1[r];
      free(a1);
      rc = 0;
      break;
    }
  }
  if (rc != 0) vr_world_abort(w, 1, "adv: the batch has fewer than 2 response tokens to whiten");
  for (uint32_t r = 0; r < NR; r++)
    for (uint32_t j = 0; j < rlen[r]; j++) {
      const uint32_t t = b.cu[r] + b.resp[r] + j;
      b.arr[2][t] = (float)adv[rcu[r] + j];
      b.arr[4][t] = (float)ret[rcu[r] + j];
    }
  vr_tm_time(&R->tm, "adv", mono_s() - t0);
  /* ---- updates */
  double st[VR_ST_COUNT];
  vr_rlw_update_t up = {0};
  up.temperature = rl->temperature;
  up.horizon = rl->max_response_length;
  if (R->has_critic) {
    t0 = mono_s();
    up.lr = rl->critic.lr, up.weight_decay = rl->critic.weight_decay, up.grad_clip = rl->critic.grad_clip;
    up.cliprange_value = rl->cliprange_value, up.agg_mode = rl->critic.loss_agg_mode;
    up.mini_batch = (uint32_t)rl->critic.ppo_mini_batch_size * N;
    up.micro_batch = (uint32_t)rl->critic.ppo_micro_batch_size_per_gpu, up.epochs = (uint32_t)rl->critic.ppo_epochs;
    NEED(pk = vr_rlw_pack(&b, VR_RLW_VALUES | VR_RLW_RETURNS, &up, &pkb));
    update_pass(w, c, VR_GROUP_CRITIC, VR_RLC_UPDATE_CRITIC, pk, pkb, st);
    free(pk);
    vr_tm_set(&R->tm, "critic/vf_loss", st[VR_ST_VF_LOSS]);
    vr_tm_set(&R->tm, "critic/vf_clipfrac", st[VR_ST_VF_CLIPFRAC]);
    vr_tm_set(&R->tm, "critic/vpred_mean", st[VR_ST_VPRED]);
    vr_tm_set(&R->tm, "critic/grad_norm", st[VR_ST_GRAD_NORM]);
    vr_tm_set(&R->tm, "critic/lr", rl->critic.lr);
    vr_tm_time(&R->tm, "update_critic", mono_s() - t0);
  }
  if (R->cfg->critic_warmup <= gstep) { /* verl: critic_warmup <= global_steps (steps count from 1) */
    t0 = mono_s();
    memset(&up, 0, sizeof up);
    up.temperature = rl->temperature;
    up.horizon = rl->max_response_length;
    up.lr = rl->actor.lr, up.weight_decay = rl->actor.weight_decay, up.grad_clip = rl->actor.grad_clip;
    up.clip_low = isnan(rl->clip_ratio_low) ? rl->clip_ratio : rl->clip_ratio_low;
    up.clip_high = isnan(rl->clip_ratio_high) ? rl->clip_ratio : rl->clip_ratio_high;
    up.clip_c = rl->clip_ratio_c, up.entropy_coeff = rl->entropy_coeff;
    up.use_kl_loss = rl->use_kl_loss, up.kl_loss_coef = rl->kl_loss_coef;
    up.kl_type = (int32_t)rl->kl_loss_type.type, up.kl_straight = rl->kl_loss_type.straight_through;
    up.agg_mode = rl->actor.loss_agg_mode;
    up.mini_batch = (uint32_t)rl->actor.ppo_mini_batch_size * N;
    up.micro_batch = (uint32_t)rl->actor.ppo_micro_batch_size_per_gpu, up.epochs = (uint32_t)rl->actor.ppo_epochs;
    NEED(pk = vr_rlw_pack(&b, VR_RLW_OLD | VR_RLW_ADV | (rl->use_kl_loss ? VR_RLW_REF : 0), &up, &pkb));
    update_pass(w, c, VR_GROUP_ACTOR, VR_RLC_UPDATE_ACTOR, pk, pkb, st);
    free(pk);
    vr_tm_set(&R->tm, "actor/pg_loss", st[VR_ST_PG_LOSS]);
    vr_tm_set(&R->tm, "actor/pg_clipfrac", st[VR_ST_CLIPFRAC]);
    vr_tm_set(&R->tm, "actor/ppo_kl", st[VR_ST_PPO_KL]);
    vr_tm_set(&R->tm, "actor/pg_clipfrac_lower", st[VR_ST_CLIPFRAC_LOWER]);
    vr_tm_set(&R->tm, "actor/entropy", st[VR_ST_ENTROPY]);
    if (rl->use_kl_loss) {
      vr_tm_set(&R->tm, "actor/kl_loss", st[VR_ST_KL_LOSS]);
      vr_tm_set(&R->tm, "actor/kl_coef", rl->kl_loss_coef);
    }
    vr_tm_set(&R->tm, "actor/grad_norm", st[VR_ST_GRAD_NORM]);
    vr_tm_set(&R->tm, "actor/lr", rl->actor.lr);
    vr_tm_time(&R->tm, "update_actor", mono_s() - t0);
    t0 = mono_s();
    sync_weights(w, c);
    vr_tm_time(&R->tm, "update_weights", mono_s() - t0);
  }
  /* ---- data metrics (compute_data_metrics) */
  vr_rlm_stats(&R->tm, "critic/score", seq_score, NR);
  vr_rlm_stats(&R->tm, "critic/rewards", seq_rew, NR);
  vr_rlm_stats(&R->tm, "critic/advantages", adv, NT);
  vr_rlm_stats(&R->tm, "critic/returns", ret, NT);
  if (R->has_critic) {
    vr_rlm_stats(&R->tm, "critic/values", val, NT);
    double *d = malloc(NT * sizeof *d);
    NEED(d);
    for (size_t i = 0; i < NT; i++) d[i] = ret[i] - val[i];
    const double vr = vr_rlm_var(ret, NT);
    vr_tm_set(&R->tm, "critic/vf_explained_var", 1.0 - vr_rlm_var(d, NT) / (vr + 1e-5));
    free(d);
  }
  double *lens = malloc(NR * sizeof *lens), clipped = 0;
  NEED(lens);
  for (uint32_t r = 0; r < NR; r++) lens[r] = rlen[r], clipped += rlen[r] >= (uint32_t)rl->max_response_length;
  vr_rlm_stats(&R->tm, "response_length", lens, NR);
  vr_tm_set(&R->tm, "response_length/clip_ratio", clipped / NR);
  clipped = 0;
  for (uint32_t p = 0; p < B; p++)
    lens[p] = R->ds.rows[rows[p]].n_ids, clipped += R->ds.rows[rows[p]].n_ids >= (uint32_t)rl->max_prompt_length;
  vr_rlm_stats(&R->tm, "prompt_length", lens, B);
  vr_tm_set(&R->tm, "prompt_length/clip_ratio", clipped / B);
  free(lens);
  const double t_all = mono_s() - t_step;
  vr_tm_time(&R->tm, "step", t_all);
  vr_tm_set(&R->tm, "perf/total_num_tokens", b.T);
  vr_tm_set(&R->tm, "perf/time_per_step", t_all);
  vr_tm_set(&R->tm, "perf/throughput", b.T / t_all / (w->map->n_workers ? w->map->n_workers : 1));
  vr_tm_set(&R->tm, "training/global_step", (double)gstep);
  vr_tm_set(&R->tm, "training/epoch", (double)epoch);
  vr_tm_set(&R->tm, "reward/restarts", vr_rlreward_restarts(R->rw));
  double srv_mean = 0, srv_max = 0;
  vr_tm_set(&R->tm, "reward/requests", vr_rlreward_server_ms(R->rw, &srv_mean, &srv_max));
  vr_tm_set(&R->tm, "reward/server_ms/mean", srv_mean);
  vr_tm_set(&R->tm, "reward/server_ms/max", srv_max);
  free(rcu), free(rew), free(val), free(adv), free(ret), free(seq_score), free(seq_rew), free(grp), free(score);
  free(gout), free(rlen), free(rtok), free(rows);
  for (int k = 0; k < VR_RLW_NARR; k++) free(b.arr[k]);
  free(b.cu), free(b.resp), free(b.ids);
}

static int resume(run_t *R, int64_t *start) {
  const vr_tconfig_t *cfg = R->cfg;
  *start = 0;
  if (cfg->resume_mode == 1) return 0; /* disable */
  char dir[1200];
  int64_t s = 0;
  if (cfg->resume_mode == 2) {
    snprintf(dir, sizeof dir, "%s", cfg->resume_from_path);
  } else {
    int rc = vr_ckpt_latest(cfg->default_local_dir, &s, dir, sizeof dir);
    if (rc != 0) return rc;
    if (s == 0) return 0;
  }
  vr_ckpt_state_t st;
  int rc = vr_ckpt_read_state(dir, &st);
  if (rc != 0) return rc;
  if (st.seed != R->rl->seed || st.shuffle != R->rl->shuffle)
    fprintf(stderr, "[WARN] verl-trainer: %s was written with data.seed %" PRIu64 " shuffle %d; the config has %" PRIu64
                    " %d: the data order will differ\n", dir, st.seed, st.shuffle, R->rl->seed, R->rl->shuffle);
  R->smp.epoch = st.epoch;
  R->smp.index = st.index < vr_sampler_batches_per_epoch(&R->smp) ? st.index : 0;
  R->klc.value = st.kl_coef;
  ckpt_cmd(R->w, R->c, VR_RLC_LOAD, dir, 0, 0, NULL);
  sync_weights(R->w, R->c);
  *start = st.global_step;
  printf("[INFO] resumed from %s (global step %" PRId64 ")\n", dir, st.global_step);
  return 0;
}

int vr_ppo_run(vr_world_t *w, vr_ctl_t *c, const vr_tconfig_t *cfg, const vr_ppo_args_t *a) {
  run_t *R = calloc(1, sizeof *R);
  if (!R) return 1;
  R->w = w, R->c = c, R->cfg = cfg, R->rl = &cfg->rl;
  R->hold_save = a->hold_save;
  const vr_rlconfig_t *rl = R->rl;
  R->has_critic = w->map->roles[VR_ROLE_CRITIC].present && vr_adv_est_needs_critic((vr_adv_est_t)rl->adv_estimator);
  R->need_ref = rl->use_kl_loss || rl->use_kl_in_reward;
  R->klc = (vr_kl_ctrl_t){rl->kl_ctrl_adaptive, rl->kl_coef, rl->target_kl, rl->horizon};
  int code = 0, vocab = 0;
  char err[2048], path[1200];
  if (read_vocab(rl->model_path, &vocab) != 0) {
    fprintf(stderr, "verl-trainer: %s/config.json: no vocab_size (actor_rollout_ref.model.path)\n", rl->model_path);
    code = 2;
    goto out;
  }
  snprintf(path, sizeof path, "%s/tokenizer.json", rl->model_path);
  struct stat sb;
  if (stat(path, &sb) == 0 && vr_tok_load(rl->model_path, &R->tok, err, sizeof err) != 0) {
    fprintf(stderr, "verl-trainer: the policy's tokenizer: %s\n", err);
    code = 2;
    goto out;
  }
  vr_dataset_options_t dopt = {rl->prompt_key, (uint32_t)rl->max_prompt_length, rl->truncation, vocab, R->tok};
  if (vr_dataset_load(rl->train_files, &dopt, &R->ds, err, sizeof err) != 0) {
    fprintf(stderr, "verl-trainer: %s\n", err);
    code = 2;
    goto out;
  }
  if (vr_sampler_init(&R->smp, R->ds.n_rows, (uint32_t)rl->train_batch_size, rl->seed, rl->shuffle) != 0) {
    fprintf(stderr, "verl-trainer: data.train_batch_size %d is larger than the %u prompts of %s\n",
            rl->train_batch_size, R->ds.n_rows, rl->train_files);
    code = 2;
    goto out;
  }
  int total = a->steps ? a->steps
              : cfg->steps_given ? cfg->total_training_steps
                                 : cfg->total_epochs * (int)vr_sampler_batches_per_epoch(&R->smp);
  printf("[INFO] RL loop: %s, %u prompts (%u truncated), %d steps of %d prompts x %d responses; reward from shm \"%s\"\n",
         vr_adv_est_name((vr_adv_est_t)rl->adv_estimator), R->ds.n_rows, R->ds.n_truncated, total,
         rl->train_batch_size, rl->rollout_n, w->map->reward.shm_name);
  if (vr_ckpt_init(&R->ck, cfg->default_local_dir, cfg->max_ckpt_to_keep) != 0) {
    code = 2;
    goto out;
  }
  int64_t start = 0;
  if (resume(R, &start) != 0) {
    code = 1;
    goto out;
  }
  if (vr_rlreward_open(w->map->reward.shm_name, cfg->reward_timeout_s, cfg->reward_timeout_s, &R->rw) != 0) {
    code = 1;
    goto out;
  }
  const char *mf = a->metrics ? a->metrics : cfg->metrics_file;
  if (vr_tm_open(&R->tm, mf, NULL, total) != 0) {
    fprintf(stderr, "verl-trainer: cannot open the metrics file %s: %s\n", mf, strerror(errno));
    code = 2;
    goto out;
  }
  fflush(stdout);
  int64_t last_saved = start;
  for (int64_t s = start + 1; s <= total; s++) {
    step(R, s);
    const int stop = a->stop && *a->stop;
    if ((cfg->save_freq > 0 && (s % cfg->save_freq == 0 || s == total)) || stop) { /* verl's rule, + SIGTERM */
      if (a->crash_in_save == s) R->ck.crash_after = s;
      if (save(R, s) != 0) {
        code = 1;
        break;
      }
      last_saved = s;
    }
    vr_rlm_progress(stdout, (int)s, total, &R->tm);
    if (vr_tm_end_step(&R->tm, (int)s) != 0) fprintf(stderr, "verl-trainer: writing the metrics file failed\n");
    if (stop) {
      printf("[INFO] stopped by a signal after step %" PRId64 "; checkpoint global_step_%" PRId64 " saved\n", s,
             last_saved);
      break;
    }
  }
  if (vr_ckpt_join(&R->ck) != 0) code = 1;
  vr_tm_close(&R->tm);
out:
  vr_rlreward_close(R->rw);
  vr_dataset_free(&R->ds);
  vr_tok_free(R->tok);
  free(R);
  return code;
}
