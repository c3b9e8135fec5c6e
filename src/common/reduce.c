/* reduce.c — element-wise reduction kernels for every datatype and op.
 *
 * Shape of every reduction: the index range is cut into blocks of REDUCE_BLOCK
 * elements. For each block the sources are combined, strictly in the order
 * srcs[0], srcs[1], ..., into an accumulator block that stays in L1. Where dst
 * may be read again as a later source, the accumulator is a private stack
 * buffer copied to dst once the block is done: a block of every source is read
 * before the same block of dst is written, so dst may be any of the sources.
 * Every loop is restrict-qualified (the accumulator never overlaps a source it
 * reads) and vectorises without alias checks.
 *
 * Two sources of a few elements skip the blocks (REDUCE_SHORT below).
 *
 * fp16 and bf16 blocks are widened to fp32, reduced with the fp32 kernels, and
 * narrowed once at the end (one rounding, as reduce.h promises).
 *
 * Results are bit-reproducible: the order of operations is fixed, IEEE add, mul,
 * div, max and min are exact whatever the vector width, no FMA contraction can
 * happen (each statement does one operation), and the F16C and the software
 * half conversions agree on all inputs. So every code path below computes the
 * same bits, on every CPU, and so does every rank.
 */
#include "common/reduce.h"

#include <stdint.h>
#include <string.h>

#include "common/dtype.h"

/* 2048 elements: a block of accumulator is at most 16 KiB (float64, or fp32
 * plus a widened source for halves), which leaves room in a 32 KiB L1 for the
 * source lines streaming through. 1024..8192 measured the same within noise. */
#define REDUCE_BLOCK 2048

/* Hot floating kernels are compiled for several ISAs and picked at load time
 * (GNU ifunc), so one binary uses AVX-512 or AVX2 where the CPU has it.
 * ifunc needs an ELF/glibc target; elsewhere the default build is used. */
/* Not under ThreadSanitizer: it instruments the ifunc resolvers, which run during
 * relocation before its runtime starts, and the program dies before main. */
#if defined(__SANITIZE_THREAD__)
#define GCCL_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GCCL_TSAN 1
#endif
#endif
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__has_attribute) && !defined(GCCL_TSAN)
#if __has_attribute(target_clones)
#define HOT_KERNEL __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef HOT_KERNEL
#define HOT_KERNEL
#endif

/* Integer kernels stay in the baseline ISA: SSE2 already runs them near memory
 * speed, and they are rare in training. */
#define PLAIN_KERNEL

/* for (size_t j = 0; j < n; j++) { body }, as two loops: gcc -O2 (the
 * "very-cheap" cost model) vectorises only a loop whose trip count is a known
 * multiple of the vector length, so the first loop runs a multiple of 64
 * elements (the most lanes of any vector here: int8 in AVX-512) and the second
 * the tail. Full blocks have no tail. -O3 vectorises either form. */
#define VEC_LOOP(j, n, ...)                          \
  for (size_t j = 0; j < ((n) & ~(size_t)63); j++) { \
    __VA_ARGS__                                      \
  }                                                  \
  for (size_t j = (n) & ~(size_t)63; j < (n); j++) { \
    __VA_ARGS__                                      \
  }

/* ---- fp16 / bf16 conversions, branch-free so that the loops vectorise -------
 * These must agree bit for bit with half_to_float etc. in dtype.c (integer-only,
 * easier to read) and with x86 F16C: all three were compared over every input
 * (2^16 and 2^32); test_reduce.cc checks every half and bf16, and sums of
 * random pairs for the narrowing direction. */

static inline uint32_t f2u(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static inline float u2f(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* c ? a : b, for c in {0, 1}, as masks: gcc does not if-convert the nested
 * conditionals these conversions need, and a branch stops vectorisation.
 * Comparisons are on int32_t (the operands are below 2^31): AVX2 has no
 * unsigned compare, and emulating one costs two more instructions. */
static inline uint32_t select_u32(int c, uint32_t a, uint32_t b) {
  uint32_t mask = 0u - (uint32_t)c;
  return (a & mask) | (b & ~mask);
}

static inline float h2f(uint16_t h) {
  uint32_t em = (uint32_t)(h & 0x7fffu) << 13; /* exponent and mantissa, in place */
  uint32_t exp = em & 0x0f800000u;
  uint32_t normal = em + (112u << 23); /* rebias 15 -> 127 */
  /* inf keeps its bits; NaN is made quiet, as in dtype.c */
  uint32_t infnan = em | 0x7f800000u | select_u32((int32_t)em > 0x0f800000, 0x00400000u, 0);
  /* Subnormal m * 2^-24 = (1 + m/1024) * 2^-14 - 2^-14: exact in fp32. */
  uint32_t sub = f2u(u2f(em + (113u << 23)) - 0x1p-14f);
  uint32_t r = select_u32(exp == 0x0f800000u, infnan, select_u32(exp == 0, sub, normal));
  return u2f(r | (uint32_t)(h & 0x8000u) << 16);
}

static inline uint16_t f2h(float f) {
  uint32_t x = f2u(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7fffffffu;
  int32_t sax = (int32_t)ax;
  /* Normal half: round to nearest even on bit 13; a carry bumps the exponent and
   * turns values >= 65520 into inf. Wraps (harmlessly, unused) for tiny ax. */
  uint32_t normal = (ax - (112u << 23) + 0xfffu + ((ax >> 13) & 1u)) >> 13;
  /* Subnormal half: adding 0.5 (ulp 2^-24) rounds |f| to a multiple of 2^-24 in
   * the FPU's default round-to-nearest-even mode; the low bits are the count.
   * Inputs that DAZ would flush are below 2^-126 and round to 0 anyway. */
  uint32_t sub = f2u(u2f(ax) + 0.5f) - 0x3f000000u;
  uint32_t infnan = select_u32(sax > 0x7f800000, 0x7e00u | ((ax >> 13) & 0x3ffu), 0x7c00u);
  uint32_t r = select_u32(sax >= 0x47800000, infnan, select_u32(sax < 0x38800000, sub, normal));
  return (uint16_t)(r | sign);
}

static inline float b2f(uint16_t b) {
  uint32_t x = (uint32_t)b << 16;
  return u2f(x | select_u32((int32_t)(x & 0x7fffffffu) > 0x7f800000, 0x00400000u, 0));
}

static inline uint16_t f2b(float f) {
  uint32_t x = f2u(f);
  /* A NaN is made quiet and loses its low 16 bits first, so that rounding cannot
   * carry out of its payload (or truncate it to inf). */
  uint32_t nan = 0u - (uint32_t)((int32_t)(x & 0x7fffffffu) > 0x7f800000);
  x = (x & ~(nan & 0xffffu)) | (nan & 0x00400000u);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* ---- the ops ---------------------------------------------------------------
 * Integers add and multiply in the unsigned type of the same width, so they wrap
 * without undefined behaviour (8-bit operands promote to int, where 255*255
 * cannot overflow); the conversion back to a signed type is modulo 2^N in gcc
 * and clang. Floating max/min return a NaN operand if there is one: (a > b ? a
 * : b) is what maxps computes, which gives b when b is NaN; the a != a test adds
 * the NaN in a. Equal operands give b (so max(+0, -0) is -0, reproducibly). */
#define OP_ISUM(T, U, a, b) ((T)((U)(a) + (U)(b)))
#define OP_IPROD(T, U, a, b) ((T)((U)(a) * (U)(b)))
#define OP_IMAX(T, U, a, b) ((a) > (b) ? (a) : (b))
#define OP_IMIN(T, U, a, b) ((a) < (b) ? (a) : (b))
#define OP_FSUM(T, U, a, b) ((a) + (b))
#define OP_FPROD(T, U, a, b) ((a) * (b))
#define OP_FMAX(T, U, a, b) _Generic((a), float : max_f32, double : max_f64)((a), (b))
#define OP_FMIN(T, U, a, b) _Generic((a), float : min_f32, double : min_f64)((a), (b))

/* Two selects in a row, not one with ||, which gcc does not always if-convert
 * (and a branch stops vectorisation). */
#define DEFINE_FMAXMIN(T, SUFFIX)          \
  static inline T max_##SUFFIX(T a, T b) { \
    T r = a > b ? a : b;                   \
    return a != a ? a : r;                 \
  }                                        \
  static inline T min_##SUFFIX(T a, T b) { \
    T r = a < b ? a : b;                   \
    return a != a ? a : r;                 \
  }
DEFINE_FMAXMIN(float, f32)
DEFINE_FMAXMIN(double, f64)

/* ---- native types ------------------------------------------------------------
 * A pass over a block combines up to four streams: fresh passes read 2-4
 * sources, accumulating passes the accumulator and 1-3 sources. Reading several
 * sources in one loop, rather than one per pass, keeps several memory streams in
 * flight: with one source per pass (and always a private accumulator), nsrc=4
 * of 16 MiB float32 ran at 2/3 of a plain fused C loop; now it matches it.
 * Sources still combine strictly left to right.
 * T: element type; U: its unsigned counterpart, for integer ops. */
#define PASS_ARGS(T) \
  T* restrict acc, const T* restrict a, const T* restrict b, const T* restrict c, const T* restrict d, size_t n

#define DEFINE_PASS(NAME, T, U, ATTR, OPNAME, OP, ARITY, ...) \
  static ATTR void NAME##_##OPNAME##_##ARITY(PASS_ARGS(T)) {  \
    (void)a, (void)b, (void)c, (void)d;                       \
    VEC_LOOP(j, n, __VA_ARGS__)                               \
  }

/* fresh2..fresh4 start from sources; acc1..acc3 continue from acc. */
#define DEFINE_OP_PASSES(NAME, T, U, ATTR, OPNAME, OP)                                                                \
  DEFINE_PASS(NAME, T, U, ATTR, OPNAME, OP, fresh2, acc[j] = OP(T, U, a[j], b[j]);)                                   \
  DEFINE_PASS(NAME, T, U, ATTR, OPNAME, OP, fresh3, T x = OP(T, U, a[j], b[j]); acc[j] = OP(T, U, x, c[j]);)          \
  DEFINE_PASS(NAME, T, U, ATTR, OPNAME, OP, fresh4, T x = OP(T, U, a[j], b[j]); T y = OP(T, U, x, c[j]);              \
              acc[j] = OP(T, U, y, d[j]);)                                                                            \
  DEFINE_PASS(NAME, T, U, ATTR, OPNAME, OP, acc1, T x = acc[j]; acc[j] = OP(T, U, x, a[j]);)                          \
  DEFINE_PASS(NAME, T, U, ATTR, OPNAME, OP, acc2, T x = acc[j]; T y = OP(T, U, x, a[j]); acc[j] = OP(T, U, y, b[j]);) \
  DEFINE_PASS(NAME, T, U, ATTR, OPNAME, OP, acc3, T x = acc[j]; T y = OP(T, U, x, a[j]); T z = OP(T, U, y, b[j]);     \
              acc[j] = OP(T, U, z, c[j]);)                                                                            \
  static const NAME##_passes NAME##_##OPNAME##_passes = {                                                             \
      {NULL, NULL, NAME##_##OPNAME##_fresh2, NAME##_##OPNAME##_fresh3, NAME##_##OPNAME##_fresh4},                     \
      {NULL, NAME##_##OPNAME##_acc1, NAME##_##OPNAME##_acc2, NAME##_##OPNAME##_acc3}};

/* Two sources of at most REDUCE_SHORT elements: one plain loop, element by
 * element (dst may be a or b: element j of both is read before dst[j] is
 * written). The block driver below sets up more than such a sum costs: sums of
 * 1-16 floats took 10-16 ns through it, 4-6 ns here (warm, on this host), and a
 * small allreduce runs one at every step of its exchange. */
#define REDUCE_SHORT 16
#define SHORT_LOOP(T, U, OP) \
  for (size_t j = 0; j < n; j++) d[j] = OP(T, U, a[j], b[j])
#define DEFINE_SHORT(NAME, T, U, K)                                                  \
  static void NAME##_short(T* d, const T* a, const T* b, size_t n, gcclRedOp_t op) { \
    switch (op) {                                                                    \
      case gcclProd:                                                                 \
        SHORT_LOOP(T, U, OP_##K##PROD);                                              \
        break;                                                                       \
      case gcclMax:                                                                  \
        SHORT_LOOP(T, U, OP_##K##MAX);                                               \
        break;                                                                       \
      case gcclMin:                                                                  \
        SHORT_LOOP(T, U, OP_##K##MIN);                                               \
        break;                                                                       \
      default: /* gcclSum, and gcclAvg: the caller divides */                        \
        SHORT_LOOP(T, U, OP_##K##SUM);                                               \
    }                                                                                \
  }

/* All passes of one type and the block driver NAME_reduce, which runs
 * fresh[m] over the first m <= 4 sources and then acc[m] over the next m <= 3,
 * block by block. The accumulator is dst itself (no copy) unless dst is one of
 * srcs[1..], which a pass may still have to read after dst's block was
 * written; then it is a private block, copied to dst at the end. When dst is
 * srcs[0], the first pass already accumulates. K selects the ops: I (integer)
 * or F (floating). */
#define DEFINE_REDUCE(NAME, T, U, ATTR, K)                                                                \
  typedef struct {                                                                                        \
    void (*fresh[5])(PASS_ARGS(T)); /* indexed by the number of sources */                                \
    void (*acc[4])(PASS_ARGS(T));                                                                         \
  } NAME##_passes;                                                                                        \
  DEFINE_OP_PASSES(NAME, T, U, ATTR, sum, OP_##K##SUM)                                                    \
  DEFINE_OP_PASSES(NAME, T, U, ATTR, prod, OP_##K##PROD)                                                  \
  DEFINE_OP_PASSES(NAME, T, U, ATTR, max, OP_##K##MAX)                                                    \
  DEFINE_OP_PASSES(NAME, T, U, ATTR, min, OP_##K##MIN)                                                    \
  DEFINE_SHORT(NAME, T, U, K)                                                                             \
  static void NAME##_reduce(void* dst, const void* const* srcs, int nsrc, size_t count, gcclRedOp_t op) { \
    if (nsrc == 2 && count <= REDUCE_SHORT) {                                                             \
      NAME##_short(dst, srcs[0], srcs[1], count, op);                                                     \
      return;                                                                                             \
    }                                                                                                     \
    const NAME##_passes* passes = &NAME##_sum_passes; /* gcclSum, and gcclAvg: the caller divides */      \
    if (op == gcclProd) passes = &NAME##_prod_passes;                                                     \
    if (op == gcclMax) passes = &NAME##_max_passes;                                                       \
    if (op == gcclMin) passes = &NAME##_min_passes;                                                       \
    const T* const* s = (const T* const*)srcs;                                                            \
    int private_acc = 0;                                                                                  \
    for (int k = 1; k < nsrc; k++) private_acc |= srcs[k] == dst;                                         \
    int start = !private_acc && srcs[0] == dst; /* dst already holds srcs[0] */                           \
    _Alignas(64) T block[REDUCE_BLOCK];                                                                   \
    for (size_t i = 0; i < count; i += REDUCE_BLOCK) {                                                    \
      size_t n = count - i < REDUCE_BLOCK ? count - i : REDUCE_BLOCK;                                     \
      T* acc = private_acc ? block : (T*)dst + i;                                                         \
      for (int k = start; k < nsrc;) {                                                                    \
        int fresh = k == 0;                                                                               \
        int room = fresh ? 4 : 3; /* sources per pass; acc counts as one */                               \
        int m = nsrc - k < room ? nsrc - k : room;                                                        \
        const T* p[4] = {NULL, NULL, NULL, NULL};                                                         \
        for (int q = 0; q < m; q++) p[q] = s[k + q] + i;                                                  \
        (fresh ? passes->fresh[m] : passes->acc[m])(acc, p[0], p[1], p[2], p[3], n);                      \
        k += m;                                                                                           \
      }                                                                                                   \
      if (private_acc) memcpy((T*)dst + i, block, n * sizeof(T));                                         \
    }                                                                                                     \
  }

DEFINE_REDUCE(i8, int8_t, uint8_t, PLAIN_KERNEL, I)
DEFINE_REDUCE(u8, uint8_t, uint8_t, PLAIN_KERNEL, I)
DEFINE_REDUCE(i32, int32_t, uint32_t, PLAIN_KERNEL, I)
DEFINE_REDUCE(u32, uint32_t, uint32_t, PLAIN_KERNEL, I)
DEFINE_REDUCE(i64, int64_t, uint64_t, PLAIN_KERNEL, I)
DEFINE_REDUCE(u64, uint64_t, uint64_t, PLAIN_KERNEL, I)
DEFINE_REDUCE(f32, float, uint32_t, HOT_KERNEL, F)
DEFINE_REDUCE(f64, double, uint64_t, HOT_KERNEL, F)

/* ---- fp16 and bf16: widen a block to fp32, reduce, narrow once ------------- */

typedef void (*widen_fn)(float* restrict dst, const uint16_t* restrict src, size_t n);
typedef void (*narrow_fn)(uint16_t* restrict dst, const float* restrict src, size_t n);

static HOT_KERNEL void widen_f16_soft(float* restrict dst, const uint16_t* restrict src, size_t n) {
  VEC_LOOP(j, n, dst[j] = h2f(src[j]);)
}

static HOT_KERNEL void narrow_f16_soft(uint16_t* restrict dst, const float* restrict src, size_t n) {
  VEC_LOOP(j, n, dst[j] = f2h(src[j]);)
}

static HOT_KERNEL void widen_bf16(float* restrict dst, const uint16_t* restrict src, size_t n) {
  VEC_LOOP(j, n, dst[j] = b2f(src[j]);)
}

static HOT_KERNEL void narrow_bf16(uint16_t* restrict dst, const float* restrict src, size_t n) {
  VEC_LOOP(j, n, dst[j] = f2b(src[j]);)
}

/* x86 F16C converts 8 halves per instruction, 4-10x faster than the branch-free
 * software path. It rounds to nearest even and quiets NaNs keeping the top payload bits,
 * exactly as h2f/f2h do (checked over all 2^32 floats), so using it or not never
 * changes a result. Compiled with a target attribute and used only when CPUID
 * says the CPU (and the OS, for the YMM registers) supports it. Build with
 * -DGCCL_NO_F16C to test the software path on a CPU that has F16C. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(GCCL_NO_F16C)
#include <cpuid.h>
#include <immintrin.h>
#include <stdatomic.h>
#define HAVE_F16C_PATH 1

__attribute__((target("avx,f16c"))) static void widen_f16_f16c(float* restrict dst, const uint16_t* restrict src,
                                                               size_t n) {
  size_t n8 = n & ~(size_t)7;
  for (size_t j = 0; j < n8; j += 8)
    _mm256_storeu_ps(dst + j, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(src + j))));
  for (size_t j = n8; j < n; j++) dst[j] = h2f(src[j]);
}

__attribute__((target("avx,f16c"))) static void narrow_f16_f16c(uint16_t* restrict dst, const float* restrict src,
                                                                size_t n) {
  size_t n8 = n & ~(size_t)7;
  for (size_t j = 0; j < n8; j += 8)
    _mm_storeu_si128((__m128i*)(dst + j), _mm256_cvtps_ph(_mm256_loadu_ps(src + j), _MM_FROUND_TO_NEAREST_INT));
  for (size_t j = n8; j < n; j++) dst[j] = f2h(src[j]);
}

static int cpu_detect_f16c(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  if (!(c & bit_F16C) || !(c & bit_AVX) || !(c & bit_OSXSAVE)) return 0;
  unsigned xcr0_lo, xcr0_hi;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  (void)xcr0_hi;
  return (xcr0_lo & 6u) == 6u; /* the OS saves XMM and YMM state */
}

/* CPUID traps to the hypervisor in a VM (microseconds), so the answer is kept.
 * Every thread computes the same value, so a relaxed atomic is enough. */
static int cpu_has_f16c(void) {
  static _Atomic int known; /* 0: not asked yet, 1: no, 2: yes */
  int v = atomic_load_explicit(&known, memory_order_relaxed);
  if (v == 0) {
    v = cpu_detect_f16c() ? 2 : 1;
    atomic_store_explicit(&known, v, memory_order_relaxed);
  }
  return v == 2;
}
#endif

static void pick_half(gcclDataType_t dt, widen_fn* widen, narrow_fn* narrow) {
  if (dt == gcclBfloat16) {
    *widen = widen_bf16, *narrow = narrow_bf16;
    return;
  }
  *widen = widen_f16_soft, *narrow = narrow_f16_soft;
#ifdef HAVE_F16C_PATH
  if (cpu_has_f16c()) *widen = widen_f16_f16c, *narrow = narrow_f16_f16c;
#endif
}

static void half_reduce(void* dst, const void* const* srcs, int nsrc, size_t count, gcclDataType_t dt, gcclRedOp_t op) {
  widen_fn widen;
  narrow_fn narrow;
  pick_half(dt, &widen, &narrow);
  /* one source per pass: acc starts as the widened srcs[0] */
  const f32_passes* passes = &f32_sum_passes;
  if (op == gcclProd) passes = &f32_prod_passes;
  if (op == gcclMax) passes = &f32_max_passes;
  if (op == gcclMin) passes = &f32_min_passes;
  _Alignas(64) float acc[REDUCE_BLOCK];
  _Alignas(64) float wide[REDUCE_BLOCK];
  for (size_t i = 0; i < count; i += REDUCE_BLOCK) {
    size_t n = count - i < REDUCE_BLOCK ? count - i : REDUCE_BLOCK;
    widen(acc, (const uint16_t*)srcs[0] + i, n);
    for (int k = 1; k < nsrc; k++) {
      widen(wide, (const uint16_t*)srcs[k] + i, n);
      passes->acc[1](acc, wide, NULL, NULL, NULL, n);
    }
    narrow((uint16_t*)dst + i, acc, n);
  }
}

/* ---- entry points ------------------------------------------------------------ */

void reduce_n(void* dst, const void* const* srcs, int nsrc, size_t count, gcclDataType_t dt, gcclRedOp_t op) {
  if (count == 0 || nsrc < 1) return;
  if (nsrc == 1) {
    /* One source: a copy (for fp16/bf16 too: a round trip through fp32 changes
     * nothing but a signalling NaN's quiet bit). */
    if (dst != srcs[0]) memmove(dst, srcs[0], count * dtype_size(dt));
    return;
  }
  switch (dt) {
    case gcclInt8:
      i8_reduce(dst, srcs, nsrc, count, op);
      break;
    case gcclUint8:
      u8_reduce(dst, srcs, nsrc, count, op);
      break;
    case gcclInt32:
      i32_reduce(dst, srcs, nsrc, count, op);
      break;
    case gcclUint32:
      u32_reduce(dst, srcs, nsrc, count, op);
      break;
    case gcclInt64:
      i64_reduce(dst, srcs, nsrc, count, op);
      break;
    case gcclUint64:
      u64_reduce(dst, srcs, nsrc, count, op);
      break;
    case gcclFloat32:
      f32_reduce(dst, srcs, nsrc, count, op);
      break;
    case gcclFloat64:
      f64_reduce(dst, srcs, nsrc, count, op);
      break;
    case gcclFloat16:
    case gcclBfloat16:
      half_reduce(dst, srcs, nsrc, count, dt, op);
      break;
    default:
      break; /* trusted arguments: callers reject bad datatypes */
  }
}

void reduce_2(void* dst, const void* a, const void* b, size_t count, gcclDataType_t dt, gcclRedOp_t op) {
  const void* srcs[2] = {a, b};
  reduce_n(dst, srcs, 2, count, dt, op);
}

/* ---- reduce_divide -----------------------------------------------------------
 * Floats divide rather than multiply by a reciprocal: x * (1/3) and x / 3 differ
 * in the last bit for some x, and gcclAvg should match what a user computes. */

/* Signed integers: C division truncates toward zero. A divisor of -1 is done as
 * a negation in the unsigned type, because INT_MIN / -1 overflows. */
#define DEFINE_IDIVIDE(NAME, T, U)                                     \
  static void NAME##_divide(T* buf, size_t count, int divisor) {       \
    if (divisor == -1) {                                               \
      for (size_t i = 0; i < count; i++) buf[i] = (T)(0u - (U)buf[i]); \
      return;                                                          \
    }                                                                  \
    for (size_t i = 0; i < count; i++) buf[i] = (T)(buf[i] / divisor); \
  }

DEFINE_IDIVIDE(i8, int8_t, uint8_t)
DEFINE_IDIVIDE(i32, int32_t, uint32_t)
DEFINE_IDIVIDE(i64, int64_t, uint64_t)

/* Unsigned integers: the divisor is a rank count, so >= 1 (trusted). */
#define DEFINE_UDIVIDE(NAME, T)                                                  \
  static void NAME##_divide(T* buf, size_t count, int divisor) {                 \
    for (size_t i = 0; i < count; i++) buf[i] = (T)(buf[i] / (unsigned)divisor); \
  }

DEFINE_UDIVIDE(u8, uint8_t)
DEFINE_UDIVIDE(u32, uint32_t)
DEFINE_UDIVIDE(u64, uint64_t)

static HOT_KERNEL void f32_divide(float* restrict buf, size_t count, int divisor) {
  float d = (float)divisor;
  VEC_LOOP(i, count, buf[i] = buf[i] / d;)
}

static HOT_KERNEL void f64_divide(double* restrict buf, size_t count, int divisor) {
  double d = (double)divisor;
  VEC_LOOP(i, count, buf[i] = buf[i] / d;)
}

static void half_divide(uint16_t* buf, size_t count, gcclDataType_t dt, int divisor) {
  widen_fn widen;
  narrow_fn narrow;
  pick_half(dt, &widen, &narrow);
  _Alignas(64) float wide[REDUCE_BLOCK];
  for (size_t i = 0; i < count; i += REDUCE_BLOCK) {
    size_t n = count - i < REDUCE_BLOCK ? count - i : REDUCE_BLOCK;
    widen(wide, buf + i, n);
    f32_divide(wide, n, divisor);
    narrow(buf + i, wide, n);
  }
}

void reduce_divide(void* buf, size_t count, gcclDataType_t dt, int divisor) {
  if (count == 0) return;
  switch (dt) {
    case gcclInt8:
      i8_divide(buf, count, divisor);
      break;
    case gcclUint8:
      u8_divide(buf, count, divisor);
      break;
    case gcclInt32:
      i32_divide(buf, count, divisor);
      break;
    case gcclUint32:
      u32_divide(buf, count, divisor);
      break;
    case gcclInt64:
      i64_divide(buf, count, divisor);
      break;
    case gcclUint64:
      u64_divide(buf, count, divisor);
      break;
    case gcclFloat32:
      f32_divide(buf, count, divisor);
      break;
    case gcclFloat64:
      f64_divide(buf, count, divisor);
      break;
    case gcclFloat16:
    case gcclBfloat16:
      half_divide(buf, count, dt, divisor);
      break;
    default:
      break;
  }
}
