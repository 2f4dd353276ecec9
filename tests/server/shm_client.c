/* shm_client.c: the shared-memory side of the server tests (driven by test_server.py).
 *
 *   vr_test_shm_client score NAME < body.json
 *       body as for HTTP POST /v1/score ({"input_ids": [[...]], "extras": [{...}]});
 *       prints {"status": "VR_OK", "bad_seq": -1, "scores": [...], "components": {...},
 *       "queue_us": N, "compute_us": N} (scores "%.9g", NaN as null).
 *   vr_test_shm_client flood NAME CLIENTS INFLIGHT REQUESTS SEQS LEN [READY_FILE]
 *       CLIENTS threads, each with its own lane, keep up to INFLIGHT requests of
 *       SEQS sequences of LEN tokens in flight until each has sent REQUESTS; every
 *       score is checked against vr_checksum_score when the server runs --model
 *       checksum (vocab_size 0). READY_FILE is created once every client has its
 *       first INFLIGHT requests submitted. Prints one JSON line of counts by status;
 *       exit 0 when every submitted request got an answer.
 *   vr_test_shm_client rounds NAME SEQFILE THREADS REQ_SEQS WARMUP ITERS
 *       a fixed workload in rounds (tools/bench_vs_transformers.py's service path): SEQFILE
 *       holds the sequences (VRSEQ1: magic, u32 n, u32 lengths[n], i32 ids); sequence i
 *       belongs to thread i % THREADS, each thread on its own lane submits its share as
 *       requests of REQ_SEQS sequences (0: one request) all at once and waits for them; a
 *       round starts with every thread at a barrier and ends when the last answer is in.
 *       WARMUP untimed rounds, then ITERS timed ones. Prints one JSON object: per-round wall
 *       ms, their median, the requests' mean queue_us / compute_us and the last round's scores
 *       in sequence order; exit 0 when every request of every round was answered VR_OK. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "verl_reward/client.h"
#include "vr_checksum.h"
#include "vr_rules.h"

static void print_floats(const float *v, uint32_t n, uint32_t stride) {
  printf("[");
  for (uint32_t i = 0; i < n; i++) {
    float x = v[(size_t)i * stride];
    if (isfinite(x)) printf(i ? ",%.9g" : "%.9g", (double)x);
    else printf(i ? ",null" : "null");
  }
  printf("]");
}

static char *read_all(FILE *f, size_t *len) {
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap);
  for (size_t r; b && (r = fread(b + n, 1, cap - n, f)) > 0;) {
    n += r;
    if (n == cap) b = realloc(b, cap *= 2);
  }
  *len = n;
  return b;
}

static int cmd_score(const char *name) {
  size_t len;
  char *body = read_all(stdin, &len);
  cJSON *root = body ? cJSON_ParseWithLength(body, len) : NULL;
  free(body);
  if (!root) {
    fprintf(stderr, "score: stdin is not JSON\n");
    return 2;
  }
  const cJSON *ids = cJSON_GetObjectItem(root, "input_ids"), *ex = cJSON_GetObjectItem(root, "extras");
  uint32_t n = (uint32_t)(ids ? cJSON_GetArraySize(ids) : cJSON_GetArraySize(ex));
  uint32_t *cu = calloc(n + 1, sizeof *cu);
  size_t total = 0;
  for (uint32_t i = 0; i < n && ids; i++) total += (size_t)cJSON_GetArraySize(cJSON_GetArrayItem(ids, (int)i));
  int32_t *tok = calloc(total + 1, sizeof *tok);
  uint8_t **blobs = calloc(n, sizeof *blobs);
  uint32_t *blen = calloc(n, sizeof *blen);
  size_t pos = 0;
  for (uint32_t i = 0; i < n; i++) {
    const cJSON *seq = ids ? cJSON_GetArrayItem(ids, (int)i) : NULL, *t;
    if (seq) cJSON_ArrayForEach(t, seq) tok[pos++] = (int32_t)t->valuedouble;
    cu[i + 1] = (uint32_t)pos;
    const cJSON *e = ex ? cJSON_GetArrayItem(ex, (int)i) : NULL;
    if (e && cJSON_IsObject(e)) {
      vr_extras_t x;
      vr_extras_init(&x);
      char err[128];
      size_t bl = 0;
      if (vr_extras_from_json(e, &x, err, sizeof err) != 0 || vr_extras_pack_msgpack(&x, &blobs[i], &bl) != 0) {
        fprintf(stderr, "score: extras[%u]: %s\n", i, err);
        return 2;
      }
      blen[i] = (uint32_t)bl;
      vr_extras_free(&x);
    }
  }
  cJSON_Delete(root);
  vr_client_options_t o;
  vr_client_options_init(&o);
  o.connect_timeout_us = 5000000;
  vr_client_t *c;
  int rc = vr_client_connect(name, &o, &c);
  if (rc) {
    printf("{\"status\":\"%s\",\"message\":\"connect: %s\"}\n", vr_status_name(rc), vr_client_last_error());
    return 1;
  }
  vr_batch_t b = {.n_seqs = n, .token_ids = tok, .cu_seqlens = cu,
                  .extras = ex ? (const uint8_t *const *)blobs : NULL, .extras_len = ex ? blen : NULL};
  float *scores = calloc(n ? n : 1, sizeof *scores);
  float *comps = calloc((size_t)(n ? n : 1) * VR_MAX_COMPONENTS, sizeof *comps);
  vr_request_info_t info;
  memset(&info, 0, sizeof info);
  info.bad_seq = -1;
  rc = vr_client_score(c, &b, scores, comps, &info);
  printf("{\"status\":\"%s\",\"bad_seq\":%d,\"queue_us\":%u,\"compute_us\":%u", vr_status_name(rc), info.bad_seq,
         info.queue_us, info.compute_us);
  if (rc == 0) {
    printf(",\"scores\":");
    print_floats(scores, n, 1);
    if (info.n_components) {
      printf(",\"components\":{");
      for (uint32_t k = 0; k < info.n_components; k++) {
        printf("%s\"%s\":", k ? "," : "", info.component_names[k]);
        print_floats(comps + k, n, VR_MAX_COMPONENTS);
      }
      printf("}");
    }
  } else {
    printf(",\"message\":\"%s\"", vr_client_last_error());
  }
  printf("}\n");
  vr_client_close(c);
  for (uint32_t i = 0; i < n; i++) free(blobs[i]);
  free(blobs);
  free(blen);
  free(tok);
  free(cu);
  free(scores);
  free(comps);
  return 0;
}

/* ---- flood ---- */

typedef struct flood {
  const char *name;
  int inflight, requests, seqs, len;
  pthread_barrier_t submitted;
  /* under mu: the next client's number (its token ids' seed), then the results */
  pthread_mutex_t mu;
  int next_client;
  long ok, shutting_down, overloaded, other, mismatch, connect_failed, unanswered;
} flood_t;

typedef struct slot {
  uint64_t id;
  int32_t *ids;
  uint32_t *cu;
} slot_t;

static uint64_t rng(uint64_t *s) { return vr_checksum_mix64(*s += 0x9e3779b97f4a7c15ull); }

static void fill(slot_t *sl, const flood_t *f, uint64_t *seed, uint32_t vocab) {
  sl->cu[0] = 0;
  for (int i = 0; i < f->seqs; i++) {
    for (int j = 0; j < f->len; j++) sl->ids[i * f->len + j] = (int32_t)(rng(seed) % vocab);
    sl->cu[i + 1] = (uint32_t)((i + 1) * f->len);
  }
}

static void *flood_main(void *arg) {
  flood_t *f = arg;
  pthread_mutex_lock(&f->mu);
  uint64_t seed = 1 + (uint64_t)f->next_client++; /* fixed per client: the same ids on every run */
  pthread_mutex_unlock(&f->mu);
  vr_client_options_t o;
  vr_client_options_init(&o);
  o.connect_timeout_us = 10000000;
  vr_client_t *c = NULL;
  int rc = vr_client_connect(f->name, &o, &c);
  long ok = 0, sd = 0, ov = 0, other = 0, mism = 0, unanswered = 0;
  int barrier_done = 0;
  if (rc) {
    fprintf(stderr, "flood: connect: %s (%s)\n", vr_status_name(rc), vr_client_last_error());
    pthread_barrier_wait(&f->submitted);
    pthread_mutex_lock(&f->mu);
    f->connect_failed++;
    pthread_mutex_unlock(&f->mu);
    return NULL;
  }
  vr_limits_t lim;
  vr_client_limits(c, &lim);
  int checksum = lim.vocab_size == 0;
  uint32_t vocab = lim.vocab_size ? lim.vocab_size : 32000;
  slot_t *slots = calloc((size_t)f->inflight, sizeof *slots);
  for (int k = 0; k < f->inflight; k++) {
    slots[k].ids = calloc((size_t)f->seqs * (size_t)f->len, sizeof(int32_t));
    slots[k].cu = calloc((size_t)f->seqs + 1, sizeof(uint32_t));
  }
  float *scores = calloc((size_t)f->seqs, sizeof *scores);
  int sent = 0, head = 0, live = 0;
  while (sent < f->requests || live > 0) {
    /* submit while there is room */
    while (sent < f->requests && live < f->inflight) {
      slot_t *sl = &slots[(head + live) % f->inflight];
      fill(sl, f, &seed, vocab);
      vr_batch_t b = {.n_seqs = (uint32_t)f->seqs, .token_ids = sl->ids, .cu_seqlens = sl->cu};
      rc = vr_client_submit(c, &b, &sl->id);
      if (rc == VR_ERR_BUSY) break; /* ring or arena full: wait for the oldest first */
      sent++;
      if (rc == VR_ERR_SHUTTING_DOWN || rc == VR_ERR_SERVER_GONE) sd++;
      else if (rc) other++;
      else live++;
    }
    if (!barrier_done && (live >= f->inflight || sent >= f->requests)) {
      pthread_barrier_wait(&f->submitted); /* this client's first window is out */
      barrier_done = 1;
    }
    if (live == 0) {
      if (sent < f->requests && rc == VR_ERR_BUSY) usleep(100);
      continue;
    }
    slot_t *sl = &slots[head];
    vr_request_info_t info;
    rc = vr_client_wait(c, sl->id, 60000000, scores, NULL, &info);
    if (rc == VR_ERR_TIMEOUT) {
      unanswered++;
    } else if (rc == 0) {
      ok++;
      if (checksum)
        for (int i = 0; i < f->seqs; i++)
          if (scores[i] != vr_checksum_score(sl->ids + sl->cu[i], sl->cu[i + 1] - sl->cu[i])) mism++;
    } else if (rc == VR_ERR_SHUTTING_DOWN || rc == VR_ERR_SERVER_GONE) {
      sd++;
    } else if (rc == VR_ERR_OVERLOADED) {
      ov++;
    } else {
      if (other < 5) fprintf(stderr, "flood: request failed: %s (%s)\n", vr_status_name(rc), vr_client_last_error());
      other++;
    }
    head = (head + 1) % f->inflight;
    live--;
  }
  if (!barrier_done) pthread_barrier_wait(&f->submitted);
  vr_client_close(c);
  for (int k = 0; k < f->inflight; k++) {
    free(slots[k].ids);
    free(slots[k].cu);
  }
  free(slots);
  free(scores);
  pthread_mutex_lock(&f->mu);
  f->ok += ok;
  f->shutting_down += sd;
  f->overloaded += ov;
  f->other += other;
  f->mismatch += mism;
  f->unanswered += unanswered;
  pthread_mutex_unlock(&f->mu);
  return NULL;
}

static int cmd_flood(int argc, char **argv) {
  if (argc < 8) {
    fprintf(stderr, "usage: flood NAME CLIENTS INFLIGHT REQUESTS SEQS LEN [READY_FILE]\n");
    return 2;
  }
  flood_t f = {.name = argv[2], .inflight = atoi(argv[4]), .requests = atoi(argv[5]), .seqs = atoi(argv[6]),
               .len = atoi(argv[7])};
  int clients = atoi(argv[3]);
  if (clients < 1 || f.inflight < 1 || f.requests < 1 || f.seqs < 1 || f.len < 1) return 2;
  pthread_mutex_init(&f.mu, NULL);
  pthread_barrier_init(&f.submitted, NULL, (unsigned)clients + 1);
  pthread_t *th = calloc((size_t)clients, sizeof *th);
  for (int i = 0; i < clients; i++) pthread_create(&th[i], NULL, flood_main, &f);
  pthread_barrier_wait(&f.submitted);
  if (argc > 8) {
    int fd = open(argv[8], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) close(fd);
  }
  for (int i = 0; i < clients; i++) pthread_join(th[i], NULL);
  printf("{\"ok\":%ld,\"shutting_down\":%ld,\"overloaded\":%ld,\"other\":%ld,\"mismatch\":%ld,"
         "\"connect_failed\":%ld,\"unanswered\":%ld}\n",
         f.ok, f.shutting_down, f.overloaded, f.other, f.mismatch, f.connect_failed, f.unanswered);
  free(th);
  pthread_barrier_destroy(&f.submitted);
  return f.unanswered || f.connect_failed ? 1 : 0;
}

/* ---- rounds ---- */

typedef struct rounds {
  const char *name;
  uint32_t n, threads, req_seqs;
  int warmup, iters;
  const uint32_t *len;
  const int32_t *ids;
  const uint64_t *off;       /* sequence i's ids at ids + off[i] */
  float *scores;             /* n, the last round's */
  pthread_barrier_t start, end;
  double *t0, *t1;           /* (rounds, threads) seconds */
  pthread_mutex_t mu;
  long failed;
  double queue_us, compute_us;
  long answered;
} rounds_t;

typedef struct rounds_arg {
  rounds_t *r;
  uint32_t t;
} rounds_arg_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *rounds_main(void *arg) {
  rounds_arg_t *a = arg;
  rounds_t *r = a->r;
  const uint32_t t = a->t, mine = (r->n - t + r->threads - 1) / r->threads; /* sequences t, t + T, ... */
  const uint32_t per = r->req_seqs && r->req_seqs < mine ? r->req_seqs : (mine ? mine : 1);
  const uint32_t n_req = mine ? (mine + per - 1) / per : 0;
  vr_client_options_t o;
  vr_client_options_init(&o);
  o.connect_timeout_us = 10000000;
  vr_client_t *c = NULL;
  long failed = 0, answered = 0;
  double qsum = 0, csum = 0;
  if (vr_client_connect(r->name, &o, &c) != 0) {
    fprintf(stderr, "rounds: connect: %s\n", vr_client_last_error());
    failed++;
  }
  /* the requests' packed ids, built once: request k holds this thread's sequences k*per .. */
  size_t tok = 0;
  for (uint32_t i = t; i < r->n; i += r->threads) tok += r->len[i];
  int32_t *ids = malloc((tok ? tok : 1) * sizeof *ids);
  uint32_t *cu = malloc(((size_t)mine + n_req + 1) * sizeof *cu);
  uint32_t *first = malloc(((size_t)n_req + 1) * sizeof *first); /* request k: cu + first[k] + k */
  uint64_t *rid = malloc(((size_t)n_req + 1) * sizeof *rid);
  float *sc = malloc(((size_t)mine + 1) * sizeof *sc);
  size_t pos = 0;
  for (uint32_t k = 0, q = 0; k < n_req; k++) {
    first[k] = q;
    uint32_t *kc = cu + q + k;
    kc[0] = 0;
    for (uint32_t m = 0; m < per && q < mine; m++, q++) {
      uint32_t i = t + q * r->threads;
      memcpy(ids + pos, r->ids + r->off[i], (size_t)r->len[i] * sizeof *ids);
      pos += r->len[i];
      kc[m + 1] = kc[m] + r->len[i];
    }
  }
  first[n_req] = mine;
  for (int it = 0; it < r->warmup + r->iters; it++) {
    pthread_barrier_wait(&r->start);
    double t0 = now_s();
    uint32_t sent = 0, got = 0;
    size_t base = 0;
    while (c && got < n_req) {
      while (sent < n_req) { /* everything out at once, as far as the lane takes it */
        uint32_t ns = first[sent + 1] - first[sent];
        const uint32_t *kc = cu + first[sent] + sent;
        vr_batch_t b = {.n_seqs = ns, .token_ids = ids + base, .cu_seqlens = kc}; /* requests lie back to back */
        int rc = vr_client_submit(c, &b, &rid[sent]);
        if (rc == VR_ERR_BUSY && sent > got) break; /* ring or arena full: collect the oldest first */
        if (rc) {
          fprintf(stderr, "rounds: submit: %s (%s)\n", vr_status_name(rc), vr_client_last_error());
          failed++;
          got = sent = n_req;
          break;
        }
        base += kc[ns];
        sent++;
      }
      if (got >= sent) break;
      vr_request_info_t info;
      memset(&info, 0, sizeof info);
      int rc = vr_client_wait(c, rid[got], 60000000, sc + first[got], NULL, &info);
      if (rc) {
        if (failed < 5)
          fprintf(stderr, "rounds: request failed: %s (%s)\n", vr_status_name(rc), vr_client_last_error());
        failed++;
      } else if (it >= r->warmup) {
        qsum += info.queue_us;
        csum += info.compute_us;
        answered++;
      }
      got++;
    }
    double t1 = now_s();
    if (it >= r->warmup) {
      r->t0[(size_t)(it - r->warmup) * r->threads + t] = t0;
      r->t1[(size_t)(it - r->warmup) * r->threads + t] = t1;
    }
    pthread_barrier_wait(&r->end);
  }
  for (uint32_t q = 0; q < mine; q++) r->scores[t + q * r->threads] = sc[q];
  if (c) vr_client_close(c);
  free(ids);
  free(cu);
  free(first);
  free(rid);
  free(sc);
  pthread_mutex_lock(&r->mu);
  r->failed += failed;
  r->queue_us += qsum;
  r->compute_us += csum;
  r->answered += answered;
  pthread_mutex_unlock(&r->mu);
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int cmd_rounds(int argc, char **argv) {
  if (argc < 8) {
    fprintf(stderr, "usage: rounds NAME SEQFILE THREADS REQ_SEQS WARMUP ITERS\n");
    return 2;
  }
  rounds_t r = {.name = argv[2], .threads = (uint32_t)atoi(argv[4]), .req_seqs = (uint32_t)atoi(argv[5]),
                .warmup = atoi(argv[6]), .iters = atoi(argv[7])};
  FILE *f = fopen(argv[3], "rb");
  char magic[8];
  if (!f || fread(magic, 1, 8, f) != 8 || memcmp(magic, "VRSEQ1\0\0", 8) != 0 || fread(&r.n, 4, 1, f) != 1 ||
      r.n == 0 || r.n > (1u << 24)) {
    fprintf(stderr, "rounds: %s: not a VRSEQ1 file (magic, then a count of 1 .. 2^24 sequences)\n", argv[3]);
    if (f) fclose(f);
    return 2;
  }
  uint32_t *len = malloc((size_t)r.n * sizeof *len);
  uint64_t *off = malloc(((size_t)r.n + 1) * sizeof *off);
  if (!len || !off || fread(len, 4, r.n, f) != r.n) {
    fprintf(stderr, "rounds: %s: truncated lengths\n", argv[3]);
    return 2;
  }
  off[0] = 0;
  for (uint32_t i = 0; i < r.n; i++) {
    if (len[i] == 0 || len[i] > (1u << 24)) {
      fprintf(stderr, "rounds: %s: sequence %u has length %u (1 .. 2^24)\n", argv[3], i, len[i]);
      return 2;
    }
    off[i + 1] = off[i] + len[i];
  }
  int32_t *ids = malloc((size_t)off[r.n] * sizeof *ids);
  if (!ids || fread(ids, 4, off[r.n], f) != off[r.n]) {
    fprintf(stderr, "rounds: %s: truncated token ids (%llu expected)\n", argv[3], (unsigned long long)off[r.n]);
    return 2;
  }
  fclose(f);
  if (r.threads < 1 || r.threads > 256 || r.warmup < 0 || r.iters < 1 || r.iters > 100000) return 2;
  r.len = len;
  r.ids = ids;
  r.off = off;
  r.scores = calloc(r.n, sizeof *r.scores);
  r.t0 = calloc((size_t)r.iters * r.threads, sizeof *r.t0);
  r.t1 = calloc((size_t)r.iters * r.threads, sizeof *r.t1);
  pthread_mutex_init(&r.mu, NULL);
  pthread_barrier_init(&r.start, NULL, r.threads);
  pthread_barrier_init(&r.end, NULL, r.threads);
  pthread_t *th = calloc(r.threads, sizeof *th);
  rounds_arg_t *args = calloc(r.threads, sizeof *args);
  for (uint32_t t = 0; t < r.threads; t++) {
    args[t] = (rounds_arg_t){.r = &r, .t = t};
    pthread_create(&th[t], NULL, rounds_main, &args[t]);
  }
  for (uint32_t t = 0; t < r.threads; t++) pthread_join(th[t], NULL);
  double *ms = calloc((size_t)r.iters, sizeof *ms);
  printf("{\"threads\":%u,\"req_seqs\":%u,\"n_seqs\":%u,\"tokens\":%llu,\"rounds_ms\":[", r.threads, r.req_seqs, r.n,
         (unsigned long long)off[r.n]);
  for (int it = 0; it < r.iters; it++) {
    double a = r.t0[(size_t)it * r.threads], z = r.t1[(size_t)it * r.threads];
    for (uint32_t t = 1; t < r.threads; t++) {
      if (r.t0[(size_t)it * r.threads + t] < a) a = r.t0[(size_t)it * r.threads + t];
      if (r.t1[(size_t)it * r.threads + t] > z) z = r.t1[(size_t)it * r.threads + t];
    }
    ms[it] = (z - a) * 1e3;
    printf(it ? ",%.4f" : "%.4f", ms[it]);
  }
  qsort(ms, (size_t)r.iters, sizeof *ms, cmp_double);
  printf("],\"median_ms\":%.4f,\"min_ms\":%.4f,\"failed\":%ld,\"mean_queue_us\":%.1f,\"mean_compute_us\":%.1f,"
         "\"scores\":", ms[r.iters / 2], ms[0], r.failed, r.answered ? r.queue_us / r.answered : 0.0,
         r.answered ? r.compute_us / r.answered : 0.0);
  print_floats(r.scores, r.n, 1);
  printf("}\n");
  free(ms);
  free(th);
  free(args);
  free(r.scores);
  free(r.t0);
  free(r.t1);
  free(len);
  free(off);
  free(ids);
  return r.failed ? 1 : 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc >= 3 && strcmp(argv[1], "score") == 0) return cmd_score(argv[2]);
  if (argc >= 2 && strcmp(argv[1], "flood") == 0) return cmd_flood(argc, argv);
  if (argc >= 2 && strcmp(argv[1], "rounds") == 0) return cmd_rounds(argc, argv);
  fprintf(stderr, "usage: vr_test_shm_client score NAME < body.json | flood NAME CLIENTS INFLIGHT REQUESTS SEQS LEN "
          "[READY_FILE] | rounds NAME SEQFILE THREADS REQ_SEQS WARMUP ITERS\n");
  return 2;
}
