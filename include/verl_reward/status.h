/* verl_reward/status.h: error codes shared by every component and by clients.
 *
 * All fallible functions return 0 (VR_OK) or a negative vr_status_t. The table
 * below is the single source of truth: it generates the enum, vr_strerror() and
 * vr_status_name(). Codes are part of the wire protocol (they travel in
 * responses) and of the Python binding: append new codes, never renumber. */
#ifndef VERL_REWARD_STATUS_H
#define VERL_REWARD_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

/*        NAME                      value  message */
#define VR_STATUS_TABLE(X)                                                                 \
  X(VR_OK,                           0,  "success")                                        \
  X(VR_ERR_INVAL,                   -1,  "invalid argument")                               \
  X(VR_ERR_NOMEM,                   -2,  "out of memory")                                  \
  X(VR_ERR_IO,                      -3,  "I/O error")                                      \
  X(VR_ERR_TIMEOUT,                 -4,  "timed out")                                      \
  X(VR_ERR_SERVER_GONE,             -5,  "reward server is gone (died or stopped)")       \
  X(VR_ERR_SERVER_RESTARTED,        -6,  "reward server restarted (epoch changed); reconnect") \
  X(VR_ERR_SHUTTING_DOWN,           -7,  "reward server is shutting down")                 \
  X(VR_ERR_TOO_LARGE,               -8,  "request too large for the server's limits")      \
  X(VR_ERR_SEQ_TOO_LONG,            -9,  "sequence longer than the maximum length")        \
  X(VR_ERR_EMPTY_SEQ,              -10,  "empty sequence")                                 \
  X(VR_ERR_TOKEN_RANGE,            -11,  "token id outside the model's vocabulary")        \
  X(VR_ERR_NO_LANE,                -12,  "no free client lane in the segment")             \
  X(VR_ERR_OVERLOADED,             -13,  "server overloaded; retry later")                 \
  X(VR_ERR_EXISTS,                 -14,  "already exists (a live server owns this name)") \
  X(VR_ERR_NOSPACE,                -15,  "not enough space (e.g. /dev/shm too small)")     \
  X(VR_ERR_BAD_SEGMENT,            -16,  "shared-memory segment is malformed or of another version") \
  X(VR_ERR_PERM,                   -17,  "permission denied")                              \
  X(VR_ERR_NOT_FOUND,              -18,  "not found")                                      \
  X(VR_ERR_MODEL_FORMAT,           -19,  "malformed model file")                           \
  X(VR_ERR_UNSUPPORTED,            -20,  "unsupported (architecture, dtype or option)")    \
  X(VR_ERR_DEVICE,                 -21,  "device (GPU) error")                             \
  X(VR_ERR_MALFORMED,              -22,  "malformed request")                              \
  X(VR_ERR_AGAIN,                  -23,  "not ready yet; try again")                       \
  X(VR_ERR_CANCELLED,              -24,  "cancelled")                                      \
  X(VR_ERR_INTERNAL,               -25,  "internal error")                                 \
  X(VR_ERR_NO_DEVICE,              -26,  "no usable GPU device")                           \
  X(VR_ERR_PARSE,                  -27,  "could not parse input")                          \
  X(VR_ERR_BUSY,                   -28,  "resource busy (too many requests in flight)")  \
  X(VR_ERR_NONFINITE,              -29,  "score is not finite (NaN/Inf)")

typedef enum vr_status {
#define VR_STATUS_ENUM_(name, value, msg) name = value,
  VR_STATUS_TABLE(VR_STATUS_ENUM_)
#undef VR_STATUS_ENUM_
} vr_status_t;

/* Human-readable message for a status; never NULL ("unknown status" for codes
 * not in the table). Thread-safe; the string is static. */
const char *vr_strerror(int status);

/* The enum name ("VR_ERR_TIMEOUT"); never NULL. Thread-safe; static string. */
const char *vr_status_name(int status);

#ifdef __cplusplus
}
#endif
#endif /* VERL_REWARD_STATUS_H */
