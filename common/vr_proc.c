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

/* Reads /proc/PID/stat; returns 0 on success with state and start time. */
static int read_stat(pid_t pid, char *state, uint64_t *start) {
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
  *state = *p;
  /* p is at field 3 (state); start time is field 22 */
  for (int field = 3; field < 22; field++) {
    p = strchr(p, ' ');
    if (!p) return -1;
    p++;
  }
  char *end;
  errno = 0;
  unsigned long long v = strtoull(p, &end, 10);
  if (errno || end == p) return -1;
  *start = v;
  return 0;
}

uint64_t vr_proc_start_time(pid_t pid) {
  char st;
  uint64_t start;
  if (pid <= 0 || read_stat(pid, &st, &start) != 0) return 0;
  return start;
}

int vr_proc_alive(pid_t pid, uint64_t start_time) {
  char st;
  uint64_t start;
  if (pid <= 0) return 0;
  if (read_stat(pid, &st, &start) != 0) {
    /* no /proc entry: fall back on kill(0) (EPERM means it exists) */
    if (kill(pid, 0) == 0 || errno == EPERM) return start_time == 0;
    return 0;
  }
  if (st == 'Z' || st == 'X') return 0;
  return start_time == 0 || start == start_time;
}
