/* vr_dataset.h: the RL prompt dataset (issue 22): JSON lines as verl writes its parquet rows
 * (tools/parquet_to_jsonl.py converts verl's files), one prompt per line:
 *
 *   {"prompt": [{"role": "user", "content": "..."}], "data_source": "openai/gsm8k",
 *    "reward_model": {"ground_truth": "72", "style": "rule"}, "extra_info": {...}}
 *
 * The prompt key is data.prompt_key ("prompt"): chat messages, rendered with the policy's chat
 * template (tokenizer_config.json of the model directory, add_generation_prompt = true) and
 * encoded without special tokens, as verl's RLHFDataset (apply_chat_template(tokenize=True)).
 * A row may instead give "input_ids": [..] (pre-tokenised; then no tokenizer is needed).
 * ground_truth may be a string or a number (kept as its JSON text); extra_info any JSON (kept as
 * compact JSON text); both optional, as is data_source.
 *
 * max_prompt_length with verl's data.truncation: error (a longer prompt fails the load naming
 * the line), left (keep the last N tokens), right (the first N), middle (the first N/2 and the
 * last N - N/2). Every line is checked on load; an error names file:line and the field. A line
 * must be valid UTF-8 and exactly one JSON object (vr_jsonl.h: no text after it), and a key that
 * is read (input_ids, the prompt key, data_source, reward_model, extra_info) may appear once.
 *
 * Sampling (verl's StatefulDataLoader with drop_last): an epoch is a permutation of the rows
 * (data.shuffle: Fisher-Yates from splitmix64(seed, epoch); else file order) cut into
 * floor(n / batch) batches; the state (epoch, batch index) is all a checkpoint needs to resume
 * the same order. Threading: a dataset is read-only after load; the sampler is plain data. */
#ifndef VR_DATASET_H
#define VR_DATASET_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vr_tok vr_tok_t;

typedef struct vr_prompt_row {
  int32_t *ids;       /* (n_ids) after truncation */
  uint32_t n_ids;
  char *data_source;  /* "" when absent */
  char *ground_truth; /* NULL when absent */
  char *extra_info;   /* compact JSON or NULL */
} vr_prompt_row_t;

typedef struct vr_dataset {
  vr_prompt_row_t *rows;
  uint32_t n_rows;
  uint32_t n_truncated;
} vr_dataset_t;

typedef struct vr_dataset_options {
  const char *prompt_key;     /* "prompt" */
  uint32_t max_prompt_length;
  int truncation;             /* vr_trunc_t (vr_rlconfig.h) */
  int32_t vocab_size;         /* ids must be < this (0: unchecked) */
  const vr_tok_t *tok;        /* NULL: only input_ids rows */
} vr_dataset_options_t;

/* Loads path. 0, or a negative vr_status_t with "path:line: ..." in err. */
int vr_dataset_load(const char *path, const vr_dataset_options_t *opt, vr_dataset_t *ds, char *err, size_t cap);
void vr_dataset_free(vr_dataset_t *ds);
/* One line (len bytes, need not be NUL-terminated) into *row: 0, 1 (accepted, truncated), or a
 * negative vr_status_t with the problem in why (row zeroed). vr_prompt_row_free releases a row. */
int vr_dataset_parse_line(const char *line, size_t len, const vr_dataset_options_t *opt, vr_prompt_row_t *row,
                          char *why, size_t wn);
void vr_prompt_row_free(vr_prompt_row_t *r);

/* verl's truncation on ids[n] to max: returns the new length (ids rewritten in place), or -1 for
 * VR_TRUNC_ERROR when n > max. */
int64_t vr_dataset_truncate(int32_t *ids, size_t n, size_t max, int truncation);

typedef struct vr_sampler {
  uint64_t seed;
  int shuffle;
  uint32_t n_rows, batch;
  uint64_t epoch;   /* current epoch (0-based) */
  uint64_t index;   /* next batch within the epoch */
} vr_sampler_t;

/* batch <= n_rows, else VR_ERR_INVAL. */
int vr_sampler_init(vr_sampler_t *s, uint32_t n_rows, uint32_t batch, uint64_t seed, int shuffle);
uint32_t vr_sampler_batches_per_epoch(const vr_sampler_t *s);
/* The next batch's row indices (batch of them) and its epoch; advances (a new epoch after the
 * last full batch). 0 or VR_ERR_NOMEM (nothing advanced). */
int vr_sampler_next(vr_sampler_t *s, uint32_t *rows, uint64_t *epoch);

#ifdef __cplusplus
}
#endif
#endif /* VR_DATASET_H */
