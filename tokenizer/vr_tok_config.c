/* vr_tok_config.c: tokenizer_config.json (special tokens, chat templates, flags) and the rules by
 * which transformers 5 changes the tokenizer.json pipeline for some tokenizer classes. */
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_jsonl.h"
#include "vr_tok_internal.h"

int vr_tok_set_special(vr_tok_t *tok, int which, const cJSON *v) {
  if (tok->special_text[which]) return 0;
  const char *s = cJSON_IsString(v) ? v->valuestring : cJSON_IsObject(v) ? vr_tok_jstr(v, "content") : NULL;
  if (!s) return 0;
  tok->special_text[which] = strdup(s);
  return tok->special_text[which] ? 0 : VR_ERR_NOMEM;
}

const char *const vr_tok_special_keys[4] = {"bos_token", "eos_token", "pad_token", "unk_token"};

/* Special tokens the config names (and class defaults) become special added tokens when the
 * model vocab holds them, as transformers' from_pretrained does. */
static int add_named_special(vr_tok_t *tok, const cJSON *v) {
  const char *s = cJSON_IsString(v) ? v->valuestring : cJSON_IsObject(v) ? vr_tok_jstr(v, "content") : NULL;
  if (!s) return 0;
  int found;
  vr_tok_map_get(&tok->added_by_content, s, strlen(s), &found);
  if (found) return 0;
  int32_t id = vr_tok_map_get(&tok->model.vocab, s, strlen(s), NULL);
  if (id < 0) return 0;
  return vr_tok_add_token(tok, s, id, 1, 0, 0, 0, 0);
}

static int pre_bytelevel(const vr_tok_pre_t *p) {
  if (!p) return 0;
  if (p->type == VR_TOK_PRE_BYTELEVEL) return 1;
  for (size_t i = 0; i < p->nsub; i++)
    if (pre_bytelevel(p->sub[i])) return 1;
  return 0;
}

static int dec_bytelevel(const vr_tok_dec_t *d) {
  if (!d) return 0;
  if (d->type == VR_TOK_DEC_BYTELEVEL) return 1;
  for (size_t i = 0; i < d->nsub; i++)
    if (dec_bytelevel(d->sub[i])) return 1;
  return 0;
}

/* A GPT-2 style byte-level tokenizer.json (ByteLevel pre-tokenizer or decoder). */
static int is_bytelevel(const vr_tok_t *tok) { return pre_bytelevel(tok->pre) || dec_bytelevel(tok->dec); }

static int32_t config_token_id(const vr_tok_t *tok, const cJSON *v) {
  const char *s = cJSON_IsString(v) ? v->valuestring : cJSON_IsObject(v) ? vr_tok_jstr(v, "content") : NULL;
  return s ? vr_tok_token_to_id(tok, s, strlen(s)) : -1;
}

/* Llama/Gemma classes' update_post_processor: the single template is [bos if add_bos_token] $A
 * [eos if add_eos_token], replacing the file's post-processor (ByteLevel's changes only offsets). */
static int bos_eos_template(vr_tok_t *tok, const cJSON *root, int add_bos, int add_eos) {
  int32_t bos = config_token_id(tok, cJSON_GetObjectItemCaseSensitive(root, "bos_token"));
  int32_t eos = config_token_id(tok, cJSON_GetObjectItemCaseSensitive(root, "eos_token"));
  vr_tok_post_t *p = calloc(1, sizeof *p);
  if (!p) return VR_ERR_NOMEM;
  p->type = VR_TOK_POST_TEMPLATE;
  p->pre = malloc(sizeof *p->pre);
  p->post = malloc(sizeof *p->post);
  if (!p->pre || !p->post) {
    vr_tok_post_free(p);
    return VR_ERR_NOMEM;
  }
  if (add_bos && bos >= 0) p->pre[p->npre++] = bos;
  if (add_eos && eos >= 0) p->post[p->npost++] = eos;
  vr_tok_post_free(tok->post);
  tok->post = p;
  return 0;
}

/* transformers 5 rebuilds parts of the pipeline in some tokenizer classes instead of taking
 * tokenizer.json as it is (seen with the fixtures of tests/fixtures/tokenizers: the effective pipeline that
 * transformers' backend_tokenizer reports). We apply the same, keyed on tokenizer_class:
 *   LlamaTokenizer(Fast): no normalizer; pre_tokenizer Metaspace("▁", prepend_scheme, split=false)
 *     with prepend_scheme "never" when add_prefix_space is false, else "first" when legacy is
 *     false, else "always" (legacy absent or null counts as true). Not for a byte-level
 *     tokenizer.json under that class name (DeepSeek-V3/R1, deepseek-llm, ...): transformers
 *     5.0-5.15 installed Metaspace there too, which drops every space (transformers issues
 *     #45488, #48206); the fix (PR #48317) routes such files to the file's own pipeline, which
 *     is what we use.
 *   GemmaTokenizer(Fast): mask_token "<mask>" by default (a special added token when in vocab)
 *   both: when the config sets add_bos_token / add_eos_token, the single template becomes
 *     [bos] $A [eos] accordingly (update_post_processor; DeepSeek's byte-level files rely on it)
 * Every class: bos/eos/unk/pad/mask/cls/sep and additional_special_tokens named in the config
 * are special added tokens. Other classes (PreTrainedTokenizerFast, TokenizersBackend,
 * Qwen2Tokenizer, ...) use tokenizer.json's pipeline unchanged. */
static int apply_class_rules(vr_tok_t *tok, const cJSON *root, const char *file, char *err, size_t errlen) {
  const char *cls = vr_tok_jstr(root, "tokenizer_class");
  int rc = 0;
  if (cls && (!strcmp(cls, "LlamaTokenizer") || !strcmp(cls, "LlamaTokenizerFast")) && !is_bytelevel(tok)) {
    int aps = vr_tok_jbool(root, "add_prefix_space", 1), legacy = vr_tok_jbool(root, "legacy", 1);
    if (aps < 0 || legacy < 0) {
      vr_tok_seterr(err, errlen, "%s: add_prefix_space / legacy is not a boolean", file);
      return VR_ERR_MODEL_FORMAT;
    }
    vr_tok_pre_t *p = calloc(1, sizeof *p);
    if (!p) return VR_ERR_NOMEM;
    p->type = VR_TOK_PRE_METASPACE;
    p->replacement = 0x2581;
    p->prepend_scheme = !aps ? VR_TOK_PREPEND_NEVER : !legacy ? VR_TOK_PREPEND_FIRST : VR_TOK_PREPEND_ALWAYS;
    p->split = 0;
    vr_tok_norm_free(tok->norm);
    tok->norm = NULL;
    vr_tok_pre_free(tok->pre);
    tok->pre = p;
  }
  if (cls && (!strcmp(cls, "GemmaTokenizer") || !strcmp(cls, "GemmaTokenizerFast")) &&
      !cJSON_GetObjectItemCaseSensitive(root, "mask_token")) {
    cJSON *m = cJSON_CreateString("<mask>");
    rc = m ? add_named_special(tok, m) : VR_ERR_NOMEM;
    cJSON_Delete(m);
  }
  int llama_like = cls && (!strcmp(cls, "LlamaTokenizer") || !strcmp(cls, "LlamaTokenizerFast") ||
                           !strcmp(cls, "GemmaTokenizer") || !strcmp(cls, "GemmaTokenizerFast"));
  const cJSON *ab = cJSON_GetObjectItemCaseSensitive(root, "add_bos_token");
  const cJSON *ae = cJSON_GetObjectItemCaseSensitive(root, "add_eos_token");
  if (!rc && llama_like && (cJSON_IsBool(ab) || cJSON_IsBool(ae))) rc = bos_eos_template(tok, root, cJSON_IsTrue(ab), cJSON_IsTrue(ae));
  static const char *const keys[] = {"bos_token", "eos_token", "unk_token", "pad_token", "mask_token", "cls_token",
                                     "sep_token"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0] && !rc; i++)
    rc = add_named_special(tok, cJSON_GetObjectItemCaseSensitive(root, keys[i]));
  const cJSON *extra = cJSON_GetObjectItemCaseSensitive(root, "additional_special_tokens"), *e;
  if (cJSON_IsArray(extra)) cJSON_ArrayForEach(e, extra) {
      if (rc) break;
      rc = add_named_special(tok, e);
    }
  return rc;
}

int vr_tok_parse_config(vr_tok_t *tok, const char *json, size_t len, const char *file, char *err, size_t errlen) {
  /* transformers reads it with json.load: one value, the last of a repeated key */
  char jerr[1400] = "";
  cJSON *root = vr_tok_utf8_check(json, len) == len
                    ? vr_json_parse_file(json, len, file, VR_JSON_DUP_LAST, jerr, sizeof jerr)
                    : NULL;
  if (!root || !cJSON_IsObject(root)) {
    if (jerr[0]) vr_tok_seterr(err, errlen, "%s", jerr);
    else vr_tok_seterr(err, errlen, "%s: not a JSON object", file);
    cJSON_Delete(root);
    return VR_ERR_MODEL_FORMAT;
  }
  int rc = 0;
  for (int i = 0; i < 4 && !rc; i++) rc = vr_tok_set_special(tok, i, cJSON_GetObjectItemCaseSensitive(root, vr_tok_special_keys[i]));
  int cu = vr_tok_jbool(root, "clean_up_tokenization_spaces", 0);
  if (cu < 0) {
    vr_tok_seterr(err, errlen, "%s: clean_up_tokenization_spaces is not a boolean", file);
    rc = VR_ERR_MODEL_FORMAT;
  }
  int ss = vr_tok_jbool(root, "split_special_tokens", 0);
  if (ss < 0) {
    vr_tok_seterr(err, errlen, "%s: split_special_tokens is not a boolean", file);
    rc = VR_ERR_MODEL_FORMAT;
  }
  tok->split_special = ss > 0;
  /* transformers 5 ignores the flag for BPE models ("destructive for BPE", it warns) */
  tok->clean_up_spaces = cu > 0 && tok->model.type != VR_TOK_MODEL_BPE;
  /* added_tokens_decoder: tokens transformers adds when tokenizer.json lacks them */
  const cJSON *atd = cJSON_GetObjectItemCaseSensitive(root, "added_tokens_decoder");
  const cJSON *e;
  if (!rc && cJSON_IsObject(atd)) {
    cJSON_ArrayForEach(e, atd) {
      char *end;
      long id = strtol(e->string, &end, 10);
      if (*end || id < 0 || id > 16777216 || !cJSON_IsObject(e)) {
        vr_tok_seterr(err, errlen, "%s: added_tokens_decoder: key '%.40s' is not a token id", file, e->string);
        rc = VR_ERR_MODEL_FORMAT;
        break;
      }
      if ((rc = vr_tok_parse_added_obj(tok, e, (int32_t)id, file, "added_tokens_decoder", err, errlen))) break;
    }
  }
  if (!rc) rc = apply_class_rules(tok, root, file, err, errlen);
  const cJSON *ct = cJSON_GetObjectItemCaseSensitive(root, "chat_template");
  if (!rc && cJSON_IsString(ct)) {
    tok->templates = calloc(1, sizeof *tok->templates);
    if (!tok->templates || !(tok->templates[0].name = strdup("default")) ||
        !(tok->templates[0].text = strdup(ct->valuestring)))
      rc = VR_ERR_NOMEM;
    else
      tok->ntemplates = 1;
  } else if (!rc && cJSON_IsArray(ct)) {
    size_t k = (size_t)cJSON_GetArraySize(ct);
    tok->templates = calloc(k ? k : 1, sizeof *tok->templates);
    if (!tok->templates) rc = VR_ERR_NOMEM;
    cJSON_ArrayForEach(e, ct) {
      if (rc) break;
      const char *nm = vr_tok_jstr(e, "name"), *tx = vr_tok_jstr(e, "template");
      if (!nm || !tx) {
        vr_tok_seterr(err, errlen, "%s: chat_template: a list entry is not {name, template}", file);
        rc = VR_ERR_MODEL_FORMAT;
        break;
      }
      vr_tok_template_t *t = &tok->templates[tok->ntemplates];
      if (!(t->name = strdup(nm)) || !(t->text = strdup(tx))) rc = VR_ERR_NOMEM;
      tok->ntemplates++;
    }
  } else if (!rc && ct && !cJSON_IsNull(ct)) {
    vr_tok_seterr(err, errlen, "%s: chat_template is neither a string nor a list of {name, template}", file);
    rc = VR_ERR_MODEL_FORMAT;
  }
  cJSON_Delete(root);
  return rc;
}
