/* vr_shm_admit.c: the rendezvous of the server half (verl_reward/protocol.h, section 3):
 * the abstract sockets at the name, the sealed memfds of the segment (header page,
 * doorbell page, one per given-out lane), and admission: the peer's credentials
 * against the policy, a fresh lane, the hello with the fds. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "verl_reward/status.h"
#include "vr_log.h"
#include "vr_proc.h"
#include "vr_shm_internal.h"

/* 1 when the peer may attach: the server's own uid; with mode's group bits,
 * a member of the server's group; with its other bits, anyone; and every
 * --allow-uid / --allow-gid (primary or supplementary group). */
static int peer_allowed(const vr_shm_server_t *s, int fd, const struct ucred *cr) {
  if (cr->uid == geteuid() || (s->cfg.mode & 0007u)) return 1;
  for (uint32_t k = 0; k < s->n_allow_uids; k++)
    if (cr->uid == s->allow_uids[k]) return 1;
  gid_t groups[256];
  socklen_t gl = sizeof groups;
  int ng = getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &gl) == 0 ? (int)(gl / sizeof(gid_t)) : 0;
  for (int k = -1; k < ng; k++) {
    gid_t g = k < 0 ? cr->gid : groups[k];
    if ((s->cfg.mode & 0070u) && g == getegid()) return 1;
    for (uint32_t j = 0; j < s->n_allow_gids; j++)
      if (g == s->allow_gids[j]) return 1;
  }
  return 0;
}

/* A memfd of bytes, every page allocated now (a memory limit fails here, not as
 * a fault later), mapped read-write and shared at fixed (NULL: anywhere; else
 * MAP_FIXED over what is there, which readers of that range never see
 * unmapped), then sealed with seals. Returns the fd and *map, or -1 (logged,
 * rate-limited: admission calls it for every client). */
static int memfd_sealed(vr_shm_server_t *s, const char *what, uint64_t bytes, unsigned seals, void *fixed, void **map) {
  char label[NAME_MAX + 32];
  snprintf(label, sizeof label, "verl-reward:%s:%s", s->name, what);
  int fd = memfd_create(label, MFD_CLOEXEC | MFD_ALLOW_SEALING);
  int e = fd < 0 ? errno : ftruncate(fd, (off_t)bytes) == 0 ? posix_fallocate(fd, 0, (off_t)bytes) : errno;
  void *m = MAP_FAILED;
  if (e == 0) {
    m = mmap(fixed, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (fixed ? MAP_FIXED : 0), fd, 0);
    if (m == MAP_FAILED) {
      e = errno;
      /* a failed MAP_FIXED may have removed what was there: the range must stay mapped
       * (other threads read it unlocked), so put anonymous memory back */
      if (fixed) mmap(fixed, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    }
  }
  if (e == 0 && fcntl(fd, F_ADD_SEALS, seals) != 0) e = errno;
  if (e != 0) {
    if (e == ENOSPC || e == EFBIG || e == ENOMEM)
      vr_log_limited(&s->refuse_log, VR_LOG_ERROR,
                     "not enough memory for the %s of segment /%s (%llu bytes). HINT: raise the memory limit of the "
                     "server's container/cgroup, or use a smaller arena (verl-reward-server --arena-mb MB)",
                     what, s->name, (unsigned long long)bytes);
    else
      vr_log_limited(&s->refuse_log, VR_LOG_ERROR, "memfd for the %s of segment /%s (%llu bytes): %s", what, s->name,
                     (unsigned long long)bytes, strerror(e));
    if (m != MAP_FAILED && !fixed) munmap(m, bytes);
    if (fd >= 0) close(fd);
    errno = e;
    return -1;
  }
  *map = m;
  return fd;
}

/* Lanes held by uid now (given out and not yet freed: active or quarantined). Liveness
 * thread only: the one writer of L->uid (lane_assign); state is read as a hint, as the
 * admission's free-lane scan does. */
static uint32_t lanes_of_uid(const vr_shm_server_t *s, uint32_t uid) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < s->cfg.n_lanes; i++)
    if (atomic_load(&s->lanes[i].state) != LANE_FREE && s->lanes[i].uid == uid) n++;
  return n;
}

/* Sends the hello (and fds) on a freshly accepted socket; never blocks. */
static int send_hello(int fd, const vr_shm_hello_t *hello, const int *fds, int nfds) {
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int) * 3)];
  } ctl;
  memset(&ctl, 0, sizeof ctl);
  struct iovec iov = {(void *)hello, sizeof *hello};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
  if (nfds > 0) {
    mh.msg_control = ctl.buf;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
    struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
    memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
  }
  return sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof *hello ? 0 : -1;
}

/* Gives lane i (free, lock held) to the client pid: a fresh sealed memfd replaces
 * the lane's memory in our mapping (the last client's pages stay with whoever
 * still maps them; nobody else ever sees them), with the lease written by us.
 * Returns the memfd (caller closes it once sent) or -1. */
static int lane_assign(vr_shm_server_t *s, uint32_t i, pid_t pid, uint32_t uid) {
  srv_lane_t *L = &s->lanes[i];
  void *m;
  int fd = memfd_sealed(s, "lane", s->lane_bytes, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL, L->sh, &m);
  if (fd < 0) return -1;
  L->pid = (uint32_t)pid;
  L->uid = uid;
  L->start = vr_proc_start_time(pid);
  L->req_tail = L->resp_head = L->inflight = 0;
  atomic_store(&L->sh->client_start_time, L->start);
  L->sh->client_uid = uid;
  atomic_store_explicit(&L->sh->lease, VR_SHM_LEASE(L->gen, (uint32_t)pid), memory_order_release);
  atomic_store_explicit(&L->state, LANE_ACTIVE, memory_order_release);
  vr_log(VR_LOG_DEBUG, "lane %u given to pid %d uid %u (generation %u)", i, (int)pid, uid, L->gen);
  return fd;
}

/* Answers every pending connection on a listener with a hello, then closes it.
 * On the rendezvous socket an admitted client gets [header, doorbell, its
 * lane] as SCM_RIGHTS; on the info socket everyone gets the hello alone (the
 * epoch and state, for a client that lost its server). Never blocks: the
 * accepted sockets are non-blocking and the hello fits any socket buffer. */
void vr_shm_admit_clients(vr_shm_server_t *s, int lfd, int info) {
  for (int k = 0; k < 64; k++) { /* a bounded batch per wake: the beat must go on */
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
        vr_log_limited(&s->refuse_log, VR_LOG_WARN, "accept on the rendezvous socket of /%s: %s", s->name,
                       strerror(errno));
      return;
    }
    struct ucred cr = {0, (uid_t)-1, (gid_t)-1};
    socklen_t crl = sizeof cr;
    int have_cred = getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &crl) == 0;
    uint32_t st = atomic_load(&s->state);
    vr_shm_hello_t hello = {VR_SHM_HELLO_MAGIC, VR_SHM_VERSION, 0, VR_SHM_HELLO_NO_LANE, s->epoch, st, 0};
    int fds[3] = {s->hdr_fd, s->bell_fd, -1}, nfds = 0;
    uint32_t lane = VR_SHM_HELLO_NO_LANE;
    if (info) {
      /* nothing but the hello */
    } else if (have_cred && cr.pid <= 0) { /* not visible in our pid namespace */
      hello.status = VR_ERR_PERM;
      vr_log_limited(&s->refuse_log, VR_LOG_WARN,
                     "refused a client of /%s (uid %u) from another pid namespace: lanes are reclaimed by pid. "
                     "HINT: run the server and its clients in one pid namespace (--pid=host, shareProcessNamespace)",
                     s->name, (unsigned)cr.uid);
    } else if (!have_cred || !peer_allowed(s, fd, &cr)) {
      hello.status = VR_ERR_PERM;
      vr_log_limited(&s->refuse_log, VR_LOG_WARN,
                     "refused a client of /%s: pid %d uid %u gid %u is not allowed (HINT: --allow-uid / --allow-gid, "
                     "or a group mode --shm-mode 0660)", s->name, (int)cr.pid, (unsigned)cr.uid, (unsigned)cr.gid);
    } else if (st != VR_SHM_ST_READY) {
      hello.status = st == VR_SHM_ST_STARTING ? VR_ERR_AGAIN : VR_ERR_SHUTTING_DOWN;
    } else if (lanes_of_uid(s, (uint32_t)cr.uid) >= s->lane_cap &&
               (vr_shm_reclaim_dead(s), lanes_of_uid(s, (uint32_t)cr.uid) >= s->lane_cap)) {
      /* (lanes its clients closed or left by dying count only until reclaimed: now) */
      hello.status = VR_ERR_NO_LANE;
      hello.lane_cap = s->lane_cap;
      vr_log_limited(&s->refuse_log, VR_LOG_WARN,
                     "refused a lane of /%s to pid %d: uid %u already holds %u lanes, the limit per uid (HINT: "
                     "--max-lanes-per-uid)", s->name, (int)cr.pid, (unsigned)cr.uid, s->lane_cap);
    } else {
      int reclaimed = 0;
    find_lane:
      hello.status = VR_ERR_NO_LANE;
      for (uint32_t i = 0; i < s->cfg.n_lanes && lane == VR_SHM_HELLO_NO_LANE; i++) {
        srv_lane_t *L = &s->lanes[i];
        if (atomic_load(&L->state) != LANE_FREE) continue;
        pthread_mutex_lock(&L->mu);
        if (L->state == LANE_FREE) {
          fds[2] = lane_assign(s, i, cr.pid, (uint32_t)cr.uid);
          if (fds[2] >= 0) lane = i;
          else hello.status = VR_ERR_NOSPACE;
        }
        pthread_mutex_unlock(&L->mu);
        if (hello.status == VR_ERR_NOSPACE) break;
      }
      if (lane == VR_SHM_HELLO_NO_LANE && hello.status == VR_ERR_NO_LANE && !reclaimed) {
        reclaimed = 1; /* closed or dead clients' lanes not yet freed by the beat: free them, look again */
        vr_shm_reclaim_dead(s);
        goto find_lane;
      }
      if (lane != VR_SHM_HELLO_NO_LANE) {
        hello.status = 0;
        hello.lane = lane;
        nfds = 3;
      }
    }
    if (send_hello(fd, &hello, fds, nfds) != 0) {
      vr_log(VR_LOG_DEBUG, "client pid %d left before its hello: %s", (int)cr.pid, strerror(errno));
      if (lane != VR_SHM_HELLO_NO_LANE) {
        pthread_mutex_lock(&s->lanes[lane].mu);
        vr_shm_lane_reset(s, lane, 0, 0, "client left before its hello");
        pthread_mutex_unlock(&s->lanes[lane].mu);
      }
    }
    if (fds[2] >= 0) close(fds[2]);
    close(fd);
  }
}

/* Who holds the socket at sa: the pid and uid of its listener (SO_PEERCRED of a
 * connection), or -1s when nobody answers. */
static struct ucred holder(const struct sockaddr_un *sa, unsigned salen) {
  struct ucred cr = {-1, (uid_t)-1, (gid_t)-1};
  socklen_t crl = sizeof cr;
  int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (probe >= 0 && connect(probe, (const struct sockaddr *)sa, salen) == 0)
    getsockopt(probe, SOL_SOCKET, SO_PEERCRED, &cr, &crl);
  if (probe >= 0) close(probe);
  return cr;
}

/* The socket directory: made 0755 when missing (one level), else it must be a real
 * directory of our euid that nobody else can write (whoever can write it could replace
 * our socket: a denial of service; the client's uid check stops impersonation). */
static int check_dir(const vr_shm_server_t *s) {
  const char *d = s->addr.dir;
  if (mkdir(d, 0755) != 0 && errno != EEXIST) {
    vr_log(VR_LOG_ERROR, "cannot create the socket directory %s for shm name '%s': %s. HINT: %s", d, s->name,
           strerror(errno), errno == ENOENT ? "create its parent first (only the last level is made)"
           : "run as root, pass --shm-socket-dir with a directory of this user's, or give a socket path "
             "(--shm-name /DIR/NAME.sock)");
    return errno == EACCES || errno == EPERM ? VR_ERR_PERM : VR_ERR_IO;
  }
  struct stat st;
  if (lstat(d, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 0022)) {
    vr_log(VR_LOG_ERROR, "refusing the socket directory %s for shm name '%s': %s. HINT: give the server a directory "
           "of its own that only it can write (mode 0755, owner uid %u): remove this one and let the server make "
           "it, or pass another --shm-socket-dir", d, s->name,
           lstat(d, &st) != 0 ? strerror(errno) : !S_ISDIR(st.st_mode) ? "not a directory (a symlink?)"
           : st.st_uid != geteuid() ? "owned by another user" : "writable by group or others", (unsigned)geteuid());
    return VR_ERR_PERM;
  }
  return 0;
}

/* Takes PATH.lock (flock, held for the server's life): the one way two servers starting
 * at once agree on who owns the name. On success a socket left at the path is a dead
 * server's, replaced. The lock file is checked to be the one at the path after locking
 * (a stopping server unlinks it). */
static int take_lock(vr_shm_server_t *s) {
  char lp[VR_SHM_ADDR_MAX + 8];
  snprintf(lp, sizeof lp, "%s%s", s->addr.path, VR_SHM_SOCK_LOCK_EXT);
  for (int tries = 0; tries < 100; tries++) {
    int fd = open(lp, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
      vr_log(VR_LOG_ERROR, "lock file %s of shm name '%s': %s", lp, s->name, strerror(errno));
      return VR_ERR_IO;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      int e = errno;
      char buf[32] = "";
      ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
      buf[n > 0 ? n : 0] = '\0';
      close(fd);
      if (e != EWOULDBLOCK) {
        vr_log(VR_LOG_ERROR, "flock %s: %s", lp, strerror(e));
        return VR_ERR_IO;
      }
      struct sockaddr_un sa;
      unsigned salen;
      vr_shm_sockaddr(&s->addr, 1, &sa, &salen); /* the info socket: asking costs its server no lane */
      struct ucred cr = holder(&sa, salen);
      vr_log(VR_LOG_ERROR, "shm name '%s' is taken: a live server (pid %d, uid %d) holds %s. HINT: stop that server, "
             "or pick another --shm-name", s->name, cr.pid > 0 ? (int)cr.pid : atoi(buf), (int)cr.uid, lp);
      return VR_ERR_EXISTS;
    }
    struct stat a, b;
    if (fstat(fd, &a) == 0 && stat(lp, &b) == 0 && a.st_ino == b.st_ino && a.st_dev == b.st_dev) {
      char pid[24];
      int n = snprintf(pid, sizeof pid, "%d\n", (int)getpid());
      if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n)
        vr_log(VR_LOG_WARN, "writing our pid into %s: %s", lp, strerror(errno));
      s->lock_fd = fd;
      return 0;
    }
    close(fd); /* a stopping server unlinked it after we opened it: again */
  }
  vr_log(VR_LOG_ERROR, "lock file %s keeps changing under us", lp);
  return VR_ERR_IO;
}

/* Binds and listens on one socket of the name (info: its info socket). Path form: the lock
 * is ours, so whatever sits at the path is a dead server's: replaced; the socket is made
 * 0666 (anyone may connect: admission is the server's policy, checked per connection). */
static int bind_one(vr_shm_server_t *s, int info, int *out) {
  struct sockaddr_un sa;
  unsigned salen;
  vr_shm_sockaddr(&s->addr, info, &sa, &salen);
  const char *shown = s->addr.abstract ? s->addr.path : sa.sun_path;
  const char *tail = s->addr.abstract && info ? VR_SHM_SOCK_INFO_SUFFIX : "";
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    vr_log(VR_LOG_ERROR, "socket: %s", strerror(errno));
    return VR_ERR_IO;
  }
  if (!s->addr.abstract) {
    struct stat st;
    if (lstat(sa.sun_path, &st) == 0) {
      if (unlink(sa.sun_path) != 0) {
        vr_log(VR_LOG_ERROR, "cannot remove %s (left by a dead server?): %s", sa.sun_path, strerror(errno));
        close(fd);
        return VR_ERR_IO;
      }
      vr_log(VR_LOG_WARN, "replaced %s %s of shm name '%s' (its server is gone: nobody held the lock)",
             S_ISSOCK(st.st_mode) ? "the stale socket" : "a stray file at", sa.sun_path, s->name);
    }
  }
  if (bind(fd, (struct sockaddr *)&sa, salen) != 0) {
    int e = errno;
    close(fd);
    if (e != EADDRINUSE) {
      vr_log(VR_LOG_ERROR, "bind %s%s: %s", shown, tail, strerror(e));
      return e == EACCES ? VR_ERR_PERM : VR_ERR_IO;
    }
    struct sockaddr_un si;
    unsigned silen;
    vr_shm_sockaddr(&s->addr, 1, &si, &silen); /* the info socket: asking costs its server no lane */
    struct ucred cr = holder(&si, silen);
    vr_log(VR_LOG_ERROR, "shm name '%s' is taken: pid %d (uid %d) listens on %s%s. HINT: stop that server, or pick "
           "another --shm-name; an abstract name (@NAME) can be taken by any local user: a socket path or a plain "
           "name (socket in a directory only the server can write) cannot", s->name, (int)cr.pid, (int)cr.uid, shown,
           tail);
    return VR_ERR_EXISTS;
  }
  if (!s->addr.abstract && chmod(sa.sun_path, 0666) != 0) {
    vr_log(VR_LOG_ERROR, "chmod 0666 %s: %s", sa.sun_path, strerror(errno));
    close(fd);
    return VR_ERR_IO;
  }
  if (listen(fd, 128) != 0) {
    vr_log(VR_LOG_ERROR, "listen %s%s: %s", shown, tail, strerror(errno));
    close(fd);
    return VR_ERR_IO;
  }
  *out = fd;
  return 0;
}

int vr_shm_bind_name(vr_shm_server_t *s) {
  int rc = s->addr.abstract ? 0 : check_dir(s);
  if (rc == 0 && !s->addr.abstract) rc = take_lock(s);
  if (rc == 0) rc = bind_one(s, 0, &s->listen_fd);
  if (rc == 0) rc = bind_one(s, 1, &s->info_fd);
  if (rc && !s->addr.abstract && s->lock_fd >= 0) vr_shm_unbind_name(s);
  return rc;
}

void vr_shm_unbind_name(vr_shm_server_t *s) {
  /* path form: remove our files while we hold the lock (the lock file last), so no
   * newcomer ever deletes a live socket; then the name is free */
  if (!s->addr.abstract && s->lock_fd >= 0) {
    char p[VR_SHM_ADDR_MAX + 8];
    if (s->listen_fd >= 0) unlink(s->addr.path);
    snprintf(p, sizeof p, "%s%s", s->addr.path, VR_SHM_SOCK_INFO_EXT);
    if (s->info_fd >= 0) unlink(p);
    snprintf(p, sizeof p, "%s%s", s->addr.path, VR_SHM_SOCK_LOCK_EXT);
    unlink(p);
    close(s->lock_fd);
    s->lock_fd = -1;
  }
  if (s->listen_fd >= 0) close(s->listen_fd);
  if (s->info_fd >= 0) close(s->info_fd);
  s->listen_fd = s->info_fd = -1;
}

/* Our view of the segment: one reserved range (total bytes), the header page at
 * its start backed by the sealed header memfd (clients map it read-only:
 * F_SEAL_FUTURE_WRITE), the lanes behind it backed by shared anonymous memory
 * until lane_assign puts a client's memfd over each. Plus the doorbell page. */
int vr_shm_make_segment(vr_shm_server_t *s, uint64_t total) {
  void *base = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    vr_log(VR_LOG_ERROR, "reserving %llu bytes for segment /%s: %s", (unsigned long long)total, s->name, strerror(errno));
    return VR_ERR_NOMEM;
  }
  s->base = base;
  s->bytes = total;
  void *m;
  s->hdr_fd = memfd_sealed(s, "header", VR_SHM_LANES_OFFSET,
                           F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE | F_SEAL_SEAL, base, &m);
  if (s->hdr_fd < 0) return errno == ENOSPC || errno == EFBIG || errno == ENOMEM ? VR_ERR_NOSPACE : VR_ERR_IO;
  s->bell_fd = memfd_sealed(s, "doorbell", 4096, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL, NULL, &s->bell_map);
  if (s->bell_fd < 0) return errno == ENOSPC || errno == EFBIG || errno == ENOMEM ? VR_ERR_NOSPACE : VR_ERR_IO;
  s->bell = (_Atomic uint32_t *)s->bell_map;
  if (mmap((uint8_t *)base + VR_SHM_LANES_OFFSET, total - VR_SHM_LANES_OFFSET, PROT_READ | PROT_WRITE,
           MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED) {
    vr_log(VR_LOG_ERROR, "mapping the lanes of segment /%s: %s", s->name, strerror(errno));
    return VR_ERR_NOMEM;
  }
  return 0;
}
