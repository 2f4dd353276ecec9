/* vr_ckpt.h: the RL loop's checkpoints, laid out as verl's (ray_trainer._save_checkpoint):
 *
 *   <default_local_dir>/global_step_N/actor/   model.safetensors + config.json (HF, loadable by
 *                                              transformers) + optim_rank_K.bin per actor rank
 *   <default_local_dir>/global_step_N/critic/  the same for the critic (when there is one)
 *   <default_local_dir>/global_step_N/data.json  trainer state: global_step, the data loader
 *                                              (epoch, batch index, seed, shuffle), the KL
 *                                              controller's coefficient, the rollout seed
 *   <default_local_dir>/latest_checkpointed_iteration.txt   "N", written last
 *
 * Crash safety: a checkpoint is written into global_step_N.tmp (removed first if a crash left
 * one), then renamed to global_step_N once every file is complete and fsync'd, and only then is
 * the tracker replaced (written to a temporary name, fsync'd, renamed). A crash at any point
 * leaves the tracker naming the previous complete checkpoint; a stale .tmp is ignored and
 * removed by the next save. max_ckpt_to_keep > 0 removes the oldest global_step_* after a save.
 *
 * Async (actor.checkpoint.async_save): the workers write the model files (safetensors) on a
 * thread of their own from a snapshot of the parameters and drop a marker file when complete
 * (the optimizer files are written before the step goes on); vr_ckpt_finish_async runs the
 * finishing part on a background thread: it waits for the markers named with vr_ckpt_expect
 * (removing them), then data.json, fsync, rename, tracker, pruning. vr_ckpt_join waits for it
 * (called before the next save and at the end).
 *
 * Threading: the controller's thread, plus the one background thread per vr_ckpt_t. */
#ifndef VR_CKPT_H
#define VR_CKPT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vr_ckpt_state {
  int64_t global_step;
  uint64_t epoch, index, seed;
  int shuffle;
  double kl_coef;
} vr_ckpt_state_t;

typedef struct vr_ckpt {
  char root[1024];
  int keep;              /* max_ckpt_to_keep; 0 = all */
  pthread_t thread;
  int running;
  int last_rc;           /* of the last finished save */
  /* the job of the background thread */
  char tmp[1200], final[1100];
  vr_ckpt_state_t st;
  int64_t crash_after;   /* tests: _exit(9) inside the save of this step, before the rename (0 = off) */
  char markers[4][1300]; /* files the workers write when their part is complete (async) */
  int n_markers;
  double marker_timeout_s;
} vr_ckpt_t;

int vr_ckpt_init(vr_ckpt_t *c, const char *root, int keep);
/* Creates global_step_N.tmp/ (+ actor/, critic/) for the workers to write into; *dir gets its
 * path. 0 or VR_ERR_IO (logged). Joins a running finish first. */
int vr_ckpt_begin(vr_ckpt_t *c, int64_t step, char *dir, size_t cap);
/* A file (relative to the checkpoint directory) the finish waits for and removes. */
void vr_ckpt_expect(vr_ckpt_t *c, const char *rel);
/* Finishes the checkpoint begun for st->global_step (synchronously, or on the thread). */
int vr_ckpt_finish(vr_ckpt_t *c, const vr_ckpt_state_t *st);
int vr_ckpt_finish_async(vr_ckpt_t *c, const vr_ckpt_state_t *st);
/* Waits for a background finish; returns its status. */
int vr_ckpt_join(vr_ckpt_t *c);

/* The newest complete checkpoint per the tracker: *step (0 when none) and its directory. A
 * tracker naming a missing directory is VR_ERR_NOT_FOUND (logged). */
int vr_ckpt_latest(const char *root, int64_t *step, char *dir, size_t cap);
/* Reads dir/data.json. 0 or VR_ERR_NOT_FOUND / VR_ERR_PARSE (logged with the path and field). */
int vr_ckpt_read_state(const char *dir, vr_ckpt_state_t *st);

#ifdef __cplusplus
}
#endif
#endif /* VR_CKPT_H */
