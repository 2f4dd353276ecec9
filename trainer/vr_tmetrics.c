/* vr_tmetrics.c: the per-step metrics sink (vr_tmetrics.h). */
#include "vr_tmetrics.h"

#include <math.h>
#include <string.h>

int vr_tm_open(vr_tmetrics_t *tm, const char *path, FILE *console, int total_steps) {
  memset(tm, 0, sizeof *tm);
  tm->console = console;
  tm->total_steps = total_steps;
  if (path && *path) {
    tm->jsonl = fopen(path, "a");
    if (!tm->jsonl) return -1;
  }
  return 0;
}

void vr_tm_close(vr_tmetrics_t *tm) {
  if (tm->jsonl) fclose(tm->jsonl);
  tm->jsonl = NULL;
}

void vr_tm_set(vr_tmetrics_t *tm, const char *name, double v) {
  for (int i = 0; i < tm->n; i++)
    if (strcmp(tm->names[i], name) == 0) {
      tm->values[i] = v;
      return;
    }
  if (tm->n == VR_TM_MAX) return;
  snprintf(tm->names[tm->n], sizeof tm->names[0], "%s", name);
  tm->values[tm->n++] = v;
}

void vr_tm_time(vr_tmetrics_t *tm, const char *phase, double seconds) {
  char name[64];
  snprintf(name, sizeof name, "timing_s/%s", phase);
  for (int i = 0; i < tm->n; i++)
    if (strcmp(tm->names[i], name) == 0) {
      tm->values[i] += seconds;
      return;
    }
  vr_tm_set(tm, name, seconds);
}

int vr_tm_end_step(vr_tmetrics_t *tm, int step) {
  int rc = 0;
  if (tm->console) {
    if (tm->total_steps > 0)
      fprintf(tm->console, "step %d/%d", step, tm->total_steps);
    else
      fprintf(tm->console, "step %d", step);
    for (int i = 0; i < tm->n; i++) fprintf(tm->console, " | %s %.6g", tm->names[i], tm->values[i]);
    fprintf(tm->console, "\n");
    fflush(tm->console);
  }
  if (tm->jsonl) {
    fprintf(tm->jsonl, "{\"step\": %d", step);
    for (int i = 0; i < tm->n; i++) {
      /* names are ours (no quotes or backslashes); non-finite values are not JSON */
      if (isfinite(tm->values[i]))
        fprintf(tm->jsonl, ", \"%s\": %.9g", tm->names[i], tm->values[i]);
      else
        fprintf(tm->jsonl, ", \"%s\": null", tm->names[i]);
    }
    fprintf(tm->jsonl, "}\n");
    if (fflush(tm->jsonl) != 0 || ferror(tm->jsonl)) rc = -1;
  }
  tm->n = 0;
  return rc;
}
