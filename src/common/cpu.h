/* CPU feature checks from CPUID, for the ones clang 14's __builtin_cpu_supports
 * rejects ("f16c", "bmi"); avx2, sse4.2 and popcnt go through the builtin. */
#ifndef GCCL_COMMON_CPU_H
#define GCCL_COMMON_CPU_H

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* CPUID.1:ECX bit 29. */
static inline int cpu_has_f16c(void) {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}

/* CPUID.(7,0):EBX bit 3 (tzcnt, blsr). */
static inline int cpu_has_bmi1(void) {
  unsigned a, b, c, d;
  return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (b & (1u << 3));
}
#endif

#endif
