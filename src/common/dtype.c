/* dtype.c — sizes and names of datatypes and ops; exact fp16/bf16 <-> fp32 conversions. */
#include "common/dtype.h"

#include <string.h>

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

/* Bit casts through memcpy: defined behaviour, compiled to a register move. */
static uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* The conversions below are integer-only, so they are exact whatever the FPU's
 * rounding mode or flush-to-zero setting. A NaN comes out quiet and keeps the top
 * bits of its payload, as x86 F16C and ARM FCVT do. reduce.c carries branch-free
 * copies for its vectorised loops; tests/common/test_reduce.cc checks that they
 * agree bit for bit. */

float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) /* inf, or NaN made quiet */
    return bits_float(sign | 0x7f800000u | (mant << 13) | (mant ? 0x00400000u : 0));
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    /* Subnormal mant * 2^-24: shift the leading one up to the implicit bit. */
    exp = 127 - 14;
    while (!(mant & 0x400u)) {
      mant <<= 1;
      exp--;
    }
    return bits_float(sign | (exp << 23) | ((mant & 0x3ffu) << 13));
  }
  return bits_float(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

/* Rounds q + rem/2^shift to the nearest integer, ties to even (0 < shift < 32). */
static uint32_t round_shift_rne(uint32_t m, unsigned shift) {
  uint32_t q = m >> shift;
  uint32_t rem = m & ((1u << shift) - 1);
  uint32_t half = 1u << (shift - 1);
  return q + (rem > half || (rem == half && (q & 1)));
}

uint16_t float_to_half(float f) {
  uint32_t x = float_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) /* NaN: quiet, top payload bits kept */
    return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x477ff000u) /* >= 65520 = 65504 + half an ulp: rounds to inf (or is inf) */
    return (uint16_t)(sign | 0x7c00u);
  if (ax >= 0x38800000u) /* >= 2^-14: normal half; a mantissa carry bumps the exponent */
    return (uint16_t)(sign | round_shift_rne(ax - ((127u - 15u) << 23), 13));
  if (ax <= 0x33000000u) /* <= 2^-25, half the smallest subnormal: ties to even, 0 */
    return sign;
  /* Subnormal half: count units of 2^-24. The value is m * 2^(e-150), so the
   * count is m >> (126 - e), 14 <= 126 - e <= 24. Rounding up to 0x400 gives the
   * smallest normal, which is the right encoding. */
  uint32_t e = ax >> 23;
  uint32_t m = (ax & 0x7fffffu) | 0x800000u;
  return (uint16_t)(sign | round_shift_rne(m, 126 - e));
}

float bf16_to_float(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  if ((x & 0x7fffffffu) > 0x7f800000u) x |= 0x00400000u; /* NaN made quiet */
  return bits_float(x);
}

uint16_t float_to_bf16(float f) {
  uint32_t x = float_bits(f);
  /* A NaN whose payload lives in the low 16 bits would truncate to inf. */
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x0040u);
  /* Round to nearest even on bit 16; a carry into the exponent gives inf correctly. */
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
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
