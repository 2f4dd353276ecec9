/* verl-reward-server: reward-model scores over shared memory and HTTP.
 *
 * Start-up, in the order an operator sees it:
 *   1. settings checked (exit 2 on a usage error, before anything loads);
 *   2. "starting": the HTTP listener is bound and the libevent loop (HTTP + signals) runs on
 *      the main thread while a loader thread loads the model and runs the warm-up forward
 *      (progress lines from model/). /health answers {"status":"starting"}, /ready 503
 *      {"ready":false,"state":"starting"}, POST /v1/score 503 VR_ERR_AGAIN with Retry-After,
 *      /metrics 200 (verl_reward_ready 0), /v1/model 503. sd_notify STATUS=loading ...;
 *   3. the loader thread wakes the loop (loaded_ev); on the loop thread the loader is joined,
 *      then the batcher, the shm segment (created only now: a client attaching earlier gets
 *      VR_ERR_NOT_FOUND, "no reward server listens on NAME", and retries), the dispatcher, the pid file and the ready file are
 *      made, and the server turns ready in that same callback: /ready 200, /health
 *      {"status":"ok"}, sd_notify READY=1. A failed load or start-up step leaves the loop and
 *      exits 1 after logging why, as before HTTP was bound early.
 * SIGTERM/SIGINT during step 2 (nothing accepted, nothing to drain, the loader cannot be
 * interrupted) log, send STOPPING=1 and end the process by that signal's default action, as a
 * signal before the loop ran always did.
 *
 * Shutdown of a ready server (SIGTERM/SIGINT, delivered into the loop by libevent's
 * signal pipe) runs as a chain of loop callbacks:
 *   1. stop intake: /ready and POST /v1/score answer 503, the segment goes
 *      DRAINING (clients' new submissions fail with VR_ERR_SHUTTING_DOWN), the
 *      dispatcher takes what is already in the rings and exits; STOPPING=1;
 *   2. the batcher finishes queued work until --drain-ms, then answers the rest
 *      with VR_ERR_SHUTTING_DOWN, and wakes the loop (batch_idle_ev);
 *   3. once every HTTP request is answered, a short flush delay, loop exit;
 *   4. vr_shm_server_destroy (answers anything left, unlinks), pid and ready files removed, exit 0.
 * A hard timer (drain-ms + 5 s) ends the loop whatever happens. */
#define _GNU_SOURCE
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "verl_reward/status.h"
#include "vr_batcher.h"
#include "vr_dispatch.h"
#include "vr_http.h"
#include "vr_log.h"
#include "vr_model.h"
#include "vr_notify.h"
#include "vr_reload.h"
#include "vr_server.h"
#include "vr_shm.h"
#include "vr_time.h"

/* main()'s own state, on its stack (no file-scope globals: every libevent
 * callback and the batcher's idle callback get it through their arg): the
 * server context the modules share, plus the events of the shutdown chain.
 * There is no signal handler of our own either (so no sig_atomic_t flag):
 * SIGTERM/SIGINT reach the loop through libevent's signal pipe. */
typedef struct main_ctx {
  vr_server_t srv;
  struct event *batch_idle_ev; /* batcher thread -> loop: drain finished */
  struct event *exit_ev;       /* leave the loop (after a flush delay) */
  struct event *hard_ev;       /* drain deadline */
  struct event *loaded_ev;     /* loader thread -> loop: the load ended (load_rc) */
  pthread_t loader;
  int loader_running;          /* loop thread: loader started and not yet joined */
  int load_rc;                 /* written by the loader before loaded_ev, read after the join */
  int rc;                      /* why the loop left early (a failed load or start-up step) */
  vr_reward_spec_t spec;       /* --reward parsed before the load: the metrics' component names */
  vr_notify_t notify;
} main_ctx_t;

/* ---- shutdown chain (event-loop thread) ---- */

static void exit_cb(evutil_socket_t fd, short what, void *arg) {
  main_ctx_t *m = arg;
  event_base_loopexit(m->srv.base, NULL);
}

static void http_idle(void *arg) {
  main_ctx_t *m = arg;
  /* replies are queued on their sockets: give them a moment to flush */
  struct timeval tv = {0, 200000};
  event_add(m->exit_ev, &tv);
}

/* Batcher thread -> loop: everything accepted has been answered. */
static void batcher_idle(void *arg) {
  main_ctx_t *m = arg;
  event_active(m->batch_idle_ev, EV_READ, 0);
}

static void batch_idle_cb(evutil_socket_t fd, short what, void *arg) {
  main_ctx_t *m = arg;
  vr_server_t *srv = &m->srv;
  vr_log(VR_LOG_INFO, "drain: batcher idle; %u HTTP replies pending", vr_http_pending(srv->http));
  if (srv->http) vr_http_on_idle(srv->http, http_idle, m);
  else event_active(m->exit_ev, EV_READ, 0);
}

static void hard_cb(evutil_socket_t fd, short what, void *arg) {
  main_ctx_t *m = arg;
  vr_log(VR_LOG_WARN, "drain did not finish in time; exiting anyway");
  event_base_loopexit(m->srv.base, NULL);
}

static void begin_shutdown(main_ctx_t *m, const char *why, int sig) {
  vr_server_t *srv = &m->srv;
  if (!__atomic_load_n(&srv->loaded, __ATOMIC_ACQUIRE)) {
    /* the loader thread cannot be interrupted and nothing was accepted: end as a signal
     * before the loop did (the default action), without waiting for the load */
    vr_log(VR_LOG_INFO, "%s while loading the model: exiting now (nothing accepted yet)", why);
    vr_notify_send(&m->notify, "STOPPING=1\nSTATUS=stopping (signal during the model load)");
    signal(sig, SIG_DFL);
    raise(sig);
    _exit(128 + sig); /* not reached unless the signal is blocked */
  }
  if (!__atomic_load_n(&srv->ready, __ATOMIC_ACQUIRE)) {
    vr_log(VR_LOG_INFO, "%s: start-up already failed; exiting", why); /* the loop is leaving */
    return;
  }
  if (__atomic_exchange_n(&srv->draining, 1, __ATOMIC_ACQ_REL)) {
    vr_log(VR_LOG_INFO, "%s again: already draining", why);
    return;
  }
  vr_notify_send(&m->notify, "STOPPING=1\nSTATUS=draining");
  /* the ready file exists exactly while /ready answers 200 */
  if (srv->st.ready_file[0]) unlink(srv->st.ready_file);
  vr_log(VR_LOG_INFO, "%s: draining (no new requests; finishing accepted work, up to %u ms)", why, srv->st.drain_ms);
  if (srv->shm) {
    vr_shm_server_set_state(srv->shm, VR_SHM_DRAINING);
    vr_dispatch_stop(srv->dispatch); /* takes what clients already published */
  }
  struct timeval hard = {srv->st.drain_ms / 1000 + 5, (srv->st.drain_ms % 1000) * 1000};
  event_add(m->hard_ev, &hard);
  vr_batcher_drain(srv->batcher, vr_now_ns() + (uint64_t)srv->st.drain_ms * 1000000u, batcher_idle, m);
}

static void signal_cb(evutil_socket_t sig, short what, void *arg) {
  begin_shutdown(arg, sig == SIGINT ? "SIGINT" : "SIGTERM", (int)sig);
}

/* SIGHUP: the daemon convention for "reload": the model is loaded again beside the serving
 * one and switched in (vr_reload.h); never the default action (exit, segment left behind). */
static void sighup_cb(evutil_socket_t sig, short what, void *arg) {
  (void)sig;
  (void)what;
  main_ctx_t *m = arg;
  if (m->srv.reload) vr_reload_start(m->srv.reload, "SIGHUP");
  else vr_log(VR_LOG_WARN, "SIGHUP before the server is serving: ignored");
}

/* ---- start-up ---- */

static int write_pid_file(const char *path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    vr_log(VR_LOG_ERROR, "cannot write pid file %s: %s", path, strerror(errno));
    return VR_ERR_IO;
  }
  char buf[32];
  int n = snprintf(buf, sizeof buf, "%d\n", (int)getpid());
  int ok = write(fd, buf, (size_t)n) == n;
  close(fd);
  return ok ? 0 : VR_ERR_IO;
}

static int start_shm(vr_server_t *srv) {
  vr_shm_config_t cfg;
  vr_shm_config_init(&cfg);
  cfg.name = srv->st.shm_name;
  cfg.n_lanes = srv->st.lanes;
  cfg.mode = srv->st.shm_mode;
  cfg.socket_dir = srv->st.shm_socket_dir[0] ? srv->st.shm_socket_dir : NULL;
  cfg.max_lanes_per_uid = srv->st.max_lanes_per_uid;
  cfg.ring_slots = srv->st.ring_slots;
  cfg.arena_bytes = (uint64_t)srv->st.arena_mb << 20;
  /* with truncation on, longer sequences are accepted and cut here */
  cfg.max_seq_len = srv->st.truncate == VR_TRUNCATE_ERROR ? srv->scorer.max_seq_len : (uint32_t)(cfg.arena_bytes / 4);
  cfg.max_seqs_per_request = srv->st.max_seqs_per_request;
  cfg.vocab_size = srv->scorer.vocab_size;
  cfg.spin_us = srv->st.spin_us;
  _Static_assert(VR_SETTINGS_MAX_IDS <= VR_SHM_MAX_ALLOW, "every --allow-uid/gid entry fits the shm config");
  uint32_t uids[VR_SETTINGS_MAX_IDS], gids[VR_SETTINGS_MAX_IDS];
  char err[256];
  /* checked when set: these cannot fail unless a user or group vanished since */
  if (vr_settings_ids(srv->st.allow_uid, 0, uids, VR_SETTINGS_MAX_IDS, &cfg.n_allow_uids, err, sizeof err) != 0 ||
      vr_settings_ids(srv->st.allow_gid, 1, gids, VR_SETTINGS_MAX_IDS, &cfg.n_allow_gids, err, sizeof err) != 0) {
    vr_log(VR_LOG_ERROR, "--allow-uid / --allow-gid: %s", err);
    return VR_ERR_INVAL;
  }
  cfg.allow_uids = uids;
  cfg.allow_gids = gids;
  int rc = vr_shm_server_create(&cfg, &srv->shm);
  if (rc) {
    vr_log(VR_LOG_ERROR, "cannot serve shared memory under the name '%s': %s", srv->st.shm_name, vr_strerror(rc));
    return rc;
  }
  return 0;
}

/* Loader thread: everything slow (model load, warm-up forward). Touches only srv->scorer
 * (nobody else reads it until the loop thread joined this thread) and m->load_rc. */
static void *loader_main(void *arg) {
  main_ctx_t *m = arg;
  vr_server_t *srv = &m->srv;
  int rc = vr_scorer_init(&srv->scorer, &srv->st);
  if (rc == 0) rc = vr_scorer_warm_up(&srv->scorer, srv->st.model);
  m->load_rc = rc;
  event_active(m->loaded_ev, EV_READ, 0);
  return NULL;
}

static int write_ready_file(vr_server_t *srv) {
  char content[1400];
  char http[300] = "off";
  if (srv->http) snprintf(http, sizeof http, "http://%s:%d", srv->st.host, srv->st.port);
  snprintf(content, sizeof content, "pid=%d\nhttp=%s\nshm=%s\n", (int)getpid(), http,
           srv->shm ? srv->st.shm_name : "off");
  return vr_ready_file_write(srv->st.ready_file, content);
}

/* Loop thread, after the load: the rest of start-up, then ready. Nothing here yields to the
 * loop, so no request sees a half-made server: the ready file, srv->ready and READY=1 all
 * change inside this one callback. */
static int finish_startup(main_ctx_t *m) {
  vr_server_t *srv = &m->srv;
  if (srv->scorer.kind == VR_SCORER_MODEL) {
    const vr_model_info_t *mi = vr_model_info(srv->scorer.models[0]);
    vr_metrics_set_info(&srv->metrics, mi->device, mi->architecture);
    vr_metrics_set_replicas(&srv->metrics, srv->scorer.n_replicas, (const char(*)[16])srv->scorer.devices);
  } else if (srv->scorer.kind == VR_SCORER_CHECKSUM) {
    vr_metrics_set_info(&srv->metrics, "cpu", "checksum");
    vr_metrics_set_replicas(&srv->metrics, srv->scorer.n_replicas, (const char(*)[16])srv->scorer.devices);
  } /* rules only: "none", "none" from vr_metrics_init */
  vr_notify_send(&m->notify, "STATUS=starting the batcher and transports");
  vr_batcher_config_t bc = {.max_batch_tokens = srv->st.max_batch_tokens,
                            .max_wait_us = srv->st.max_wait_us,
                            .batch_linger_us = srv->st.batch_linger_us,
                            .max_queue = srv->st.max_queue,
                            .max_client_queue = srv->st.max_queue_per_client};
  int rc;
  if ((rc = vr_batcher_create(&bc, &srv->scorer, &srv->metrics, &srv->batcher))) return rc;
  if (!(srv->reload = vr_reload_create(srv))) return VR_ERR_NOMEM;
  if (srv->st.shm_name[0] && (rc = start_shm(srv))) return rc;
  if (srv->shm && (rc = vr_dispatch_start(srv, &srv->dispatch))) return rc;
  if (srv->st.pid_file[0] && (rc = write_pid_file(srv->st.pid_file))) return rc;
  if (srv->st.ready_file[0] && (rc = write_ready_file(srv))) return rc;

  if (srv->shm) vr_shm_server_set_state(srv->shm, VR_SHM_READY);
  __atomic_store_n(&srv->ready, 1, __ATOMIC_RELEASE);
  char spec[256];
  vr_reward_spec_format(&srv->scorer.spec, spec, sizeof spec);
  char http[300] = "off";
  if (srv->http) snprintf(http, sizeof http, "http://%s:%d", srv->st.host, srv->st.port);
  vr_log(VR_LOG_INFO, "ready: %s reward=%s shm=%s lanes=%u http=%s max_batch_tokens=%u max_wait_us=%u "
         "max_seq_len=%u truncate=%s rss=%.1fMiB pid=%d",
         srv->scorer.description, spec, srv->shm ? srv->st.shm_name : "off", srv->st.lanes,
         http, srv->st.max_batch_tokens, srv->st.max_wait_us, srv->scorer.max_seq_len,
         vr_truncate_name(srv->scorer.truncate), vr_metrics_rss_bytes() / 1048576.0, (int)getpid());
  char msg[768]; /* http (300) + the shm name (255) fit whole */
  snprintf(msg, sizeof msg, "READY=1\nMAINPID=%d\nSTATUS=ready: http=%s shm=%s", (int)getpid(), http,
           srv->shm ? srv->st.shm_name : "off");
  vr_notify_send(&m->notify, msg);
  return 0;
}

static void loaded_cb(evutil_socket_t fd, short what, void *arg) {
  main_ctx_t *m = arg;
  vr_server_t *srv = &m->srv;
  pthread_join(m->loader, NULL); /* after this, srv->scorer is the loop thread's to read */
  m->loader_running = 0;
  int rc = m->load_rc;
  if (rc == 0) {
    __atomic_store_n(&srv->loaded, 1, __ATOMIC_RELEASE);
    rc = finish_startup(m);
  }
  if (rc) {
    m->rc = rc;
    event_base_loopexit(srv->base, NULL);
  }
}

static int run(main_ctx_t *m) {
  vr_server_t *srv = &m->srv;
  /* --reward first (cheap; vr_scorer_init parses it again): the metrics know their components
   * before the load, so /metrics answers while loading */
  char err[256] = "";
  const char *spec = srv->st.reward[0] ? srv->st.reward : "model";
  if (vr_reward_spec_parse(spec, &m->spec, err, sizeof err) != 0) {
    vr_log(VR_LOG_ERROR, "--reward '%s': %s", spec, err);
    return VR_ERR_INVAL;
  }
  const char *names[VR_REWARD_MAX_COMPONENTS];
  for (uint32_t c = 0; c < m->spec.n; c++) names[c] = m->spec.rules[c].name;
  vr_metrics_init(&srv->metrics, m->spec.n, names, vr_reason_name);
  vr_notify_init(&m->notify);
  /* a ready file left by a process that died must not announce this one */
  if (srv->st.ready_file[0] && unlink(srv->st.ready_file) == 0)
    vr_log(VR_LOG_INFO, "removed a stale ready file %s", srv->st.ready_file);

  struct event *sigterm = evsignal_new(srv->base, SIGTERM, signal_cb, m);
  struct event *sigint = evsignal_new(srv->base, SIGINT, signal_cb, m);
  struct event *sighup = evsignal_new(srv->base, SIGHUP, sighup_cb, m);
  m->batch_idle_ev = event_new(srv->base, -1, 0, batch_idle_cb, m);
  m->exit_ev = event_new(srv->base, -1, 0, exit_cb, m);
  m->hard_ev = evtimer_new(srv->base, hard_cb, m);
  m->loaded_ev = event_new(srv->base, -1, 0, loaded_cb, m);
  int rc = 0;
  if (!sigterm || !sigint || !sighup || !m->batch_idle_ev || !m->exit_ev || !m->hard_ev || !m->loaded_ev) rc = VR_ERR_NOMEM;
  if (rc == 0) {
    evsignal_add(sigterm, NULL);
    evsignal_add(sigint, NULL);
    evsignal_add(sighup, NULL);
  }
  /* bound before the load: probes get "starting" instead of connection refused */
  if (rc == 0 && srv->st.port) rc = vr_http_create(srv, &srv->http);
  if (rc == 0) {
    char msg[1200];
    snprintf(msg, sizeof msg, "STATUS=loading %s", srv->st.model[0] ? srv->st.model : "(rules only)");
    vr_notify_send(&m->notify, msg);
    if (pthread_create(&m->loader, NULL, loader_main, m) != 0) rc = VR_ERR_NOMEM;
    else m->loader_running = 1;
  }
  if (rc == 0) {
    event_base_dispatch(srv->base);
    rc = m->rc;
  }
  if (sigterm) event_free(sigterm);
  if (sigint) event_free(sigint);
  if (sighup) event_free(sighup);
  return rc;
}

static void teardown(main_ctx_t *m) {
  vr_server_t *srv = &m->srv;
  if (m->loader_running) pthread_join(m->loader, NULL); /* only when the loop failed to run */
  if (srv->shm) vr_shm_server_set_state(srv->shm, VR_SHM_DRAINING);
  vr_dispatch_stop(srv->dispatch);
  vr_http_stop_parsing(srv->http); /* it submits to the batcher */
  vr_reload_free(srv->reload);     /* a running reload ends without switching */
  srv->reload = NULL;
  vr_batcher_free(srv->batcher); /* joins; anything still queued is answered shutting-down */
  srv->batcher = NULL;
  vr_dispatch_free(srv->dispatch);
  srv->dispatch = NULL;
  if (srv->shm) {
    vr_shm_server_destroy(srv->shm); /* answers the rest, unlinks */
    srv->shm = NULL;
    vr_log(VR_LOG_INFO, "shared memory '%s' closed (socket removed)", srv->st.shm_name);
  }
  if (srv->http) {
    /* pending replies were flushed during the drain; a forced exit drops them */
    event_base_loop(srv->base, EVLOOP_NONBLOCK);
    vr_http_free(srv->http);
    srv->http = NULL;
  }
  if (m->batch_idle_ev) event_free(m->batch_idle_ev);
  if (m->exit_ev) event_free(m->exit_ev);
  if (m->hard_ev) event_free(m->hard_ev);
  if (m->loaded_ev) event_free(m->loaded_ev);
  vr_scorer_free(&srv->scorer);
  if (srv->st.pid_file[0]) unlink(srv->st.pid_file);
  if (srv->st.ready_file[0]) unlink(srv->st.ready_file);
  vr_notify_free(&m->notify);
}

/* The admin token: the file's first line, without surrounding blanks; at least 16 bytes. */
static int read_admin_token(const char *path, char *out, size_t n) {
  FILE *f = fopen(path, "r");
  char line[512] = "";
  if (!f || !fgets(line, sizeof line, f)) {
    fprintf(stderr, "--admin-token-file %s: cannot read a token line%s%s\n", path, f ? "" : ": ",
            f ? "" : strerror(errno));
    if (f) fclose(f);
    return -1;
  }
  fclose(f);
  char *s = line, *e;
  while (*s == ' ' || *s == '\t') s++;
  e = s + strlen(s);
  while (e > s && (e[-1] == '\n' || e[-1] == '\r' || e[-1] == ' ' || e[-1] == '\t')) *--e = 0;
  if (strlen(s) < 16 || strlen(s) >= n) {
    fprintf(stderr, "--admin-token-file %s: the token must be 16..%zu bytes (it is %zu)\n", path, n - 1, strlen(s));
    return -1;
  }
  snprintf(out, n, "%s", s);
  return 0;
}

int main(int argc, char **argv) {
  main_ctx_t m = {0};
  vr_server_t *srv = &m.srv;
  vr_settings_init(&srv->st);
  srv->argc = argc;
  srv->argv = argv;
  int rc = vr_settings_parse(&srv->st, argc, argv);
  if (rc == 1) return 0;
  if (rc) return 2;
  vr_log_level_t lv;
  if (vr_log_level_parse(srv->st.log_level, &lv) == 0) vr_log_set_level(lv);
  if (srv->st.admin_token_file[0] && read_admin_token(srv->st.admin_token_file, srv->admin_token,
                                                      sizeof srv->admin_token) != 0)
    return 2;
  signal(SIGPIPE, SIG_IGN);
  signal(SIGHUP, SIG_IGN); /* never the default (exit, segment left behind); the loop logs it once running */
  /* SIGTERM/SIGINT stay default until the loop handles them: an early signal just ends us */
  if (evthread_use_pthreads() != 0 || !(srv->base = event_base_new())) {
    vr_log(VR_LOG_FATAL, "cannot initialise libevent");
    return 1;
  }
  vr_log(VR_LOG_INFO, "verl-reward-server starting (backends: %s%s%s)", vr_model_backends(),
         srv->st.config[0] ? ", config " : "", srv->st.config);
  rc = run(&m);
  teardown(&m);
  event_base_free(srv->base);
  libevent_global_shutdown();
  if (rc) {
    vr_log(VR_LOG_ERROR, "exiting: %s", vr_strerror(rc));
    return 1;
  }
  vr_log(VR_LOG_INFO, "stopped cleanly");
  return 0;
}
