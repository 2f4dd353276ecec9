/* verl_reward/protocol.h: the shared-memory protocol (v2), the one header both
 * halves of the channel build on: the server (shm/) and the client library
 * (client/), plus tests and tools that look at a segment directly.
 *
 * It holds what both sides must agree on and nothing either side keeps to
 * itself:
 *   1. the byte layout of the segment (constants, header / lane / descriptor
 *      structs, lease word, size and pointer helpers, static asserts);
 *   2. waiting and waking (futex doorbells with a waiters count), inline;
 *   3. the segment functions of the vr_proto library (proto/vr_protocol.c):
 *      naming, header check, attach / detach, server liveness.
 * Server-only pieces (create, lanes, descriptor validation: shm/vr_shm.h,
 * shm/vr_shm_validate.h) and client-only pieces (client/vr_client.c) are not
 * here. libverl_reward_client links vr_proto statically and exports none of
 * its symbols (client/libverl_reward_client.map): trainers use client.h.
 *
 * docs/protocol.md documents the same bytes. Every offset and size is pinned
 * by the static asserts in section 1 and by tests/shm/test_shm_layout.c:
 * changing one is a protocol version bump.
 *
 *   offset 0                      vr_shm_header_t (256 bytes)
 *   header.lanes_offset (4096)    lane 0, then lane i at lanes_offset + i * lane_bytes
 *
 * One lane (lane_bytes, a multiple of 4096):
 *   +0                            vr_shm_lane_t (256 bytes: lease, indices, doorbell)
 *   +256                          request ring: ring_slots x vr_shm_req_desc_t (64 bytes)
 *   +256 + 64*slots               response ring: ring_slots x vr_shm_resp_desc_t (256 bytes)
 *   +256 + 320*slots              payload arena (arena_bytes)
 *
 * Writers: the server writes the header and the "server line" of each lane;
 * a client writes only its own lane's "client line", request ring and arena.
 * Readers on both sides treat everything written by the other side as
 * untrusted. All multi-byte fields are little-endian host order (x86-64 and
 * aarch64); atomics are plain naturally aligned words. Linux only (futex). */
#ifndef VERL_REWARD_PROTOCOL_H
#define VERL_REWARD_PROTOCOL_H

#include <limits.h>
#include <linux/futex.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "verl_reward/client.h" /* VR_MAX_COMPONENTS, VR_COMPONENT_NAME_MAX */

/* ================================================= 1. byte layout */

#define VR_SHM_MAGIC 0x31564d4853525256ull /* "VRRSHMV1" read as little-endian bytes */
#define VR_SHM_VERSION 2u /* 2: attach through a socket and a sealed memfd (section 3) */
#define VR_SHM_LANES_OFFSET 4096u
#define VR_SHM_LANE_ALIGN 4096u
#define VR_SHM_ARENA_ALIGN 64u      /* client allocations in the arena are 64-byte aligned */
#define VR_SHM_MAX_LANES 1024u
#define VR_SHM_MAX_RING_SLOTS 4096u /* power of two; handles keep 16 bits for the slot */

/* Segment states (header.state); same values as vr_shm_state_t. */
#define VR_SHM_ST_STARTING 0u
#define VR_SHM_ST_READY 1u
#define VR_SHM_ST_DRAINING 2u
#define VR_SHM_ST_STOPPED 3u

/* Lease word: (generation << 32) | closing << 31 | quarantined << 30 | pid;
 * pid 0 = free (pids are < 2^22 on Linux). The server writes (gen, pid) when
 * it gives the lane to a client at connect (v1 clients claimed free lanes
 * with CAS; v2 lanes are only given out); the client releases it with CAS
 * w -> w | CLOSING, where w is its own lease or the quarantined lease the
 * server left it. The server bumps the generation every time it resets the
 * lane; a quarantined lane keeps the client's pid with the QUARANTINED bit
 * until that client closes or dies. */
#define VR_SHM_LEASE_CLOSING_BIT 0x80000000u
#define VR_SHM_LEASE_QUARANTINED_BIT 0x40000000u
#define VR_SHM_LEASE(gen, pid) (((uint64_t)(uint32_t)(gen) << 32) | (uint32_t)(pid))
#define VR_SHM_LEASE_GEN(w) ((uint32_t)((w) >> 32))
#define VR_SHM_LEASE_PID(w) ((uint32_t)(w) & 0x3fffffffu)
#define VR_SHM_LEASE_CLOSING(w) (((uint32_t)(w) & VR_SHM_LEASE_CLOSING_BIT) != 0)
#define VR_SHM_LEASE_QUARANTINED(w) (((uint32_t)(w) & VR_SHM_LEASE_QUARANTINED_BIT) != 0)

/* Segment header: 256 bytes at offset 0. Written by the server; identity
 * fields (0..127) once at create, with magic stored last (release) so a
 * reader that sees the magic sees the rest. */
typedef struct vr_shm_header {
  uint64_t magic;                 /*   0 VR_SHM_MAGIC */
  uint32_t version;               /*   8 VR_SHM_VERSION */
  uint32_t header_bytes;          /*  12 sizeof(vr_shm_header_t) = 256 */
  uint32_t lane_header_bytes;     /*  16 sizeof(vr_shm_lane_t) = 256 */
  uint32_t req_desc_bytes;        /*  20 sizeof(vr_shm_req_desc_t) = 64 */
  uint32_t resp_desc_bytes;       /*  24 sizeof(vr_shm_resp_desc_t) = 256 */
  uint32_t n_lanes;               /*  28 */
  uint32_t ring_slots;            /*  32 power of two */
  uint32_t max_seq_len;           /*  36 tokens */
  uint32_t max_seqs_per_request;  /*  40 */
  uint32_t vocab_size;            /*  44 0 = no model (no range check) */
  uint64_t arena_bytes;           /*  48 per lane, multiple of 64 */
  uint64_t lane_bytes;            /*  56 stride between lanes, multiple of 4096 */
  uint64_t lanes_offset;          /*  64 offset of lane 0 (4096) */
  uint64_t total_bytes;           /*  72 size of the segment */
  int32_t server_pid;             /*  80 */
  uint32_t server_uid;            /*  84 euid of the server */
  uint64_t server_start_time;     /*  88 /proc/PID/stat field 22 (clock ticks) */
  uint64_t epoch;                 /*  96 random per server start; never 0 */
  uint32_t max_components;        /* 104 VR_MAX_COMPONENTS */
  uint32_t component_name_bytes;  /* 108 VR_COMPONENT_NAME_MAX */
  uint64_t server_pidns;          /* 112 inode of the server's /proc/self/ns/pid (0 = unknown) */
  uint8_t reserved0[8];           /* 120 zero */
  _Atomic uint32_t state;         /* 128 VR_SHM_ST_* */
  uint32_t reserved1;             /* 132 */
  _Atomic uint64_t heartbeat_ns;  /* 136 CLOCK_MONOTONIC of the server's last beat (every 100 ms) */
  uint8_t reserved2[48];          /* 144 */
  _Atomic uint32_t srv_seq;       /* 192 unused in v2 (0): the doorbell is word 0 of the doorbell page */
  _Atomic uint32_t srv_waiters;   /* 196 1 while the server sleeps on the doorbell, else 0 */
  uint8_t reserved3[56];          /* 200 */
} vr_shm_header_t;

/* Lane header: 256 bytes, one cache line per writer. */
typedef struct vr_shm_lane {
  /* line 0: lease (claimed and released by the client with CAS; reset only by the server) */
  _Atomic uint64_t lease;           /*   0 VR_SHM_LEASE(gen, pid) */
  _Atomic uint64_t client_start_time; /*  8 written by the client right after the CAS */
  uint32_t reserved_16;             /*  16 zero */
  uint32_t client_uid;              /*  20 informational */
  uint8_t reserved0[40];            /*  24 */
  /* line 1: written by the client */
  _Atomic uint32_t req_head;        /*  64 requests published (free-running) */
  _Atomic uint32_t resp_tail;       /*  68 responses consumed (free-running) */
  _Atomic uint32_t cli_waiters;     /*  72 > 0 while a client thread sleeps on cli_seq */
  uint8_t reserved1[52];            /*  76 */
  /* line 2: written by the server */
  _Atomic uint32_t req_tail;        /* 128 requests consumed (free-running) */
  _Atomic uint32_t resp_head;       /* 132 responses published (free-running) */
  _Atomic uint32_t cli_seq;         /* 136 client doorbell: futex word, bumped by the server */
  int32_t reset_reason;             /* 140 last reset's vr_status_t (0 = none) */
  uint8_t reserved2[48];            /* 144 */
  uint8_t reserved3[64];            /* 192 */
} vr_shm_lane_t;

/* Request descriptor (client -> server), 64 bytes. The payload at payload_off
 * in the lane's arena is, in order (each array 4-byte aligned, no gaps):
 *   int32  token_ids[n_tokens]
 *   uint32 cu_seqlens[n_seqs + 1]
 *   if extras_bytes > 0: uint32 extras_off[n_seqs + 1]; uint8 extras[extras_bytes]
 * The result area at result_off (written by the server on success):
 *   float scores[n_seqs]; float components[n_seqs][VR_MAX_COMPONENTS] */
typedef struct vr_shm_req_desc {
  uint64_t req_id;        /*  0 client's id, echoed in the response */
  uint32_t n_seqs;        /*  8 */
  uint32_t n_tokens;      /* 12 */
  uint64_t payload_off;   /* 16 arena offset, multiple of 4 */
  uint32_t extras_bytes;  /* 24 0 = no extras */
  uint32_t flags;         /* 28 0 (reserved) */
  uint64_t result_off;    /* 32 arena offset, multiple of 4 */
  uint64_t submit_ns;     /* 40 client CLOCK_MONOTONIC (informational) */
  uint8_t reserved[16];   /* 48 */
} vr_shm_req_desc_t;

/* Response descriptor (server -> client), 256 bytes. */
#define VR_SHM_RESP_HAS_SCORES 1u
typedef struct vr_shm_resp_desc {
  uint64_t req_id;        /*  0 */
  int32_t status;         /*  8 0 or a vr_status_t */
  uint32_t n_seqs;        /* 12 */
  uint32_t queue_us;      /* 16 */
  uint32_t compute_us;    /* 20 */
  int32_t bad_seq;        /* 24 first failing sequence, -1 if none */
  uint32_t n_components;  /* 28 <= VR_MAX_COMPONENTS */
  uint32_t flags;         /* 32 VR_SHM_RESP_HAS_SCORES: result area written */
  uint8_t reserved[28];   /* 36 */
  char component_names[VR_MAX_COMPONENTS][VR_COMPONENT_NAME_MAX]; /* 64 NUL-terminated */
} vr_shm_resp_desc_t;

/* Bytes of the payload / result areas of a request (64-bit: no overflow from
 * 32-bit counts). */
static inline uint64_t vr_shm_payload_bytes(uint32_t n_seqs, uint32_t n_tokens, uint32_t extras_bytes) {
  uint64_t b = 4ull * n_tokens + 4ull * ((uint64_t)n_seqs + 1);
  if (extras_bytes) b += 4ull * ((uint64_t)n_seqs + 1) + extras_bytes;
  return b;
}
static inline uint64_t vr_shm_result_bytes(uint32_t n_seqs) {
  return 4ull * n_seqs * (1ull + VR_MAX_COMPONENTS);
}

static inline uint64_t vr_shm_lane_bytes(uint32_t ring_slots, uint64_t arena_bytes) {
  uint64_t b = sizeof(vr_shm_lane_t) + (uint64_t)ring_slots * (sizeof(vr_shm_req_desc_t) + sizeof(vr_shm_resp_desc_t)) + arena_bytes;
  return (b + VR_SHM_LANE_ALIGN - 1) / VR_SHM_LANE_ALIGN * VR_SHM_LANE_ALIGN;
}

/* Lane i's pieces inside a mapping (callers have checked the header). */
static inline vr_shm_lane_t *vr_shm_lane_at(void *base, const vr_shm_header_t *h, uint32_t i) {
  return (vr_shm_lane_t *)((uint8_t *)base + h->lanes_offset + (uint64_t)i * h->lane_bytes);
}
static inline vr_shm_req_desc_t *vr_shm_req_ring(vr_shm_lane_t *l) {
  return (vr_shm_req_desc_t *)((uint8_t *)l + sizeof(vr_shm_lane_t));
}
static inline vr_shm_resp_desc_t *vr_shm_resp_ring(vr_shm_lane_t *l, uint32_t slots) {
  return (vr_shm_resp_desc_t *)((uint8_t *)l + sizeof(vr_shm_lane_t) + (uint64_t)slots * sizeof(vr_shm_req_desc_t));
}
static inline uint8_t *vr_shm_arena(vr_shm_lane_t *l, uint32_t slots) {
  return (uint8_t *)l + sizeof(vr_shm_lane_t) + (uint64_t)slots * (sizeof(vr_shm_req_desc_t) + sizeof(vr_shm_resp_desc_t));
}

/* layout pins (also checked at run time by tests/shm/test_shm_layout.c) */
_Static_assert(sizeof(vr_shm_header_t) == 256, "header is 256 bytes");
_Static_assert(offsetof(vr_shm_header_t, arena_bytes) == 48, "header.arena_bytes");
_Static_assert(offsetof(vr_shm_header_t, server_pid) == 80, "header.server_pid");
_Static_assert(offsetof(vr_shm_header_t, server_start_time) == 88, "header.server_start_time");
_Static_assert(offsetof(vr_shm_header_t, epoch) == 96, "header.epoch");
_Static_assert(offsetof(vr_shm_header_t, server_pidns) == 112, "header.server_pidns");
_Static_assert(offsetof(vr_shm_header_t, state) == 128, "header.state");
_Static_assert(offsetof(vr_shm_header_t, heartbeat_ns) == 136, "header.heartbeat_ns");
_Static_assert(offsetof(vr_shm_header_t, srv_seq) == 192, "header.srv_seq");
_Static_assert(offsetof(vr_shm_header_t, srv_waiters) == 196, "header.srv_waiters");
_Static_assert(sizeof(vr_shm_lane_t) == 256, "lane header is 256 bytes");
_Static_assert(offsetof(vr_shm_lane_t, client_start_time) == 8, "lane.client_start_time");
_Static_assert(offsetof(vr_shm_lane_t, req_head) == 64, "lane.req_head");
_Static_assert(offsetof(vr_shm_lane_t, resp_tail) == 68, "lane.resp_tail");
_Static_assert(offsetof(vr_shm_lane_t, cli_waiters) == 72, "lane.cli_waiters");
_Static_assert(offsetof(vr_shm_lane_t, req_tail) == 128, "lane.req_tail");
_Static_assert(offsetof(vr_shm_lane_t, resp_head) == 132, "lane.resp_head");
_Static_assert(offsetof(vr_shm_lane_t, cli_seq) == 136, "lane.cli_seq");
_Static_assert(offsetof(vr_shm_lane_t, reset_reason) == 140, "lane.reset_reason");
_Static_assert(sizeof(vr_shm_req_desc_t) == 64, "request descriptor is 64 bytes");
_Static_assert(offsetof(vr_shm_req_desc_t, payload_off) == 16, "req.payload_off");
_Static_assert(offsetof(vr_shm_req_desc_t, extras_bytes) == 24, "req.extras_bytes");
_Static_assert(offsetof(vr_shm_req_desc_t, result_off) == 32, "req.result_off");
_Static_assert(offsetof(vr_shm_req_desc_t, submit_ns) == 40, "req.submit_ns");
_Static_assert(sizeof(vr_shm_resp_desc_t) == 256, "response descriptor is 256 bytes");
_Static_assert(offsetof(vr_shm_resp_desc_t, status) == 8, "resp.status");
_Static_assert(offsetof(vr_shm_resp_desc_t, bad_seq) == 24, "resp.bad_seq");
_Static_assert(offsetof(vr_shm_resp_desc_t, flags) == 32, "resp.flags");
_Static_assert(offsetof(vr_shm_resp_desc_t, component_names) == 64, "resp.component_names");
_Static_assert(sizeof(_Atomic uint64_t) == 8 && sizeof(_Atomic uint32_t) == 4, "plain-sized atomics");
_Static_assert(VR_MAX_COMPONENTS == 8 && VR_COMPONENT_NAME_MAX == 24, "response descriptor assumes 8 x 24 names");


/* ===================================== 2. waiting and waking (both sides) */

/* One pause in a spin loop. */
#if defined(__x86_64__) || defined(__i386__)
#define VR_CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define VR_CPU_RELAX() __asm__ __volatile__("yield")
#else
#define VR_CPU_RELAX() ((void)0)
#endif

/* Futex doorbells: shared, not FUTEX_PRIVATE (the word is in a MAP_SHARED segment). */

/* Sleeps while *w == expected, at most timeout_ns (< 0: no bound). Returns
 * after a wake, a timeout, a signal or at once when *w != expected. */
static inline void vr_futex_wait(_Atomic uint32_t *w, uint32_t expected, int64_t timeout_ns) {
  struct timespec ts, *tp = NULL;
  if (timeout_ns >= 0) {
    ts.tv_sec = (time_t)(timeout_ns / 1000000000);
    ts.tv_nsec = (long)(timeout_ns % 1000000000);
    tp = &ts;
  }
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAIT, expected, tp, NULL, 0);
}

/* Wakes up to n sleepers on w. */
static inline void vr_futex_wake(_Atomic uint32_t *w, int n) {
  syscall(SYS_futex, (uint32_t *)w, FUTEX_WAKE, n, NULL, NULL, 0);
}

/* Rings a doorbell: bumps the word and wakes everyone, but only when the
 * waiters count says somebody sleeps (the caller published its data before;
 * the seq_cst fence orders that store before the waiters load, pairing with
 * the waiter's increment-then-recheck). */
static inline void vr_doorbell_ring(_Atomic uint32_t *seq, const _Atomic uint32_t *waiters) {
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(waiters, memory_order_relaxed) != 0) {
    atomic_fetch_add_explicit(seq, 1, memory_order_seq_cst);
    vr_futex_wake(seq, INT_MAX);
  }
}

/* ============================ 3. the segment (vr_proto: proto/vr_protocol.c) */

/* Rendezvous (v2). Nothing has a name in /dev/shm. The server's view of the
 * segment is the layout above, but each piece is its own sealed memfd:
 *   - the header page (lanes_offset bytes): sealed VR_SHM_SEALS_HEADER, so a
 *     client can map it read-only only (F_SEAL_FUTURE_WRITE);
 *   - the doorbell page (4096 bytes): word 0 is the server doorbell (the
 *     header's srv_seq is unused in v2); clients map it read-write;
 *   - one memfd per lane (lane_bytes), made fresh for each client that is
 *     given the lane: a client maps its own lane and nothing else.
 * Each can neither shrink nor grow, and no seal can be added or removed
 * (VR_SHM_SEALS_LANE). The name is a Unix-domain stream socket, plus an
 * info socket beside it (vr_shm_resolve): a plain NAME is DIR/NAME.sock in a
 * directory only the server can write (default VR_SHM_SOCK_DIR or
 * /run/user/UID/verl-reward), a name with a '/' is the socket's path, and
 * "@NAME" the abstract "\0verl-reward/NAME" (any local user can bind that
 * first). A path socket's server holds flock() on PATH.lock for its life.
 * A client connects, checks the peer's uid (SO_PEERCRED) against its own or
 * an expected uid, and reads one vr_shm_hello_t. The server checks the
 * client's uid/gid (SO_PEERCRED, SO_PEERGROUPS) against its policy and, when
 * it admits the client and is READY, gives it a free lane: the hello then
 * carries [header, doorbell, lane] as SCM_RIGHTS, with the lane's lease word
 * already written by the server. The info socket answers everyone with the
 * hello alone (epoch, state). The server closes each connection after the
 * hello. */
#define VR_SHM_HELLO_MAGIC 0x32485256u /* "VRH2" read as little-endian bytes */
#define VR_SHM_SOCK_PREFIX "verl-reward/"
#define VR_SHM_SOCK_INFO_SUFFIX "/info"  /* abstract form's info socket */
#define VR_SHM_SOCK_DIR "/run/verl-reward" /* default socket directory (see vr_shm_resolve) */
#define VR_SHM_SOCK_SUFFIX ".sock"        /* a plain NAME is DIR/NAME.sock */
#define VR_SHM_SOCK_INFO_EXT ".info"      /* path form: the info socket is PATH.info */
#define VR_SHM_SOCK_LOCK_EXT ".lock"      /* path form: PATH.lock, flock()ed by the live server */
#define VR_SHM_HELLO_NO_LANE 0xffffffffu
#define VR_SHM_BELL_BYTES 4096u
/* linux/fcntl.h values: F_SEAL_SEAL 1, F_SEAL_SHRINK 2, F_SEAL_GROW 4, F_SEAL_FUTURE_WRITE 16 */
#define VR_SHM_SEALS_LANE 0x0007u
#define VR_SHM_SEALS_HEADER 0x0017u

typedef struct vr_shm_hello {
  uint32_t magic;     /*  0 VR_SHM_HELLO_MAGIC */
  uint32_t version;   /*  4 VR_SHM_VERSION */
  int32_t status;     /*  8 0: fds attached; else why not (VR_ERR_PERM, VR_ERR_AGAIN: starting,
                             VR_ERR_SHUTTING_DOWN, VR_ERR_NO_LANE, VR_ERR_NOSPACE); 0 on the info socket */
  uint32_t lane;      /* 12 the lane given, VR_SHM_HELLO_NO_LANE if none */
  uint64_t epoch;     /* 16 the segment's epoch */
  uint32_t state;     /* 24 VR_SHM_ST_* when sent */
  uint32_t lane_cap;  /* 28 with VR_ERR_NO_LANE: the per-uid lane limit this client's uid reached
                             (--max-lanes-per-uid); else 0 */
} vr_shm_hello_t;
_Static_assert(sizeof(vr_shm_hello_t) == 32, "hello is 32 bytes");

/* Validates a name (--shm-name) and copies it into buf: "@NAME" (abstract, no '/'), a
 * socket path (has a '/', not ending in one, fits a sockaddr_un with ".lock"), or a plain
 * NAME of at most VR_SHM_NAME_MAX bytes. VR_ERR_INVAL (with why) otherwise. */
#define VR_SHM_NAME_MAX 64
int vr_shm_path(const char *name, char *buf, size_t n, char *why, size_t whyn);

/* Where a name's socket is. */
#define VR_SHM_ADDR_MAX 108
typedef struct vr_shm_addr {
  int abstract;                /* 1: "@NAME", the abstract socket "\0verl-reward/NAME" */
  char path[VR_SHM_ADDR_MAX];  /* the socket file (abstract: "@verl-reward/NAME", for messages) */
  char dir[VR_SHM_ADDR_MAX];   /* its directory ("" when abstract) */
  char alt[VR_SHM_ADDR_MAX];   /* client: the other default candidate, not picked ("" if none) */
} vr_shm_addr_t;

/* Resolves name (vr_shm_path's forms) to its socket. A plain NAME is socket_dir/NAME.sock
 * when socket_dir is given (not NULL or ""), else in the default directory of a server of
 * uid server_uid (< 0: this process's euid): VR_SHM_SOCK_DIR when that uid is root or owns
 * it, and /run/user/UID/verl-reward when /run/user/UID exists (uid not 0). for_server: the
 * first of those; a client: the first holding a socket file in a directory owned by that
 * uid, else the first holding one, else the first (alt: the other). VR_ERR_INVAL, or VR_ERR_NOT_FOUND when no default directory applies (why has a
 * HINT). No I/O beyond stat. */
int vr_shm_resolve(const char *name, const char *socket_dir, int64_t server_uid, int for_server, vr_shm_addr_t *a,
                   char *why, size_t whyn);

/* The socket address of a resolved name (info: its info socket, ".info" appended to
 * the path, "/info" to the abstract name); *len is the length to pass to bind/connect. */
struct sockaddr_un;
void vr_shm_sockaddr(const vr_shm_addr_t *a, int info, struct sockaddr_un *sa, unsigned *len);

/* Checks a header copy against the size of the header memfd: magic, version,
 * fixed sizes, geometry (lane_bytes and total recomputed, the header page
 * within the file, no overflow), limits. Returns 0 or VR_ERR_BAD_SEGMENT. */
int vr_shm_header_check(const vr_shm_header_t *h, uint64_t file_bytes, char *why, size_t whyn);

/* A client's view of an attached segment: the header (read-only), the
 * doorbell and its own lane. */
typedef struct vr_shm_map {
  void *base;                /* the header page, mapped read-only */
  size_t bytes;
  vr_shm_header_t hdr;       /* copy taken and checked at attach (trusted after the check) */
  const vr_shm_header_t *live; /* the shared header (state, heartbeat, srv_waiters) */
  _Atomic uint32_t *bell;    /* the server doorbell (word 0 of the doorbell page) */
  vr_shm_lane_t *lane;       /* this client's lane (lane_bytes, read-write) */
  uint32_t lane_idx;
} vr_shm_map_t;

/* Connects to name's socket, checks that the server runs as expected_uid
 * (< 0: this process's euid), receives header, doorbell and a lane, checks
 * their seals, owner, sizes and the header, and maps them. The lane is this
 * caller's until it sets the CLOSING bit of its lease word (or dies).
 * Errors: VR_ERR_NOT_FOUND (nobody listens on the name), VR_ERR_PERM (the
 * server runs as another uid, or refused this client), VR_ERR_AGAIN (server
 * still starting), VR_ERR_SHUTTING_DOWN, VR_ERR_NO_LANE, VR_ERR_NOSPACE,
 * VR_ERR_BAD_SEGMENT, VR_ERR_IO, VR_ERR_NOMEM. */
int vr_shm_attach(const char *name, const char *socket_dir, int64_t expected_uid, vr_shm_map_t *out, char *why,
                  size_t whyn);
void vr_shm_detach(vr_shm_map_t *m);

/* Inode of this process's pid namespace (/proc/self/ns/pid), 0 if unknown. */
uint64_t vr_shm_pidns(void);

/* Liveness of the server that wrote a header: 1 alive, 0 dead. In the
 * server's pid namespace: its (pid, start time) process exists. From another
 * pid namespace (pids not comparable): its heartbeat is younger than stale_ns. */
int vr_shm_server_alive(const vr_shm_header_t *live, int64_t stale_ns);

/* Asks name's info socket for the epoch of the segment served there now (by a
 * server of expected_uid, as vr_shm_attach; no lane is taken): 0 and *epoch
 * when a non-stopped server answers; otherwise an error. */
int vr_shm_peek_epoch(const char *name, const char *socket_dir, int64_t expected_uid, uint64_t *epoch);

#endif /* VERL_REWARD_PROTOCOL_H */
