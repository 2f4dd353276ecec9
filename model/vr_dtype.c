/* vr_dtype.c: exact bf16 / f16 -> f32 conversions for backends (vr_backend.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vr_backend.h"

float vr_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16; /* bf16 is the top half of an f32 */
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

float vr_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31;
  uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (man << 13); /* inf / nan */
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (man << 13); /* normal: rebias 15 -> 127 */
  } else if (man == 0) {
    u = sign; /* +-0 */
  } else {
    /* subnormal: man * 2^-24, exact in f32 */
    float f = ldexpf((float)man, -24);
    memcpy(&u, &f, sizeof u);
    u |= sign;
  }
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

float *vr_tensor_to_f32(const vr_tensor_t *t) {
  size_t es = t->dtype == VR_DTYPE_F32 ? 4 : 2;
  size_t n = t->nbytes / es;
  float *out = malloc((n ? n : 1) * sizeof *out);
  if (!out) return NULL;
  const uint8_t *p = t->data;
  switch (t->dtype) {
    case VR_DTYPE_F32:
      memcpy(out, p, n * sizeof *out); /* data may be unaligned: memcpy */
      break;
    case VR_DTYPE_F16:
      for (size_t i = 0; i < n; i++) out[i] = vr_f16_to_f32((uint16_t)(p[2 * i] | (p[2 * i + 1] << 8)));
      break;
    case VR_DTYPE_BF16:
      for (size_t i = 0; i < n; i++) out[i] = vr_bf16_to_f32((uint16_t)(p[2 * i] | (p[2 * i + 1] << 8)));
      break;
  }
  return out;
}
