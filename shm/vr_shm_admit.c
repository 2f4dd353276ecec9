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
#include <sys/socket.h>
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
    } else {
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

/* Binds and listens on name's abstract socket. The name is taken only while a
 * process holds a socket bound to it (the kernel frees it when that process
 * dies), so there is no stale state to replace and no file to plant. */
int vr_shm_bind_name(vr_shm_server_t *s, int info, int *out) {
  struct sockaddr_un sa;
  unsigned salen;
  char why[256];
  int rc = vr_shm_sockaddr(s->name, info, &sa, &salen, why, sizeof why);
  if (rc) {
    vr_log(VR_LOG_ERROR, "%s", why);
    return rc;
  }
  const char *tail = info ? VR_SHM_SOCK_INFO_SUFFIX : "";
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    vr_log(VR_LOG_ERROR, "socket: %s", strerror(errno));
    return VR_ERR_IO;
  }
  if (bind(fd, (struct sockaddr *)&sa, salen) != 0) {
    int e = errno;
    close(fd);
    if (e != EADDRINUSE) {
      vr_log(VR_LOG_ERROR, "bind @%s%s%s: %s", VR_SHM_SOCK_PREFIX, s->name, tail, strerror(e));
      return VR_ERR_IO;
    }
    /* who holds it: its credentials come with a connection */
    struct ucred cr = {0, (uid_t)-1, (gid_t)-1};
    socklen_t crl = sizeof cr;
    int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, salen) == 0)
      getsockopt(probe, SOL_SOCKET, SO_PEERCRED, &cr, &crl);
    if (probe >= 0) close(probe);
    vr_log(VR_LOG_ERROR, "shm name '%s' is taken: pid %d (uid %d) listens on @%s%s%s. HINT: stop that server, or pick "
           "another --shm-name", s->name, (int)cr.pid, (int)cr.uid, VR_SHM_SOCK_PREFIX, s->name, tail);
    return VR_ERR_EXISTS;
  }
  if (listen(fd, 128) != 0) {
    vr_log(VR_LOG_ERROR, "listen @%s%s%s: %s", VR_SHM_SOCK_PREFIX, s->name, tail, strerror(errno));
    close(fd);
    return VR_ERR_IO;
  }
  *out = fd;
  return 0;
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
