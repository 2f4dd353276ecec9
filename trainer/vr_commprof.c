/* vr_commprof.c: the communication profile's recorder and writer (vr_commprof.h). */
#include "vr_commprof.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "vr_text.h"

struct vr_commprof {
  char dir[1024];
  char label[128];
  int rank;
  vr_commprof_event_t *ev;
  size_t n, cap;
};

static const char *const vr_prof_op_names[] = {"all_reduce", "broadcast", "barrier", "send", "recv"};

static const char *op_name(int op) {
  return op >= 0 && op < (int)(sizeof vr_prof_op_names / sizeof *vr_prof_op_names) ? vr_prof_op_names[op] : "?";
}

double vr_commprof_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

vr_commprof_t *vr_commprof_new(const char *dir, int rank) {
  vr_commprof_t *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  snprintf(p->dir, sizeof p->dir, "%s", dir && *dir ? dir : "./comm_profile");
  p->rank = rank;
  snprintf(p->label, sizeof p->label, "rank %d", rank);
  return p;
}

void vr_commprof_free(vr_commprof_t *p) {
  if (!p) return;
  free(p->ev);
  free(p);
}

void vr_commprof_set_label(vr_commprof_t *p, const char *label) {
  if (p) snprintf(p->label, sizeof p->label, "%s", label);
}

void vr_commprof_add(vr_commprof_t *p, const vr_commprof_event_t *e) {
  if (!p) return;
  if (p->n == p->cap) {
    size_t cap = p->cap ? p->cap * 2 : 256;
    vr_commprof_event_t *ne = realloc(p->ev, cap * sizeof *ne);
    if (!ne) return; /* the profile is best effort: a run never fails for it */
    p->ev = ne;
    p->cap = cap;
  }
  p->ev[p->n] = *e;
  p->ev[p->n].rank = p->rank;
  p->n++;
}

const vr_commprof_event_t *vr_commprof_events(const vr_commprof_t *p, size_t *n) {
  *n = p ? p->n : 0;
  return p ? p->ev : NULL;
}

const char *vr_commprof_label(const vr_commprof_t *p) { return p ? p->label : ""; }
const char *vr_commprof_dir(const vr_commprof_t *p) { return p ? p->dir : ""; }

double vr_commprof_bus_factor(int op, int ranks) {
  if (op == VR_PROF_ALLREDUCE) return ranks > 0 ? 2.0 * (ranks - 1) / ranks : 0.0;
  return 1.0;
}

/* JSON string body without quotes (labels and roles are ours, but escape anyway). */
/* s as a JSON string (vr_text's escaping; our strings are labels of at most 128 bytes). */
static void put_json_str(FILE *f, const char *s) {
  char buf[1024];
  vr_text_t t;
  vr_text_init(&t, buf, sizeof buf);
  vr_text_json_str(&t, s);
  fputs(buf, f);
}

static int mkdir_p(const char *dir) {
  char buf[1024];
  snprintf(buf, sizeof buf, "%s", dir);
  for (char *q = buf + 1; *q; q++) {
    if (*q != '/') continue;
    *q = 0;
    if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
    *q = '/';
  }
  if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
  return 0;
}

typedef struct vr_prof_row {
  char role[16], comm[16];
  int op, ranks;
  uint64_t calls, bytes;
  double us;
  uint64_t seen[4]; /* ranks (mod 256) that recorded this row: the per-rank averages divide by them */
} vr_prof_row_t;

static int popcount256(const uint64_t s[4]) {
  return __builtin_popcountll(s[0]) + __builtin_popcountll(s[1]) + __builtin_popcountll(s[2]) +
         __builtin_popcountll(s[3]);
}

int vr_commprof_write(const char *dir, const vr_commprof_event_t *ev, size_t n, const char *const *labels,
                      int n_ranks, void *out) {
  if (mkdir_p(dir) != 0) return -1;
  char path[1200];
  snprintf(path, sizeof path, "%s/nccl_trace.json", dir);
  FILE *f = fopen(path, "w");
  if (!f) return -1;
  double t0 = 0;
  for (size_t i = 0; i < n; i++)
    if (t0 == 0 || ev[i].t0_us < t0) t0 = ev[i].t0_us;
  fprintf(f, "{\"displayTimeUnit\": \"ms\", \"otherData\": {\"t0_unix_us\": %.0f}, \"traceEvents\": [\n", t0);
  int first = 1;
  for (int r = 0; r < n_ranks; r++) {
    fprintf(f, "%s{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": {\"name\": ",
            first ? "" : ",\n", r);
    put_json_str(f, labels && labels[r] ? labels[r] : "");
    fprintf(f, "}}");
    first = 0;
  }
  for (size_t i = 0; i < n; i++) {
    const vr_commprof_event_t *e = &ev[i];
    double dur = e->t1_us - e->t0_us;
    fprintf(f, "%s{\"name\": ", first ? "" : ",\n");
    char name[64];
    snprintf(name, sizeof name, "%s %s", e->role, op_name(e->op));
    put_json_str(f, name);
    fprintf(f, ", \"cat\": ");
    put_json_str(f, e->role);
    fprintf(f, ", \"ph\": \"X\", \"ts\": %.3f, \"dur\": %.3f, \"pid\": %d, \"tid\": %d, \"args\": {\"op\": \"%s\", "
               "\"comm\": ", e->t0_us - t0, dur > 0 ? dur : 0.0, e->rank, e->stream, op_name(e->op));
    put_json_str(f, e->comm);
    fprintf(f, ", \"bytes\": %llu, \"ranks\": %d}}", (unsigned long long)e->bytes, e->ranks);
    first = 0;
  }
  fprintf(f, "\n]}\n");
  int werr = ferror(f);
  if (fclose(f) != 0 || werr) return -1;

  /* summary: per role, op and communicator; every participating rank records a collective, so
   * the table reports per-rank averages over the ranks that recorded the row (the controller
   * alone records control transfers) */
  vr_prof_row_t rows[64];
  int nr = 0;
  for (size_t i = 0; i < n; i++) {
    const vr_commprof_event_t *e = &ev[i];
    int k = 0;
    for (; k < nr; k++)
      if (rows[k].op == e->op && !strcmp(rows[k].role, e->role) && !strcmp(rows[k].comm, e->comm)) break;
    if (k == nr) {
      if (nr == 64) continue;
      memset(&rows[nr], 0, sizeof rows[nr]);
      snprintf(rows[nr].role, sizeof rows[nr].role, "%s", e->role);
      snprintf(rows[nr].comm, sizeof rows[nr].comm, "%s", e->comm);
      rows[nr].op = e->op;
      rows[nr].ranks = e->ranks;
      nr++;
    }
    rows[k].seen[(e->rank & 255) / 64] |= 1ull << (e->rank & 63);
    rows[k].calls++;
    rows[k].bytes += e->bytes;
    rows[k].us += e->t1_us > e->t0_us ? e->t1_us - e->t0_us : 0.0;
  }
  snprintf(path, sizeof path, "%s/summary.txt", dir);
  FILE *s = fopen(path, "w");
  if (!s) return -1;
  FILE *outs[2] = {s, (FILE *)out};
  for (int o = 0; o < 2; o++) {
    FILE *g = outs[o];
    if (!g) continue;
    fprintf(g, "%-12s %-10s %-5s %5s %10s %14s %12s %10s %10s\n", "role", "op", "comm", "ranks", "calls/rank",
            "bytes/rank", "ms/rank", "algbw_GB/s", "busbw_GB/s");
    for (int k = 0; k < nr; k++) {
      const vr_prof_row_t *r = &rows[k];
      int ranks = popcount256(r->seen) > 0 ? popcount256(r->seen) : 1;
      double calls = (double)r->calls / ranks, bytes = (double)r->bytes / ranks, us = r->us / ranks;
      double alg = us > 0 ? bytes / (us * 1e-6) / 1e9 : 0.0;
      if (r->ranks <= 1 && r->op != VR_PROF_SEND && r->op != VR_PROF_RECV) {
        /* a one-rank collective moves nothing: a bandwidth would only be bytes over a no-op */
        fprintf(g, "%-12s %-10s %-5s %5d %10.1f %14.0f %12.3f %10s %10s\n", r->role, op_name(r->op), r->comm,
                r->ranks, calls, bytes, us / 1e3, "-", "-");
        continue;
      }
      fprintf(g, "%-12s %-10s %-5s %5d %10.1f %14.0f %12.3f %10.2f %10.2f\n", r->role, op_name(r->op), r->comm,
              r->ranks, calls, bytes, us / 1e3, alg, alg * vr_commprof_bus_factor(r->op, r->ranks));
    }
  }
  werr = ferror(s);
  if (fclose(s) != 0 || werr) return -1;
  return 0;
}
