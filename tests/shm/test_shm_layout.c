/* test_shm_layout: pins the segment layout of protocol v2 (the lane and header layout, unchanged from v1) (docs/protocol.md,
 * "Shared-memory segment"). Compile time: the static asserts in
 * verl_reward/protocol.h plus the full table below. Run time: a segment created by
 * the server is read back as raw bytes at the documented offsets. Also pins
 * the checksum scorer's values (other languages reimplement it). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "shm_test_util.h"
#include "verl_reward/protocol.h"
#include "vr_checksum.h"
#include "vr_shm.h"

#define PIN(type, field, off) _Static_assert(offsetof(type, field) == (off), #type "." #field " at " #off)
PIN(vr_shm_header_t, magic, 0);
PIN(vr_shm_header_t, version, 8);
PIN(vr_shm_header_t, header_bytes, 12);
PIN(vr_shm_header_t, lane_header_bytes, 16);
PIN(vr_shm_header_t, req_desc_bytes, 20);
PIN(vr_shm_header_t, resp_desc_bytes, 24);
PIN(vr_shm_header_t, n_lanes, 28);
PIN(vr_shm_header_t, ring_slots, 32);
PIN(vr_shm_header_t, max_seq_len, 36);
PIN(vr_shm_header_t, max_seqs_per_request, 40);
PIN(vr_shm_header_t, vocab_size, 44);
PIN(vr_shm_header_t, arena_bytes, 48);
PIN(vr_shm_header_t, lane_bytes, 56);
PIN(vr_shm_header_t, lanes_offset, 64);
PIN(vr_shm_header_t, total_bytes, 72);
PIN(vr_shm_header_t, server_pid, 80);
PIN(vr_shm_header_t, server_uid, 84);
PIN(vr_shm_header_t, server_start_time, 88);
PIN(vr_shm_header_t, epoch, 96);
PIN(vr_shm_header_t, max_components, 104);
PIN(vr_shm_header_t, component_name_bytes, 108);
PIN(vr_shm_header_t, server_pidns, 112);
PIN(vr_shm_header_t, state, 128);
PIN(vr_shm_header_t, heartbeat_ns, 136);
PIN(vr_shm_header_t, srv_seq, 192);
PIN(vr_shm_header_t, srv_waiters, 196);
_Static_assert(sizeof(vr_shm_header_t) == 256, "header size");
PIN(vr_shm_lane_t, lease, 0);
PIN(vr_shm_lane_t, client_start_time, 8);
PIN(vr_shm_lane_t, client_uid, 20);
PIN(vr_shm_lane_t, req_head, 64);
PIN(vr_shm_lane_t, resp_tail, 68);
PIN(vr_shm_lane_t, cli_waiters, 72);
PIN(vr_shm_lane_t, req_tail, 128);
PIN(vr_shm_lane_t, resp_head, 132);
PIN(vr_shm_lane_t, cli_seq, 136);
PIN(vr_shm_lane_t, reset_reason, 140);
_Static_assert(sizeof(vr_shm_lane_t) == 256, "lane header size");
PIN(vr_shm_req_desc_t, req_id, 0);
PIN(vr_shm_req_desc_t, n_seqs, 8);
PIN(vr_shm_req_desc_t, n_tokens, 12);
PIN(vr_shm_req_desc_t, payload_off, 16);
PIN(vr_shm_req_desc_t, extras_bytes, 24);
PIN(vr_shm_req_desc_t, flags, 28);
PIN(vr_shm_req_desc_t, result_off, 32);
PIN(vr_shm_req_desc_t, submit_ns, 40);
_Static_assert(sizeof(vr_shm_req_desc_t) == 64, "request descriptor size");
PIN(vr_shm_resp_desc_t, req_id, 0);
PIN(vr_shm_resp_desc_t, status, 8);
PIN(vr_shm_resp_desc_t, n_seqs, 12);
PIN(vr_shm_resp_desc_t, queue_us, 16);
PIN(vr_shm_resp_desc_t, compute_us, 20);
PIN(vr_shm_resp_desc_t, bad_seq, 24);
PIN(vr_shm_resp_desc_t, n_components, 28);
PIN(vr_shm_resp_desc_t, flags, 32);
PIN(vr_shm_resp_desc_t, component_names, 64);
_Static_assert(sizeof(vr_shm_resp_desc_t) == 256, "response descriptor size");

static uint32_t u32_at(const uint8_t *p, size_t off) {
  uint32_t v;
  memcpy(&v, p + off, 4);
  return v;
}
static uint64_t u64_at(const uint8_t *p, size_t off) {
  uint64_t v;
  memcpy(&v, p + off, 8);
  return v;
}

static void test_segment_bytes(void **state) {
  (void)state;
  char name[64];
  tu_name(name, sizeof name, "layout");
  vr_shm_config_t cfg;
  tu_shm_config(&cfg, name, 3, 10000); /* rounded up to a multiple of 64: 10048 */
  cfg.ring_slots = 8;
  cfg.max_seq_len = 777;
  cfg.max_seqs_per_request = 55;
  cfg.vocab_size = 32000;
  vr_shm_server_t *s;
  assert_int_equal(vr_shm_server_create(&cfg, &s), 0);
  vr_shm_server_set_state(s, VR_SHM_READY);
  /* a client is given lane 0 and its lease word reads (generation 0, pid) */
  vr_client_t *c;
  vr_client_options_t o;
  vr_client_options_init(&o);
  assert_int_equal(vr_client_connect(name, &o, &c), 0);
  vr_shm_map_t m; /* the header as a client receives it (read-only); this attach takes lane 1 */
  char why[256];
  assert_int_equal(vr_shm_attach(name, NULL, -1, &m, why, sizeof why), 0);
  assert_int_equal(m.lane_idx, 1);
  uint8_t *p = m.base;
  assert_memory_equal(p, "VRRSHMV1", 8);
  assert_int_equal(u64_at(p, 0), VR_SHM_MAGIC);
  assert_int_equal(u32_at(p, 8), 2);
  assert_int_equal(u32_at(p, 12), 256);
  assert_int_equal(u32_at(p, 16), 256);
  assert_int_equal(u32_at(p, 20), 64);
  assert_int_equal(u32_at(p, 24), 256);
  assert_int_equal(u32_at(p, 28), 3);
  assert_int_equal(u32_at(p, 32), 8);
  assert_int_equal(u32_at(p, 36), 777);
  assert_int_equal(u32_at(p, 40), 55);
  assert_int_equal(u32_at(p, 44), 32000);
  assert_int_equal(u64_at(p, 48), 10048);
  uint64_t lane = 256 + 8 * 64 + 8 * 256 + 10048; /* 12864 -> 16384 */
  lane = (lane + 4095) / 4096 * 4096;
  assert_int_equal(u64_at(p, 56), lane);
  assert_int_equal(u64_at(p, 64), 4096);
  assert_int_equal(u64_at(p, 72), 4096 + 3 * lane);
  assert_int_equal((uint64_t)m.bytes, 4096); /* the header page; each lane is its own memfd */
  assert_int_equal((pid_t)u32_at(p, 80), getpid());
  assert_int_equal(u32_at(p, 84), geteuid());
  assert_true(u64_at(p, 88) != 0);
  assert_true(u64_at(p, 96) != 0);
  assert_int_equal(u32_at(p, 104), 8);
  assert_int_equal(u32_at(p, 108), 24);
  assert_int_equal(u32_at(p, 128), VR_SHM_ST_READY);
  assert_true(u64_at(p, 136) != 0);
  assert_int_equal(vr_shm_header_check((const vr_shm_header_t *)p, (uint64_t)m.bytes, why, sizeof why), 0);
  const uint8_t *l0 = (const uint8_t *)vr_shm_server_lane(s, 0); /* the server's view of c's lane */
  assert_int_equal(u64_at(l0, 0), (uint64_t)getpid());
  assert_int_equal(u64_at((const uint8_t *)m.lane, 0), (uint64_t)getpid()); /* ours: lane 1, generation 0 */
  /* one request: descriptor at lane + 256, payload in the arena */
  int32_t ids[3] = {7, 8, 9};
  uint32_t cu[2] = {0, 3};
  vr_batch_t b = {.n_seqs = 1, .token_ids = ids, .cu_seqlens = cu};
  uint64_t id;
  assert_int_equal(vr_client_submit(c, &b, &id), 0);
  assert_int_equal(u32_at(l0, 64), 1);          /* req_head */
  assert_int_equal(u64_at(l0, 256), id);        /* req_id */
  assert_int_equal(u32_at(l0, 256 + 8), 1);     /* n_seqs */
  assert_int_equal(u32_at(l0, 256 + 12), 3);    /* n_tokens */
  uint64_t off = u64_at(l0, 256 + 16);
  const uint8_t *arena = l0 + 256 + 8 * 64 + 8 * 256;
  assert_int_equal(u32_at(arena, off), 7);
  assert_int_equal(u32_at(arena, off + 8), 9);
  assert_int_equal(u32_at(arena, off + 16), 3); /* cu_seqlens[1] */
  vr_shm_request_t q;
  assert_int_equal(vr_shm_server_poll(s, &q, 1, 1000000), 1);
  assert_int_equal(u32_at(l0, 128), 1);         /* req_tail */
  float sc = 0.75f;
  assert_int_equal(vr_shm_server_complete(s, &q, 0, &sc, NULL, 0, NULL, NULL, 1, 2), 0);
  assert_int_equal(u32_at(l0, 132), 1);         /* resp_head */
  const uint8_t *resp = l0 + 256 + 8 * 64;
  assert_int_equal(u64_at(resp, 0), id);
  assert_int_equal(u32_at(resp, 32), VR_SHM_RESP_HAS_SCORES);
  uint64_t roff = u64_at(l0, 256 + 32);
  float got;
  memcpy(&got, arena + roff, 4);
  assert_true(got == 0.75f);
  assert_int_equal(vr_client_wait(c, id, 1000000, &sc, NULL, NULL), 0);
  assert_int_equal(u32_at(l0, 68), 1);          /* resp_tail */
  vr_client_close(c);
  vr_shm_detach(&m);
  vr_shm_server_destroy(s);
}

static void test_checksum_values(void **state) {
  (void)state;
  /* pinned: docs/protocol.md gives the same values (and a Python version) */
  assert_true(vr_checksum_score((int32_t[]){1, 2, 3}, 3) == 16614848.0f / 16777216.0f);
  assert_true(vr_checksum_score((int32_t[]){3, 2, 1}, 3) == 8998171.0f / 16777216.0f);
  assert_true(vr_checksum_score((int32_t[]){0}, 1) == 6438256.0f / 16777216.0f);
  assert_true(vr_checksum_score((int32_t[]){151643, 9707, 11, 1879, 0, -1}, 6) == 2938852.0f / 16777216.0f);
  /* length matters: a prefix scores differently */
  assert_true(vr_checksum_score((int32_t[]){1, 2, 3}, 2) != vr_checksum_score((int32_t[]){1, 2, 3}, 3));
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_segment_bytes), cmocka_unit_test(test_checksum_values)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
