// device_math.cuh — what every codec kernel shares: the codec's input x[i] built
// from the caller's tensor and residual (as compressor.c builds it), accumulation
// into each float dtype (as codec_util.c's elem_accumulate), unaligned payload
// access, and launch geometry.
#ifndef GCCL_CUDA_DEVICE_MATH_CUH
#define GCCL_CUDA_DEVICE_MATH_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#include "common/float_bits.h"
#include "compress/codec_math.h"
#include "cuda/gpu_kernels.h"
#include "gccl.h"

namespace gk {

constexpr int kThreads = 256;
constexpr unsigned kFullMask = 0xFFFFFFFFu;

// Blocks for n work items at kThreads per block, capped for grid-stride loops.
inline unsigned Blocks(size_t n) {
  size_t b = (n + kThreads - 1) / kThreads;
  const size_t cap = 65535u * 16u;
  return static_cast<unsigned>(b == 0 ? 1 : (b < cap ? b : cap));
}

// NaN bits as x86 makes them, so that NaNs in frames and sums match the CPU's:
// CUDA's arithmetic and conversions return one canonical NaN instead. An operation
// with a NaN operand returns that NaN quieted (the first one if both are NaN); an
// invalid one (inf - inf) returns the "default NaN" 0xFFC00000; conversions keep
// the sign and the top payload bits.
__device__ __forceinline__ bool IsNanBits32(uint32_t u) {
  return (u & 0x7FFFFFFFu) > 0x7F800000u;
}
__device__ __forceinline__ bool IsNanBits64(uint64_t u) {
  return (u & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull;
}

__device__ __forceinline__ float AddF32(float a, float b) {
  const uint32_t ua = fb_bits(a), ub = fb_bits(b);
  if (IsNanBits32(ua)) return fb_float(ua | 0x00400000u);
  if (IsNanBits32(ub)) return fb_float(ub | 0x00400000u);
  const float r = __fadd_rn(a, b);
  return IsNanBits32(fb_bits(r)) ? fb_float(0xFFC00000u) : r;
}

__device__ __forceinline__ double AddF64(double a, double b) {
  const uint64_t ua = static_cast<uint64_t>(__double_as_longlong(a)),
                 ub = static_cast<uint64_t>(__double_as_longlong(b));
  if (IsNanBits64(ua)) return __longlong_as_double(static_cast<long long>(ua | 0x0008000000000000ull));
  if (IsNanBits64(ub)) return __longlong_as_double(static_cast<long long>(ub | 0x0008000000000000ull));
  const double r = __dadd_rn(a, b);
  return IsNanBits64(static_cast<uint64_t>(__double_as_longlong(r)))
             ? __longlong_as_double(static_cast<long long>(0xFFF8000000000000ull))
             : r;
}

// fp32 to fp64 (exact; a NaN keeps its payload, quieted) and fp64 to fp32 (round
// to nearest even; a NaN keeps the top 23 bits of its payload, quieted).
__device__ __forceinline__ double WidenF32(float v) {
  const uint32_t u = fb_bits(v);
  if (!IsNanBits32(u)) return static_cast<double>(v);
  const uint64_t sign = static_cast<uint64_t>(u >> 31) << 63, mant = static_cast<uint64_t>(u & 0x7FFFFFu) << 29;
  return __longlong_as_double(static_cast<long long>(sign | 0x7FF8000000000000ull | mant));
}
__device__ __forceinline__ float NarrowF64(double d) {
  const uint64_t u = static_cast<uint64_t>(__double_as_longlong(d));
  if (!IsNanBits64(u)) return __double2float_rn(d);
  const uint32_t sign = static_cast<uint32_t>(u >> 63) << 31,
                 mant = static_cast<uint32_t>((u & 0xFFFFFFFFFFFFFull) >> 29);
  return fb_float(sign | 0x7FC00000u | mant);
}

// Element i of a float tensor of DT as fp32 (exact for fp16/bf16; fp64 rounds to
// nearest even, as a C cast does).
template <gcclDataType_t DT>
__device__ __forceinline__ float LoadF32(const void* src, size_t i) {
  if (DT == gcclFloat32) return static_cast<const float*>(src)[i];
  if (DT == gcclFloat64) return NarrowF64(static_cast<const double*>(src)[i]);
  if (DT == gcclFloat16) return fb_half_to_float(static_cast<const uint16_t*>(src)[i]);
  return fb_bf16_to_float(static_cast<const uint16_t*>(src)[i]);
}

// The codec's input: float(src[i]), plus the residual with error feedback.
template <gcclDataType_t DT>
__device__ __forceinline__ float InputX(const void* src, const float* resid_in, size_t i) {
  float x = LoadF32<DT>(src, i);
  if (resid_in) x = AddF32(x, resid_in[i]);
  return x;
}

// The codec's input made finite, as codec_util.c's sanitize_block does: x, or
// +0.0f where x is not finite (*fin = 0: the element is an exception).
template <gcclDataType_t DT>
__device__ __forceinline__ float FiniteInputX(const void* src, const float* resid_in, size_t i, int* fin) {
  const float x = InputX<DT>(src, resid_in, i);
  *fin = fb_finite(x);
  return *fin ? x : 0.0f;
}

// How a tensor of DT stores an element: float, double, or the 16 bits of a half.
template <gcclDataType_t DT>
using Stored = typename std::conditional<DT == gcclFloat32, float,
                                         typename std::conditional<DT == gcclFloat64, double, uint16_t>::type>::type;

// Stored element d plus v, in DT (halves add in fp32 and round once).
template <gcclDataType_t DT>
__device__ __forceinline__ Stored<DT> Combine(Stored<DT> d, float v) {
  if constexpr (DT == gcclFloat32)
    return AddF32(d, v);
  else if constexpr (DT == gcclFloat64)
    return AddF64(d, WidenF32(v));
  else if constexpr (DT == gcclFloat16)
    return fb_float_to_half(AddF32(fb_half_to_float(d), v));
  else
    return fb_float_to_bf16(AddF32(fb_bf16_to_float(d), v));
}

// dst[i] += v in DT.
template <gcclDataType_t DT>
__device__ __forceinline__ void Accumulate(void* dst, size_t i, float v) {
  Stored<DT>* d = static_cast<Stored<DT>*>(dst);
  d[i] = Combine<DT>(d[i], v);
}

// Elements a thread handles per step of the streaming kernels. One 4-byte load in
// flight per thread leaves an H200 at about a third of its memory bandwidth (the
// first GPU run: elementwise fp16 encode 0.45 of a device copy, group-per-thread
// decoders 0.25): bandwidth is bytes in flight over latency, so each thread issues
// kUnroll independent loads before its first store.
constexpr int kUnroll = 4;

// A grid-stride loop over n elements, kUnroll per thread per step, blockDim.x apart
// so that a warp's accesses stay consecutive: f(i, ok) with i[u] the element of
// slot u and ok[u] whether it is below n. f loads every slot before it stores any.
// Launch with Blocks(UnrolledItems(n)).
template <typename F>
__device__ __forceinline__ void ForEachElementUnrolled(size_t n, F&& f) {
  const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x * kUnroll;
  for (size_t i0 = blockIdx.x * static_cast<size_t>(blockDim.x) * kUnroll + threadIdx.x; i0 < n; i0 += step) {
    size_t i[kUnroll];
    bool ok[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; u++) {
      i[u] = i0 + static_cast<size_t>(u) * blockDim.x;
      ok[u] = i[u] < n;
    }
    f(i, ok);
  }
}

inline size_t UnrolledItems(size_t n) {
  return (n + kUnroll - 1) / kUnroll;
}

// dst[i[u]] += v[u] for the slots with ok[u]: every old value is loaded before the
// first store (dst may alias nothing the caller still reads).
template <gcclDataType_t DT>
__device__ __forceinline__ void AccumulateUnrolled(void* dst, const size_t* i, const bool* ok, const float* v) {
  Stored<DT>* d = static_cast<Stored<DT>*>(dst);
  Stored<DT> old[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; u++)
    if (ok[u]) old[u] = d[i[u]];
#pragma unroll
  for (int u = 0; u < kUnroll; u++)
    if (ok[u]) d[i[u]] = Combine<DT>(old[u], v[u]);
}

// Payload bytes may sit at any address: byte-wise little-endian access.
__device__ __forceinline__ void PutU32(unsigned char* p, uint32_t v) {
  p[0] = static_cast<unsigned char>(v);
  p[1] = static_cast<unsigned char>(v >> 8);
  p[2] = static_cast<unsigned char>(v >> 16);
  p[3] = static_cast<unsigned char>(v >> 24);
}
__device__ __forceinline__ uint32_t GetU32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}
__device__ __forceinline__ uint64_t GetU64(const unsigned char* p) {
  return static_cast<uint64_t>(GetU32(p)) | (static_cast<uint64_t>(GetU32(p + 4)) << 32);
}

// Bucket codecs cut the tensor into buckets of `bucket` elements, the last one
// shorter. Encoders give each bucket to one warp: f(b, base, m) for bucket b of m
// elements starting at element base, called by all 32 lanes of a warp.
template <typename F>
__device__ __forceinline__ void ForEachBucketPerWarp(size_t n, unsigned bucket, F&& f) {
  const size_t nbuckets = (n + bucket - 1) / bucket;
  const size_t warps_per_block = blockDim.x / 32;
  const size_t warps = static_cast<size_t>(gridDim.x) * warps_per_block;
  for (size_t b = blockIdx.x * warps_per_block + threadIdx.x / 32; b < nbuckets; b += warps) {
    const size_t base = b * bucket;
    f(b, base, n - base < bucket ? n - base : bucket);
  }
}

// An encoder's kUnroll steps of a warp over a bucket of m elements at base, 32
// consecutive elements a step: x[u] = the codec's input of element j0 + 32u + lane,
// 0.0f past m, all loaded before any is used.
template <gcclDataType_t DT>
__device__ __forceinline__ void LoadWarpSteps(const void* src, const float* resid_in, size_t base, size_t m, size_t j0,
                                              unsigned lane, float* x) {
#pragma unroll
  for (int u = 0; u < kUnroll; u++) {
    const size_t j = j0 + 32 * static_cast<size_t>(u) + lane;
    x[u] = j < m ? InputX<DT>(src, resid_in, base + j) : 0.0f;
  }
}

// A bucket codec's decode-accumulate, one warp per bucket: lane l takes elements
// l, l + 32, ... of it (consecutive across the warp), kUnroll at a time, and adds
// value_of(q, j), q = bucket_of(b) read once per bucket, to dst[base + j]. The
// values' payload loads and dst's loads all precede the stores.
// Launch with Blocks(nbuckets * 32).
template <gcclDataType_t DT, typename BucketOf, typename ValueOf>
__device__ __forceinline__ void DecodeBucketsPerWarp(size_t n, unsigned bucket, void* dst, BucketOf&& bucket_of,
                                                     ValueOf&& value_of) {
  const unsigned lane = threadIdx.x % 32;
  ForEachBucketPerWarp(n, bucket, [&](size_t b, size_t base, size_t m) {
    const auto q = bucket_of(b);
    for (size_t j0 = lane; j0 < m; j0 += 32 * kUnroll) {
      size_t i[kUnroll];
      bool ok[kUnroll];
      float v[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; u++) {
        const size_t j = j0 + 32 * static_cast<size_t>(u);
        ok[u] = j < m;
        i[u] = base + j;
        v[u] = ok[u] ? value_of(q, j) : 0.0f;
      }
      AccumulateUnrolled<DT>(dst, i, ok, v);
    }
  });
}

// The canonical sums of codec_util.h (canon_sum_abs, canon_sum_sq) in a warp that
// reads 32 consecutive elements per step, element j0 + lane: lane l < 16 holds
// canonical lane l and adds its terms in increasing index order, element j0 + l
// then j0 + 16 + l. term is that element's |v| or v * v, +0.0f past the bucket's
// end (a canonical lane is >= +0, so adding +0.0f leaves it unchanged). Returns
// the lane's new sum; all 32 lanes must call it.
__device__ __forceinline__ float CanonWarpAdd(float acc, float term, unsigned lane) {
  const float upper = __shfl_down_sync(kFullMask, term, 16);
  return lane < 16 ? __fadd_rn(__fadd_rn(acc, term), upper) : acc;
}

// Lanes 0..15 of CanonWarpAdd combined as canon_lanes_combine (lane[j] += lane[j + w]
// for w = 8, 4, 2, 1): the canonical sum, returned to every lane.
__device__ __forceinline__ float CanonWarpTotal(float acc, unsigned lane) {
  for (int w = CANON_LANES / 2; w >= 1; w /= 2) {
    const float other = __shfl_down_sync(kFullMask, acc, w);
    if (lane < static_cast<unsigned>(w)) acc = __fadd_rn(acc, other);
  }
  return __shfl_sync(kFullMask, acc, 0);
}

// A bucket's EXC_BUCKET_* as the CPU codecs decide it: all its elements are
// exceptions if its scale is not finite, else those that are not finite.
__device__ __forceinline__ int BucketVerdict(int scale_finite, int any_nonfinite) {
  return !scale_finite ? EXC_BUCKET_ALL : any_nonfinite ? EXC_BUCKET_NONFINITE : EXC_BUCKET_NONE;
}

// An encoder's code pass over a bucket of m elements, one warp: the lane takes
// groups of `group` consecutive elements, 32 groups apart (so the warp writes
// consecutive code bytes): f(j0, r) for elements j0 .. j0 + r - 1, r <= group.
template <typename F>
__device__ __forceinline__ void ForEachLaneGroup(size_t m, unsigned lane, size_t group, F&& f) {
  for (size_t j0 = lane * group; j0 < m; j0 += 32 * group) f(j0, m - j0 < group ? m - j0 : group);
}

// With error feedback (resid_out not NULL), the new residual of element i: its
// finite input v minus its decoded value, or 0 at an exception (fin = 0).
__device__ __forceinline__ void StoreResidual(float* resid_out, size_t i, int fin, float v, float decoded) {
  if (resid_out) resid_out[i] = fin ? __fsub_rn(v, decoded) : 0.0f;
}

// A warp's bucket verdict (bucket codecs, one warp per bucket): records in
// bucket_bad[b] which exceptions bucket b needs (EXC_BUCKET_*) and counts the
// bucket in *nbad if any. For EXC_BUCKET_ALL (its scale overflows fp32) the bucket
// is also sent as zeros: `bytes` of meta and codes at out, and residual 0.
__device__ __forceinline__ void WarpBucketVerdict(int verdict, unsigned lane, size_t b, unsigned char* bucket_bad,
                                                  unsigned long long* nbad, unsigned char* out, size_t bytes,
                                                  float* resid_out, size_t base, size_t m) {
  if (verdict == EXC_BUCKET_ALL) {
    for (size_t o = lane; o < bytes; o += 32) out[o] = 0;
    for (size_t j = lane; resid_out && j < m; j += 32) resid_out[base + j] = 0.0f;
  }
  if (lane == 0) {
    bucket_bad[b] = static_cast<unsigned char>(verdict);
    if (verdict != EXC_BUCKET_NONE) atomicAdd(nbad, 1ull);
  }
}

// values_put (codec_util.c) on the device, vt 0 fp32, 1 fp16, 2 bf16 (enum
// spec_values): stores x as vt at p, returns the value the decoder reads back.
__device__ __forceinline__ float ValuesPut(unsigned char* p, int vt, float x) {
  if (vt == 0) {
    gk::PutU32(p, fb_bits(x));
    return x;
  }
  const uint16_t h = vt == 1 ? fb_float_to_half(x) : fb_float_to_bf16(x);
  p[0] = static_cast<unsigned char>(h);
  p[1] = static_cast<unsigned char>(h >> 8);
  return vt == 1 ? fb_half_to_float(h) : fb_bf16_to_float(h);
}

__device__ __forceinline__ float ValuesGet(const unsigned char* p, int vt) {
  if (vt == 0) return fb_float(gk::GetU32(p));
  const uint16_t h = static_cast<uint16_t>(p[0] | (p[1] << 8));
  return vt == 1 ? fb_half_to_float(h) : fb_bf16_to_float(h);
}

// Calls f(std::integral_constant<gcclDataType_t, DT>{}) for the runtime dtype dt
// (float types only): the callee reads DT as decltype(tag)::value.
template <typename F>
cudaError_t DispatchFloat(gcclDataType_t dt, F&& f) {
  switch (dt) {
    case gcclFloat32:
      return f(std::integral_constant<gcclDataType_t, gcclFloat32>{});
    case gcclFloat64:
      return f(std::integral_constant<gcclDataType_t, gcclFloat64>{});
    case gcclFloat16:
      return f(std::integral_constant<gcclDataType_t, gcclFloat16>{});
    case gcclBfloat16:
      return f(std::integral_constant<gcclDataType_t, gcclBfloat16>{});
    default:
      return cudaErrorInvalidValue;
  }
}

// DispatchFloat for a launcher: launch(tag) enqueues the kernel for
// DT = decltype(tag)::value; returns the launch's error.
template <typename F>
cudaError_t LaunchFloat(gcclDataType_t dt, F&& launch) {
  return DispatchFloat(dt, [&](auto tag) {
    launch(tag);
    return cudaGetLastError();
  });
}

}  // namespace gk

#endif
