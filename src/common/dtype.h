/* dtype.h — sizes and names of datatypes and reduction ops. */
#ifndef GCCL_COMMON_DTYPE_H
#define GCCL_COMMON_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "gccl.h"

/* Bytes per element; 0 for an invalid datatype. */
size_t dtype_size(gcclDataType_t dt);
/* "float32", "int8", ...; "invalid" for a bad value. */
const char* dtype_name(gcclDataType_t dt);
/* "sum", "prod", "max", "min", "avg"; "invalid" for a bad value. */
const char* op_name(gcclRedOp_t op);
/* 1 for gcclFloat16/32/64 and gcclBfloat16. */
int dtype_is_float(gcclDataType_t dt);

/* fp16 and bf16 conversions, round-to-nearest-even, NaN kept NaN. */
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);

/* Float tensors to and from fp32 (fp64 rounds to nearest; halves as above).
 * dt must be a float type. In place (dst == src) only for fp32. */
void f32_load(float* dst, const void* src, gcclDataType_t dt, size_t n);
void f32_store(void* dst, gcclDataType_t dt, const float* src, size_t n);

#endif
