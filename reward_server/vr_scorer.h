/* vr_scorer.h: what the batcher runs on a packed batch: the reward model (or
 * the checksum transport scorer, or nothing), the configured rule rewards, and
 * the weighted mix of the components (--reward, vr_rules).
 *
 * Replicas (--device cuda:0,cuda:1, cpu,cpu): one model per --device entry, all loaded from
 * the same directory with the same options; replica r is driven by one thread at a time (its
 * batcher worker). checksum and rules-only scorers have no model but as many replicas (workers).
 *
 * Threading: vr_scorer_submit/collect/run for replica r from one thread at a time (replica r's
 * worker); vr_scorer_check_seq() and the read-only accessors from any thread. */
#ifndef VR_SCORER_H
#define VR_SCORER_H

#include <stdint.h>

#include "vr_metrics.h"
#include "vr_rules.h"
#include "vr_settings.h"

struct vr_model;
struct vr_tok;

typedef enum vr_scorer_kind {
  VR_SCORER_MODEL = 0,    /* a Hugging Face model via vr_model */
  VR_SCORER_CHECKSUM = 1, /* vr_checksum: a pure function of the token ids (transport tests, benchmarks) */
  VR_SCORER_NONE = 2,     /* rules only: no model component */
} vr_scorer_kind_t;

typedef struct vr_scorer {
  vr_scorer_kind_t kind;
  uint32_t n_replicas;        /* >= 1: the --device entries */
  char devices[VR_SETTINGS_MAX_REPLICAS][16]; /* replica r's device as loaded ("cpu", "cuda:0") */
  struct vr_model *models[VR_SETTINGS_MAX_REPLICAS]; /* VR_SCORER_MODEL only: replica r's model,
                                 owned; a reload switches them (atomic stores, vr_batcher.h) */
  vr_reward_spec_t spec;      /* components in spec order */
  int has_components;         /* 1 when responses carry "components" (any rule configured) */
  uint32_t vocab_size;        /* 0: any non-negative id accepted */
  uint32_t max_seq_len;       /* effective: --max-seq-len capped by the model's positions */
  vr_truncate_t truncate;
  char description[2400];     /* start-up line / GET /v1/model summary */
  struct vr_tok *tok;         /* the model directory's tokenizer (text / messages requests), or
                                 NULL; owned; read-only after init (any thread) */
  char tok_note[400];         /* why tok is NULL (no tokenizer.json, or its load error) */
} vr_scorer_t;

/* Loads the model named by settings (directory, "checksum" or "" for rules-only), once per
 * --device entry (all or none: a failed replica frees the ones loaded), and parses --reward.
 * A cuda replica after the first is loaded only when its GPU has the memory the first one took
 * free (else VR_ERR_NOMEM naming the device, the bytes needed and free). Returns 0 or a negative vr_status_t after logging why.
 * A model directory holding tokenizer.json also gets its tokenizer (sc->tok); one that does
 * not load is a WARN (token ids are still served) with the reason in sc->tok_note. */
int vr_scorer_init(vr_scorer_t *sc, const vr_settings_t *st);
void vr_scorer_free(vr_scorer_t *sc);

/* Validates one sequence of len tokens: 0, VR_ERR_EMPTY_SEQ, VR_ERR_SEQ_TOO_LONG
 * (truncate=error), VR_ERR_TOKEN_RANGE (on the part that will be kept). On
 * error, *bad_pos (if non-NULL) gets the offending position (or -1) so the
 * caller can name it. Thread-safe. */
int vr_scorer_check_seq(const vr_scorer_t *sc, const int32_t *ids, uint32_t len, int64_t *bad_pos);

/* The kept window of a sequence of len tokens after truncation. */
void vr_scorer_window(const vr_scorer_t *sc, uint32_t len, uint32_t *start, uint32_t *kept);

/* Scores a packed batch on replica r (ids already truncated: sequence i is
 * ids[cu[i] .. cu[i+1])). extras[i] may be NULL (or extras NULL); resp_tokens[i]
 * is the response token count fed to overlong (the original length). Writes
 * totals to scores[n], statuses to seq_status[n] (0 or an error; NaN score),
 * components to comps[n * spec.n] (row per sequence, spec order), and counts
 * per component in metrics (may be NULL). Returns 0 or a vr_status_t when
 * nothing could be scored. */
int vr_scorer_run(vr_scorer_t *sc, uint32_t r, const int32_t *ids, const uint32_t *cu, uint32_t n_seqs,
                  const vr_extras_t *const *extras, const uint32_t *resp_tokens, float *scores,
                  int32_t *seq_status, float *comps, vr_metrics_t *metrics);

/* Pipelined form of vr_scorer_run for the batcher (same arguments, split in two):
 * vr_scorer_submit() starts the model's forward of a packed batch (on cuda it
 * returns while the device computes; checksum / rules-only compute here) and
 * vr_scorer_collect() waits for the OLDEST submitted batch, then adds the rule
 * components and the mix. Every submit is matched by exactly one collect, in
 * order, with the same buffers (they must stay untouched in between). At most
 * vr_scorer_pipeline_depth() batches may be outstanding per replica (2 on cuda, else 1).
 * submit's return value is handed to collect as submit_rc. Replica r's worker thread only. */
int vr_scorer_pipeline_depth(const vr_scorer_t *sc);
int vr_scorer_submit(vr_scorer_t *sc, uint32_t r, const int32_t *ids, const uint32_t *cu, uint32_t n_seqs, float *scores,
                     int32_t *seq_status);
int vr_scorer_collect(vr_scorer_t *sc, uint32_t r, int submit_rc, const uint32_t *cu, uint32_t n_seqs,
                      const vr_extras_t *const *extras, const uint32_t *resp_tokens, float *scores,
                      int32_t *seq_status, float *comps, vr_metrics_t *metrics);

/* On every replica: one forward of a short sequence (token ids 0..7) so the first client does not pay for lazy
 * setup, and so a model whose weights give NaN/Inf is refused before it serves: 0, or
 * VR_ERR_NONFINITE after an ERROR naming model_name (with a HINT); the replicas' scores must agree
 * bit for bit (else VR_ERR_INTERNAL naming the devices): the cpu backend promises it, the cuda
 * backend computes the same kernels on the same bucket. No-op without a model.
 * The caller's thread must be the only one running sc (start-up, or a reload's new scorer). */
int vr_scorer_warm_up(vr_scorer_t *sc, const char *model_name);

#endif /* VR_SCORER_H */
