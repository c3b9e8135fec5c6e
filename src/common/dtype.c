/* dtype.c — sizes and names of datatypes and ops; exact fp16/bf16 <-> fp32 conversions. */
#include "common/dtype.h"

#include <string.h>

#include "common/float_bits.h"

/* One table gives every datatype its size and name, in the order of gcclDataType_t. */
#define DTYPE_TABLE(X)         \
  X(gcclInt8, 1, "int8")       \
  X(gcclUint8, 1, "uint8")     \
  X(gcclInt32, 4, "int32")     \
  X(gcclUint32, 4, "uint32")   \
  X(gcclInt64, 8, "int64")     \
  X(gcclUint64, 8, "uint64")   \
  X(gcclFloat16, 2, "float16") \
  X(gcclFloat32, 4, "float32") \
  X(gcclFloat64, 8, "float64") \
  X(gcclBfloat16, 2, "bfloat16")

/* argcheck tests alignment with a mask. */
#define DTYPE_SIZE_POW2(e, size, name) _Static_assert(((size) & ((size)-1)) == 0, name " has a power-of-two size");
DTYPE_TABLE(DTYPE_SIZE_POW2)
#undef DTYPE_SIZE_POW2

size_t dtype_size(gcclDataType_t dt) {
  switch (dt) {
#define DTYPE_SIZE_CASE(e, size, name) \
  case e:                              \
    return size;
    DTYPE_TABLE(DTYPE_SIZE_CASE)
#undef DTYPE_SIZE_CASE
    default:
      return 0;
  }
}

const char* dtype_name(gcclDataType_t dt) {
  switch (dt) {
#define DTYPE_NAME_CASE(e, size, name) \
  case e:                              \
    return name;
    DTYPE_TABLE(DTYPE_NAME_CASE)
#undef DTYPE_NAME_CASE
    default:
      return "invalid";
  }
}

const char* op_name(gcclRedOp_t op) {
  switch (op) {
    case gcclSum:
      return "sum";
    case gcclProd:
      return "prod";
    case gcclMax:
      return "max";
    case gcclMin:
      return "min";
    case gcclAvg:
      return "avg";
    default:
      return "invalid";
  }
}

int dtype_is_float(gcclDataType_t dt) {
  return dt == gcclFloat16 || dt == gcclFloat32 || dt == gcclFloat64 || dt == gcclBfloat16;
}

/* The conversions live in float_bits.h, shared with the CUDA kernels. */
float half_to_float(uint16_t h) {
  return fb_half_to_float(h);
}

uint16_t float_to_half(float f) {
  return fb_float_to_half(f);
}

float bf16_to_float(uint16_t b) {
  return fb_bf16_to_float(b);
}

uint16_t float_to_bf16(float f) {
  return fb_float_to_bf16(f);
}

void f32_load(float* dst, const void* src, gcclDataType_t dt, size_t n) {
  switch (dt) {
    case gcclFloat32:
      if (n && dst != src) memmove(dst, src, n * sizeof *dst);
      break;
    case gcclFloat64:
      for (size_t i = 0; i < n; i++) dst[i] = (float)((const double*)src)[i];
      break;
    case gcclFloat16:
      for (size_t i = 0; i < n; i++) dst[i] = half_to_float(((const uint16_t*)src)[i]);
      break;
    case gcclBfloat16:
      for (size_t i = 0; i < n; i++) dst[i] = bf16_to_float(((const uint16_t*)src)[i]);
      break;
    default:
      break;
  }
}

void f32_store(void* dst, gcclDataType_t dt, const float* src, size_t n) {
  switch (dt) {
    case gcclFloat32:
      if (n && dst != src) memmove(dst, src, n * sizeof *src);
      break;
    case gcclFloat64:
      for (size_t i = 0; i < n; i++) ((double*)dst)[i] = src[i];
      break;
    case gcclFloat16:
      for (size_t i = 0; i < n; i++) ((uint16_t*)dst)[i] = float_to_half(src[i]);
      break;
    case gcclBfloat16:
      for (size_t i = 0; i < n; i++) ((uint16_t*)dst)[i] = float_to_bf16(src[i]);
      break;
    default:
      break;
  }
}
