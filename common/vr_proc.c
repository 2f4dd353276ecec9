/* vr_proc.c: see vr_proc.h. */
#define _GNU_SOURCE
#include "vr_proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int vr_proc_stat(pid_t pid, vr_proc_stat_t *out) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  /* comm may hold spaces and parentheses: fields restart after the last ')' */
  char *p = strrchr(buf, ')');
  if (!p || p[1] != ' ') return -1;
  p += 2;
  out->state = *p;
  /* p is at field 3 (state); numeric fields 4 .. 24 follow, one space apart */
  uint64_t f[25] = {0};
  for (int field = 4; field <= 24; field++) {
    p = strchr(p, ' ');
    if (!p) return -1;
    p++;
    char *end;
    errno = 0;
    long long v = strtoll(p, &end, 10); /* a few fields (priority, nice) are signed */
    if (errno || end == p) return -1;
    f[field] = (uint64_t)v;
  }
  out->utime = f[14];
  out->stime = f[15];
  out->start_time = f[22];
  out->vsize = f[23];
  out->rss_pages = f[24];
  return 0;
}

uint64_t vr_proc_start_time(pid_t pid) {
  vr_proc_stat_t ps;
  if (pid <= 0 || vr_proc_stat(pid, &ps) != 0) return 0;
  return ps.start_time;
}

int vr_proc_alive(pid_t pid, uint64_t start_time) {
  vr_proc_stat_t ps;
  if (pid <= 0) return 0;
  if (vr_proc_stat(pid, &ps) != 0) {
    /* no /proc entry: fall back on kill(0) (EPERM means it exists) */
    if (kill(pid, 0) == 0 || errno == EPERM) return start_time == 0;
    return 0;
  }
  if (ps.state == 'Z' || ps.state == 'X') return 0;
  return start_time == 0 || ps.start_time == start_time;
}
