/* vr_shm.c: server side of the shared-memory channel (see vr_shm.h and
 * verl_reward/protocol.h).
 *
 * Per lane the server keeps a private copy of everything it owns (lease
 * generation, request tail, response head, in-flight count) and never reads
 * those back from the segment: a client can scribble over its lane but can
 * only make the server reject its requests or reset its lane.
 *
 * Locking: each lane has a private mutex taken by poll (consuming requests),
 * complete (publishing a response), the liveness thread and destroy (resets).
 * The record list (requests handed out and not completed) has its own mutex.
 * Lock order: lane, then records.
 *
 * The rendezvous (sockets, sealed memfds, admission of clients) is in
 * vr_shm_admit.c; the state both share is in vr_shm_internal.h. */
#define _GNU_SOURCE
#include "vr_shm.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "verl_reward/protocol.h"
#include "verl_reward/status.h"
#include "vr_log.h"
#include "vr_log_limit.h"
#include "vr_proc.h"
#include "vr_shm_validate.h"
#include "vr_time.h"

#define REC_MAGIC 0x7672726563726563ull
#define LIVENESS_PERIOD_NS 100000000ll /* heartbeat; lanes are checked every 2nd beat */
#define PARK_SLICE_NS 100000000ll

#include "vr_shm_internal.h"

void vr_shm_config_init(vr_shm_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->name = "verl_reward_shm";
  cfg->n_lanes = 32;
  cfg->mode = 0600;
  cfg->ring_slots = 64;
  cfg->arena_bytes = 4ull << 20;
  cfg->max_seq_len = 8192;
  cfg->max_seqs_per_request = 1024;
  cfg->vocab_size = 0;
  cfg->spin_us = 50;
  cfg->log_burst = 10;
  cfg->log_window_ns = 10ull * 1000000000ull;
}

/* ---------------------------------------------------------------- lanes */

/* Publishes one response on lane L (lock held). Returns 0, or -1 when the
 * client's response tail is invalid / the ring is full (a corrupt lane). */
static int lane_respond(vr_shm_server_t *s, srv_lane_t *L, const vr_shm_resp_desc_t *r, char *why, size_t whyn) {
  uint32_t tail = atomic_load_explicit(&L->sh->resp_tail, memory_order_acquire);
  uint32_t used = L->resp_head - tail;
  if (used >= s->cfg.ring_slots) {
    snprintf(why, whyn, "response tail %u invalid for head %u (%u slots)", tail, L->resp_head, s->cfg.ring_slots);
    return -1;
  }
  memcpy(&L->resp_ring[L->resp_head & s->mask], r, sizeof *r);
  L->resp_head++;
  atomic_store_explicit(&L->sh->resp_head, L->resp_head, memory_order_release);
  vr_doorbell_ring(&L->sh->cli_seq, &L->sh->cli_waiters);
  return 0;
}

/* Resets lane i (lock held): bumps the generation, empties the rings. A lane
 * whose client is still alive and did not close is quarantined (kept leased
 * under the new generation, ignored) until that client closes or dies. */
void vr_shm_lane_reset(vr_shm_server_t *s, uint32_t i, int quarantine, int32_t reason, const char *why) {
  srv_lane_t *L = &s->lanes[i];
  vr_shm_lane_t *sh = L->sh;
  uint32_t pid = L->pid; /* the server's own record, never the lease word */
  if (quarantine)
    vr_log_limited(&s->quarantine_log, VR_LOG_WARN, "lane %u (client pid %u) reset and quarantined: %s", i, pid, why);
  else
    vr_log(VR_LOG_INFO, "lane %u (client pid %u) reclaimed: %s", i, pid, why);
  L->gen++;
  L->req_tail = L->resp_head = L->inflight = 0;
  atomic_store(&sh->req_head, 0);
  atomic_store(&sh->resp_tail, 0);
  atomic_store(&sh->req_tail, 0);
  atomic_store(&sh->resp_head, 0);
  sh->reset_reason = reason;
  if (quarantine && pid != 0) {
    L->state = LANE_QUARANTINED;
    L->pid = pid;
    atomic_store_explicit(&sh->lease, VR_SHM_LEASE(L->gen, pid | VR_SHM_LEASE_QUARANTINED_BIT), memory_order_release);
  } else {
    L->state = LANE_FREE;
    L->pid = 0;
    L->start = 0;
    atomic_store(&sh->client_start_time, 0);
    /* a client killed while parked leaves its waiters count up; nobody of
     * the old lease sleeps on the lane any more */
    atomic_store(&sh->cli_waiters, 0);
    atomic_store_explicit(&sh->lease, VR_SHM_LEASE(L->gen, 0), memory_order_release);
  }
  /* wake any thread of a live client sleeping on this lane: it sees the new generation */
  atomic_fetch_add(&sh->cli_seq, 1);
  vr_futex_wake(&sh->cli_seq, INT_MAX);
}

/* Answers a request with an error only (no result area written). */
static void lane_answer_error(vr_shm_server_t *s, uint32_t i, uint64_t req_id, uint32_t n_seqs, int32_t status,
                              int32_t bad_seq) {
  srv_lane_t *L = &s->lanes[i];
  vr_shm_resp_desc_t r;
  memset(&r, 0, sizeof r);
  r.req_id = req_id;
  r.status = status;
  r.n_seqs = n_seqs;
  r.bad_seq = bad_seq;
  char why[160];
  if (lane_respond(s, L, &r, why, sizeof why) != 0) vr_shm_lane_reset(s, i, 1, VR_ERR_MALFORMED, why);
}

/* Brings the private lane state in line with the lease word (lock held).
 * Returns 1 when the lane is active and may be served. */
static int lane_sync_lease(vr_shm_server_t *s, uint32_t i) {
  srv_lane_t *L = &s->lanes[i];
  uint64_t lease = atomic_load_explicit(&L->sh->lease, memory_order_acquire);
  uint32_t pid = VR_SHM_LEASE_PID(lease), gen = VR_SHM_LEASE_GEN(lease);
  char why[128];
  if (L->state != LANE_ACTIVE) return 0; /* lanes are given out by admit_clients, never claimed */
  if (pid != L->pid || gen != L->gen) {
    snprintf(why, sizeof why, "lease word changed under an active lease (pid %u gen %u, expected %u/%u)", pid, gen,
             L->pid, L->gen);
    vr_shm_lane_reset(s, i, 1, VR_ERR_MALFORMED, why);
    return 0;
  }
  if (VR_SHM_LEASE_CLOSING(lease)) {
    vr_shm_lane_reset(s, i, 0, 0, "client closed");
    return 0;
  }
  return 1;
}

/* Consumes up to max requests from lane i (lock held). */
static int lane_collect(vr_shm_server_t *s, uint32_t i, vr_shm_request_t *reqs, int max, int refuse) {
  srv_lane_t *L = &s->lanes[i];
  if (!lane_sync_lease(s, i)) return 0;
  int n = 0;
  char why[256];
  while (n < max && L->inflight < s->cfg.ring_slots) {
    uint32_t head = atomic_load_explicit(&L->sh->req_head, memory_order_acquire);
    uint32_t avail = head - L->req_tail;
    if (avail == 0) break;
    if (avail > s->cfg.ring_slots) {
      snprintf(why, sizeof why, "request head %u is %u ahead of tail %u (%u slots)", head, avail, L->req_tail,
               s->cfg.ring_slots);
      vr_shm_lane_reset(s, i, 1, VR_ERR_MALFORMED, why);
      return n;
    }
    vr_shm_accepted_t acc;
    vr_desc_verdict_t v =
        vr_shm_accept(&L->req_ring[L->req_tail & s->mask], L->arena, &s->lim, sizeof(rec_t), &acc, why, sizeof why);
    L->req_tail++;
    atomic_store_explicit(&L->sh->req_tail, L->req_tail, memory_order_release);
    if (v == VR_DESC_CORRUPT) {
      vr_shm_lane_reset(s, i, 1, VR_ERR_MALFORMED, why);
      return n;
    }
    if (v == VR_DESC_REJECT) {
      vr_log(VR_LOG_DEBUG, "lane %u: rejected (%s): %s", i, vr_status_name(acc.status), why);
      lane_answer_error(s, i, acc.desc.req_id, acc.desc.n_seqs, acc.status, acc.bad_seq);
      if (L->state != LANE_ACTIVE) return n;
      continue;
    }
    if (refuse) {
      free(acc.buf);
      lane_answer_error(s, i, acc.desc.req_id, acc.desc.n_seqs, VR_ERR_SHUTTING_DOWN, -1);
      if (L->state != LANE_ACTIVE) return n;
      continue;
    }
    rec_t *r = acc.buf;
    r->magic = REC_MAGIC;
    r->lane = i;
    r->gen = L->gen;
    r->req_id = acc.desc.req_id;
    r->result_off = acc.desc.result_off;
    r->n_seqs = acc.desc.n_seqs;
    pthread_mutex_lock(&s->rec_mu);
    r->next = s->recs.next;
    r->prev = &s->recs;
    s->recs.next->prev = r;
    s->recs.next = r;
    pthread_mutex_unlock(&s->rec_mu);
    L->inflight++;
    atomic_fetch_add(&s->inflight, 1);
    vr_shm_request_t *q = &reqs[n++];
    q->handle = (uint64_t)(uintptr_t)r;
    q->lane = i;
    q->n_seqs = acc.desc.n_seqs;
    q->n_tokens = acc.desc.n_tokens;
    q->token_ids = acc.token_ids;
    q->cu_seqlens = acc.cu_seqlens;
    q->extras = acc.extras;
    q->extras_off = acc.extras_off;
    q->accepted_ns = vr_now_ns();
  }
  return n;
}

/* One pass over all lanes. */
static int collect(vr_shm_server_t *s, vr_shm_request_t *reqs, int max) {
  uint32_t st = atomic_load_explicit(&s->state, memory_order_relaxed); /* never the shared word */
  int refuse = st != VR_SHM_ST_READY;
  int n = 0;
  uint32_t nl = s->cfg.n_lanes;
  for (uint32_t k = 0; k < nl && n < max; k++) {
    uint32_t i = (s->rr + k) % nl;
    srv_lane_t *L = &s->lanes[i];
    vr_shm_lane_t *sh = L->sh;
    int lst = atomic_load_explicit(&L->state, memory_order_relaxed);
    uint64_t lease = atomic_load_explicit(&sh->lease, memory_order_relaxed);
    if (lst == LANE_QUARANTINED) {
      /* ignored until its client closes (here) or dies (liveness thread) */
      if (VR_SHM_LEASE_CLOSING(lease)) {
        pthread_mutex_lock(&L->mu);
        if (L->state == LANE_QUARANTINED && atomic_load(&sh->lease) == lease) vr_shm_lane_reset(s, i, 0, 0, "client closed");
        pthread_mutex_unlock(&L->mu);
      }
      continue;
    }
    if (lst == LANE_FREE) continue;
    /* unlocked hint: nothing published and nothing to reclaim */
    if (lst == LANE_ACTIVE && atomic_load_explicit(&sh->req_head, memory_order_relaxed) ==
                                  atomic_load_explicit(&sh->req_tail, memory_order_relaxed) &&
        !VR_SHM_LEASE_CLOSING(lease))
      continue;
    pthread_mutex_lock(&L->mu);
    n += lane_collect(s, i, reqs + n, max - n, refuse);
    pthread_mutex_unlock(&L->mu);
  }
  s->rr = (s->rr + 1) % nl;
  return n;
}

int vr_shm_server_poll(vr_shm_server_t *s, vr_shm_request_t *reqs, int max, int64_t wait_us) {
  if (!s || !reqs || max <= 0) return VR_ERR_INVAL;
  uint64_t t0 = vr_now_ns();
  uint64_t spin_end = t0 + (uint64_t)s->cfg.spin_us * 1000u;
  uint64_t deadline = wait_us < 0 ? UINT64_MAX : t0 + (uint64_t)wait_us * 1000u;
  for (uint32_t round = 1;; round++) {
    int n = collect(s, reqs, max);
    if (n) return n;
    if (wait_us == 0) return 0;
    if (atomic_load_explicit(&s->wake_pending, memory_order_relaxed) && atomic_exchange(&s->wake_pending, 0))
      return 0;
    /* spinning: read the clock every 16 rounds only (it costs more than a pass) */
    if (round % 16 != 0 && spin_end > t0) {
      VR_CPU_RELAX();
      continue;
    }
    uint64_t now = vr_now_ns();
    if (now >= deadline) return 0;
    if (now < spin_end) continue;
    /* The waiters word (in the header, which clients map read-only) is set and
     * cleared from the private flag, never counted up and down. */
    atomic_store_explicit(&s->h->srv_waiters, 1, memory_order_seq_cst);
    uint32_t seq = atomic_load_explicit(s->bell, memory_order_seq_cst);
    n = collect(s, reqs, max);
    if (n == 0 && !atomic_load(&s->wake_pending)) {
      int64_t left = deadline == UINT64_MAX ? PARK_SLICE_NS : (int64_t)(deadline - now);
      vr_futex_wait(s->bell, seq, left < PARK_SLICE_NS ? left : PARK_SLICE_NS);
    }
    atomic_store_explicit(&s->h->srv_waiters, 0, memory_order_seq_cst);
    if (n) return n;
  }
}

void vr_shm_server_wake(vr_shm_server_t *s) {
  if (!s) return;
  atomic_store(&s->wake_pending, 1);
  atomic_fetch_add(s->bell, 1);
  vr_futex_wake(s->bell, INT_MAX);
}

/* Removes r from the in-flight list and frees it. */
static void rec_release(vr_shm_server_t *s, rec_t *r) {
  pthread_mutex_lock(&s->rec_mu);
  r->prev->next = r->next;
  r->next->prev = r->prev;
  pthread_mutex_unlock(&s->rec_mu);
  r->magic = 0;
  free(r);
  atomic_fetch_sub(&s->inflight, 1);
}

int vr_shm_server_complete(vr_shm_server_t *s, const vr_shm_request_t *req, int status, const float *scores,
                           const int32_t *seq_status, uint32_t n_components,
                           const char (*component_names)[VR_COMPONENT_NAME_MAX], const float *components,
                           uint32_t queue_us, uint32_t compute_us) {
  if (!s || !req) return VR_ERR_INVAL;
  rec_t *r = (rec_t *)(uintptr_t)req->handle;
  VR_ASSERT(r && r->magic == REC_MAGIC);
  int rc = 0;
  if (status == 0 && !scores) {
    vr_log(VR_LOG_ERROR, "request %llu completed with status 0 but no scores; answering VR_ERR_INTERNAL",
           (unsigned long long)r->req_id);
    status = VR_ERR_INTERNAL;
    rc = VR_ERR_INVAL;
  }
  if (n_components > VR_MAX_COMPONENTS || (n_components && (!component_names || !components))) {
    vr_log(VR_LOG_ERROR, "request %llu: %u components (max %u) or no names/values; dropping components",
           (unsigned long long)r->req_id, n_components, VR_MAX_COMPONENTS);
    n_components = 0;
    rc = VR_ERR_INVAL;
  }
  srv_lane_t *L = &s->lanes[r->lane];
  pthread_mutex_lock(&L->mu);
  if (L->state == LANE_ACTIVE && L->gen == r->gen) {
    vr_shm_resp_desc_t d;
    memset(&d, 0, sizeof d);
    d.req_id = r->req_id;
    d.status = status;
    d.n_seqs = r->n_seqs;
    d.queue_us = queue_us;
    d.compute_us = compute_us;
    d.bad_seq = -1;
    if (seq_status)
      for (uint32_t k = 0; k < r->n_seqs; k++)
        if (seq_status[k] != 0) {
          d.bad_seq = (int32_t)k;
          break;
        }
    if (status == 0) {
      /* result area: validated at accept to lie inside this lane's arena */
      float *out = (float *)(L->arena + r->result_off);
      memcpy(out, scores, sizeof(float) * r->n_seqs);
      float *comp = out + r->n_seqs;
      d.n_components = n_components;
      for (uint32_t c = 0; c < n_components; c++) {
        memcpy(d.component_names[c], component_names[c], VR_COMPONENT_NAME_MAX);
        d.component_names[c][VR_COMPONENT_NAME_MAX - 1] = '\0';
      }
      if (n_components)
        for (uint32_t k = 0; k < r->n_seqs; k++)
          memcpy(comp + (size_t)k * VR_MAX_COMPONENTS, components + (size_t)k * n_components,
                 sizeof(float) * n_components);
      d.flags = VR_SHM_RESP_HAS_SCORES;
    }
    char why[160];
    L->inflight--;
    if (lane_respond(s, L, &d, why, sizeof why) != 0) vr_shm_lane_reset(s, r->lane, 1, VR_ERR_MALFORMED, why);
  } else {
    vr_log(VR_LOG_DEBUG, "request %llu of lane %u dropped: the client left (generation %u, now %u)",
           (unsigned long long)r->req_id, r->lane, r->gen, L->gen);
  }
  pthread_mutex_unlock(&L->mu);
  rec_release(s, r);
  return rc;
}

uint32_t vr_shm_server_lanes_in_use(const vr_shm_server_t *s) {
  if (!s) return 0;
  uint32_t n = 0;
  for (uint32_t i = 0; i < s->cfg.n_lanes; i++) n += atomic_load_explicit(&s->lanes[i].state, memory_order_relaxed) != LANE_FREE;
  return n;
}

vr_shm_lane_t *vr_shm_server_lane(vr_shm_server_t *s, uint32_t i) {
  return s && i < s->cfg.n_lanes ? s->lanes[i].sh : NULL;
}

uint32_t vr_shm_server_inflight(const vr_shm_server_t *s) { return s ? atomic_load(&s->inflight) : 0; }

/* ------------------------------------------------------------ liveness */

/* Reclaims lanes of clients that closed or died (by the pid and start time the
 * server recorded at admission, never by what the lane says). */
void vr_shm_reclaim_dead(vr_shm_server_t *s) {
  for (uint32_t i = 0; i < s->cfg.n_lanes; i++) {
    srv_lane_t *L = &s->lanes[i];
    if (atomic_load_explicit(&L->state, memory_order_acquire) == LANE_FREE) continue;
    pthread_mutex_lock(&L->mu);
    uint64_t lease = atomic_load_explicit(&L->sh->lease, memory_order_acquire);
    int closing = VR_SHM_LEASE_CLOSING(lease), alive = vr_proc_alive((pid_t)L->pid, L->start);
    if (L->state != LANE_FREE && (closing || !alive)) {
      char why[96];
      snprintf(why, sizeof why, closing ? "client closed" : "client pid %u is gone", L->pid);
      if (L->state == LANE_ACTIVE && L->inflight)
        snprintf(why + strlen(why), sizeof why - strlen(why), " (%u requests in flight dropped)", L->inflight);
      vr_shm_lane_reset(s, i, 0, 0, why);
    }
    pthread_mutex_unlock(&L->mu);
  }
}


static void *liveness_main(void *arg) {
  vr_shm_server_t *s = arg;
  unsigned beat = 0;
  uint64_t next = 0;
  for (;;) {
    uint64_t now = vr_now_ns();
    if (now >= next) {
      atomic_store_explicit(&s->h->heartbeat_ns, now, memory_order_release);
      if (beat++ % 2 == 0) {
        vr_shm_reclaim_dead(s);
        vr_log_limit_flush(&s->quarantine_log); /* the count line once a flood's window ended */
        vr_log_limit_flush(&s->refuse_log);
      }
      next = now + LIVENESS_PERIOD_NS;
    }
    struct pollfd pf[3] = {{.fd = s->stop_fd, .events = POLLIN}, {.fd = s->listen_fd, .events = POLLIN},
                           {.fd = s->info_fd, .events = POLLIN}};
    int ms = (int)((next - now + 999999) / 1000000);
    if (poll(pf, 3, ms > 0 ? ms : 1) < 0 && errno != EINTR) {
      vr_log(VR_LOG_ERROR, "poll in the shm liveness thread: %s", strerror(errno));
      struct timespec ts = {0, 10000000};
      nanosleep(&ts, NULL);
    }
    if (pf[0].revents) break;
    if (pf[1].revents & POLLIN) vr_shm_admit_clients(s, s->listen_fd, 0);
    if (pf[2].revents & POLLIN) vr_shm_admit_clients(s, s->info_fd, 1);
  }
  return NULL;
}

/* -------------------------------------------------------------- create */

static int config_check(const vr_shm_config_t *c, char *why, size_t whyn) {
  if (c->n_lanes == 0 || c->n_lanes > VR_SHM_MAX_LANES) {
    snprintf(why, whyn, "n_lanes %u outside 1..%u", c->n_lanes, VR_SHM_MAX_LANES);
    return VR_ERR_INVAL;
  }
  if (c->ring_slots < 1 || c->ring_slots > VR_SHM_MAX_RING_SLOTS || (c->ring_slots & (c->ring_slots - 1))) {
    snprintf(why, whyn, "ring_slots %u must be a power of two in 1..%u", c->ring_slots, VR_SHM_MAX_RING_SLOTS);
    return VR_ERR_INVAL;
  }
  if (c->arena_bytes < 4096 || c->arena_bytes > (1ull << 40)) {
    snprintf(why, whyn, "arena_bytes %llu outside 4 KiB..1 TiB", (unsigned long long)c->arena_bytes);
    return VR_ERR_INVAL;
  }
  if (c->max_seq_len == 0 || c->max_seqs_per_request == 0) {
    snprintf(why, whyn, "max_seq_len and max_seqs_per_request must be > 0");
    return VR_ERR_INVAL;
  }
  if (c->n_allow_uids > VR_SHM_MAX_ALLOW || c->n_allow_gids > VR_SHM_MAX_ALLOW ||
      (c->n_allow_uids && !c->allow_uids) || (c->n_allow_gids && !c->allow_gids)) {
    snprintf(why, whyn, "at most %u allowed uids and %u gids", VR_SHM_MAX_ALLOW, VR_SHM_MAX_ALLOW);
    return VR_ERR_INVAL;
  }
  if (c->mode & ~0777u) {
    snprintf(why, whyn, "mode 0%o has bits beyond 0777", c->mode);
    return VR_ERR_INVAL;
  }
  return 0;
}


int vr_shm_server_create(const vr_shm_config_t *cfg_in, vr_shm_server_t **out) {
  if (!cfg_in || !out) return VR_ERR_INVAL;
  *out = NULL;
  vr_shm_config_t cfg = *cfg_in;
  if (!cfg.name) cfg.name = "verl_reward_shm";
  cfg.arena_bytes = (cfg.arena_bytes + VR_SHM_ARENA_ALIGN - 1) / VR_SHM_ARENA_ALIGN * VR_SHM_ARENA_ALIGN;
  char why[256];
  int rc = config_check(&cfg, why, sizeof why);
  vr_shm_server_t *s = NULL;
  if (rc) {
    vr_log(VR_LOG_ERROR, "bad shm config: %s", why);
    return rc;
  }
  s = calloc(1, sizeof *s);
  if (!s) return VR_ERR_NOMEM;
  s->cfg = cfg;
  vr_log_limit_init(&s->quarantine_log, "lane quarantined", cfg.log_burst ? cfg.log_burst : 10,
                    cfg.log_window_ns ? cfg.log_window_ns : 10ull * 1000000000ull);
  vr_log_limit_init(&s->refuse_log, "client refused", cfg.log_burst ? cfg.log_burst : 10,
                    cfg.log_window_ns ? cfg.log_window_ns : 10ull * 1000000000ull);
  pthread_mutex_init(&s->state_mu, NULL);
  for (uint32_t k = 0; k < cfg.n_allow_uids; k++) s->allow_uids[s->n_allow_uids++] = cfg.allow_uids[k];
  for (uint32_t k = 0; k < cfg.n_allow_gids; k++) s->allow_gids[s->n_allow_gids++] = cfg.allow_gids[k];
  s->lock_fd = -1;
  rc = vr_shm_resolve(cfg.name, cfg.socket_dir, -1, 1, &s->addr, why, sizeof why);
  if (rc) {
    vr_log(VR_LOG_ERROR, "%s", why);
    vr_log_limit_free(&s->quarantine_log);
    vr_log_limit_free(&s->refuse_log);
    pthread_mutex_destroy(&s->state_mu);
    free(s);
    return rc;
  }
  s->cfg.socket_dir = NULL; /* resolved into s->addr; the caller's string is not kept */
  s->lane_cap = cfg.max_lanes_per_uid ? cfg.max_lanes_per_uid
                : (cfg.mode & 0077u) || cfg.n_allow_uids || cfg.n_allow_gids ? (cfg.n_lanes + 1) / 2 : cfg.n_lanes;
  snprintf(s->name, sizeof s->name, "%s", cfg.name);
  s->cfg.name = s->name;
  s->mask = cfg.ring_slots - 1;
  s->lane_bytes = vr_shm_lane_bytes(cfg.ring_slots, cfg.arena_bytes);
  uint64_t lane_bytes = vr_shm_lane_bytes(cfg.ring_slots, cfg.arena_bytes);
  uint64_t total = VR_SHM_LANES_OFFSET + (uint64_t)cfg.n_lanes * lane_bytes;

  s->stop_fd = s->listen_fd = s->info_fd = s->hdr_fd = s->bell_fd = -1;
  rc = vr_shm_bind_name(s);
  if (rc == 0) rc = vr_shm_make_segment(s, total);
  if (rc == 0 && (s->stop_fd = eventfd(0, EFD_CLOEXEC)) < 0) {
    vr_log(VR_LOG_ERROR, "eventfd: %s", strerror(errno));
    rc = VR_ERR_IO;
  }
  if (rc) {
    if (s->base) munmap(s->base, s->bytes);
    if (s->bell_map) munmap(s->bell_map, 4096);
    vr_shm_unbind_name(s);
    int fds[3] = {s->hdr_fd, s->bell_fd, s->stop_fd};
    for (int k = 0; k < 3; k++)
      if (fds[k] >= 0) close(fds[k]);
    vr_log_limit_free(&s->quarantine_log);
    vr_log_limit_free(&s->refuse_log);
    pthread_mutex_destroy(&s->state_mu);
    free(s);
    return rc;
  }
  void *base = s->base;
  s->h = base;
  vr_shm_header_t *h = s->h;
  h->version = VR_SHM_VERSION;
  h->header_bytes = sizeof(vr_shm_header_t);
  h->lane_header_bytes = sizeof(vr_shm_lane_t);
  h->req_desc_bytes = sizeof(vr_shm_req_desc_t);
  h->resp_desc_bytes = sizeof(vr_shm_resp_desc_t);
  h->n_lanes = cfg.n_lanes;
  h->ring_slots = cfg.ring_slots;
  h->max_seq_len = cfg.max_seq_len;
  h->max_seqs_per_request = cfg.max_seqs_per_request;
  h->vocab_size = cfg.vocab_size;
  h->arena_bytes = cfg.arena_bytes;
  h->lane_bytes = lane_bytes;
  h->lanes_offset = VR_SHM_LANES_OFFSET;
  h->total_bytes = total;
  h->server_pid = getpid();
  h->server_uid = (uint32_t)geteuid();
  h->server_start_time = vr_proc_start_time(getpid());
  h->server_pidns = vr_shm_pidns();
  uint64_t epoch = 0;
  if (getrandom(&epoch, sizeof epoch, 0) != (ssize_t)sizeof epoch) epoch = vr_now_ns() ^ ((uint64_t)getpid() << 32);
  h->epoch = s->epoch = epoch ? epoch : 1;
  h->max_components = VR_MAX_COMPONENTS;
  h->component_name_bytes = VR_COMPONENT_NAME_MAX;
  atomic_store(&s->state, VR_SHM_ST_STARTING);
  atomic_store(&h->state, VR_SHM_ST_STARTING);
  atomic_store(&h->heartbeat_ns, vr_now_ns());
  atomic_thread_fence(memory_order_release);
  *(volatile uint64_t *)&h->magic = VR_SHM_MAGIC;

  s->lim.max_seqs_per_request = cfg.max_seqs_per_request;
  s->lim.max_seq_len = cfg.max_seq_len;
  s->lim.vocab_size = cfg.vocab_size;
  s->lim.arena_bytes = cfg.arena_bytes;
  s->lanes = calloc(cfg.n_lanes, sizeof *s->lanes);
  if (!s->lanes) {
    vr_shm_server_destroy(s);
    return VR_ERR_NOMEM;
  }
  for (uint32_t i = 0; i < cfg.n_lanes; i++) {
    srv_lane_t *L = &s->lanes[i];
    pthread_mutex_init(&L->mu, NULL);
    L->sh = vr_shm_lane_at(base, h, i);
    L->req_ring = vr_shm_req_ring(L->sh);
    L->resp_ring = vr_shm_resp_ring(L->sh, cfg.ring_slots);
    L->arena = vr_shm_arena(L->sh, cfg.ring_slots);
  }
  pthread_mutex_init(&s->rec_mu, NULL);
  s->recs.next = s->recs.prev = &s->recs;
  if (pthread_create(&s->live_thread, NULL, liveness_main, s) != 0) {
    vr_log(VR_LOG_ERROR, "cannot start the shm liveness thread");
    vr_shm_server_destroy(s);
    return VR_ERR_NOMEM;
  }
  s->live_started = 1;
  vr_log(VR_LOG_INFO, "shm segment /%s created: %u lanes x %llu bytes (arena %llu, %u slots), sealed memfds, "
         "lanes given out at connect, socket %s, access mode 0%o, at most %u lanes per uid, epoch %016llx", s->name,
         cfg.n_lanes, (unsigned long long)lane_bytes, (unsigned long long)cfg.arena_bytes, cfg.ring_slots, s->addr.path,
         cfg.mode, s->lane_cap, (unsigned long long)h->epoch);
  *out = s;
  return 0;
}

void vr_shm_server_set_state(vr_shm_server_t *s, vr_shm_state_t st) {
  if (!s) return;
  pthread_mutex_lock(&s->state_mu);
  atomic_store(&s->state, (uint32_t)st);
  atomic_store_explicit(&s->h->state, (uint32_t)st, memory_order_release);
  pthread_mutex_unlock(&s->state_mu);
  if (st == VR_SHM_ST_STOPPED || st == VR_SHM_ST_DRAINING) {
    /* clients sleeping on their lane re-check the state */
    for (uint32_t i = 0; s->lanes && i < s->cfg.n_lanes; i++) {
      atomic_fetch_add(&s->lanes[i].sh->cli_seq, 1);
      vr_futex_wake(&s->lanes[i].sh->cli_seq, INT_MAX);
    }
  }
}

void vr_shm_server_destroy(vr_shm_server_t *s) {
  if (!s) return;
  if (s->live_started) {
    uint64_t one = 1;
    if (write(s->stop_fd, &one, sizeof one) != (ssize_t)sizeof one) VR_ASSERT(!"eventfd write");
    pthread_join(s->live_thread, NULL);
  }
  /* the name is free from here on: a new server may bind it while we finish */
  vr_shm_unbind_name(s);
  if (s->lanes) {
    /* refuse what is still queued, answer what was handed out */
    vr_shm_server_set_state(s, VR_SHM_DRAINING);
    vr_shm_request_t tmp[16];
    for (uint32_t i = 0; i < s->cfg.n_lanes; i++) {
      pthread_mutex_lock(&s->lanes[i].mu);
      while (lane_collect(s, i, tmp, 16, 1) > 0) {
      }
      pthread_mutex_unlock(&s->lanes[i].mu);
    }
    uint32_t answered = 0;
    while (s->recs.next != &s->recs) {
      vr_shm_request_t q;
      memset(&q, 0, sizeof q);
      q.handle = (uint64_t)(uintptr_t)s->recs.next;
      vr_shm_server_complete(s, &q, VR_ERR_SHUTTING_DOWN, NULL, NULL, 0, NULL, NULL, 0, 0);
      answered++;
    }
    if (answered) vr_log(VR_LOG_INFO, "answered %u in-flight requests with VR_ERR_SHUTTING_DOWN", answered);
    vr_shm_server_set_state(s, VR_SHM_STOPPED);
    for (uint32_t i = 0; i < s->cfg.n_lanes; i++) pthread_mutex_destroy(&s->lanes[i].mu);
    free(s->lanes);
  }
  if (s->base) munmap(s->base, s->bytes);
  if (s->bell_map) munmap(s->bell_map, 4096);
  if (s->hdr_fd >= 0) close(s->hdr_fd);
  if (s->bell_fd >= 0) close(s->bell_fd);
  if (s->stop_fd >= 0) close(s->stop_fd);
  if (s->live_started) pthread_mutex_destroy(&s->rec_mu);
  vr_log_limit_free(&s->quarantine_log); /* reports what it still counts */
  vr_log_limit_free(&s->refuse_log);
  pthread_mutex_destroy(&s->state_mu);
  free(s);
}
