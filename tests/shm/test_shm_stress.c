/* test_shm_stress: 8 client processes x N requests of random length 1..4096
 * against one server process (vr_shm_test_server, 2 worker threads). Every
 * score must equal its request's checksum; every request is answered exactly
 * once (each id is collected once, a second collect says NOT_FOUND, and the
 * server's served count equals the number of requests sent).
 *
 * N = 20000 per client in both passes (plain and ASan+UBSan); VR_SHM_STRESS_N
 * overrides it for quick local runs. Nothing here is timed: the run time is printed. Each client
 * keeps up to 8 requests in flight and collects them in a random order on
 * lanes of 8 slots, so the arena's out-of-order frees and its allocation FIFO
 * bound (VR_ERR_BUSY) are exercised. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm_test_util.h"
#include "vr_time.h"

#define N_CLIENTS 8
#define DEPTH 8

#define DEFAULT_N 20000

static int client_main(const char *name, int k, int n) {
  vr_client_t *c;
  if (tu_connect(name, 20, &c) != 0) {
    fprintf(stderr, "client %d: connect: %s\n", k, vr_client_last_error());
    return 1;
  }
  uint64_t rng = 1000 + (uint64_t)k;
  tu_batch_t tb[DEPTH];
  uint64_t id[DEPTH];
  int live[DEPTH] = {0};
  int sent = 0, done = 0;
  float sc[4];
  while (done < n) {
    /* fill the window */
    for (int s = 0; s < DEPTH && sent < n; s++) {
      if (live[s]) continue;
      tu_batch_random(&tb[s], &rng, 1, 1, 4096, 0);
      int rc = vr_client_submit(c, &tb[s].b, &id[s]);
      if (rc == VR_ERR_BUSY) {
        tu_batch_free(&tb[s]);
        break;
      }
      if (rc) {
        fprintf(stderr, "client %d: submit %d: %s\n", k, sent, vr_client_last_error());
        return 1;
      }
      live[s] = 1;
      sent++;
    }
    /* collect one at random */
    int s = (int)(tu_rand(&rng) % DEPTH);
    for (int t = 0; t < DEPTH && !live[s]; t++) s = (s + 1) % DEPTH;
    if (!live[s]) continue;
    vr_request_info_t info;
    int rc = vr_client_wait(c, id[s], TU_HANG_GUARD_US, sc, NULL, &info);
    if (rc) {
      fprintf(stderr, "client %d: wait: %s (%s)\n", k, vr_status_name(rc), vr_client_last_error());
      return 1;
    }
    if (info.n_seqs != 1 || tu_batch_mismatches(&tb[s], sc)) {
      fprintf(stderr, "client %d: request %d: score %.9g does not match its checksum\n", k, done, sc[0]);
      return 1;
    }
    if (vr_client_poll(c, id[s]) != VR_ERR_NOT_FOUND) {
      fprintf(stderr, "client %d: request id %llu still known after collecting it\n", k, (unsigned long long)id[s]);
      return 1;
    }
    tu_batch_free(&tb[s]);
    live[s] = 0;
    done++;
  }
  vr_client_close(c);
  return 0;
}

int main(void) {
  int n = DEFAULT_N;
  if (getenv("VR_SHM_STRESS_N")) n = atoi(getenv("VR_SHM_STRESS_N"));
  char name[64];
  tu_name(name, sizeof name, "stress");
  tu_server_t s;
  if (tu_server_start(&s, name, (const char *const[]){"--workers", "2", "--slots", "8", NULL}) != 0) return 1;
  uint64_t t0 = vr_now_ns();
  pid_t kids[N_CLIENTS];
  for (int k = 0; k < N_CLIENTS; k++) {
    kids[k] = fork();
    if (kids[k] == 0) _exit(client_main(name, k, n));
    tu_track_pid(kids[k]);
  }
  int failed = 0;
  for (int k = 0; k < N_CLIENTS; k++) {
    int st;
    waitpid(kids[k], &st, 0);
    tu_untrack_pid(kids[k]);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "client %d failed (status 0x%x)\n", k, st);
      failed = 1;
    }
  }
  double secs = (double)(vr_now_ns() - t0) / 1e9;
  /* the server frees an exited client's lane when its poll sees the socket close; wait for that
   * before stopping it, so a SIGTERM that lands before the last close was polled does not read as
   * a leak (a real leak still fails below, after the hang guard) */
  (void)tu_server_wait_stat(&s, "lanes", 0, NULL);
  int st = tu_server_stop(&s, SIGTERM);
  uint64_t served = 0, inflight = 1, lanes = 1;
  tu_server_stat(&s, "served", &served);
  tu_server_stat(&s, "inflight", &inflight);
  tu_server_stat(&s, "lanes", &lanes);
  printf("%d clients x %d requests in %.2f s; server served %llu, inflight %llu, lanes %llu\n", N_CLIENTS, n, secs,
         (unsigned long long)served, (unsigned long long)inflight, (unsigned long long)lanes);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fprintf(stderr, "server exited with status 0x%x (log %s)\n", st, s.log);
    failed = 1;
  }
  if (served != (uint64_t)N_CLIENTS * (uint64_t)n) {
    fprintf(stderr, "server served %llu requests, clients sent %llu\n", (unsigned long long)served,
            (unsigned long long)N_CLIENTS * n);
    failed = 1;
  }
  if (inflight != 0 || lanes != 0) {
    fprintf(stderr, "after the run: %llu in flight, %llu lanes leased (want 0, 0)\n", (unsigned long long)inflight,
            (unsigned long long)lanes);
    failed = 1;
  }
  printf(failed ? "FAILED\n" : "OK\n");
  return failed;
}
