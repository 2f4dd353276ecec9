/* layout_probe: prints the size and field offsets of the client.h structs as
 * JSON, for tests/python/test_layout.py to compare with the ctypes mirrors in
 * python/verl_reward/_lib.py (and the text.h structs with python/verl_reward/text.py). Exit code 0; output on stdout only. */
#include <stddef.h>
#include <stdio.h>

#include "verl_reward/client.h"
#include "verl_reward/text.h"

#define FIELD(T, f) printf("%s\"%s\": %zu", first ? "" : ", ", #f, offsetof(T, f)), first = 0

int main(void) {
  int first;
  printf("{");
  printf("\"vr_client_options_t\": {\"size\": %zu, \"fields\": {", sizeof(vr_client_options_t));
  first = 1;
  FIELD(vr_client_options_t, timeout_us);
  FIELD(vr_client_options_t, connect_timeout_us);
  FIELD(vr_client_options_t, spin_us);
  FIELD(vr_client_options_t, expected_server_uid);
  FIELD(vr_client_options_t, socket_dir);
  printf("}}, \"vr_batch_t\": {\"size\": %zu, \"fields\": {", sizeof(vr_batch_t));
  first = 1;
  FIELD(vr_batch_t, n_seqs);
  FIELD(vr_batch_t, token_ids);
  FIELD(vr_batch_t, cu_seqlens);
  FIELD(vr_batch_t, extras);
  FIELD(vr_batch_t, extras_len);
  printf("}}, \"vr_request_info_t\": {\"size\": %zu, \"fields\": {", sizeof(vr_request_info_t));
  first = 1;
  FIELD(vr_request_info_t, status);
  FIELD(vr_request_info_t, n_seqs);
  FIELD(vr_request_info_t, queue_us);
  FIELD(vr_request_info_t, compute_us);
  FIELD(vr_request_info_t, bad_seq);
  FIELD(vr_request_info_t, n_components);
  FIELD(vr_request_info_t, component_names);
  printf("}}, \"vr_limits_t\": {\"size\": %zu, \"fields\": {", sizeof(vr_limits_t));
  first = 1;
  FIELD(vr_limits_t, max_seq_len);
  FIELD(vr_limits_t, max_seqs_per_request);
  FIELD(vr_limits_t, arena_bytes);
  FIELD(vr_limits_t, max_inflight);
  FIELD(vr_limits_t, vocab_size);
  FIELD(vr_limits_t, n_lanes);
  printf("}}, \"vr_text_options_t\": {\"size\": %zu, \"fields\": {", sizeof(vr_text_options_t));
  first = 1;
  FIELD(vr_text_options_t, add_special_tokens);
  FIELD(vr_text_options_t, add_generation_prompt);
  FIELD(vr_text_options_t, chat_template_kwargs);
  FIELD(vr_text_options_t, chat_template);
  printf("}}, \"vr_text_batch_t\": {\"size\": %zu, \"fields\": {", sizeof(vr_text_batch_t));
  first = 1;
  FIELD(vr_text_batch_t, n);
  FIELD(vr_text_batch_t, items);
  FIELD(vr_text_batch_t, lens);
  FIELD(vr_text_batch_t, extras);
  FIELD(vr_text_batch_t, extras_len);
  printf("}}, \"VR_MAX_COMPONENTS\": %d, \"VR_COMPONENT_NAME_MAX\": %d}\n", VR_MAX_COMPONENTS,
         VR_COMPONENT_NAME_MAX);
  return 0;
}
