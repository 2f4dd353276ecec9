/* vr_metrics.c: atomic counters, fixed-bucket histograms, Prometheus rendering. */
#define _GNU_SOURCE
#include "vr_metrics.h"

#include <ctype.h>
#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "verl_reward/status.h"
#include "vr_build_info.h"
#include "vr_proc.h"

static const char *const k_transport[VR_TRANSPORT_N] = {"shm", "http"};

static void add_u64(uint64_t *p, uint64_t v) { __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
static uint64_t get_u64(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }

static void add_f64(double *p, double v) {
  double old, nv;
  __atomic_load(p, &old, __ATOMIC_RELAXED);
  do {
    nv = old + v;
  } while (!__atomic_compare_exchange(p, &old, &nv, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}

static void hist_init(vr_histogram_t *h, const double *bounds, int n) {
  memset(h, 0, sizeof *h);
  h->n_bounds = n;
  memcpy(h->bounds, bounds, (size_t)n * sizeof *bounds);
}

static void hist_observe(vr_histogram_t *h, double v) {
  int i = 0;
  while (i < h->n_bounds && v > h->bounds[i]) i++;
  add_u64(&h->counts[i], 1); /* counts are per bucket; rendering accumulates */
  add_u64(&h->count, 1);
  add_f64(&h->sum, v);
}

void vr_metrics_init(vr_metrics_t *m, uint32_t n_components, const char *const *component_names,
                     const char *(*reason_name)(int reason)) {
  memset(m, 0, sizeof *m);
  static const double lat[] = {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3,
                               50e-3, 100e-3, 250e-3, 500e-3, 1, 2.5, 5, 10, 30};
  static const double seqs[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
  static const double toks[] = {16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072};
  int nlat = (int)(sizeof lat / sizeof lat[0]);
  for (int t = 0; t < VR_TRANSPORT_N; t++) {
    hist_init(&m->latency[t], lat, nlat);
    hist_init(&m->queue_wait[t], lat, nlat);
  }
  hist_init(&m->compute, lat, nlat);
  hist_init(&m->batch_seqs, seqs, (int)(sizeof seqs / sizeof seqs[0]));
  hist_init(&m->batch_tokens, toks, (int)(sizeof toks / sizeof toks[0]));
  if (n_components > VR_METRICS_MAX_COMPONENTS) n_components = VR_METRICS_MAX_COMPONENTS;
  m->n_components = n_components;
  for (uint32_t c = 0; c < n_components; c++)
    snprintf(m->component_names[c], sizeof m->component_names[c], "%s", component_names[c]);
  m->reason_name = reason_name;
  vr_metrics_set_info(m, NULL, NULL);
}

void vr_metrics_set_info(vr_metrics_t *m, const char *device, const char *model) {
  snprintf(m->info_device, sizeof m->info_device, "%s", device && *device ? device : "none");
  snprintf(m->info_model, sizeof m->info_model, "%s", model && *model ? model : "none");
}

static int status_slot(int status) {
  int s = -status;
  if (s < 0 || s >= VR_METRICS_STATUS_SLOTS) s = VR_METRICS_STATUS_SLOTS - 1;
  return s;
}

void vr_metrics_request(vr_metrics_t *m, vr_transport_t t, int status, uint32_t n_seqs, uint64_t n_tokens,
                        double latency_s) {
  int s = status_slot(status);
  add_u64(&m->requests[t][s], 1);
  add_u64(&m->sequences[t][s], n_seqs);
  add_u64(&m->tokens[t], n_tokens);
  hist_observe(&m->latency[t], latency_s);
}

void vr_metrics_http_response(vr_metrics_t *m, int code) {
  int i = code - VR_METRICS_HTTP_CODE_MIN;
  if (i >= 0 && i < VR_METRICS_HTTP_CODES) add_u64(&m->http_codes[i], 1);
}

void vr_metrics_queue_wait(vr_metrics_t *m, vr_transport_t t, double wait_s) {
  hist_observe(&m->queue_wait[t], wait_s);
}

void vr_metrics_batch(vr_metrics_t *m, uint32_t n_seqs, uint64_t n_tokens, double compute_s) {
  add_u64(&m->batches, 1);
  hist_observe(&m->batch_seqs, n_seqs);
  hist_observe(&m->batch_tokens, (double)n_tokens);
  hist_observe(&m->compute, compute_s);
}

void vr_metrics_set_replicas(vr_metrics_t *m, uint32_t n, const char (*devices)[16]) {
  if (n > VR_METRICS_MAX_REPLICAS) n = VR_METRICS_MAX_REPLICAS;
  for (uint32_t r = 0; r < n; r++) snprintf(m->replica_device[r], sizeof m->replica_device[r], "%s", devices[r]);
  m->n_replicas = n;
}

void vr_metrics_replica_batch(vr_metrics_t *m, uint32_t r, uint32_t n_seqs, uint64_t n_tokens) {
  if (r >= VR_METRICS_MAX_REPLICAS) return;
  add_u64(&m->replica_batches[r], 1);
  add_u64(&m->replica_sequences[r], n_seqs);
  add_u64(&m->replica_tokens[r], n_tokens);
}

void vr_metrics_replica_state(vr_metrics_t *m, uint32_t r, uint32_t inflight, uint64_t busy_ns) {
  if (r >= VR_METRICS_MAX_REPLICAS) return;
  __atomic_store_n(&m->replica_inflight[r], inflight, __ATOMIC_RELAXED);
  if (busy_ns) add_u64(&m->replica_busy_ns[r], busy_ns);
}

void vr_metrics_component(vr_metrics_t *m, uint32_t c, int reason) {
  if (c >= m->n_components) return;
  add_u64(&m->component_scored[c], 1);
  if (reason < 0 || reason >= VR_METRICS_REASONS) reason = VR_METRICS_REASONS - 1;
  add_u64(&m->component_reason[c][reason], 1);
}

uint64_t vr_metrics_rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, rss = 0;
  int n = fscanf(f, "%llu %llu", &size, &rss);
  fclose(f);
  return n == 2 ? rss * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

/* Boot time (Unix seconds) from the btime line of /proc/stat; 0 if unknown. */
static uint64_t boot_time_s(void) {
  FILE *f = fopen("/proc/stat", "r");
  if (!f) return 0;
  char line[256];
  unsigned long long bt = 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "btime %llu", &bt) == 1) break;
  fclose(f);
  return bt;
}

int vr_metrics_process_stats(vr_process_stats_t *ps) {
  memset(ps, 0, sizeof *ps);
  vr_proc_stat_t st;
  long tck = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
  uint64_t boot = boot_time_s();
  if (vr_proc_stat(getpid(), &st) != 0 || tck <= 0 || page <= 0 || !boot) return -1;
  ps->cpu_seconds = (double)(st.utime + st.stime) / (double)tck;
  ps->resident_bytes = st.rss_pages * (uint64_t)page;
  ps->virtual_bytes = st.vsize;
  ps->start_time_s = (double)boot + (double)st.start_time / (double)tck;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return -1;
  const struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d)) ps->open_fds++;
  closedir(d);
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0) ps->max_fds = rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : rl.rlim_cur;
  return 0;
}

/* ---- text builder ---- */

typedef struct buf {
  char *p;
  size_t len, cap;
  int oom;
} buf_t;

__attribute__((format(printf, 2, 3))) static void out(buf_t *b, const char *fmt, ...) {
  if (b->oom) return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->oom = 1;
      return;
    }
    if ((size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    size_t ncap = b->cap * 2 + (size_t)n;
    char *np = realloc(b->p, ncap);
    if (!np) {
      b->oom = 1;
      return;
    }
    b->p = np;
    b->cap = ncap;
  }
}

/* A label value as the text format wants it: backslash, quote and newline escaped. */
static void out_label_value(buf_t *b, const char *v) {
  out(b, "\"");
  for (; *v; v++) {
    if (*v == '\\') out(b, "\\\\");
    else if (*v == '"') out(b, "\\\"");
    else if (*v == '\n') out(b, "\\n");
    else out(b, "%c", *v);
  }
  out(b, "\"");
}

/* "VR_ERR_SHUTTING_DOWN" -> "shutting_down"; 0 -> "ok". */
static void status_label(int slot, char *dst, size_t n) {
  if (slot == 0) {
    snprintf(dst, n, "ok");
    return;
  }
  const char *name = vr_status_name(-slot);
  if (strncmp(name, "VR_ERR_", 7) == 0) name += 7;
  size_t i = 0;
  for (; name[i] && i + 1 < n; i++) dst[i] = (char)tolower((unsigned char)name[i]);
  dst[i] = 0;
  if (slot == VR_METRICS_STATUS_SLOTS - 1 || strcmp(dst, "unknown status") == 0) snprintf(dst, n, "other");
}

/* One counter family by transport x status: "ok" always, an error once seen. */
static void by_status(buf_t *b, const char *name, const char *help,
                      const uint64_t (*v)[VR_METRICS_STATUS_SLOTS]) {
  char lab[64];
  out(b, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
  for (int t = 0; t < VR_TRANSPORT_N; t++)
    for (int s = 0; s < VR_METRICS_STATUS_SLOTS; s++) {
      uint64_t x = get_u64(&v[t][s]);
      if (!x && s != 0) continue;
      status_label(s, lab, sizeof lab);
      out(b, "%s{transport=\"%s\",status=\"%s\"} %llu\n", name, k_transport[t], lab, (unsigned long long)x);
    }
}

static void hist_render(buf_t *b, const char *name, const char *labels, const vr_histogram_t *h) {
  uint64_t cum = 0;
  const char *sep = *labels ? "," : "";
  for (int i = 0; i <= h->n_bounds; i++) {
    cum += get_u64(&h->counts[i]);
    if (i < h->n_bounds)
      out(b, "%s_bucket{%s%sle=\"%.6g\"} %llu\n", name, labels, sep, h->bounds[i], (unsigned long long)cum);
    else
      out(b, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep, (unsigned long long)cum);
  }
  double sum;
  __atomic_load(&h->sum, &sum, __ATOMIC_RELAXED);
  /* the +Inf bucket and _count come from the same reads, so they agree */
  if (*labels) {
    out(b, "%s_sum{%s} %.9g\n", name, labels, sum);
    out(b, "%s_count{%s} %llu\n", name, labels, (unsigned long long)cum);
  } else {
    out(b, "%s_sum %.9g\n%s_count %llu\n", name, sum, name, (unsigned long long)cum);
  }
}

char *vr_metrics_render(const vr_metrics_t *m, const vr_metrics_gauges_t *g, size_t *len) {
  buf_t b = {.p = malloc(16384), .cap = 16384};
  if (!b.p) return NULL;
  b.p[0] = 0;
  char lab[64], lab2[160];

  by_status(&b, "verl_reward_requests_total", "Requests answered, by transport and status.", m->requests);
  by_status(&b, "verl_reward_sequences_total", "Sequences in answered requests, by transport and status.",
            m->sequences);
  out(&b, "# HELP verl_reward_tokens_total Tokens in answered requests, by transport.\n"
          "# TYPE verl_reward_tokens_total counter\n");
  for (int t = 0; t < VR_TRANSPORT_N; t++)
    out(&b, "verl_reward_tokens_total{transport=\"%s\"} %llu\n", k_transport[t],
        (unsigned long long)get_u64(&m->tokens[t]));
  /* the codes this server sends are always present (0 until seen), others once seen */
  static const int k_codes[] = {200, 400, 404, 405, 413, 429, 500, 503};
  out(&b, "# HELP verl_reward_http_responses_total HTTP responses by status code (every endpoint).\n"
          "# TYPE verl_reward_http_responses_total counter\n");
  for (int i = 0; i < VR_METRICS_HTTP_CODES; i++) {
    int code = VR_METRICS_HTTP_CODE_MIN + i, fixed = 0;
    for (size_t k = 0; k < sizeof k_codes / sizeof k_codes[0]; k++) fixed |= k_codes[k] == code;
    uint64_t x = get_u64(&m->http_codes[i]);
    if (x || fixed) out(&b, "verl_reward_http_responses_total{code=\"%d\"} %llu\n", code, (unsigned long long)x);
  }

  out(&b, "# HELP verl_reward_request_latency_seconds Server-side latency, accepted to answered.\n"
          "# TYPE verl_reward_request_latency_seconds histogram\n");
  for (int t = 0; t < VR_TRANSPORT_N; t++) {
    snprintf(lab2, sizeof lab2, "transport=\"%s\"", k_transport[t]);
    hist_render(&b, "verl_reward_request_latency_seconds", lab2, &m->latency[t]);
  }
  out(&b, "# HELP verl_reward_request_queue_wait_seconds Time from intake until the request's batch starts.\n"
          "# TYPE verl_reward_request_queue_wait_seconds histogram\n");
  for (int t = 0; t < VR_TRANSPORT_N; t++) {
    snprintf(lab2, sizeof lab2, "transport=\"%s\"", k_transport[t]);
    hist_render(&b, "verl_reward_request_queue_wait_seconds", lab2, &m->queue_wait[t]);
  }
  out(&b, "# HELP verl_reward_batch_sequences Sequences per packed batch.\n"
          "# TYPE verl_reward_batch_sequences histogram\n");
  hist_render(&b, "verl_reward_batch_sequences", "", &m->batch_seqs);
  out(&b, "# HELP verl_reward_batch_tokens Tokens per packed batch.\n"
          "# TYPE verl_reward_batch_tokens histogram\n");
  hist_render(&b, "verl_reward_batch_tokens", "", &m->batch_tokens);
  out(&b, "# HELP verl_reward_batch_compute_seconds Scoring time per batch.\n"
          "# TYPE verl_reward_batch_compute_seconds histogram\n");
  hist_render(&b, "verl_reward_batch_compute_seconds", "", &m->compute);

  if (m->n_components) {
    out(&b, "# HELP verl_reward_component_scores_total Sequences scored per reward component, by reason.\n"
            "# TYPE verl_reward_component_scores_total counter\n");
    for (uint32_t c = 0; c < m->n_components; c++)
      for (int r = 0; r < VR_METRICS_REASONS; r++) {
        uint64_t v = get_u64(&m->component_reason[c][r]);
        if (!v && r != 0) continue;
        const char *rn = m->reason_name ? m->reason_name(r) : NULL;
        if (rn) snprintf(lab, sizeof lab, "%s", rn);
        else snprintf(lab, sizeof lab, "%d", r);
        out(&b, "verl_reward_component_scores_total{component=\"%s\",reason=\"%s\"} %llu\n",
            m->component_names[c], lab, (unsigned long long)v);
      }
  }

  out(&b, "# HELP verl_reward_queue_depth Requests accepted and waiting for a batch.\n"
          "# TYPE verl_reward_queue_depth gauge\nverl_reward_queue_depth %u\n", g->queue_depth);
  out(&b, "# HELP verl_reward_queue_capacity Bound on queue_depth (--max-queue).\n"
          "# TYPE verl_reward_queue_capacity gauge\nverl_reward_queue_capacity %u\n", g->queue_capacity);
  out(&b, "# HELP verl_reward_lanes_in_use Shared-memory lanes leased by clients.\n"
          "# TYPE verl_reward_lanes_in_use gauge\nverl_reward_lanes_in_use %u\n", g->lanes_in_use);
  out(&b, "# HELP verl_reward_lanes Shared-memory lanes in the segment.\n"
          "# TYPE verl_reward_lanes gauge\nverl_reward_lanes %u\n", g->lanes_total);
  out(&b, "# HELP verl_reward_inflight Requests accepted and not yet answered, by transport.\n"
          "# TYPE verl_reward_inflight gauge\n"
          "verl_reward_inflight{transport=\"shm\"} %u\nverl_reward_inflight{transport=\"http\"} %u\n",
      g->shm_inflight, g->http_inflight);
  out(&b, "# HELP verl_reward_device_memory_bytes Device memory held by the model (0 on cpu).\n"
          "# TYPE verl_reward_device_memory_bytes gauge\nverl_reward_device_memory_bytes %llu\n",
      (unsigned long long)g->device_bytes);
  out(&b, "# HELP verl_reward_host_memory_bytes Host memory held by the model backend.\n"
          "# TYPE verl_reward_host_memory_bytes gauge\nverl_reward_host_memory_bytes %llu\n",
      (unsigned long long)g->host_bytes);
  out(&b, "# HELP verl_reward_batches_total Packed batches run.\n"
          "# TYPE verl_reward_batches_total counter\nverl_reward_batches_total %llu\n",
      (unsigned long long)get_u64(&m->batches));
  /* per replica: one series per --device entry, labelled by its index and device */
  static const struct { const char *name, *type, *help; } k_rep[] = {
      {"verl_reward_replica_batches_total", "counter", "Packed batches run, by model replica."},
      {"verl_reward_replica_sequences_total", "counter", "Sequences scored, by model replica."},
      {"verl_reward_replica_tokens_total", "counter", "Tokens scored (after truncation), by model replica."},
      {"verl_reward_replica_busy_seconds_total", "counter",
       "Time a replica had at least one batch outstanding; its rate is the replica's utilisation."},
      {"verl_reward_replica_inflight_batches", "gauge", "Batches outstanding on a replica now."},
      {"verl_reward_replica_device_memory_bytes", "gauge", "Device memory held by a replica's model (0 on cpu)."},
  };
  for (size_t f = 0; m->n_replicas && f < sizeof k_rep / sizeof k_rep[0]; f++) {
    out(&b, "# HELP %s %s\n# TYPE %s %s\n", k_rep[f].name, k_rep[f].help, k_rep[f].name, k_rep[f].type);
    for (uint32_t r = 0; r < m->n_replicas; r++) {
      out(&b, "%s{replica=\"%u\",device=", k_rep[f].name, r);
      out_label_value(&b, m->replica_device[r]);
      switch (f) {
        case 0: out(&b, "} %llu\n", (unsigned long long)get_u64(&m->replica_batches[r])); break;
        case 1: out(&b, "} %llu\n", (unsigned long long)get_u64(&m->replica_sequences[r])); break;
        case 2: out(&b, "} %llu\n", (unsigned long long)get_u64(&m->replica_tokens[r])); break;
        case 3: out(&b, "} %.6f\n", get_u64(&m->replica_busy_ns[r]) / 1e9); break;
        case 4: out(&b, "} %llu\n", (unsigned long long)get_u64(&m->replica_inflight[r])); break;
        default: out(&b, "} %llu\n", (unsigned long long)g->replica_device_bytes[r]); break;
      }
    }
  }
  out(&b, "# HELP verl_reward_ready 1 when serving, 0 while starting or draining.\n"
          "# TYPE verl_reward_ready gauge\nverl_reward_ready %d\n", g->ready && !g->draining);
  out(&b, "# HELP verl_reward_build_info Build and model of this server; the value is always 1.\n"
          "# TYPE verl_reward_build_info gauge\nverl_reward_build_info{version=");
  out_label_value(&b, VR_BUILD_VERSION);
  out(&b, ",commit=");
  out_label_value(&b, VR_BUILD_COMMIT);
  out(&b, ",device=");
  out_label_value(&b, m->info_device);
  out(&b, ",model=");
  out_label_value(&b, m->info_model);
  out(&b, "} 1\n");
  if (g->have_process) {
    const vr_process_stats_t *p = &g->process;
    out(&b, "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
            "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total %.3f\n", p->cpu_seconds);
    out(&b, "# HELP process_open_fds Number of open file descriptors.\n"
            "# TYPE process_open_fds gauge\nprocess_open_fds %llu\n", (unsigned long long)p->open_fds);
    out(&b, "# HELP process_max_fds Maximum number of open file descriptors.\n"
            "# TYPE process_max_fds gauge\nprocess_max_fds %llu\n", (unsigned long long)p->max_fds);
    out(&b, "# HELP process_virtual_memory_bytes Virtual memory size in bytes.\n"
            "# TYPE process_virtual_memory_bytes gauge\nprocess_virtual_memory_bytes %llu\n",
        (unsigned long long)p->virtual_bytes);
    out(&b, "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
            "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %llu\n",
        (unsigned long long)p->resident_bytes);
    out(&b, "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
            "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %.3f\n", p->start_time_s);
  }
  if (b.oom) {
    free(b.p);
    return NULL;
  }
  if (len) *len = b.len;
  return b.p;
}
