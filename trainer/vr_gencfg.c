/* vr_gencfg.c: eos_token_id of a checkpoint (vr_gencfg.h). */
#include "vr_gencfg.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_jsonl.h"
#include "vr_log.h"

#define VR_GENCFG_MAX_FILE (1u << 20)

int vr_gencfg_eos_parse(const char *json, size_t len, const char *path, int vocab, int32_t *ids, uint32_t cap,
                        uint32_t *n) {
  *n = 0;
  char jerr[1400];
  cJSON *j = vr_json_parse_file(json, len, path, VR_JSON_DUP_LAST, jerr, sizeof jerr); /* json.load's reading */
  if (!j) {
    vr_log(VR_LOG_ERROR, "%s", jerr);
    return VR_ERR_MODEL_FORMAT;
  }
  if (!cJSON_IsObject(j)) {
    vr_log(VR_LOG_ERROR, "%s: not a JSON object", path);
    cJSON_Delete(j);
    return VR_ERR_MODEL_FORMAT;
  }
  const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "eos_token_id");
  int rc = 1;
  if (!e || cJSON_IsNull(e)) {
    rc = 0;
  } else if (!cJSON_IsNumber(e) && !cJSON_IsArray(e)) {
    rc = VR_ERR_MODEL_FORMAT;
  } else {
    for (const cJSON *one = cJSON_IsArray(e) ? e->child : e; one && rc == 1; one = cJSON_IsArray(e) ? one->next : NULL) {
      const double v = cJSON_IsNumber(one) ? one->valuedouble : NAN;
      if (!isfinite(v) || floor(v) != v) {
        rc = VR_ERR_MODEL_FORMAT;
      } else if (v < 0 || v >= vocab) {
        vr_log(VR_LOG_WARN, "%s: eos_token_id %.0f is outside the vocabulary [0, %d): ignored", path, v, vocab);
      } else if (*n < cap) {
        ids[(*n)++] = (int32_t)v;
      }
    }
  }
  if (rc < 0) {
    vr_log(VR_LOG_ERROR, "%s: \"eos_token_id\" must be an integer or a list of integers", path);
    *n = 0;
  }
  cJSON_Delete(j);
  return rc;
}

int vr_gencfg_eos_ids(const char *dir, int vocab, int32_t *ids, uint32_t cap, uint32_t *n) {
  *n = 0;
  static const char *const files[] = {"generation_config.json", "config.json"};
  char *buf = malloc(VR_GENCFG_MAX_FILE + 1);
  if (!buf) return VR_ERR_NOMEM;
  int rc = 0;
  for (int f = 0; f < 2 && rc == 0; f++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, files[f]);
    FILE *fp = fopen(path, "rb");
    if (!fp) {
      if (errno == ENOENT) continue;
      vr_log(VR_LOG_ERROR, "%s: cannot open: %s", path, strerror(errno));
      rc = VR_ERR_IO;
      break;
    }
    size_t len = fread(buf, 1, VR_GENCFG_MAX_FILE + 1, fp);
    int bad = ferror(fp);
    fclose(fp);
    if (bad || len > VR_GENCFG_MAX_FILE) {
      vr_log(VR_LOG_ERROR, "%s: %s", path, bad ? "read error" : "larger than 1 MiB");
      rc = VR_ERR_IO;
      break;
    }
    int got = vr_gencfg_eos_parse(buf, len, path, vocab, ids, cap, n);
    if (got < 0) rc = got;
    else if (got == 1) break;
  }
  free(buf);
  if (rc != 0) *n = 0;
  return rc;
}
