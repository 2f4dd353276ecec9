/* vr_http_compat.c: vLLM / SGLang / OpenRLHF / TEI request shapes -> the /v1/score request.
 *
 * Every body is rewritten into the /v1/score JSON form ({"input_ids", "extras"}) and parsed by
 * vr_request_parse_json, so limits, token checks and messages are the same as POST /v1/score's
 * (with the field renamed to the one the caller sent). Sources the shapes were read from are
 * cited in docs/protocol.md. */
#define _GNU_SOURCE
#include "vr_http_compat.h"

#include <cjson/cJSON.h>
#include <event2/buffer.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "verl_reward/status.h"
#include "vr_build_info.h"
#include "vr_model.h"
#include "vr_time.h"

struct vr_compat_req {
  vr_compat_route_t route;
  int activation; /* classify: sigmoid (use_activation); predict: sigmoid (!raw_scores) */
  int batch;      /* predict: the reply is a list of lists (TEI's PredictResponse::Batch) */
  char *model;    /* classify / embeddings: "model" of the reply (owned) */
};

vr_compat_route_t vr_compat_route(const char *path) {
  if (!strcmp(path, "/classify") || !strcmp(path, "/v1/classify")) return VR_COMPAT_CLASSIFY;
  if (!strcmp(path, "/v1/embeddings")) return VR_COMPAT_EMBEDDINGS;
  if (!strcmp(path, "/get_reward")) return VR_COMPAT_GET_REWARD;
  if (!strcmp(path, "/predict")) return VR_COMPAT_PREDICT;
  if (!strcmp(path, "/v1/models")) return VR_COMPAT_MODELS;
  if (!strcmp(path, "/info")) return VR_COMPAT_INFO;
  return VR_COMPAT_NONE;
}

int vr_compat_is_post(vr_compat_route_t r) { return r != VR_COMPAT_NONE && r != VR_COMPAT_MODELS && r != VR_COMPAT_INFO; }

void vr_compat_free(vr_compat_req_t *cr) {
  if (!cr) return;
  free(cr->model);
  free(cr);
}

void vr_compat_random_id(uint8_t id16[16]) {
  if (getrandom(id16, 16, GRND_NONBLOCK) == 16) return;
  uint64_t a = vr_now_ns(), b = (uint64_t)(uintptr_t)id16 * 0x9e3779b97f4a7c15ull;
  memcpy(id16, &a, 8);
  memcpy(id16 + 8, &b, 8);
}

/* ------------------------------------------------------------------ parsing */

#define fail vr_req_fail /* vr_request.h's error helper */

/* Text where the model needs token ids and the server has no tokenizer (the reason named). */
static int text_unsupported(const vr_scorer_t *sc, vr_req_error_t *e, const char *field, const char *ids_hint) {
  return fail(e, VR_ERR_UNSUPPORTED, -1, "\"%s\": text input needs the reward model's tokenizer, which this server "
              "does not have (%s); %s", field, sc->kind != VR_SCORER_MODEL ? "no model is loaded"
              : sc->tok_note[0] ? sc->tok_note : "no tokenizer", ids_hint);
}

/* Texts for the model: norm["text"] (a copy of the strings) + "add_special_tokens", which the
 * server encodes with the model directory's tokenizer as POST /v1/score {"text"} does. `texts`
 * is one string, or an array whose items are strings (or, pick_first, arrays whose first item
 * is the string: TEI's batch). */
static int take_texts(const vr_scorer_t *sc, cJSON *norm, const cJSON *texts, int pick_first, int special,
                      const char *field, const char *ids_hint, vr_req_error_t *e) {
  if (sc->kind != VR_SCORER_MODEL || !sc->tok) return text_unsupported(sc, e, field, ids_hint);
  cJSON *arr = cJSON_AddArrayToObject(norm, "text");
  if (!arr || !cJSON_AddBoolToObject(norm, "add_special_tokens", special)) return fail(e, VR_ERR_NOMEM, -1, "out of memory");
  if (cJSON_IsString(texts)) {
    cJSON *x = cJSON_CreateString(texts->valuestring);
    if (!x) return fail(e, VR_ERR_NOMEM, -1, "out of memory");
    cJSON_AddItemToArray(arr, x);
    return 0;
  }
  for (const cJSON *it = texts->child; it; it = it->next) {
    cJSON *x = cJSON_CreateString(pick_first ? it->child->valuestring : it->valuestring);
    if (!x) return fail(e, VR_ERR_NOMEM, -1, "out of memory");
    cJSON_AddItemToArray(arr, x);
  }
  return 0;
}

/* vr_request names "input_ids"; the caller sent `field`: rewrite every occurrence in the message. */
static void rename_field(vr_req_error_t *e, const char *field) {
  char out[sizeof e->message];
  size_t o = 0;
  const char *s = e->message, *hit;
  const size_t fl = strlen(field);
  while ((hit = strstr(s, "input_ids")) && o + (size_t)(hit - s) + fl + 1 < sizeof out) {
    memcpy(out + o, s, (size_t)(hit - s));
    o += (size_t)(hit - s);
    memcpy(out + o, field, fl);
    o += fl;
    s = hit + 9;
  }
  snprintf(out + o, sizeof out - o, "%s", s);
  memcpy(e->message, out, sizeof out);
}

/* An optional boolean: absent or null -> def. */
static int opt_bool(const cJSON *root, const char *key, int def, int *out, vr_req_error_t *e) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
  if (!v || cJSON_IsNull(v)) {
    *out = def;
    return 0;
  }
  if (!cJSON_IsBool(v)) return fail(e, VR_ERR_MALFORMED, -1, "\"%s\" must be true or false (wrong type)", key);
  *out = cJSON_IsTrue(v);
  return 0;
}

/* vLLM's chat form of /classify (ClassificationChatRequest): {"messages": [one conversation],
 * "add_generation_prompt"?, "chat_template_kwargs"?} -> norm["messages"] for the chat template;
 * vLLM's add_special_tokens (default false there) and continue_final_message are refused when
 * true (the template writes the special tokens; no open final message). */
static int take_messages(cJSON *root, cJSON *norm, const vr_scorer_t *sc, vr_req_error_t *e) {
  int special = 0, cont = 0, rc;
  if ((rc = opt_bool(root, "add_special_tokens", 0, &special, e)) ||
      (rc = opt_bool(root, "continue_final_message", 0, &cont, e)))
    return rc;
  if (special || cont)
    return fail(e, VR_ERR_UNSUPPORTED, -1, "\"%s\": true is not supported with \"messages\"",
                special ? "add_special_tokens" : "continue_final_message");
  if (sc->kind != VR_SCORER_MODEL || !sc->tok)
    return text_unsupported(sc, e, "messages", "send the conversation rendered and tokenised as \"input\": [int]");
  static const char *const keys[] = {"messages", "add_generation_prompt", "chat_template_kwargs"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    cJSON *v = cJSON_DetachItemFromObjectCaseSensitive(root, keys[i]);
    if (v) cJSON_AddItemToObject(norm, keys[i], v);
  }
  return 0;
}

/* "input" of vLLM / SGLang: token ids into norm["input_ids"], texts into norm["text"]
 * (vLLM's "add_special_tokens", default true, applies to them); vLLM's chat form. */
static int take_input(cJSON *root, cJSON *norm, const vr_scorer_t *sc, vr_req_error_t *e) {
  const cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "input");
  const char *hint = "send token ids ([int] for one sequence, [[int]] for several)";
  if (!in && cJSON_GetObjectItemCaseSensitive(root, "messages")) return take_messages(root, norm, sc, e);
  int special = 1;
  int rc = opt_bool(root, "add_special_tokens", 1, &special, e);
  if (rc) return rc;
  if (!in)
    return fail(e, VR_ERR_MALFORMED, -1, "missing \"input\" (a string, a list of strings, [int] or [[int]]) "
                "or \"messages\" (one conversation)");
  if (cJSON_IsString(in)) return take_texts(sc, norm, in, 0, special, "input", hint, e);
  if (!cJSON_IsArray(in))
    return fail(e, VR_ERR_MALFORMED, -1, "\"input\" must be a string, a list of strings, [int] or [[int]] (wrong type)");
  if (!in->child) return fail(e, VR_ERR_MALFORMED, -1, "\"input\" is empty: no sequences to score");
  if (cJSON_IsString(in->child)) {
    uint32_t i = 0;
    for (const cJSON *x = in->child; x; x = x->next, i++)
      if (!cJSON_IsString(x))
        return fail(e, VR_ERR_MALFORMED, i, "input[%u] must be a string like input[0] (wrong type)", i);
    return take_texts(sc, norm, in, 0, special, "input", hint, e);
  }
  cJSON_AddItemToObject(norm, "input_ids", cJSON_DetachItemFromObjectCaseSensitive(root, "input"));
  return 0;
}

/* The input_ids extension must give one sequence per item (a flat [int] is one); other
 * shapes are left for vr_request to name. */
static int ids_match(const cJSON *ids, int n, const char *items, vr_req_error_t *e) {
  const int k = cJSON_IsArray(ids) && ids->child && cJSON_IsNumber(ids->child) ? 1 : cJSON_GetArraySize(ids);
  if (cJSON_IsArray(ids) && k != n)
    return fail(e, VR_ERR_MALFORMED, -1, "\"input_ids\" has %d sequences for %d %s", k, n, items);
  return 0;
}

/* OpenRLHF's body -> norm["extras"] (and the input_ids extension). */
static int take_get_reward(cJSON *root, cJSON *norm, const vr_scorer_t *sc, vr_req_error_t *e) {
  const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "query");
  const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompts");
  const cJSON *l = cJSON_GetObjectItemCaseSensitive(root, "labels");
  if (!cJSON_IsArray(q)) return fail(e, VR_ERR_MALFORMED, -1, "\"query\" must be a list of strings (%s)", q ? "wrong type" : "missing");
  const int n = cJSON_GetArraySize(q);
  if (p && cJSON_IsNull(p)) p = NULL;
  if (l && cJSON_IsNull(l)) l = NULL;
  if (p && (!cJSON_IsArray(p) || cJSON_GetArraySize(p) != n))
    return fail(e, VR_ERR_MALFORMED, -1, "\"prompts\" must be a list as long as \"query\" (%d)", n);
  if (l && (!cJSON_IsArray(l) || cJSON_GetArraySize(l) != n))
    return fail(e, VR_ERR_MALFORMED, -1, "\"labels\" must be a list as long as \"query\" (%d)", n);
  const cJSON *ds = cJSON_GetObjectItemCaseSensitive(root, "data_source"); /* extension: every sample's */
  if (ds && !cJSON_IsString(ds) && !cJSON_IsNull(ds))
    return fail(e, VR_ERR_MALFORMED, -1, "\"data_source\" must be a string (wrong type)");
  cJSON *ex = cJSON_AddArrayToObject(norm, "extras");
  if (!ex) return fail(e, VR_ERR_NOMEM, -1, "out of memory");
  const cJSON *qi = q->child, *pi = p ? p->child : NULL, *li = l ? l->child : NULL;
  for (int i = 0; qi; i++, qi = qi->next, pi = pi ? pi->next : NULL, li = li ? li->next : NULL) {
    if (!cJSON_IsString(qi)) return fail(e, VR_ERR_MALFORMED, i, "query[%d] must be a string (wrong type)", i);
    if (pi && !cJSON_IsString(pi) && !cJSON_IsNull(pi))
      return fail(e, VR_ERR_MALFORMED, i, "prompts[%d] must be a string or null (wrong type)", i);
    const char *qs = qi->valuestring, *ps = cJSON_IsString(pi) ? pi->valuestring : NULL;
    /* the response part: OpenRLHF's query is prompt + response, decoded together */
    const size_t pl = ps ? strlen(ps) : 0;
    const char *sol = pl && !strncmp(qs, ps, pl) ? qs + pl : qs;
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "solution_str", sol)) {
      cJSON_Delete(o);
      return fail(e, VR_ERR_NOMEM, -1, "out of memory");
    }
    cJSON_AddItemToArray(ex, o);
    if (cJSON_IsString(ds) && !cJSON_AddStringToObject(o, "data_source", ds->valuestring))
      return fail(e, VR_ERR_NOMEM, -1, "out of memory");
    if (li && !cJSON_IsNull(li)) {
      /* strings and numbers as vr_extras takes them; anything else as its JSON text */
      cJSON *gt = cJSON_IsString(li) || cJSON_IsNumber(li) ? cJSON_Duplicate(li, 0) : NULL;
      if (!gt) {
        char *t = cJSON_PrintUnformatted(li);
        gt = t ? cJSON_CreateString(t) : NULL;
        free(t);
      }
      if (!gt) return fail(e, VR_ERR_NOMEM, -1, "out of memory");
      cJSON_AddItemToObject(o, "ground_truth", gt);
    }
  }
  cJSON *ids = cJSON_DetachItemFromObjectCaseSensitive(root, "input_ids");
  if (ids) {
    cJSON_AddItemToObject(norm, "input_ids", ids);
    return ids_match(ids, n, "queries in \"query\"", e);
  } else if (sc->kind != VR_SCORER_NONE && n > 0) /* OpenRLHF's serve_rm.py encodes with add_special_tokens=False */
    return take_texts(sc, norm, q, 0, 0, "query",
                      "add \"input_ids\": [[int]] (the queries' token ids) or use a rules-only server", e);
  return 0;
}

/* TEI's PredictInput: one text, a pair, or a batch of texts / pairs. Every form is text; the
 * extension "input_ids" ([[int]], one per text) gives the model its tokens. */
static int take_predict(cJSON *root, cJSON *norm, const vr_scorer_t *sc, vr_compat_req_t *cr, vr_req_error_t *e) {
  const cJSON *in = cJSON_GetObjectItemCaseSensitive(root, "inputs");
  const char *hint = "TEI's /predict takes texts only (token ids: POST /v1/score or /classify)";
  if (!in) return fail(e, VR_ERR_MALFORMED, -1, "missing \"inputs\" (a string, a pair [string, string] or a batch)");
  if (!cJSON_IsString(in) && (!cJSON_IsArray(in) || !in->child))
    return fail(e, VR_ERR_MALFORMED, -1, "\"inputs\" must be a string, a pair of strings or a batch of "
                "[string] / [string, string] (%s)", cJSON_IsArray(in) ? "empty" : "wrong type");
  int pairs = 0, n = 1;
  if (cJSON_IsString(in)) {
    /* one text */
  } else if (cJSON_IsString(in->child)) { /* [a] is one text, [a, b] one pair, longer is refused */
    const int k = cJSON_GetArraySize(in);
    if (k > 2 || (k == 2 && !cJSON_IsString(in->child->next)))
      return fail(e, VR_ERR_MALFORMED, -1, "\"inputs\" as a list of strings is one text or one pair: %d items", k);
    pairs = k == 2;
  } else {
    cr->batch = 1;
    uint32_t i = 0;
    for (const cJSON *x = in->child; x; x = x->next, i++) {
      const int k = cJSON_IsArray(x) ? cJSON_GetArraySize(x) : 0;
      if (k < 1 || k > 2 || !cJSON_IsString(x->child) || (k == 2 && !cJSON_IsString(x->child->next)))
        return fail(e, VR_ERR_MALFORMED, i, "inputs[%u] must be [string] or [string, string]", i);
      pairs |= k == 2;
    }
    n = (int)i;
  }
  if (pairs) return fail(e, VR_ERR_UNSUPPORTED, -1, "\"inputs\": text pairs are not scored (a reward model scores one text)");
  cJSON *ids = cJSON_DetachItemFromObjectCaseSensitive(root, "input_ids");
  if (!ids) /* TEI encodes with the tokenizer's special tokens */
    return take_texts(sc, norm, in, cr->batch, 1, "inputs", hint, e);
  cJSON_AddItemToObject(norm, "input_ids", ids);
  return ids_match(ids, n, "texts in \"inputs\"", e);
}

int vr_compat_parse(vr_compat_route_t r, const char *body, size_t len, const vr_scorer_t *sc, uint32_t max_seqs,
                    const char *model_name, vr_score_req_t *out, vr_compat_req_t **crp, vr_req_error_t *e) {
  memset(out, 0, sizeof *out);
  memset(e, 0, sizeof *e);
  *crp = NULL;
  cJSON *root = NULL;
  int prc = vr_request_parse_body(body, len, &root, e);
  if (prc) return prc;
  vr_compat_req_t *cr = calloc(1, sizeof *cr);
  cJSON *norm = cJSON_CreateObject();
  int rc = 0;
  const char *field = "input";
  if (!cr || !norm) {
    rc = fail(e, VR_ERR_NOMEM, -1, "out of memory");
    goto out;
  }
  cr->route = r;
  if (!cJSON_IsObject(root)) {
    rc = fail(e, VR_ERR_MALFORMED, -1, "body must be a JSON object");
    goto out;
  }
  if (r == VR_COMPAT_CLASSIFY || r == VR_COMPAT_EMBEDDINGS) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (m && !cJSON_IsString(m) && !cJSON_IsNull(m)) {
      rc = fail(e, VR_ERR_MALFORMED, -1, "\"model\" must be a string (wrong type)");
      goto out;
    }
    cr->model = strdup(cJSON_IsString(m) ? m->valuestring : model_name);
    if (!cr->model) {
      rc = fail(e, VR_ERR_NOMEM, -1, "out of memory");
      goto out;
    }
    /* vLLM >= 0.11.2 "use_activation", before it "activation"; unset means the pooler's default: on */
    int legacy = 1;
    if (r == VR_COMPAT_CLASSIFY && ((rc = opt_bool(root, "activation", 1, &legacy, e)) ||
                                    (rc = opt_bool(root, "use_activation", legacy, &cr->activation, e))))
      goto out;
    rc = take_input(root, norm, sc, e);
  } else if (r == VR_COMPAT_GET_REWARD) {
    field = "input_ids";
    rc = take_get_reward(root, norm, sc, e);
  } else if (r == VR_COMPAT_PREDICT) {
    field = "input_ids";
    if (!(rc = opt_bool(root, "raw_scores", 0, &cr->activation, e))) {
      cr->activation = !cr->activation;
      rc = take_predict(root, norm, sc, cr, e);
    }
  } else {
    rc = fail(e, VR_ERR_INVAL, -1, "not a POST route");
  }
  if (rc) goto out;
  char *text = cJSON_PrintUnformatted(norm);
  if (!text) {
    rc = fail(e, VR_ERR_NOMEM, -1, "out of memory");
    goto out;
  }
  rc = vr_request_parse_json(text, strlen(text), sc, max_seqs, out, e);
  free(text);
  if (rc) rename_field(e, field);
out:
  cJSON_Delete(norm);
  cJSON_Delete(root);
  if (rc) vr_compat_free(cr);
  else *crp = cr;
  return rc;
}

/* ------------------------------------------------------------------ replies */

static void put_float(struct evbuffer *b, float x, int comma) {
  if (isfinite(x)) evbuffer_add_printf(b, comma ? ",%.9g" : "%.9g", (double)x);
  else evbuffer_add_printf(b, comma ? ",null" : "null");
}

static void put_str(struct evbuffer *b, const char *s) {
  cJSON *x = cJSON_CreateString(s);
  char *t = x ? cJSON_PrintUnformatted(x) : NULL;
  if (t) evbuffer_add(b, t, strlen(t));
  else evbuffer_add(b, "\"\"", 2);
  free(t);
  cJSON_Delete(x);
}

static float sigmoid(float x) { return (float)(1.0 / (1.0 + exp(-(double)x))); }

static void put_usage(struct evbuffer *b, uint64_t n_tokens) {
  evbuffer_add_printf(b, "\"usage\":{\"prompt_tokens\":%llu,\"total_tokens\":%llu,\"completion_tokens\":0,"
                      "\"prompt_tokens_details\":null}", (unsigned long long)n_tokens, (unsigned long long)n_tokens);
}

void vr_compat_reply(const vr_compat_req_t *cr, const vr_scorer_t *sc, const float *scores, const float *comps,
                     uint32_t n, uint64_t n_tokens, int64_t now_s, const uint8_t id16[16], struct evbuffer *b) {
  char id[33];
  for (int i = 0; i < 16; i++) snprintf(id + 2 * i, 3, "%02x", id16[i]);
  switch (cr->route) {
    case VR_COMPAT_CLASSIFY:
      evbuffer_add_printf(b, "{\"id\":\"classify-%s\",\"object\":\"list\",\"created\":%lld,\"model\":", id, (long long)now_s);
      put_str(b, cr->model);
      evbuffer_add_printf(b, ",\"data\":[");
      for (uint32_t i = 0; i < n; i++) {
        evbuffer_add_printf(b, "%s{\"index\":%u,\"label\":\"LABEL_0\",\"probs\":[", i ? "," : "", i);
        put_float(b, cr->activation ? sigmoid(scores[i]) : scores[i], 0);
        evbuffer_add_printf(b, "],\"num_classes\":1}");
      }
      evbuffer_add_printf(b, "],");
      put_usage(b, n_tokens);
      evbuffer_add_printf(b, "}\n");
      break;
    case VR_COMPAT_EMBEDDINGS:
      evbuffer_add_printf(b, "{\"data\":[");
      for (uint32_t i = 0; i < n; i++) {
        evbuffer_add_printf(b, "%s{\"embedding\":[", i ? "," : "");
        put_float(b, scores[i], 0);
        evbuffer_add_printf(b, "],\"index\":%u,\"object\":\"embedding\"}", i);
      }
      evbuffer_add_printf(b, "],\"model\":");
      put_str(b, cr->model);
      evbuffer_add_printf(b, ",\"object\":\"list\",");
      put_usage(b, n_tokens);
      evbuffer_add_printf(b, "}\n");
      break;
    case VR_COMPAT_GET_REWARD:
      for (int pass = 0; pass < 2; pass++) {
        evbuffer_add_printf(b, pass ? "],\"scores\":[" : "{\"rewards\":[");
        for (uint32_t i = 0; i < n; i++) put_float(b, scores[i], i > 0);
      }
      evbuffer_add_printf(b, "],\"extra_logs\":{");
      for (uint32_t c = 0; sc->has_components && comps && c < sc->spec.n; c++) {
        if (c) evbuffer_add(b, ",", 1);
        put_str(b, sc->spec.rules[c].name);
        evbuffer_add(b, ":[", 2);
        for (uint32_t i = 0; i < n; i++) put_float(b, comps[(size_t)i * sc->spec.n + c], i > 0);
        evbuffer_add(b, "]", 1);
      }
      evbuffer_add_printf(b, "}}\n");
      break;
    case VR_COMPAT_PREDICT:
      evbuffer_add(b, "[", 1);
      for (uint32_t i = 0; i < n; i++) {
        evbuffer_add_printf(b, "%s%s{\"score\":", i ? "," : "", cr->batch ? "[" : "");
        put_float(b, cr->activation ? sigmoid(scores[i]) : scores[i], 0);
        evbuffer_add_printf(b, ",\"label\":\"LABEL_0\"}%s", cr->batch ? "]" : "");
      }
      evbuffer_add(b, "]\n", 2);
      break;
    default:
      evbuffer_add(b, "{}\n", 3);
  }
}

/* ------------------------------------------------------------------ GET */

void vr_compat_get(vr_compat_route_t r, const vr_server_t *srv, int64_t now_s, struct evbuffer *b) {
  const vr_scorer_t *sc = &srv->scorer;
  if (r == VR_COMPAT_MODELS) { /* OpenAI's model list, with vLLM's ModelCard fields */
    evbuffer_add_printf(b, "{\"object\":\"list\",\"data\":[{\"id\":");
    put_str(b, srv->st.model);
    evbuffer_add_printf(b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"verl-reward\",\"root\":", (long long)now_s);
    put_str(b, srv->st.model);
    evbuffer_add_printf(b, ",\"parent\":null,\"max_model_len\":%u,\"permission\":[]}]}\n", sc->max_seq_len);
    return;
  }
  /* TEI's Info (router/src/lib.rs); a one-label classifier */
  evbuffer_add_printf(b, "{\"model_id\":");
  put_str(b, srv->st.model);
  evbuffer_add_printf(b, ",\"model_sha\":null,\"model_dtype\":");
  put_str(b, sc->kind == VR_SCORER_MODEL ? vr_model_info(__atomic_load_n(&sc->models[0], __ATOMIC_ACQUIRE))->compute_dtype : "f32");
  evbuffer_add_printf(b, ",\"served_model_name\":");
  put_str(b, srv->st.model);
  evbuffer_add_printf(b, ",\"model_type\":{\"classifier\":{\"id2label\":{\"0\":\"LABEL_0\"},\"label2id\":{\"LABEL_0\":0}}},"
                      "\"max_concurrent_requests\":%u,\"max_input_length\":%u,\"max_batch_tokens\":%u,"
                      "\"max_batch_requests\":null,\"max_client_batch_size\":%u,\"auto_truncate\":%s,"
                      "\"tokenization_workers\":0,\"version\":\"%s\",\"sha\":null,\"docker_label\":null}\n",
                      srv->st.max_queue, sc->max_seq_len, srv->st.max_batch_tokens, srv->st.max_seqs_per_request,
                      sc->truncate == VR_TRUNCATE_ERROR ? "false" : "true", VR_BUILD_VERSION);
}
