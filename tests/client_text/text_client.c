/* text_client.c: libverl_reward_text driven by test_client_text.py over a real server.
 *
 *   vr_test_text_client SHM_NAME TOKENIZER_DIR < lines
 * Each stdin line is a JSON object, one of
 *   {"text": ["...", ...], "add_special_tokens": bool}
 *   {"messages": [[{"role", "content"}, ...], ...], "add_generation_prompt": bool,
 *    "chat_template_kwargs": {...}}
 *   {"render": [{"role", "content"}, ...]}                        (vr_client_text_render)
 *   {"raw_text_hex": "..."}      one text given as hex bytes (invalid UTF-8 cannot be JSON)
 * and gets one output line: {"input_ids": [[...]], "scores": [...]} (the ids from
 * vr_client_text_encode, the scores from vr_client_text_score), {"text": "..."} for render, or
 * {"error": "VR_ERR_...", "message": "...", "bad_item": i} (-1 when no item is to blame). Conversations go to the library as the JSON text of
 * each one. Exit 0 when every line was answered (errors included), 2 on bad usage or a load
 * failure (the error line printed first). */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/client.h"
#include "verl_reward/text.h"

static void print_error(int rc) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "error", vr_status_name(rc));
  cJSON_AddStringToObject(o, "message", vr_client_text_last_error());
  cJSON_AddNumberToObject(o, "bad_item", vr_client_text_last_bad_item());
  char *s = cJSON_PrintUnformatted(o);
  puts(s);
  free(s);
  cJSON_Delete(o);
}

static int hexval(int c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* items of one line: texts or each conversation's JSON text; returns the count or -1 */
static int collect(const cJSON *root, vr_text_input_t *kind, char ***items, size_t **lens) {
  const cJSON *t = cJSON_GetObjectItem(root, "text"), *m = cJSON_GetObjectItem(root, "messages");
  const cJSON *hex = cJSON_GetObjectItem(root, "raw_text_hex");
  const cJSON *arr = t ? t : m;
  int n = hex ? 1 : cJSON_GetArraySize(arr);
  *kind = m ? VR_TEXT_INPUT_CHAT : VR_TEXT_INPUT_PLAIN;
  *items = calloc((size_t)n + 1, sizeof **items);
  *lens = calloc((size_t)n + 1, sizeof **lens);
  if (hex) {
    const char *h = cJSON_GetStringValue(hex);
    size_t hl = h ? strlen(h) / 2 : 0;
    (*items)[0] = malloc(hl + 1);
    for (size_t k = 0; k < hl; k++) (*items)[0][k] = (char)(hexval(h[2 * k]) * 16 + hexval(h[2 * k + 1]));
    (*lens)[0] = hl;
    return 1;
  }
  int i = 0;
  const cJSON *x;
  cJSON_ArrayForEach(x, arr) {
    /* a conversation given as a JSON string is passed as that text (the bad-JSON cases) */
    (*items)[i] = cJSON_IsString(x) ? strdup(x->valuestring) : cJSON_PrintUnformatted(x);
    (*lens)[i] = strlen((*items)[i]);
    i++;
  }
  return n;
}

static void one_line(const vr_client_text_t *tt, vr_client_t *c, const cJSON *root) {
  vr_text_options_t o;
  vr_text_options_init(&o);
  const cJSON *ast = cJSON_GetObjectItem(root, "add_special_tokens");
  const cJSON *agp = cJSON_GetObjectItem(root, "add_generation_prompt");
  const cJSON *kw = cJSON_GetObjectItem(root, "chat_template_kwargs");
  char *kws = kw ? cJSON_PrintUnformatted(kw) : NULL;
  if (ast) o.add_special_tokens = cJSON_IsTrue(ast);
  if (agp) o.add_generation_prompt = cJSON_IsTrue(agp);
  o.chat_template_kwargs = kws;
  const cJSON *r = cJSON_GetObjectItem(root, "render");
  if (r) {
    char *conv = cJSON_PrintUnformatted(r), *text = NULL;
    size_t tl = 0;
    int rc = vr_client_text_render(tt, conv, 0, &o, &text, &tl);
    free(conv);
    if (rc) {
      print_error(rc);
    } else {
      cJSON *out = cJSON_CreateObject();
      cJSON_AddStringToObject(out, "text", text);
      char *s = cJSON_PrintUnformatted(out);
      puts(s);
      free(s);
      cJSON_Delete(out);
      vr_client_text_buffer_free(text);
    }
    free(kws);
    return;
  }
  vr_text_input_t kind;
  char **items;
  size_t *lens;
  int n = collect(root, &kind, &items, &lens);
  vr_text_batch_t b = {.n = (uint32_t)n, .items = (const char *const *)items, .lens = lens};
  int32_t *ids = NULL;
  uint32_t *cu = NULL;
  uint64_t nt = 0;
  int rc = vr_client_text_encode(tt, kind, &b, &o, &ids, &cu, &nt);
  float *scores = calloc((size_t)n + 1, sizeof *scores);
  vr_request_info_t info;
  if (rc == 0) {
    rc = vr_client_text_score(tt, c, kind, &b, &o, scores, NULL, &info);
    if (rc == 0 && (info.status != 0 || info.n_seqs != (uint32_t)n)) {
      fprintf(stderr, "info: status %d, n_seqs %u for %d items\n", info.status, info.n_seqs, n);
      exit(3);
    }
  } else if (vr_client_text_score(tt, c, kind, &b, &o, scores, NULL, &info) != rc || info.status != rc ||
             info.bad_seq != vr_client_text_last_bad_item()) {
    fprintf(stderr, "vr_client_text_score disagrees with vr_client_text_encode (rc %d, status %d, bad_seq %d)\n", rc,
            info.status, info.bad_seq);
    exit(3);
  }
  if (rc) {
    print_error(rc);
  } else {
    cJSON *out = cJSON_CreateObject(), *all = cJSON_AddArrayToObject(out, "input_ids");
    for (int i = 0; i < n; i++) {
      cJSON *seq = cJSON_CreateArray();
      for (uint32_t k = cu[i]; k < cu[i + 1]; k++) cJSON_AddItemToArray(seq, cJSON_CreateNumber(ids[k]));
      cJSON_AddItemToArray(all, seq);
    }
    char *s = cJSON_PrintUnformatted(out);
    printf("%.*s,\"scores\":[", (int)strlen(s) - 1, s);
    for (int i = 0; i < n; i++) printf(i ? ",%.9g" : "%.9g", (double)scores[i]);
    printf("]}\n");
    free(s);
    cJSON_Delete(out);
  }
  free(ids);
  free(cu);
  free(scores);
  for (int i = 0; i < n; i++) free(items[i]);
  free(items);
  free(lens);
  free(kws);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s SHM_NAME TOKENIZER_DIR < lines\n", argv[0]);
    return 2;
  }
  vr_client_text_t *tt = NULL;
  int rc = vr_client_text_load(argv[2], &tt);
  if (rc) {
    print_error(rc);
    return 2;
  }
  vr_client_options_t opt;
  vr_client_options_init(&opt);
  opt.connect_timeout_us = 10000000;
  vr_client_t *c = NULL;
  if ((rc = vr_client_connect(argv[1], &opt, &c))) {
    fprintf(stderr, "connect %s: %s\n", argv[1], vr_client_last_error());
    vr_client_text_free(tt);
    return 2;
  }
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  while ((len = getline(&line, &cap, stdin)) > 0) {
    cJSON *root = cJSON_ParseWithLength(line, (size_t)len);
    if (!root) {
      fprintf(stderr, "stdin: a line that is not JSON\n");
      rc = 2;
      break;
    }
    one_line(tt, c, root);
    fflush(stdout);
    cJSON_Delete(root);
  }
  free(line);
  vr_client_close(c);
  vr_client_text_free(tt);
  return rc;
}
