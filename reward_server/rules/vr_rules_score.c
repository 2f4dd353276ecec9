/* vr_rules_score.c: the scorers (gsm8k, math, exact_match, overlong, auto, contains_word).
 * Pure functions of (rule, extras, response_tokens): thread-safe, never abort
 * on any input, always return a finite score. Rules: vr_rules.h and
 * docs/operations.md "## Rule-based rewards". */
#include <math.h>
#include <string.h>

#include "vr_rules.h"
#include "vr_rules_internal.h"

#define VR_GSM8K_CLIP_CHARS 300 /* verl gsm8k.py _SOLUTION_CLIP_CHARS */

const char *vr_reason_name(int reason) {
  static const char *const names[VR_REASON_COUNT_] = {
      "ok", "no_answer", "parse_error", "mismatch", "missing_field", "too_long",
      "unknown_source", "not_a_rule"};
  if (reason < 0 || reason >= VR_REASON_COUNT_) return "unknown";
  return names[reason];
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }
static int is_num_char(char c) { return is_digit(c) || c == '.' || c == ','; }
static int is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

/* ---- gsm8k ----------------------------------------------------------------------- */

/* Copies m[0..n) without ',' and '$' into out (cap > n guaranteed by callers). */
static size_t strip_commas(const char *m, size_t n, char *out) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (m[i] != ',' && m[i] != '$') out[k++] = m[i];
  out[k] = '\0';
  return k;
}

/* An extracted answer is usable when something other than '-' and '.' is left. */
static int answer_usable(const char *a) {
  for (; *a; a++)
    if (is_digit(*a)) return 1;
  return 0;
}

int vr_gsm8k_extract(const char *s, size_t n, int flexible, char *out, size_t outcap) {
  if (!s || !out || outcap == 0) return 0;
  out[0] = '\0';
  /* the last 300 characters (UTF-8 code points), as verl clips solution_str */
  size_t start = n, chars = 0;
  while (start > 0 && chars < VR_GSM8K_CLIP_CHARS) {
    start--;
    if (((unsigned char)s[start] & 0xc0) != 0x80) chars++;
  }
  const char *t = s + start;
  size_t tn = n - start;
  char buf[VR_GSM8K_CLIP_CHARS * 4 + 1];
  int found = 0;
  size_t i = 0;
  /* Left-to-right, non-overlapping matches like re.findall; keep the last usable one. */
  while (i < tn) {
    size_t m0 = i;
    if (!flexible) { /* "#### (-?[0-9.,]+)" */
      size_t at = vr_find(t, tn, i, "#### ");
      if (at >= tn) break;
      m0 = at + 5;
      i = at + 1;
    }
    size_t j = m0;
    if (j < tn && t[j] == '-') j++;
    size_t d = j;
    while (d < tn && is_num_char(t[d])) d++;
    if (d == j) { /* no [0-9.,] after the optional '-' */
      if (flexible) i++;
      continue;
    }
    size_t k = strip_commas(t + m0, d - m0, buf);
    if (answer_usable(buf)) {
      if (k + 1 > outcap) return -1;
      memcpy(out, buf, k + 1);
      found = 1;
    } else if (!flexible) {
      found = 0; /* strict takes the last match even when it is unusable */
      out[0] = '\0';
    }
    i = d;
  }
  return found;
}

/* Canonical form of a decimal number ("-0012.500" -> "-12.5", "-0" -> "0"):
 * returns 1 and fills out (cap >= n + 3) or 0 when s is not -?D*(.D*)? with a digit. */
static int decimal_canon(const char *s, size_t n, char *out) {
  size_t i = 0, k = 0;
  int neg = 0;
  if (i < n && (s[i] == '-' || s[i] == '+')) neg = s[i++] == '-';
  size_t ib = i;
  while (i < n && is_digit(s[i])) i++;
  size_t ie = i, fb = i, fe = i;
  if (i < n && s[i] == '.') {
    fb = ++i;
    while (i < n && is_digit(s[i])) i++;
    fe = i;
  }
  if (i != n || (ie == ib && fe == fb)) return 0;
  while (ib < ie && s[ib] == '0') ib++;
  while (fe > fb && s[fe - 1] == '0') fe--;
  if (neg && (ib < ie || fb < fe)) out[k++] = '-';
  if (ib == ie) out[k++] = '0';
  memcpy(out + k, s + ib, ie - ib);
  k += ie - ib;
  if (fb < fe) {
    out[k++] = '.';
    memcpy(out + k, s + fb, fe - fb);
    k += fe - fb;
  }
  out[k] = '\0';
  return 1;
}

static float score_gsm8k(const vr_rule_t *r, const vr_extras_t *ex, int *reason) {
  char ans[VR_GSM8K_CLIP_CHARS * 4 + 1];
  int got = vr_gsm8k_extract(ex->solution_str.ptr, ex->solution_str.len, r->flexible, ans,
                             sizeof(ans));
  if (got <= 0) {
    *reason = got < 0 ? VR_REASON_PARSE_ERROR : VR_REASON_NO_ANSWER;
    return 0.0f;
  }
  /* ground truth: commas and '$' removed, surrounding whitespace trimmed */
  const char *g = ex->ground_truth.ptr;
  size_t gn = ex->ground_truth.len;
  while (gn && is_space(*g)) g++, gn--;
  while (gn && is_space(g[gn - 1])) gn--;
  if (gn > 256) { /* no gsm8k answer is that long; stay on the stack */
    *reason = VR_REASON_MISMATCH;
    return 0.0f;
  }
  char gt[260], ca[VR_GSM8K_CLIP_CHARS * 4 + 4], cg[264];
  strip_commas(g, gn, gt);
  if (strcmp(ans, gt) == 0 ||
      (decimal_canon(ans, strlen(ans), ca) && decimal_canon(gt, strlen(gt), cg) &&
       strcmp(ca, cg) == 0)) {
    *reason = VR_REASON_OK;
    return 1.0f;
  }
  *reason = VR_REASON_MISMATCH;
  return 0.0f;
}

/* ---- math ------------------------------------------------------------------------ */

static float score_math(const vr_extras_t *ex, int *reason) {
  size_t bs, bl;
  if (!vr_math_last_boxed(ex->solution_str.ptr, ex->solution_str.len, &bs, &bl)) {
    *reason = VR_REASON_NO_ANSWER;
    return 0.0f;
  }
  vr_sb_t a = {0}, g = {0};
  float score = 0.0f;
  if (vr_math_normalize_sb(ex->solution_str.ptr + bs, bl, &a) ||
      vr_math_normalize_sb(ex->ground_truth.ptr, ex->ground_truth.len, &g)) {
    *reason = VR_REASON_PARSE_ERROR; /* out of memory */
  } else if (a.n == 0) {
    *reason = VR_REASON_NO_ANSWER; /* empty box */
  } else if (a.n == g.n && memcmp(a.p, g.p, a.n) == 0) {
    *reason = VR_REASON_OK;
    score = 1.0f;
  } else {
    *reason = VR_REASON_MISMATCH;
  }
  vr_sb_free(&a);
  vr_sb_free(&g);
  return score;
}

/* ---- exact_match ----------------------------------------------------------------- */

/* Next byte of s under the rule's folding; *i advances. Returns -1 at the end.
 * ignore_space: leading/trailing whitespace skipped, inner runs read as one ' '. */
static int em_next(const vr_rule_t *r, const char *s, size_t n, size_t *i) {
  if (r->ignore_space) {
    if (*i < n && is_space(s[*i])) {
      size_t j = *i;
      while (j < n && is_space(s[j])) j++;
      int leading = *i == 0;
      *i = j;
      if (!leading && j < n) return ' ';
    }
  }
  if (*i >= n) return -1;
  unsigned char c = (unsigned char)s[(*i)++];
  if (r->ignore_case && c >= 'A' && c <= 'Z') c = (unsigned char)(c - 'A' + 'a');
  return c;
}

static float score_exact(const vr_rule_t *r, const vr_extras_t *ex, int *reason) {
  const char *a = ex->solution_str.ptr, *b = ex->ground_truth.ptr;
  size_t an = ex->solution_str.len, bn = ex->ground_truth.len, i = 0, j = 0;
  if (!r->ignore_case && !r->ignore_space) { /* byte for byte */
    int eq = an == bn && memcmp(a, b, an) == 0;
    *reason = eq ? VR_REASON_OK : VR_REASON_MISMATCH;
    return eq ? 1.0f : 0.0f;
  }
  for (;;) {
    int ca = em_next(r, a, an, &i), cb = em_next(r, b, bn, &j);
    if (ca != cb) {
      *reason = VR_REASON_MISMATCH;
      return 0.0f;
    }
    if (ca < 0) break;
  }
  *reason = VR_REASON_OK;
  return 1.0f;
}

/* ---- contains_word ---------------------------------------------------------------- */

static float score_contains_word(const vr_extras_t *ex, int *reason) {
  const char *a = ex->solution_str.ptr, *b = ex->ground_truth.ptr;
  const size_t an = ex->solution_str.len, bn = ex->ground_truth.len;
  *reason = VR_REASON_MISMATCH;
  if (bn == 0 || bn > an) return 0.0f;
  for (size_t i = 0; i + bn <= an; i++)
    if ((i == 0 || is_space(a[i - 1])) && (i + bn == an || is_space(a[i + bn])) && memcmp(a + i, b, bn) == 0) {
      *reason = VR_REASON_OK;
      return 1.0f;
    }
  return 0.0f;
}

/* ---- overlong -------------------------------------------------------------------- */

static float score_overlong(const vr_rule_t *r, uint32_t len, int *reason) {
  double buffer = r->buffer ? (double)r->buffer : 1.0; /* spec parse guarantees >= 1 */
  double expected = (double)r->max_len - (double)r->buffer;
  double s = -((double)len - expected) / buffer * (double)r->factor;
  if (!(s < 0.0) || !isfinite(s)) {
    *reason = VR_REASON_OK;
    return 0.0f;
  }
  *reason = VR_REASON_TOO_LONG;
  return (float)s;
}

/* ---- dispatch -------------------------------------------------------------------- */

static int text_is(const vr_text_t *t, const char *s) {
  return t->present && t->ptr && strlen(s) == t->len && memcmp(t->ptr, s, t->len) == 0;
}

float vr_rule_score(const vr_rule_t *rule, const vr_extras_t *ex, uint32_t response_tokens,
                    int *reason) {
  int dummy;
  if (!reason) reason = &dummy;
  if (!rule) {
    *reason = VR_REASON_PARSE_ERROR;
    return 0.0f;
  }
  if (rule->kind == VR_RULE_MODEL) {
    *reason = VR_REASON_NOT_A_RULE;
    return 0.0f;
  }
  if (rule->kind == VR_RULE_OVERLONG) return score_overlong(rule, response_tokens, reason);
  if (!ex || !ex->solution_str.present || !ex->solution_str.ptr || !ex->ground_truth.present ||
      !ex->ground_truth.ptr) {
    *reason = VR_REASON_MISSING_FIELD;
    return 0.0f;
  }
  switch (rule->kind) {
    case VR_RULE_GSM8K: return score_gsm8k(rule, ex, reason);
    case VR_RULE_MATH: return score_math(ex, reason);
    case VR_RULE_EXACT_MATCH: return score_exact(rule, ex, reason);
    case VR_RULE_CONTAINS_WORD: return score_contains_word(ex, reason);
    case VR_RULE_AUTO: {
      if (!ex->data_source.present) {
        *reason = VR_REASON_MISSING_FIELD;
        return 0.0f;
      }
      if (text_is(&ex->data_source, "openai/gsm8k")) {
        vr_rule_t g = *rule;
        g.flexible = 0;
        return score_gsm8k(&g, ex, reason);
      }
      if (text_is(&ex->data_source, "lighteval/MATH") ||
          text_is(&ex->data_source, "DigitalLearningGmbH/MATH-lighteval") ||
          text_is(&ex->data_source, "HuggingFaceH4/MATH-500"))
        return score_math(ex, reason);
      *reason = VR_REASON_UNKNOWN_SOURCE;
      return 0.0f;
    }
    default:
      *reason = VR_REASON_PARSE_ERROR;
      return 0.0f;
  }
}
