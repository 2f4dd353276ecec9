/* vr_status.c: vr_strerror()/vr_status_name() generated from VR_STATUS_TABLE. */
#include "verl_reward/status.h"

const char *vr_strerror(int status) {
  switch (status) {
#define VR_STATUS_MSG_(name, value, msg) case value: return msg;
    VR_STATUS_TABLE(VR_STATUS_MSG_)
#undef VR_STATUS_MSG_
  }
  return "unknown status";
}

const char *vr_status_name(int status) {
  switch (status) {
#define VR_STATUS_NAME_(name, value, msg) case value: return #name;
    VR_STATUS_TABLE(VR_STATUS_NAME_)
#undef VR_STATUS_NAME_
  }
  return "VR_ERR_UNKNOWN";
}
