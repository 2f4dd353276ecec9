/* vr_ckpt.c: crash-safe global_step_N checkpoints and the tracker (vr_ckpt.h). */
#define _XOPEN_SOURCE 700
#include "vr_ckpt.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "verl_reward/status.h"
#include "vr_jsonl.h"
#include "vr_lm.h"

#define TRACKER "latest_checkpointed_iteration.txt"

static int rm_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static void rm_rf(const char *p) { nftw(p, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

static int mkdir_p(const char *p) {
  char buf[1100];
  snprintf(buf, sizeof buf, "%s", p);
  for (char *s = buf + 1; *s; s++)
    if (*s == '/') {
      *s = 0;
      if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
      *s = '/';
    }
  return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static int fsync_path(const char *p) {
  int fd = open(p, O_RDONLY);
  if (fd < 0) return -1;
  int rc = fsync(fd);
  close(fd);
  return rc;
}

static int fsync_cb(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)ftw;
  return flag == FTW_F || flag == FTW_D || flag == FTW_DP ? fsync_path(p) : 0;
}

int vr_ckpt_init(vr_ckpt_t *c, const char *root, int keep) {
  memset(c, 0, sizeof *c);
  snprintf(c->root, sizeof c->root, "%s", root);
  c->keep = keep;
  if (mkdir_p(root) != 0) {
    fprintf(stderr, "verl-trainer: cannot create trainer.default_local_dir %s: %s\n", root, strerror(errno));
    return VR_ERR_IO;
  }
  /* the first save comes after save_freq steps of work: a root that cannot take it is found now
   * (mkdir_p takes an existing file for a directory; access() says yes to root anywhere) */
  struct stat sb;
  char probe[1200];
  if (stat(root, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    fprintf(stderr, "verl-trainer: trainer.default_local_dir %s is not a directory\n", root);
    return VR_ERR_IO;
  }
  snprintf(probe, sizeof probe, "%.1100s/.verl-trainer-probe-XXXXXX", root);
  int fd = mkstemp(probe);
  if (fd < 0) {
    fprintf(stderr, "verl-trainer: trainer.default_local_dir %s: cannot write there: %s\n", root, strerror(errno));
    return VR_ERR_IO;
  }
  close(fd);
  unlink(probe);
  return 0;
}

int vr_ckpt_begin(vr_ckpt_t *c, int64_t step, char *dir, size_t cap) {
  vr_ckpt_join(c);
  snprintf(c->final, sizeof c->final, "%s/global_step_%" PRId64, c->root, step);
  snprintf(c->tmp, sizeof c->tmp, "%s.tmp", c->final);
  rm_rf(c->tmp); /* a crash's leftover */
  char sub[1300];
  int rc = mkdir(c->tmp, 0755);
  snprintf(sub, sizeof sub, "%s/actor", c->tmp);
  if (rc == 0) rc = mkdir(sub, 0755);
  snprintf(sub, sizeof sub, "%s/critic", c->tmp);
  if (rc == 0) rc = mkdir(sub, 0755);
  if (rc != 0) {
    fprintf(stderr, "verl-trainer: cannot create the checkpoint directory %s: %s\n", c->tmp, strerror(errno));
    return VR_ERR_IO;
  }
  snprintf(dir, cap, "%s", c->tmp);
  c->n_markers = 0;
  return 0;
}

int vr_ckpt_expect(vr_ckpt_t *c, const char *rel) {
  if (c->n_markers >= VR_CKPT_MAX_MARKERS || strlen(rel) >= sizeof c->markers[0]) {
    fprintf(stderr, "verl-trainer: checkpoint %s: cannot wait for %s (%d markers at most, names < %zu bytes)\n",
            c->final, rel, VR_CKPT_MAX_MARKERS, sizeof c->markers[0]);
    return VR_ERR_INVAL;
  }
  snprintf(c->markers[c->n_markers++], sizeof c->markers[0], "%s", rel);
  return 0;
}

/* Waits for the workers' markers (polling: they are other processes) and removes them. */
static int wait_markers(vr_ckpt_t *c) {
  const double limit = c->marker_timeout_s > 0 ? c->marker_timeout_s : 3600;
  for (int i = 0; i < c->n_markers; i++) {
    double waited = 0;
    char p[1300];
    snprintf(p, sizeof p, "%.1200s/%s", c->tmp, c->markers[i]);
    while (access(p, F_OK) != 0) {
      if (waited > limit) {
        fprintf(stderr, "verl-trainer: checkpoint %s: %s did not appear within %.0f s\n", c->final, p, limit);
        return -1;
      }
      struct timespec ts = {0, 2000000L};
      nanosleep(&ts, NULL);
      waited += 0.002;
    }
    unlink(p);
  }
  return 0;
}

/* path via path.tmp, fsync and rename (vr_lm's writer, shared with the model and optimizer files). */
static int write_file_atomic(const char *path, const char *text) {
  const void *parts[1] = {text};
  const size_t len = strlen(text);
  return vr_lm_write_file(path, parts, &len, 1);
}

static int step_of(const char *name, int64_t *step) {
  char *end;
  if (strncmp(name, "global_step_", 12) != 0) return -1;
  long long v = strtoll(name + 12, &end, 10);
  if (end == name + 12 || *end || v < 0) return -1;
  *step = v;
  return 0;
}

/* Removes the oldest complete checkpoints beyond keep. */
static void prune(vr_ckpt_t *c) {
  if (c->keep <= 0) return;
  for (;;) {
    DIR *d = opendir(c->root);
    if (!d) return;
    int64_t oldest = -1, s;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
      if (step_of(e->d_name, &s) == 0) {
        n++;
        if (oldest < 0 || s < oldest) oldest = s;
      }
    closedir(d);
    if (n <= c->keep) return;
    char p[1200];
    snprintf(p, sizeof p, "%s/global_step_%" PRId64, c->root, oldest);
    rm_rf(p);
  }
}

static int finish(vr_ckpt_t *c) {
  const vr_ckpt_state_t *st = &c->st;
  char path[1300], text[512];
  snprintf(text, sizeof text,
           "{\"global_step\": %" PRId64 ", \"dataloader\": {\"epoch\": %" PRIu64 ", \"index\": %" PRIu64
           ", \"seed\": %" PRIu64 ", \"shuffle\": %d}, \"kl_coef\": %.17g}\n",
           st->global_step, st->epoch, st->index, st->seed, st->shuffle, st->kl_coef);
  snprintf(path, sizeof path, "%s/data.json", c->tmp);
  int rc = wait_markers(c);
  if (rc == 0) rc = write_file_atomic(path, text);
  if (rc == 0) rc = nftw(c->tmp, fsync_cb, 16, FTW_PHYS);
  if (c->crash_after == st->global_step) _exit(9); /* tests: a crash before the rename */
  if (rc == 0) {
    rm_rf(c->final); /* a complete checkpoint of the same step (a rerun): replaced */
    rc = rename(c->tmp, c->final);
  }
  if (rc == 0) rc = fsync_path(c->root);
  snprintf(path, sizeof path, "%s/" TRACKER, c->root);
  snprintf(text, sizeof text, "%" PRId64 "\n", st->global_step);
  if (rc == 0) rc = write_file_atomic(path, text);
  if (rc != 0) {
    fprintf(stderr, "verl-trainer: writing the checkpoint %s failed: %s\n", c->final, strerror(errno));
    return VR_ERR_IO;
  }
  prune(c);
  return 0;
}

int vr_ckpt_finish(vr_ckpt_t *c, const vr_ckpt_state_t *st) {
  c->st = *st;
  return c->last_rc = finish(c);
}

static void *thread_main(void *arg) {
  vr_ckpt_t *c = arg;
  c->last_rc = finish(c);
  return NULL;
}

int vr_ckpt_finish_async(vr_ckpt_t *c, const vr_ckpt_state_t *st) {
  c->st = *st;
  if (pthread_create(&c->thread, NULL, thread_main, c) != 0) return vr_ckpt_finish(c, st);
  c->running = 1;
  return 0;
}

int vr_ckpt_join(vr_ckpt_t *c) {
  if (c->running) {
    pthread_join(c->thread, NULL);
    c->running = 0;
  }
  return c->last_rc;
}

int vr_ckpt_latest(const char *root, int64_t *step, char *dir, size_t cap) {
  *step = 0;
  char path[1200], buf[64];
  snprintf(path, sizeof path, "%s/" TRACKER, root);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *end;
  long long v = strtoll(buf, &end, 10);
  while (*end == '\n' || *end == ' ') end++;
  if (end == buf || *end || v < 1) {
    fprintf(stderr, "verl-trainer: %s: not a step number (\"%.20s\")\n", path, buf);
    return VR_ERR_PARSE;
  }
  snprintf(dir, cap, "%s/global_step_%lld", root, v);
  struct stat sb;
  if (stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
    fprintf(stderr, "verl-trainer: %s names step %lld but %s is missing\n", path, v, dir);
    return VR_ERR_NOT_FOUND;
  }
  *step = v;
  return 0;
}

int vr_ckpt_read_state(const char *dir, vr_ckpt_state_t *st) {
  char path[1200];
  snprintf(path, sizeof path, "%s/data.json", dir);
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "verl-trainer: %s: cannot open (%s)\n", path, strerror(errno));
    return VR_ERR_NOT_FOUND;
  }
  char buf[4096];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  /* one value (a longer file is cut here and refused), a repeated key its last (vr_jsonl.h) */
  char jerr[1400] = "";
  cJSON *j = vr_json_parse_file(buf, n, path, VR_JSON_DUP_LAST, jerr, sizeof jerr);
  if (!j) {
    fprintf(stderr, "verl-trainer: %s\n", jerr);
    return VR_ERR_PARSE;
  }
  const cJSON *dl = cJSON_GetObjectItem(j, "dataloader");
  const cJSON *gs = cJSON_GetObjectItem(j, "global_step"), *ep = cJSON_GetObjectItem(dl, "epoch"),
              *ix = cJSON_GetObjectItem(dl, "index"), *sd = cJSON_GetObjectItem(dl, "seed"),
              *sh = cJSON_GetObjectItem(dl, "shuffle"), *kc = cJSON_GetObjectItem(j, "kl_coef");
  int rc = 0;
  if (!cJSON_IsNumber(gs) || !cJSON_IsNumber(ep) || !cJSON_IsNumber(ix) || !cJSON_IsNumber(sd) ||
      !cJSON_IsNumber(sh) || !cJSON_IsNumber(kc)) {
    fprintf(stderr, "verl-trainer: %s: missing or malformed global_step / dataloader.{epoch, index, seed, shuffle} / "
                    "kl_coef\n", path);
    rc = VR_ERR_PARSE;
  } else {
    st->global_step = (int64_t)gs->valuedouble;
    st->epoch = (uint64_t)ep->valuedouble;
    st->index = (uint64_t)ix->valuedouble;
    st->seed = (uint64_t)sd->valuedouble; /* doubles hold seeds < 2^53 exactly: the seed is checked on save */
    st->shuffle = sh->valueint;
    st->kl_coef = kc->valuedouble;
  }
  cJSON_Delete(j);
  return rc;
}
