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

int vr_shm_path(const char *name, char *buf, size_t n, char *why, size_t whyn) {
  if (!name || !name[0]) {
    snprintf(why, whyn, "empty shared-memory name");
    return VR_ERR_INVAL;
  }
  if (strchr(name, '/')) {
    snprintf(why, whyn, "shared-memory name '%s' must not contain '/' (give it without the leading '/')", name);
    return VR_ERR_INVAL;
  }
  if (strlen(name) + 2 > n || strlen(name) > NAME_MAX - 1) {
    snprintf(why, whyn, "shared-memory name '%.40s...' is too long", name);
    return VR_ERR_INVAL;
  }
  snprintf(buf, n, "/%s", name);
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
  if (h->total_bytes != total || total > file_bytes)
    BAD("total_bytes %llu (computed %llu) exceeds the %llu-byte file", (unsigned long long)h->total_bytes,
        (unsigned long long)total, (unsigned long long)file_bytes);
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

int vr_shm_sockaddr(const char *name, struct sockaddr_un *sa, unsigned *len, char *why, size_t whyn) {
  char path[NAME_MAX + 2];
  int rc = vr_shm_path(name, path, sizeof path, why, whyn);
  if (rc) return rc;
  memset(sa, 0, sizeof *sa);
  sa->sun_family = AF_UNIX;
  size_t n = strlen(VR_SHM_SOCK_PREFIX) + strlen(name);
  if (n + 1 > sizeof sa->sun_path) {
    snprintf(why, whyn, "shared-memory name '%.40s...' is too long for a socket name (at most %zu bytes)", name,
             sizeof sa->sun_path - 1 - strlen(VR_SHM_SOCK_PREFIX));
    return VR_ERR_INVAL;
  }
  /* abstract namespace: sun_path[0] = 0, no terminating NUL counted */
  memcpy(sa->sun_path + 1, VR_SHM_SOCK_PREFIX, strlen(VR_SHM_SOCK_PREFIX));
  memcpy(sa->sun_path + 1 + strlen(VR_SHM_SOCK_PREFIX), name, strlen(name));
  *len = (unsigned)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
  return 0;
}

/* Connects to name, checks the server's uid, receives the hello and the memfd
 * and checks seals, owner and header: fills *fd_out (caller closes) and hdr. */
static int receive_segment(const char *name, int64_t expected_uid, int *fd_out, vr_shm_header_t *hdr, char *why,
                           size_t whyn) {
  struct sockaddr_un sa;
  unsigned salen;
  int rc = vr_shm_sockaddr(name, &sa, &salen, why, whyn);
  if (rc) return rc;
  int sk = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sk < 0) {
    snprintf(why, whyn, "socket: %s", strerror(errno));
    return VR_ERR_IO;
  }
  if (connect(sk, (struct sockaddr *)&sa, salen) != 0) {
    int e = errno;
    close(sk);
    if (e == ECONNREFUSED || e == ENOENT) {
      snprintf(why, whyn, "no reward server listens on '%s' (is verl-reward-server running with --shm-name %s?)", name,
               name);
      return VR_ERR_NOT_FOUND;
    }
    snprintf(why, whyn, "connect to '%s': %s", name, strerror(e));
    return e == EAGAIN ? VR_ERR_NOT_FOUND : VR_ERR_IO; /* EAGAIN: its backlog is full */
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
  struct timeval tv = {5, 0}; /* the server answers at once; a hung peer is not a server */
  setsockopt(sk, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  vr_shm_hello_t hello;
  memset(&hello, 0, sizeof hello);
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int) * 4)];
  } ctl;
  memset(&ctl, 0, sizeof ctl);
  struct iovec iov = {&hello, sizeof hello};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf, .msg_controllen = sizeof ctl.buf};
  ssize_t got;
  while ((got = recvmsg(sk, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL)) < 0 && errno == EINTR) {
  }
  int e = errno;
  close(sk);
  int fd = -1, nfds = 0;
  for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
    if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
      int n = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      for (int k = 0; k < n; k++) {
        int f;
        memcpy(&f, CMSG_DATA(cm) + k * sizeof(int), sizeof f);
        if (nfds++ == 0) fd = f;
        else close(f);
      }
    }
  if (got != (ssize_t)sizeof hello || hello.magic != VR_SHM_HELLO_MAGIC) {
    if (fd >= 0) close(fd);
    if (got < 0) snprintf(why, whyn, "no hello from the server on '%s': %s", name, strerror(e));
    else snprintf(why, whyn, "the server on '%s' sent %zd bytes, not a verl-reward hello", name, got);
    return VR_ERR_BAD_SEGMENT;
  }
  if (hello.version != VR_SHM_VERSION) {
    if (fd >= 0) close(fd);
    snprintf(why, whyn, "the server on '%s' speaks protocol version %u, this library %u", name, hello.version,
             VR_SHM_VERSION);
    return VR_ERR_BAD_SEGMENT;
  }
  if (hello.status != 0) {
    if (fd >= 0) close(fd);
    snprintf(why, whyn, "the server on '%s' refused this client (uid %u): %s. HINT: start it with --allow-uid %u "
             "(or --allow-gid with one of this user's groups)", name, (unsigned)geteuid(), vr_status_name(hello.status),
             (unsigned)geteuid());
    return hello.status == VR_ERR_PERM ? VR_ERR_PERM : VR_ERR_BAD_SEGMENT;
  }
  struct stat st;
  int seals = fd >= 0 ? fcntl(fd, F_GET_SEALS) : -1;
  if (nfds != 1 || seals < 0 || (seals & VR_SHM_SEALS_REQUIRED) != VR_SHM_SEALS_REQUIRED || fstat(fd, &st) != 0) {
    if (fd >= 0) close(fd);
    snprintf(why, whyn, "the server on '%s' sent %d descriptors, seals 0x%x (need 0x%x): not a sealed segment", name,
             nfds, seals, VR_SHM_SEALS_REQUIRED);
    return VR_ERR_BAD_SEGMENT;
  }
  if (pread(fd, hdr, sizeof *hdr, 0) != (ssize_t)sizeof *hdr) {
    close(fd);
    snprintf(why, whyn, "segment of '%s' is empty or unreadable", name);
    return VR_ERR_BAD_SEGMENT;
  }
  rc = vr_shm_header_check(hdr, (uint64_t)st.st_size, why, whyn);
  if (rc == 0 && (st.st_uid != cr.uid || hdr->server_uid != cr.uid)) {
    snprintf(why, whyn, "segment of '%s' is owned by uid %u and names server uid %u, but the server runs as %u",
             name, (unsigned)st.st_uid, hdr->server_uid, (unsigned)cr.uid);
    rc = VR_ERR_BAD_SEGMENT;
  }
  if (rc) {
    close(fd);
    return rc;
  }
  *fd_out = fd;
  return 0;
}

int vr_shm_attach(const char *name, int64_t expected_uid, vr_shm_map_t *out, char *why, size_t whyn) {
  memset(out, 0, sizeof *out);
  int fd;
  vr_shm_header_t hdr;
  int rc = receive_segment(name, expected_uid, &fd, &hdr, why, whyn);
  if (rc) return rc;
  void *base = mmap(NULL, hdr.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (base == MAP_FAILED) {
    snprintf(why, whyn, "mmap of %llu bytes of the segment of '%s': %s", (unsigned long long)hdr.total_bytes, name,
             strerror(e));
    return e == ENOMEM ? VR_ERR_NOMEM : VR_ERR_IO;
  }
  out->base = base;
  out->bytes = hdr.total_bytes;
  out->hdr = hdr;
  out->live = (vr_shm_header_t *)base;
  return 0;
}

void vr_shm_detach(vr_shm_map_t *m) {
  if (m->base) munmap(m->base, m->bytes);
  memset(m, 0, sizeof *m);
}

int vr_shm_peek_epoch(const char *name, int64_t expected_uid, uint64_t *epoch) {
  int fd;
  vr_shm_header_t hdr;
  char why[512];
  int rc = receive_segment(name, expected_uid, &fd, &hdr, why, sizeof why);
  if (rc) return rc;
  /* the live state, not the copy: pread again */
  uint32_t state = VR_SHM_ST_STOPPED;
  if (pread(fd, &state, sizeof state, offsetof(vr_shm_header_t, state)) != (ssize_t)sizeof state) state = VR_SHM_ST_STOPPED;
  close(fd);
  if (state == VR_SHM_ST_STOPPED) return VR_ERR_SERVER_GONE;
  *epoch = hdr.epoch;
  return 0;
}
