/* vr_shm_test_server: a real server process built on vr_shm.h that scores
 * with the checksum "model" (common/vr_checksum.h). Used by the shm tests and the
 * benchmark; not installed.
 *
 *   vr_shm_test_server --name N [--lanes N (8)] [--slots N (64)] [--arena-bytes N (1 MiB)]
 *       [--max-seq-len N] [--max-seqs N] [--vocab N] [--spin-us N] [--mode 0600]
 *       [--delay-us N] [--workers N] [--stats FILE] [--log-burst N (10)] [--log-window-s S (10)]
 *       [--allow-uid N]... [--allow-gid N]... (up to 8 each)
 *
 * The dispatcher thread polls; --workers threads (default 1) complete, so poll
 * and complete always run on different threads, as in the real server.
 * Components per sequence: "checksum" (= the score), "len" (token count),
 * "extras" (sum of the sequence's extras bytes). --stats FILE is rewritten
 * every 100 ms: "served N\ninflight N\nlanes N\nrejected N\n". SIGTERM/SIGINT:
 * destroy the segment and exit 0. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vr_checksum.h"
#include "vr_log.h"
#include "vr_shm.h"
#include "vr_time.h"

#define QCAP 4096

static vr_shm_server_t *g_srv;
static volatile sig_atomic_t g_stop;
static uint32_t g_delay_us;

/* dispatcher -> workers queue */
static vr_shm_request_t g_q[QCAP];
static uint32_t g_qh, g_qt;
static pthread_mutex_t g_qmu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_qcv = PTHREAD_COND_INITIALIZER;
static pthread_cond_t g_qspace = PTHREAD_COND_INITIALIZER;
static _Atomic uint64_t g_served;

static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
  if (g_srv) vr_shm_server_wake(g_srv);
}

static void score_one(const vr_shm_request_t *q) {
  uint64_t t0 = vr_now_ns();
  if (g_delay_us) {
    struct timespec ts = {g_delay_us / 1000000, (long)(g_delay_us % 1000000) * 1000};
    nanosleep(&ts, NULL);
  }
  float *scores = malloc(sizeof(float) * q->n_seqs);
  float *comp = malloc(sizeof(float) * 3 * q->n_seqs);
  static const char names[3][VR_COMPONENT_NAME_MAX] = {"checksum", "len", "extras"};
  for (uint32_t i = 0; i < q->n_seqs; i++) {
    uint32_t a = q->cu_seqlens[i], b = q->cu_seqlens[i + 1];
    scores[i] = vr_checksum_score(q->token_ids + a, b - a);
    uint32_t xs = 0;
    if (q->extras)
      for (uint32_t k = q->extras_off[i]; k < q->extras_off[i + 1]; k++) xs += q->extras[k];
    comp[3 * i] = scores[i];
    comp[3 * i + 1] = (float)(b - a);
    comp[3 * i + 2] = (float)xs;
  }
  uint64_t t1 = vr_now_ns();
  vr_shm_server_complete(g_srv, q, 0, scores, NULL, 3, names, comp, (uint32_t)((t0 - q->accepted_ns) / 1000),
                         (uint32_t)((t1 - t0) / 1000));
  atomic_fetch_add(&g_served, 1);
  free(scores);
  free(comp);
}

static void *worker_main(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&g_qmu);
    while (g_qh == g_qt && !g_stop) pthread_cond_wait(&g_qcv, &g_qmu);
    if (g_qh == g_qt) {
      pthread_mutex_unlock(&g_qmu);
      return NULL;
    }
    vr_shm_request_t q = g_q[g_qt++ % QCAP];
    pthread_cond_signal(&g_qspace);
    pthread_mutex_unlock(&g_qmu);
    score_one(&q);
  }
}

static void write_stats(const char *path) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "w");
  if (!f) return;
  fprintf(f, "served %llu\ninflight %u\nlanes %u\n", (unsigned long long)atomic_load(&g_served),
          vr_shm_server_inflight(g_srv), vr_shm_server_lanes_in_use(g_srv));
  fclose(f);
  rename(tmp, path);
}

static uint64_t num(const char *s) { return strtoull(s, NULL, 0); }

int main(int argc, char **argv) {
  vr_shm_config_t cfg;
  vr_shm_config_init(&cfg);
  /* small by default (8 lanes x 1 MiB, ~9 MB): CI containers often have a 64 MB /dev/shm */
  cfg.n_lanes = 8;
  cfg.arena_bytes = 1u << 20;
  const char *stats = NULL;
  int workers = 1;
  uint32_t uids[8], gids[8], n_uids = 0, n_gids = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) {
      fprintf(stderr, "missing value for %s\n", a);
      return 2;
    }
    i++;
    if (!strcmp(a, "--name")) cfg.name = v;
    else if (!strcmp(a, "--lanes")) cfg.n_lanes = (uint32_t)num(v);
    else if (!strcmp(a, "--slots")) cfg.ring_slots = (uint32_t)num(v);
    else if (!strcmp(a, "--arena-bytes")) cfg.arena_bytes = num(v);
    else if (!strcmp(a, "--max-seq-len")) cfg.max_seq_len = (uint32_t)num(v);
    else if (!strcmp(a, "--max-seqs")) cfg.max_seqs_per_request = (uint32_t)num(v);
    else if (!strcmp(a, "--vocab")) cfg.vocab_size = (uint32_t)num(v);
    else if (!strcmp(a, "--spin-us")) cfg.spin_us = (uint32_t)num(v);
    else if (!strcmp(a, "--log-burst")) cfg.log_burst = (uint32_t)num(v);
    else if (!strcmp(a, "--log-window-s")) cfg.log_window_ns = num(v) * 1000000000ull;
    else if (!strcmp(a, "--mode")) cfg.mode = (uint32_t)strtoul(v, NULL, 8);
    else if (!strcmp(a, "--max-lanes-per-uid")) cfg.max_lanes_per_uid = (uint32_t)num(v);
    else if (!strcmp(a, "--socket-dir")) cfg.socket_dir = v;
    else if (!strcmp(a, "--allow-uid") && n_uids < 8) uids[n_uids++] = (uint32_t)num(v);
    else if (!strcmp(a, "--allow-gid") && n_gids < 8) gids[n_gids++] = (uint32_t)num(v);
    else if (!strcmp(a, "--delay-us")) g_delay_us = (uint32_t)num(v);
    else if (!strcmp(a, "--workers")) workers = (int)num(v);
    else if (!strcmp(a, "--stats")) stats = v;
    else {
      fprintf(stderr, "unknown option %s\n", a);
      return 2;
    }
  }
  if (workers < 1 || workers > 16) workers = 1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  cfg.allow_uids = uids;
  cfg.n_allow_uids = n_uids;
  cfg.allow_gids = gids;
  cfg.n_allow_gids = n_gids;
  int rc = vr_shm_server_create(&cfg, &g_srv);
  if (rc) {
    vr_log(VR_LOG_ERROR, "create failed: %s", vr_strerror(rc));
    return 1;
  }
  pthread_t th[16];
  for (int i = 0; i < workers; i++) pthread_create(&th[i], NULL, worker_main, NULL);
  vr_shm_server_set_state(g_srv, VR_SHM_READY);
  vr_log(VR_LOG_INFO, "test server ready on %s (pid %d)", cfg.name, (int)getpid());
  vr_shm_request_t batch[64];
  uint64_t last_stats = 0;
  while (!g_stop) {
    int n = vr_shm_server_poll(g_srv, batch, 64, 100000);
    if (n > 0) {
      pthread_mutex_lock(&g_qmu);
      for (int k = 0; k < n; k++) {
        while (g_qh - g_qt >= QCAP) pthread_cond_wait(&g_qspace, &g_qmu);
        g_q[g_qh++ % QCAP] = batch[k];
      }
      pthread_cond_broadcast(&g_qcv);
      pthread_mutex_unlock(&g_qmu);
    }
    uint64_t now = vr_now_ns();
    if (stats && now - last_stats > 100000000ull) {
      write_stats(stats);
      last_stats = now;
    }
  }
  pthread_mutex_lock(&g_qmu);
  pthread_cond_broadcast(&g_qcv);
  pthread_mutex_unlock(&g_qmu);
  for (int i = 0; i < workers; i++) pthread_join(th[i], NULL);
  if (stats) write_stats(stats);
  vr_shm_server_destroy(g_srv);
  vr_log(VR_LOG_INFO, "test server on %s stopped after %llu requests", cfg.name,
         (unsigned long long)atomic_load(&g_served));
  return 0;
}
