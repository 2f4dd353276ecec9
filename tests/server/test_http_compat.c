/* test_http_compat.c: the framework request shapes of vr_http_compat on their own.
 *
 * Request bodies are the ones the frameworks send, written from their source (no code copied):
 *   verl reward loop  verl/experimental/reward_loop/reward_loop.py compute_score_disrm
 *                     (verl-project/verl v0.7.0 f9c855f7c: {"model","input","activation": False}
 *                     to "classify"; v0.9.0 483b8a009: "use_activation": False; SGLang: {"model",
 *                     "input"} to "v1/embeddings", reads data[-1]["embedding"][-1])
 *   vLLM              vllm/frontend/entrypoints/pooling/base/protocol.py CompletionRequestMixin
 *                     (input: list[int] | list[list[int]] | str | list[str]), ClassifyRequestMixin
 *                     (use_activation: bool | None = None), classify/serving.py _build_response,
 *                     vllm-project/vllm 055e47c28003; PoolerClassify (sigmoid for < 2 labels),
 *                     vllm/model_executor/layers/pooler/activations.py 1c7136794976
 *   OpenRLHF          openrlhf/utils/agent.py _fetch_rewards_via_http ({"query","prompts","labels"})
 *                     and openrlhf/cli/serve_rm.py ({"rewards","scores","extra_logs"}), 3c3be6234e0c
 *   TEI               router/src/http/types.rs PredictInput / PredictRequest (raw_scores) /
 *                     Prediction, core/src/infer.rs (sigmoid for one label unless raw_scores),
 *                     huggingface/text-embeddings-inference 0d124dc9773b
 * Replies are compared byte for byte with a fixed id and time. Valid bodies are then mutated
 * and parsed again (seeded; ASan/UBSan catch out-of-bounds reads). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "verl_reward/status.h"
#include "vr_http_compat.h"
#include "vr_test_seed.h"
#include "vr_text.h"

static vr_scorer_t make_scorer(const char *spec, vr_scorer_kind_t kind) {
  vr_scorer_t sc;
  memset(&sc, 0, sizeof sc);
  sc.kind = kind;
  sc.vocab_size = 1000;
  sc.max_seq_len = 64;
  sc.truncate = VR_TRUNCATE_ERROR;
  char err[128];
  assert_int_equal(vr_reward_spec_parse(spec, &sc.spec, err, sizeof err), 0);
  sc.has_components = sc.spec.n > 1 || sc.spec.model_index < 0;
  return sc;
}

typedef struct {
  vr_score_req_t r;
  vr_compat_req_t *cr;
  vr_req_error_t e;
  int rc;
} parsed_t;

static parsed_t parse(vr_compat_route_t route, const char *body, const vr_scorer_t *sc) {
  parsed_t p;
  p.rc = vr_compat_parse(route, body, strlen(body), sc, 16, "/models/rm", &p.r, &p.cr, &p.e);
  if (p.rc) assert_null(p.cr);
  return p;
}

static void done(parsed_t *p) {
  vr_request_free(&p->r);
  vr_compat_free(p->cr);
}

/* The reply for scores (and components) with id bytes 0x00..0x0f and created 1700000000. */
static char *reply_text(const parsed_t *p, const vr_scorer_t *sc, const float *scores, const float *comps) {
  uint8_t id[16];
  for (int i = 0; i < 16; i++) id[i] = (uint8_t)i;
  struct evbuffer *b = evbuffer_new();
  vr_compat_reply(p->cr, sc, scores, comps, p->r.n_seqs, p->r.n_tokens, 1700000000, id, b);
  size_t n = evbuffer_get_length(b);
  char *s = malloc(n + 1);
  evbuffer_remove(b, s, n);
  s[n] = 0;
  evbuffer_free(b);
  return s;
}

static void expect_error(vr_compat_route_t route, const char *body, const vr_scorer_t *sc, int status,
                         const char *needle) {
  parsed_t p = parse(route, body, sc);
  if (p.rc != status || !strstr(p.e.message, needle))
    fail_msg("body %s: got %s \"%s\", want %s containing \"%s\"", body, vr_status_name(p.rc), p.e.message,
             vr_status_name(status), needle);
}

/* Parses body (which must be accepted) and checks that its reply for scores contains want. */
static void expect_reply(vr_compat_route_t route, const char *body, const vr_scorer_t *sc, const float *scores,
                         const char *want) {
  parsed_t p = parse(route, body, sc);
  if (p.rc) fail_msg("body %s: %s \"%s\"", body, vr_status_name(p.rc), p.e.message);
  char *t = reply_text(&p, sc, scores, NULL);
  if (!strstr(t, want)) fail_msg("body %s: reply %s lacks %s", body, t, want);
  free(t);
  done(&p);
}

static void test_routes(void **state) {
  (void)state;
  assert_int_equal(vr_compat_route("/classify"), VR_COMPAT_CLASSIFY);
  assert_int_equal(vr_compat_route("/v1/classify"), VR_COMPAT_CLASSIFY);
  assert_int_equal(vr_compat_route("/v1/embeddings"), VR_COMPAT_EMBEDDINGS);
  assert_int_equal(vr_compat_route("/get_reward"), VR_COMPAT_GET_REWARD);
  assert_int_equal(vr_compat_route("/predict"), VR_COMPAT_PREDICT);
  assert_int_equal(vr_compat_route("/v1/models"), VR_COMPAT_MODELS);
  assert_int_equal(vr_compat_route("/info"), VR_COMPAT_INFO);
  assert_int_equal(vr_compat_route("/v1/score"), VR_COMPAT_NONE);
  assert_int_equal(vr_compat_route("/classify/"), VR_COMPAT_NONE);
  assert_true(vr_compat_is_post(VR_COMPAT_PREDICT));
  assert_false(vr_compat_is_post(VR_COMPAT_INFO));
  assert_false(vr_compat_is_post(VR_COMPAT_NONE));
}

/* vLLM /classify: ids forms, activation on by default (sigmoid), off by either flag name. */
static void test_classify(void **state) {
  (void)state;
  vr_scorer_t sc = make_scorer("model", VR_SCORER_CHECKSUM);
  const float s2[2] = {0.0f, -2.0f};
  parsed_t p = parse(VR_COMPAT_CLASSIFY, "{\"model\": \"rm\", \"input\": [[5, 6, 7], [8]]}", &sc);
  assert_int_equal(p.rc, 0);
  assert_int_equal(p.r.n_seqs, 2);
  assert_int_equal(p.r.n_tokens, 4);
  assert_int_equal(p.r.ids[3], 8);
  char *t = reply_text(&p, &sc, s2, NULL);
  assert_string_equal(t, "{\"id\":\"classify-000102030405060708090a0b0c0d0e0f\",\"object\":\"list\",\"created\":1700000000,"
                         "\"model\":\"rm\",\"data\":[{\"index\":0,\"label\":\"LABEL_0\",\"probs\":[0.5],\"num_classes\":1},"
                         "{\"index\":1,\"label\":\"LABEL_0\",\"probs\":[0.119202919],\"num_classes\":1}],"
                         "\"usage\":{\"prompt_tokens\":4,\"total_tokens\":4,\"completion_tokens\":0,"
                         "\"prompt_tokens_details\":null}}\n");
  free(t);
  done(&p);
  /* one flat sequence; verl >= 0.7.1's use_activation: false -> the raw score; no model: ours */
  const float s1[1] = {-2.0f};
  const vr_compat_route_t C = VR_COMPAT_CLASSIFY;
  expect_reply(C, "{\"input\": [5, 6], \"use_activation\": false}", &sc, s1,
               "\"model\":\"/models/rm\",\"data\":[{\"index\":0,\"label\":\"LABEL_0\",\"probs\":[-2],");
  /* verl 0.7.0 (vLLM < 0.11.2): "activation": false; use_activation wins when both are set */
  expect_reply(C, "{\"model\": \"rm\", \"input\": [5], \"activation\": false}", &sc, s1, "\"probs\":[-2]");
  expect_reply(C, "{\"input\": [5], \"activation\": false, \"use_activation\": true}", &sc, s1,
               "\"probs\":[0.119202919]");
  expect_reply(C, "{\"input\": [5], \"use_activation\": null, \"model\": null}", &sc, s1,
               "\"model\":\"/models/rm\",\"data\":[{\"index\":0,\"label\":\"LABEL_0\",\"probs\":[0.119202919]");
  /* a model name with quotes and control bytes comes back escaped */
  expect_reply(C, "{\"model\": \"a\\\"b\\n\", \"input\": [5]}", &sc, s1, "\"model\":\"a\\\"b\\n\"");
}

/* What verl sends (text) and what no shape allows. */
static void test_classify_errors(void **state) {
  (void)state;
  vr_scorer_t sc = make_scorer("model", VR_SCORER_CHECKSUM);
  const vr_compat_route_t C = VR_COMPAT_CLASSIFY;
  /* verl v0.9.0 compute_score_disrm's payload: text needs the tokenizer */
  expect_error(C, "{\"model\": \"/models/rm\", \"input\": \"<|im_start|>user\\nhi<|im_end|>\", \"use_activation\": false}",
               &sc, VR_ERR_UNSUPPORTED, "\"input\": text input needs the reward model's tokenizer");
  expect_error(C, "{\"input\": [\"a\", \"b\"]}", &sc, VR_ERR_UNSUPPORTED, "\"input\": text");
  expect_error(C, "{\"input\": [\"a\", 1]}", &sc, VR_ERR_MALFORMED, "input[1] must be a string");
  expect_error(C, "{\"input\": [1, \"a\"]}", &sc, VR_ERR_MALFORMED, "input[1] is not an integer");
  expect_error(C, "{\"input\": [[1], [2, 2.5]]}", &sc, VR_ERR_MALFORMED, "input[1][1] = 2.5 is not a 32-bit integer");
  expect_error(C, "{\"input\": [[1], 2]}", &sc, VR_ERR_MALFORMED, "input[1] must be a list of integers");
  expect_error(C, "{\"input\": [[1], []]}", &sc, VR_ERR_EMPTY_SEQ, "sequence 1 is empty");
  expect_error(C, "{\"input\": [[1], [1000]]}", &sc, VR_ERR_TOKEN_RANGE, "token id 1000 at position 0");
  expect_error(C, "{\"input\": []}", &sc, VR_ERR_MALFORMED, "\"input\" is empty");
  expect_error(C, "{\"input\": 5}", &sc, VR_ERR_MALFORMED, "\"input\" must be a string, a list of strings");
  expect_error(C, "{\"inputs\": [1]}", &sc, VR_ERR_MALFORMED, "missing \"input\"");
  expect_error(C, "{\"input\": [1], \"use_activation\": 0}", &sc, VR_ERR_MALFORMED, "\"use_activation\" must be true or false");
  expect_error(C, "{\"input\": [1], \"activation\": \"no\"}", &sc, VR_ERR_MALFORMED, "\"activation\" must be true or false");
  expect_error(C, "{\"input\": [1], \"model\": 3}", &sc, VR_ERR_MALFORMED, "\"model\" must be a string");
  expect_error(C, "[1, 2]", &sc, VR_ERR_MALFORMED, "body must be a JSON object");
  expect_error(C, "{\"input\": [1]", &sc, VR_ERR_PARSE, "malformed JSON");
  expect_error(C, "{\"input\": [1]} x", &sc, VR_ERR_PARSE, "trailing data at byte 15");
  expect_error(C, "", &sc, VR_ERR_PARSE, "malformed JSON");
  char big[256] = "{\"input\": [[1]";
  for (int i = 0; i < 16; i++) strcat(big, ",[1]");
  strcat(big, "]}");
  expect_error(C, big, &sc, VR_ERR_TOO_LARGE, "17 sequences, more than the limit 16");
  sc.max_seq_len = 2;
  expect_error(C, "{\"input\": [1, 2, 3]}", &sc, VR_ERR_SEQ_TOO_LONG, "sequence 0 has 3 tokens");
}

/* SGLang /v1/embeddings: the raw score as the one-element embedding (verl reads embedding[-1]). */
static void test_embeddings(void **state) {
  (void)state;
  vr_scorer_t sc = make_scorer("model", VR_SCORER_CHECKSUM);
  const float s[2] = {1.5f, -0.25f};
  parsed_t p = parse(VR_COMPAT_EMBEDDINGS, "{\"model\": \"rm\", \"input\": [[1, 2], [3]], \"use_activation\": true}", &sc);
  assert_int_equal(p.rc, 0);
  char *t = reply_text(&p, &sc, s, NULL);
  assert_string_equal(t, "{\"data\":[{\"embedding\":[1.5],\"index\":0,\"object\":\"embedding\"},"
                         "{\"embedding\":[-0.25],\"index\":1,\"object\":\"embedding\"}],\"model\":\"rm\",\"object\":\"list\","
                         "\"usage\":{\"prompt_tokens\":3,\"total_tokens\":3,\"completion_tokens\":0,"
                         "\"prompt_tokens_details\":null}}\n");
  free(t);
  done(&p);
  /* verl's SGLang payload: {"model", "input": text} */
  expect_error(VR_COMPAT_EMBEDDINGS, "{\"model\": \"/models/rm\", \"input\": \"hi\"}", &sc, VR_ERR_UNSUPPORTED,
               "\"input\": text");
}

/* OpenRLHF /get_reward on a rules-only server: labels -> ground_truth, query - prompt -> solution. */
static void test_get_reward(void **state) {
  (void)state;
  vr_scorer_t sc = make_scorer("gsm8k", VR_SCORER_NONE);
  parsed_t p = parse(VR_COMPAT_GET_REWARD,
                     "{\"query\": [\"Q: 1+1? A: #### 2\", \"other #### 3\", \"x\"], "
                     "\"prompts\": [\"Q: 1+1? A:\", \"not a prefix\", null], \"labels\": [\"2\", 3, [1, \"a\"]]}", &sc);
  assert_int_equal(p.rc, 0);
  assert_int_equal(p.r.n_seqs, 3);
  assert_int_equal(p.r.n_tokens, 0);
  assert_non_null(p.r.extras_ptrs[0]);
  assert_string_equal(p.r.extras[0].solution_str.ptr, " #### 2");
  assert_string_equal(p.r.extras[0].ground_truth.ptr, "2");
  assert_string_equal(p.r.extras[1].solution_str.ptr, "other #### 3");
  assert_string_equal(p.r.extras[1].ground_truth.ptr, "3");
  assert_string_equal(p.r.extras[2].solution_str.ptr, "x");
  assert_string_equal(p.r.extras[2].ground_truth.ptr, "[1,\"a\"]");
  const float s[3] = {1.0f, 0.0f, 0.0f}, comps[3] = {1.0f, 0.0f, 0.0f};
  char *t = reply_text(&p, &sc, s, comps);
  assert_string_equal(t, "{\"rewards\":[1,0,0],\"scores\":[1,0,0],\"extra_logs\":{\"gsm8k\":[1,0,0]}}\n");
  free(t);
  done(&p);
  /* the data_source extension reaches every sample */
  p = parse(VR_COMPAT_GET_REWARD, "{\"query\": [\"a\", \"b\"], \"data_source\": \"openai/gsm8k\"}", &sc);
  assert_int_equal(p.rc, 0);
  assert_string_equal(p.r.extras[1].data_source.ptr, "openai/gsm8k");
  done(&p);
  expect_error(VR_COMPAT_GET_REWARD, "{\"query\": [\"a\"], \"data_source\": 1}", &sc, VR_ERR_MALFORMED,
               "\"data_source\" must be a string");
  /* prompts and labels may be left out (null labels: no ground truth) */
  p = parse(VR_COMPAT_GET_REWARD, "{\"query\": [\"a\"], \"labels\": [null]}", &sc);
  assert_int_equal(p.rc, 0);
  assert_false(p.r.extras[0].ground_truth.present);
  done(&p);
  const vr_compat_route_t G = VR_COMPAT_GET_REWARD;
  expect_error(G, "{\"query\": \"a\"}", &sc, VR_ERR_MALFORMED, "\"query\" must be a list of strings (wrong type)");
  expect_error(G, "{\"prompts\": [\"a\"]}", &sc, VR_ERR_MALFORMED, "\"query\" must be a list of strings (missing)");
  expect_error(G, "{\"query\": [\"a\", 1]}", &sc, VR_ERR_MALFORMED, "query[1] must be a string");
  expect_error(G, "{\"query\": [\"a\"], \"prompts\": [\"a\", \"b\"]}", &sc, VR_ERR_MALFORMED,
               "\"prompts\" must be a list as long as \"query\" (1)");
  expect_error(G, "{\"query\": [\"a\"], \"labels\": {}}", &sc, VR_ERR_MALFORMED, "\"labels\" must be a list");
  expect_error(G, "{\"query\": [\"a\"], \"prompts\": [3]}", &sc, VR_ERR_MALFORMED, "prompts[0] must be a string or null");
  expect_error(G, "{\"query\": []}", &sc, VR_ERR_MALFORMED, "empty batch");
  /* a model server: the queries' tokens come from the tokenizer, or the input_ids extension */
  vr_scorer_t ms = make_scorer("model:0.5,gsm8k:0.5", VR_SCORER_CHECKSUM);
  expect_error(G, "{\"query\": [\"a\"], \"prompts\": [\"\"], \"labels\": [\"1\"]}", &ms, VR_ERR_UNSUPPORTED,
               "\"query\": text input needs the reward model's tokenizer");
  p = parse(G, "{\"query\": [\"a #### 1\"], \"labels\": [\"1\"], \"input_ids\": [[4, 5]]}", &ms);
  assert_int_equal(p.rc, 0);
  assert_int_equal(p.r.n_tokens, 2);
  assert_string_equal(p.r.extras[0].ground_truth.ptr, "1");
  done(&p);
  expect_error(G, "{\"query\": [\"a\"], \"input_ids\": [[4], [5]]}", &ms, VR_ERR_MALFORMED,
               "\"input_ids\" has 2 sequences for 1 queries in \"query\"");
  expect_error(G, "{\"query\": [\"a\"], \"input_ids\": [[4, \"x\"]]}", &ms, VR_ERR_MALFORMED, "input_ids[0][1] is not an integer");
}

/* TEI /predict: every form is text; the shape is still checked first. */
static void test_predict(void **state) {
  (void)state;
  vr_scorer_t sc = make_scorer("model", VR_SCORER_CHECKSUM);
  const vr_compat_route_t P = VR_COMPAT_PREDICT;
  expect_error(P, "{\"inputs\": \"What is Deep Learning?\", \"raw_scores\": false}", &sc, VR_ERR_UNSUPPORTED,
               "\"inputs\": text input needs the reward model's tokenizer");
  expect_error(P, "{\"inputs\": [\"one\"]}", &sc, VR_ERR_UNSUPPORTED, "\"inputs\": text input");
  expect_error(P, "{\"inputs\": [[\"a\"], [\"b\"]]}", &sc, VR_ERR_UNSUPPORTED, "\"inputs\": text input");
  expect_error(P, "{\"inputs\": [\"q\", \"a\"]}", &sc, VR_ERR_UNSUPPORTED, "text pairs are not scored");
  expect_error(P, "{\"inputs\": [[\"a\"], [\"q\", \"a\"]]}", &sc, VR_ERR_UNSUPPORTED, "text pairs are not scored");
  expect_error(P, "{\"inputs\": [\"a\", \"b\", \"c\"]}", &sc, VR_ERR_MALFORMED, "one text or one pair: 3 items");
  expect_error(P, "{\"inputs\": [[\"a\"], []]}", &sc, VR_ERR_MALFORMED, "inputs[1] must be [string] or [string, string]");
  expect_error(P, "{\"inputs\": [[1]]}", &sc, VR_ERR_MALFORMED, "inputs[0] must be [string]");
  expect_error(P, "{\"inputs\": []}", &sc, VR_ERR_MALFORMED, "(empty)");
  expect_error(P, "{\"inputs\": 1}", &sc, VR_ERR_MALFORMED, "(wrong type)");
  expect_error(P, "{\"input\": \"a\"}", &sc, VR_ERR_MALFORMED, "missing \"inputs\"");
  expect_error(P, "{\"inputs\": \"a\", \"raw_scores\": \"yes\"}", &sc, VR_ERR_MALFORMED, "\"raw_scores\" must be true or false");
  /* the input_ids extension (what the tokenizing bridge sends): TEI's reply shapes */
  const float s1[1] = {0.0f}, s2[2] = {1.5f, -2.0f};
  parsed_t p = parse(P, "{\"inputs\": \"ab\", \"input_ids\": [1, 2]}", &sc);
  assert_int_equal(p.rc, 0);
  assert_int_equal(p.r.n_tokens, 2);
  char *t = reply_text(&p, &sc, s1, NULL);
  assert_string_equal(t, "[{\"score\":0.5,\"label\":\"LABEL_0\"}]\n");
  free(t);
  done(&p);
  p = parse(P, "{\"inputs\": [[\"a\"], [\"b\"]], \"input_ids\": [[1], [2, 3]], \"raw_scores\": true}", &sc);
  assert_int_equal(p.rc, 0);
  t = reply_text(&p, &sc, s2, NULL);
  assert_string_equal(t, "[[{\"score\":1.5,\"label\":\"LABEL_0\"}],[{\"score\":-2,\"label\":\"LABEL_0\"}]]\n");
  free(t);
  done(&p);
  p = parse(P, "{\"inputs\": [\"one\"], \"input_ids\": [[4]]}", &sc); /* [str] is one text: a flat reply */
  assert_int_equal(p.rc, 0);
  t = reply_text(&p, &sc, s2, NULL);
  assert_string_equal(t, "[{\"score\":0.817574501,\"label\":\"LABEL_0\"}]\n");
  free(t);
  done(&p);
  expect_error(P, "{\"inputs\": [[\"a\"], [\"b\"]], \"input_ids\": [[1]]}", &sc, VR_ERR_MALFORMED,
               "\"input_ids\" has 1 sequences for 2 texts");
  expect_error(P, "{\"inputs\": \"a\", \"input_ids\": [[1], [2]]}", &sc, VR_ERR_MALFORMED, "has 2 sequences for 1 texts");
  expect_error(P, "{\"inputs\": \"a\", \"input_ids\": [[1, -1]]}", &sc, VR_ERR_TOKEN_RANGE, "token id -1");
  expect_error(P, "{\"inputs\": [\"q\", \"a\"], \"input_ids\": [[1]]}", &sc, VR_ERR_UNSUPPORTED, "text pairs");
}

/* With a tokenizer, text becomes the /v1/score {"text"} request the text worker encodes. The
 * tokenizer is not read while parsing: a stand-in pointer marks it present. */
static void test_text_forms(void **state) {
  (void)state;
  static char tok_stand_in;
  vr_scorer_t sc = make_scorer("model:1,gsm8k:0.5", VR_SCORER_MODEL);
  sc.tok = (struct vr_tok *)(void *)&tok_stand_in;
  parsed_t p = parse(VR_COMPAT_CLASSIFY, "{\"model\": \"rm\", \"input\": \"hi there\", \"use_activation\": false}", &sc);
  assert_int_equal(p.rc, 0);
  assert_int_equal(p.r.text.kind, VR_TEXT_PLAIN);
  assert_int_equal(p.r.text.n, 1);
  assert_string_equal(p.r.text.items[0], "hi there");
  assert_int_equal(p.r.text.add_special_tokens, 1); /* vLLM's CompletionRequestMixin default */
  assert_int_equal(p.r.n_seqs, 1);
  done(&p);
  p = parse(VR_COMPAT_EMBEDDINGS, "{\"input\": [\"a\", \"b\"], \"add_special_tokens\": false}", &sc);
  assert_int_equal(p.rc, 0);
  assert_int_equal(p.r.text.n, 2);
  assert_string_equal(p.r.text.items[1], "b");
  assert_int_equal(p.r.text.add_special_tokens, 0);
  done(&p);
  /* OpenRLHF: queries without special tokens (serve_rm.py), extras beside them */
  p = parse(VR_COMPAT_GET_REWARD, "{\"query\": [\"Q #### 2\", \"x\"], \"prompts\": [\"Q\", null], \"labels\": [\"2\", null]}", &sc);
  assert_int_equal(p.rc, 0);
  assert_int_equal(p.r.text.n, 2);
  assert_string_equal(p.r.text.items[0], "Q #### 2");
  assert_int_equal(p.r.text.add_special_tokens, 0);
  assert_string_equal(p.r.extras[0].solution_str.ptr, " #### 2");
  done(&p);
  /* TEI: texts with special tokens; a batch replies as a list of lists */
  p = parse(VR_COMPAT_PREDICT, "{\"inputs\": [[\"a\"], [\"b\"]]}", &sc);
  assert_int_equal(p.rc, 0);
  assert_int_equal(p.r.text.n, 2);
  assert_string_equal(p.r.text.items[0], "a");
  assert_int_equal(p.r.text.add_special_tokens, 1);
  const float s2[2] = {0.0f, 0.0f};
  char *t = reply_text(&p, &sc, s2, NULL);
  assert_string_equal(t, "[[{\"score\":0.5,\"label\":\"LABEL_0\"}],[{\"score\":0.5,\"label\":\"LABEL_0\"}]]\n");
  free(t);
  done(&p);
  p = parse(VR_COMPAT_PREDICT, "{\"inputs\": [\"one\"]}", &sc);
  assert_int_equal(p.rc, 0);
  assert_int_equal(p.r.text.n, 1);
  done(&p);
  /* vLLM's chat form: one conversation for the chat template */
  p = parse(VR_COMPAT_CLASSIFY, "{\"model\": \"rm\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], "
            "\"add_generation_prompt\": true, \"use_activation\": false}", &sc);
  assert_int_equal(p.rc, 0);
  assert_int_equal(p.r.text.kind, VR_TEXT_CHAT);
  assert_int_equal(p.r.text.n, 1);
  assert_int_equal(p.r.text.add_generation_prompt, 1);
  done(&p);
  expect_error(VR_COMPAT_CLASSIFY, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"add_special_tokens\": true}",
               &sc, VR_ERR_UNSUPPORTED, "\"add_special_tokens\": true is not supported with \"messages\"");
  expect_error(VR_COMPAT_CLASSIFY, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"continue_final_message\": true}",
               &sc, VR_ERR_UNSUPPORTED, "\"continue_final_message\": true");
  expect_error(VR_COMPAT_CLASSIFY, "{\"messages\": [{\"content\": \"hi\"}]}", &sc, VR_ERR_MALFORMED, "messages[0].role is missing");
  expect_error(VR_COMPAT_CLASSIFY, "{\"input\": \"a\", \"add_special_tokens\": 1}", &sc, VR_ERR_MALFORMED,
               "\"add_special_tokens\" must be true or false");
  expect_error(VR_COMPAT_PREDICT, "{\"inputs\": [\"q\", \"a\"]}", &sc, VR_ERR_UNSUPPORTED, "text pairs");
  /* the reason the tokenizer is missing is named */
  sc.tok = NULL;
  snprintf(sc.tok_note, sizeof sc.tok_note, "the model directory /m has no tokenizer.json");
  expect_error(VR_COMPAT_CLASSIFY, "{\"input\": \"a\"}", &sc, VR_ERR_UNSUPPORTED, "(the model directory /m has no tokenizer.json)");
  expect_error(VR_COMPAT_CLASSIFY, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}", &sc, VR_ERR_UNSUPPORTED,
               "\"messages\": text input needs the reward model's tokenizer");
}

/* Valid bodies mutated byte-wise: every accepted parse keeps the request invariants. */
static void test_mutations(void **state) {
  (void)state;
  static const struct { vr_compat_route_t r; const char *body; } seeds[] = {
    {VR_COMPAT_CLASSIFY, "{\"model\": \"rm\", \"input\": [[5, 6, 7], [8]], \"use_activation\": false}"},
    {VR_COMPAT_EMBEDDINGS, "{\"input\": [1, 2, 3]}"},
    {VR_COMPAT_GET_REWARD, "{\"query\": [\"Q #### 2\", \"b\"], \"prompts\": [\"Q\", null], \"labels\": [\"2\", 7], "
                           "\"input_ids\": [[1], [2, 3]]}"},
    {VR_COMPAT_PREDICT, "{\"inputs\": [[\"a\"], [\"b\"]], \"raw_scores\": true, \"input_ids\": [[1], [2, 3]]}"},
  };
  vr_scorer_t sc = make_scorer("model:0.5,gsm8k:0.5", VR_SCORER_CHECKSUM);
  uint64_t st = vr_test_seed("test_http_compat mutations", 17);
  const char alphabet[] = "{}[]\",:0123456789-.eE truenullfalse\\u";
  int accepted = 0, refused = 0;
  for (int it = 0; it < 40000; it++) {
    const int k = (int)vr_test_rand(&st, 4);
    const size_t n0 = strlen(seeds[k].body);
    char buf[512];
    memcpy(buf, seeds[k].body, n0);
    size_t n = n0;
    for (int m = 1 + (int)vr_test_rand(&st, 3); m > 0; m--) {
      const uint32_t op = vr_test_rand(&st, 4), at = vr_test_rand(&st, (uint32_t)n + 1);
      if (op == 0 && n) buf[at % n] = alphabet[vr_test_rand(&st, sizeof alphabet - 1)];
      else if (op == 1 && n) buf[at % n] ^= (char)(1u << vr_test_rand(&st, 8));
      else if (op == 2) n = at; /* truncate */
      else if (n + 1 < sizeof buf) {
        memmove(buf + at + 1, buf + at, n - at);
        buf[at] = alphabet[vr_test_rand(&st, sizeof alphabet - 1)];
        n++;
      }
    }
    /* exact length, no terminator: the parser must not read past n */
    char *heap = malloc(n ? n : 1);
    memcpy(heap, buf, n);
    vr_score_req_t r;
    vr_compat_req_t *cr;
    vr_req_error_t e;
    int rc = vr_compat_parse(seeds[k].r, heap, n, &sc, 16, "m", &r, &cr, &e);
    if (rc == 0) {
      accepted++;
      assert_true(r.n_seqs >= 1 && r.n_seqs <= 16);
      assert_int_equal(r.cu[0], 0);
      for (uint32_t i = 0; i < r.n_seqs; i++) {
        assert_true(r.cu[i + 1] > r.cu[i] && r.cu[i + 1] - r.cu[i] <= sc.max_seq_len);
        for (uint32_t j = r.cu[i]; j < r.cu[i + 1]; j++) assert_true(r.ids[j] >= 0 && r.ids[j] < 1000);
      }
      float scores[16] = {0};
      uint8_t id[16] = {0};
      struct evbuffer *b = evbuffer_new();
      vr_compat_reply(cr, &sc, scores, NULL, r.n_seqs, r.n_tokens, 0, id, b);
      assert_true(evbuffer_get_length(b) > 2);
      evbuffer_free(b);
      vr_request_free(&r);
      vr_compat_free(cr);
    } else {
      refused++;
      assert_true(rc < 0);
      assert_null(cr);
      assert_true(e.message[0] != 0);
    }
    free(heap);
  }
  printf("mutations: %d accepted, %d refused\n", accepted, refused);
  assert_true(accepted > 1000 && refused > 1000); /* both paths exercised */
}

int main(void) {
  const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_routes),      cmocka_unit_test(test_classify), cmocka_unit_test(test_classify_errors),
    cmocka_unit_test(test_embeddings),  cmocka_unit_test(test_get_reward), cmocka_unit_test(test_predict),
    cmocka_unit_test(test_text_forms),  cmocka_unit_test(test_mutations),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
