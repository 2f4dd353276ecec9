/* vr_bench_transport.h: one bench client's connection to the server, over
 * shared memory (the client library, one lane per connection), HTTP + JSON or
 * HTTP + msgpack (POST /v1/score, one keep-alive connection per client).
 *
 * Threading: a vr_conn_t belongs to one client thread. */
#ifndef VR_BENCH_TRANSPORT_H
#define VR_BENCH_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "vr_bench_workload.h"

typedef enum vr_transport {
  VR_TR_SHM = 0,
  VR_TR_HTTP = 1,         /* application/json */
  VR_TR_HTTP_MSGPACK = 2, /* application/msgpack */
} vr_transport_t;

const char *vr_transport_name(vr_transport_t t);
/* "shm" | "http" | "http-msgpack"; 0 or VR_ERR_PARSE. */
int vr_transport_parse(const char *s, vr_transport_t *out);

typedef struct vr_target {
  char shm_name[128];
  char host[256];
  uint16_t port;          /* 0: no HTTP address known */
  int64_t timeout_us;     /* per request */
  int64_t connect_timeout_us;
  int64_t spin_us;        /* shm client busy-poll before parking; < 0: the library's default */
} vr_target_t;

/* What the server says about itself (shm limits or GET /v1/model). 0 = unknown. */
typedef struct vr_server_info {
  uint32_t vocab_size;
  uint32_t max_seq_len;
  uint32_t max_seqs_per_request;
} vr_server_info_t;

typedef struct vr_conn vr_conn_t;

/* Server timings of one request (from the response). */
typedef struct vr_score_timing {
  uint32_t queue_us;
  uint32_t compute_us;
} vr_score_timing_t;

/* 0 or a status (logged). For shm, leases a lane (connect waits up to
 * connect_timeout_us for the segment / a free lane). */
int vr_conn_open(vr_transport_t t, const vr_target_t *tg, vr_conn_t **out);
void vr_conn_close(vr_conn_t *c);

/* Scores r (n_seqs sequences) into scores[n_seqs]. Returns 0 or the error of
 * the request (transport failure, HTTP error status, server error code, or a
 * malformed response: VR_ERR_MALFORMED). The response is untrusted: a wrong
 * number of scores or a missing field is an error. */
int vr_conn_score(vr_conn_t *c, const vr_reqbuf_t *r, float *scores, vr_score_timing_t *timing);

/* Detail of the last error on this connection ("" if none). */
const char *vr_conn_last_error(const vr_conn_t *c);

/* Reads vocab_size etc. over the given transport. 0 or a status. */
int vr_conn_server_info(vr_conn_t *c, vr_server_info_t *out);

#endif
