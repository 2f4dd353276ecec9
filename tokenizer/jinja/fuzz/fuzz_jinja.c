/* libFuzzer harness: compile + render of random templates. The input is split at the first
 * NUL byte: before it a template, after it a JSON context (if it parses). Tight bounds keep
 * each run short; any error status is fine, a crash, leak or sanitizer report is not. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vr_jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const char *src = (const char *)data;
  const char *nul = memchr(data, 0, size);
  size_t tl = nul ? (size_t)(nul - src) : size;
  cJSON *ctx = NULL;
  if (nul && size - tl > 1) {
    char *js = malloc(size - tl);
    if (!js) return 0;
    memcpy(js, nul + 1, size - tl - 1);
    js[size - tl - 1] = 0;
    ctx = cJSON_Parse(js);
    free(js);
  }
  char err[256];
  vr_jinja_t *t;
  if (vr_jinja_compile(src, tl, &t, err, sizeof err) == 0) {
    vr_jinja_opts_t o;
    vr_jinja_opts_default(&o);
    o.max_output = 1 << 16;
    o.max_memory = 16 << 20;
    o.max_steps = 100000;
    o.max_depth = 64;
    o.now_s = 0;
    char *out;
    size_t ol;
    if (cJSON_IsObject(ctx)) {
      if (vr_jinja_render(t, ctx, &o, &out, &ol, err, sizeof err) == 0) free(out);
    } else {
      cJSON *msgs = cJSON_Parse("[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\","
                                "\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"yo\"}]");
      vr_jinja_chat_t ch = {.messages = msgs, .add_generation_prompt = 1, .bos_token = "<s>",
                            .eos_token = "</s>"};
      if (vr_jinja_chat(t, &ch, &o, &out, &ol, err, sizeof err) == 0) free(out);
      cJSON_Delete(msgs);
    }
    vr_jinja_free(t);
  }
  cJSON_Delete(ctx);
  return 0;
}
