/* median.h — the median of three, for timings where one of three may be an outlier. */
#ifndef GCCL_COMMON_MEDIAN_H
#define GCCL_COMMON_MEDIAN_H

static inline double median3(double a, double b, double c) {
  return a > b ? (b > c ? b : (a > c ? c : a)) : (a > c ? a : (b > c ? c : b));
}

#endif
