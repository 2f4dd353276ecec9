/* vr_notify.c: sd_notify datagrams and the ready file (vr_notify.h). */
#define _GNU_SOURCE
#include "vr_notify.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "verl_reward/status.h"
#include "vr_log.h"

int vr_notify_init(vr_notify_t *n) {
  memset(n, 0, sizeof *n);
  n->fd = -1;
  const char *e = getenv("NOTIFY_SOCKET");
  if (!e || !*e) return 0;
  size_t len = strlen(e);
  if ((e[0] != '/' && e[0] != '@') || len >= sizeof n->path) {
    vr_log(VR_LOG_WARN, "NOTIFY_SOCKET=\"%s\" is neither an absolute path nor an @abstract name of at most %zu "
           "bytes; not notifying. HINT: systemd sets it for Type=notify units", e, sizeof n->path - 1);
    unsetenv("NOTIFY_SOCKET");
    return VR_ERR_INVAL;
  }
  memcpy(n->path, e, len);
  if (e[0] == '@') n->path[0] = 0; /* abstract namespace: a leading NUL, no terminator */
  n->path_len = (unsigned)len;
  unsetenv("NOTIFY_SOCKET");
  n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (n->fd < 0) {
    vr_log(VR_LOG_WARN, "cannot create the sd_notify socket: %s; not notifying", strerror(errno));
    return VR_ERR_IO;
  }
  return 0;
}

int vr_notify_send(vr_notify_t *n, const char *text) {
  if (n->fd < 0) return 0;
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  memcpy(sa.sun_path, n->path, n->path_len);
  socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n->path_len + (n->path[0] ? 1 : 0));
  if (sendto(n->fd, text, strlen(text), MSG_NOSIGNAL, (struct sockaddr *)&sa, salen) < 0) {
    vr_log(VR_LOG_WARN, "sd_notify to %s%s failed: %s", n->path[0] ? "" : "@", n->path[0] ? n->path : n->path + 1,
           strerror(errno));
    return VR_ERR_IO;
  }
  vr_log(VR_LOG_DEBUG, "sd_notify: %s", text);
  return 0;
}

void vr_notify_free(vr_notify_t *n) {
  if (n->fd >= 0) close(n->fd);
  n->fd = -1;
}

int vr_ready_file_write(const char *path, const char *content) {
  char tmp[1100];
  if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) {
    vr_log(VR_LOG_ERROR, "ready file path too long: %s", path);
    return VR_ERR_IO;
  }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    vr_log(VR_LOG_ERROR, "cannot write ready file %s: %s. HINT: --ready-file needs a writable directory", tmp,
           strerror(errno));
    return VR_ERR_IO;
  }
  size_t len = strlen(content);
  int ok = write(fd, content, len) == (ssize_t)len && fsync(fd) == 0;
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp, path) != 0) {
    vr_log(VR_LOG_ERROR, "cannot write ready file %s: %s", path, strerror(errno));
    unlink(tmp);
    return VR_ERR_IO;
  }
  return 0;
}
