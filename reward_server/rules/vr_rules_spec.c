/* vr_rules_spec.c: reward spec parsing/formatting ("model:0.7,gsm8k:0.3") and the mix. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_rules.h"
#include "vr_rules_internal.h"

#define VR_WEIGHT_MAX 1e6
#define VR_FACTOR_MAX 1e6
#define VR_LEN_MAX 100000000u /* token counts in overlong options */

/* Every spec error is VR_ERR_INVAL with a message. */
#define spec_fail(err, errlen, ...) vr_rules_fail((err), (errlen), VR_ERR_INVAL, __VA_ARGS__)

/* Built-in component names and the rule each starts from. */
typedef struct {
  const char *name;
  vr_rule_kind_t kind;
  uint8_t flexible, ignore_case, ignore_space;
} spec_builtin_t;

static const spec_builtin_t k_builtins[] = {
    {"model", VR_RULE_MODEL, 0, 0, 0},
    {"gsm8k", VR_RULE_GSM8K, 0, 0, 0},
    {"gsm8k_flexible", VR_RULE_GSM8K, 1, 0, 0},
    {"math", VR_RULE_MATH, 0, 0, 0},
    {"exact_match", VR_RULE_EXACT_MATCH, 0, 0, 0},
    {"exact_match_ci", VR_RULE_EXACT_MATCH, 0, 1, 1},
    {"overlong", VR_RULE_OVERLONG, 0, 0, 0},
    {"auto", VR_RULE_AUTO, 0, 0, 0},
    {"contains_word", VR_RULE_CONTAINS_WORD, 0, 0, 0},
};
#define N_BUILTINS (sizeof(k_builtins) / sizeof(k_builtins[0]))

static void rule_defaults(vr_rule_t *r, const spec_builtin_t *b) {
  memset(r, 0, sizeof(*r));
  r->kind = b->kind;
  snprintf(r->name, sizeof(r->name), "%s", b->name);
  r->weight = 1.0f;
  r->flexible = b->flexible;
  r->ignore_case = b->ignore_case;
  r->ignore_space = b->ignore_space;
  r->max_len = 4096;
  r->buffer = 512;
  r->factor = 1.0f;
}

/* Cursor over the spec string. */
typedef struct {
  const char *s;
  size_t i;
} cur_t;

static void skip_ws(cur_t *c) {
  while (c->s[c->i] == ' ' || c->s[c->i] == '\t') c->i++;
}

/* Reads [A-Za-z0-9_]+ into buf (cap incl. NUL). Returns length, 0 if none, -1 if too long. */
static int read_ident(cur_t *c, char *buf, size_t cap) {
  size_t n = 0;
  while (isalnum((unsigned char)c->s[c->i]) || c->s[c->i] == '_') {
    if (n + 1 >= cap) return -1;
    buf[n++] = c->s[c->i++];
  }
  buf[n] = '\0';
  return (int)n;
}

/* Reads a value token (up to ',', ')', ':' or whitespace) into buf. Same returns. */
static int read_value(cur_t *c, char *buf, size_t cap) {
  size_t n = 0;
  char ch;
  while ((ch = c->s[c->i]) && ch != ',' && ch != ')' && ch != ':' && ch != ' ' && ch != '\t' &&
         ch != '(') {
    if (n + 1 >= cap) return -1;
    buf[n++] = ch;
    c->i++;
  }
  buf[n] = '\0';
  return (int)n;
}

static int parse_double(const char *v, double *out) {
  if (!*v) return -1;
  char *end;
  errno = 0;
  double d = strtod(v, &end);
  if (*end || errno == ERANGE || !isfinite(d)) return -1;
  *out = d;
  return 0;
}

static int parse_u32(const char *v, uint32_t lo, uint32_t hi, uint32_t *out) {
  if (!*v) return -1;
  uint64_t x = 0;
  for (const char *p = v; *p; p++) {
    if (*p < '0' || *p > '9') return -1;
    x = x * 10 + (uint64_t)(*p - '0');
    if (x > hi) return -1;
  }
  if (x < lo) return -1;
  *out = (uint32_t)x;
  return 0;
}

static int parse_bool(const char *v, uint8_t *out) {
  if (!strcmp(v, "1") || !strcmp(v, "true")) *out = 1;
  else if (!strcmp(v, "0") || !strcmp(v, "false")) *out = 0;
  else return -1;
  return 0;
}

/* Applies one option key=val to rule r. */
static int apply_option(vr_rule_t *r, const char *key, const char *val, char *err, size_t errlen) {
  double d;
  switch (r->kind) {
    case VR_RULE_GSM8K:
      if (!strcmp(key, "mode") && !strcmp(r->name, "gsm8k")) {
        if (!strcmp(val, "strict")) r->flexible = 0;
        else if (!strcmp(val, "flexible")) r->flexible = 1;
        else return spec_fail(err, errlen, "reward spec: gsm8k mode '%s' (want strict|flexible)", val);
        return VR_OK;
      }
      break;
    case VR_RULE_EXACT_MATCH:
      if (!strcmp(key, "ignore_case") || !strcmp(key, "ignore_space")) {
        uint8_t b;
        if (parse_bool(val, &b))
          return spec_fail(err, errlen, "reward spec: %s.%s='%s' (want 0|1)", r->name, key, val);
        if (key[7] == 'c') r->ignore_case = b;
        else r->ignore_space = b;
        return VR_OK;
      }
      break;
    case VR_RULE_OVERLONG:
      if (!strcmp(key, "max_len") || !strcmp(key, "buffer")) {
        uint32_t x;
        if (parse_u32(val, 1, VR_LEN_MAX, &x))
          return spec_fail(err, errlen, "reward spec: overlong.%s='%s' (want an integer 1..%u)",
                           key, val, VR_LEN_MAX);
        if (key[0] == 'm') r->max_len = x;
        else r->buffer = x;
        return VR_OK;
      }
      if (!strcmp(key, "factor")) {
        if (parse_double(val, &d) || d < 0 || d > VR_FACTOR_MAX)
          return spec_fail(err, errlen, "reward spec: overlong.factor='%s' (want a number 0..%g)",
                           val, VR_FACTOR_MAX);
        r->factor = (float)d;
        return VR_OK;
      }
      break;
    default:
      break;
  }
  return spec_fail(err, errlen, "reward spec: component %s has no option '%s'", r->name, key);
}

int vr_reward_spec_parse(const char *spec, vr_reward_spec_t *out, char *err, size_t errlen) {
  if (!spec || !out) return spec_fail(err, errlen, "reward spec: NULL argument");
  vr_reward_spec_t sp;
  memset(&sp, 0, sizeof(sp));
  sp.model_index = -1;
  cur_t c = {spec, 0};
  char name[VR_RULE_NAME_MAX + 1], key[33], val[65];
  skip_ws(&c);
  if (!spec[c.i]) return spec_fail(err, errlen, "reward spec is empty");
  for (;;) {
    skip_ws(&c);
    size_t at = c.i;
    int nl = read_ident(&c, name, sizeof(name));
    if (nl < 0)
      return spec_fail(err, errlen, "reward spec: component name too long at offset %zu", at);
    if (nl == 0)
      return spec_fail(err, errlen, "reward spec: expected a component name at offset %zu of '%s'",
                       at, spec);
    const spec_builtin_t *b = NULL;
    for (size_t k = 0; k < N_BUILTINS; k++)
      if (!strcmp(k_builtins[k].name, name)) b = &k_builtins[k];
    if (!b)
      return spec_fail(err, errlen,
                       "reward spec: unknown component '%s' (known: model, gsm8k, gsm8k_flexible, "
                       "math, exact_match, exact_match_ci, overlong, auto, contains_word)", name);
    for (uint32_t k = 0; k < sp.n; k++)
      if (!strcmp(sp.rules[k].name, name))
        return spec_fail(err, errlen, "reward spec: component '%s' given twice", name);
    if (sp.n >= VR_REWARD_MAX_COMPONENTS)
      return spec_fail(err, errlen, "reward spec: more than %d components",
                       VR_REWARD_MAX_COMPONENTS);
    vr_rule_t *r = &sp.rules[sp.n];
    rule_defaults(r, b);
    skip_ws(&c);
    if (spec[c.i] == '(') {
      c.i++;
      for (;;) {
        skip_ws(&c);
        if (read_ident(&c, key, sizeof(key)) <= 0)
          return spec_fail(err, errlen, "reward spec: expected an option name in %s(...) at offset %zu",
                           name, c.i);
        skip_ws(&c);
        if (spec[c.i] != '=')
          return spec_fail(err, errlen, "reward spec: expected '=' after %s.%s", name, key);
        c.i++;
        skip_ws(&c);
        if (read_value(&c, val, sizeof(val)) <= 0)
          return spec_fail(err, errlen, "reward spec: missing or too long value for %s.%s", name, key);
        int rc = apply_option(r, key, val, err, errlen);
        if (rc) return rc;
        skip_ws(&c);
        if (spec[c.i] == ',') {
          c.i++;
          continue;
        }
        if (spec[c.i] == ')') {
          c.i++;
          break;
        }
        return spec_fail(err, errlen, "reward spec: expected ',' or ')' in %s(...) at offset %zu",
                         name, c.i);
      }
      if (r->kind == VR_RULE_OVERLONG && r->buffer > r->max_len)
        return spec_fail(err, errlen, "reward spec: overlong buffer=%u exceeds max_len=%u",
                         r->buffer, r->max_len);
      skip_ws(&c);
    }
    if (spec[c.i] == ':') {
      c.i++;
      skip_ws(&c);
      double w;
      if (read_value(&c, val, sizeof(val)) <= 0 || parse_double(val, &w))
        return spec_fail(err, errlen, "reward spec: bad weight for %s (want a finite number)", name);
      if (fabs(w) > VR_WEIGHT_MAX)
        return spec_fail(err, errlen, "reward spec: weight %g for %s is out of range (|w| <= %g)",
                         w, name, VR_WEIGHT_MAX);
      r->weight = (float)w;
      skip_ws(&c);
    }
    if (r->kind == VR_RULE_MODEL) sp.model_index = (int)sp.n;
    else if (r->kind != VR_RULE_OVERLONG) sp.needs_extras = 1;
    sp.n++;
    if (!spec[c.i]) break;
    if (spec[c.i] != ',')
      return spec_fail(err, errlen, "reward spec: unexpected '%c' at offset %zu of '%s'", spec[c.i],
                       c.i, spec);
    c.i++;
  }
  *out = sp;
  return VR_OK;
}

/* Shortest "%g" text that reads back as the same float (0.7f -> "0.7"). */
static void float_text(float f, char *buf, size_t cap) {
  for (int prec = 6; prec <= 9; prec++) {
    snprintf(buf, cap, "%.*g", prec, (double)f);
    if (strtof(buf, NULL) == f) return;
  }
}

size_t vr_reward_spec_format(const vr_reward_spec_t *spec, char *buf, size_t buflen) {
  size_t need = 0;
  char tmp[160];
  if (buf && buflen) buf[0] = '\0';
  for (uint32_t i = 0; spec && i < spec->n && i < VR_REWARD_MAX_COMPONENTS; i++) {
    const vr_rule_t *r = &spec->rules[i];
    char opts[96] = "";
    if (r->kind == VR_RULE_OVERLONG) {
      char f[32];
      float_text(r->factor, f, sizeof(f));
      snprintf(opts, sizeof(opts), "(max_len=%u,buffer=%u,factor=%s)", r->max_len, r->buffer, f);
    } else if (r->kind == VR_RULE_GSM8K && !strcmp(r->name, "gsm8k") && r->flexible) {
      snprintf(opts, sizeof(opts), "(mode=flexible)");
    } else if (r->kind == VR_RULE_EXACT_MATCH) {
      uint8_t dflt = !strcmp(r->name, "exact_match_ci");
      if (r->ignore_case != dflt || r->ignore_space != dflt)
        snprintf(opts, sizeof(opts), "(ignore_case=%u,ignore_space=%u)", r->ignore_case,
                 r->ignore_space);
    }
    char w[32];
    float_text(r->weight, w, sizeof(w));
    int n = snprintf(tmp, sizeof(tmp), "%s%s%s:%s", i ? "," : "", r->name, opts, w);
    if (n < 0) continue;
    if (buf && need + (size_t)n < buflen) memcpy(buf + need, tmp, (size_t)n + 1);
    else if (buf && buflen && need < buflen) buf[need] = '\0';
    need += (size_t)n;
  }
  return need;
}

float vr_reward_mix(const vr_reward_spec_t *spec, const float *scores) {
  if (!spec || !scores) return 0.0f;
  double total = 0.0;
  for (uint32_t i = 0; i < spec->n && i < VR_REWARD_MAX_COMPONENTS; i++)
    if (isfinite(scores[i])) total += (double)spec->rules[i].weight * (double)scores[i];
  return isfinite(total) ? (float)total : 0.0f;
}
