/* vr_control.c: controller <-> worker commands over MPI point-to-point (vr_control.h). */
#include "vr_control.h"

#include <fcntl.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define VR_CTL_TAG_CMD 101
#define VR_CTL_TAG_CMD_DATA 102
#define VR_CTL_TAG_REPLY 103
#define VR_CTL_TAG_REPLY_DATA 104
#define VR_CTL_MAX_PAYLOAD ((uint64_t)1 << 34) /* 16 GiB: a sanity bound on a peer's header */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void vr_roles_str(uint32_t roles, char *buf, size_t cap) {
  size_t k = 0;
  buf[0] = 0;
  for (int r = 0; r < VR_ROLE_COUNT && k + 1 < cap; r++)
    if (roles & (1u << r)) k += (size_t)snprintf(buf + k, cap - k, "%s%s", k ? "," : "", vr_role_name((vr_role_t)r));
  if (!buf[0]) snprintf(buf, cap, "-");
}

static const char *cmd_name(const vr_ctl_t *c, uint32_t cmd) {
  if (cmd == 0) return "stop";
  return c->cmd_names && (int)cmd < c->n_cmd_names && c->cmd_names[cmd] ? c->cmd_names[cmd] : "?";
}

int vr_ctl_init(vr_ctl_t *c, vr_world_t *w, const char *run_dir, const char *const *cmd_names, int n_cmd_names) {
  memset(c, 0, sizeof *c);
  c->w = w;
  c->cmd_names = cmd_names;
  c->n_cmd_names = n_cmd_names;
  snprintf(c->run_dir, sizeof c->run_dir, "%s", run_dir ? run_dir : "");
  if (w->rank == 0) {
    c->last_cmd = calloc((size_t)w->size, sizeof *c->last_cmd);
    c->last_seq = calloc((size_t)w->size, sizeof *c->last_seq);
    if (!c->last_cmd || !c->last_seq) return -1;
  }
  return 0;
}

void vr_ctl_free(vr_ctl_t *c) {
  free(c->last_cmd);
  free(c->last_seq);
  c->last_cmd = c->last_seq = NULL;
}

int vr_ctl_members(const vr_world_t *w, vr_group_id_t g, int *ranks, int cap) {
  const vr_devmap_t *m = w->map;
  uint32_t roles = g == VR_GROUP_WEIGHT_SYNC ? (1u << VR_ROLE_ACTOR) | (1u << VR_ROLE_ROLLOUT) : 1u << (unsigned)g;
  int n = 0;
  /* the same order as vr_world_init's split keys: worker order; weight sync: actor first */
  for (int pass = 0; pass < 2; pass++) {
    for (int i = 0; i < m->n_workers; i++) {
      uint32_t wr = m->worker_roles[i];
      if (!(wr & roles)) continue;
      int is_actor = (wr & (1u << VR_ROLE_ACTOR)) != 0;
      if (g == VR_GROUP_WEIGHT_SYNC ? (pass == 0) != is_actor : pass == 1) continue;
      if (n < cap) ranks[n] = i + 1;
      n++;
    }
  }
  return n;
}

/* Waits for a request against the deadline; on timeout ends the run naming the rank. */
static void ctl_wait(vr_ctl_t *c, MPI_Request *req, int rank, const char *what) {
  vr_world_t *w = c->w;
  const double end = now_s() + w->timeout_s;
  for (;;) {
    int done = 0;
    if (MPI_Test(req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
      vr_world_abort(w, 1, "MPI error while %s rank %d", what, rank);
    if (done) return;
    if (now_s() > end) {
      const vr_peer_t *p = &w->peers[rank];
      char roles[64], queued[160] = "";
      vr_roles_str(p->roles, roles, sizeof roles);
      /* for the post-mortem: whether anything from that rank reached this one under another tag */
      int flag = 0, bytes = 0;
      MPI_Status st;
      if (MPI_Iprobe(rank, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st) == MPI_SUCCESS && flag &&
          MPI_Get_count(&st, MPI_BYTE, &bytes) == MPI_SUCCESS)
        snprintf(queued, sizeof queued, " (a message of %d bytes with tag %d from it is queued unread)", bytes,
                 st.MPI_TAG);
      else
        snprintf(queued, sizeof queued, " (nothing from it is queued)");
      vr_world_abort(w, 1,
                     "worker rank %d (roles %s, device %s, host %s, pid %d) did not answer command '%s' (seq %u) "
                     "within %.0f s while %s it%s; ending the run. HINT: see that rank's log lines above; raise "
                     "trainer.comm_timeout_s if the command is legitimately slow",
                     rank, roles, p->device, p->host, p->pid, cmd_name(c, c->last_cmd ? c->last_cmd[rank] : 0),
                     c->last_seq ? c->last_seq[rank] : 0, w->timeout_s, what, queued);
    }
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
  }
}

static void ctl_send(vr_ctl_t *c, int rank, const vr_ctl_msg_t *m, const void *payload) {
  MPI_Request req;
  MPI_Isend(m, (int)sizeof *m, MPI_BYTE, rank, VR_CTL_TAG_CMD, MPI_COMM_WORLD, &req);
  ctl_wait(c, &req, rank, "sending to");
  for (uint64_t off = 0; off < m->payload_bytes;) {
    int chunk = m->payload_bytes - off > (1u << 30) ? (1 << 30) : (int)(m->payload_bytes - off);
    MPI_Isend((const char *)payload + off, chunk, MPI_BYTE, rank, VR_CTL_TAG_CMD_DATA, MPI_COMM_WORLD, &req);
    ctl_wait(c, &req, rank, "sending to");
    off += (uint64_t)chunk;
  }
}

int vr_ctl_dispatch(vr_ctl_t *c, vr_group_id_t g, vr_dispatch_t mode, uint32_t cmd, const uint64_t arg[4],
                    const void *payload, size_t elem_size, size_t n_elems, void *out, size_t out_cap,
                    size_t *out_len, vr_ctl_reply_t *replies, int max_replies) {
  vr_world_t *w = c->w;
  int ranks[VR_DEVMAP_MAX_DEVICES];
  int n = vr_ctl_members(w, g, ranks, VR_DEVMAP_MAX_DEVICES);
  if (out_len) *out_len = 0;
  if (n == 0) return 0;
  const uint32_t seq = ++c->seq;
  const double t0 = w->prof ? vr_commprof_now_us() : 0;
  uint64_t sent = 0;
  size_t off = 0;
  for (int k = 0; k < n; k++) {
    vr_ctl_msg_t m;
    memset(&m, 0, sizeof m);
    m.magic = VR_CTL_MAGIC;
    m.cmd = cmd;
    m.seq = seq;
    m.group = (uint32_t)g;
    if (arg) memcpy(m.arg, arg, sizeof m.arg);
    const void *p = payload;
    if (mode == VR_DISPATCH_DP_SPLIT && payload) {
      size_t cnt = n_elems / (size_t)n + ((size_t)k < n_elems % (size_t)n ? 1 : 0);
      m.payload_bytes = cnt * elem_size;
      p = (const char *)payload + off;
      off += cnt * elem_size;
    } else {
      m.payload_bytes = payload ? elem_size * n_elems : 0;
    }
    c->last_cmd[ranks[k]] = cmd;
    c->last_seq[ranks[k]] = seq;
    ctl_send(c, ranks[k], &m, p);
    sent += sizeof m + m.payload_bytes;
  }
  /* every member's reply header at once, against one deadline: a command runs a barrier and a
   * collective on the workers, each bounded by timeout_s, so a healthy member answers (with
   * VR_COMM_ETIMEDOUT if a peer hangs) within about twice that; whoever has not answered by
   * then is the one that hangs, and is named */
  vr_ctl_msg_t hdr[VR_DEVMAP_MAX_DEVICES];
  MPI_Request req[VR_DEVMAP_MAX_DEVICES];
  for (int k = 0; k < n; k++)
    MPI_Irecv(&hdr[k], (int)sizeof hdr[k], MPI_BYTE, ranks[k], VR_CTL_TAG_REPLY, MPI_COMM_WORLD, &req[k]);
  const double end = now_s() + 2 * w->timeout_s + 5;
  int pending = n;
  while (pending > 0 && now_s() <= end) {
    int flag = 0;
    if (MPI_Testall(n, req, &flag, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
      vr_world_abort(w, 1, "MPI error while waiting for the replies to '%s'", cmd_name(c, cmd));
    if (flag) pending = 0;
    if (pending) {
      struct timespec ts = {0, 20000};
      nanosleep(&ts, NULL);
    }
  }
  if (pending) {
    char who[2048] = "", timed[512] = "";
    size_t wl = 0, tl = 0;
    for (int k = 0; k < n; k++) {
      int done = 0;
      MPI_Test(&req[k], &done, MPI_STATUS_IGNORE);
      const vr_peer_t *p = &w->peers[ranks[k]];
      char roles[64];
      vr_roles_str(p->roles, roles, sizeof roles);
      if (!done && wl + 1 < sizeof who)
        wl += (size_t)snprintf(who + wl, sizeof who - wl, "%sworker rank %d (roles %s, device %s, host %s, pid %d)",
                               wl ? "; " : "", ranks[k], roles, p->device, p->host, p->pid);
      else if (done && hdr[k].status != 0 && tl + 1 < sizeof timed)
        tl += (size_t)snprintf(timed + tl, sizeof timed - tl, "%s%d", tl ? ", " : "", ranks[k]);
    }
    vr_world_abort(w, 1,
                   "%s did not answer command '%s' (seq %u) within %.0f s; ending the run%s%s%s. HINT: see that "
                   "rank's log lines above; raise trainer.comm_timeout_s if the command is legitimately slow",
                   who, cmd_name(c, cmd), seq, 2 * w->timeout_s + 5, tl ? " (its peers, ranks " : "", timed,
                   tl ? ", timed out waiting for it)" : "");
  }
  size_t got = 0;
  uint64_t recvd = 0;
  for (int k = 0; k < n; k++) {
    const vr_ctl_msg_t r = hdr[k];
    MPI_Request dreq;
    if (r.magic != VR_CTL_MAGIC || r.seq != seq || r.payload_bytes > VR_CTL_MAX_PAYLOAD)
      vr_world_abort(w, 1, "rank %d answered command '%s' (seq %u) with a malformed reply (magic %08x seq %u)",
                     ranks[k], cmd_name(c, cmd), seq, r.magic, r.seq);
    if (got + r.payload_bytes > out_cap)
      vr_world_abort(w, 1, "rank %d's reply to '%s' carries %llu bytes, beyond the %zu the controller expects",
                     ranks[k], cmd_name(c, cmd), (unsigned long long)r.payload_bytes, out_cap - got);
    for (uint64_t o = 0; o < r.payload_bytes;) {
      int chunk = r.payload_bytes - o > (1u << 30) ? (1 << 30) : (int)(r.payload_bytes - o);
      MPI_Irecv((char *)out + got + o, chunk, MPI_BYTE, ranks[k], VR_CTL_TAG_REPLY_DATA, MPI_COMM_WORLD, &dreq);
      ctl_wait(c, &dreq, ranks[k], "receiving the reply of");
      o += (uint64_t)chunk;
    }
    got += r.payload_bytes;
    recvd += sizeof r + r.payload_bytes;
    if (replies && k < max_replies) {
      replies[k].rank = ranks[k];
      replies[k].status = r.status;
      memcpy(replies[k].value, r.value, sizeof r.value);
    }
  }
  if (out_len) *out_len = got;
  if (w->prof) {
    vr_commprof_event_t e;
    memset(&e, 0, sizeof e);
    snprintf(e.role, sizeof e.role, "control");
    snprintf(e.comm, sizeof e.comm, "mpi");
    e.op = VR_PROF_SEND;
    e.ranks = n + 1;
    e.bytes = sent + recvd;
    e.t0_us = t0;
    e.t1_us = vr_commprof_now_us();
    vr_commprof_add(w->prof, &e);
  }
  return n;
}

void vr_ctl_stop(vr_ctl_t *c) {
  vr_world_t *w = c->w;
  const uint32_t seq = ++c->seq;
  for (int r = 1; r < w->size; r++) {
    vr_ctl_msg_t m;
    memset(&m, 0, sizeof m);
    m.magic = VR_CTL_MAGIC;
    m.cmd = 0;
    m.seq = seq;
    c->last_cmd[r] = 0;
    c->last_seq[r] = seq;
    ctl_send(c, r, &m, NULL);
  }
  for (int r = 1; r < w->size; r++) {
    vr_ctl_msg_t a;
    MPI_Request req;
    MPI_Irecv(&a, (int)sizeof a, MPI_BYTE, r, VR_CTL_TAG_REPLY, MPI_COMM_WORLD, &req);
    ctl_wait(c, &req, r, "waiting for the stop acknowledgement of");
  }
}

int vr_ctl_recv(vr_ctl_t *c, vr_ctl_msg_t *msg, void **payload) {
  *payload = NULL;
  if (MPI_Recv(msg, (int)sizeof *msg, MPI_BYTE, 0, VR_CTL_TAG_CMD, MPI_COMM_WORLD, MPI_STATUS_IGNORE) != MPI_SUCCESS)
    return -1;
  if (msg->magic != VR_CTL_MAGIC || msg->payload_bytes > VR_CTL_MAX_PAYLOAD) return -1;
  if (msg->payload_bytes) {
    char *p = malloc(msg->payload_bytes);
    if (!p) return -1;
    for (uint64_t o = 0; o < msg->payload_bytes;) {
      int chunk = msg->payload_bytes - o > (1u << 30) ? (1 << 30) : (int)(msg->payload_bytes - o);
      if (MPI_Recv(p + o, chunk, MPI_BYTE, 0, VR_CTL_TAG_CMD_DATA, MPI_COMM_WORLD, MPI_STATUS_IGNORE) != MPI_SUCCESS) {
        free(p);
        return -1;
      }
      o += (uint64_t)chunk;
    }
    *payload = p;
  }
  vr_ctl_status(c, "running", msg);
  return 0;
}

int vr_ctl_reply(vr_ctl_t *c, const vr_ctl_msg_t *msg, int32_t status, const double value[4], const void *payload,
                 size_t bytes) {
  vr_ctl_msg_t r;
  memset(&r, 0, sizeof r);
  r.magic = VR_CTL_MAGIC;
  r.cmd = msg->cmd;
  r.seq = msg->seq;
  r.group = msg->group;
  r.status = status;
  if (value) memcpy(r.value, value, sizeof r.value);
  r.payload_bytes = bytes;
  if (MPI_Send(&r, (int)sizeof r, MPI_BYTE, 0, VR_CTL_TAG_REPLY, MPI_COMM_WORLD) != MPI_SUCCESS) return -1;
  for (uint64_t o = 0; o < bytes;) {
    int chunk = bytes - o > (1u << 30) ? (1 << 30) : (int)(bytes - o);
    if (MPI_Send((const char *)payload + o, chunk, MPI_BYTE, 0, VR_CTL_TAG_REPLY_DATA, MPI_COMM_WORLD) != MPI_SUCCESS)
      return -1;
    o += (uint64_t)chunk;
  }
  vr_ctl_status(c, "idle", msg);
  return 0;
}

void vr_ctl_status(vr_ctl_t *c, const char *state, const vr_ctl_msg_t *msg) {
  if (!c->run_dir[0]) return;
  const vr_world_t *w = c->w;
  const vr_peer_t *p = &w->peers[w->rank];
  char roles[64], line[512], path[1200], tmp[1250];
  vr_roles_str(p->roles, roles, sizeof roles);
  int n = snprintf(line, sizeof line, "rank %d pid %d host %s device %s roles %s state %s command %s seq %u\n",
                   w->rank, p->pid, p->host, p->device, roles, state, msg ? cmd_name(c, msg->cmd) : "-",
                   msg ? msg->seq : 0);
  snprintf(path, sizeof path, "%s/rank-%d.status", c->run_dir, w->rank);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return;
  ssize_t wr = write(fd, line, (size_t)n);
  close(fd);
  if (wr == n) rename(tmp, path);
}
