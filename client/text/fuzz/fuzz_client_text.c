/* fuzz_client_text: libFuzzer harness for vr_client_text_encode / _render (include/verl_reward/text.h)
 * on random texts and conversation JSON, with the tokenizer of $VR_CLIENT_TEXT_FUZZ_DIR (loaded once).
 * Input: byte 0 picks the kind (bit 0: conversations) and the option (bit 1: add_special_tokens for
 * texts, add_generation_prompt for conversations); the rest is up to 8 items separated by 0x1E.
 * Checked: a batch gives the items' own ids in order (cu_seqlens), equal to the tokenizer's encode
 * of the text (texts) or of the rendered template with add_special_tokens off (conversations);
 * refused exactly when an item is refused alone, naming the first such item; every id < vocab.
 * Build: -DVR_FUZZ=ON with clang. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "verl_reward/text.h"
#include "vr_tokenizer.h"

static vr_client_text_t *tt;
static vr_tok_t *tok;

static void load(void) {
  const char *dir = getenv("VR_CLIENT_TEXT_FUZZ_DIR");
  char err[512];
  if (!dir || vr_client_text_load(dir, &tt) || vr_tok_load(dir, &tok, err, sizeof err)) {
    fprintf(stderr, "fuzz_client_text: set VR_CLIENT_TEXT_FUZZ_DIR to a tokenizer directory (%s)\n",
            tt ? err : vr_client_text_last_error());
    abort();
  }
}

/* the reference for one item: 0 and its ids, or nonzero */
static int reference(int chat, const vr_text_options_t *o, const char *item, size_t len, int32_t **ids, size_t *n) {
  char err[512];
  if (!chat) return vr_tok_encode(tok, item, len, o->add_special_tokens, ids, n, err, sizeof err);
  char *text = NULL;
  size_t tl = 0;
  if (len == 0) return -1; /* render's len 0 means NUL-terminated; an empty item is not JSON */
  int rc = vr_client_text_render(tt, item, len, o, &text, &tl);
  if (rc) return rc;
  rc = vr_tok_encode(tok, text, tl, 0, ids, n, err, sizeof err);
  vr_client_text_buffer_free(text);
  return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!tt) load();
  if (size < 1) return 0;
  int chat = data[0] & 1;
  vr_text_options_t o;
  vr_text_options_init(&o);
  if (chat) o.add_generation_prompt = (data[0] >> 1) & 1;
  else o.add_special_tokens = (data[0] >> 1) & 1;
  const char *items[8];
  size_t lens[8];
  uint32_t n = 0;
  const char *p = (const char *)data + 1, *end = (const char *)data + size;
  while (n < 8) {
    const char *sep = memchr(p, 0x1E, (size_t)(end - p));
    items[n] = p;
    lens[n] = (size_t)((sep ? sep : end) - p);
    n++;
    if (!sep) break;
    p = sep + 1;
  }
  vr_text_batch_t b = {.n = n, .items = items, .lens = lens};
  int32_t *ids = NULL;
  uint32_t *cu = NULL;
  uint64_t nt = 0;
  int rc = vr_client_text_encode(tt, chat ? VR_TEXT_INPUT_CHAT : VR_TEXT_INPUT_PLAIN, &b, &o, &ids, &cu, &nt);
  if (rc > 0) abort();
  if (rc && (!vr_client_text_last_error()[0] || vr_client_text_last_bad_item() < 0)) abort();
  int32_t bad = rc ? vr_client_text_last_bad_item() : -1;
  uint32_t vocab = vr_client_text_vocab_size(tt);
  for (uint32_t i = 0; i < n; i++) {
    int32_t *r = NULL;
    size_t rn = 0;
    int rrc = reference(chat, &o, items[i], lens[i], &r, &rn);
    if (rc == 0) {
      if (rrc) abort(); /* the batch took an item the reference refuses */
      if (rrc == 0 && (cu[i + 1] - cu[i] != rn || (rn && memcmp(ids + cu[i], r, rn * sizeof *r)))) abort();
    } else if ((int32_t)i < bad) {
      if (rrc) abort(); /* an earlier item is to blame, not the one named */
    } else if ((int32_t)i == bad) {
      if (rrc == 0) abort();
    }
    free(r);
  }
  if (rc == 0) {
    if (cu[0] != 0 || cu[n] != nt) abort();
    for (uint64_t k = 0; k < nt; k++)
      if (ids[k] < 0 || (uint32_t)ids[k] >= vocab) abort();
  }
  free(ids);
  free(cu);
  return 0;
}
