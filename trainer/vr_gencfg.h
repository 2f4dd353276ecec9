/* vr_gencfg.h: the stop ids a Hugging Face checkpoint names (generation_config.json's
 * "eos_token_id", else config.json's), for the rollout engine.
 *
 * eos_token_id is an integer or a list of integers (transformers accepts both); null or absent
 * means none. Ids outside [0, vocab) are skipped with a warning (they can never be sampled). The
 * files are untrusted: anything else is VR_ERR_MODEL_FORMAT with the path and the problem logged.
 * Threading: no shared state. */
#ifndef VR_GENCFG_H
#define VR_GENCFG_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Parses one JSON text (len bytes; path for messages): 1 when it names eos_token_id (its ids in
 * ids, at most cap, *n their count), 0 when it does not (absent or null), or VR_ERR_MODEL_FORMAT
 * (not a JSON object, eos_token_id of another type, a list holding a non-integer). */
int vr_gencfg_eos_parse(const char *json, size_t len, const char *path, int vocab, int32_t *ids, uint32_t cap,
                        uint32_t *n);

/* dir/generation_config.json, then dir/config.json: the first that names eos_token_id wins (as
 * transformers' GenerationConfig.from_model_config). A missing file is skipped; *n = 0 when neither
 * names one. 0, VR_ERR_MODEL_FORMAT, or VR_ERR_IO (a file that exists but cannot be read, or over
 * 1 MiB). */
int vr_gencfg_eos_ids(const char *dir, int vocab, int32_t *ids, uint32_t cap, uint32_t *n);

#ifdef __cplusplus
}
#endif
#endif /* VR_GENCFG_H */
