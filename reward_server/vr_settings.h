/* vr_settings.h: verl-reward-server settings (one struct, defaults in one init).
 *
 * Precedence: defaults (vr_settings_init) < --config FILE < command line.
 * Every key of the config file is a long flag without the dashes ("port: 8080",
 * "max-batch-tokens = 8192", underscores accepted: "max_batch_tokens"). The
 * struct holds its strings inline: no allocation, no free. Not thread-safe:
 * filled once by main() before any thread starts, read-only afterwards. */
#ifndef VR_SETTINGS_H
#define VR_SETTINGS_H

#include <stdint.h>
#include <stdio.h>

#include "vr_model.h"

typedef enum vr_truncate {
  VR_TRUNCATE_ERROR = 0, /* a sequence longer than max_seq_len is rejected */
  VR_TRUNCATE_LEFT = 1,  /* keep the last max_seq_len tokens (decoder RMs score the end) */
  VR_TRUNCATE_RIGHT = 2, /* keep the first max_seq_len tokens */
} vr_truncate_t;

#define VR_SETTINGS_STR 1024
#define VR_SETTINGS_MAX_REPLICAS 16   /* model replicas of one server (--device list entries) */
#define VR_SETTINGS_DEVICES_STR 256

typedef struct vr_settings {
  char model[VR_SETTINGS_STR];    /* model directory, "checksum", or "" (rules-only) */
  char shm_name[256];             /* "" disables the shm channel */
  int port;                       /* HTTP port; 0 disables HTTP */
  char host[256];
  char device[VR_SETTINGS_DEVICES_STR]; /* "cpu", "cuda", "cuda:N", a list of replicas' devices
                                  * "cuda:0,cuda:1" (vr_settings_devices; canonical), "" = auto */
  char dtype[16];                 /* "auto", "f32", "bf16" */
  uint32_t max_batch_tokens;
  uint32_t max_wait_us;
  uint32_t batch_linger_us;
  uint32_t max_seq_len;
  vr_truncate_t truncate;
  uint32_t spin_us;
  uint32_t lanes;
  char shm_socket_dir[96];        /* --shm-socket-dir, "" = the default directory */
  uint32_t max_lanes_per_uid;     /* 0 = derived from the policy (vr_shm_config_t) */
  uint32_t shm_mode;              /* who may attach (owner / group / other bits) */
  char allow_uid[256];            /* --allow-uid list (vr_settings_ids), "" = none */
  char allow_gid[256];            /* --allow-gid list */
  uint32_t ring_slots;
  uint32_t arena_mb;
  uint32_t max_seqs_per_request;
  char log_level[16];
  char pid_file[VR_SETTINGS_STR];
  char ready_file[VR_SETTINGS_STR]; /* written (atomically) once ready, removed at exit; "" = none */
  char reward[512];               /* reward spec, "" = "model" */
  uint64_t max_body_bytes;        /* 0: derived (vr_settings_body_limit) */
  uint32_t max_queue;             /* requests accepted but not yet batched */
  uint32_t max_queue_per_client;  /* requests of one client queued (fairness) */
  uint32_t max_connections;       /* HTTP connections open at once (vr_http_guard) */
  uint32_t request_timeout_s;     /* whole-request deadline of an HTTP connection */
  int threads;                    /* cpu backend threads, 0 = all cores */
  char cpu_gemm[16];              /* cpu backend GEMM variant: "auto", "generic", "avx2+fma" */
  uint32_t drain_ms;              /* shutdown: time to finish accepted work */
  char config[VR_SETTINGS_STR];   /* the --config file read, if any */
  char admin_token_file[VR_SETTINGS_STR]; /* POST /admin/reload's token; "" = endpoint off */
  vr_cuda_options_t cuda;         /* --cuda-* flags (vr_cuda_options_set names and parses them) */
} vr_settings_t;

/* Fills every field with its default. */
void vr_settings_init(vr_settings_t *s);

/* Applies --config (if given) then the command line, then vr_settings_check. Returns 0, 1 when
 * --help or --version was printed (caller exits 0), or VR_ERR_INVAL after printing to stderr
 * what was wrong (an unknown flag by name, a flag without its value, file:line, flag and value):
 * the caller exits 2 and nothing has been loaded. */
int vr_settings_parse(vr_settings_t *s, int argc, char **argv);

/* The checks that need every setting (run by vr_settings_parse before anything loads): the
 * reward spec needs a model and --model is given, --model DIR is a directory with config.json,
 * --model checksum with --device cuda (refused: the checksum scorer runs on the cpu), the
 * device/dtype pair, --ring-slots a power of two, --pid-file's folder writable. 0 or VR_ERR_INVAL with err (flag, value, HINT). */
int vr_settings_check(const vr_settings_t *s, char *err, size_t errlen);

/* Reads one config file into s. VR_ERR_IO / VR_ERR_INVAL with a message. */
int vr_settings_load_file(vr_settings_t *s, const char *path);

/* Sets one key (long flag name without dashes, '_' or '-') from text.
 * Returns 0, VR_ERR_NOT_FOUND for an unknown key, VR_ERR_INVAL for a bad value;
 * err (may be NULL) gets the reason. */
int vr_settings_set(vr_settings_t *s, const char *key, const char *value, char *err, size_t errlen);

/* Prints --help with every flag and its default. */
void vr_settings_usage(FILE *f, const char *prog);

const char *vr_truncate_name(vr_truncate_t t);

/* The long name of the first flag whose value differs between a and b and is not one of
 * allowed (a NULL-terminated list of long names); "cuda-*" for the --cuda-* options; NULL
 * when they agree but for allowed ones (a reload's check). */
const char *vr_settings_first_difference(const vr_settings_t *a, const vr_settings_t *b, const char *const *allowed);

/* The HTTP body limit: --max-body-bytes, or when 0 the limit derived from the request
 * limits (max-seqs-per-request x (max-seq-len x 12 + 1024) + 64 KiB, at most 4 GiB). */
uint64_t vr_settings_body_limit(const vr_settings_t *s);

/* Parses a comma-separated list of user (groups 0) or group (groups 1) names or numeric ids
 * into out (at most max). 0, or VR_ERR_INVAL with err naming the bad entry. */
#define VR_SETTINGS_MAX_IDS 32
int vr_settings_ids(const char *text, int groups, uint32_t *out, uint32_t max, uint32_t *n, char *err, size_t errlen);

/* --device: one model replica per entry of a comma-separated list. An entry is "cpu",
 * "cuda:N", or a bare N after a cuda entry (cuda:0,1,2,3 = cuda:0,cuda:1,cuda:2,cuda:3); a
 * device may repeat (cuda:0,cuda:0: two replicas on one GPU; cpu,cpu). "cuda" (the first visible
 * GPU) and "" (auto) only alone; cpu and cuda entries do not mix (a sequence's score must not
 * depend on the replica that scored it). At most VR_SETTINGS_MAX_REPLICAS entries. Writes the
 * canonical device of each entry into out[i] (16 bytes each; out may be NULL) and the count into
 * *n ("" gives one entry ""); 0, or VR_ERR_INVAL / VR_ERR_UNSUPPORTED with err naming the entry
 * (its position and text) and a HINT. Thread-safe, touches no device. */
int vr_settings_devices(const char *text, char (*out)[16], uint32_t *n, char *err, size_t errlen);

#endif /* VR_SETTINGS_H */
