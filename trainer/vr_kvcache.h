/* vr_kvcache.h: the rollout's paged KV cache, host side: which block holds which positions.
 *
 * The pool is num_blocks blocks of block_size token positions (the K/V memory itself belongs to the
 * backend, allocated once at its init). A sequence's block table lists its blocks in position
 * order: position p lives in table[p / block_size], row p % block_size. Blocks are reference
 * counted so the n responses of a prompt share the prompt's blocks (vr_kvcache_fork); a shared
 * block is copied before a sequence writes into it (vr_kvcache_cow). Free blocks sit on a stack:
 * the same requests in the same order get the same blocks.
 *
 * Every function is O(blocks touched); nothing allocates after vr_kvcache_init. Not thread-safe. */
#ifndef VR_KVCACHE_H
#define VR_KVCACHE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vr_kvcache {
  uint32_t num_blocks, block_size;
  uint32_t *refcnt;  /* (num_blocks) 0 = free */
  uint32_t *stack;   /* (num_blocks) free block ids, top at n_free - 1 */
  uint32_t n_free;
  uint32_t peak_used;
} vr_kvcache_t;

/* 0 or VR_ERR_NOMEM / VR_ERR_INVAL (num_blocks or block_size 0). */
int vr_kvcache_init(vr_kvcache_t *c, uint32_t num_blocks, uint32_t block_size);
void vr_kvcache_free(vr_kvcache_t *c);
/* Every block back on the free list (refcounts 0), in the initial order. */
void vr_kvcache_reset(vr_kvcache_t *c);

/* Blocks a sequence of len positions occupies: ceil(len / block_size). */
uint32_t vr_kvcache_blocks_for(const vr_kvcache_t *c, uint32_t len);
uint32_t vr_kvcache_n_free(const vr_kvcache_t *c);

/* Grows a table of *n_blocks blocks to cover len positions: all the blocks it needs, or none
 * (VR_ERR_NOSPACE when fewer are free; the table is unchanged). 0 on success. */
int vr_kvcache_grow(vr_kvcache_t *c, int32_t *table, uint32_t *n_blocks, uint32_t len);
/* Drops the table's references (blocks whose count reaches 0 go back on the free list); *n_blocks = 0. */
void vr_kvcache_release(vr_kvcache_t *c, int32_t *table, uint32_t *n_blocks);
/* dst shares src's n blocks (each reference count + 1). */
void vr_kvcache_fork(vr_kvcache_t *c, const int32_t *src, int32_t *dst, uint32_t n);
/* Before writing position pos (inside the table): when its block is shared, takes a fresh block
 * for this table and returns 1 with *from / *to set (the caller copies the K/V from -> to); 0 when
 * the block is already private; VR_ERR_NOSPACE when a copy is needed and no block is free. */
int vr_kvcache_cow(vr_kvcache_t *c, int32_t *table, uint32_t pos, uint32_t *from, uint32_t *to);
/* Free blocks needed before positions [start, len) can be written: new blocks beyond n_blocks, plus
 * one when the block holding start is shared. */
uint32_t vr_kvcache_need(const vr_kvcache_t *c, const int32_t *table, uint32_t n_blocks, uint32_t start, uint32_t len);

#ifdef __cplusplus
}
#endif
#endif /* VR_KVCACHE_H */
