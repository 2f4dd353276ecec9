/* vr_shm.h: server side of the shared-memory channel (used by reward_server).
 *
 * The server creates the segment, polls validated requests from all lanes and
 * completes them. Everything read from the segment is copied and checked here;
 * what poll returns is safe to use (token ids are copied out of the arena into
 * the request's own buffer owned by the server handle until completion).
 * Threading: create/destroy/set_state from one thread; poll and complete may be
 * called from different threads (poll from the dispatcher, complete from the
 * batcher); a background liveness thread reclaims lanes of dead clients. */
#ifndef VR_SHM_H
#define VR_SHM_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "verl_reward/client.h"
#include "verl_reward/protocol.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vr_shm_server vr_shm_server_t;

typedef enum vr_shm_state {
  VR_SHM_STARTING = 0,
  VR_SHM_READY = 1,
  VR_SHM_DRAINING = 2,
  VR_SHM_STOPPED = 3,
} vr_shm_state_t;
/* the header's state word carries these values (include/verl_reward/protocol.h) */
_Static_assert(VR_SHM_STARTING == VR_SHM_ST_STARTING && VR_SHM_READY == VR_SHM_ST_READY &&
                   VR_SHM_DRAINING == VR_SHM_ST_DRAINING && VR_SHM_STOPPED == VR_SHM_ST_STOPPED,
               "vr_shm_state_t must equal the protocol's VR_SHM_ST_* values");

#define VR_SHM_MAX_ALLOW 32

typedef struct vr_shm_config {
  const char *name;              /* the name (vr_shm_path's forms: NAME, @NAME, or a socket path) */
  const char *socket_dir;        /* where a plain NAME's socket goes (NULL: the default directory,
                                    vr_shm_resolve); made 0755 if missing */
  uint32_t n_lanes;              /* default 32 */
  uint32_t mode;                 /* who may attach, as file modes read: 0600 (default) the server's
                                    uid; group bits: also its group; other bits: everyone */
  const uint32_t *allow_uids;    /* further uids let in (copied at create), n_allow_uids <= VR_SHM_MAX_ALLOW */
  uint32_t n_allow_uids;
  const uint32_t *allow_gids;    /* further gids (a client's primary or supplementary group) */
  uint32_t n_allow_gids;
  uint32_t max_lanes_per_uid;    /* lanes one uid may hold at once; 0 (default): n_lanes when only
                                    the server's uid may attach (mode 0600, no allow lists), else
                                    half of n_lanes, rounded up */
  uint32_t ring_slots;           /* requests in flight per lane, power of two; default 64 */
  uint64_t arena_bytes;          /* payload arena per lane; default 4 MiB */
  uint32_t max_seq_len;          /* default 8192 */
  uint32_t max_seqs_per_request; /* default 1024 */
  uint32_t vocab_size;           /* published to clients; 0 = no model */
  uint32_t spin_us;              /* server-side spin before parking; default 50 */
  uint32_t log_burst;            /* lane-reset WARN lines per log window; default 10 */
  uint64_t log_window_ns;        /* their window (then one "suppressed K" line); default 10 s */
} vr_shm_config_t;

void vr_shm_config_init(vr_shm_config_t *cfg);

/* One validated request. Memory (tokens, cu_seqlens, extras) belongs to the
 * server handle and stays valid until vr_shm_server_complete() for it. */
typedef struct vr_shm_request {
  uint64_t handle;               /* opaque: lane, slot, lease generation */
  uint32_t lane;
  uint32_t n_seqs;
  uint32_t n_tokens;
  const int32_t *token_ids;      /* n_tokens, copied out of the lane */
  const uint32_t *cu_seqlens;    /* n_seqs + 1 */
  const uint8_t *extras;         /* concatenated extras blobs, NULL if none */
  const uint32_t *extras_off;    /* n_seqs + 1 offsets into extras, NULL if none */
  uint64_t accepted_ns;          /* vr_now_ns() when the server took it */
} vr_shm_request_t;

/* Creates the segment as sealed memfds and listens on the name's socket
 * (protocol.h section 3: DIR/NAME.sock, a socket path, or the abstract @NAME),
 * where a liveness thread hands the memfds to each allowed client.
 * VR_ERR_EXISTS when a live process holds the name (logged with its pid and
 * uid; a dead server's socket file is replaced); VR_ERR_PERM when the socket
 * directory is not the server's own or cannot be made; VR_ERR_NOT_FOUND when a
 * plain NAME has no default directory; VR_ERR_NOSPACE when the memory cannot
 * be allocated. Each with a HINT in the log. The segment starts in
 * VR_SHM_STARTING. */
int vr_shm_server_create(const vr_shm_config_t *cfg, vr_shm_server_t **out);

/* Publishes the state (clients refuse to connect unless READY; DRAINING makes
 * new submissions fail with VR_ERR_SHUTTING_DOWN). */
void vr_shm_server_set_state(vr_shm_server_t *s, vr_shm_state_t st);

/* Collects up to max validated requests across lanes, waiting up to wait_us
 * (spin, then futex) when none is there. Returns the count (0 on timeout).
 * Malformed lanes are reset and logged, never returned. */
int vr_shm_server_poll(vr_shm_server_t *s, vr_shm_request_t *reqs, int max, int64_t wait_us);

/* Answers a request: status 0 with n_seqs scores, or an error (scores may be
 * NULL). components: n_seqs * n_components floats (row per sequence), may be
 * NULL with n_components 0. seq_status (optional) marks bad sequences. If the
 * client died meanwhile, the answer is dropped and its space reclaimed. */
int vr_shm_server_complete(vr_shm_server_t *s, const vr_shm_request_t *req, int status,
                           const float *scores, const int32_t *seq_status,
                           uint32_t n_components, const char (*component_names)[VR_COMPONENT_NAME_MAX],
                           const float *components, uint32_t queue_us, uint32_t compute_us);

/* Wakes a poll() blocked in futex wait (used at shutdown). */
void vr_shm_server_wake(vr_shm_server_t *s);

/* Lanes currently leased, requests accepted but not completed. Thread-safe. */
uint32_t vr_shm_server_lanes_in_use(const vr_shm_server_t *s);
uint32_t vr_shm_server_inflight(const vr_shm_server_t *s);

/* The server's own mapping of lane i (NULL if out of range): for tests and
 * diagnostics in the server's process, which see there what the lane's client
 * wrote. Clients never see other lanes. */
vr_shm_lane_t *vr_shm_server_lane(vr_shm_server_t *s, uint32_t i);

/* Closes the socket and removes its files (the name is free again), sets state STOPPED, answers
 * anything not completed with VR_ERR_SHUTTING_DOWN and frees the handle
 * (clients keep their mapping until they detach). NULL is a no-op. */
void vr_shm_server_destroy(vr_shm_server_t *s);

#ifdef __cplusplus
}
#endif
#endif /* VR_SHM_H */
