/* vr_tok_internal.h: the pipeline's components as loaded from tokenizer.json (internal).
 *
 * Encode follows Hugging Face tokenizers' order: added tokens split off the raw text
 * (normalized=false ones), normalizer on the rest, added tokens split off the normalized text
 * (normalized=true ones), pre-tokenizer on the remaining pieces, model on each piece,
 * post-processor (only with add_special_tokens). Every component is parsed once at load into
 * one of the structs below and never written again: encode/decode only read them, with all
 * per-call state in a vr_tok_ctx_t. Offsets (HF's alignment tracking) are not computed: the
 * library returns ids, and no step that decides ids depends on them. */
#ifndef VR_TOK_INTERNAL_H
#define VR_TOK_INTERNAL_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "vr_tok_regex.h"
#include "vr_tok_util.h"

/* ---- per-call scratch -------------------------------------------------------------------- */

/* A piece of text in ctx->arena: [off, off+len). id >= 0: already a token (an added token).
 * origin: the piece starts at byte 0 of the original input (Metaspace prepend_scheme "first"). */
typedef struct vr_tok_piece {
  uint32_t off, len;
  int32_t id;
  uint8_t origin;
} vr_tok_piece_t;

typedef struct vr_tok_pieces {
  vr_tok_piece_t *v;
  size_t n, cap;
} vr_tok_pieces_t;

int vr_tok_pieces_push(vr_tok_pieces_t *p, uint32_t off, uint32_t len, int32_t id, uint8_t origin);

typedef struct vr_tok_ids {
  int32_t *v;
  size_t n, cap;
} vr_tok_ids_t;

int vr_tok_ids_push(vr_tok_ids_t *ids, int32_t id);

typedef struct vr_tok_ctx {
  vr_tok_re_scratch_t *re;
  vr_tok_buf_t arena; /* texts of pieces */
  vr_tok_buf_t tmp, tmp2;
  vr_tok_pieces_t a, b; /* ping-pong piece lists */
  /* model scratch (BPE symbols / heap, Unigram lattice) */
  void *sym;
  size_t sym_cap;
  void *heap;
  size_t heap_cap;
  void *lat;
  size_t lat_cap;
  /* word -> ids of the model, kept across calls that share the ctx (HF's BPE cache; the model
   * is a pure function of the word): cache maps a pre-token to an offset into cache_ids, where
   * its id count and ids are stored */
  vr_tok_map_t cache;
  vr_tok_ids_t cache_ids;
} vr_tok_ctx_t;

int vr_tok_ctx_init(vr_tok_ctx_t *c);
void vr_tok_ctx_free(vr_tok_ctx_t *c);

/* ---- normalizers -------------------------------------------------------------------------- */

typedef enum vr_tok_norm_type {
  VR_TOK_NORM_NFC, VR_TOK_NORM_NFD, VR_TOK_NORM_NFKC, VR_TOK_NORM_NFKD, VR_TOK_NORM_LOWERCASE,
  VR_TOK_NORM_BERT, VR_TOK_NORM_REPLACE, VR_TOK_NORM_PREPEND, VR_TOK_NORM_STRIP,
  VR_TOK_NORM_STRIP_ACCENTS, VR_TOK_NORM_PRECOMPILED, VR_TOK_NORM_SEQUENCE,
} vr_tok_norm_type_t;

typedef struct vr_tok_norm {
  vr_tok_norm_type_t type;
  int clean_text, chinese, strip_accents, lowercase; /* Bert */
  int left, right;                                   /* Strip */
  vr_tok_re_t *re;                                   /* Replace */
  char *content;                                     /* Replace / Prepend */
  size_t content_n;
  uint32_t *trie; /* Precompiled: darts double-array units */
  size_t trie_n;
  char *normalized; /* Precompiled: NUL-separated replacement strings */
  size_t normalized_n;
  struct vr_tok_norm **sub;
  size_t nsub;
} vr_tok_norm_t;

int vr_tok_norm_parse(const cJSON *j, const char *file, vr_tok_norm_t **out, char *err, size_t errlen);
void vr_tok_norm_free(vr_tok_norm_t *n);
/* Appends the normalized form of s[0..n) to out (s valid UTF-8). 0 or negative status. */
int vr_tok_norm_apply(const vr_tok_norm_t *nm, vr_tok_ctx_t *c, const char *s, size_t n, vr_tok_buf_t *out);

/* ---- pre-tokenizers ----------------------------------------------------------------------- */

typedef enum vr_tok_pre_type {
  VR_TOK_PRE_BYTELEVEL, VR_TOK_PRE_SPLIT, VR_TOK_PRE_METASPACE, VR_TOK_PRE_BERT, VR_TOK_PRE_DIGITS,
  VR_TOK_PRE_PUNCTUATION, VR_TOK_PRE_WHITESPACE, VR_TOK_PRE_WHITESPACE_SPLIT, VR_TOK_PRE_CHAR_DELIMITER,
  VR_TOK_PRE_SEQUENCE,
} vr_tok_pre_type_t;

typedef enum vr_tok_behavior {
  VR_TOK_REMOVED, VR_TOK_ISOLATED, VR_TOK_MERGED_WITH_PREVIOUS, VR_TOK_MERGED_WITH_NEXT, VR_TOK_CONTIGUOUS,
} vr_tok_behavior_t;

typedef enum vr_tok_prepend { VR_TOK_PREPEND_ALWAYS, VR_TOK_PREPEND_FIRST, VR_TOK_PREPEND_NEVER } vr_tok_prepend_t;

typedef struct vr_tok_pre {
  vr_tok_pre_type_t type;
  vr_tok_re_t *re;            /* Split (and ByteLevel's GPT-2 regex, Whitespace's) */
  vr_tok_behavior_t behavior; /* Split, Punctuation */
  int invert;
  int add_prefix_space, use_regex; /* ByteLevel */
  uint32_t replacement;            /* Metaspace (code point); CharDelimiterSplit delimiter */
  vr_tok_prepend_t prepend_scheme;
  int split;
  int individual_digits;
  struct vr_tok_pre **sub;
  size_t nsub;
} vr_tok_pre_t;

int vr_tok_pre_parse(const cJSON *j, const char *file, vr_tok_pre_t **out, char *err, size_t errlen);
void vr_tok_pre_free(vr_tok_pre_t *p);
/* Splits every piece of c->a without an id; the result is left in c->a. */
int vr_tok_pre_apply(const vr_tok_pre_t *p, vr_tok_ctx_t *c);
/* The GPT-2 byte -> code point table of ByteLevel. */
uint32_t vr_tok_bytelevel_cp(unsigned char b);
/* Inverse: the byte for a code point of the table, or -1. */
int vr_tok_bytelevel_byte(uint32_t cp);

/* ---- models ------------------------------------------------------------------------------ */

typedef enum vr_tok_model_type { VR_TOK_MODEL_BPE, VR_TOK_MODEL_WORDPIECE, VR_TOK_MODEL_UNIGRAM } vr_tok_model_type_t;

typedef struct vr_tok_model {
  vr_tok_model_type_t type;
  vr_tok_map_t vocab;      /* token -> id */
  uint32_t *id_entry;      /* (id_n,) id -> vocab entry index, UINT32_MAX for none */
  uint32_t id_n;
  int32_t unk_id;          /* -1: none */
  /* BPE */
  uint64_t *mkeys;         /* merges: (a << 32 | b) + 1, 0 = empty slot */
  int32_t *mrank, *mnew;
  uint32_t mcap;
  char *cont_prefix, *eow_suffix;
  size_t cont_prefix_n, eow_suffix_n;
  int fuse_unk, byte_fallback, ignore_merges;
  int32_t byte_id[256];    /* <0xXX> ids for byte_fallback, -1 missing */
  int32_t small_id[0x800]; /* ids of one-code-point tokens below U+0800 (fast path); -1 missing */
  /* WordPiece */
  size_t max_input_chars;
  /* Unigram */
  double *scores;
  double min_score;
  vr_tok_map_t prefixes;   /* every prefix of every piece -> id of the piece equal to it, or -1 */
  size_t max_piece;
} vr_tok_model_t;

int vr_tok_model_parse(const cJSON *j, const char *file, vr_tok_model_t *m, char *err, size_t errlen);
void vr_tok_model_free(vr_tok_model_t *m);
/* Appends the ids of one pre-token s[0..n). 0 or negative status (with err). */
int vr_tok_model_encode(const vr_tok_model_t *m, vr_tok_ctx_t *c, const char *s, size_t n, vr_tok_ids_t *out,
                        char *err, size_t errlen);
/* The token text of id, or NULL. */
const char *vr_tok_model_token(const vr_tok_model_t *m, int32_t id, size_t *n);
/* The id of a vocab token, or -1. */
static inline int32_t vr_tok_vocab_id(const vr_tok_model_t *m, const char *s, size_t n) {
  return vr_tok_map_get(&m->vocab, s, n, NULL);
}
/* vocab {token: id} and unk_token of a BPE / WordPiece model (vr_tok_model.c) */
int vr_tok_model_parse_vocab(const cJSON *v, const char *file, const char *comp, vr_tok_model_t *m, char *err,
                             size_t errlen);
int vr_tok_model_parse_unk(const cJSON *j, const char *file, const char *comp, vr_tok_model_t *m, char *err,
                           size_t errlen);
/* vr_tok_bpe.c */
int vr_tok_bpe_parse(const cJSON *j, const char *file, vr_tok_model_t *m, char *err, size_t errlen);
int vr_tok_bpe_encode(const vr_tok_model_t *m, vr_tok_ctx_t *c, const char *s, size_t n, vr_tok_ids_t *out, char *err,
                      size_t errlen);
/* A symbol of a word being merged (BPE), or a piece (start = id, end = prev) of a Unigram path. */
typedef struct vr_tok_sym {
  int32_t id, prev, next;
  uint32_t len; /* bytes of the word it covers; 0 = merged away */
} vr_tok_sym_t;

/* ---- post-processors ------------------------------------------------------------------ */

typedef enum vr_tok_post_type {
  VR_TOK_POST_TEMPLATE, VR_TOK_POST_ROBERTA, VR_TOK_POST_BERT, VR_TOK_POST_BYTELEVEL, VR_TOK_POST_SEQUENCE,
} vr_tok_post_type_t;

typedef struct vr_tok_post {
  vr_tok_post_type_t type;
  int32_t *pre, *post; /* ids before / after the sequence (single) */
  size_t npre, npost;
  struct vr_tok_post **sub;
  size_t nsub;
} vr_tok_post_t;

int vr_tok_post_parse(const cJSON *j, const char *file, vr_tok_post_t **out, char *err, size_t errlen);
void vr_tok_post_free(vr_tok_post_t *p);
/* ids -> the single-sequence output with special tokens (in place, may grow). */
int vr_tok_post_apply(const vr_tok_post_t *p, vr_tok_ids_t *ids);

/* ---- decoders ------------------------------------------------------------------------------ */

typedef enum vr_tok_dec_type {
  VR_TOK_DEC_BYTELEVEL, VR_TOK_DEC_METASPACE, VR_TOK_DEC_WORDPIECE, VR_TOK_DEC_BYTE_FALLBACK,
  VR_TOK_DEC_FUSE, VR_TOK_DEC_STRIP, VR_TOK_DEC_REPLACE, VR_TOK_DEC_BPE, VR_TOK_DEC_CTC, VR_TOK_DEC_SEQUENCE,
} vr_tok_dec_type_t;

typedef struct vr_tok_dec {
  vr_tok_dec_type_t type;
  vr_tok_re_t *re; /* Replace */
  char *content, *prefix, *suffix, *pad; /* Replace content / WordPiece prefix / BPE suffix / CTC */
  size_t content_n, prefix_n, suffix_n, pad_n;
  char *delim; /* CTC word delimiter */
  size_t delim_n;
  uint32_t strip_cp; /* Strip content, Metaspace replacement */
  int start, stop;
  int cleanup;
  vr_tok_prepend_t prepend_scheme;
  struct vr_tok_dec **sub;
  size_t nsub;
} vr_tok_dec_t;

int vr_tok_dec_parse(const cJSON *j, const char *file, vr_tok_dec_t **out, char *err, size_t errlen);
void vr_tok_dec_free(vr_tok_dec_t *d);

/* A list of strings in a buffer, for decode chains. */
typedef struct vr_tok_strs {
  vr_tok_buf_t buf;
  uint32_t *off, *len;
  size_t n, cap;
} vr_tok_strs_t;

int vr_tok_strs_push(vr_tok_strs_t *s, const char *p, size_t n);
void vr_tok_strs_clear(vr_tok_strs_t *s);
void vr_tok_strs_free(vr_tok_strs_t *s);
/* Runs the decoder chain over toks (replaced by the result). */
int vr_tok_dec_apply(const vr_tok_dec_t *d, vr_tok_ctx_t *c, vr_tok_strs_t *toks);
/* transformers' clean_up_tokenization (also WordPiece's cleanup when wordpiece != 0). */
int vr_tok_cleanup(vr_tok_buf_t *out, const char *s, size_t n, int wordpiece);

/* ---- JSON helpers for the parsers -------------------------------------------------------- */

/* The string member `key`, or NULL. */
const char *vr_tok_jstr(const cJSON *o, const char *key);
/* Boolean member or def when absent/null; -1 when present but not a boolean. */
int vr_tok_jbool(const cJSON *o, const char *key, int def);
/* "pattern": {"String": s} or {"Regex": r} -> compiled; error names the component. */
int vr_tok_jpattern(const cJSON *o, const char *file, const char *comp, vr_tok_re_t **out, char *err,
                    size_t errlen);
/* A Sequence component's list j[key]: *arr and *k (its length), or VR_ERR_MODEL_FORMAT naming
 * comp; *sub gets a zeroed array of k (at least 1) pointers of elem bytes each. */
int vr_tok_jlist(const cJSON *j, const char *key, const char *file, const char *comp, const cJSON **arr,
                 void *sub, size_t elem, char *err, size_t errlen);
/* Copies a string member (may be absent: *out = NULL). */
int vr_tok_jdup(const cJSON *o, const char *key, char **out, size_t *n);

/* ---- the tokenizer (vr_tokenizer.h's opaque handle) ---------------------------------------- */

#include "vr_tokenizer.h"

/* An added token (tokenizer.json added_tokens; the config's additions). */
typedef struct vr_tok_added {
  char *content;
  size_t n;
  int32_t id;
  uint8_t special, lstrip, rstrip, single_word, normalized;
} vr_tok_added_t;

typedef struct vr_tok_trie_node {
  int32_t child, sibling; /* first child, next sibling; -1 none */
  int32_t term;           /* index into added, -1 none */
  unsigned char byte;
} vr_tok_trie_node_t;

typedef struct vr_tok_trie {
  vr_tok_trie_node_t *v;
  size_t n, cap;
  uint8_t first[256];
} vr_tok_trie_t;

typedef struct vr_tok_template {
  char *name, *text;
} vr_tok_template_t;

struct vr_tok {
  char *source;
  vr_tok_norm_t *norm;
  vr_tok_pre_t *pre;
  vr_tok_model_t model;
  vr_tok_post_t *post;
  vr_tok_dec_t *dec;
  vr_tok_added_t *added;
  size_t nadded;
  vr_tok_map_t added_by_content; /* content -> index */
  int32_t *added_by_id;          /* (added_id_n,) id -> index or -1 */
  size_t added_id_n;
  vr_tok_trie_t raw, normd;
  char *special_text[4];
  int32_t special_id[4];
  int clean_up_spaces;
  int split_special; /* config split_special_tokens: special tokens are not matched (HF encode_special_tokens) */
  vr_tok_template_t *templates;
  size_t ntemplates;
  size_t vocab_size;
};

struct vr_tok_scratch {
  vr_tok_ctx_t c;
};

/* vr_tok_added.c */
int vr_tok_trie_add(vr_tok_trie_t *t, const char *s, size_t n, int32_t term);
/* HF's find_matches + split_with_indices over the piece [off, off+n) of c->arena with trie t;
 * pushes the pieces (added tokens with their id) into out. origin: the piece starts the input. */
int vr_tok_split_added(const vr_tok_t *tok, const vr_tok_trie_t *t, vr_tok_ctx_t *c, uint32_t off, uint32_t n,
                       uint8_t origin, vr_tok_pieces_t *out);
/* Adds a token unless one with that id exists (tokenizer.json wins over the config). */
int vr_tok_add_token(vr_tok_t *tok, const char *content, int32_t id, int special, int lstrip, int rstrip,
                     int single_word, int normalized);
/* One AddedToken object {content, single_word, lstrip, rstrip, normalized, special}. */
int vr_tok_parse_added_obj(vr_tok_t *tok, const cJSON *e, int32_t id, const char *file, const char *where, char *err,
                           size_t errlen);

/* vr_tok_config.c */
extern const char *const vr_tok_special_keys[4]; /* bos_token eos_token pad_token unk_token */
/* Sets special_text[which] from a string or AddedToken object unless already set. */
int vr_tok_set_special(vr_tok_t *tok, int which, const cJSON *v);
/* tokenizer_config.json text: specials, flags, added_tokens_decoder, chat templates, class rules. */
int vr_tok_parse_config(vr_tok_t *tok, const char *json, size_t len, const char *file, char *err, size_t errlen);

#endif /* VR_TOK_INTERNAL_H */
