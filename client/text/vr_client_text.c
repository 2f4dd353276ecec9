/* vr_client_text.c: client-side tokenisation of texts and conversations for the shm client
 * (include/verl_reward/text.h). The ids are those of the server's HTTP text path
 * (reward_server/vr_text.c): the same tokenizer library, the same chat-template glue, the same
 * conversation check, the same add_special_tokens rules. */
#define _GNU_SOURCE
#include "verl_reward/text.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "vr_jsonl.h"
#include "vr_tok_chat.h"
#include "vr_tokenizer.h"

struct vr_client_text {
  vr_tok_t *tok;
  char *dir;
};

/* vr_client_text_last_error()'s text: per thread, as vr_client_last_error(); the library's only
 * static storage. */
static __thread char g_err[1024];
static __thread int32_t g_bad = -1; /* the item of the last encode error, -1 if none */

static int fail(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_err, sizeof g_err, fmt, ap);
  va_end(ap);
  return rc;
}

const char *vr_client_text_last_error(void) { return g_err; }

int32_t vr_client_text_last_bad_item(void) { return g_bad; }

void vr_text_options_init(vr_text_options_t *opt) {
  if (!opt) return;
  memset(opt, 0, sizeof *opt);
  opt->add_special_tokens = 1;
}

int vr_client_text_load(const char *dir, vr_client_text_t **out) {
  g_err[0] = 0;
  if (!dir || !out) return fail(VR_ERR_INVAL, "vr_client_text_load: dir and out must not be NULL");
  *out = NULL;
  char path[4096];
  if ((size_t)snprintf(path, sizeof path, "%s/tokenizer.json", dir) >= sizeof path)
    return fail(VR_ERR_INVAL, "%s: directory name too long", dir);
  struct stat st;
  if (stat(path, &st) != 0)
    return fail(errno == ENOENT || errno == ENOTDIR ? VR_ERR_NOT_FOUND : VR_ERR_IO,
                "%s: no tokenizer.json (%s) HINT: give the reward model's directory, or a directory "
                "holding its tokenizer.json and tokenizer_config.json",
                dir, strerror(errno));
  vr_client_text_t *tt = calloc(1, sizeof *tt);
  if (!tt || !(tt->dir = strdup(dir))) {
    free(tt);
    return fail(VR_ERR_NOMEM, "%s: out of memory", dir);
  }
  char err[768] = "";
  int rc = vr_tok_load(dir, &tt->tok, err, sizeof err);
  if (rc) {
    vr_client_text_free(tt);
    return fail(rc, "%s", err);
  }
  *out = tt;
  return 0;
}

void vr_client_text_free(vr_client_text_t *tt) {
  if (!tt) return;
  vr_tok_free(tt->tok);
  free(tt->dir);
  free(tt);
}

uint32_t vr_client_text_vocab_size(const vr_client_text_t *tt) {
  size_t v = tt ? vr_tok_vocab_size(tt->tok) : 0;
  return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

int vr_client_text_has_chat_template(const vr_client_text_t *tt) {
  return tt && vr_tok_chat_template(tt->tok, NULL) != NULL;
}

int vr_client_text_check(const vr_client_text_t *tt, vr_client_t *c) {
  if (!tt || !c) return fail(VR_ERR_INVAL, "vr_client_text_check: NULL argument");
  vr_limits_t lim;
  int rc = vr_client_limits(c, &lim);
  if (rc) return fail(rc, "limits of the server: %s", vr_client_last_error());
  uint32_t v = vr_client_text_vocab_size(tt);
  if (lim.vocab_size && v > lim.vocab_size)
    return fail(VR_ERR_INVAL,
                "%s: the tokenizer has %u ids but the server's model has a vocabulary of %u: not the reward "
                "model's tokenizer HINT: give the directory of the model the server serves (its --model)",
                tt->dir, v, lim.vocab_size);
  return 0;
}

/* Conversation i (JSON, len bytes) -> the rendered template text (malloc'd). */
static int render(const vr_client_text_t *tt, uint32_t i, const char *item, size_t len, const vr_text_options_t *o,
                  char **text, size_t *tlen) {
  char at[32], err[768] = "";
  snprintf(at, sizeof at, "messages[%u]", i);
  if (memchr(item, 0, len)) return fail(VR_ERR_MALFORMED, "%s: a NUL byte in the conversation's JSON", at);
  /* one value, no control byte (vr_jsonl.h); a repeated key is its last, as the template glue and
   * Python read it, so the check below sees what is rendered */
  const char *why = NULL;
  size_t off = 0;
  cJSON *conv = vr_jsonl_parse(item, len, &why, &off);
  if (!conv && why[0] == 't')
    return fail(VR_ERR_MALFORMED, "%s: not valid JSON (bytes after the conversation at offset %zu)", at, off);
  if (!conv) return fail(VR_ERR_MALFORMED, "%s: not valid JSON (a conversation is a JSON list of message objects)", at);
  if (vr_json_dups(conv, VR_JSON_DUP_LAST, NULL, 0)) {
    cJSON_Delete(conv);
    return fail(VR_ERR_NOMEM, "%s: out of memory", at);
  }
  int rc = vr_tok_chat_check_conversation(conv, at, err, sizeof err);
  cJSON_Delete(conv);
  if (rc) return fail(rc, "%s", err);
  /* the template glue parses a NUL-terminated text */
  char *js = strndup(item, len);
  if (!js) return fail(VR_ERR_NOMEM, "%s: out of memory", at);
  rc = vr_tok_apply_chat_template_ex(tt->tok, o->chat_template, js, o->add_generation_prompt, o->chat_template_kwargs,
                                     text, tlen, err, sizeof err);
  free(js);
  if (rc)
    return fail(rc == VR_ERR_NOMEM || rc == VR_ERR_TOO_LARGE || rc == VR_ERR_NOT_FOUND || rc == VR_ERR_UNSUPPORTED
                    ? rc
                    : VR_ERR_INVAL,
                "%s: %s", at, err);
  return 0;
}

static int no_template(const vr_client_text_t *tt, const vr_text_options_t *o) {
  return fail(VR_ERR_NOT_FOUND, "%s: tokenizer_config.json has no chat template%s%s (conversations need one)", tt->dir,
              o->chat_template ? " named " : "", o->chat_template ? o->chat_template : "");
}

int vr_client_text_render(const vr_client_text_t *tt, const char *conversation, size_t len,
                          const vr_text_options_t *opt, char **text, size_t *text_len) {
  g_err[0] = 0;
  if (!tt || !conversation || !text || !text_len) return fail(VR_ERR_INVAL, "vr_client_text_render: NULL argument");
  vr_text_options_t defaults;
  vr_text_options_init(&defaults);
  const vr_text_options_t *o = opt ? opt : &defaults;
  if (!vr_tok_chat_template(tt->tok, o->chat_template)) return no_template(tt, o);
  return render(tt, 0, conversation, len ? len : strlen(conversation), o, text, text_len);
}

const char *vr_client_text_bos_token(const vr_client_text_t *tt) {
  int32_t id;
  return tt ? vr_tok_special_token(tt->tok, VR_TOK_BOS, &id) : NULL;
}

void vr_client_text_buffer_free(void *p) { free(p); }

/* One item into text ready to encode (the rendered conversation, or the text itself) plus the
 * add_special_tokens to encode it with. *owned is malloc'd text to free (may be NULL). */
static int item_text(const vr_client_text_t *tt, vr_text_input_t kind, const vr_text_options_t *o, uint32_t i,
                     const char *item, size_t len, const char **src, size_t *slen, char **owned, int *special) {
  *owned = NULL;
  *src = item;
  *slen = len;
  *special = o->add_special_tokens != 0;
  if (kind == VR_TEXT_INPUT_PLAIN) return 0;
  char *text = NULL;
  size_t tlen = 0;
  int rc = render(tt, i, item, len, o, &text, &tlen);
  if (rc) return rc;
  *owned = text;
  *src = text;
  *slen = tlen;
  *special = 0; /* apply_chat_template(tokenize=True): add_special_tokens=False */
  return 0;
}

int vr_client_text_encode(const vr_client_text_t *tt, vr_text_input_t kind, const vr_text_batch_t *b,
                          const vr_text_options_t *opt, int32_t **ids_out, uint32_t **cu_out, uint64_t *n_tokens) {
  g_err[0] = 0;
  g_bad = -1;
  if (!tt || !b || !ids_out || !cu_out || !n_tokens || (b->n && !b->items))
    return fail(VR_ERR_INVAL, "vr_client_text_encode: NULL argument");
  if (kind != VR_TEXT_INPUT_PLAIN && kind != VR_TEXT_INPUT_CHAT)
    return fail(VR_ERR_INVAL, "vr_client_text_encode: kind %d is neither VR_TEXT_INPUT_PLAIN nor _CHAT", (int)kind);
  vr_text_options_t defaults;
  vr_text_options_init(&defaults);
  const vr_text_options_t *o = opt ? opt : &defaults;
  const char *what = kind == VR_TEXT_INPUT_CHAT ? "messages" : "text";
  *ids_out = NULL;
  *cu_out = NULL;
  *n_tokens = 0;
  if (kind == VR_TEXT_INPUT_CHAT && !vr_tok_chat_template(tt->tok, o->chat_template)) return no_template(tt, o);
  uint32_t *cu = calloc((size_t)b->n + 1, sizeof *cu);
  if (!cu) return fail(VR_ERR_NOMEM, "out of memory for %u sequences", b->n);
  int32_t *all = NULL;
  uint64_t total = 0, cap = 0;
  int rc = 0;
  uint32_t i_fail = 0;
  vr_tok_scratch_t *sc = vr_tok_scratch_new();
  for (uint32_t i = 0; i < b->n && !rc; i++) {
    i_fail = i;
    const char *item = b->items[i];
    if (!item) {
      rc = fail(VR_ERR_INVAL, "%s[%u] is NULL", what, i);
      break;
    }
    size_t len = b->lens ? b->lens[i] : strlen(item);
    const char *src;
    size_t slen;
    char *owned;
    int special;
    if ((rc = item_text(tt, kind, o, i, item, len, &src, &slen, &owned, &special))) break;
    char err[768] = "";
    int32_t *ids = NULL;
    size_t n = 0;
    rc = sc ? vr_tok_encode_with(tt->tok, sc, src, slen, special, &ids, &n, err, sizeof err)
            : vr_tok_encode(tt->tok, src, slen, special, &ids, &n, err, sizeof err);
    free(owned);
    if (rc) {
      rc = fail(rc == VR_ERR_NOMEM ? rc : VR_ERR_INVAL, "%s[%u]: %s", what, i, err);
      break;
    }
    if (total + n > UINT32_MAX) {
      free(ids);
      rc = fail(VR_ERR_TOO_LARGE, "%s[%u]: more than %u tokens in the batch", what, i, UINT32_MAX);
      break;
    }
    const int ar = vr_tok_ids_append(&all, &cap, &total, ids, n);
    free(ids);
    if (ar) {
      rc = fail(VR_ERR_NOMEM, "out of memory for %llu tokens", (unsigned long long)(total + n));
      break;
    }
    cu[i + 1] = (uint32_t)total;
  }
  vr_tok_scratch_free(sc);
  if (rc) {
    g_bad = (int32_t)i_fail;
    free(all);
    free(cu);
    return rc;
  }
  *ids_out = all;
  *cu_out = cu;
  *n_tokens = total;
  return 0;
}

int vr_client_text_score(const vr_client_text_t *tt, vr_client_t *c, vr_text_input_t kind, const vr_text_batch_t *b,
                         const vr_text_options_t *opt, float *scores, float *components, vr_request_info_t *info) {
  if (!c || !scores) return fail(VR_ERR_INVAL, "vr_client_text_score: NULL client or scores");
  int rc = vr_client_text_check(tt, c);
  if (rc) return rc;
  int32_t *ids = NULL;
  uint32_t *cu = NULL;
  uint64_t n_tokens = 0;
  if ((rc = vr_client_text_encode(tt, kind, b, opt, &ids, &cu, &n_tokens))) {
    if (info) { /* as a request the server refused: its status and the item */
      memset(info, 0, sizeof *info);
      info->status = rc;
      info->n_seqs = b->n;
      info->bad_seq = g_bad;
    }
    return rc;
  }
  int32_t one = 0; /* vr_batch_t wants a pointer even for zero tokens */
  vr_batch_t batch = {.n_seqs = b->n, .token_ids = ids ? ids : &one, .cu_seqlens = cu, .extras = b->extras,
                      .extras_len = b->extras_len};
  rc = vr_client_score(c, &batch, scores, components, info);
  if (rc) fail(rc, "%s", vr_client_last_error());
  free(ids);
  free(cu);
  return rc;
}
