/* verl_reward/client.h: the trainer-side client of verl-reward-server.
 *
 * A client attaches to the server's shared-memory segment by name, leases one
 * lane (its own request ring, response ring and payload arena) and scores
 * batches of token-id sequences. Link libverl_reward_client (.so or .a).
 *
 *   vr_client_t *c;
 *   vr_client_options_t o; vr_client_options_init(&o);
 *   if (vr_client_connect("verl_reward_shm", &o, &c) != 0) ...
 *   uint32_t cu[3] = {0, 3, 5}; int32_t ids[5] = {1, 2, 3, 4, 5};
 *   vr_batch_t b = {.n_seqs = 2, .token_ids = ids, .cu_seqlens = cu};
 *   float scores[2];
 *   int rc = vr_client_score(c, &b, scores, NULL, NULL);
 *   vr_client_close(c);
 *
 * Thread-safety: every function taking a vr_client_t is thread-safe (an
 * internal mutex serialises lane access; waits block without holding it), so
 * several threads may submit and wait on one client. Errors are negative
 * vr_status_t codes (status.h); vr_client_last_error() gives the detail. */
#ifndef VERL_REWARD_CLIENT_H
#define VERL_REWARD_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "verl_reward/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define VR_MAX_COMPONENTS 8        /* reward components per response (model + rules) */
#define VR_COMPONENT_NAME_MAX 24   /* including the terminating NUL */

typedef struct vr_client vr_client_t;

typedef struct vr_client_options {
  int64_t timeout_us;      /* default wait bound for vr_client_score; <= 0: 30 s */
  int64_t connect_timeout_us; /* how long connect waits for the segment / a free lane; 0: fail at once */
  uint32_t spin_us;        /* busy-poll budget before parking on the futex; default 50 */
  int64_t expected_server_uid; /* the uid the server must run as (checked with SO_PEERCRED at
                                  connect); -1 (default): this process's euid */
  const char *socket_dir;  /* where a plain name's socket is (the server's --shm-socket-dir);
                              NULL (default): the default directory (docs/protocol.md,
                              "Where the name resolves"); copied at connect */
} vr_client_options_t;

/* Fills defaults. */
void vr_client_options_init(vr_client_options_t *opt);

/* A batch: sequence i is token_ids[cu_seqlens[i] .. cu_seqlens[i+1]).
 * extras (optional, NULL = none): per-sequence opaque blobs (a msgpack map with
 * data_source / solution_str / ground_truth / extra_info for rule rewards);
 * extras[i] may be NULL with extras_len[i] = 0. The client copies everything
 * into its lane; the caller keeps ownership and may reuse buffers on return. */
typedef struct vr_batch {
  uint32_t n_seqs;
  const int32_t *token_ids;
  const uint32_t *cu_seqlens;          /* n_seqs + 1 entries, cu_seqlens[0] = 0 */
  const uint8_t *const *extras;
  const uint32_t *extras_len;
} vr_batch_t;

/* What the server reported beside the scores. */
typedef struct vr_request_info {
  int32_t status;           /* 0 or the request's error */
  uint32_t n_seqs;
  uint32_t queue_us;        /* server: accepted -> batch start */
  uint32_t compute_us;      /* server: batch compute time */
  int32_t bad_seq;          /* index of the first sequence that failed validation, -1 if none */
  uint32_t n_components;    /* reward components (e.g. "model", "gsm8k"); 0 if only a total */
  char component_names[VR_MAX_COMPONENTS][VR_COMPONENT_NAME_MAX];
} vr_request_info_t;

/* Limits the server published in the segment (a request beyond them fails
 * with VR_ERR_TOO_LARGE / VR_ERR_SEQ_TOO_LONG before anything is sent). */
typedef struct vr_limits {
  uint32_t max_seq_len;
  uint32_t max_seqs_per_request;
  uint64_t arena_bytes;       /* payload arena of one lane */
  uint32_t max_inflight;      /* request ring slots of one lane */
  uint32_t vocab_size;        /* 0 when the server runs without a model */
  uint32_t n_lanes;
} vr_limits_t;

/* Attaches to the server named `shm_name` ("verl_reward_shm" by default when
 * NULL: a plain name is the socket NAME.sock in opt.socket_dir or the default
 * directory; a name with a '/' is the socket's path; "@NAME" the abstract
 * socket) and leases a lane. Connects to the
 * server's socket, refuses a server that does not run as
 * opt.expected_server_uid (default: our own euid), receives its sealed
 * segment and checks magic, version, layout and that the server is alive and
 * ready. On success *out owns the lane until vr_client_close(). Errors:
 * VR_ERR_NOT_FOUND (no server on the name), VR_ERR_PERM (a server of another
 * uid, or one that does not let this uid in),
 * VR_ERR_BAD_SEGMENT, VR_ERR_SERVER_GONE, VR_ERR_NO_LANE, VR_ERR_TIMEOUT. */
int vr_client_connect(const char *shm_name, const vr_client_options_t *opt, vr_client_t **out);

/* Releases the lane and unmaps; requests still in flight are abandoned (the
 * server drops their responses). NULL is a no-op. Not to be called while
 * another thread is still using the client. */
void vr_client_close(vr_client_t *c);

int vr_client_limits(vr_client_t *c, vr_limits_t *out);

/* Synchronous score: submit + wait with opt.timeout_us. scores: n_seqs floats
 * (caller-owned). components (optional): n_seqs * VR_MAX_COMPONENTS floats,
 * row i holds sequence i's components in info->component_names order.
 * info (optional). Returns 0 or the request's error. */
int vr_client_score(vr_client_t *c, const vr_batch_t *batch, float *scores, float *components,
                    vr_request_info_t *info);

/* Asynchronous: copies the batch into the lane and publishes it; *req_id names
 * it for poll / wait. VR_ERR_BUSY when the lane's ring or arena is full (wait
 * for earlier requests first); VR_ERR_TOO_LARGE when it can never fit. */
int vr_client_submit(vr_client_t *c, const vr_batch_t *batch, uint64_t *req_id);

/* 1 when the response is there, 0 when still pending, negative on error
 * (server gone, unknown id). Never blocks. */
int vr_client_poll(vr_client_t *c, uint64_t req_id);

/* Waits up to timeout_us (<0: forever, 0: poll once) for req_id, then copies
 * its result out (same buffers as vr_client_score) and forgets the id.
 * VR_ERR_TIMEOUT leaves the request pending (wait again later). */
int vr_client_wait(vr_client_t *c, uint64_t req_id, int64_t timeout_us, float *scores,
                   float *components, vr_request_info_t *info);

/* The calling thread's last error detail for this library ("" if none). */
const char *vr_client_last_error(void);

#ifdef __cplusplus
}
#endif
#endif /* VERL_REWARD_CLIENT_H */
