/* vr_shm_internal.h: the server half's private state, shared by vr_shm.c (lanes,
 * rings, poll/complete, liveness, create/destroy) and vr_shm_admit.c (the
 * rendezvous: sockets, sealed memfds, admission). Not for anyone else. */
#ifndef VR_SHM_INTERNAL_H
#define VR_SHM_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdint.h>

#include "verl_reward/protocol.h"
#include "vr_log_limit.h"
#include "vr_shm.h"
#include "vr_shm_validate.h"

enum { LANE_FREE = 0, LANE_ACTIVE = 1, LANE_QUARANTINED = 2 };

typedef struct srv_lane {
  pthread_mutex_t mu;
  _Atomic int state;       /* LANE_*; written under mu, read unlocked as a hint */
  uint32_t gen;            /* authoritative lease generation */
  uint32_t pid;            /* client pid of the current lease (SO_PEERCRED at admission) */
  uint32_t uid;            /* its uid (SO_PEERCRED), for the per-uid lane cap */
  uint64_t start;          /* that process's start time (/proc, read by the server) */
  uint32_t req_tail;       /* requests consumed */
  uint32_t resp_head;      /* responses published */
  uint32_t inflight;       /* accepted, not completed (this generation) */
  vr_shm_lane_t *sh;
  vr_shm_req_desc_t *req_ring;
  vr_shm_resp_desc_t *resp_ring;
  uint8_t *arena;
} srv_lane_t;

/* A request handed to the caller of poll: lives at the start of the buffer
 * vr_shm_accept() allocated (payload copy follows it). */
typedef struct rec {
  uint64_t magic;
  struct rec *prev, *next;
  uint32_t lane, gen;
  uint64_t req_id;
  uint64_t result_off;
  uint32_t n_seqs;
} rec_t;

struct vr_shm_server {
  vr_shm_config_t cfg;
  char name[NAME_MAX + 1];
  void *base;
  size_t bytes;
  vr_shm_header_t *h;
  srv_lane_t *lanes;
  vr_shm_vlimits_t lim;
  uint32_t mask;
  uint64_t lane_bytes;     /* private copy of the header's geometry */
  pthread_mutex_t rec_mu;
  rec_t recs;              /* sentinel of the in-flight list */
  _Atomic uint32_t inflight;
  _Atomic uint32_t wake_pending;
  uint32_t rr;             /* poll's round-robin start (poll caller only) */
  pthread_t live_thread;
  int live_started;
  int stop_fd;             /* eventfd: destroy tells the liveness thread to end */
  vr_shm_addr_t addr;      /* where the name's sockets are (vr_shm_resolve) */
  int lock_fd;             /* path form: PATH.lock, flock()ed while we live; else -1 */
  uint32_t lane_cap;       /* lanes one uid may hold at once (--max-lanes-per-uid, resolved) */
  int listen_fd;           /* the rendezvous socket (addr.path, or abstract "\0verl-reward/<name>") */
  int hdr_fd;              /* the header page: sealed, and read-only for everyone but us */
  int bell_fd;             /* the doorbell page (word 0: the server doorbell), writable by clients */
  int info_fd;             /* the info socket (\0verl-reward/<name>/info): hello without a lane */
  _Atomic uint32_t *bell;  /* the server doorbell in our mapping of the doorbell page */
  void *bell_map;
  uint32_t allow_uids[VR_SHM_MAX_ALLOW], n_allow_uids;
  uint32_t allow_gids[VR_SHM_MAX_ALLOW], n_allow_gids;
  vr_log_limit_t refuse_log;     /* refused connections (any local user can make them) */
  vr_log_limit_t quarantine_log; /* a hostile client can make one reset per descriptor */
  /* Private copies of what the server publishes in the header: the server never
   * reads its own state back from shared memory. */
  pthread_mutex_t state_mu;      /* serialises set_state */
  _Atomic uint32_t state;        /* VR_SHM_ST_*: what poll obeys */
  uint64_t epoch;

};

/* Resets lane i (its lock held): bumps the generation, empties the rings; a lane whose
 * client is alive and did not close is quarantined (vr_shm.c). */
void vr_shm_lane_reset(vr_shm_server_t *s, uint32_t i, int quarantine, int32_t reason, const char *why);

/* Frees every lane whose client closed it or died (vr_shm.c; liveness thread). */
void vr_shm_reclaim_dead(vr_shm_server_t *s);

/* vr_shm_admit.c. Binds and listens on the name's sockets (s->addr) into s->listen_fd and
 * s->info_fd; the path form first checks (or makes) the directory and takes PATH.lock into
 * s->lock_fd. 0, VR_ERR_EXISTS (a live server holds the name: logged with its pid and uid),
 * VR_ERR_PERM (a directory we cannot use, with a HINT), VR_ERR_IO; on error nothing is
 * left bound. */
int vr_shm_bind_name(vr_shm_server_t *s);
/* Removes the path form's files (the lock last, while held) and closes the sockets: the
 * name is free. Safe to call twice. */
void vr_shm_unbind_name(vr_shm_server_t *s);
/* Reserves the server's view of the segment and backs its header page and the doorbell
 * page with sealed memfds (s->base, s->bytes, s->hdr_fd, s->bell_fd, s->bell): 0 or an
 * error (logged). */
int vr_shm_make_segment(vr_shm_server_t *s, uint64_t total);
/* Answers the pending connections of listener lfd (info: the info socket) with a hello;
 * admitted clients of a READY server get a fresh lane. Liveness thread only. */
void vr_shm_admit_clients(vr_shm_server_t *s, int lfd, int info);

#endif /* VR_SHM_INTERNAL_H */
