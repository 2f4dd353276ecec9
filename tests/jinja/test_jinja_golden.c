/* test_jinja_golden: every case of every tests/fixtures/chat/<name>.json renders byte for byte
 * as transformers' apply_chat_template(tokenize=False) did (tools/fixtures/
 * make_chat_fixtures.py wrote them on the GPU machine). A case where transformers raised (the
 * template's raise_exception, say) must fail here too, with the template's message.
 *   {"name": ..., "template": "...", "bos_token": "...", "eos_token": "...",
 *    "cases": [{"id": ..., "messages": [...], "add_generation_prompt": b, "tools": [...],
 *               "extra": {...}, "expected": "..."} | {..., "error": "..."}]}
 *
 * test_jinja_golden --cases FILE [--max-refused-pct P]: the differential mode of
 * tests/jinja/jinja_diff.py: FILE holds {"cases": [{"id", "template", "context", "expected" |
 * "error"}]} rendered by jinja2; a case the engine refuses as unsupported (VR_ERR_UNSUPPORTED)
 * counts as refused, at most P percent of them (default 0). */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_jinja.h"
#include "vr_test_file.h"

static const char *str_or_null(const cJSON *o, const char *k) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void show_diff(const char *want, size_t wl, const char *got, size_t gl) {
  size_t i = 0;
  while (i < wl && i < gl && want[i] == got[i]) i++;
  size_t from = i > 60 ? i - 60 : 0;
  fprintf(stderr, "    first difference at byte %zu\n    want: ...%.*s\n    got:  ...%.*s\n", i,
          (int)((wl - from) > 120 ? 120 : (wl - from)), want + from,
          (int)((gl - from) > 120 ? 120 : (gl - from)), got + from);
}

static int run_file(const char *path, int *ncases) {
  char *text = vr_test_slurp(path, NULL);
  if (!text) {
    fprintf(stderr, "%s: cannot read\n", path);
    return 1;
  }
  cJSON *root = cJSON_Parse(text);
  free(text);
  if (!root) {
    fprintf(stderr, "%s: not JSON\n", path);
    return 1;
  }
  int fails = 0;
  const char *tsrc = str_or_null(root, "template");
  const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases");
  if (!tsrc || !cJSON_IsArray(cases) || cJSON_GetArraySize(cases) == 0) {
    fprintf(stderr, "%s: no template or no cases\n", path);
    cJSON_Delete(root);
    return 1;
  }
  char err[1024];
  vr_jinja_t *t;
  if (vr_jinja_compile(tsrc, strlen(tsrc), &t, err, sizeof err) != 0) {
    fprintf(stderr, "%s: compile failed: %s\n", path, err);
    cJSON_Delete(root);
    return 1;
  }
  const cJSON *cs;
  cJSON_ArrayForEach(cs, cases) {
    const char *id = str_or_null(cs, "id");
    vr_jinja_chat_t ch = {0};
    ch.messages = cJSON_GetObjectItemCaseSensitive(cs, "messages");
    ch.add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cs, "add_generation_prompt"));
    ch.bos_token = str_or_null(root, "bos_token");
    ch.eos_token = str_or_null(root, "eos_token");
    ch.tools = cJSON_GetObjectItemCaseSensitive(cs, "tools");
    ch.documents = cJSON_GetObjectItemCaseSensitive(cs, "documents");
    /* transformers passes every special token (special_tokens_map) and then the kwargs */
    cJSON *extra = cJSON_CreateObject();
    const cJSON *sp, *kw;
    cJSON_ArrayForEach(sp, cJSON_GetObjectItemCaseSensitive(root, "special_tokens"))
      if (strcmp(sp->string, "bos_token") && strcmp(sp->string, "eos_token"))
        cJSON_AddItemToObject(extra, sp->string, cJSON_Duplicate(sp, 1));
    cJSON_ArrayForEach(kw, cJSON_GetObjectItemCaseSensitive(cs, "extra")) {
      cJSON_DeleteItemFromObjectCaseSensitive(extra, kw->string);
      cJSON_AddItemToObject(extra, kw->string, cJSON_Duplicate(kw, 1));
    }
    ch.extra = extra;
    vr_jinja_opts_t o;
    vr_jinja_opts_default(&o);
    const cJSON *now = cJSON_GetObjectItemCaseSensitive(root, "now_s");
    if (cJSON_IsNumber(now)) o.now_s = (int64_t)now->valuedouble;
    char *out = NULL;
    size_t ol = 0;
    int rc = vr_jinja_chat(t, &ch, &o, &out, &ol, err, sizeof err);
    const char *want = str_or_null(cs, "expected");
    const char *want_err = str_or_null(cs, "error");
    (*ncases)++;
    if (want) {
      if (rc != 0) {
        fprintf(stderr, "%s [%s]: render failed: %s\n", path, id ? id : "?", err);
        fails++;
      } else if (ol != strlen(want) || memcmp(out, want, ol) != 0) {
        fprintf(stderr, "%s [%s]: text differs from transformers'\n", path, id ? id : "?");
        show_diff(want, strlen(want), out, ol);
        fails++;
      }
    } else if (want_err) {
      if (rc == 0) {
        fprintf(stderr, "%s [%s]: transformers raised '%s' but the render succeeded\n", path,
                id ? id : "?", want_err);
        fails++;
      } else if ((strstr(want_err, "TemplateError") && !strstr(err, "template raised")) ||
                 (strstr(want_err, "empty conversation") && !strstr(err, "empty conversation"))) {
        fprintf(stderr, "%s [%s]: transformers raised '%s', we failed differently: %s\n", path,
                id ? id : "?", want_err, err);
        fails++;
      }
    } else {
      fprintf(stderr, "%s [%s]: case has neither expected nor error\n", path, id ? id : "?");
      fails++;
    }
    free(out);
    cJSON_Delete(extra);
  }
  vr_jinja_free(t);
  cJSON_Delete(root);
  return fails;
}

static int run_cases(const char *path, double max_refused_pct) {
  char *text = vr_test_slurp(path, NULL);
  cJSON *root = text ? cJSON_Parse(text) : NULL;
  free(text);
  if (!root) {
    fprintf(stderr, "%s: cannot read or not JSON\n", path);
    return 1;
  }
  const cJSON *c;
  int n = 0, fails = 0, refused = 0;
  cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "cases")) {
    const char *id = str_or_null(c, "id"), *src = str_or_null(c, "template");
    const char *want = str_or_null(c, "expected");
    char err[1024];
    vr_jinja_t *t;
    char *out = NULL;
    size_t ol = 0;
    n++;
    int rc = vr_jinja_compile(src, strlen(src), &t, err, sizeof err);
    if (rc == 0) {
      rc = vr_jinja_render(t, cJSON_GetObjectItemCaseSensitive(c, "context"), NULL, &out, &ol,
                           err, sizeof err);
      vr_jinja_free(t);
    }
    if (want && rc == VR_ERR_UNSUPPORTED) {
      refused++;
    } else if (want && rc != 0) {
      fprintf(stderr, "[%s] failed where jinja2 rendered: %s\n  template: %s\n", id, err, src);
      fails++;
    } else if (want && (ol != strlen(want) || memcmp(out, want, ol) != 0)) {
      fprintf(stderr, "[%s] differs from jinja2\n  template: %s\n  want: [%s]\n  got:  [%s]\n",
              id, src, want, out);
      fails++;
    } else if (!want && rc == 0) {
      fprintf(stderr, "[%s] jinja2 raised %s, we rendered [%s]\n  template: %s\n", id,
              str_or_null(c, "error"), out, src);
      fails++;
    }
    free(out);
  }
  cJSON_Delete(root);
  printf("test_jinja_golden --cases: %d cases, %d failures, %d refused as unsupported\n", n, fails,
         refused);
  if (n == 0) return 1;
  if (refused * 100.0 > max_refused_pct * n) {
    fprintf(stderr, "too many refusals (%d of %d)\n", refused, n);
    return 1;
  }
  return fails ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc >= 3 && strcmp(argv[1], "--cases") == 0)
    return run_cases(argv[2], argc >= 5 && strcmp(argv[3], "--max-refused-pct") == 0 ? atof(argv[4]) : 0.0);
  if (argc < 2) {
    fprintf(stderr, "usage: test_jinja_golden FIXTURE_DIR\n");
    return 2;
  }
  DIR *d = opendir(argv[1]);
  if (!d) {
    fprintf(stderr, "test_jinja_golden: cannot open %s (the golden files are committed; a "
                    "missing folder is a failure)\n", argv[1]);
    return 1;
  }
  struct dirent *e;
  int files = 0, cases = 0, fails = 0;
  while ((e = readdir(d))) {
    size_t n = strlen(e->d_name);
    if (n < 6 || strcmp(e->d_name + n - 5, ".json") != 0) continue;
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", argv[1], e->d_name);
    fails += run_file(path, &cases);
    files++;
  }
  closedir(d);
  printf("test_jinja_golden: %d files, %d cases, %d failures\n", files, cases, fails);
  if (files == 0) {
    fprintf(stderr, "test_jinja_golden: no golden files in %s\n", argv[1]);
    return 1;
  }
  return fails ? 1 : 0;
}
