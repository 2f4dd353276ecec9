/* test_tok_units: the components the six real tokenizers do not exercise, on small tokenizer.json
 * texts, with what Hugging Face tokenizers gives (worked out from its sources: split behaviors,
 * Digits, Punctuation, Whitespace(Split), BertPreTokenizer, Metaspace schemes, ByteLevel's prefix
 * space, normalizers NFKD/StripAccents/Lowercase/Replace/Strip/Prepend, BPE with
 * continuing_subword_prefix + end_of_word_suffix, Unigram byte_fallback, added-token rstrip,
 * Roberta/Bert post-processors, decoders BPEDecoder/CTC/WordPiece/Strip), the Oniguruma-compatible
 * regex translation, the error messages (not a tokenizer, unsupported components, invalid UTF-8,
 * ids outside the vocabulary), and concurrent encode on one handle. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "verl_reward/status.h"
#include "vr_tok_regex.h"
#include "vr_tokenizer.h"

/* A WordPiece tokenizer whose vocab is [UNK] + the given pieces (no ## entries), so each
 * pre-token that is a whole vocab entry comes out as one id: the output shows the split. */
static vr_tok_t *mk(const char *normalizer, const char *pre, const char *post, const char *decoder,
                    const char *added, const char *const *vocab) {
  static char json[16384];
  char v[8192] = "\"[UNK]\": 0";
  size_t k = strlen(v);
  for (int i = 0; vocab[i]; i++) k += (size_t)snprintf(v + k, sizeof v - k, ", \"%s\": %d", vocab[i], i + 1);
  snprintf(json, sizeof json,
           "{\"version\": \"1.0\", \"added_tokens\": [%s], \"normalizer\": %s, \"pre_tokenizer\": %s, "
           "\"post_processor\": %s, \"decoder\": %s, \"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", "
           "\"continuing_subword_prefix\": \"##\", \"max_input_chars_per_word\": 100, \"vocab\": {%s}}}",
           added ? added : "", normalizer ? normalizer : "null", pre ? pre : "null", post ? post : "null",
           decoder ? decoder : "null", v);
  vr_tok_t *t = NULL;
  char err[512];
  int rc = vr_tok_load_json(json, strlen(json), "unit.json", &t, err, sizeof err);
  if (rc) fprintf(stderr, "load: %s\n", err);
  assert_int_equal(rc, 0);
  return t;
}

/* encode -> tokens joined with '|' */
static void expect_split(const vr_tok_t *t, const char *text, const char *want) {
  int32_t *ids = NULL;
  size_t n = 0;
  char err[256];
  assert_int_equal(vr_tok_encode(t, text, strlen(text), 0, &ids, &n, err, sizeof err), 0);
  char got[2048] = "";
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    size_t tl;
    const char *s = vr_tok_id_to_token(t, ids[i], &tl);
    k += (size_t)snprintf(got + k, sizeof got - k, "%s%.*s", i ? "|" : "", (int)tl, s);
  }
  free(ids);
  if (strcmp(got, want)) fprintf(stderr, "text '%s': want '%s' got '%s'\n", text, want, got);
  assert_string_equal(got, want);
}

static void test_split_behaviors(void **st) {
  const char *vocab[] = {"a", "-", "b", "a-", "-b", "b-", "--", "-a", NULL};
  static const char *const beh[][2] = {
      {"Removed", "a|b|a"},
      {"Isolated", "a|-|b|-|-|a"},
      {"MergedWithPrevious", "a-|b-|-|a"},
      {"MergedWithNext", "a|-b|-|-a"},
      {"Contiguous", "a|-|b|--|a"},
  };
  for (size_t i = 0; i < 5; i++) {
    char pre[256];
    snprintf(pre, sizeof pre, "{\"type\": \"Split\", \"pattern\": {\"String\": \"-\"}, \"behavior\": \"%s\", \"invert\": false}",
             beh[i][0]);
    vr_tok_t *t = mk(NULL, pre, NULL, NULL, NULL, vocab);
    expect_split(t, "a-b--a", beh[i][1]);
    vr_tok_free(t);
  }
  /* invert: the delimiters are the non-matches; Removed keeps the matches */
  vr_tok_t *t = mk(NULL, "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"[ab]\"}, \"behavior\": \"Removed\", \"invert\": true}",
                   NULL, NULL, NULL, vocab);
  expect_split(t, "a-b--a", "a|b|a");
  vr_tok_free(t);
  (void)st;
}

static void test_simple_pretokenizers(void **st) {
  const char *vocab[] = {"ab", "123", "c", "45", "1", "2", "3", "4", "5", "hi", "!", "?", "there", "hello", ",",
                         "world", "!!", "Hi", NULL};
  vr_tok_t *t = mk(NULL, "{\"type\": \"Digits\", \"individual_digits\": false}", NULL, NULL, NULL, vocab);
  expect_split(t, "ab123c45", "ab|123|c|45");
  vr_tok_free(t);
  t = mk(NULL, "{\"type\": \"Digits\", \"individual_digits\": true}", NULL, NULL, NULL, vocab);
  expect_split(t, "ab123c45", "ab|1|2|3|c|4|5");
  vr_tok_free(t);
  t = mk(NULL, "{\"type\": \"Punctuation\", \"behavior\": \"Isolated\"}", NULL, NULL, NULL, vocab);
  expect_split(t, "hi!?there", "hi|!|?|there");
  vr_tok_free(t);
  t = mk(NULL, "{\"type\": \"Whitespace\"}", NULL, NULL, NULL, vocab);
  expect_split(t, "hello, world!!", "hello|,|world|!!");
  vr_tok_free(t);
  t = mk(NULL, "{\"type\": \"WhitespaceSplit\"}", NULL, NULL, NULL, vocab);
  expect_split(t, "  hello \t world\n", "hello|world");
  vr_tok_free(t);
  t = mk(NULL, "{\"type\": \"BertPreTokenizer\"}", NULL, NULL, NULL, vocab);
  expect_split(t, "Hi, there!", "Hi|,|there|!");
  vr_tok_free(t);
  t = mk(NULL, "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"WhitespaceSplit\"}, {\"type\": \"Digits\", "
               "\"individual_digits\": true}]}", NULL, NULL, NULL, vocab);
  expect_split(t, "ab12 c", "ab|1|2|c");
  vr_tok_free(t);
  (void)st;
}

static void test_metaspace_bytelevel(void **st) {
  const char *vocab[] = {"\xe2\x96\x81hey", "\xe2\x96\x81", "\xe2\x96\x81you", "hey", "\xc4\xa0hello",
                         "\xc4\xa0world", "<x>", "\xe2\x96\x81" "a", "\xe2\x96\x81" "b", NULL};
  vr_tok_t *t = mk(NULL, "{\"type\": \"Metaspace\", \"replacement\": \"\xe2\x96\x81\", \"prepend_scheme\": \"always\", \"split\": true}",
                   NULL, NULL, NULL, vocab);
  expect_split(t, "hey  you", "\xe2\x96\x81hey|\xe2\x96\x81|\xe2\x96\x81you");
  vr_tok_free(t);
  t = mk(NULL, "{\"type\": \"Metaspace\", \"replacement\": \"\xe2\x96\x81\", \"prepend_scheme\": \"never\", \"split\": true}",
         NULL, NULL, NULL, vocab);
  expect_split(t, "hey  you", "hey|\xe2\x96\x81|\xe2\x96\x81you");
  vr_tok_free(t);
  /* first: only the piece at the start of the input gets the prefix */
  const char *added = "{\"id\": 7, \"content\": \"<x>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, "
                      "\"normalized\": false, \"special\": true}";
  t = mk(NULL, "{\"type\": \"Metaspace\", \"replacement\": \"\xe2\x96\x81\", \"prepend_scheme\": \"first\", \"split\": true}",
         NULL, NULL, added, vocab);
  expect_split(t, "hey<x>hey", "\xe2\x96\x81hey|<x>|hey");
  vr_tok_free(t);
  /* rstrip takes the spaces after the added token */
  const char *added_r = "{\"id\": 7, \"content\": \"<x>\", \"single_word\": false, \"lstrip\": false, \"rstrip\": true, "
                        "\"normalized\": false, \"special\": true}";
  const char *meta = "{\"type\": \"Metaspace\", \"replacement\": \"\xe2\x96\x81\", \"prepend_scheme\": \"always\", \"split\": true}";
  t = mk(NULL, meta, NULL, NULL, added, vocab);
  expect_split(t, "a<x>  b", "\xe2\x96\x81" "a|<x>|\xe2\x96\x81|\xe2\x96\x81" "b");
  vr_tok_free(t);
  t = mk(NULL, meta, NULL, NULL, added_r, vocab);
  expect_split(t, "a<x>  b", "\xe2\x96\x81" "a|<x>|\xe2\x96\x81" "b");
  vr_tok_free(t);
  t = mk(NULL, "{\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true}",
         NULL, NULL, NULL, vocab);
  expect_split(t, "hello world", "\xc4\xa0hello|\xc4\xa0world");
  vr_tok_free(t);
  (void)st;
}

static void test_normalizers(void **st) {
  const char *vocab[] = {"ecole", "fi", "a", "b", "x_y", "NEW", NULL};
  vr_tok_t *t = mk("{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFKD\"}, {\"type\": \"StripAccents\"}, "
                   "{\"type\": \"Lowercase\"}]}", "{\"type\": \"WhitespaceSplit\"}", NULL, NULL, NULL, vocab);
  expect_split(t, "\xc3\x89" "COLE \xef\xac\x81", "ecole|fi"); /* ÉCOLE ﬁ */
  vr_tok_free(t);
  t = mk("{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Strip\", \"strip_left\": true, \"strip_right\": true}, "
         "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"\\\\s+\"}, \"content\": \"_\"}]}", NULL, NULL, NULL, NULL,
         vocab);
  expect_split(t, "  x \t y \n", "x_y");
  vr_tok_free(t);
  t = mk("{\"type\": \"Prepend\", \"prepend\": \"NE\"}", NULL, NULL, NULL, NULL, vocab);
  expect_split(t, "W", "NEW");
  vr_tok_free(t);
  (void)st;
}

static void test_bpe_prefix_suffix(void **st) {
  const char *json =
      "{\"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": \"<unk>\", \"continuing_subword_prefix\": \"##\", "
      "\"end_of_word_suffix\": \"</w>\", \"fuse_unk\": true, \"byte_fallback\": false, "
      "\"vocab\": {\"<unk>\": 0, \"l\": 1, \"##o\": 2, \"##w</w>\": 3, \"lo\": 4, \"low</w>\": 5, \"a</w>\": 6}, "
      "\"merges\": [\"l ##o\", \"lo ##w</w>\"]}, \"pre_tokenizer\": {\"type\": \"WhitespaceSplit\"}, "
      "\"decoder\": {\"type\": \"BPEDecoder\", \"suffix\": \"</w>\"}}";
  vr_tok_t *t = NULL;
  char err[512];
  assert_int_equal(vr_tok_load_json(json, strlen(json), "bpe.json", &t, err, sizeof err), 0);
  int32_t *ids = NULL;
  size_t n = 0;
  /* "low" merges fully; "lzzo": l, then ##z ##z ##o</w> unknown (fused into one unk) */
  assert_int_equal(vr_tok_encode(t, "low lzzo a", 10, 0, &ids, &n, err, sizeof err), 0);
  int32_t want[] = {5, 1, 0, 6};
  assert_int_equal(n, 4);
  assert_memory_equal(ids, want, sizeof want);
  char *text = NULL;
  size_t tl;
  int32_t d[] = {5, 6};
  assert_int_equal(vr_tok_decode(t, d, 2, 0, &text, &tl, err, sizeof err), 0);
  assert_string_equal(text, "low a"); /* </w> -> " " except on the last token */
  free(text);
  free(ids);
  vr_tok_free(t);
  (void)st;
}

static void test_unigram_byte_fallback(void **st) {
  char json[8192];
  size_t k = (size_t)snprintf(json, sizeof json,
                              "{\"pre_tokenizer\": {\"type\": \"WhitespaceSplit\"}, \"model\": {\"type\": \"Unigram\", "
                              "\"unk_id\": 0, \"byte_fallback\": true, \"vocab\": [[\"<unk>\", 0.0], [\"ab\", -1.0], "
                              "[\"a\", -2.0], [\"b\", -2.0]");
  for (int b = 0; b < 256; b++) k += (size_t)snprintf(json + k, sizeof json - k, ", [\"<0x%02X>\", -10.0]", b);
  snprintf(json + k, sizeof json - k, "]}}");
  vr_tok_t *t = NULL;
  char err[512];
  assert_int_equal(vr_tok_load_json(json, strlen(json), "uni.json", &t, err, sizeof err), 0);
  int32_t *ids = NULL;
  size_t n = 0;
  /* "ab" beats a+b; "é" (C3 A9) has no piece: unk in the lattice, then its bytes */
  assert_int_equal(vr_tok_encode(t, "ab\xc3\xa9" "a", 5, 0, &ids, &n, err, sizeof err), 0);
  int32_t want[] = {1, 4 + 0xC3, 4 + 0xA9, 2};
  assert_int_equal(n, 4);
  assert_memory_equal(ids, want, sizeof want);
  free(ids);
  vr_tok_free(t);
  (void)st;
}

static void test_post_and_decoders(void **st) {
  const char *vocab[] = {"<s>", "</s>", "hello", "##world", ",", "don", "'", "t", "<pad>", "h", "e", "l", "|", "o", NULL};
  vr_tok_t *t = mk(NULL, "{\"type\": \"WhitespaceSplit\"}", "{\"type\": \"RobertaProcessing\", \"sep\": [\"</s>\", 2], "
                   "\"cls\": [\"<s>\", 1], \"trim_offsets\": true, \"add_prefix_space\": false}",
                   "{\"type\": \"WordPiece\", \"prefix\": \"##\", \"cleanup\": true}", NULL, vocab);
  int32_t *ids = NULL;
  size_t n = 0;
  char err[256];
  assert_int_equal(vr_tok_encode(t, "hello", 5, 1, &ids, &n, err, sizeof err), 0);
  int32_t want[] = {1, 3, 2};
  assert_int_equal(n, 3);
  assert_memory_equal(ids, want, sizeof want);
  free(ids);
  int32_t d[] = {3, 4, 5, 6, 7, 8};
  char *text = NULL;
  size_t tl;
  assert_int_equal(vr_tok_decode(t, d, 6, 0, &text, &tl, err, sizeof err), 0);
  assert_string_equal(text, "helloworld, don ' t"); /* cleanup runs per token */
  free(text);
  vr_tok_free(t);
  t = mk(NULL, NULL, NULL, "{\"type\": \"CTC\", \"pad_token\": \"<pad>\", \"word_delimiter_token\": \"|\", \"cleanup\": true}",
         NULL, vocab);
  int32_t c[] = {9, 10, 10, 11, 9, 12, 12, 13, 14};
  assert_int_equal(vr_tok_decode(t, c, 9, 0, &text, &tl, err, sizeof err), 0);
  assert_string_equal(text, "hel o");
  free(text);
  vr_tok_free(t);
  t = mk(NULL, NULL, NULL, "{\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Strip\", \"content\": \"h\", \"start\": 1, "
         "\"stop\": 0}, {\"type\": \"Fuse\"}]}", NULL, vocab);
  int32_t s2[] = {3, 11, 10};
  assert_int_equal(vr_tok_decode(t, s2, 3, 0, &text, &tl, err, sizeof err), 0);
  assert_string_equal(text, "elloe"); /* hello e h: one leading 'h' stripped per token */
  free(text);
  vr_tok_free(t);
  (void)st;
}

static int count_cb(void *u, size_t a, size_t e) {
  (*(int *)u)++;
  return 0;
}

static int re_count(const char *pat, const char *s) {
  vr_tok_re_t *re = NULL;
  char err[256];
  assert_int_equal(vr_tok_re_compile(pat, strlen(pat), 0, &re, err, sizeof err), 0);
  vr_tok_re_scratch_t *sc = vr_tok_re_scratch_new();
  int n = 0;
  assert_int_equal(vr_tok_re_each(re, sc, s, strlen(s), count_cb, &n), 0);
  vr_tok_re_scratch_free(sc);
  vr_tok_re_free(re);
  return n;
}

static void test_regex_onig(void **st) {
  /* \s is White_Space: U+0085 yes, U+180E no (PCRE2's own UCP \s takes U+180E) */
  assert_int_equal(re_count("\\s", "\xc2\x85"), 1);
  assert_int_equal(re_count("\\s", "\xe1\xa0\x8e"), 0);
  assert_int_equal(re_count("[^\\s\\p{L}]", " a\xe1\xa0\x8e"), 1);
  /* \w takes marks (Oniguruma), (?i:'s) the upper case, \s+(?!\S) leaves the last space */
  assert_int_equal(re_count("\\w+", "e\xcc\x81t\xc3\xa9"), 1);
  assert_int_equal(re_count("(?i:'s)", "'S 's"), 2);
  assert_int_equal(re_count("\\s+(?!\\S)|\\s+", "a   b"), 2);
  char *x = vr_tok_re_translate("[\\s]\\S\\h", 8);
  assert_non_null(strstr(x, "[^\\t\\n"));
  assert_non_null(strstr(x, "[0-9a-fA-F]"));
  free(x);
  (void)st;
}

static void expect_load_error(const char *json, int code, const char *needle) {
  vr_tok_t *t = NULL;
  char err[512] = "";
  int rc = vr_tok_load_json(json, strlen(json), "bad.json", &t, err, sizeof err);
  if (rc != code || !strstr(err, needle)) fprintf(stderr, "rc %d err '%s' (want %d, '%s')\n", rc, err, code, needle);
  assert_int_equal(rc, code);
  assert_non_null(strstr(err, needle));
  assert_null(t);
}

static void test_errors(void **st) {
  expect_load_error("[1, 2]", VR_ERR_MODEL_FORMAT, "bad.json: not a tokenizer");
  expect_load_error("{\"vocab\": 1", VR_ERR_MODEL_FORMAT, "bad.json: not a tokenizer");
  expect_load_error("{\"normalizer\": null}", VR_ERR_MODEL_FORMAT, "no \"model\"");
  const char *m = "\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"u\", \"vocab\": {\"u\": 0}}";
  char j[1024];
  snprintf(j, sizeof j, "{%s, \"normalizer\": {\"type\": \"Nmt\"}}", m);
  expect_load_error(j, VR_ERR_UNSUPPORTED, "bad.json: normalizer Nmt is not supported");
  snprintf(j, sizeof j, "{%s, \"pre_tokenizer\": {\"type\": \"UnicodeScripts\"}}", m);
  expect_load_error(j, VR_ERR_UNSUPPORTED, "bad.json: pre_tokenizer UnicodeScripts is not supported");
  snprintf(j, sizeof j, "{%s, \"decoder\": {\"type\": \"Magic\"}}", m);
  expect_load_error(j, VR_ERR_UNSUPPORTED, "bad.json: decoder Magic is not supported");
  snprintf(j, sizeof j, "{%s, \"post_processor\": {\"type\": \"Magic\"}}", m);
  expect_load_error(j, VR_ERR_UNSUPPORTED, "bad.json: post_processor Magic is not supported");
  expect_load_error("{\"model\": {\"type\": \"WordLevel\", \"vocab\": {}}}", VR_ERR_UNSUPPORTED, "model WordLevel is not supported");
  expect_load_error("{\"model\": {\"type\": \"BPE\", \"dropout\": 0.1, \"vocab\": {}, \"merges\": []}}", VR_ERR_UNSUPPORTED,
                    "dropout");
  expect_load_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}", VR_ERR_MODEL_FORMAT,
                    "merge 0");
  snprintf(j, sizeof j, "{%s, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}", m);
  expect_load_error(j, VR_ERR_UNSUPPORTED, "does not compile");
  snprintf(j, sizeof j, "{%s, \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": \"x\"}, \"behavior\": \"Sideways\"}}", m);
  expect_load_error(j, VR_ERR_MODEL_FORMAT, "behavior Sideways");
  /* a directory without tokenizer.json */
  vr_tok_t *t = NULL;
  char err[512];
  assert_int_equal(vr_tok_load("/nonexistent-dir", &t, err, sizeof err), VR_ERR_IO);
  assert_non_null(strstr(err, "/nonexistent-dir/tokenizer.json: no such file"));
  /* invalid UTF-8, ids outside the vocabulary */
  snprintf(j, sizeof j, "{%s}", m);
  assert_int_equal(vr_tok_load_json(j, strlen(j), "ok.json", &t, err, sizeof err), 0);
  int32_t *ids = NULL;
  size_t n;
  assert_int_equal(vr_tok_encode(t, "ab\xff" "c", 4, 1, &ids, &n, err, sizeof err), VR_ERR_INVAL);
  assert_non_null(strstr(err, "not valid UTF-8 (byte 2: 0xFF)"));
  assert_int_equal(vr_tok_encode(t, "a\xed\xa0\x80", 4, 1, &ids, &n, err, sizeof err), VR_ERR_INVAL); /* surrogate */
  int32_t bad[] = {0, 5};
  char *text = NULL;
  size_t tl;
  assert_int_equal(vr_tok_decode(t, bad, 2, 0, &text, &tl, err, sizeof err), VR_ERR_TOKEN_RANGE);
  assert_non_null(strstr(err, "id 5 (position 1)"));
  vr_tok_free(t);
  (void)st;
}

/* ---- transformers 5 class rules (tokenizer_config.json's tokenizer_class) ------------------ */

/* A model directory with tokenizer.json, tokenizer_config.json and (when stm) special_tokens_map.json. */
static vr_tok_t *load_dir3(const char *tokenizer_json, const char *config, const char *stm) {
  char dir[] = "/tmp/vr_tok_unit_XXXXXX";
  assert_non_null(mkdtemp(dir));
  const char *names[3] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"};
  const char *texts[3] = {tokenizer_json, config, stm};
  char path[256];
  for (int i = 0; i < 3; i++) {
    if (!texts[i]) continue;
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    FILE *f = fopen(path, "w");
    fputs(texts[i], f);
    fclose(f);
  }
  vr_tok_t *t = NULL;
  char err[512];
  int rc = vr_tok_load(dir, &t, err, sizeof err);
  if (rc) fprintf(stderr, "load: %s\n", err);
  assert_int_equal(rc, 0);
  for (int i = 0; i < 3; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    unlink(path);
  }
  rmdir(dir);
  return t;
}

static vr_tok_t *load_dir(const char *tokenizer_json, const char *config) {
  return load_dir3(tokenizer_json, config, NULL);
}

static void test_class_rules(void **st) {
  /* SentencePiece-style file under LlamaTokenizer: normalizer dropped, Metaspace(first) when
   * legacy is false: only the start of the input gets the prefix */
  const char *spm = "{\"added_tokens\": [{\"id\": 1, \"content\": \"<s>\", \"single_word\": false, \"lstrip\": false, "
                    "\"rstrip\": false, \"normalized\": false, \"special\": true}], "
                    "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\xe2\x96\x81\"}, "
                    "{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\xe2\x96\x81\"}]}, "
                    "\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"fuse_unk\": true, \"byte_fallback\": false, "
                    "\"vocab\": {\"<unk>\": 0, \"<s>\": 1, \"\xe2\x96\x81\": 2, \"h\": 3, \"i\": 4, \"\xe2\x96\x81h\": 5, \"hi\": 6, "
                    "\"\xe2\x96\x81hi\": 7}, \"merges\": [\"\xe2\x96\x81 h\", \"h i\", \"\xe2\x96\x81h i\"]}}";
  vr_tok_t *t = load_dir(spm, "{\"tokenizer_class\": \"LlamaTokenizer\", \"legacy\": false, \"add_bos_token\": true, "
                              "\"bos_token\": \"<s>\"}");
  expect_split(t, "hi<s>hi", "\xe2\x96\x81hi|<s>|hi");
  int32_t *ids = NULL;
  size_t n = 0;
  char err[256];
  assert_int_equal(vr_tok_encode(t, "hi", 2, 1, &ids, &n, err, sizeof err), 0);
  assert_int_equal(n, 2); /* add_bos_token: <s> first */
  assert_int_equal(ids[0], 1);
  assert_int_equal(vr_tok_adds_bos(t), 1);
  free(ids);
  vr_tok_free(t);
  /* split_special_tokens: <s> in the text is text */
  t = load_dir(spm, "{\"tokenizer_class\": \"LlamaTokenizer\", \"legacy\": false, \"split_special_tokens\": true}");
  expect_split(t, "hi<s>", "\xe2\x96\x81hi|<unk>");
  vr_tok_free(t);
  /* legacy true (the file's rule was Prepend on every piece): Metaspace(always) */
  t = load_dir(spm, "{\"tokenizer_class\": \"LlamaTokenizer\", \"legacy\": true}");
  expect_split(t, "hi<s>hi", "\xe2\x96\x81hi|<s>|\xe2\x96\x81hi");
  vr_tok_free(t);
  /* a byte-level file under LlamaTokenizerFast (DeepSeek) keeps its pipeline, gets its BOS */
  const char *bl = "{\"added_tokens\": [{\"id\": 0, \"content\": \"<B>\", \"single_word\": false, \"lstrip\": false, "
                   "\"rstrip\": false, \"normalized\": true, \"special\": true}], "
                   "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}, "
                   "\"post_processor\": {\"type\": \"ByteLevel\"}, \"decoder\": {\"type\": \"ByteLevel\"}, "
                   "\"model\": {\"type\": \"BPE\", \"vocab\": {\"<B>\": 0, \"h\": 1, \"i\": 2, \"\xc4\xa0\": 3, \"hi\": 4, "
                   "\"\xc4\xa0hi\": 5}, \"merges\": [\"h i\", \"\xc4\xa0 hi\"]}}";
  t = load_dir(bl, "{\"tokenizer_class\": \"LlamaTokenizerFast\", \"add_bos_token\": true, \"add_eos_token\": false, "
                   "\"legacy\": true, \"bos_token\": {\"__type\": \"AddedToken\", \"content\": \"<B>\"}}");
  expect_split(t, "hi hi", "hi|\xc4\xa0hi");
  assert_int_equal(vr_tok_encode(t, "hi hi", 5, 1, &ids, &n, err, sizeof err), 0);
  int32_t want[] = {0, 4, 5};
  assert_int_equal(n, 3);
  assert_memory_equal(ids, want, sizeof want);
  free(ids);
  char *text = NULL;
  size_t tl;
  assert_int_equal(vr_tok_decode(t, want, 3, 1, &text, &tl, err, sizeof err), 0);
  assert_string_equal(text, "hi hi");
  free(text);
  vr_tok_free(t);
  (void)st;
}

static void test_config_accessors(void **st) {
  const char *tj = "{\"added_tokens\": [{\"id\": 0, \"content\": \"<e>\", \"special\": true}], \"model\": "
                   "{\"type\": \"WordPiece\", \"unk_token\": \"u\", \"vocab\": {\"<e>\": 0, \"u\": 1, \"<p>\": 2}}}";
  /* templates as a list of {name, template}; eos only in special_tokens_map.json; pad from the
   * config, an AddedToken object, and in the vocab only: it becomes a special added token */
  vr_tok_t *t = load_dir3(tj, "{\"chat_template\": [{\"name\": \"default\", \"template\": \"A{{ x }}\"}, "
                              "{\"name\": \"tool_use\", \"template\": \"B\"}], \"bos_token\": null, "
                              "\"pad_token\": {\"__type\": \"AddedToken\", \"content\": \"<p>\"}}",
                          "{\"eos_token\": \"<e>\", \"pad_token\": \"u\"}");
  assert_int_equal(vr_tok_chat_template_count(t), 2);
  assert_string_equal(vr_tok_chat_template(t, NULL), "A{{ x }}");
  assert_string_equal(vr_tok_chat_template(t, "tool_use"), "B");
  assert_null(vr_tok_chat_template(t, "nope"));
  const char *text = NULL;
  assert_string_equal(vr_tok_chat_template_at(t, 1, &text), "tool_use");
  assert_string_equal(text, "B");
  int32_t id;
  assert_null(vr_tok_special_token(t, VR_TOK_BOS, &id));
  assert_int_equal(id, -1);
  assert_string_equal(vr_tok_special_token(t, VR_TOK_EOS, &id), "<e>");
  assert_int_equal(id, 0);
  assert_string_equal(vr_tok_special_token(t, VR_TOK_PAD, &id), "<p>"); /* the config wins */
  assert_int_equal(id, 2);
  assert_int_equal(vr_tok_is_special(t, 2), 1);
  assert_int_equal(vr_tok_is_special(t, 1), 0);
  assert_int_equal(vr_tok_vocab_size(t), 3);
  assert_int_equal(vr_tok_adds_bos(t), 0);
  size_t n;
  assert_memory_equal(vr_tok_id_to_token(t, 2, &n), "<p>", 3);
  vr_tok_free(t);
  /* a plain string template is "default" */
  t = load_dir(tj, "{\"chat_template\": \"C\"}");
  assert_int_equal(vr_tok_chat_template_count(t), 1);
  assert_string_equal(vr_tok_chat_template_at(t, 0, NULL), "default");
  assert_string_equal(vr_tok_chat_template(t, "default"), "C");
  vr_tok_free(t);
  (void)st;
}

/* ---- concurrent encode on one handle ------------------------------------------------------ */

typedef struct job {
  const vr_tok_t *t;
  const char *const *texts;
  int n;
  int32_t **ids;
  size_t *lens;
} job_t;

static void *run_job(void *u) {
  job_t *j = u;
  char err[256];
  for (int r = 0; r < 20; r++)
    for (int i = 0; i < j->n; i++) {
      free(j->ids[i]);
      j->ids[i] = NULL;
      if (vr_tok_encode(j->t, j->texts[i], strlen(j->texts[i]), 1, &j->ids[i], &j->lens[i], err, sizeof err)) j->lens[i] = (size_t)-1;
    }
  return NULL;
}

static void test_threads(void **st) {
  const char *dir = getenv("VR_TOK_THREADS_DIR");
  assert_non_null(dir);
  vr_tok_t *t = NULL;
  char err[512];
  assert_int_equal(vr_tok_load(dir, &t, err, sizeof err), 0);
  const char *texts[] = {"Hello world, this is a test.", "    def f(x):\n        return x\n", "中文 and English 123456",
                         "emoji 👨‍👩‍👧 flags 🇺🇸", "<|im_start|>user\nhi<|im_end|>"};
  int nt = 5;
  int32_t *ref[5] = {0};
  size_t rl[5];
  for (int i = 0; i < nt; i++) assert_int_equal(vr_tok_encode(t, texts[i], strlen(texts[i]), 1, &ref[i], &rl[i], err, sizeof err), 0);
  enum { NTH = 4 };
  pthread_t th[NTH];
  job_t jobs[NTH];
  int32_t *ids[NTH][5];
  size_t lens[NTH][5];
  memset(ids, 0, sizeof ids);
  for (int k = 0; k < NTH; k++) {
    jobs[k] = (job_t){t, texts, nt, ids[k], lens[k]};
    pthread_create(&th[k], NULL, run_job, &jobs[k]);
  }
  for (int k = 0; k < NTH; k++) pthread_join(th[k], NULL);
  for (int k = 0; k < NTH; k++)
    for (int i = 0; i < nt; i++) {
      assert_int_equal(lens[k][i], rl[i]);
      assert_memory_equal(ids[k][i], ref[i], rl[i] * sizeof(int32_t));
      free(ids[k][i]);
    }
  for (int i = 0; i < nt; i++) free(ref[i]);
  vr_tok_free(t);
  (void)st;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_split_behaviors),   cmocka_unit_test(test_simple_pretokenizers),
      cmocka_unit_test(test_metaspace_bytelevel), cmocka_unit_test(test_normalizers),
      cmocka_unit_test(test_bpe_prefix_suffix), cmocka_unit_test(test_unigram_byte_fallback),
      cmocka_unit_test(test_post_and_decoders), cmocka_unit_test(test_regex_onig),
      cmocka_unit_test(test_errors),            cmocka_unit_test(test_class_rules),
      cmocka_unit_test(test_config_accessors),
      cmocka_unit_test(test_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
