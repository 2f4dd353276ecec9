/* vr_bench_run.c: client threads/processes, schedules, merging. See vr_bench_run.h. */
#include "vr_bench_run.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "verl_reward/status.h"
#include "vr_log.h"
#include "vr_time.h"

/* One client's results; written only by that client, read by the coordinator
 * after the client finished. */
typedef struct client_slot {
  vr_hist_t lat;
  uint64_t requests, successes, errors, warmup_errors, unsent, verify_failures, seqs, tokens;
  double queue_sum_us, compute_sum_us;
  uint64_t last_done_ns;        /* completion time of the last measured request */
  int connect_status;
  int first_error;
  char first_error_msg[256];
} client_slot_t;

/* Everything the clients share; lives in one MAP_SHARED anonymous mapping so
 * forked clients see it too (atomics and a process-shared mutex only). */
typedef struct shared {
  _Atomic int connected;        /* clients done connecting (ok or not) */
  _Atomic int go;               /* 0 wait, 1 run, -1 abort */
  uint64_t t0_ns, measure_ns, end_ns, drain_ns; /* set before go = 1 */
  _Atomic uint64_t tickets;     /* measured requests handed out (requests mode) */
  pthread_mutex_t sched_mu;     /* open loop schedule */
  uint64_t sched_k;             /* next request index */
  uint64_t sched_next_ns;       /* next intended send time (poisson) */
  uint64_t sched_rng;
  uint64_t sched_measured;      /* measured sends handed out (open loop, requests mode) */
  client_slot_t slots[];
} shared_t;

typedef struct client_arg {
  const vr_run_cfg_t *cfg;
  shared_t *sh;
  uint32_t id;
} client_arg_t;

static void note_error(client_slot_t *s, int rc, const char *msg) {
  if (s->first_error == 0) {
    s->first_error = rc;
    snprintf(s->first_error_msg, sizeof(s->first_error_msg), "%s", msg);
  }
}

static void sleep_until(uint64_t t_ns) {
  struct timespec ts = {.tv_sec = (time_t)(t_ns / 1000000000u), .tv_nsec = (long)(t_ns % 1000000000u)};
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

/* Open loop: the next intended send time, or UINT64_MAX when the schedule is
 * over (past the window, or `requests` measured sends handed out). */
static uint64_t next_intended(const vr_run_cfg_t *cfg, shared_t *sh) {
  uint64_t t;
  pthread_mutex_lock(&sh->sched_mu);
  uint64_t k = sh->sched_k++;
  if (cfg->poisson) {
    t = sh->sched_next_ns;
    sh->sched_next_ns += (uint64_t)(vr_rng_exp(&sh->sched_rng) * 1e9 / cfg->rate);
  } else {
    t = sh->t0_ns + (uint64_t)((double)k * 1e9 / cfg->rate);
  }
  if (t >= sh->end_ns) {
    t = UINT64_MAX;
  } else if (cfg->requests && t >= sh->measure_ns && ++sh->sched_measured > cfg->requests) {
    t = UINT64_MAX;
  }
  pthread_mutex_unlock(&sh->sched_mu);
  return t;
}

static void client_main(client_arg_t *a) {
  const vr_run_cfg_t *cfg = a->cfg;
  shared_t *sh = a->sh;
  client_slot_t *s = &sh->slots[a->id];
  vr_hist_init(&s->lat);
  vr_conn_t *conn = NULL;
  vr_reqbuf_t rb;
  vr_reqbuf_init(&rb, cfg->seed * 1000003u + a->id);
  float *scores = NULL;
  size_t scores_cap = 0;
  s->connect_status = vr_conn_open(cfg->transport, &cfg->target, &conn);
  if (s->connect_status != 0) note_error(s, s->connect_status, "connect failed");
  atomic_fetch_add(&sh->connected, 1);
  while (atomic_load(&sh->go) == 0) usleep(200);
  if (atomic_load(&sh->go) < 0 || !conn) goto out;
  sleep_until(sh->t0_ns); /* everyone starts at t0 */
  int open_loop = cfg->rate > 0.0;
  for (;;) {
    uint64_t t_start;
    int measured;
    if (open_loop) {
      t_start = next_intended(cfg, sh);
      if (t_start == UINT64_MAX) break;
      measured = t_start >= sh->measure_ns;
      uint64_t now = vr_now_ns();
      if (now > sh->drain_ns) {
        /* fell behind past the drain limit: the rest of the schedule is not sent */
        if (measured) s->unsent++;
        continue;
      }
      if (t_start > now) sleep_until(t_start);
    } else {
      t_start = vr_now_ns();
      if (cfg->requests) {
        if (t_start >= sh->measure_ns) {
          if (atomic_fetch_add(&sh->tickets, 1) >= cfg->requests) break;
          measured = 1;
        } else {
          measured = 0;
        }
      } else {
        if (t_start >= sh->end_ns) break;
        measured = t_start >= sh->measure_ns;
      }
    }
    int rc = vr_workload_next(cfg->wl, &rb);
    if (rc == 0 && rb.n_seqs > scores_cap) {
      float *p = realloc(scores, rb.n_seqs * sizeof(float));
      if (p) {
        scores = p;
        scores_cap = rb.n_seqs;
      } else {
        rc = VR_ERR_NOMEM;
      }
    }
    vr_score_timing_t tm = {0, 0};
    const char *detail = "out of memory";
    if (rc == 0) {
      if (!open_loop) t_start = vr_now_ns(); /* closed loop: do not charge request generation */
      rc = vr_conn_score(conn, &rb, scores, &tm);
      detail = vr_conn_last_error(conn);
    }
    uint64_t t_done = vr_now_ns();
    if (rc == 0 && cfg->verify) {
      uint32_t bad = cfg->verify(&rb, scores);
      if (bad) {
        if (measured) s->verify_failures++;
        rc = VR_ERR_INTERNAL;
        char msg[128];
        snprintf(msg, sizeof(msg), "%u of %u scores differ from the checksum", bad, rb.n_seqs);
        note_error(s, rc, msg);
      }
    }
    if (measured) s->last_done_ns = t_done;
    if (rc != 0) {
      char msg[256];
      snprintf(msg, sizeof(msg), "%s: %.200s", vr_status_name(rc), detail);
      note_error(s, rc, msg);
      if (measured) {
        s->requests++;
        s->errors++;
      } else {
        s->warmup_errors++;
      }
      /* a server that is gone stays gone: this client stops */
      if (rc == VR_ERR_SERVER_GONE || rc == VR_ERR_SERVER_RESTARTED) break;
      /* closed loop: a server that fails fast must not turn the client into a busy loop */
      if (!open_loop) usleep(1000);
      continue;
    }
    if (!measured) continue;
    s->requests++;
    s->successes++;
    s->seqs += rb.n_seqs;
    s->tokens += rb.n_tokens;
    s->queue_sum_us += tm.queue_us;
    s->compute_sum_us += tm.compute_us;
    vr_hist_record(&s->lat, t_done - t_start);
  }
out:
  vr_conn_close(conn);
  vr_reqbuf_free(&rb);
  free(scores);
}

static void *client_thread(void *p) {
  client_main(p);
  return NULL;
}

int vr_run(const vr_run_cfg_t *cfg, vr_run_result_t *res) {
  memset(res, 0, sizeof(*res));
  vr_hist_init(&res->lat_ns);
  res->transport = cfg->transport;
  res->concurrency = cfg->concurrency;
  res->rate = cfg->rate;
  res->poisson = cfg->poisson;
  uint32_t n = cfg->concurrency ? cfg->concurrency : 1;
  size_t sh_size = sizeof(shared_t) + (size_t)n * sizeof(client_slot_t);
  shared_t *sh = mmap(NULL, sh_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) {
    vr_log(VR_LOG_ERROR, "mmap of %zu bytes for client results failed: %s", sh_size, strerror(errno));
    return VR_ERR_NOMEM;
  }
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
  pthread_mutex_init(&sh->sched_mu, &ma);
  pthread_mutexattr_destroy(&ma);
  sh->sched_rng = cfg->seed * 0x9E3779B97F4A7C15ull + 12345u;
  if (!sh->sched_rng) sh->sched_rng = 1;

  client_arg_t *args = calloc(n, sizeof(*args));
  pthread_t *th = calloc(n, sizeof(*th));
  pid_t *pids = calloc(n, sizeof(*pids));
  int rc = 0;
  uint32_t started = 0;
  if (!args || !th || !pids) {
    rc = VR_ERR_NOMEM;
    goto done;
  }
  for (uint32_t i = 0; i < n; i++) {
    args[i] = (client_arg_t){.cfg = cfg, .sh = sh, .id = i};
    if (cfg->procs) {
      pid_t pid = fork();
      if (pid == 0) {
        /* the parent's handlers (stop a spawned server) are not the client's business */
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        client_main(&args[i]);
        _exit(0);
      }
      if (pid < 0) {
        vr_log(VR_LOG_ERROR, "fork of client %u failed: %s", i, strerror(errno));
        rc = VR_ERR_NOMEM;
        break;
      }
      pids[i] = pid;
    } else if (pthread_create(&th[i], NULL, client_thread, &args[i]) != 0) {
      vr_log(VR_LOG_ERROR, "pthread_create of client %u failed", i);
      rc = VR_ERR_NOMEM;
      break;
    }
    started++;
  }
  while ((uint32_t)atomic_load(&sh->connected) < started) usleep(500);
  uint32_t failed = 0;
  for (uint32_t i = 0; i < started; i++) failed += sh->slots[i].connect_status != 0;
  if (rc == 0 && failed) {
    vr_log(VR_LOG_ERROR, "%u of %u %s clients could not connect", failed, n,
           vr_transport_name(cfg->transport));
    rc = sh->slots[0].connect_status ? sh->slots[0].connect_status : VR_ERR_IO;
    for (uint32_t i = 0; i < started; i++)
      if (sh->slots[i].connect_status) {
        rc = sh->slots[i].connect_status;
        break;
      }
  }
  uint64_t t0 = vr_now_ns() + 2000000u; /* 2 ms for every client to see go */
  sh->t0_ns = t0;
  sh->sched_next_ns = t0;
  sh->measure_ns = t0 + (uint64_t)(cfg->warmup_s * 1e9);
  if (cfg->requests) {
    sh->end_ns = UINT64_MAX; /* the count ends the run */
  } else {
    sh->end_ns = sh->measure_ns + (uint64_t)(cfg->duration_s * 1e9);
  }
  if (cfg->rate > 0.0) {
    /* open loop: how long past the schedule's end a backlog may still be sent */
    uint64_t sched_end = cfg->requests
        ? sh->measure_ns + (uint64_t)((double)cfg->requests * 1e9 / cfg->rate) : sh->end_ns;
    uint64_t window = sched_end - t0;
    sh->drain_ns = sched_end + (window > 5000000000ull ? window : 5000000000ull);
  } else {
    sh->drain_ns = UINT64_MAX;
  }
  atomic_store(&sh->go, rc == 0 ? 1 : -1);
  for (uint32_t i = 0; i < started; i++) {
    if (cfg->procs) {
      int st = 0;
      while (waitpid(pids[i], &st, 0) < 0 && errno == EINTR) {
      }
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        vr_log(VR_LOG_ERROR, "client process %u (pid %d) died (status 0x%x)", i, (int)pids[i], st);
        sh->slots[i].errors++;
        sh->slots[i].requests++;
        note_error(&sh->slots[i], VR_ERR_INTERNAL, "client process died");
      }
    } else {
      pthread_join(th[i], NULL);
    }
  }
  uint64_t t_end = vr_now_ns();
  if (rc != 0) goto done;
  for (uint32_t i = 0; i < n; i++) {
    client_slot_t *s = &sh->slots[i];
    vr_hist_merge(&res->lat_ns, &s->lat);
    res->requests += s->requests;
    res->successes += s->successes;
    res->errors += s->errors;
    res->warmup_errors += s->warmup_errors;
    res->unsent += s->unsent;
    res->verify_failures += s->verify_failures;
    res->seqs += s->seqs;
    res->tokens += s->tokens;
    res->queue_us_mean += s->queue_sum_us;
    res->compute_us_mean += s->compute_sum_us;
    if (!res->first_error && s->first_error) {
      res->first_error = s->first_error;
      snprintf(res->first_error_msg, sizeof(res->first_error_msg), "%s", s->first_error_msg);
    }
  }
  if (res->successes) {
    res->queue_us_mean /= (double)res->successes;
    res->compute_us_mean /= (double)res->successes;
  }
  /* closed loop, duration-bound: the window (requests are counted by send time);
   * count-bound: until the last client finished; open loop: the window, or until the last
   * measured answer when a backlog outlasted it, so req_s is what the server delivered */
  uint64_t last_done = 0;
  for (uint32_t i = 0; i < n; i++)
    if (sh->slots[i].last_done_ns > last_done) last_done = sh->slots[i].last_done_ns;
  if (cfg->requests)
    res->duration_s = t_end > sh->measure_ns ? (double)(t_end - sh->measure_ns) / 1e9 : 0.0;
  else
    res->duration_s = cfg->duration_s;
  if (cfg->rate > 0.0 && last_done > sh->measure_ns) {
    double served = (double)(last_done - sh->measure_ns) / 1e9;
    if (served > res->duration_s) res->duration_s = served;
  }
  if (res->duration_s > 0) {
    res->req_s = (double)res->successes / res->duration_s;
    res->seq_s = (double)res->seqs / res->duration_s;
    res->tok_s = (double)res->tokens / res->duration_s;
  }
done:
  pthread_mutex_destroy(&sh->sched_mu);
  munmap(sh, sh_size);
  free(args);
  free(th);
  free(pids);
  return rc;
}
