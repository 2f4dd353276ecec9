/* vr_protocol.c: the vr_proto library, the segment functions both halves of
 * the shm channel share (verl_reward/protocol.h, section 3): naming, header
 * checks, the rendezvous socket's address, attach / detach (connect, check the
 * server's uid, receive and check the sealed memfd) and server liveness. The
 * client library attaches with them; the server (shm/vr_shm.c, which creates
 * the segment and listens) uses the naming and the socket address. Knows nothing of lanes' contents. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "verl_reward/protocol.h"
#include "verl_reward/status.h"
#include "vr_proc.h"
#include "vr_time.h"

/* The three forms of a name (protocol.h, section 3): "@NAME" abstract, a path (has a '/'),
 * else a plain NAME resolved in a socket directory. */
int vr_shm_path(const char *name, char *buf, size_t n, char *why, size_t whyn) {
  if (!name || !name[0] || (name[0] == '@' && !name[1])) {
    snprintf(why, whyn, "empty shared-memory name");
    return VR_ERR_INVAL;
  }
  size_t len = strlen(name);
  const size_t sun = sizeof(((struct sockaddr_un *)0)->sun_path);
  if (name[0] == '@') {
    if (strchr(name + 1, '/')) {
      snprintf(why, whyn, "abstract name '%s' must not contain '/'", name);
      return VR_ERR_INVAL;
    }
    if (1 + strlen(VR_SHM_SOCK_PREFIX) + (len - 1) + strlen(VR_SHM_SOCK_INFO_SUFFIX) + 1 > sun) {
      snprintf(why, whyn, "abstract name '%.40s...' is too long for a socket name (at most %zu bytes)", name,
               sun - 2 - strlen(VR_SHM_SOCK_PREFIX) - strlen(VR_SHM_SOCK_INFO_SUFFIX));
      return VR_ERR_INVAL;
    }
  } else if (strchr(name, '/')) {
    if (name[len - 1] == '/') {
      snprintf(why, whyn, "socket path '%s' names a directory, not a socket file (e.g. %sreward.sock)", name, name);
      return VR_ERR_INVAL;
    }
    if (len + strlen(VR_SHM_SOCK_LOCK_EXT) + 1 > sun) {
      snprintf(why, whyn, "socket path '%.40s...' is too long (at most %zu bytes: a Unix socket's limit)", name,
               sun - 1 - strlen(VR_SHM_SOCK_LOCK_EXT));
      return VR_ERR_INVAL;
    }
  } else if (len > VR_SHM_NAME_MAX) {
    snprintf(why, whyn, "shared-memory name '%.40s...' is too long (at most %d bytes; or give a socket path)", name,
             VR_SHM_NAME_MAX);
    return VR_ERR_INVAL;
  }
  if (len + 1 > n) {
    snprintf(why, whyn, "shared-memory name '%.40s...' is too long", name);
    return VR_ERR_INVAL;
  }
  memcpy(buf, name, len + 1);
  return 0;
}

/* Directory of path (its part before the last '/'; "/" for "/x") into dir. */
static void dir_of(const char *path, char *dir, size_t n) {
  const char *sl = strrchr(path, '/');
  size_t k = sl == path ? 1 : (size_t)(sl - path);
  snprintf(dir, n, "%.*s", (int)k, path);
}

/* dir/NAME.sock into out (VR_SHM_ADDR_MAX bytes), cut to fit. */
static void sock_in(char *out, const char *dir, const char *name) {
  char p[2 * VR_SHM_ADDR_MAX + 16];
  size_t n = (size_t)snprintf(p, sizeof p, "%s/%s%s", dir, name, VR_SHM_SOCK_SUFFIX);
  if (n >= VR_SHM_ADDR_MAX) n = VR_SHM_ADDR_MAX - 1;
  memcpy(out, p, n);
  out[n] = '\0';
}

int vr_shm_resolve(const char *name, const char *socket_dir, int64_t server_uid, int for_server, vr_shm_addr_t *a,
                   char *why, size_t whyn) {
  memset(a, 0, sizeof *a);
  char canon[VR_SHM_ADDR_MAX];
  int rc = vr_shm_path(name, canon, sizeof canon, why, whyn);
  if (rc) return rc;
  if (name[0] == '@') {
    a->abstract = 1;
    snprintf(a->path, sizeof a->path, "@%s%s", VR_SHM_SOCK_PREFIX, name + 1);
    return 0;
  }
  if (strchr(name, '/')) {
    snprintf(a->path, sizeof a->path, "%s", name);
    dir_of(name, a->dir, sizeof a->dir);
    return 0;
  }
  char dirs[2][VR_SHM_ADDR_MAX];
  int nd = 0;
  uint32_t uid = server_uid < 0 ? (uint32_t)geteuid() : (uint32_t)server_uid;
  if (socket_dir && socket_dir[0]) {
    snprintf(dirs[nd++], sizeof dirs[0], "%s", socket_dir);
  } else {
    struct stat st;
    /* the system directory: root's (created here), or one made for the server's user
     * (systemd RuntimeDirectory=verl-reward with User=) */
    if (!for_server || uid == 0 || (stat(VR_SHM_SOCK_DIR, &st) == 0 && st.st_uid == uid))
      snprintf(dirs[nd++], sizeof dirs[0], "%s", VR_SHM_SOCK_DIR);
    /* the user's runtime directory (what systemd-logind sets $XDG_RUNTIME_DIR to) */
    char run[64];
    snprintf(run, sizeof run, "/run/user/%u", (unsigned)uid);
    if (uid != 0 && stat(run, &st) == 0 && S_ISDIR(st.st_mode))
      snprintf(dirs[nd++], sizeof dirs[0], "%s/verl-reward", run);
    if (nd == 0) {
      snprintf(why, whyn, "no socket directory for '%s': %s is not this user's (uid %u) and /run/user/%u does not "
               "exist. HINT: pass --shm-socket-dir DIR (a directory of this user's) to the server and the same "
               "socket_dir to clients, give a socket path as the name (/DIR/%s.sock), or create %s owned by uid "
               "%u (systemd: RuntimeDirectory=verl-reward)", name, VR_SHM_SOCK_DIR, (unsigned)uid, (unsigned)uid,
               name, VR_SHM_SOCK_DIR, (unsigned)uid);
      return VR_ERR_NOT_FOUND;
    }
  }
  /* a client takes the first candidate where a socket is in a directory of the expected
   * server uid (a user's own server in /run/user/UID beside root's of the same name in
   * /run/verl-reward), else the first where a socket is, else the first */
  int pick = -1, any = -1;
  for (int k = 0; k < nd && !for_server && pick < 0; k++) {
    char p[2 * VR_SHM_ADDR_MAX + 16];
    struct stat st, ds;
    snprintf(p, sizeof p, "%s/%s%s", dirs[k], name, VR_SHM_SOCK_SUFFIX);
    if (lstat(p, &st) != 0) continue;
    if (any < 0) any = k;
    if (stat(dirs[k], &ds) == 0 && ds.st_uid == uid) pick = k;
  }
  if (pick < 0) pick = any < 0 ? 0 : any;
  size_t need = strlen(dirs[pick]) + 1 + strlen(name) + strlen(VR_SHM_SOCK_SUFFIX) + strlen(VR_SHM_SOCK_LOCK_EXT);
  if (need + 1 > sizeof(((struct sockaddr_un *)0)->sun_path)) {
    snprintf(why, whyn, "socket path %.60s/%s%s is too long for a Unix socket (108 bytes). HINT: a shorter "
             "--shm-name or socket directory", dirs[pick], name, VR_SHM_SOCK_SUFFIX);
    return VR_ERR_INVAL;
  }
  snprintf(a->dir, sizeof a->dir, "%s", dirs[pick]);
  sock_in(a->path, dirs[pick], name);
  if (nd == 2) sock_in(a->alt, dirs[1 - pick], name); /* a message only: cut if it must be */
  return 0;
}

int vr_shm_header_check(const vr_shm_header_t *h, uint64_t file_bytes, char *why, size_t whyn) {
#define BAD(...) do { snprintf(why, whyn, __VA_ARGS__); return VR_ERR_BAD_SEGMENT; } while (0)
  if (file_bytes < sizeof *h) BAD("segment is %llu bytes, smaller than its header", (unsigned long long)file_bytes);
  if (h->magic != VR_SHM_MAGIC) BAD("bad magic 0x%016llx (not a verl-reward segment, or not initialised)", (unsigned long long)h->magic);
  if (h->version != VR_SHM_VERSION) BAD("protocol version %u, this library speaks %u", h->version, VR_SHM_VERSION);
  if (h->header_bytes != sizeof(vr_shm_header_t) || h->lane_header_bytes != sizeof(vr_shm_lane_t) ||
      h->req_desc_bytes != sizeof(vr_shm_req_desc_t) || h->resp_desc_bytes != sizeof(vr_shm_resp_desc_t) ||
      h->max_components != VR_MAX_COMPONENTS || h->component_name_bytes != VR_COMPONENT_NAME_MAX)
    BAD("layout sizes differ (header %u lane %u req %u resp %u comps %u x %u)", h->header_bytes,
        h->lane_header_bytes, h->req_desc_bytes, h->resp_desc_bytes, h->max_components, h->component_name_bytes);
  if (h->n_lanes == 0 || h->n_lanes > VR_SHM_MAX_LANES) BAD("n_lanes %u outside 1..%u", h->n_lanes, VR_SHM_MAX_LANES);
  if (h->ring_slots < 1 || h->ring_slots > VR_SHM_MAX_RING_SLOTS || (h->ring_slots & (h->ring_slots - 1)))
    BAD("ring_slots %u is not a power of two in 1..%u", h->ring_slots, VR_SHM_MAX_RING_SLOTS);
  if (h->arena_bytes == 0 || h->arena_bytes % VR_SHM_ARENA_ALIGN || h->arena_bytes > (1ull << 40))
    BAD("arena_bytes %llu is not a multiple of %u in (0, 1 TiB]", (unsigned long long)h->arena_bytes, VR_SHM_ARENA_ALIGN);
  if (h->lane_bytes != vr_shm_lane_bytes(h->ring_slots, h->arena_bytes)) BAD("lane_bytes %llu inconsistent", (unsigned long long)h->lane_bytes);
  if (h->lanes_offset != VR_SHM_LANES_OFFSET) BAD("lanes_offset %llu != %u", (unsigned long long)h->lanes_offset, VR_SHM_LANES_OFFSET);
  /* n_lanes <= 1024 and lane_bytes < 2^41: the product cannot overflow */
  uint64_t total = h->lanes_offset + (uint64_t)h->n_lanes * h->lane_bytes;
  if (h->total_bytes != total || h->lanes_offset > file_bytes)
    BAD("total_bytes %llu (computed %llu), or the header page (%llu) beyond the %llu-byte header file",
        (unsigned long long)h->total_bytes, (unsigned long long)total, (unsigned long long)h->lanes_offset,
        (unsigned long long)file_bytes);
  if (h->max_seq_len == 0 || h->max_seqs_per_request == 0) BAD("zero limits (max_seq_len %u, max_seqs %u)", h->max_seq_len, h->max_seqs_per_request);
  if (h->epoch == 0 || h->server_pid <= 0) BAD("no server identity (pid %d, epoch 0x%llx)", h->server_pid, (unsigned long long)h->epoch);
  return 0;
#undef BAD
}

uint64_t vr_shm_pidns(void) {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

int vr_shm_server_alive(const vr_shm_header_t *live, int64_t stale_ns) {
  uint64_t ns = live->server_pidns;
  if (ns != 0 && ns == vr_shm_pidns()) return vr_proc_alive(live->server_pid, live->server_start_time);
  /* another pid namespace: the pid means nothing here, trust a fresh heartbeat only */
  uint64_t hb = atomic_load_explicit(&live->heartbeat_ns, memory_order_acquire);
  uint64_t now = vr_now_ns();
  return hb != 0 && now >= hb ? (int64_t)(now - hb) < stale_ns : hb != 0;
}

void vr_shm_sockaddr(const vr_shm_addr_t *a, int info, struct sockaddr_un *sa, unsigned *len) {
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  if (a->abstract) { /* sun_path[0] = 0, no terminating NUL counted; path is "@verl-reward/NAME" */
    size_t n = strlen(a->path + 1);
    memcpy(sa->sun_path + 1, a->path + 1, n);
    if (info) {
      memcpy(sa->sun_path + 1 + n, VR_SHM_SOCK_INFO_SUFFIX, strlen(VR_SHM_SOCK_INFO_SUFFIX));
      n += strlen(VR_SHM_SOCK_INFO_SUFFIX);
    }
    *len = (unsigned)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
    return;
  }
  /* lengths were checked by vr_shm_resolve (room for the longest extension) */
  char p[VR_SHM_ADDR_MAX + 8];
  int n = snprintf(p, sizeof p, "%s%s", a->path, info ? VR_SHM_SOCK_INFO_EXT : "");
  memcpy(sa->sun_path, p, (size_t)n < sizeof sa->sun_path ? (size_t)n + 1 : sizeof sa->sun_path - 1);
  *len = (unsigned)(offsetof(struct sockaddr_un, sun_path) + strlen(sa->sun_path) + 1);
}

/* Connects to name (info: its info socket), checks the server's uid and reads
 * the hello: fills *hello and up to 3 received fds (fds[k] = -1 if absent;
 * caller closes) and *peer_uid. */
static int handshake(const char *name, const char *socket_dir, int info, int64_t expected_uid, vr_shm_hello_t *hello,
                     int fds[3], uint32_t *peer_uid, char *why, size_t whyn) {
  fds[0] = fds[1] = fds[2] = -1;
  vr_shm_addr_t a;
  int rc = vr_shm_resolve(name, socket_dir, expected_uid, 0, &a, why, whyn);
  if (rc) return rc;
  struct sockaddr_un sa;
  unsigned salen;
  vr_shm_sockaddr(&a, info, &sa, &salen);
  int sk = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sk < 0) {
    snprintf(why, whyn, "socket: %s", strerror(errno));
    return VR_ERR_IO;
  }
  if (connect(sk, (struct sockaddr *)&sa, salen) != 0) {
    int e = errno;
    close(sk);
    if (e == ECONNREFUSED || e == ENOENT || e == EAGAIN) { /* EAGAIN: its backlog is full */
      snprintf(why, whyn, "no reward server listens on '%s' (socket %s%s%s: %s; is verl-reward-server running with "
               "--shm-name %s%s?)", name, a.path, a.alt[0] ? ", nor " : "", a.alt, e == ENOENT ? "no such file" :
               e == EAGAIN ? "backlog full" : "nobody listens", name,
               socket_dir && socket_dir[0] && !strchr(name, '/') && name[0] != '@' ? " and this --shm-socket-dir" : "");
      return VR_ERR_NOT_FOUND;
    }
    if (e == EACCES)
      snprintf(why, whyn, "connect to %s ('%s'): permission denied. HINT: the socket and its directories must be "
               "searchable and the socket writable by this user (the server makes them 0755 / 0666)", a.path, name);
    else snprintf(why, whyn, "connect to %s ('%s'): %s", a.path, name, strerror(e));
    return e == EACCES ? VR_ERR_PERM : VR_ERR_IO;
  }
  struct ucred cr = {0, (uid_t)-1, (gid_t)-1};
  socklen_t crl = sizeof cr;
  uint32_t want = expected_uid < 0 ? (uint32_t)geteuid() : (uint32_t)expected_uid;
  if (getsockopt(sk, SOL_SOCKET, SO_PEERCRED, &cr, &crl) != 0 || cr.uid != want) {
    snprintf(why, whyn, "the process serving '%s' (pid %d) runs as uid %u, not the expected uid %u: refusing it. "
             "HINT: if that is your reward server, set the client's expected_server_uid to %u",
             name, (int)cr.pid, (unsigned)cr.uid, want, (unsigned)cr.uid);
    close(sk);
    return VR_ERR_PERM;
  }
  *peer_uid = (uint32_t)cr.uid;
  struct timeval tv = {5, 0}; /* the server answers at once; a hung peer is not a server */
  setsockopt(sk, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  memset(hello, 0, sizeof *hello);
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int) * 8)];
  } ctl;
  memset(&ctl, 0, sizeof ctl);
  struct iovec iov = {hello, sizeof *hello};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
  ssize_t got;
  while ((got = recvmsg(sk, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL)) < 0 && errno == EINTR) {
  }
  int e = errno, nfds = 0;
  close(sk);
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
      int n = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      for (int k = 0; k < n; k++) {
        int f;
        memcpy(&f, CMSG_DATA(cm) + k * sizeof(int), sizeof f);
        if (nfds < 3) fds[nfds] = f;
        else close(f);
        nfds++;
      }
    }
  if (got != (ssize_t)sizeof *hello || hello->magic != VR_SHM_HELLO_MAGIC || hello->version != VR_SHM_VERSION) {
    if (got < 0) snprintf(why, whyn, "no hello from the server on '%s': %s", name, strerror(e));
    else if (got == (ssize_t)sizeof *hello && hello->magic == VR_SHM_HELLO_MAGIC)
      snprintf(why, whyn, "the server on '%s' speaks protocol version %u, this library %u", name, hello->version,
               VR_SHM_VERSION);
    else snprintf(why, whyn, "the server on '%s' sent %zd bytes, not a verl-reward hello", name, got);
    rc = VR_ERR_BAD_SEGMENT;
  } else if (hello->status == 0 && !info && nfds != 3) {
    snprintf(why, whyn, "the server on '%s' sent %d descriptors, not 3", name, nfds);
    rc = VR_ERR_BAD_SEGMENT;
  }
  if (rc)
    for (int k = 0; k < 3; k++)
      if (fds[k] >= 0) close(fds[k]), fds[k] = -1;
  return rc;
}

/* Checks one received memfd: its seals include want, its owner is uid, its size is bytes. */
static int check_memfd(int fd, const char *what, unsigned want, uint32_t uid, uint64_t bytes, char *why, size_t whyn) {
  struct stat st;
  int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || ((unsigned)seals & want) != want || fstat(fd, &st) != 0 || st.st_uid != uid ||
      (bytes && (uint64_t)st.st_size != bytes)) {
    snprintf(why, whyn, "the %s memfd (seals 0x%x, need 0x%x; owner %u, server %u; %lld bytes, expected %llu) is not "
             "a sealed segment of the server", what, seals, want, (unsigned)st.st_uid, uid, (long long)st.st_size,
             (unsigned long long)bytes);
    return VR_ERR_BAD_SEGMENT;
  }
  return 0;
}

int vr_shm_attach(const char *name, const char *socket_dir, int64_t expected_uid, vr_shm_map_t *out, char *why,
                  size_t whyn) {
  memset(out, 0, sizeof *out);
  vr_shm_hello_t hello;
  int fds[3];
  uint32_t uid = 0;
  int rc = handshake(name, socket_dir, 0, expected_uid, &hello, fds, &uid, why, whyn);
  if (rc) return rc;
  if (hello.status != 0) {
    switch (hello.status) {
      case VR_ERR_PERM:
        snprintf(why, whyn, "the server on '%s' refused this client (uid %u). HINT: start it with --allow-uid %u "
                 "(or --allow-gid with one of this user's groups)", name, (unsigned)geteuid(), (unsigned)geteuid());
        break;
      case VR_ERR_AGAIN: snprintf(why, whyn, "server on '%s' is still starting", name); break;
      case VR_ERR_SHUTTING_DOWN: snprintf(why, whyn, "server on '%s' is draining", name); break;
      case VR_ERR_NO_LANE:
        if (hello.lane_cap)
          snprintf(why, whyn, "this user (uid %u) already holds %u lanes of '%s', the server's limit per uid. HINT: "
                   "close unused clients, or raise verl-reward-server --max-lanes-per-uid", (unsigned)geteuid(),
                   hello.lane_cap, name);
        else snprintf(why, whyn, "all lanes of '%s' are leased", name);
        break;
      case VR_ERR_NOSPACE:
        snprintf(why, whyn, "the server on '%s' could not allocate a lane (memory limit; its log says more)", name);
        break;
      default: snprintf(why, whyn, "the server on '%s' answered %s", name, vr_status_name(hello.status)); break;
    }
    for (int k = 0; k < 3; k++)
      if (fds[k] >= 0) close(fds[k]);
    return hello.status;
  }
  vr_shm_header_t hdr;
  struct stat st;
  rc = check_memfd(fds[0], "header", VR_SHM_SEALS_HEADER, uid, 0, why, whyn);
  if (rc == 0 && (fstat(fds[0], &st) != 0 || pread(fds[0], &hdr, sizeof hdr, 0) != (ssize_t)sizeof hdr)) {
    snprintf(why, whyn, "segment header of '%s' is empty or unreadable", name);
    rc = VR_ERR_BAD_SEGMENT;
  }
  if (rc == 0) rc = vr_shm_header_check(&hdr, (uint64_t)st.st_size, why, whyn);
  if (rc == 0 && (hdr.server_uid != uid || hdr.epoch != hello.epoch || hello.lane >= hdr.n_lanes)) {
    snprintf(why, whyn, "segment of '%s' names server uid %u and epoch %016llx, lane %u of %u; the server runs as %u "
             "and said epoch %016llx", name, hdr.server_uid, (unsigned long long)hdr.epoch, hello.lane, hdr.n_lanes,
             (unsigned)uid, (unsigned long long)hello.epoch);
    rc = VR_ERR_BAD_SEGMENT;
  }
  if (rc == 0) rc = check_memfd(fds[1], "doorbell", VR_SHM_SEALS_LANE, uid, VR_SHM_BELL_BYTES, why, whyn);
  if (rc == 0) rc = check_memfd(fds[2], "lane", VR_SHM_SEALS_LANE, uid, hdr.lane_bytes, why, whyn);
  void *maps[3] = {MAP_FAILED, MAP_FAILED, MAP_FAILED};
  const size_t sizes[3] = {rc == 0 ? (size_t)hdr.lanes_offset : 0, VR_SHM_BELL_BYTES, rc == 0 ? (size_t)hdr.lane_bytes : 0};
  for (int k = 0; k < 3 && rc == 0; k++) {
    maps[k] = mmap(NULL, sizes[k], k == 0 ? PROT_READ : PROT_READ | PROT_WRITE, MAP_SHARED, fds[k], 0);
    if (maps[k] == MAP_FAILED) {
      int e = errno;
      snprintf(why, whyn, "mmap of %zu bytes of the segment of '%s': %s", sizes[k], name, strerror(e));
      rc = e == ENOMEM ? VR_ERR_NOMEM : VR_ERR_IO;
    }
  }
  for (int k = 0; k < 3; k++) close(fds[k]);
  if (rc) {
    for (int k = 0; k < 3; k++)
      if (maps[k] != MAP_FAILED) munmap(maps[k], sizes[k]);
    return rc;
  }
  out->base = maps[0];
  out->bytes = sizes[0];
  out->hdr = hdr;
  out->live = (const vr_shm_header_t *)maps[0];
  out->bell = (_Atomic uint32_t *)maps[1];
  out->lane = (vr_shm_lane_t *)maps[2];
  out->lane_idx = hello.lane;
  return 0;
}

void vr_shm_detach(vr_shm_map_t *m) {
  if (m->base) munmap(m->base, m->bytes);
  if (m->bell) munmap((void *)m->bell, VR_SHM_BELL_BYTES);
  if (m->lane) munmap(m->lane, m->hdr.lane_bytes);
  memset(m, 0, sizeof *m);
}

int vr_shm_peek_epoch(const char *name, const char *socket_dir, int64_t expected_uid, uint64_t *epoch) {
  vr_shm_hello_t hello;
  int fds[3];
  uint32_t uid;
  char why[512];
  int rc = handshake(name, socket_dir, 1, expected_uid, &hello, fds, &uid, why, sizeof why);
  for (int k = 0; k < 3; k++)
    if (fds[k] >= 0) close(fds[k]);
  if (rc) return rc;
  if (hello.state == VR_SHM_ST_STOPPED) return VR_ERR_SERVER_GONE;
  *epoch = hello.epoch;
  return 0;
}
