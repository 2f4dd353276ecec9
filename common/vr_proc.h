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

/* 1 when a process with this pid and start time is alive (zombies count as
 * dead), 0 otherwise. start_time 0 matches any start time. */
int vr_proc_alive(pid_t pid, uint64_t start_time);
#endif
