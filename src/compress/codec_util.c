/* codec_util.c — helpers shared by the codecs (see codec_util.h). */
#include "compress/codec_util.h"

#include <math.h>
#include <stdlib.h>

#include "common/dtype.h"
#include "common/result.h"
#include "compress/codec_math.h"

int codec_force_scalar;

gcclResult_t exc_push(struct exc_list* l, uint64_t i) {
  if (l->n == l->cap) {
    size_t cap = l->cap ? 2 * l->cap : 64;
    uint64_t* p = realloc(l->idx, cap * sizeof *p);
    if (p == NULL) return err_set(gcclSystemError, "out of memory growing the exceptions list to %zu entries", cap);
    l->idx = p;
    l->cap = cap;
  }
  l->idx[l->n++] = i;
  return gcclSuccess;
}

gcclResult_t exc_push_range(struct exc_list* exc, uint64_t base, size_t m) {
  /* Entries already pushed for this block are a sorted tail >= base. */
  size_t first = exc->n;
  while (first > 0 && exc->idx[first - 1] >= base) first--;
  size_t had = exc->n - first;
  if (had == m) return gcclSuccess;
  exc->n = first;
  for (size_t i = 0; i < m; i++) GCCL_CHECK(exc_push(exc, base + i));
  return gcclSuccess;
}

int all_finite(const float* x, size_t m) {
  uint32_t bad = 0;
  for (size_t i = 0; i < m; i++) {
    uint32_t u;
    memcpy(&u, &x[i], 4);
    bad |= (uint32_t)((u & 0x7F800000u) == 0x7F800000u);
  }
  return bad == 0;
}

float canon_sum_abs(const float* v, size_t m) {
  float lane[16] = {0};
  size_t i = 0;
  for (; i + 16 <= m; i += 16)
    for (int j = 0; j < 16; j++) lane[j] += fabsf(v[i + j]);
  for (int j = 0; i + (size_t)j < m; j++) lane[j] += fabsf(v[i + j]);
  return canon_lanes_combine(lane);
}

float canon_sum_sq(const float* v, size_t m) {
  float lane[16] = {0};
  size_t i = 0;
  for (; i + 16 <= m; i += 16)
    for (int j = 0; j < 16; j++) lane[j] += v[i + j] * v[i + j];
  for (int j = 0; i + (size_t)j < m; j++) lane[j] += v[i + j] * v[i + j];
  return canon_lanes_combine(lane);
}

float max_abs(const float* v, size_t m) {
  float mx = 0.0f;
  for (size_t i = 0; i < m; i++) {
    float a = fabsf(v[i]);
    mx = a > mx ? a : mx;
  }
  return mx;
}

gcclResult_t sanitize_block(const float* x, size_t m, uint64_t base, float* tmp, struct exc_list* exc) {
  for (size_t i = 0; i < m; i++) {
    if (f32_finite(x[i])) {
      tmp[i] = x[i];
    } else {
      tmp[i] = 0.0f;
      GCCL_CHECK(exc_push(exc, base + i));
    }
  }
  return gcclSuccess;
}

void block_accumulate(void* dst, gcclDataType_t dt, size_t base, float* v, size_t m, const uint64_t* exc, size_t nexc,
                      size_t* cursor) {
  size_t c = *cursor;
  while (c < nexc && exc[c] < base + m) v[exc[c++] - base] = 0.0f;
  *cursor = c;
  switch (dt) {
    case gcclFloat32: {
      float* d = (float*)dst + base;
      for (size_t i = 0; i < m; i++) d[i] += v[i];
      break;
    }
    case gcclFloat64: {
      double* d = (double*)dst + base;
      for (size_t i = 0; i < m; i++) d[i] += (double)v[i];
      break;
    }
    case gcclFloat16: {
      uint16_t* d = (uint16_t*)dst + base;
      for (size_t i = 0; i < m; i++) d[i] = float_to_half(half_to_float(d[i]) + v[i]);
      break;
    }
    case gcclBfloat16: {
      uint16_t* d = (uint16_t*)dst + base;
      for (size_t i = 0; i < m; i++) d[i] = float_to_bf16(bf16_to_float(d[i]) + v[i]);
      break;
    }
    default:
      break; /* lossy codecs only see float dtypes (frame_validate checks) */
  }
}

void elem_accumulate(void* dst, gcclDataType_t dt, size_t i, float v) {
  switch (dt) {
    case gcclFloat32:
      ((float*)dst)[i] += v;
      break;
    case gcclFloat64:
      ((double*)dst)[i] += (double)v;
      break;
    case gcclFloat16: {
      uint16_t* d = dst;
      d[i] = float_to_half(half_to_float(d[i]) + v);
      break;
    }
    case gcclBfloat16: {
      uint16_t* d = dst;
      d[i] = float_to_bf16(bf16_to_float(d[i]) + v);
      break;
    }
    default:
      break;
  }
}

size_t values_size(enum spec_values vt) {
  return vt == SPEC_VALUES_FP32 ? 4 : 2;
}

float values_put(unsigned char* p, enum spec_values vt, float x) {
  uint16_t h;
  switch (vt) {
    case SPEC_VALUES_FP16:
      h = float_to_half(x);
      memcpy(p, &h, 2);
      return half_to_float(h);
    case SPEC_VALUES_BF16:
      h = float_to_bf16(x);
      memcpy(p, &h, 2);
      return bf16_to_float(h);
    default:
      put_f32(p, x);
      return x;
  }
}

float values_get(const unsigned char* p, enum spec_values vt) {
  uint16_t h;
  switch (vt) {
    case SPEC_VALUES_FP16:
      memcpy(&h, p, 2);
      return half_to_float(h);
    case SPEC_VALUES_BF16:
      memcpy(&h, p, 2);
      return bf16_to_float(h);
    default:
      return get_f32(p);
  }
}

size_t sparse_k(double ratio, size_t n) {
  if (n == 0) return 0;
  double k = floor(ratio * (double)n + 0.5);
  if (k < 1.0) return 1;
  if (k >= (double)n) return n;
  return (size_t)k;
}
