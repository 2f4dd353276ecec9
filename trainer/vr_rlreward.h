/* vr_rlreward.h: the RL loop's reward, from verl-reward-server through libverl_reward_client
 * (include/verl_reward/client.h) over shared memory.
 *
 * Each response is sent as its token ids (prompt ++ response, what a reward model reads) with a
 * msgpack extras map (docs/operations.md "Extras"): solution_str (the decoded response, or its
 * ids as decimal text separated by spaces when there is no tokenizer), data_source,
 * ground_truth and extra_info (the dataset row's, JSON turned into msgpack), so rule components
 * and model components both work.
 *
 * submit() sends a batch (in requests of at most the server's max_seqs_per_request) and returns
 * at once: the scoring overlaps what the caller does next; wait() collects the scores. A server
 * that restarted or went away (VR_ERR_SERVER_RESTARTED / VR_ERR_SERVER_GONE /
 * VR_ERR_SHUTTING_DOWN, also on connect) is retried: the client reconnects for up to
 * retry_s seconds and sends the batch again; only then is it an error. A server that takes a
 * request and never answers (stopped, wedged, overloaded) is an error after timeout_s per
 * request (trainer.reward_timeout_s), named as such: the loop never waits forever.
 *
 * Threading: one thread (the controller's). */
#ifndef VR_RLREWARD_H
#define VR_RLREWARD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vr_rlreward vr_rlreward_t;

/* shm_name: the server's --shm-name; retry_s: how long a restart may take; timeout_s: how long
 * one request may go unanswered (VR_ERR_TIMEOUT from wait, with a message naming the key). */
int vr_rlreward_open(const char *shm_name, double retry_s, double timeout_s, vr_rlreward_t **out);
void vr_rlreward_close(vr_rlreward_t *rw);

/* One batch: n sequences ids[cu[i], cu[i+1]); extras[i] a msgpack blob of extras_len[i] bytes.
 * The batch is copied. 0 or a negative vr_status_t. */
int vr_rlreward_submit(vr_rlreward_t *rw, uint32_t n, const int32_t *ids, const uint32_t *cu,
                       uint8_t *const *extras, const uint32_t *extras_len);
/* The submitted batch's scores (n floats). */
int vr_rlreward_wait(vr_rlreward_t *rw, float *scores);
/* Restarts seen (reconnections that succeeded). */
int vr_rlreward_restarts(const vr_rlreward_t *rw);
/* The last waited batch's requests as the server timed them (queue_us + compute_us of each
 * answer: intake to batch start, plus the batch's scoring): their mean and maximum in ms.
 * Returns the number of answered requests (0: none yet; both 0). Requests sent again after a
 * restart count once, as answered. */
uint32_t vr_rlreward_server_ms(const vr_rlreward_t *rw, double *mean_ms, double *max_ms);

/* msgpack extras: a malloc'd map {data_source, solution_str, ground_truth, extra_info}; NULL
 * fields are left out; extra_info_json is JSON text converted to msgpack (NULL when it does not
 * parse). */
uint8_t *vr_rlreward_extras(const char *data_source, const char *solution_str, const char *ground_truth,
                            const char *extra_info_json, uint32_t *len);

#ifdef __cplusplus
}
#endif
#endif /* VR_RLREWARD_H */
