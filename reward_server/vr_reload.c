/* vr_reload.c: model reload beside the serving one (see vr_reload.h). */
#define _GNU_SOURCE
#include "vr_reload.h"

#include <event2/event.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/status.h"
#include "vr_http.h"
#include "vr_log.h"
#include "vr_model.h"
#include "vr_time.h"

struct vr_reload {
  vr_server_t *srv;
  struct event *done_ev;   /* reload thread -> loop */
  pthread_t th;
  int running;             /* loop thread only */
  char why[64];
  uint64_t t0;
  vr_settings_t st;        /* the settings parsed again (config file + command line) */
  vr_scorer_t next;        /* the reload thread's scorer; after a switch it holds the old model */
  int rc;                  /* the reload thread's result (read after the join) */
  int stopping;            /* atomic: vr_reload_free is waiting: do not switch */
  uint64_t n_done, n_failed;
};

/* What a reload may change; anything else differing refuses it (restart for that). */
static const char *const k_changeable[] = {"model", "log-level", "max-wait-us", "batch-linger-us", "max-queue",
                                           "max-queue-per-client", NULL};

static void *reload_main(void *arg) {
  vr_reload_t *r = arg;
  vr_server_t *srv = r->srv;
  vr_scorer_t *nx = &r->next;
  vr_settings_init(&r->st);
  int rc = vr_settings_parse(&r->st, srv->argc, srv->argv) == 0 ? 0 : VR_ERR_INVAL;
  if (rc) vr_log(VR_LOG_ERROR, "reload: the settings (--config and the command line) do not parse; see above");
  const char *diff = rc ? NULL : vr_settings_first_difference(&srv->st, &r->st, k_changeable);
  if (diff) {
    vr_log(VR_LOG_ERROR, "reload: --%s changed; a reload changes only --model, --log-level, --max-wait-us, "
           "--batch-linger-us, --max-queue and --max-queue-per-client. HINT: restart the server for --%s", diff, diff);
    rc = VR_ERR_UNSUPPORTED;
  }
  if (rc == 0) rc = vr_scorer_init(nx, &r->st);
  if (rc == 0 && nx->kind != VR_SCORER_MODEL) rc = VR_ERR_UNSUPPORTED;
  if (rc == 0 && (nx->vocab_size != srv->scorer.vocab_size || nx->max_seq_len != srv->scorer.max_seq_len)) {
    vr_log(VR_LOG_ERROR, "reload: the new model takes other requests (vocabulary %u, max_seq_len %u; serving: %u, %u): "
           "refused. HINT: restart the server to change them (shm clients were told the old ones)",
           nx->vocab_size, nx->max_seq_len, srv->scorer.vocab_size, srv->scorer.max_seq_len);
    rc = VR_ERR_UNSUPPORTED;
  }
  if (rc == 0) rc = vr_scorer_warm_up(nx, r->st.model);
  if (rc == 0 && __atomic_load_n(&r->stopping, __ATOMIC_ACQUIRE)) rc = VR_ERR_SHUTTING_DOWN;
  if (rc == 0) {
    vr_batcher_config_t bc = {.max_batch_tokens = r->st.max_batch_tokens, .max_wait_us = r->st.max_wait_us,
                              .batch_linger_us = r->st.batch_linger_us, .max_queue = r->st.max_queue,
                              .max_client_queue = r->st.max_queue_per_client};
    /* every replica at once (vr_scorer_init loaded all or none): switched, nx->models holds the
     * old ones, freed on the loop; refused, the new ones */
    rc = vr_batcher_swap_models(srv->batcher, nx->models, &bc);
  }
  r->rc = rc;
  event_active(r->done_ev, EV_READ, 0);
  return NULL;
}

/* Loop thread: the reload ended. Frees what is left (the old model after a switch). */
static void done_cb(evutil_socket_t fd, short what, void *arg) {
  (void)fd;
  (void)what;
  vr_reload_t *r = arg;
  pthread_join(r->th, NULL);
  r->running = 0;
  vr_server_t *srv = r->srv;
  double s = (vr_now_ns() - r->t0) / 1e9;
  if (r->rc == 0) {
    /* the settings a reload may change (the batcher has its copy already) */
    snprintf(srv->st.model, sizeof srv->st.model, "%s", r->st.model);
    snprintf(srv->st.log_level, sizeof srv->st.log_level, "%s", r->st.log_level);
    vr_log_level_t lv;
    if (vr_log_level_parse(srv->st.log_level, &lv) == 0) vr_log_set_level(lv);
    srv->st.max_wait_us = r->st.max_wait_us;
    srv->st.batch_linger_us = r->st.batch_linger_us;
    srv->st.max_queue = r->st.max_queue;
    srv->st.max_queue_per_client = r->st.max_queue_per_client;
    char desc[sizeof srv->scorer.description];
    const vr_model_info_t *mi = vr_model_info(srv->scorer.models[0]);
    snprintf(desc, sizeof desc, "%s", r->next.description); /* the new model's line */
    memcpy(srv->scorer.description, desc, sizeof desc);
    vr_http_model_changed(srv->http);
    vr_log(VR_LOG_INFO, "reload (%s): now serving %s (%s, %llu params) after %.1f s; the old model is freed",
           r->why, srv->st.model, mi->architecture, (unsigned long long)mi->param_count, s);
    r->n_done++;
  } else {
    vr_log(VR_LOG_ERROR, "reload (%s) failed after %.1f s: %s; the old model keeps serving", r->why, s,
           vr_strerror(r->rc));
    r->n_done++;
    r->n_failed++;
  }
  vr_scorer_free(&r->next);
}

vr_reload_t *vr_reload_create(vr_server_t *srv) {
  vr_reload_t *r = calloc(1, sizeof *r);
  if (!r) return NULL;
  r->srv = srv;
  r->done_ev = event_new(srv->base, -1, 0, done_cb, r);
  if (!r->done_ev) {
    free(r);
    return NULL;
  }
  return r;
}

int vr_reload_start(vr_reload_t *r, const char *why) {
  vr_server_t *srv = r->srv;
  if (r->running) {
    vr_log(VR_LOG_WARN, "reload (%s): one is already running; ignored", why);
    return VR_ERR_BUSY;
  }
  if (!__atomic_load_n(&srv->ready, __ATOMIC_ACQUIRE) || __atomic_load_n(&srv->draining, __ATOMIC_ACQUIRE) ||
      srv->scorer.kind != VR_SCORER_MODEL) {
    vr_log(VR_LOG_WARN, "reload (%s): %s; ignored", why,
           srv->scorer.kind != VR_SCORER_MODEL && __atomic_load_n(&srv->ready, __ATOMIC_ACQUIRE)
               ? "this server has no model to reload" : "the server is not serving (starting or draining)");
    return VR_ERR_AGAIN;
  }
  snprintf(r->why, sizeof r->why, "%s", why);
  memset(&r->next, 0, sizeof r->next);
  r->rc = 0;
  r->t0 = vr_now_ns();
  if (pthread_create(&r->th, NULL, reload_main, r) != 0) return VR_ERR_NOMEM;
  r->running = 1;
  vr_log(VR_LOG_INFO, "reload (%s): loading %s beside the serving model", why, srv->st.model);
  return 0;
}

void vr_reload_counts(const vr_reload_t *r, uint64_t *done, uint64_t *failed) {
  *done = r ? r->n_done : 0;
  *failed = r ? r->n_failed : 0;
}

void vr_reload_free(vr_reload_t *r) {
  if (!r) return;
  if (r->running) {
    __atomic_store_n(&r->stopping, 1, __ATOMIC_RELEASE);
    pthread_join(r->th, NULL);
    vr_scorer_free(&r->next);
  }
  event_free(r->done_ev);
  free(r);
}
