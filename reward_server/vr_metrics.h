/* vr_metrics.h: server counters and histograms, rendered as Prometheus text.
 *
 * Names follow the Prometheus conventions: ours start with verl_reward_, the
 * process_* collectors are the ones the client libraries export on Linux,
 * base units (seconds, bytes), counters end in _total, every family has HELP
 * and TYPE lines. docs/operations.md ("Metrics") lists every family; the
 * Grafana dashboard docs/grafana/verl-reward.json uses only those names.
 *
 * Every update is a relaxed atomic add: any thread may record (the dispatcher,
 * the batcher, the HTTP thread). Rendering reads the counters without a lock,
 * so one scrape may see a request counted in requests_total but not yet in
 * the latency histogram; each counter on its own is monotonic, and within one
 * histogram the +Inf bucket and _count come from the same reads. */
#ifndef VR_METRICS_H
#define VR_METRICS_H

#include <stddef.h>
#include <stdint.h>

typedef enum vr_transport { VR_TRANSPORT_SHM = 0, VR_TRANSPORT_HTTP = 1, VR_TRANSPORT_N = 2 } vr_transport_t;

#define VR_METRICS_STATUS_SLOTS 64  /* status codes 0 .. -63 (the table has fewer) */
#define VR_METRICS_MAX_COMPONENTS 8
#define VR_METRICS_MAX_BUCKETS 24
#define VR_METRICS_REASONS 16
#define VR_METRICS_HTTP_CODE_MIN 100 /* HTTP status codes counted: 100 .. 599 */
#define VR_METRICS_HTTP_CODES 500
#define VR_METRICS_MAX_REPLICAS 16 /* = VR_SETTINGS_MAX_REPLICAS (vr_server.c asserts it) */

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
  uint64_t http_codes[VR_METRICS_HTTP_CODES]; /* responses by status code, [code - 100] */
  vr_histogram_t latency[VR_TRANSPORT_N]; /* seconds: accepted -> answered */
  vr_histogram_t queue_wait[VR_TRANSPORT_N]; /* seconds: accepted -> its batch starts (queue_us) */
  vr_histogram_t batch_seqs;
  vr_histogram_t batch_tokens;
  vr_histogram_t compute;                 /* seconds per batch forward */
  uint64_t batches;
  uint32_t n_components;
  char component_names[VR_METRICS_MAX_COMPONENTS][32];
  uint64_t component_scored[VR_METRICS_MAX_COMPONENTS];
  uint64_t component_reason[VR_METRICS_MAX_COMPONENTS][VR_METRICS_REASONS];
  const char *(*reason_name)(int reason); /* labels reasons; NULL: numbers */
  char info_device[32];                   /* verl_reward_build_info labels (vr_metrics_set_info) */
  char info_model[64];
  /* per model replica (--device list entry r; labels replica="r", device="cuda:0") */
  uint32_t n_replicas;                    /* set by vr_metrics_set_replicas; 0: none rendered */
  char replica_device[VR_METRICS_MAX_REPLICAS][16];
  uint64_t replica_batches[VR_METRICS_MAX_REPLICAS];
  uint64_t replica_sequences[VR_METRICS_MAX_REPLICAS];
  uint64_t replica_tokens[VR_METRICS_MAX_REPLICAS];
  uint64_t replica_busy_ns[VR_METRICS_MAX_REPLICAS]; /* time with at least one batch outstanding */
  uint64_t replica_inflight[VR_METRICS_MAX_REPLICAS]; /* gauge: batches outstanding now */
} vr_metrics_t;

/* The process_* collectors, read from /proc/self (Linux). */
typedef struct vr_process_stats {
  double cpu_seconds;       /* utime + stime */
  uint64_t resident_bytes;  /* rss pages * page size */
  uint64_t virtual_bytes;   /* vsize */
  double start_time_s;      /* Unix time: /proc/stat btime + starttime ticks */
  uint64_t open_fds;        /* entries of /proc/self/fd (without the one that lists them) */
  uint64_t max_fds;         /* RLIMIT_NOFILE soft limit */
} vr_process_stats_t;

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
  uint64_t replica_device_bytes[VR_METRICS_MAX_REPLICAS]; /* each replica's model (n_replicas of m) */
  int ready;
  int draining;
  int have_process;         /* 0: /proc unreadable, the process_* families are left out */
  vr_process_stats_t process;
} vr_metrics_gauges_t;

/* Zeroes m and sets the buckets; component names (n <= 8) label per-component counters.
 * Bucket upper bounds (docs/operations.md repeats them):
 *   seconds (request latency, queue wait, batch compute): 50us 100us 250us 500us 1ms 2.5ms 5ms
 *     10ms 25ms 50ms 100ms 250ms 500ms 1s 2.5s 5s 10s 30s;
 *   sequences per batch: 1 2 4 ... 4096; tokens per batch: 16 64 256 1024 2048 ... 131072. */
void vr_metrics_init(vr_metrics_t *m, uint32_t n_components, const char *const *component_names,
                     const char *(*reason_name)(int reason));

/* The device ("cpu", "cuda:0", "none") and model (its architecture, "checksum",
 * "none") labels of verl_reward_build_info; version and commit come from the
 * build (vr_build_info.h). Call before any thread renders (not thread-safe);
 * NULL or "" reads "none". Longer strings are cut to the field size. */
void vr_metrics_set_info(vr_metrics_t *m, const char *device, const char *model);

/* The replicas' devices (n <= VR_METRICS_MAX_REPLICAS; "cpu", "cuda:0", ...). Call before any
 * thread renders (not thread-safe). */
void vr_metrics_set_replicas(vr_metrics_t *m, uint32_t n, const char (*devices)[16]);
/* Replica r ran a batch of n_seqs sequences / n_tokens tokens; its outstanding batches are now
 * inflight; busy_ns is added to its busy time (0 unless it just went idle). Any thread. */
void vr_metrics_replica_batch(vr_metrics_t *m, uint32_t r, uint32_t n_seqs, uint64_t n_tokens);
void vr_metrics_replica_state(vr_metrics_t *m, uint32_t r, uint32_t inflight, uint64_t busy_ns);

/* One answered request: status 0 or a negative vr_status_t. */
void vr_metrics_request(vr_metrics_t *m, vr_transport_t t, int status, uint32_t n_seqs, uint64_t n_tokens,
                        double latency_s);
/* One HTTP response sent by our handlers, by its status code (100 .. 599; others are dropped). */
void vr_metrics_http_response(vr_metrics_t *m, int http_code);
/* One request's queue wait: accepted -> its batch was packed (the queue_us it is answered with). */
void vr_metrics_queue_wait(vr_metrics_t *m, vr_transport_t t, double wait_s);
void vr_metrics_batch(vr_metrics_t *m, uint32_t n_seqs, uint64_t n_tokens, double compute_s);
/* One sequence scored by component c with a reason code (vr_reason_t, 0 for the model). */
void vr_metrics_component(vr_metrics_t *m, uint32_t c, int reason);

/* Renders the Prometheus text exposition (format 0.0.4). Returns a malloc'd
 * NUL-terminated string (caller frees) or NULL on allocation failure. */
char *vr_metrics_render(const vr_metrics_t *m, const vr_metrics_gauges_t *g, size_t *len);

/* Resident set size of this process in bytes (from /proc/self/statm), 0 if unknown. */
uint64_t vr_metrics_rss_bytes(void);

/* Samples the process_* collectors of this process. 0, or -1 when /proc/self
 * or /proc/stat cannot be read (*ps then unspecified). Thread-safe. */
int vr_metrics_process_stats(vr_process_stats_t *ps);

#endif /* VR_METRICS_H */
