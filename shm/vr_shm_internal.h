/* vr_shm_internal.h: pieces of the shm channel shared by the server (vr_shm.c),
 * the client library (client/) and tests: futex doorbells, segment
 * open/attach/check, descriptor validation. Not a public header. */
#ifndef VR_SHM_INTERNAL_H
#define VR_SHM_INTERNAL_H

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include "vr_shm_layout.h"

/* One pause in a spin loop. */
#if defined(__x86_64__) || defined(__i386__)
#define VR_CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define VR_CPU_RELAX() __asm__ __volatile__("yield")
#else
#define VR_CPU_RELAX() ((void)0)
#endif

/* ---- futex doorbells (shared, not FUTEX_PRIVATE: the word is in a MAP_SHARED segment) ---- */

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
static inline void vr_doorbell_ring(_Atomic uint32_t *seq, _Atomic uint32_t *waiters) {
  atomic_thread_fence(memory_order_seq_cst);
  if (atomic_load_explicit(waiters, memory_order_relaxed) != 0) {
    atomic_fetch_add_explicit(seq, 1, memory_order_seq_cst);
    vr_futex_wake(seq, INT_MAX);
  }
}

/* ---- segment ---- */

/* "/name" into buf; VR_ERR_INVAL (with why) for an empty name, one with '/',
 * or one longer than NAME_MAX. */
int vr_shm_path(const char *name, char *buf, size_t n, char *why, size_t whyn);

/* Checks a header copy against the file size: magic, version, fixed sizes,
 * geometry (lane_bytes recomputed, total within the file, no overflow),
 * limits. Returns 0 or VR_ERR_BAD_SEGMENT with why. */
int vr_shm_header_check(const vr_shm_header_t *h, uint64_t file_bytes, char *why, size_t whyn);

/* A client's view of an attached segment. */
typedef struct vr_shm_map {
  void *base;
  size_t bytes;
  vr_shm_header_t hdr;       /* copy taken and checked at attach (trusted after the check) */
  vr_shm_header_t *live;     /* the shared header (state, heartbeat, doorbell) */
} vr_shm_map_t;

/* Opens and maps /name read-write, checks owner (file uid = server uid in the
 * header; the server process, when visible, runs as that uid) and the header.
 * Errors: VR_ERR_NOT_FOUND, VR_ERR_PERM, VR_ERR_BAD_SEGMENT, VR_ERR_IO. */
int vr_shm_attach(const char *name, vr_shm_map_t *out, char *why, size_t whyn);
void vr_shm_detach(vr_shm_map_t *m);

/* Inode of this process's pid namespace (/proc/self/ns/pid), 0 if unknown. */
uint64_t vr_shm_pidns(void);

/* Liveness of the server that wrote a header: 1 alive, 0 dead. In the
 * server's pid namespace: its (pid, start time) process exists. From another
 * pid namespace (pids not comparable): its heartbeat is younger than stale_ns. */
int vr_shm_server_alive(const vr_shm_header_t *live, int64_t stale_ns);

/* Reads the epoch of the segment now registered under name: 0 and *epoch when
 * a valid segment of a live, non-stopped server is there; otherwise an error. */
int vr_shm_peek_epoch(const char *name, uint64_t *epoch);

/* ---- descriptor validation (the untrusted-input boundary) ---- */

typedef struct vr_shm_vlimits {
  uint32_t max_seqs_per_request;
  uint32_t max_seq_len;
  uint32_t vocab_size;           /* 0: no token range check */
  uint64_t arena_bytes;
} vr_shm_vlimits_t;

typedef enum vr_desc_verdict {
  VR_DESC_OK = 0,      /* accepted: out holds validated copies */
  VR_DESC_REJECT = 1,  /* well-formed descriptor, bad content: answer with out->status */
  VR_DESC_CORRUPT = 2, /* offsets/lengths outside the lane: reset the lane */
} vr_desc_verdict_t;

/* One accepted request: the descriptor copy plus the payload copied out of the
 * arena into buf (malloc'd; owned by the caller; the first `prefix` bytes of
 * buf are left for the caller's own record). */
typedef struct vr_shm_accepted {
  vr_shm_req_desc_t desc;
  void *buf;
  int32_t *token_ids;          /* n_tokens */
  uint32_t *cu_seqlens;        /* n_seqs + 1 */
  uint32_t *extras_off;        /* n_seqs + 1, NULL without extras */
  uint8_t *extras;             /* extras_bytes, NULL without extras */
  int32_t status;              /* REJECT: the error to answer with */
  int32_t bad_seq;             /* REJECT: first failing sequence or -1 */
} vr_shm_accepted_t;

/* Copies the descriptor at `slot` once, checks it, copies the payload out of
 * `arena` (arena_bytes readable), checks the copy. On VR_DESC_OK out->buf is
 * malloc'd (free() it); otherwise out->buf is NULL. why gets a message for
 * REJECT/CORRUPT. VR_DESC_REJECT with VR_ERR_NOMEM when malloc fails. */
vr_desc_verdict_t vr_shm_accept(const vr_shm_req_desc_t *slot, const uint8_t *arena,
                                const vr_shm_vlimits_t *lim, size_t prefix, vr_shm_accepted_t *out,
                                char *why, size_t whyn);

#endif /* VR_SHM_INTERNAL_H */
