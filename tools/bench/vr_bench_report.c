/* vr_bench_report.c: table, JSON, CSV and SVG outputs. See vr_bench_report.h. */
#include "vr_bench_report.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "verl_reward/status.h"
#include "vr_log.h"

static double us(uint64_t ns) { return (double)ns / 1000.0; }

/* the five reported percentiles, in microseconds */
static void pcts(const vr_run_result_t *r, double out[5]) {
  out[0] = us(vr_hist_percentile(&r->lat_ns, 50.0));
  out[1] = us(vr_hist_percentile(&r->lat_ns, 90.0));
  out[2] = us(vr_hist_percentile(&r->lat_ns, 99.0));
  out[3] = us(vr_hist_percentile(&r->lat_ns, 99.9));
  out[4] = us(r->lat_ns.count ? r->lat_ns.max : 0);
}

static const char *mode_name(const vr_run_result_t *r) { return r->rate > 0 ? "open" : "closed"; }

static void load_label(const vr_run_result_t *r, char *buf, size_t n) {
  if (r->rate > 0)
    snprintf(buf, n, "%g/s%s c%u", r->rate, r->poisson ? " poi" : "", r->concurrency);
  else
    snprintf(buf, n, "c%u", r->concurrency);
}

void vr_report_table(FILE *f, const vr_report_meta_t *m, const vr_run_result_t *r, size_t n) {
  fprintf(f, "verl-reward-bench: %s\n", m->workload);
  fprintf(f, "%-13s %-16s %8s %6s %10s %10s %11s %9s %9s %9s %9s %9s %9s %9s %9s\n", "transport", "load",
          "requests", "errors", "req/s", "seq/s", "tok/s", "p50_us", "p90_us", "p99_us", "p99.9_us",
          "max_us", "mean_us", "queue_us", "comp_us");
  static const double pv[4] = {50, 90, 99, 99.9};
  int hidden = 0;
  for (size_t i = 0; i < n; i++) {
    double p[5];
    pcts(&r[i], p);
    char load[48], pc[4][16];
    load_label(&r[i], load, sizeof(load));
    for (int k = 0; k < 4; k++) {
      if (vr_report_pct_supported(pv[k], r[i].lat_ns.count)) snprintf(pc[k], sizeof pc[k], "%.1f", p[k]);
      else snprintf(pc[k], sizeof pc[k], "-"), hidden = 1;
    }
    fprintf(f, "%-13s %-16s %8llu %6llu %10.1f %10.1f %11.0f %9s %9s %9s %9s %9.1f %9.1f %9.1f %9.1f\n",
            vr_transport_name(r[i].transport), load, (unsigned long long)r[i].requests,
            (unsigned long long)r[i].errors, r[i].req_s, r[i].seq_s, r[i].tok_s, pc[0], pc[1], pc[2],
            pc[3], p[4], vr_hist_mean(&r[i].lat_ns) / 1000.0, r[i].queue_us_mean, r[i].compute_us_mean);
  }
  if (hidden)
    fprintf(f, "-: too few samples for that percentile (pN needs 10/(1-N/100): p99 1000, p99.9 10000; "
               "the JSON has every value)\n");
  for (size_t i = 0; i < n; i++) {
    char load[48];
    load_label(&r[i], load, sizeof(load));
    if (r[i].errors || r[i].warmup_errors)
      fprintf(f, "  %s %s: %llu errors (+%llu in warm-up), first: %s\n",
              vr_transport_name(r[i].transport), load, (unsigned long long)r[i].errors,
              (unsigned long long)r[i].warmup_errors, r[i].first_error_msg);
    if (r[i].verify_failures)
      fprintf(f, "  %s %s: %llu requests with scores that differ from the checksum\n",
              vr_transport_name(r[i].transport), load, (unsigned long long)r[i].verify_failures);
    if (r[i].unsent)
      fprintf(f, "  %s %s: %llu scheduled requests never sent: the server cannot sustain %g req/s\n",
              vr_transport_name(r[i].transport), load, (unsigned long long)r[i].unsent, r[i].rate);
  }
  fprintf(f, "latency: %s; queue_us/comp_us: server-reported means (queue wait, batch compute);\n"
             "mean_us - queue_us - comp_us = transport + client overhead\n",
          n && r[0].rate > 0 ? "from the intended send time (open loop, no coordinated omission)"
                             : "from send to response (closed loop)");
}

static cJSON *run_json(const vr_report_meta_t *m, const vr_run_result_t *r) {
  cJSON *o = cJSON_CreateObject();
  double p[5];
  pcts(r, p);
  cJSON_AddStringToObject(o, "transport", vr_transport_name(r->transport));
  cJSON_AddNumberToObject(o, "concurrency", r->concurrency);
  cJSON_AddNumberToObject(o, "requests", (double)r->requests);
  cJSON_AddNumberToObject(o, "errors", (double)r->errors);
  cJSON *t = cJSON_AddObjectToObject(o, "throughput");
  cJSON_AddNumberToObject(t, "req_s", r->req_s);
  cJSON_AddNumberToObject(t, "seq_s", r->seq_s);
  cJSON_AddNumberToObject(t, "tok_s", r->tok_s);
  cJSON *l = cJSON_AddObjectToObject(o, "latency_us");
  static const char *const keys[5] = {"p50", "p90", "p99", "p999", "max"};
  for (int i = 0; i < 5; i++) cJSON_AddNumberToObject(l, keys[i], p[i]);
  cJSON_AddNumberToObject(o, "successes", (double)r->successes);
  cJSON_AddStringToObject(o, "mode", mode_name(r));
  cJSON_AddNumberToObject(o, "rate", r->rate);
  cJSON_AddStringToObject(o, "arrival", r->rate > 0 ? (r->poisson ? "poisson" : "constant") : "none");
  cJSON_AddNumberToObject(o, "duration_s", r->duration_s);
  cJSON_AddNumberToObject(o, "batch", m->batch);
  cJSON_AddNumberToObject(o, "seqs", (double)r->seqs);
  cJSON_AddNumberToObject(o, "tokens", (double)r->tokens);
  cJSON_AddNumberToObject(o, "warmup_errors", (double)r->warmup_errors);
  cJSON_AddNumberToObject(o, "unsent", (double)r->unsent);
  cJSON_AddNumberToObject(o, "verify_failures", (double)r->verify_failures);
  cJSON *s = cJSON_AddObjectToObject(o, "server_us");
  cJSON_AddNumberToObject(s, "queue_mean", r->queue_us_mean);
  cJSON_AddNumberToObject(s, "compute_mean", r->compute_us_mean);
  cJSON_AddNumberToObject(o, "latency_mean_us", vr_hist_mean(&r->lat_ns) / 1000.0);
  if (r->first_error) cJSON_AddStringToObject(o, "first_error", r->first_error_msg);
  return o;
}

static int write_file(const char *path, const char *text) {
  FILE *f = strcmp(path, "-") == 0 ? stdout : fopen(path, "w");
  if (!f) {
    vr_log(VR_LOG_ERROR, "cannot write %s: %s", path, strerror(errno));
    return VR_ERR_IO;
  }
  int ok = fputs(text, f) >= 0;
  if (f == stdout) ok = fflush(f) == 0 && ok;
  else ok = fclose(f) == 0 && ok;
  if (!ok) {
    vr_log(VR_LOG_ERROR, "writing %s failed: %s", path, strerror(errno));
    return VR_ERR_IO;
  }
  return 0;
}

int vr_report_json(const char *path, const vr_report_meta_t *m, const vr_run_result_t *r, size_t n,
                   int as_list) {
  cJSON *root;
  if (n == 1 && !as_list) {
    root = run_json(m, &r[0]);
  } else {
    root = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(root, run_json(m, &r[i]));
  }
  char *text = cJSON_Print(root);
  cJSON_Delete(root);
  if (!text) return VR_ERR_NOMEM;
  size_t len = strlen(text);
  char *with_nl = malloc(len + 2);
  int rc = VR_ERR_NOMEM;
  if (with_nl) {
    memcpy(with_nl, text, len);
    memcpy(with_nl + len, "\n", 2);
    rc = write_file(path, with_nl);
  }
  free(with_nl);
  cJSON_free(text);
  return rc;
}

int vr_report_csv(const char *path, const vr_report_meta_t *m, const vr_run_result_t *r, size_t n) {
  FILE *f = strcmp(path, "-") == 0 ? stdout : fopen(path, "w");
  if (!f) {
    vr_log(VR_LOG_ERROR, "cannot write %s: %s", path, strerror(errno));
    return VR_ERR_IO;
  }
  fprintf(f, "transport,mode,concurrency,rate,batch,requests,successes,errors,duration_s,req_s,seq_s,"
             "tok_s,p50_us,p90_us,p99_us,p999_us,max_us,mean_us,queue_us_mean,compute_us_mean\n");
  for (size_t i = 0; i < n; i++) {
    double p[5];
    pcts(&r[i], p);
    fprintf(f, "%s,%s,%u,%g,%u,%llu,%llu,%llu,%.3f,%.2f,%.2f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f\n",
            vr_transport_name(r[i].transport), mode_name(&r[i]), r[i].concurrency, r[i].rate, m->batch,
            (unsigned long long)r[i].requests, (unsigned long long)r[i].successes,
            (unsigned long long)r[i].errors, r[i].duration_s, r[i].req_s, r[i].seq_s, r[i].tok_s, p[0],
            p[1], p[2], p[3], p[4], vr_hist_mean(&r[i].lat_ns) / 1000.0, r[i].queue_us_mean,
            r[i].compute_us_mean);
  }
  int ok = !ferror(f);
  if (f == stdout) ok = fflush(f) == 0 && ok;
  else ok = fclose(f) == 0 && ok;
  if (!ok) {
    vr_log(VR_LOG_ERROR, "writing %s failed", path);
    return VR_ERR_IO;
  }
  return 0;
}

/* ---- SVG ----------------------------------------------------------------------
 * Separate panels: one per transport with its latency percentiles against the load
 * (log10 latency axis; one dash style per percentile), and one with every transport's
 * throughput against the load. The load axis is numeric (concurrency, or the offered
 * rate for open-loop runs): log2 when it spans 4x or more, else linear. A percentile
 * is drawn only where the run has enough samples to support it (vr_report_pct_supported). */

int vr_report_pct_supported(double p, uint64_t count) {
  if (p <= 0 || p >= 100) return count > 0;
  return (double)count * (100.0 - p) >= 1000.0 - 1e-6; /* count >= 10 / (1 - p/100), without dividing */
}

static void xml_escape(FILE *f, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '<': fputs("&lt;", f); break;
    case '>': fputs("&gt;", f); break;
    case '&': fputs("&amp;", f); break;
    case '"': fputs("&quot;", f); break;
    default: fputc(*s, f);
    }
  }
}

/* One panel's plot area: x from x0 to x1 (log2 when xlog), y from y0 to y1 (log10 when ylog). */
typedef struct plot_geom {
  double L, T, pw, ph;
  double x0, x1, y0, y1;
  int xlog, ylog;
} plot_geom_t;

static double axis_pos(double v, double a, double b, int lg) {
  if (lg) {
    if (!(v > 0)) v = a;
    return (log(v) - log(a)) / (log(b) - log(a));
  }
  return (v - a) / (b - a);
}

static double plot_x(const plot_geom_t *g, double v) {
  return g->L + g->pw * (0.05 + 0.9 * axis_pos(v, g->x0, g->x1, g->xlog));
}

static double plot_y(const plot_geom_t *g, double v) {
  double t = axis_pos(v, g->y0, g->y1, g->ylog);
  if (t < 0) t = 0;
  return g->T + g->ph - t * g->ph;
}

static double load_x(const vr_run_result_t *r) { return r->rate > 0 ? r->rate : (double)r->concurrency; }

static const char *const k_colors[3] = {"#1f77b4", "#d62728", "#2ca02c"};
static const char *const k_dashes[5] = {"", "6,3", "2,3", "8,3,2,3", ""};
static const char *const k_widths[5] = {"2.5", "2", "2", "2", "1"}; /* max: thin, faded */
static const char *const k_pnames[5] = {"p50", "p90", "p99", "p99.9", "max"};
static const double k_pvals[5] = {50, 90, 99, 99.9, 100};

static void fmt_us(double v, char *buf, size_t n) {
  if (v >= 1e6) snprintf(buf, n, "%g s", v / 1e6);
  else if (v >= 1e3) snprintf(buf, n, "%g ms", v / 1e3);
  else snprintf(buf, n, "%g us", v);
}

/* Frame, title, x ticks at the distinct loads and the x label of one panel. */
static void panel_frame(FILE *f, const plot_geom_t *g, const char *title, const double *xs, size_t nx,
                        int open_loop) {
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-weight=\"bold\">", g->L, g->T - 10);
  xml_escape(f, title);
  fprintf(f, "</text>\n");
  fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"black\"/>\n", g->L,
          g->T, g->pw, g->ph);
  for (size_t j = 0; j < nx; j++) {
    double x = plot_x(g, xs[j]);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", x, g->T, x, g->T + g->ph);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", x, g->T + g->ph + 16, xs[j]);
  }
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s%s</text>\n", g->L + g->pw / 2,
          g->T + g->ph + 34, open_loop ? "offered rate (requests/s)" : "concurrency (clients)",
          g->xlog ? ", log scale" : "");
}

/* The runs of transport t in increasing load order (indices into r; returns the count). */
static size_t runs_of(const vr_run_result_t *r, size_t n, int t, size_t *idx) {
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if ((int)r[i].transport == t && r[i].lat_ns.count > 0) {
      size_t k = m++;
      while (k > 0 && load_x(&r[idx[k - 1]]) > load_x(&r[i])) {
        idx[k] = idx[k - 1];
        k--;
      }
      idx[k] = i;
    }
  return m;
}

static void latency_panel(FILE *f, const plot_geom_t *g, const vr_run_result_t *r, size_t n, int t,
                          const double *xs, size_t nx, int open_loop, size_t *idx) {
  char title[96];
  snprintf(title, sizeof title, "%s: latency percentiles", vr_transport_name((vr_transport_t)t));
  /* y grid: 1, 2, 5 per decade */
  for (double d = log10(g->y0); d <= log10(g->y1) + 1e-9; d += 1) {
    for (int k = 0; k < 3; k++) {
      double v = pow(10, d) * (k == 0 ? 1 : k == 1 ? 2 : 5);
      if (log10(v) > log10(g->y1) + 1e-9) break;
      double y = plot_y(g, v);
      char lab[32];
      fmt_us(v, lab, sizeof lab);
      fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n", g->L, y, g->L + g->pw, y,
              k == 0 ? "#bbb" : "#eee");
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", g->L - 6, y + 4, lab);
    }
  }
  panel_frame(f, g, title, xs, nx, open_loop);
  size_t m = runs_of(r, n, t, idx);
  int shown[5] = {0};
  for (int k = 0; k < 5; k++) {
    /* a line through the consecutive supported points; an unsupported point breaks it */
    int open = 0;
    for (size_t a = 0; a < m; a++) {
      const vr_run_result_t *ri = &r[idx[a]];
      if (!vr_report_pct_supported(k_pvals[k], ri->lat_ns.count)) {
        if (open) fprintf(f, "\"/>\n");
        open = 0;
        continue;
      }
      double p[5];
      pcts(ri, p);
      double x = plot_x(g, load_x(ri)), y = plot_y(g, p[k]);
      if (!open)
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s%s%s%s points=\"", k_colors[t],
                k_widths[k], k == 4 ? " stroke-opacity=\"0.5\"" : "", *k_dashes[k] ? " stroke-dasharray=\"" : "",
                k_dashes[k], *k_dashes[k] ? "\"" : "");
      fprintf(f, "%s%.1f,%.1f", open ? " " : "", x, y);
      open = 1;
      shown[k] = 1;
    }
    if (open) fprintf(f, "\"/>\n");
    for (size_t a = 0; a < m; a++) {
      const vr_run_result_t *ri = &r[idx[a]];
      if (!vr_report_pct_supported(k_pvals[k], ri->lat_ns.count)) continue;
      double p[5];
      pcts(ri, p);
      fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%s %s @ %g: %.1f us (%llu samples)</title></circle>\n",
              plot_x(g, load_x(ri)), plot_y(g, p[k]), k_colors[t], vr_transport_name((vr_transport_t)t),
              k_pnames[k], load_x(ri), p[k], (unsigned long long)ri->lat_ns.count);
    }
  }
  /* legend: the percentiles drawn; a note for those hidden somewhere */
  double lx = g->L + 8, ly = g->T + 14;
  int hidden = 0;
  for (int k = 0; k < 5; k++) {
    int everywhere = 1;
    for (size_t a = 0; a < m; a++) everywhere &= vr_report_pct_supported(k_pvals[k], r[idx[a]].lat_ns.count);
    hidden |= !everywhere;
    if (!shown[k]) continue;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"%s\"%s%s%s%s/>\n", lx,
            ly - 4, lx + 22, ly - 4, k_colors[t], k_widths[k], k == 4 ? " stroke-opacity=\"0.5\"" : "",
            *k_dashes[k] ? " stroke-dasharray=\"" : "", k_dashes[k], *k_dashes[k] ? "\"" : "");
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">%s</text>\n", lx + 26, ly, k_pnames[k]);
    lx += 70;
  }
  if (hidden)
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"#777\">a percentile p needs 10/(1-p) samples "
               "(p99: 1000, p99.9: 10000)</text>\n",
            g->L + 8, g->T + g->ph - 6);
}

static void throughput_panel(FILE *f, const plot_geom_t *g, const vr_run_result_t *r, size_t n, const double *xs,
                             size_t nx, int open_loop, size_t *idx) {
  for (int k = 0; k <= 4; k++) {
    double v = g->y1 * k / 4.0, y = plot_y(g, v);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", g->L, y, g->L + g->pw, y);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.*f</text>\n", g->L - 6, y + 4, v >= 10 || v == 0 ? 0 : 2, v);
  }
  panel_frame(f, g, "throughput (successful requests/s)", xs, nx, open_loop);
  double lx = g->L + 8, ly = g->T + 14;
  for (int t = 0; t < 3; t++) {
    size_t m = runs_of(r, n, t, idx);
    if (!m) continue;
    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", k_colors[t]);
    for (size_t a = 0; a < m; a++)
      fprintf(f, "%s%.1f,%.1f", a ? " " : "", plot_x(g, load_x(&r[idx[a]])), plot_y(g, r[idx[a]].req_s));
    fprintf(f, "\"/>\n");
    for (size_t a = 0; a < m; a++) {
      const vr_run_result_t *ri = &r[idx[a]];
      fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%s @ %g: %.1f req/s, %.1f seq/s, %.0f tok/s</title></circle>\n",
              plot_x(g, load_x(ri)), plot_y(g, ri->req_s), k_colors[t], vr_transport_name((vr_transport_t)t),
              load_x(ri), ri->req_s, ri->seq_s, ri->tok_s);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"22\" height=\"4\" fill=\"%s\"/>\n", lx, ly - 6, k_colors[t]);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">%s</text>\n", lx + 26, ly,
            vr_transport_name((vr_transport_t)t));
    lx += 110;
  }
}

int vr_report_svg(const char *path, const vr_report_meta_t *m, const vr_run_result_t *r, size_t n) {
  FILE *f = fopen(path, "w");
  if (!f) {
    vr_log(VR_LOG_ERROR, "cannot write %s: %s", path, strerror(errno));
    return VR_ERR_IO;
  }
  int open_loop = n && r[0].rate > 0;
  double *xs = malloc((n ? n : 1) * sizeof(double));
  size_t *idx = malloc((n ? n : 1) * sizeof(size_t));
  if (!xs || !idx) {
    free(xs);
    free(idx);
    fclose(f);
    return VR_ERR_NOMEM;
  }
  /* distinct loads, sorted; latency and throughput ranges */
  size_t nx = 0;
  double lo = INFINITY, hi = 0, thr = 0;
  int present[3] = {0};
  for (size_t i = 0; i < n; i++) {
    size_t j = 0;
    while (j < nx && xs[j] < load_x(&r[i])) j++;
    if (j == nx || xs[j] != load_x(&r[i])) {
      memmove(xs + j + 1, xs + j, (nx - j) * sizeof(double));
      xs[j] = load_x(&r[i]);
      nx++;
    }
    if (r[i].lat_ns.count == 0) continue;
    present[r[i].transport] = 1;
    double p[5];
    pcts(&r[i], p);
    for (int k = 0; k < 5; k++) {
      if (!vr_report_pct_supported(k_pvals[k], r[i].lat_ns.count)) continue;
      if (p[k] > 0 && p[k] < lo) lo = p[k];
      if (p[k] > hi) hi = p[k];
    }
    if (r[i].req_s > thr) thr = r[i].req_s;
  }
  if (!(hi > 0)) {
    lo = 1;
    hi = 10;
  }
  double d0 = floor(log10(lo)), d1 = ceil(log10(hi * 4)); /* headroom for the legend */
  if (d1 <= d0) d1 = d0 + 1;
  double x0 = nx ? xs[0] : 1, x1 = nx ? xs[nx - 1] : 2;
  int xlog = x0 > 0 && x1 / x0 >= 4;
  if (x1 <= x0) { /* one load point: centre it */
    x0 = x0 > 0 ? x0 / 2 : x0 - 1;
    x1 = x1 > 0 ? x1 * 2 : x1 + 1;
    xlog = x0 > 0;
  }
  double tmax = thr > 0 ? pow(10, ceil(log10(thr * 1.1))) : 1;
  while (tmax / 2 >= thr * 1.1 && tmax > 1e-9) tmax /= 2; /* a round top not far above the best */

  int n_panels = 1;
  for (int t = 0; t < 3; t++) n_panels += present[t];
  const double PW = 460, PH = 300, W = 2 * PW + 40, HEAD = 56;
  int rows = (n_panels + 1) / 2;
  double H = HEAD + rows * (PH + 20) + 10;
  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
             "font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  fprintf(f, "<text x=\"20\" y=\"24\" font-size=\"16\" font-weight=\"bold\">verl-reward-bench (%s loop)</text>\n",
          open_loop ? "open" : "closed");
  fprintf(f, "<text x=\"20\" y=\"44\" fill=\"#555\">");
  xml_escape(f, m->workload);
  fprintf(f, "</text>\n");
  int panel = 0;
  for (int t = 0; t <= 3; t++) {
    if (t < 3 && !present[t]) continue;
    double ox = 20 + (panel % 2) * (PW + 20), oy = HEAD + (panel / 2) * (PH + 20);
    plot_geom_t g = {.L = ox + 70, .T = oy + 24, .pw = PW - 90, .ph = PH - 70, .x0 = x0, .x1 = x1, .xlog = xlog};
    fprintf(f, "<g>\n");
    if (t < 3) {
      g.y0 = pow(10, d0);
      g.y1 = pow(10, d1);
      g.ylog = 1;
      latency_panel(f, &g, r, n, t, xs, nx, open_loop, idx);
    } else {
      g.y0 = 0;
      g.y1 = tmax;
      throughput_panel(f, &g, r, n, xs, nx, open_loop, idx);
    }
    fprintf(f, "</g>\n");
    panel++;
  }
  fprintf(f, "</svg>\n");
  free(xs);
  free(idx);
  int ok = !ferror(f);
  ok = fclose(f) == 0 && ok;
  if (!ok) {
    vr_log(VR_LOG_ERROR, "writing %s failed", path);
    return VR_ERR_IO;
  }
  return 0;
}

int vr_report_png_available(void) {
  const char *path = getenv("PATH");
  char buf[4096];
  for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
    const char *c = strchr(p, ':');
    size_t len = c ? (size_t)(c - p) : strlen(p);
    snprintf(buf, sizeof buf, "%.*s/rsvg-convert", (int)len, p);
    if (len && access(buf, X_OK) == 0) return 1;
    p += len + (c ? 1 : 0);
  }
  return 0;
}

int vr_report_png(const char *png_path, const char *svg_path, const vr_report_meta_t *m, const vr_run_result_t *r,
                  size_t n) {
  int rc = vr_report_svg(svg_path, m, r, n);
  if (rc) return rc;
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    execlp("rsvg-convert", "rsvg-convert", "-o", png_path, svg_path, (char *)NULL);
    _exit(127);
  }
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    vr_log(VR_LOG_ERROR, "rsvg-convert -o %s %s failed (%s)%s", png_path, svg_path,
           pid < 0 ? strerror(errno) : WIFEXITED(st) ? "exit status" : "killed",
           WIFEXITED(st) && WEXITSTATUS(st) == 127 ? ". HINT: apt-get install librsvg2-bin" : "");
    return VR_ERR_IO;
  }
  return 0;
}
