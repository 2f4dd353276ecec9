/* vr_metrics.h: server counters and histograms, rendered as Prometheus text.
 *
 * Every update is a relaxed atomic add: any thread may record (the dispatcher,
 * the batcher, the HTTP thread). Rendering reads the counters without a lock,
 * so one scrape may see a request counted in requests_total but not yet in
 * the latency histogram; each counter on its own is monotonic. */
#ifndef VR_METRICS_H
#define VR_METRICS_H

#include <stddef.h>
#include <stdint.h>

typedef enum vr_transport { VR_TRANSPORT_SHM = 0, VR_TRANSPORT_HTTP = 1, VR_TRANSPORT_N = 2 } vr_transport_t;

#define VR_METRICS_STATUS_SLOTS 64  /* status codes 0 .. -63 (the table has fewer) */
#define VR_METRICS_MAX_COMPONENTS 8
#define VR_METRICS_MAX_BUCKETS 24
#define VR_METRICS_REASONS 16

typedef struct vr_histogram {
  int n_bounds;
  double bounds[VR_METRICS_MAX_BUCKETS]; /* upper bounds, ascending; +Inf implied */
  uint64_t counts[VR_METRICS_MAX_BUCKETS + 1];
  uint64_t count;
  double sum; /* updated with a CAS loop */
} vr_histogram_t;

typedef struct vr_metrics {
  uint64_t requests[VR_TRANSPORT_N][VR_METRICS_STATUS_SLOTS];
  uint64_t sequences[VR_TRANSPORT_N][VR_METRICS_STATUS_SLOTS];
  uint64_t tokens[VR_TRANSPORT_N];
  uint64_t http_responses[6]; /* by class: 1xx..5xx at [1..5] */
  vr_histogram_t latency[VR_TRANSPORT_N]; /* seconds: accepted -> answered */
  vr_histogram_t batch_seqs;
  vr_histogram_t batch_tokens;
  vr_histogram_t compute;                 /* seconds per batch forward */
  uint64_t batches;
  uint32_t n_components;
  char component_names[VR_METRICS_MAX_COMPONENTS][32];
  uint64_t component_scored[VR_METRICS_MAX_COMPONENTS];
  uint64_t component_reason[VR_METRICS_MAX_COMPONENTS][VR_METRICS_REASONS];
  const char *(*reason_name)(int reason); /* labels reasons; NULL: numbers */
} vr_metrics_t;

/* Point-in-time values the server samples at render time. */
typedef struct vr_metrics_gauges {
  uint32_t queue_depth;
  uint32_t queue_capacity;
  uint32_t lanes_in_use;
  uint32_t lanes_total;
  uint32_t shm_inflight;
  uint32_t http_inflight;
  uint64_t device_bytes;
  uint64_t host_bytes;
  uint64_t rss_bytes;
  int ready;
  int draining;
  double uptime_s;
} vr_metrics_gauges_t;

/* Zeroes m and sets the buckets; component names (n <= 8) label per-component counters. */
void vr_metrics_init(vr_metrics_t *m, uint32_t n_components, const char *const *component_names,
                     const char *(*reason_name)(int reason));

/* One answered request: status 0 or a negative vr_status_t. */
void vr_metrics_request(vr_metrics_t *m, vr_transport_t t, int status, uint32_t n_seqs, uint64_t n_tokens,
                        double latency_s);
void vr_metrics_http_response(vr_metrics_t *m, int http_code);
void vr_metrics_batch(vr_metrics_t *m, uint32_t n_seqs, uint64_t n_tokens, double compute_s);
/* One sequence scored by component c with a reason code (vr_reason_t, 0 for the model). */
void vr_metrics_component(vr_metrics_t *m, uint32_t c, int reason);

/* Renders the Prometheus text exposition (format 0.0.4). Returns a malloc'd
 * NUL-terminated string (caller frees) or NULL on allocation failure. */
char *vr_metrics_render(const vr_metrics_t *m, const vr_metrics_gauges_t *g, size_t *len);

/* Resident set size of this process in bytes (from /proc/self/statm), 0 if unknown. */
uint64_t vr_metrics_rss_bytes(void);

#endif /* VR_METRICS_H */
