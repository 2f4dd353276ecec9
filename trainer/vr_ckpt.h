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
 * Every worker rank drops a marker file (actor/.rank_K_complete) once its files (rank 0: the
 * model; every rank: its optimizer file, written to a temporary name, fsync'd, renamed) are
 * complete. Async (actor.checkpoint.async_save): the workers snapshot the parameters and the
 * AdamW moments into host memory and write every file on a thread of their own while the steps
 * go on; vr_ckpt_finish_async runs the
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

#define VR_CKPT_MAX_MARKERS 512 /* two roles x VR_DEVMAP_MAX_DEVICES ranks */

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
  char markers[VR_CKPT_MAX_MARKERS][64]; /* files (relative) the workers write when their part is complete */
  int n_markers;
  double marker_timeout_s;
} vr_ckpt_t;

int vr_ckpt_init(vr_ckpt_t *c, const char *root, int keep);
/* Creates global_step_N.tmp/ (+ actor/, critic/) for the workers to write into; *dir gets its
 * path. 0 or VR_ERR_IO (logged). Joins a running finish first. */
int vr_ckpt_begin(vr_ckpt_t *c, int64_t step, char *dir, size_t cap);
/* A file (relative to the checkpoint directory, < 64 bytes) the finish waits for and removes.
 * 0, or VR_ERR_INVAL (logged) when the list is full or the name too long. */
int vr_ckpt_expect(vr_ckpt_t *c, const char *rel);
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
