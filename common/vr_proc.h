/* vr_proc.h: process identity for liveness checks.
 *
 * A pid alone is reused by the kernel; (pid, start time) names one process.
 * Start time is field 22 of /proc/PID/stat, in clock ticks since boot. */
#ifndef VR_PROC_H
#define VR_PROC_H
#include <stdint.h>
#include <sys/types.h>

/* Start time of pid in clock ticks since boot; 0 when the process does not
 * exist (or /proc cannot be read). Thread-safe. */
uint64_t vr_proc_start_time(pid_t pid);

/* The fields of /proc/PID/stat that the liveness check and the process
 * metrics read (proc(5) numbering). Times in clock ticks (sysconf(_SC_CLK_TCK)). */
typedef struct vr_proc_stat {
  char state;             /* field 3: R, S, D, Z, X, ... */
  uint64_t utime, stime;  /* fields 14, 15: user / system CPU time */
  uint64_t start_time;    /* field 22: ticks after boot */
  uint64_t vsize;         /* field 23: virtual memory, bytes */
  uint64_t rss_pages;     /* field 24: resident set, pages */
} vr_proc_stat_t;

/* Reads /proc/PID/stat into *out. 0 on success, -1 when the process does not
 * exist or the file does not parse (*out is then unspecified). Thread-safe. */
int vr_proc_stat(pid_t pid, vr_proc_stat_t *out);

/* 1 when a process with this pid and start time is alive (zombies count as
 * dead), 0 otherwise. start_time 0 matches any start time. */
int vr_proc_alive(pid_t pid, uint64_t start_time);
#endif
