/* rules_fuzz_one.h: one fuzz input through vr_rules' untrusted-input entry
 * points (msgpack extras, JSON extras, math/gsm8k text, reward specs) with
 * invariant checks; aborts on a broken invariant. Returns 0. */
#ifndef VR_RULES_FUZZ_ONE_H
#define VR_RULES_FUZZ_ONE_H

#include <stddef.h>
#include <stdint.h>

int vr_rules_fuzz_one(const uint8_t *data, size_t len);

#endif
