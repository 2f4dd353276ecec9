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
/* Copies a string member (may be absent: *out = NULL). */
int vr_tok_jdup(const cJSON *o, const char *key, char **out, size_t *n);

#endif /* VR_TOK_INTERNAL_H */
