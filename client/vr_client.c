/* vr_client.c: the trainer-side client of the shm channel (verl_reward/client.h).
 *
 * A client owns one lane. It is the only producer of the lane's request ring
 * and the only consumer of its response ring; the payload arena is managed
 * here, in private memory, as a ring allocator: each request takes one
 * contiguous, 64-byte aligned block (payload, then result area) and gives it
 * back when its result was copied out (out-of-order frees are parked until the
 * oldest block is free). Because the allocator state is private, a lane that
 * the server resets after this process died comes back with an empty arena.
 *
 * Locking: c->mu guards everything except the spin/park loop, which only
 * reads atomics (the lane's resp_head, c->resp_tail, c->done_events). */
#define _GNU_SOURCE
#include "verl_reward/client.h"

#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "verl_reward/protocol.h"
#include "vr_proc.h"
#include "vr_time.h"

/* The client half of the channel sees the protocol only (verl_reward/protocol.h,
 * linked as vr_proto), never the server's internals in shm/: client/CMakeLists.txt
 * keeps shm/ off this file's include path, and this check fails the build if it
 * is ever put back. */
#if defined(__has_include)
#if __has_include("vr_shm.h") || __has_include("vr_shm_validate.h")
#error "client/ must not see shm/ (server internals); use verl_reward/protocol.h"
#endif
#endif

#define DEEP_CHECK_NS 100000000ull   /* server liveness (/proc) at most every 100 ms */
#define PARK_SLICE_NS 100000000ll    /* futex sleeps in slices so liveness is re-checked */
#define HEARTBEAT_STALE_NS 5000000000ll
#define ID_SLOT_BITS 16

enum { P_FREE = 0, P_PENDING = 1, P_DONE = 2 };

typedef struct pend {
  uint64_t id;                /* 0 when free */
  int state;
  int abandoned;              /* vr_client_score gave up: free on arrival */
  uint32_t n_seqs;
  uint64_t result_off;
  uint32_t block;             /* index into the allocation FIFO */
  vr_shm_resp_desc_t resp;    /* copy, once P_DONE */
} pend_t;

typedef struct block {
  uint64_t end;               /* allocator head after this block */
  int freed;
} block_t;

struct vr_client {
  pthread_mutex_t mu;
  char name[NAME_MAX + 1];
  char socket_dir[VR_SHM_ADDR_MAX]; /* opt.socket_dir points here */
  vr_client_options_t opt;
  vr_shm_map_t map;
  const vr_shm_header_t *h;   /* live header (read-only mapping) */
  vr_shm_lane_t *lane;
  vr_shm_req_desc_t *req_ring;
  vr_shm_resp_desc_t *resp_ring;
  uint8_t *arena;
  uint32_t lane_idx, gen, pid, slots, mask;
  uint64_t lease;             /* our lease word */
  uint64_t epoch;
  uint64_t arena_bytes;
  uint32_t req_head;          /* published requests */
  _Atomic uint32_t resp_tail; /* consumed responses (read unlocked while spinning) */
  _Atomic uint64_t done_events;
  uint32_t outstanding;       /* pend entries in use */
  uint64_t id_counter;
  pend_t *pend;               /* slots entries */
  block_t *blocks;            /* n_blocks entries, FIFO in allocation order */
  uint32_t n_blocks;          /* 2 x slots */
  uint32_t blk_head, blk_tail;
  uint64_t a_head, a_tail;    /* free-running byte counters of the arena ring */
  int dead;                   /* sticky error: server gone / restarted / lane reset */
  uint64_t last_deep_ns;
};

/* vr_client_last_error()'s text: thread-local, so it is per calling thread as
 * client.h promises, and there even when connect failed and no handle exists.
 * The library's only static storage; nothing is shared between threads. */
static __thread char g_err[512];

static int fail(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_err, sizeof g_err, fmt, ap);
  va_end(ap);
  return rc;
}

const char *vr_client_last_error(void) { return g_err; }

void vr_client_options_init(vr_client_options_t *opt) {
  if (!opt) return;
  memset(opt, 0, sizeof *opt);
  opt->timeout_us = 30000000;
  opt->connect_timeout_us = 0;
  opt->spin_us = 50;
  opt->expected_server_uid = -1;
}

static void sleep_us(uint64_t us) {
  struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

/* ------------------------------------------------------------ liveness */

/* Marks the client dead with the server gone or restarted (a new segment
 * under the same name with another epoch). Lock held. */
static int server_lost(vr_client_t *c, const char *what) {
  uint64_t e = 0;
  if (vr_shm_peek_epoch(c->name, c->opt.socket_dir, c->opt.expected_server_uid, &e) == 0 && e != c->epoch) {
    c->dead = VR_ERR_SERVER_RESTARTED;
    return fail(c->dead, "reward server on '%s' restarted (%s); close and reconnect", c->name, what);
  }
  c->dead = VR_ERR_SERVER_GONE;
  return fail(c->dead, "reward server on '%s' is gone: %s", c->name, what);
}

/* Checks that the server still serves this lane. deep: also the server
 * process (rate-limited). for_submit: DRAINING refuses new work. Lock held. */
static int check_server(vr_client_t *c, int deep, int for_submit) {
  if ((uint32_t)getpid() != c->pid)
    return fail(VR_ERR_INVAL, "this client was connected by pid %u; a forked child must connect its own", c->pid);
  if (c->dead) return fail(c->dead, "client unusable after an earlier error (%s); close and reconnect",
                           vr_status_name(c->dead));
  uint64_t lease = atomic_load_explicit(&c->lane->lease, memory_order_acquire);
  if (lease != c->lease) {
    c->dead = VR_ERR_MALFORMED;
    return fail(c->dead, "the server reset this client's lane %u (reason %s); close and reconnect", c->lane_idx,
                vr_status_name(c->lane->reset_reason));
  }
  if (c->h->epoch != c->epoch) {
    c->dead = VR_ERR_SERVER_RESTARTED;
    return fail(c->dead, "segment epoch changed; close and reconnect");
  }
  uint32_t st = atomic_load_explicit(&c->h->state, memory_order_acquire);
  if (st == VR_SHM_ST_STOPPED) return server_lost(c, "it stopped");
  if (st == VR_SHM_ST_DRAINING && for_submit)
    return fail(VR_ERR_SHUTTING_DOWN, "reward server on '%s' is draining; no new requests", c->name);
  uint64_t now = vr_now_ns();
  if (deep && now - c->last_deep_ns >= DEEP_CHECK_NS) {
    c->last_deep_ns = now;
    if (!vr_shm_server_alive(c->h, HEARTBEAT_STALE_NS)) return server_lost(c, "its process died");
  }
  return 0;
}

/* ------------------------------------------------------------ arena */

static uint64_t align64(uint64_t x) { return (x + 63u) & ~63ull; }

/* Takes len bytes (64-aligned) contiguous in the arena; VR_ERR_BUSY when full.
 * Blocks freed out of order stay in the FIFO until the older ones are freed,
 * so the FIFO (n_blocks entries) can fill before the arena does. */
static int arena_alloc(vr_client_t *c, uint64_t len, uint64_t *off, uint32_t *blk) {
  uint64_t A = c->arena_bytes;
  if (c->blk_head - c->blk_tail >= c->n_blocks) return VR_ERR_BUSY;
  if (c->a_head == c->a_tail) c->a_head = c->a_tail = 0; /* empty: restart at 0 */
  uint64_t pos = c->a_head % A;
  uint64_t pad = pos + len > A ? A - pos : 0;
  if (c->a_head - c->a_tail + pad + len > A) return VR_ERR_BUSY;
  *off = (c->a_head + pad) % A;
  c->a_head += pad + len;
  *blk = c->blk_head % c->n_blocks;
  c->blocks[*blk].end = c->a_head;
  c->blocks[*blk].freed = 0;
  c->blk_head++;
  return 0;
}

static void arena_free(vr_client_t *c, uint32_t blk) {
  c->blocks[blk].freed = 1;
  while (c->blk_tail != c->blk_head && c->blocks[c->blk_tail % c->n_blocks].freed) {
    c->a_tail = c->blocks[c->blk_tail % c->n_blocks].end;
    c->blk_tail++;
  }
}

static pend_t *pend_lookup(vr_client_t *c, uint64_t id) {
  uint64_t idx = id & ((1u << ID_SLOT_BITS) - 1);
  if (id == 0 || idx >= c->slots || c->pend[idx].id != id) return NULL;
  return &c->pend[idx];
}

static void pend_release(vr_client_t *c, pend_t *p) {
  arena_free(c, p->block);
  p->id = 0;
  p->state = P_FREE;
  p->abandoned = 0;
  c->outstanding--;
}

/* Moves every published response into its pend entry. Lock held. */
static int harvest(vr_client_t *c) {
  uint32_t head = atomic_load_explicit(&c->lane->resp_head, memory_order_acquire);
  uint32_t tail = atomic_load_explicit(&c->resp_tail, memory_order_relaxed);
  if (head == tail) return 0;
  if (head - tail > c->slots) {
    int rc = check_server(c, 0, 0); /* a reset shows up as a lease change */
    if (rc) return rc;
    c->dead = VR_ERR_BAD_SEGMENT;
    return fail(c->dead, "response ring head %u is %u ahead of tail %u (%u slots)", head, head - tail, tail, c->slots);
  }
  uint64_t done = 0;
  while (tail != head) {
    vr_shm_resp_desc_t r;
    memcpy(&r, &c->resp_ring[tail & c->mask], sizeof r);
    tail++;
    pend_t *p = pend_lookup(c, r.req_id);
    if (!p || p->state != P_PENDING) continue; /* not ours (cannot happen with a correct server) */
    if (p->abandoned) {
      pend_release(c, p);
      continue;
    }
    p->resp = r;
    p->state = P_DONE;
    done++;
  }
  atomic_store_explicit(&c->lane->resp_tail, tail, memory_order_release);
  if (done) atomic_fetch_add_explicit(&c->done_events, done, memory_order_seq_cst);
  atomic_store_explicit(&c->resp_tail, tail, memory_order_seq_cst);
  return 0;
}

/* ------------------------------------------------------------ connect */

/* Takes the lane the server gave us at attach (its lease word written by the
 * server). Returns 0, or VR_ERR_BAD_SEGMENT when the lease is not ours. */
static int take_lane(vr_client_t *c, char *why, size_t whyn) {
  uint64_t w = atomic_load_explicit(&c->map.lane->lease, memory_order_acquire);
  if (VR_SHM_LEASE_PID(w) == 0 || VR_SHM_LEASE_CLOSING(w) || VR_SHM_LEASE_QUARANTINED(w)) {
    snprintf(why, whyn, "lane %u of '%s' came with lease 0x%016llx, not a lease of ours", c->map.lane_idx, c->name,
             (unsigned long long)w);
    return VR_ERR_BAD_SEGMENT;
  }
  c->lane = c->map.lane;
  c->lane_idx = c->map.lane_idx;
  c->lease = w;
  c->gen = VR_SHM_LEASE_GEN(w);
  c->pid = (uint32_t)getpid();
  atomic_store_explicit(&c->lane->client_start_time, vr_proc_start_time(getpid()), memory_order_release);
  c->lane->client_uid = (uint32_t)geteuid();
  return 0;
}

int vr_client_connect(const char *shm_name, const vr_client_options_t *opt, vr_client_t **out) {
  if (!out) return fail(VR_ERR_INVAL, "out is NULL");
  *out = NULL;
  vr_client_options_t o;
  if (opt)
    o = *opt;
  else
    vr_client_options_init(&o);
  if (o.timeout_us <= 0) o.timeout_us = 30000000;
  const char *name = shm_name ? shm_name : "verl_reward_shm";
  vr_client_t *c = calloc(1, sizeof *c);
  if (!c) return fail(VR_ERR_NOMEM, "out of memory");
  snprintf(c->name, sizeof c->name, "%s", name);
  if (o.socket_dir) {
    if (strlen(o.socket_dir) >= sizeof c->socket_dir) {
      free(c);
      return fail(VR_ERR_INVAL, "socket_dir '%.60s...' is too long for a Unix socket path", o.socket_dir);
    }
    snprintf(c->socket_dir, sizeof c->socket_dir, "%s", o.socket_dir);
    o.socket_dir = c->socket_dir;
  }
  c->opt = o;
  uint64_t deadline = vr_now_ns() + (o.connect_timeout_us > 0 ? (uint64_t)o.connect_timeout_us * 1000u : 0);
  char why[400];
  int rc;
  for (;;) {
    rc = vr_shm_attach(name, o.socket_dir, o.expected_server_uid, &c->map, why, sizeof why);
    if (rc == 0) {
      /* the server gave us a lane: it was READY when it answered */
      rc = take_lane(c, why, sizeof why);
      if (rc == 0) break;
      vr_shm_detach(&c->map);
    }
    int retry = rc == VR_ERR_NOT_FOUND || rc == VR_ERR_BAD_SEGMENT || rc == VR_ERR_SERVER_GONE ||
                rc == VR_ERR_AGAIN || rc == VR_ERR_NO_LANE || rc == VR_ERR_SHUTTING_DOWN;
    if (!retry || vr_now_ns() >= deadline) {
      free(c);
      if (rc == VR_ERR_AGAIN) rc = VR_ERR_SERVER_GONE; /* not ready within the connect timeout */
      return fail(rc, "%s", why);
    }
    sleep_us(5000);
  }
  const vr_shm_header_t *h = &c->map.hdr;
  c->h = c->map.live;
  c->epoch = h->epoch;
  c->slots = h->ring_slots;
  c->mask = h->ring_slots - 1;
  c->arena_bytes = h->arena_bytes;
  c->req_ring = vr_shm_req_ring(c->lane);
  c->resp_ring = vr_shm_resp_ring(c->lane, c->slots);
  c->arena = vr_shm_arena(c->lane, c->slots);
  c->pend = calloc(c->slots, sizeof *c->pend);
  c->n_blocks = 2 * c->slots;
  c->blocks = calloc(c->n_blocks, sizeof *c->blocks);
  pthread_mutex_init(&c->mu, NULL);
  if (!c->pend || !c->blocks) {
    vr_client_close(c);
    return fail(VR_ERR_NOMEM, "out of memory");
  }
  /* a freshly reset lane has all indices at 0 */
  c->req_head = 0;
  atomic_store(&c->resp_tail, 0);
  atomic_store(&c->lane->req_head, 0);
  atomic_store(&c->lane->resp_tail, 0);
  c->last_deep_ns = vr_now_ns();
  *out = c;
  g_err[0] = '\0';
  return 0;
}

void vr_client_close(vr_client_t *c) {
  if (!c) return;
  if (c->lane && (uint32_t)getpid() == c->pid) { /* a forked child only unmaps its copy */
    /* release only our own lease, or the quarantined one the server left us
     * (a lane reset to free and leased again is someone else's) */
    uint64_t w = atomic_load(&c->lane->lease);
    int ours = w == c->lease || (VR_SHM_LEASE_QUARANTINED(w) && !VR_SHM_LEASE_CLOSING(w) &&
                                 VR_SHM_LEASE_PID(w) == c->pid && VR_SHM_LEASE_GEN(w) != c->gen);
    if (ours && atomic_compare_exchange_strong(&c->lane->lease, &w, w | VR_SHM_LEASE_CLOSING_BIT)) {
      atomic_fetch_add(c->map.bell, 1);
      vr_futex_wake(c->map.bell, INT_MAX);
    }
  }
  vr_shm_detach(&c->map);
  if (c->pend) pthread_mutex_destroy(&c->mu);
  free(c->pend);
  free(c->blocks);
  free(c);
}

int vr_client_limits(vr_client_t *c, vr_limits_t *out) {
  if (!c || !out) return fail(VR_ERR_INVAL, "NULL argument");
  const vr_shm_header_t *h = &c->map.hdr;
  out->max_seq_len = h->max_seq_len;
  out->max_seqs_per_request = h->max_seqs_per_request;
  out->arena_bytes = h->arena_bytes;
  out->max_inflight = h->ring_slots;
  out->vocab_size = h->vocab_size;
  out->n_lanes = h->n_lanes;
  return 0;
}

/* ------------------------------------------------------------ submit */

/* Checks a batch against the published limits; sets *n_tokens, *extras_total. */
static int batch_check(const vr_client_t *c, const vr_batch_t *b, uint32_t *n_tokens, uint64_t *extras_total) {
  const vr_shm_header_t *h = &c->map.hdr;
  if (!b || !b->cu_seqlens || (!b->token_ids && b->n_seqs)) return fail(VR_ERR_INVAL, "batch, token_ids or cu_seqlens is NULL");
  if (b->n_seqs == 0) return fail(VR_ERR_INVAL, "batch has no sequences");
  if (b->n_seqs > h->max_seqs_per_request)
    return fail(VR_ERR_TOO_LARGE, "batch has %u sequences; the server allows %u per request", b->n_seqs,
                h->max_seqs_per_request);
  if (b->cu_seqlens[0] != 0) return fail(VR_ERR_INVAL, "cu_seqlens[0] is %u, must be 0", b->cu_seqlens[0]);
  if ((b->extras == NULL) != (b->extras_len == NULL)) return fail(VR_ERR_INVAL, "extras and extras_len must both be given or both NULL");
  uint64_t xt = 0;
  for (uint32_t i = 0; i < b->n_seqs; i++) {
    if (b->cu_seqlens[i + 1] < b->cu_seqlens[i])
      return fail(VR_ERR_INVAL, "cu_seqlens decreases at %u (%u < %u)", i + 1, b->cu_seqlens[i + 1], b->cu_seqlens[i]);
    uint32_t len = b->cu_seqlens[i + 1] - b->cu_seqlens[i];
    if (len == 0) return fail(VR_ERR_EMPTY_SEQ, "sequence %u is empty", i);
    if (len > h->max_seq_len)
      return fail(VR_ERR_SEQ_TOO_LONG, "sequence %u has %u tokens; the server allows %u", i, len, h->max_seq_len);
    if (h->vocab_size)
      for (uint32_t t = b->cu_seqlens[i]; t < b->cu_seqlens[i + 1]; t++)
        if (b->token_ids[t] < 0 || (uint32_t)b->token_ids[t] >= h->vocab_size)
          return fail(VR_ERR_TOKEN_RANGE, "sequence %u token %u is %d, outside the vocabulary (%u)", i,
                      t - b->cu_seqlens[i], b->token_ids[t], h->vocab_size);
    if (b->extras) {
      if (b->extras_len[i] && !b->extras[i]) return fail(VR_ERR_INVAL, "extras[%u] is NULL with length %u", i, b->extras_len[i]);
      xt += b->extras_len[i];
    }
  }
  if (xt > UINT32_MAX) return fail(VR_ERR_TOO_LARGE, "extras total %llu bytes", (unsigned long long)xt);
  *n_tokens = b->cu_seqlens[b->n_seqs];
  *extras_total = xt;
  return 0;
}

int vr_client_submit(vr_client_t *c, const vr_batch_t *b, uint64_t *req_id) {
  if (!c || !req_id) return fail(VR_ERR_INVAL, "NULL argument");
  uint32_t n_tokens = 0;
  uint64_t xt = 0;
  int rc = batch_check(c, b, &n_tokens, &xt);
  if (rc) return rc;
  uint64_t plen = vr_shm_payload_bytes(b->n_seqs, n_tokens, (uint32_t)xt);
  uint64_t need = align64(plen) + align64(vr_shm_result_bytes(b->n_seqs));
  if (need > c->arena_bytes)
    return fail(VR_ERR_TOO_LARGE, "request needs %llu bytes of arena; a lane has %llu", (unsigned long long)need,
                (unsigned long long)c->arena_bytes);
  pthread_mutex_lock(&c->mu);
  rc = check_server(c, 1, 1);
  if (!rc) rc = harvest(c); /* frees space of abandoned requests */
  if (rc) goto out;
  if (c->outstanding >= c->slots) {
    rc = fail(VR_ERR_BUSY, "%u requests in flight (the lane's limit); wait for some first", c->outstanding);
    goto out;
  }
  uint64_t off;
  uint32_t blk;
  if (arena_alloc(c, need, &off, &blk) != 0) {
    rc = fail(VR_ERR_BUSY, "arena full (%llu of %llu bytes held, the oldest request still pending); wait for earlier requests first",
              (unsigned long long)(c->a_head - c->a_tail), (unsigned long long)c->arena_bytes);
    goto out;
  }
  /* payload: tokens, cu_seqlens, [extras_off, extras] */
  uint8_t *p = c->arena + off;
  memcpy(p, b->token_ids, 4ull * n_tokens);
  p += 4ull * n_tokens;
  memcpy(p, b->cu_seqlens, 4ull * (b->n_seqs + 1));
  p += 4ull * (b->n_seqs + 1);
  if (xt) {
    uint32_t *xo = (uint32_t *)p;
    uint8_t *xd = p + 4ull * (b->n_seqs + 1);
    uint32_t at = 0;
    for (uint32_t i = 0; i < b->n_seqs; i++) {
      xo[i] = at;
      if (b->extras_len[i]) memcpy(xd + at, b->extras[i], b->extras_len[i]);
      at += b->extras_len[i];
    }
    xo[b->n_seqs] = at;
  }
  /* a free pend entry names the request: id = counter << 16 | entry */
  uint32_t idx = 0;
  while (c->pend[idx].id != 0) idx++; /* outstanding < slots: one is free */
  pend_t *pe = &c->pend[idx];
  uint64_t id = (++c->id_counter << ID_SLOT_BITS) | idx;
  pe->id = id;
  pe->state = P_PENDING;
  pe->abandoned = 0;
  pe->n_seqs = b->n_seqs;
  pe->result_off = off + align64(plen);
  pe->block = blk;
  c->outstanding++;
  vr_shm_req_desc_t *d = &c->req_ring[c->req_head & c->mask];
  memset(d, 0, sizeof *d);
  d->req_id = id;
  d->n_seqs = b->n_seqs;
  d->n_tokens = n_tokens;
  d->payload_off = off;
  d->extras_bytes = (uint32_t)xt;
  d->result_off = pe->result_off;
  d->submit_ns = vr_now_ns();
  c->req_head++;
  atomic_store_explicit(&c->lane->req_head, c->req_head, memory_order_release);
  vr_doorbell_ring(c->map.bell, &c->h->srv_waiters);
  *req_id = id;
out:
  pthread_mutex_unlock(&c->mu);
  return rc;
}

/* ------------------------------------------------------------ wait */

/* Copies a finished request out and forgets it. Lock held. */
static int take_result(vr_client_t *c, pend_t *p, float *scores, float *components, vr_request_info_t *info) {
  const vr_shm_resp_desc_t *r = &p->resp;
  int status = r->status;
  uint32_t ncomp = r->n_components <= VR_MAX_COMPONENTS ? r->n_components : 0;
  if (status == 0 && !(r->flags & VR_SHM_RESP_HAS_SCORES)) status = VR_ERR_INTERNAL;
  if (status == 0) {
    const float *res = (const float *)(c->arena + p->result_off);
    if (scores) memcpy(scores, res, sizeof(float) * p->n_seqs);
    if (components) {
      memcpy(components, res + p->n_seqs, sizeof(float) * p->n_seqs * VR_MAX_COMPONENTS);
      for (uint32_t i = 0; i < p->n_seqs; i++)
        for (uint32_t k = ncomp; k < VR_MAX_COMPONENTS; k++) components[(size_t)i * VR_MAX_COMPONENTS + k] = 0.0f;
    }
  }
  if (info) {
    memset(info, 0, sizeof *info);
    info->status = status;
    info->n_seqs = p->n_seqs;
    info->queue_us = r->queue_us;
    info->compute_us = r->compute_us;
    info->bad_seq = r->bad_seq >= -1 && r->bad_seq < (int32_t)p->n_seqs ? r->bad_seq : -1;
    info->n_components = status == 0 ? ncomp : 0;
    for (uint32_t k = 0; k < info->n_components; k++) {
      memcpy(info->component_names[k], r->component_names[k], VR_COMPONENT_NAME_MAX);
      info->component_names[k][VR_COMPONENT_NAME_MAX - 1] = '\0';
    }
  }
  pend_release(c, p);
  if (status) fail(status, "request failed on the server: %s%s", vr_strerror(status),
                   r->bad_seq >= 0 ? " (see info.bad_seq)" : "");
  return status;
}

int vr_client_poll(vr_client_t *c, uint64_t req_id) {
  if (!c) return fail(VR_ERR_INVAL, "NULL client");
  pthread_mutex_lock(&c->mu);
  int rc = harvest(c);
  pend_t *p = pend_lookup(c, req_id);
  if (!p || p->abandoned) rc = fail(VR_ERR_NOT_FOUND, "unknown request id %llu", (unsigned long long)req_id);
  else if (p->state == P_DONE) rc = 1;
  else if (!rc) rc = check_server(c, 1, 0);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

int vr_client_wait(vr_client_t *c, uint64_t req_id, int64_t timeout_us, float *scores, float *components,
                   vr_request_info_t *info) {
  if (!c) return fail(VR_ERR_INVAL, "NULL client");
  uint64_t t0 = vr_now_ns();
  uint64_t deadline = timeout_us < 0 ? UINT64_MAX : t0 + (uint64_t)timeout_us * 1000u;
  uint64_t spin_end = t0 + (uint64_t)c->opt.spin_us * 1000u;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    int rc = harvest(c);
    pend_t *p = pend_lookup(c, req_id);
    if (!p || p->abandoned) {
      pthread_mutex_unlock(&c->mu);
      return fail(VR_ERR_NOT_FOUND, "unknown request id %llu", (unsigned long long)req_id);
    }
    if (p->state == P_DONE) {
      rc = take_result(c, p, scores, components, info);
      pthread_mutex_unlock(&c->mu);
      return rc;
    }
    uint64_t now = vr_now_ns();
    if (!rc) rc = check_server(c, now >= spin_end, 0);
    if (rc) {
      pthread_mutex_unlock(&c->mu);
      return rc;
    }
    if (now >= deadline) {
      pthread_mutex_unlock(&c->mu);
      return fail(VR_ERR_TIMEOUT, "request %llu not answered within %lld us", (unsigned long long)req_id,
                  (long long)timeout_us);
    }
    uint64_t seen = atomic_load_explicit(&c->done_events, memory_order_seq_cst);
    pthread_mutex_unlock(&c->mu);
    if (now < spin_end) {
      /* read the clock every 32 polls only: it costs more than a poll */
      uint64_t until = spin_end < deadline ? spin_end : deadline;
      for (uint32_t n = 1; atomic_load_explicit(&c->lane->resp_head, memory_order_acquire) ==
                               atomic_load_explicit(&c->resp_tail, memory_order_relaxed) &&
                           atomic_load_explicit(&c->done_events, memory_order_relaxed) == seen;
           n++) {
        if (n % 32 == 0 && vr_now_ns() >= until) break;
        VR_CPU_RELAX();
      }
    } else {
      atomic_fetch_add_explicit(&c->lane->cli_waiters, 1, memory_order_seq_cst);
      uint32_t v = atomic_load_explicit(&c->lane->cli_seq, memory_order_seq_cst);
      if (atomic_load_explicit(&c->lane->resp_head, memory_order_seq_cst) == atomic_load(&c->resp_tail) &&
          atomic_load(&c->done_events) == seen) {
        int64_t left = deadline == UINT64_MAX ? PARK_SLICE_NS : (int64_t)(deadline - now);
        vr_futex_wait(&c->lane->cli_seq, v, left < PARK_SLICE_NS ? left : PARK_SLICE_NS);
      }
      atomic_fetch_sub_explicit(&c->lane->cli_waiters, 1, memory_order_seq_cst);
    }
    pthread_mutex_lock(&c->mu);
  }
}

int vr_client_score(vr_client_t *c, const vr_batch_t *batch, float *scores, float *components,
                    vr_request_info_t *info) {
  if (!c) return fail(VR_ERR_INVAL, "NULL client");
  uint64_t t0 = vr_now_ns(), limit = (uint64_t)c->opt.timeout_us * 1000u;
  uint64_t id;
  int rc;
  /* another thread's requests may fill the lane: retry BUSY until the timeout */
  while ((rc = vr_client_submit(c, batch, &id)) == VR_ERR_BUSY && vr_now_ns() - t0 < limit) sleep_us(20);
  if (rc) return rc;
  uint64_t used = vr_now_ns() - t0;
  rc = vr_client_wait(c, id, used < limit ? (int64_t)((limit - used) / 1000u) : 0, scores, components, info);
  if (rc == VR_ERR_TIMEOUT) {
    /* nobody will wait for it: its space is given back when the answer comes */
    pthread_mutex_lock(&c->mu);
    pend_t *p = pend_lookup(c, id);
    if (p && p->state == P_PENDING) p->abandoned = 1;
    else if (p && p->state == P_DONE) pend_release(c, p);
    pthread_mutex_unlock(&c->mu);
    fail(VR_ERR_TIMEOUT, "no answer within %lld us", (long long)c->opt.timeout_us);
  }
  return rc;
}
