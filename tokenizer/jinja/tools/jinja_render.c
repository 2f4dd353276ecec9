/* verl-jinja-render TEMPLATE [CONTEXT.json] [--chat]: renders TEMPLATE with the variables of
 * CONTEXT.json (an object) to stdout. With --chat, CONTEXT.json holds apply_chat_template's
 * arguments: {"messages": [...], "add_generation_prompt": bool, "bos_token": "...",
 * "eos_token": "...", "tools": [...], "documents": [...], "extra": {...}} and the render is
 * vr_jinja_chat's. Exit 0 on success, 1 with the error on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vr_jinja.h"

static char *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap);
  size_t k;
  while (b && (k = fread(b + n, 1, cap - n - 1, f)) > 0) {
    n += k;
    if (n + 1 >= cap) {
      char *nb = realloc(b, cap * 2);
      if (!nb) {
        free(b);
        b = NULL;
        break;
      }
      b = nb;
      cap *= 2;
    }
  }
  fclose(f);
  if (b) b[n] = 0;
  *len = n;
  return b;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: verl-jinja-render TEMPLATE [CONTEXT.json] [--chat]\n");
    return 2;
  }
  int chat = argc > 3 && strcmp(argv[3], "--chat") == 0;
  size_t tl, cl = 0;
  char *tsrc = slurp(argv[1], &tl);
  if (!tsrc) {
    fprintf(stderr, "verl-jinja-render: cannot read %s\n", argv[1]);
    return 1;
  }
  cJSON *ctx = NULL;
  if (argc > 2) {
    char *cs = slurp(argv[2], &cl);
    ctx = cs ? cJSON_Parse(cs) : NULL;
    free(cs);
    if (!ctx) {
      fprintf(stderr, "verl-jinja-render: %s is not JSON\n", argv[2]);
      return 1;
    }
  }
  char err[512];
  vr_jinja_t *t;
  int rc = vr_jinja_compile(tsrc, tl, &t, err, sizeof err);
  free(tsrc);
  if (rc) {
    fprintf(stderr, "verl-jinja-render: %s: %s\n", argv[1], err);
    cJSON_Delete(ctx);
    return 1;
  }
  char *out;
  size_t ol;
  vr_jinja_opts_t o;
  vr_jinja_opts_default(&o);
  if (chat) {
    vr_jinja_chat_t ch = {0};
    ch.messages = cJSON_GetObjectItemCaseSensitive(ctx, "messages");
    ch.add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ctx, "add_generation_prompt"));
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(ctx, "bos_token");
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(ctx, "eos_token");
    ch.bos_token = cJSON_IsString(b) ? b->valuestring : NULL;
    ch.eos_token = cJSON_IsString(e) ? e->valuestring : NULL;
    ch.tools = cJSON_GetObjectItemCaseSensitive(ctx, "tools");
    ch.documents = cJSON_GetObjectItemCaseSensitive(ctx, "documents");
    ch.extra = cJSON_GetObjectItemCaseSensitive(ctx, "extra");
    rc = vr_jinja_chat(t, &ch, &o, &out, &ol, err, sizeof err);
  } else {
    rc = vr_jinja_render(t, ctx, &o, &out, &ol, err, sizeof err);
  }
  vr_jinja_free(t);
  cJSON_Delete(ctx);
  if (rc) {
    fprintf(stderr, "verl-jinja-render: %s\n", err);
    return 1;
  }
  fwrite(out, 1, ol, stdout);
  free(out);
  return 0;
}
