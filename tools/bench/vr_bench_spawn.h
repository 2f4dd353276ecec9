/* vr_bench_spawn.h: --spawn-server: start verl-reward-server on a fresh shm
 * name and a free port, wait until GET /ready answers 200, stop it with
 * SIGTERM afterwards (SIGKILL after a grace period).
 *
 * Not thread-safe; one spawned server per bench process. While a server is
 * spawned, SIGINT/SIGTERM to the bench forward SIGTERM to it before the bench
 * dies, and the kernel sends it SIGTERM (PR_SET_PDEATHSIG) if the bench dies any
 * other way, so no server is left behind. */
#ifndef VR_BENCH_SPAWN_H
#define VR_BENCH_SPAWN_H

#include <stdint.h>
#include <sys/types.h>

typedef struct vr_spawned {
  pid_t pid;
  char shm_name[64];
  uint16_t port;
  char log_path[1024]; /* the server's stdout + stderr */
} vr_spawned_t;

/* Splits args like a shell would for plain words and '...' / "..." quotes (no
 * expansions), appends --shm-name NAME --port PORT and execs server_bin with its
 * stdout and stderr in log_path (NULL: $TMPDIR, else /tmp, /NAME.log; truncated),
 * so the server's log never mixes with the bench's output.
 * Waits up to ready_timeout_s for /ready. 0, or VR_ERR_PARSE (bad quoting),
 * VR_ERR_IO (log not writable, exec failed / server exited: its exit status and the
 * log's last lines are logged), VR_ERR_TIMEOUT (not ready in time; the server is killed). */
int vr_spawn_server(const char *server_bin, const char *args, const char *log_path, double ready_timeout_s,
                    vr_spawned_t *out);

/* SIGTERM, wait up to grace_s, then SIGKILL. Returns 0 when the server exited
 * with status 0 after SIGTERM, VR_ERR_INTERNAL otherwise (logged). */
int vr_spawn_stop(vr_spawned_t *s, double grace_s);

/* Splits a command string into a NULL-terminated argv (malloc'd; free with
 * vr_split_free). 0 or VR_ERR_PARSE / VR_ERR_NOMEM. Exposed for tests. */
int vr_split_args(const char *s, char ***argv_out, int *argc_out);
void vr_split_free(char **argv);

#endif
