/* vr_notify.h: telling a supervisor where start-up stands.
 *
 * Two channels, both optional:
 *   - sd_notify (systemd Type=notify, or anything that speaks its protocol): when the
 *     NOTIFY_SOCKET environment variable is set, each message is one datagram of
 *     newline-separated KEY=VALUE lines sent to that AF_UNIX socket ("@name" = abstract
 *     namespace). We send STATUS=... on each start-up step, READY=1 (with MAINPID) once
 *     scoring is possible, STOPPING=1 when a drain starts. The protocol is implemented here
 *     (a datagram, ~40 lines) instead of linking libsystemd: the container image and
 *     non-systemd hosts need no extra library, and the behaviour without NOTIFY_SOCKET
 *     (nothing is sent) is the same as sd_notify()'s.
 *   - a ready file (--ready-file PATH): written to PATH.tmp and renamed onto PATH once ready
 *     (so a reader never sees a partial file), removed at exit. Its content is
 *     "pid=<pid>\nhttp=<url or off>\nshm=</name or off>\n"; it is also removed when a
 *     drain starts, so it exists exactly while GET /ready answers 200.
 *
 * sd_notify failures are logged at WARN and never stop the server (a supervisor that cannot
 * be told is not a reason to refuse requests); a ready file that cannot be written is an
 * error like an unwritable --pid-file (the server exits 1: whoever waits on it would wait
 * forever). Not thread-safe: call from one thread (the event
 * loop's) or before threads start. The environment is read once, by vr_notify_init. */
#ifndef VR_NOTIFY_H
#define VR_NOTIFY_H

typedef struct vr_notify {
  int fd;                 /* AF_UNIX datagram socket, -1 when NOTIFY_SOCKET is unset */
  char path[108];         /* sun_path; path[0] == 0 with abstract set: the abstract name follows */
  unsigned path_len;      /* bytes of path that are the address */
} vr_notify_t;

/* Reads NOTIFY_SOCKET (and unsets it, as sd_notify(unset_environment=1) does, so children
 * do not notify on our behalf). 0, or VR_ERR_INVAL when the variable is malformed (logged;
 * the server then runs without notifications). */
int vr_notify_init(vr_notify_t *n);

/* Sends text (e.g. "READY=1\nSTATUS=ready") when NOTIFY_SOCKET was set; else does nothing.
 * Returns 0, or VR_ERR_IO (logged at WARN). */
int vr_notify_send(vr_notify_t *n, const char *text);

void vr_notify_free(vr_notify_t *n);

/* Writes content to path atomically (path.tmp, fsync, rename). 0 or VR_ERR_IO (logged). */
int vr_ready_file_write(const char *path, const char *content);

#endif /* VR_NOTIFY_H */
