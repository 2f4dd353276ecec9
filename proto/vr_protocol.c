/* vr_protocol.c: the vr_proto library, the segment functions both halves of
 * the shm channel share (verl_reward/protocol.h, section 3): naming, header
 * checks, attach / detach and server liveness. The client library attaches
 * with them; the server (shm/vr_shm.c, which creates the segment) uses the
 * naming and liveness checks. Knows nothing of lanes' contents. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

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

/* Opens name and reads+checks the header; fills fd (caller closes), st, hdr. */
static int open_checked(const char *name, int oflag, int *fd_out, struct stat *st, vr_shm_header_t *hdr,
                        char *why, size_t whyn) {
  char path[NAME_MAX + 2];
  int rc = vr_shm_path(name, path, sizeof path, why, whyn);
  if (rc) return rc;
  int fd = shm_open(path, oflag | O_CLOEXEC, 0);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT) {
      snprintf(why, whyn, "no shared-memory segment /dev/shm%s (is verl-reward-server running with --shm-name %s?)", path, name);
      return VR_ERR_NOT_FOUND;
    }
    if (e == EACCES || e == EPERM) {
      snprintf(why, whyn, "permission denied opening /dev/shm%s. HINT: run as the server's user, or start the server with a group mode (--shm-mode 0660) and share its group", path);
      return VR_ERR_PERM;
    }
    snprintf(why, whyn, "shm_open %s: %s", path, strerror(e));
    return VR_ERR_IO;
  }
  if (fstat(fd, st) != 0 || pread(fd, hdr, sizeof *hdr, 0) != (ssize_t)sizeof *hdr) {
    snprintf(why, whyn, "segment /dev/shm%s is empty or unreadable (server still starting?)", path);
    close(fd);
    return VR_ERR_BAD_SEGMENT;
  }
  rc = vr_shm_header_check(hdr, (uint64_t)st->st_size, why, whyn);
  if (rc) {
    close(fd);
    return rc;
  }
  *fd_out = fd;
  return 0;
}

int vr_shm_attach(const char *name, vr_shm_map_t *out, char *why, size_t whyn) {
  memset(out, 0, sizeof *out);
  int fd;
  struct stat st;
  vr_shm_header_t hdr;
  int rc = open_checked(name, O_RDWR, &fd, &st, &hdr, why, whyn);
  if (rc) return rc;
  /* owner: the file belongs to the uid the server recorded, and the server
   * process (when visible) runs as that uid: a segment planted under the name
   * by someone else is refused */
  if (st.st_uid != hdr.server_uid) {
    snprintf(why, whyn, "segment /dev/shm/%s is owned by uid %u but claims server uid %u: refusing it", name,
             (unsigned)st.st_uid, hdr.server_uid);
    close(fd);
    return VR_ERR_BAD_SEGMENT;
  }
  char proc[64];
  struct stat pst;
  snprintf(proc, sizeof proc, "/proc/%d", hdr.server_pid);
  if (hdr.server_pidns == vr_shm_pidns() && stat(proc, &pst) == 0 && pst.st_uid != hdr.server_uid) {
    snprintf(why, whyn, "segment /dev/shm/%s names server pid %d, which runs as uid %u, not %u: refusing it", name,
             hdr.server_pid, (unsigned)pst.st_uid, hdr.server_uid);
    close(fd);
    return VR_ERR_BAD_SEGMENT;
  }
  void *base = mmap(NULL, hdr.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int e = errno;
  close(fd);
  if (base == MAP_FAILED) {
    snprintf(why, whyn, "mmap of %llu bytes of /dev/shm/%s: %s", (unsigned long long)hdr.total_bytes, name, strerror(e));
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

int vr_shm_peek_epoch(const char *name, uint64_t *epoch) {
  int fd;
  struct stat st;
  vr_shm_header_t hdr;
  char why[256];
  int rc = open_checked(name, O_RDONLY, &fd, &st, &hdr, why, sizeof why);
  if (rc) return rc;
  close(fd);
  if (hdr.state == VR_SHM_ST_STOPPED) return VR_ERR_SERVER_GONE;
  if (!vr_shm_server_alive(&hdr, 5000000000ll)) return VR_ERR_SERVER_GONE;
  *epoch = hdr.epoch;
  return 0;
}
