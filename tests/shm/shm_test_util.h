/* shm_test_util.h: helpers for the shm tests: unique names, starting and
 * killing real server processes (vr_shm_test_server), random batches checked
 * against the checksum scorer. Every pid started here is killed (SIGKILL) and
 * every name registered is unlinked at exit, even when a test fails. Children
 * forked by tests must leave with _exit(). Not thread-safe. */
#ifndef SHM_TEST_UTIL_H
#define SHM_TEST_UTIL_H

#include <stdint.h>
#include <sys/types.h>

#include "verl_reward/client.h"
#include "vr_shm.h"

/* The deadline for what must happen but takes no fixed time (a server coming up, an
 * answer, a lane reclaimed): a hang guard, never a speed requirement. A passing run takes
 * a small fraction of it on any machine; only a hang, a lost wake-up or a missed event
 * reaches it. */
#define TU_HANG_GUARD_US 60000000u
#define TU_HANG_GUARD_NS (1000ull * TU_HANG_GUARD_US)

typedef struct tu_server {
  pid_t pid;
  char name[64];
  char stats[256];
  char log[256];
} tu_server_t;

/* "vrt_<tag>_<pid>", registered for unlinking at exit. */
void tu_name(char *buf, size_t n, const char *tag);

/* Starts vr_shm_test_server --name name --stats ... plus extra args (NULL
 * terminated, may be NULL); its log goes to $TMPDIR/<name>.log. Waits until a
 * client can connect (up to TU_HANG_GUARD_US). Returns 0 or -1. */
int tu_server_start(tu_server_t *s, const char *name, const char *const *extra);

/* Sends sig and reaps the server; returns its wait status. */
int tu_server_stop(tu_server_t *s, int sig);

/* Reads "key N" from the server's stats file; -1 if absent. */
int tu_server_stat(const tu_server_t *s, const char *key, uint64_t *v);
/* Polls the stats file (rewritten every 100 ms) until key == want: 0 (took, may be NULL: the
 * seconds it took), or -1 after TU_HANG_GUARD_US with the last value printed. */
int tu_server_wait_stat(const tu_server_t *s, const char *key, uint64_t want, double *took);

/* Registers a child pid to SIGKILL at exit (servers are registered already). */
void tu_track_pid(pid_t pid);
void tu_untrack_pid(pid_t pid);

/* Reads one byte from fd (a pipe children write to), waiting up to TU_HANG_GUARD_US:
 * 0, or -1 on timeout, EOF or error. */
int tu_read_byte(int fd, char *byte);

/* Counts lines of the server log containing needle. */
int tu_log_count(const tu_server_t *s, const char *needle);

/* A random batch: n_seqs sequences of lengths in [min_len, max_len]. Owns its
 * arrays; tu_batch_free() releases them. */
typedef struct tu_batch {
  vr_batch_t b;
  int32_t *ids;
  uint32_t *cu;
} tu_batch_t;
void tu_batch_random(tu_batch_t *tb, uint64_t *rng, uint32_t n_seqs, uint32_t min_len, uint32_t max_len,
                     uint32_t vocab);
void tu_batch_free(tu_batch_t *tb);
/* Number of sequences whose score differs from the checksum (0 = all good). */
uint32_t tu_batch_mismatches(const tu_batch_t *tb, const float *scores);

uint64_t tu_rand(uint64_t *s);
/* Makes SIGUSR1 end tu_score_until_usr1() loops (call before forking them). */
void tu_stop_on_usr1(void);
/* A well-behaved client for fault tests: connects and scores random batches
 * (1..max_seqs sequences of 1..max_len tokens) until SIGUSR1, writing one byte to
 * ready_fd (when >= 0) once its first batch is scored, so the parent can wait for
 * that before it starts the faults. Returns 0 when every score matched its
 * checksum and at least one batch was scored. */
int tu_score_until_usr1(const char *name, uint64_t seed, uint32_t max_seqs, uint32_t max_len, int ready_fd);

/* Defaults plus name, lanes and arena: an in-process server's config. */
void tu_shm_config(vr_shm_config_t *cfg, const char *name, uint32_t n_lanes, uint64_t arena_bytes);

/* Speaks the rendezvous by hand, as any local process could: connects to name's socket and
 * receives the hello's fds (header, doorbell, lane; caller closes). Returns how many came
 * (3 when the server gave a lane), or -1. The lane stays this process's until it dies. */
int tu_receive_fds(const char *name, int fds[3]);

/* Connects with a connect timeout of TU_HANG_GUARD_US and the given spin budget. */
int tu_connect(const char *name, uint32_t spin_us, vr_client_t **out);

#endif
