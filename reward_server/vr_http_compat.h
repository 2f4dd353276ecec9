/* vr_http_compat.h: the request shapes other serving stacks answer, on the server's own HTTP
 * port (issue 17). Each route is parsed into the same vr_score_req_t as POST /v1/score, goes
 * through the same batcher, limits and error replies; only the body shapes differ.
 *
 *   POST /classify        vLLM   {"model"?, "input": str | [str] | [int] | [[int]],
 *   POST /v1/classify     SGLang  "use_activation"? | "activation"?}, or vLLM's chat form
 *                                {"messages": [conversation], "add_generation_prompt"?, ...}
 *                         -> {"id": "classify-<32 hex>", "object": "list", "created", "model",
 *                             "data": [{"index", "label": "LABEL_0", "probs": [p], "num_classes": 1}],
 *                             "usage": {"prompt_tokens", "total_tokens", "completion_tokens": 0,
 *                                       "prompt_tokens_details": null}}
 *                         p = sigmoid(score) unless use_activation (or vLLM < 0.11.2's
 *                         "activation") is false: vLLM's PoolerClassify for one label.
 *   POST /v1/embeddings   SGLang {"model"?, "input": as above}
 *                         -> {"data": [{"embedding": [score], "index", "object": "embedding"}],
 *                             "model", "object": "list", "usage": {...as above}}  (raw score)
 *   POST /get_reward      OpenRLHF {"query": [str], "prompts"?: [str|null], "labels"?: [...]}
 *                         -> {"rewards": [r], "scores": [r], "extra_logs": {component: [x]}}
 *                         label i -> extras ground_truth, query minus its prompt -> solution_str;
 *                         extensions: "input_ids": [[int]] (the model's tokens of each query),
 *                         "data_source": str (every sample's, for the rules).
 *   POST /predict         TEI {"inputs": str | [str] | [str, str] | [[str] | [str, str], ...],
 *                              "raw_scores"?: bool}
 *                         -> [{"score", "label": "LABEL_0"}] (one input) or a list of those
 *                         (batch); score = sigmoid unless raw_scores (TEI's infer.rs);
 *                         extension "input_ids": [[int]], one per text.
 *   GET  /v1/models       OpenAI model list; GET /info TEI's Info.
 *
 * Text (str) inputs become POST /v1/score's {"text": [...], "add_special_tokens"} (vr_text.h):
 * the HTTP text worker encodes them with the model directory's tokenizer before the batcher
 * (vLLM input with its "add_special_tokens", default true; OpenRLHF queries without special
 * tokens, as its serve_rm.py; TEI texts with them). Without a tokenizer they are answered with
 * VR_ERR_UNSUPPORTED (HTTP 400) naming the field and the reason (rules-only servers take
 * /get_reward texts as they are). Bodies are JSON only (untrusted; every limit of vr_request
 * applies).
 *
 * Threading: pure functions of their inputs; call from the event-loop thread (they allocate). */
#ifndef VR_HTTP_COMPAT_H
#define VR_HTTP_COMPAT_H

#include <stddef.h>
#include <stdint.h>

#include "vr_request.h"
#include "vr_server.h"

struct evbuffer;

typedef enum vr_compat_route {
  VR_COMPAT_NONE = 0,      /* not a compat path */
  VR_COMPAT_CLASSIFY,      /* POST /classify, /v1/classify */
  VR_COMPAT_EMBEDDINGS,    /* POST /v1/embeddings */
  VR_COMPAT_GET_REWARD,    /* POST /get_reward */
  VR_COMPAT_PREDICT,       /* POST /predict */
  VR_COMPAT_MODELS,        /* GET /v1/models */
  VR_COMPAT_INFO,          /* GET /info */
} vr_compat_route_t;

/* The route of a path (query string already removed); VR_COMPAT_NONE when it is none of ours. */
vr_compat_route_t vr_compat_route(const char *path);

/* 1 for the POST routes, 0 for the GET ones. */
int vr_compat_is_post(vr_compat_route_t r);

/* What the reply needs to know about the request it answers (opaque; owned by the caller). */
typedef struct vr_compat_req vr_compat_req_t;

/* Parses a JSON body of POST route r into *out (the /v1/score form; free with vr_request_free)
 * and *cr (free with vr_compat_free). Returns 0, or a negative vr_status_t with *e naming the
 * field (nothing to free then). model_name: the "model" echoed when the body has none. */
int vr_compat_parse(vr_compat_route_t r, const char *body, size_t len, const vr_scorer_t *sc, uint32_t max_seqs,
                    const char *model_name, vr_score_req_t *out, vr_compat_req_t **cr, vr_req_error_t *e);

/* Appends the 200 body answering cr: scores (n), components (n x sc->spec.n, row per sequence;
 * may be NULL when sc->has_components is 0), n_tokens the request's token count. now_s is the
 * "created" time; id16 16 random bytes for the "id" (both passed in so tests are exact). */
void vr_compat_reply(const vr_compat_req_t *cr, const vr_scorer_t *sc, const float *scores, const float *components,
                     uint32_t n, uint64_t n_tokens, int64_t now_s, const uint8_t id16[16], struct evbuffer *b);

void vr_compat_free(vr_compat_req_t *cr);

/* 16 bytes from getrandom() for a reply "id" (a clock-and-address mix if that fails). */
void vr_compat_random_id(uint8_t id16[16]);

/* Appends the body of GET route r (VR_COMPAT_MODELS / VR_COMPAT_INFO); srv must be ready. */
void vr_compat_get(vr_compat_route_t r, const vr_server_t *srv, int64_t now_s, struct evbuffer *b);

#endif /* VR_HTTP_COMPAT_H */
