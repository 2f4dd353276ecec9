/* vr_bench_report.c: table, JSON, CSV and SVG outputs. See vr_bench_report.h. */
#include "vr_bench_report.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
  for (size_t i = 0; i < n; i++) {
    double p[5];
    pcts(&r[i], p);
    char load[48];
    load_label(&r[i], load, sizeof(load));
    fprintf(f, "%-13s %-16s %8llu %6llu %10.1f %10.1f %11.0f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f %9.1f\n",
            vr_transport_name(r[i].transport), load, (unsigned long long)r[i].requests,
            (unsigned long long)r[i].errors, r[i].req_s, r[i].seq_s, r[i].tok_s, p[0], p[1], p[2],
            p[3], p[4], vr_hist_mean(&r[i].lat_ns) / 1000.0, r[i].queue_us_mean, r[i].compute_us_mean);
  }
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
 * x: the distinct load points (concurrency, or rate for open-loop runs), evenly
 * spaced in increasing order; y: latency on a log10 axis; one colour per
 * transport, one dash style per percentile. */

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

/* Plot area geometry: x slots for the load points, log10 y from decade d0 to d1. */
typedef struct plot_geom {
  double L, T, pw, ph, d0, d1;
  size_t nx;
} plot_geom_t;

static double plot_x(const plot_geom_t *g, size_t j) {
  return g->L + (g->nx == 1 ? g->pw / 2 : g->pw * (0.05 + 0.9 * (double)j / (double)(g->nx - 1)));
}

static double plot_y(const plot_geom_t *g, double v) {
  if (!(v > 0)) v = pow(10, g->d0);
  return g->T + g->ph - (log10(v) - g->d0) / (g->d1 - g->d0) * g->ph;
}

static double load_x(const vr_run_result_t *r) { return r->rate > 0 ? r->rate : (double)r->concurrency; }

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int vr_report_svg(const char *path, const vr_report_meta_t *m, const vr_run_result_t *r, size_t n) {
  FILE *f = fopen(path, "w");
  if (!f) {
    vr_log(VR_LOG_ERROR, "cannot write %s: %s", path, strerror(errno));
    return VR_ERR_IO;
  }
  const double W = 960, H = 540, L = 90, R = 230, T = 60, B = 70;
  const double pw = W - L - R, ph = H - T - B;
  static const char *const colors[3] = {"#1f77b4", "#d62728", "#2ca02c"};
  static const char *const dashes[5] = {"", "6,3", "2,3", "8,3,2,3", ""};
  static const char *const widths[5] = {"2.5", "2", "2", "2", "1"}; /* max: thin, faded */
  static const char *const pnames[5] = {"p50", "p90", "p99", "p99.9", "max"};
  int open_loop = n && r[0].rate > 0;

  /* distinct x values */
  double *xs = malloc((n ? n : 1) * sizeof(double));
  if (!xs) {
    fclose(f);
    return VR_ERR_NOMEM;
  }
  size_t nx = 0;
  for (size_t i = 0; i < n; i++) {
    int seen = 0;
    for (size_t j = 0; j < nx; j++) seen |= xs[j] == load_x(&r[i]);
    if (!seen) xs[nx++] = load_x(&r[i]);
  }
  qsort(xs, nx, sizeof(double), cmp_double);
  /* y range over all plotted values, in decades */
  double lo = INFINITY, hi = 0;
  for (size_t i = 0; i < n; i++) {
    double p[5];
    pcts(&r[i], p);
    for (int k = 0; k < 5; k++) {
      if (p[k] > 0 && p[k] < lo) lo = p[k];
      if (p[k] > hi) hi = p[k];
    }
  }
  if (!(hi > 0)) {
    lo = 1;
    hi = 10;
  }
  double d0 = floor(log10(lo)), d1 = ceil(log10(hi));
  if (d1 <= d0) d1 = d0 + 1;
  const plot_geom_t g = {.L = L, .T = T, .pw = pw, .ph = ph, .d0 = d0, .d1 = d1, .nx = nx};

  fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
             "font-family=\"sans-serif\" font-size=\"12\">\n", W, H, W, H);
  fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
  fprintf(f, "<text x=\"%.0f\" y=\"24\" font-size=\"16\" font-weight=\"bold\">verl-reward-bench: latency percentiles (%s loop)</text>\n",
          L, open_loop ? "open" : "closed");
  fprintf(f, "<text x=\"%.0f\" y=\"44\" fill=\"#555\">", L);
  xml_escape(f, m->workload);
  fprintf(f, "</text>\n");
  /* y grid: 1, 2, 5 per decade */
  for (double d = d0; d <= d1; d += 1) {
    for (int k = 0; k < 3; k++) {
      double v = pow(10, d) * (k == 0 ? 1 : k == 1 ? 2 : 5);
      if (log10(v) > d1 + 1e-9) break;
      double y = plot_y(&g, v);
      fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n", L, y, L + pw, y,
              k == 0 ? "#bbb" : "#eee");
      char lab[32];
      if (v >= 1e6) snprintf(lab, sizeof(lab), "%g s", v / 1e6);
      else if (v >= 1e3) snprintf(lab, sizeof(lab), "%g ms", v / 1e3);
      else snprintf(lab, sizeof(lab), "%g us", v);
      fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", L - 6, y + 4, lab);
    }
  }
  /* x axis */
  fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", L, T + ph, L + pw, T + ph);
  fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>\n", L, T, L, T + ph);
  for (size_t j = 0; j < nx; j++) {
    double x = plot_x(&g, j);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%g</text>\n", x, T + ph + 18, xs[j]);
  }
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n", L + pw / 2, T + ph + 44,
          open_loop ? "offered rate (requests/s)" : "concurrency (clients)");
  fprintf(f, "<text transform=\"translate(20 %.1f) rotate(-90)\" text-anchor=\"middle\">latency (log scale)</text>\n",
          T + ph / 2);
  /* series: per transport x percentile */
  for (int t = 0; t < 3; t++) {
    for (int k = 0; k < 5; k++) {
      int any = 0;
      for (size_t j = 0; j < nx; j++) {
        for (size_t i = 0; i < n; i++) {
          if ((int)r[i].transport != t || load_x(&r[i]) != xs[j] || r[i].lat_ns.count == 0) continue;
          double p[5];
          pcts(&r[i], p);
          double x = plot_x(&g, j), y = plot_y(&g, p[k]);
          if (!any) fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s%s%s%s points=\"",
                            colors[t], widths[k], k == 4 ? " stroke-opacity=\"0.5\"" : "",
                            *dashes[k] ? " stroke-dasharray=\"" : "", dashes[k], *dashes[k] ? "\"" : "");
          fprintf(f, "%s%.1f,%.1f", any ? " " : "", x, y);
          any = 1;
          break;
        }
      }
      if (any) fprintf(f, "\"/>\n");
      /* markers with tooltips */
      for (size_t i = 0; i < n; i++) {
        if ((int)r[i].transport != t || r[i].lat_ns.count == 0) continue;
        size_t j = 0;
        while (j < nx && xs[j] != load_x(&r[i])) j++;
        double p[5];
        pcts(&r[i], p);
        double x = plot_x(&g, j), y = plot_y(&g, p[k]);
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"><title>%s %s @ %g: %.1f us</title></circle>\n",
                x, y, colors[t], vr_transport_name((vr_transport_t)t), pnames[k], xs[j], p[k]);
      }
    }
  }
  /* legend */
  double lx = L + pw + 20, ly = T + 10;
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-weight=\"bold\">transport</text>\n", lx, ly);
  ly += 18;
  for (int t = 0; t < 3; t++) {
    int present = 0;
    for (size_t i = 0; i < n; i++) present |= (int)r[i].transport == t;
    if (!present) continue;
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"24\" height=\"4\" fill=\"%s\"/>\n", lx, ly - 6, colors[t]);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", lx + 32, ly, vr_transport_name((vr_transport_t)t));
    ly += 18;
  }
  ly += 10;
  fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-weight=\"bold\">percentile</text>\n", lx, ly);
  ly += 18;
  for (int k = 0; k < 5; k++) {
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\" stroke-width=\"%s\"%s%s%s%s/>\n",
            lx, ly - 4, lx + 24, ly - 4, widths[k], k == 4 ? " stroke-opacity=\"0.5\"" : "",
            *dashes[k] ? " stroke-dasharray=\"" : "", dashes[k], *dashes[k] ? "\"" : "");
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%s</text>\n", lx + 32, ly, pnames[k]);
    ly += 18;
  }
  fprintf(f, "</svg>\n");
  free(xs);
  int ok = !ferror(f);
  ok = fclose(f) == 0 && ok;
  if (!ok) {
    vr_log(VR_LOG_ERROR, "writing %s failed", path);
    return VR_ERR_IO;
  }
  return 0;
}
