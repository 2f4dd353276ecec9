/* fuzz_http_compat.c: libFuzzer harness for the framework request shapes (vr_http_compat) and,
 * through them, the /v1/score parser. Input: the first byte picks the route (classify,
 * embeddings, get_reward, predict; bit 2: a tokenizer is present, so texts take the text path, which
 * parses only: encoding is the text worker's), the rest is the body. Build: CC=clang cmake -DVR_FUZZ=ON;
 * run: build/bin/fuzz_http_compat -max_total_time=60 [corpus dir]. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <event2/buffer.h>

#include "vr_http_compat.h"
#include "vr_log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static vr_scorer_t sc;
  static int init;
  if (!init) {
    vr_log_set_level(VR_LOG_OFF);
    sc.kind = VR_SCORER_CHECKSUM;
    sc.vocab_size = 1000;
    sc.max_seq_len = 64;
    sc.truncate = VR_TRUNCATE_ERROR;
    char err[128];
    if (vr_reward_spec_parse("model:0.5,gsm8k:0.5", &sc.spec, err, sizeof err)) __builtin_trap();
    sc.has_components = 1;
    init = 1;
  }
  if (size < 1) return 0;
  static char tok_stand_in; /* never read while parsing */
  sc.kind = data[0] & 4 ? VR_SCORER_MODEL : VR_SCORER_CHECKSUM;
  sc.tok = data[0] & 4 ? (struct vr_tok *)(void *)&tok_stand_in : NULL;
  static const vr_compat_route_t routes[4] = {VR_COMPAT_CLASSIFY, VR_COMPAT_EMBEDDINGS, VR_COMPAT_GET_REWARD,
                                              VR_COMPAT_PREDICT};
  vr_score_req_t r;
  vr_compat_req_t *cr;
  vr_req_error_t e;
  if (vr_compat_parse(routes[data[0] & 3], (const char *)data + 1, size - 1, &sc, 64, "m", &r, &cr, &e) == 0) {
    /* invariants the batcher relies on */
    if (r.n_seqs < 1 || r.n_seqs > 64 || r.cu[0] != 0 || r.n_tokens != r.cu[r.n_seqs]) __builtin_trap();
    for (uint32_t i = 0; i < r.n_seqs; i++)
      for (uint32_t j = r.cu[i]; j < r.cu[i + 1]; j++)
        if (r.ids[j] < 0 || r.ids[j] >= 1000) __builtin_trap();
    float scores[64] = {0}, comps[128] = {0};
    uint8_t id[16] = {0};
    struct evbuffer *b = evbuffer_new();
    vr_compat_reply(cr, &sc, scores, comps, r.n_seqs, r.n_tokens, 0, id, b);
    evbuffer_free(b);
    vr_request_free(&r);
    vr_compat_free(cr);
  } else if (cr || e.status >= 0 || !e.message[0]) {
    __builtin_trap();
  }
  return 0;
}
