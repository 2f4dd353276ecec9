/* vr_rlwork.c: the RL loop's workers (vr_rlwork.h): engines per role and the commands. */
#include "vr_rlwork.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "verl_reward/status.h"
#include "vr_algo.h"
#include "vr_gencfg.h"
#include "vr_lm.h"
#include "vr_rollout.h"
#include "vr_rollout_lm.h"
#include "vr_rollout_sync.h"
#include "vr_train.h"
#include "vr_train_comm.h"

const char *const vr_rlc_names[VR_RLC_COUNT] = {"stop", "generate", "log_prob", "values", "update_actor",
                                                "update_critic", "update_weights", "save_checkpoint",
                                                "load_checkpoint"};

#define MAX_STOP 16
#define FWD_TOKENS 8192u /* tokens per forward of log-prob / value passes */

typedef struct role_engine {
  vr_lm_t *lm;                /* the checkpoint's handle; its buffer is the snapshot a save writes */
  vr_train_t *t;
  vr_train_group_ref_t ref;
  pthread_t writer;           /* async_save: this rank's checkpoint write in flight */
  int writing, write_rc;
  int rank, hold;             /* group rank (0 writes the model); hold: tests, wait for .release */
  vr_train_optsnap_t opt;     /* the optimizer snapshot being written */
  char write_dir[2048], opt_path[2100];
} role_engine_t;

struct vr_rlworker {
  vr_world_t *w;
  const vr_tconfig_t *cfg;
  uint32_t roles;
  role_engine_t actor, critic, reference;
  vr_lm_t *roll_lm;
  vr_rollout_lm_t view;
  vr_rollout_t *roll;
  int32_t stops[MAX_STOP];
  uint32_t n_stop;
  char dev[32]; /* "cpu" or "cuda:N": the engines' device (the rollout engine keeps the pointer) */
};

/* ---- wire ---------------------------------------------------------------------------------- */

void vr_rlw_slice(uint32_t n, int k, int K, uint32_t *lo, uint32_t *hi) {
  *lo = (uint32_t)((uint64_t)n * (uint64_t)k / (uint64_t)K);
  *hi = (uint32_t)((uint64_t)n * (uint64_t)(k + 1) / (uint64_t)K);
}

void *vr_rlw_pack(const vr_rlw_batch_t *b, uint32_t flags, const vr_rlw_update_t *up, size_t *bytes) {
  int na = 0;
  for (int k = 0; k < VR_RLW_NARR; k++) na += (flags >> k) & 1;
  const size_t n = sizeof(vr_rlw_hdr_t) + (2 * (size_t)b->n + 1) * 4 + (size_t)b->T * 4 * (1 + (size_t)na) +
                   (up ? sizeof *up : 0);
  unsigned char *p = malloc(n), *q = p;
  if (!p) return NULL;
  vr_rlw_hdr_t h = {VR_RLW_MAGIC, b->n, b->T, flags};
  memcpy(q, &h, sizeof h), q += sizeof h;
  memcpy(q, b->cu, ((size_t)b->n + 1) * 4), q += ((size_t)b->n + 1) * 4;
  memcpy(q, b->resp, (size_t)b->n * 4), q += (size_t)b->n * 4;
  memcpy(q, b->ids, (size_t)b->T * 4), q += (size_t)b->T * 4;
  for (int k = 0; k < VR_RLW_NARR; k++)
    if ((flags >> k) & 1) memcpy(q, b->arr[k], (size_t)b->T * 4), q += (size_t)b->T * 4;
  if (up) memcpy(q, up, sizeof *up);
  *bytes = n;
  return p;
}

/* Views a received batch in place (arrays point into p). Every field is checked: the payload
 * comes from the controller, but a mismatch must fail loudly, not read out of bounds. */
static int unpack(const void *p, size_t bytes, int need_up, vr_rlw_batch_t *b, vr_rlw_update_t *up) {
  memset(b, 0, sizeof *b);
  vr_rlw_hdr_t h;
  if (bytes < sizeof h) return VR_ERR_MALFORMED;
  memcpy(&h, p, sizeof h);
  if (h.magic != VR_RLW_MAGIC || h.n == 0 || h.n > (1u << 24) || h.T > (1u << 30)) return VR_ERR_MALFORMED;
  int na = 0;
  for (int k = 0; k < VR_RLW_NARR; k++) na += (h.flags >> k) & 1;
  const size_t want = sizeof h + (2 * (size_t)h.n + 1) * 4 + (size_t)h.T * 4 * (1 + (size_t)na) +
                      (need_up ? sizeof *up : 0);
  if (bytes != want) return VR_ERR_MALFORMED;
  const unsigned char *q = (const unsigned char *)p + sizeof h;
  b->n = h.n, b->T = h.T;
  b->cu = (uint32_t *)q, q += ((size_t)h.n + 1) * 4;
  b->resp = (uint32_t *)q, q += (size_t)h.n * 4;
  b->ids = (int32_t *)q, q += (size_t)h.T * 4;
  for (int k = 0; k < VR_RLW_NARR; k++)
    if ((h.flags >> k) & 1) b->arr[k] = (float *)q, q += (size_t)h.T * 4;
  if (need_up) memcpy(up, q, sizeof *up);
  if (b->cu[0] != 0 || b->cu[h.n] != h.T) return VR_ERR_MALFORMED;
  for (uint32_t s = 0; s < h.n; s++) {
    const uint32_t len = b->cu[s + 1] - b->cu[s];
    if (b->cu[s + 1] < b->cu[s] || b->resp[s] < 1 || b->resp[s] >= len) return VR_ERR_MALFORMED;
  }
  return 0;
}

/* ---- engines -------------------------------------------------------------------------------- */

static int engine_init(vr_rlworker_t *wk, role_engine_t *e, const char *dir, vr_lm_head_t head, vr_group_t *g,
                       const char *role, int zero1, int forward_only) {
  vr_lm_load_options_t lo = {.head = head, .seed = wk->cfg->rl.seed};
  int rc = vr_lm_load(dir, &lo, &e->lm);
  if (rc != 0) {
    fprintf(stderr, "verl-trainer: rank %d: %s: cannot load the model %s\n", wk->w->rank, role, dir);
    return rc;
  }
  vr_train_options_t o;
  vr_train_options_init(&o);
  /* a GPU worker asks for its device: refused with the engine's message while the CUDA training
   * backend is not in the build (an NCCL group needs device buffers) */
  o.device = wk->dev;
  o.n_threads = 1; /* one process per device; on cpu groups the ranks share the cores */
  o.max_tokens = FWD_TOKENS;
  if (g && vr_group_size(g) > 1) vr_train_comm_group(&o.comm, &e->ref, wk->w, g);
  o.zero1 = zero1; /* optim.zero1: moments sharded over g (vr_train_init ignores it for one rank) */
  o.forward_only = forward_only; /* the reference: log-probs only, no gradient or optimizer memory */
  rc = vr_train_init(e->lm, &o, &e->t);
  if (rc != 0) fprintf(stderr, "verl-trainer: rank %d: %s: the training engine failed (%d)\n", wk->w->rank, role, rc);
  return rc;
}

static int join_writer(role_engine_t *e) {
  if (e->writing) {
    pthread_join(e->writer, NULL);
    e->writing = 0;
  }
  return e->write_rc;
}

/* This rank's part of a checkpoint from the snapshots (rank 0: the model files from e->lm), the
 * optimizer file, then the marker .rank_K_complete the controller's finish waits for (it renames
 * nothing before every rank's marker is there). Runs on the writer thread with async_save. */
static int write_part(role_engine_t *e) {
  char p[2200];
  snprintf(p, sizeof p, "%s/.release", e->write_dir);
  while (e->hold && access(p, F_OK) != 0) { /* tests (--hold-save): a save still in progress */
    struct timespec ts = {0, 5000000L};
    nanosleep(&ts, NULL);
  }
  if (e->hold) unlink(p);
  int rc = e->rank == 0 ? vr_lm_save(e->lm, e->write_dir) : 0;
  if (rc == 0) rc = vr_train_optimizer_write(&e->opt, e->opt_path);
  vr_train_optimizer_snap_free(&e->opt);
  if (rc == 0) {
    snprintf(p, sizeof p, "%s/.rank_%d_complete", e->write_dir, e->rank);
    FILE *f = fopen(p, "w");
    rc = f && fclose(f) == 0 ? 0 : VR_ERR_IO;
  }
  if (rc != 0) fprintf(stderr, "verl-trainer: writing the checkpoint's files into %s failed\n", e->write_dir);
  return rc;
}

static void *writer_main(void *arg) {
  role_engine_t *e = arg;
  e->write_rc = write_part(e);
  return NULL;
}

static void engine_free(role_engine_t *e) {
  join_writer(e);
  vr_train_free(e->t);
  vr_lm_free(e->lm);
}

int vr_rlworker_init(vr_world_t *w, const vr_tconfig_t *cfg, vr_rlworker_t **out) {
  vr_rlworker_t *wk = calloc(1, sizeof *wk);
  if (!wk) return VR_ERR_NOMEM;
  wk->w = w, wk->cfg = cfg;
  wk->roles = w->map->worker_roles[w->worker];
  if (w->cuda_device >= 0) snprintf(wk->dev, sizeof wk->dev, "cuda:%d", w->cuda_device);
  else snprintf(wk->dev, sizeof wk->dev, "cpu");
  const vr_rlconfig_t *rl = &cfg->rl;
  int rc = 0;
  if (wk->roles & (1u << VR_ROLE_ACTOR))
    rc = engine_init(wk, &wk->actor, rl->model_path, VR_LM_HEAD_LM, w->groups[VR_GROUP_ACTOR], "actor",
                     rl->actor.zero1, 0);
  if (rc == 0 && (wk->roles & (1u << VR_ROLE_REFERENCE)))
    rc = engine_init(wk, &wk->reference, rl->model_path, VR_LM_HEAD_LM, NULL, "reference", 0, 1);
  if (rc == 0 && (wk->roles & (1u << VR_ROLE_CRITIC)))
    rc = engine_init(wk, &wk->critic, rl->critic_model_path[0] ? rl->critic_model_path : rl->model_path,
                     VR_LM_HEAD_VALUE, w->groups[VR_GROUP_CRITIC], "critic", rl->critic.zero1, 0);
  if (rc == 0 && (wk->roles & (1u << VR_ROLE_ROLLOUT))) {
    rc = vr_lm_load(rl->model_path, NULL, &wk->roll_lm);
    vr_rollout_options_t ro;
    vr_rollout_options_init(&ro);
    ro.device = wk->dev;
    ro.n_threads = 1;
    ro.max_model_len = (uint32_t)(rl->max_prompt_length + rl->max_response_length);
    if (rl->kv_cache_bytes) ro.kv_cache_bytes = rl->kv_cache_bytes;
    if (rl->max_num_seqs) ro.max_seqs = (uint32_t)rl->max_num_seqs;
    if (rl->max_num_batched_tokens) ro.max_batch_tokens = (uint32_t)rl->max_num_batched_tokens;
    ro.gemm_tune = rl->gemm_tune ? 1 : -1;
    ro.gemm_cache = rl->gemm_cache[0] ? rl->gemm_cache : NULL;
    if (rc == 0) rc = vr_rollout_from_lm(wk->roll_lm, &ro, &wk->view, &wk->roll);
    if (rc == 0)
      rc = vr_gencfg_eos_ids(rl->model_path, vr_lm_config(wk->roll_lm)->vocab_size, wk->stops, MAX_STOP, &wk->n_stop);
    if (rc != 0) fprintf(stderr, "verl-trainer: rank %d: rollout: cannot build the engine for %s\n", w->rank, rl->model_path);
  }
  if (rc != 0) {
    vr_rlworker_free(wk);
    return rc;
  }
  *out = wk;
  return 0;
}

void vr_rlworker_free(vr_rlworker_t *wk) {
  if (!wk) return;
  engine_free(&wk->actor), engine_free(&wk->critic), engine_free(&wk->reference);
  vr_rollout_free(wk->roll);
  vr_rollout_lm_view_free(&wk->view);
  vr_lm_free(wk->roll_lm);
  free(wk);
}

/* ---- commands ------------------------------------------------------------------------------- */

static int do_gen(vr_rlworker_t *wk, vr_group_t *g, const void *p, size_t bytes, void **reply, size_t *rbytes) {
  vr_rlw_gen_t h;
  if (!wk->roll || bytes < sizeof h) return VR_ERR_MALFORMED;
  memcpy(&h, p, sizeof h);
  const size_t want = sizeof h + ((size_t)h.n_prompts + 1) * 4 + (size_t)h.T * 4 + (size_t)h.n_prompts * 8;
  if (h.magic != VR_RLW_MAGIC || h.n_prompts == 0 || h.n == 0 || bytes != want) return VR_ERR_MALFORMED;
  const unsigned char *q = (const unsigned char *)p + sizeof h;
  const uint32_t *cu = (const uint32_t *)q;
  const int32_t *ids = (const int32_t *)(q + ((size_t)h.n_prompts + 1) * 4);
  const unsigned char *seed_bytes = q + ((size_t)h.n_prompts + 1) * 4 + (size_t)h.T * 4; /* u64, unaligned */
  if (cu[0] != 0 || cu[h.n_prompts] != h.T) return VR_ERR_MALFORMED;
  uint32_t lo, hi;
  vr_rlw_slice(h.n_prompts, vr_group_rank(g), vr_group_size(g), &lo, &hi);
  uint32_t *lcu = malloc(((size_t)(hi - lo) + 1) * sizeof *lcu);
  uint64_t *seeds = malloc(((size_t)(hi - lo) + 1) * sizeof *seeds);
  if (!lcu || !seeds) {
    free(lcu), free(seeds);
    return VR_ERR_NOMEM;
  }
  memcpy(seeds, seed_bytes + (size_t)lo * 8, (size_t)(hi - lo) * 8);
  for (uint32_t i = lo; i <= hi; i++) lcu[i - lo] = cu[i] - cu[lo];
  int rc_bad = 0;
  vr_gen_params_t gp;
  vr_gen_params_init(&gp);
  gp.sample.temperature = h.temperature;
  gp.sample.top_p = h.top_p;
  gp.sample.top_k = h.top_k;
  gp.n = h.n;
  gp.max_new_tokens = h.max_new_tokens;
  gp.seeds = seeds;
  gp.stop_ids = wk->stops;
  gp.n_stop = wk->n_stop;
  vr_gen_output_t o;
  memset(&o, 0, sizeof o);
  for (uint32_t i = lo; i < hi; i++)
    if (cu[i + 1] <= cu[i] || cu[i + 1] > h.T) rc_bad = 1;
  int rc = rc_bad ? VR_ERR_MALFORMED : hi > lo ? vr_rollout_generate(wk->roll, ids + cu[lo], lcu, hi - lo, &gp, &o) : 0;
  free(lcu), free(seeds);
  if (rc != 0) return rc;
  /* reply: u32 n_resp, u32 n_tok, u32 lens[n_resp], i32 tokens[n_tok] */
  const uint32_t nr = o.n_resp, nt = nr ? o.cu[nr] : 0;
  *rbytes = 8 + (size_t)nr * 4 + (size_t)nt * 4;
  uint32_t *r = malloc(*rbytes);
  if (!r) {
    vr_gen_output_free(&o);
    return VR_ERR_NOMEM;
  }
  r[0] = nr, r[1] = nt;
  for (uint32_t i = 0; i < nr; i++) r[2 + i] = o.cu[i + 1] - o.cu[i];
  if (nt) memcpy(r + 2 + nr, o.tokens, (size_t)nt * 4);
  vr_gen_output_free(&o);
  *reply = r;
  return 0;
}

/* The rows an engine's forward reads for sequence s's response: head LM the response tokens
 * themselves, head VALUE the token before each (verl's values[:, -L-1:-1]). */
static void fill_mask(const vr_rlw_batch_t *b, uint32_t s0, uint32_t s1, int value_head, uint8_t *mask) {
  const uint32_t base = b->cu[s0];
  memset(mask, 0, b->cu[s1] - base);
  for (uint32_t s = s0; s < s1; s++)
    for (uint32_t t = b->cu[s] + b->resp[s]; t < b->cu[s + 1]; t++) mask[t - value_head - base] = 1;
}

/* Forward over sequences [s0, s1) in token-budget chunks; out[t - cu[s0]] per response row
 * (value head: shifted onto the response token). keep: one chunk only (the caller's micro-batch). */
static int forward_rows(role_engine_t *e, const vr_rlw_batch_t *b, uint32_t s0, uint32_t s1, int value_head,
                        float temperature, float *out, float *ent, int keep) {
  const uint32_t base = b->cu[s0], T = b->cu[s1] - base;
  uint8_t *mask = malloc(T ? T : 1);
  float *tmp = malloc((T ? T : 1) * sizeof *tmp), *tent = ent ? malloc((T ? T : 1) * sizeof *tent) : NULL;
  uint32_t *lcu = malloc(((size_t)(s1 - s0) + 1) * sizeof *lcu), *starts = malloc(((size_t)(s1 - s0) + 1) * sizeof *starts);
  int rc = (!mask || !tmp || !lcu || !starts || (ent && !tent)) ? VR_ERR_NOMEM : 0;
  if (rc == 0) {
    fill_mask(b, s0, s1, value_head, mask);
    for (uint32_t s = s0; s <= s1; s++) lcu[s - s0] = b->cu[s] - base;
    uint32_t nmb = keep ? 1 : vr_train_split(lcu, s1 - s0, FWD_TOKENS, starts);
    if (keep) starts[0] = 0, starts[1] = s1 - s0;
    for (uint32_t m = 0; m < nmb && rc == 0; m++) {
      const uint32_t a = starts[m], z = starts[m + 1], off = lcu[a];
      uint32_t *mcu = malloc(((size_t)(z - a) + 1) * sizeof *mcu);
      if (!mcu) {
        rc = VR_ERR_NOMEM;
        break;
      }
      for (uint32_t s = a; s <= z; s++) mcu[s - a] = lcu[s] - off;
      vr_train_batch_t tb = {b->ids + base + off, mcu, z - a, mask + off};
      rc = vr_train_forward(e->t, &tb, temperature, tmp + off, tent ? tent + off : NULL, keep);
      free(mcu);
    }
  }
  if (rc == 0) {
    memset(out, 0, (size_t)T * sizeof *out);
    if (ent) memset(ent, 0, (size_t)T * sizeof *ent);
    for (uint32_t t = 0; t < T; t++)
      if (mask[t]) {
        out[t + value_head] = tmp[t];
        if (ent) ent[t] = tent[t];
      }
  }
  free(mask), free(tmp), free(tent), free(lcu), free(starts);
  return rc;
}

static int do_rows(vr_rlworker_t *wk, role_engine_t *e, vr_group_t *g, int value_head, const void *p, size_t bytes,
                   double temperature, void **reply, size_t *rbytes) {
  vr_rlw_batch_t b;
  if (!e->t) return VR_ERR_INVAL;
  int rc = unpack(p, bytes, 0, &b, NULL);
  if (rc != 0) return rc;
  uint32_t lo, hi;
  vr_rlw_slice(b.n, vr_group_rank(g), vr_group_size(g), &lo, &hi);
  const uint32_t T = b.cu[hi] - b.cu[lo];
  float *out = malloc((T ? T : 1) * sizeof *out);
  if (!out) return VR_ERR_NOMEM;
  rc = hi > lo ? forward_rows(e, &b, lo, hi, value_head, (float)temperature, out, NULL, 0) : 0;
  (void)wk;
  if (rc != 0) {
    free(out);
    return rc;
  }
  *reply = out;
  *rbytes = (size_t)T * sizeof *out;
  return 0;
}

/* One PPO update (actor or critic) over the batch: epochs x mini-batches, each mini-batch's loss
 * weights over the whole mini-batch (all ranks), this member's slice of it in micro-batches. */
static int do_update(vr_rlworker_t *wk, role_engine_t *e, vr_group_t *g, int critic, const void *p, size_t bytes,
                     double *st) {
  vr_rlw_batch_t b;
  vr_rlw_update_t up;
  if (!e->t) return VR_ERR_INVAL;
  int rc = unpack(p, bytes, 1, &b, &up);
  if (rc != 0) return rc;
  if (critic ? !b.arr[3] || !b.arr[4] : !b.arr[0] || !b.arr[2] || (up.use_kl_loss && !b.arr[1]))
    return VR_ERR_MALFORMED;
  if (up.mini_batch == 0 || up.micro_batch == 0 || up.epochs == 0) return VR_ERR_MALFORMED;
  vr_adamw_t h;
  vr_adamw_init(&h);
  h.lr = (float)up.lr, h.weight_decay = (float)up.weight_decay;
  const vr_pg_clip_t pc = {up.clip_low, up.clip_high, up.clip_c};
  const vr_kl_est_t ke = {(vr_kl_type_t)up.kl_type, up.kl_straight};
  /* response-token layout of the batch for vr_agg_weights: rcu over the responses */
  uint32_t *rcu = malloc(((size_t)b.n + 1) * sizeof *rcu);
  double *w = malloc(((size_t)b.T + 1) * sizeof *w), *wm = malloc(((size_t)b.T + 1) * sizeof *wm);
  uint32_t *mcu = malloc(((size_t)b.n + 1) * sizeof *mcu);
  float *out = malloc(((size_t)b.T + 1) * sizeof *out), *ent = malloc(((size_t)b.T + 1) * sizeof *ent);
  float *dout = malloc(((size_t)b.T + 1) * sizeof *dout), *dent = malloc(((size_t)b.T + 1) * sizeof *dent);
  if (!rcu || !w || !wm || !mcu || !out || !ent || !dout || !dent) rc = VR_ERR_NOMEM;
  memset(st, 0, VR_ST_COUNT * sizeof *st);
  for (uint32_t ep = 0; rc == 0 && ep < up.epochs; ep++)
    for (uint32_t m0 = 0; rc == 0 && m0 < b.n; m0 += up.mini_batch) {
      const uint32_t m1 = m0 + up.mini_batch < b.n ? m0 + up.mini_batch : b.n;
      rcu[0] = 0;
      for (uint32_t s = m0; s < m1; s++) rcu[s - m0 + 1] = rcu[s - m0] + (b.cu[s + 1] - b.cu[s] - b.resp[s]);
      vr_agg_weights((vr_agg_mode_t)up.agg_mode, rcu, m1 - m0, up.horizon, w);
      uint32_t lo, hi;
      vr_rlw_slice(m1 - m0, vr_group_rank(g), vr_group_size(g), &lo, &hi);
      lo += m0, hi += m0;
      rc = vr_train_zero_grad(e->t);
      /* the logged values follow verl's dp_actor (vr_rlstats.h): per micro-batch, its own agg_loss */
      const uint32_t ga = (hi - lo) / up.micro_batch;
      const double scale = 1.0 / (ga ? ga : 1);
      for (uint32_t s0 = lo; rc == 0 && s0 < hi; s0 += up.micro_batch) {
        const uint32_t s1 = s0 + up.micro_batch < hi ? s0 + up.micro_batch : hi, base = b.cu[s0];
        rc = forward_rows(e, &b, s0, s1, critic, (float)up.temperature, out, critic ? NULL : ent, 1);
        if (rc != 0) break;
        const uint32_t T = b.cu[s1] - base;
        memset(dout, 0, (size_t)T * sizeof *dout), memset(dent, 0, (size_t)T * sizeof *dent);
        mcu[0] = 0;
        for (uint32_t s = s0; s < s1; s++) mcu[s - s0 + 1] = mcu[s - s0] + (b.cu[s + 1] - b.cu[s] - b.resp[s]);
        vr_agg_weights((vr_agg_mode_t)up.agg_mode, mcu, s1 - s0, up.horizon, wm);
        vr_rls_micro_t mb;
        memset(&mb, 0, sizeof mb);
        for (uint32_t s = s0; s < s1; s++) {
          const uint32_t r0 = b.cu[s] + b.resp[s];
          for (uint32_t t = r0; t < b.cu[s + 1]; t++) {
            const double wt = w[rcu[s - m0] + (t - r0)], wmt = wm[mcu[s - s0] + (t - r0)];
            const uint32_t i = t - base;
            mb.n_tok += 1;
            if (critic) {
              double gr;
              int clipped;
              double l = vr_vf_token(out[i], b.arr[4][t], b.arr[3][t], up.cliprange_value, &gr, &clipped);
              mb.wvf += wmt * l, mb.vclip += clipped, mb.vpred += out[i];
              dout[i - 1] = (float)(0.5 * wt * gr); /* the value row is the token before */
            } else {
              double gr, nkl, kg = 0;
              int cl, cll;
              double l = vr_pg_token(&pc, out[i], b.arr[0][t], b.arr[2][t], &gr, &cl, &cll, &nkl);
              mb.wpg += wmt * l, mb.clip += cl, mb.clip_lower += cll, mb.neg_kl += -nkl;
              mb.went += wmt * ent[i];
              if (up.use_kl_loss) {
                double kv = vr_kl_value(&ke, out[i], b.arr[1][t], &kg);
                mb.wkl += wmt * kv;
              }
              dout[i] = (float)(wt * (gr + up.kl_loss_coef * (up.use_kl_loss ? kg : 0)));
              dent[i] = (float)(-up.entropy_coeff * wt);
            }
          }
        }
        /* value head: shift the mask's rows back (forward_rows kept the rows before each response
         * token; dout was written there) */
        vr_rls_add_micro(st, &mb, scale);
        rc = vr_train_backward(e->t, dout, critic ? NULL : dent);
      }
      double norm = 0;
      if (rc == 0) rc = vr_train_step(e->t, &h, (float)up.grad_clip, &norm);
      st[VR_ST_GRAD_NORM] += norm;
      st[VR_ST_UPDATES] += 1;
    }
  free(rcu), free(w), free(wm), free(mcu), free(out), free(ent), free(dout), free(dent);
  (void)wk;
  return rc;
}

/* Group rank 0 writes the model, every rank its optimizer shard: both snapshotted into host memory
 * here (parameters into e->lm, moments into e->opt), then written by write_part, on the writer
 * thread with async (the step goes on at once) or here. The previous write is joined first (its
 * status reported now). */
static int save_engine(role_engine_t *e, vr_group_t *g, const char *dir, const char *sub, int async, int hold) {
  int rc = join_writer(e);
  e->write_rc = 0;
  e->rank = vr_group_rank(g), e->hold = hold;
  snprintf(e->write_dir, sizeof e->write_dir, "%s/%s", dir, sub);
  snprintf(e->opt_path, sizeof e->opt_path, "%s/optim_rank_%d.bin", e->write_dir, e->rank);
  if (rc == 0 && mkdir(e->write_dir, 0755) != 0 && errno != EEXIST) rc = VR_ERR_IO;
  if (rc == 0 && e->rank == 0) rc = vr_train_get_params(e->t, vr_lm_params(e->lm), vr_lm_n_floats(e->lm));
  if (rc == 0) rc = vr_train_optimizer_snapshot(e->t, &e->opt);
  if (rc != 0) return rc;
  if (async && pthread_create(&e->writer, NULL, writer_main, e) == 0) {
    e->writing = 1;
    return 0;
  }
  return write_part(e);
}

static int load_engine(role_engine_t *e, vr_group_t *g, const char *dir, const char *sub, vr_lm_head_t head) {
  char path[2048];
  join_writer(e);
  snprintf(path, sizeof path, "%s/%s", dir, sub);
  vr_lm_load_options_t lo = {.head = head};
  vr_lm_t *lm = NULL;
  int rc = vr_lm_load(path, &lo, &lm);
  if (rc == 0) rc = vr_train_set_params(e->t, vr_lm_params(lm), vr_lm_n_floats(lm));
  vr_lm_free(lm);
  snprintf(path, sizeof path, "%s/%s/optim_rank_%d.bin", dir, sub, vr_group_rank(g));
  if (rc == 0) rc = vr_train_load_optimizer(e->t, path);
  if (rc != 0) fprintf(stderr, "verl-trainer: cannot resume the %s from %s/%s\n", sub, dir, sub);
  return rc;
}

int vr_rlworker_loop(vr_rlworker_t *wk, vr_ctl_t *c) {
  vr_world_t *w = wk->w;
  vr_ctl_status(c, "idle", NULL);
  for (;;) {
    vr_ctl_msg_t m;
    void *payload = NULL, *reply = NULL;
    size_t rbytes = 0;
    if (vr_ctl_recv(c, &m, &payload) != 0) vr_world_abort(w, 1, "malformed command from the controller");
    if (m.cmd == VR_RLC_STOP) {
      vr_ctl_status(c, "done", &m);
      vr_ctl_reply(c, &m, 0, NULL, NULL, 0);
      free(payload);
      return 0;
    }
    vr_group_t *g = m.group < VR_GROUP_COUNT ? w->groups[m.group] : NULL;
    double val[4] = {0}, st[VR_ST_COUNT];
    int32_t rc = g ? 0 : VR_ERR_INVAL;
    const size_t pb = (size_t)m.payload_bytes;
    double temp;
    memcpy(&temp, &m.arg[0], sizeof temp);
    if (rc == 0) switch (m.cmd) {
        case VR_RLC_GEN: rc = do_gen(wk, g, payload, pb, &reply, &rbytes); break;
        case VR_RLC_LOGP:
          rc = do_rows(wk, m.group == VR_GROUP_ACTOR ? &wk->actor : &wk->reference, g, 0, payload, pb, temp, &reply,
                       &rbytes);
          break;
        case VR_RLC_VALUES: rc = do_rows(wk, &wk->critic, g, 1, payload, pb, 1.0, &reply, &rbytes); break;
        case VR_RLC_UPDATE_ACTOR:
        case VR_RLC_UPDATE_CRITIC: {
          const int critic = m.cmd == VR_RLC_UPDATE_CRITIC;
          rc = do_update(wk, critic ? &wk->critic : &wk->actor, g, critic, payload, pb, st);
          if (rc == 0) {
            reply = malloc(sizeof st);
            if (reply) memcpy(reply, st, sizeof st), rbytes = sizeof st;
          }
          break;
        }
        case VR_RLC_SYNC: {
          float *params = wk->actor.t ? vr_train_param_buffer(wk->actor.t) : NULL;
          size_t n = wk->actor.t ? vr_train_n_floats(wk->actor.t) : vr_rollout_n_params(wk->roll);
          /* the actor's own buffer (device memory on a device backend): a colocated rollout engine
           * converts straight from it, the others receive it over the group (vr_rollout_sync.h) */
          const int on_dev = wk->actor.t && strcmp(vr_train_device(wk->actor.t), "cpu") != 0;
          rc = wk->actor.t && !params ? VR_ERR_INTERNAL /* the device wait failed, logged */
                                      : vr_rollout_sync_weights(w, g, 0, params, on_dev, n, wk->roll, &val[0]);
          break;
        }
        case VR_RLC_SAVE:
        case VR_RLC_LOAD: {
          char dir[1024];
          if (pb == 0 || pb >= sizeof dir) {
            rc = VR_ERR_MALFORMED;
            break;
          }
          memcpy(dir, payload, pb), dir[pb] = 0;
          const int crit = m.group == VR_GROUP_CRITIC;
          role_engine_t *e = crit ? &wk->critic : &wk->actor;
          if (!e->t) rc = VR_ERR_INVAL;
          else if (m.cmd == VR_RLC_SAVE)
            rc = save_engine(e, g, dir, crit ? "critic" : "actor", m.arg[0] != 0, m.arg[1] != 0);
          else rc = load_engine(e, g, dir, crit ? "critic" : "actor", crit ? VR_LM_HEAD_VALUE : VR_LM_HEAD_LM);
          break;
        }
        default: rc = VR_ERR_INVAL;
      }
    if (rc == VR_COMM_ETIMEDOUT) fprintf(stderr, "verl-trainer: rank %d: %s timed out in a collective\n", w->rank,
                                         m.cmd < VR_RLC_COUNT ? vr_rlc_names[m.cmd] : "?");
    if (vr_ctl_reply(c, &m, rc, val, reply, rbytes) != 0) vr_world_abort(w, 1, "cannot reply to the controller");
    free(payload);
    free(reply);
  }
}
