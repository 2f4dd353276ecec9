/* vr_kvcache.c: block allocator with reference counts (vr_kvcache.h). */
#include "vr_kvcache.h"

#include <stdlib.h>

#include "verl_reward/status.h"

int vr_kvcache_init(vr_kvcache_t *c, uint32_t num_blocks, uint32_t block_size) {
  c->refcnt = NULL;
  c->stack = NULL;
  if (num_blocks == 0 || block_size == 0) return VR_ERR_INVAL;
  c->num_blocks = num_blocks;
  c->block_size = block_size;
  c->refcnt = calloc(num_blocks, sizeof *c->refcnt);
  c->stack = malloc((size_t)num_blocks * sizeof *c->stack);
  if (!c->refcnt || !c->stack) {
    vr_kvcache_free(c);
    return VR_ERR_NOMEM;
  }
  vr_kvcache_reset(c);
  return 0;
}

void vr_kvcache_free(vr_kvcache_t *c) {
  free(c->refcnt);
  free(c->stack);
  c->refcnt = NULL;
  c->stack = NULL;
  c->n_free = 0;
}

void vr_kvcache_reset(vr_kvcache_t *c) {
  /* block 0 on top: a fresh cache hands out 0, 1, 2, ... */
  for (uint32_t i = 0; i < c->num_blocks; i++) {
    c->refcnt[i] = 0;
    c->stack[i] = c->num_blocks - 1 - i;
  }
  c->n_free = c->num_blocks;
  c->peak_used = 0;
}

uint32_t vr_kvcache_blocks_for(const vr_kvcache_t *c, uint32_t len) {
  return (uint32_t)(((uint64_t)len + c->block_size - 1) / c->block_size);
}

uint32_t vr_kvcache_n_free(const vr_kvcache_t *c) { return c->n_free; }

static uint32_t vr_kvcache_take(vr_kvcache_t *c) {
  uint32_t b = c->stack[--c->n_free];
  c->refcnt[b] = 1;
  if (c->num_blocks - c->n_free > c->peak_used) c->peak_used = c->num_blocks - c->n_free;
  return b;
}

static void vr_kvcache_unref(vr_kvcache_t *c, uint32_t b) {
  if (--c->refcnt[b] == 0) c->stack[c->n_free++] = b;
}

int vr_kvcache_grow(vr_kvcache_t *c, int32_t *table, uint32_t *n_blocks, uint32_t len) {
  uint32_t need = vr_kvcache_blocks_for(c, len);
  if (need <= *n_blocks) return 0;
  if (need - *n_blocks > c->n_free) return VR_ERR_NOSPACE;
  while (*n_blocks < need) table[(*n_blocks)++] = (int32_t)vr_kvcache_take(c);
  return 0;
}

void vr_kvcache_release(vr_kvcache_t *c, int32_t *table, uint32_t *n_blocks) {
  /* last block first, so a sequence that is released and re-admitted gets its blocks back in order */
  for (uint32_t i = *n_blocks; i-- > 0;) vr_kvcache_unref(c, (uint32_t)table[i]);
  *n_blocks = 0;
}

void vr_kvcache_fork(vr_kvcache_t *c, const int32_t *src, int32_t *dst, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    dst[i] = src[i];
    c->refcnt[src[i]]++;
  }
}

int vr_kvcache_cow(vr_kvcache_t *c, int32_t *table, uint32_t pos, uint32_t *from, uint32_t *to) {
  uint32_t i = pos / c->block_size, b = (uint32_t)table[i];
  if (c->refcnt[b] <= 1) return 0;
  if (c->n_free == 0) return VR_ERR_NOSPACE;
  uint32_t nb = vr_kvcache_take(c);
  c->refcnt[b]--; /* still > 0: the other sharers keep it */
  table[i] = (int32_t)nb;
  *from = b;
  *to = nb;
  return 1;
}

uint32_t vr_kvcache_need(const vr_kvcache_t *c, const int32_t *table, uint32_t n_blocks, uint32_t start, uint32_t len) {
  uint32_t want = vr_kvcache_blocks_for(c, len), need = want > n_blocks ? want - n_blocks : 0;
  uint32_t i = start / c->block_size;
  if (i < n_blocks && c->refcnt[table[i]] > 1) need++;
  return need;
}
