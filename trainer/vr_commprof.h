/* vr_commprof.h: the communication profile (VERL_COMM_PROFILE=1).
 *
 * Every collective and control transfer of a run is recorded with its role, communicator,
 * operation, bytes, stream and start/end time, and written at the end of the run as
 *   <dir>/nccl_trace.json   Chrome trace format (chrome://tracing, Perfetto): one complete
 *                           event ("ph": "X") per record, "pid" = MPI rank, "tid" = stream
 *                           (0: the host/MPI path, 1..: CUDA streams), ts/dur in microseconds
 *                           on one clock shared by the ranks of a host (CLOCK_REALTIME);
 *                           process_name metadata names each rank's device and roles
 *   <dir>/summary.txt       per role and operation: calls, bytes, total time, algorithm
 *                           bandwidth and NCCL bus bandwidth in GB/s (also printed)
 * <dir> is VERL_COMM_PROFILE_PATH, default ./comm_profile/ (created).
 * Times of NCCL operations come from CUDA events recorded around them on their stream
 * (resolved when the operation has completed); MPI operations are timed on the host.
 *
 * Threading: one thread per process records. */
#ifndef VR_COMMPROF_H
#define VR_COMMPROF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vr_commprof vr_commprof_t;

typedef enum vr_commprof_op {
  VR_PROF_ALLREDUCE = 0,
  VR_PROF_BROADCAST = 1,
  VR_PROF_BARRIER = 2,
  VR_PROF_SEND = 3, /* control transfer, controller -> worker or back */
  VR_PROF_RECV = 4,
} vr_commprof_op_t;

typedef struct vr_commprof_event {
  int rank;         /* MPI rank that recorded it (filled by vr_commprof_add) */
  char role[16];    /* "actor", ..., "weight_sync", "control" */
  char comm[16];    /* "nccl" or "mpi" */
  int op;           /* vr_commprof_op_t */
  int ranks;        /* members of the communicator (bus bandwidth factor) */
  int stream;       /* 0 host, 1.. CUDA stream */
  uint64_t bytes;
  double t0_us, t1_us; /* CLOCK_REALTIME microseconds */
} vr_commprof_event_t;

/* NULL when VERL_COMM_PROFILE is unset or "0" (env read once, by the caller's settings);
 * dir NULL = "./comm_profile". */
vr_commprof_t *vr_commprof_new(const char *dir, int rank);
void vr_commprof_free(vr_commprof_t *p);
void vr_commprof_set_label(vr_commprof_t *p, const char *label); /* "rank 1 cuda:0 actor,rollout" */
/* Appends one event (host timed). */
void vr_commprof_add(vr_commprof_t *p, const vr_commprof_event_t *e);
/* Now on the trace clock, microseconds. */
double vr_commprof_now_us(void);
/* The events so far (for the writer and tests). */
const vr_commprof_event_t *vr_commprof_events(const vr_commprof_t *p, size_t *n);
const char *vr_commprof_label(const vr_commprof_t *p);
const char *vr_commprof_dir(const vr_commprof_t *p);

/* Writes nccl_trace.json and summary.txt from the events of every rank (all_events: the
 * concatenation, labels[r] each rank's label, n_ranks ranks). Returns 0 or -1 (with errno)
 * and prints the summary table to out when out != NULL. */
int vr_commprof_write(const char *dir, const vr_commprof_event_t *all_events, size_t n,
                      const char *const *labels, int n_ranks, void *out /* FILE * */);

/* Bus bandwidth factor as NCCL's tests define it: all-reduce 2(n-1)/n, broadcast 1. */
double vr_commprof_bus_factor(int op, int ranks);

#ifdef __cplusplus
}
#endif
#endif /* VR_COMMPROF_H */
