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
 *       exit 0 when every submitted request got an answer. */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc >= 3 && strcmp(argv[1], "score") == 0) return cmd_score(argv[2]);
  if (argc >= 2 && strcmp(argv[1], "flood") == 0) return cmd_flood(argc, argv);
  fprintf(stderr, "usage: vr_test_shm_client score NAME < body.json | flood NAME CLIENTS INFLIGHT REQUESTS SEQS LEN [READY_FILE]\n");
  return 2;
}
