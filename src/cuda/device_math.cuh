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

// Element i of a float tensor of DT as fp32 (exact for fp16/bf16; fp64 rounds to
// nearest even, as a C cast does).
template <gcclDataType_t DT>
__device__ __forceinline__ float LoadF32(const void* src, size_t i) {
  if (DT == gcclFloat32) return static_cast<const float*>(src)[i];
  if (DT == gcclFloat64) return static_cast<float>(static_cast<const double*>(src)[i]);
  if (DT == gcclFloat16) return fb_half_to_float(static_cast<const uint16_t*>(src)[i]);
  return fb_bf16_to_float(static_cast<const uint16_t*>(src)[i]);
}

// The codec's input: float(src[i]), plus the residual with error feedback.
template <gcclDataType_t DT>
__device__ __forceinline__ float InputX(const void* src, const float* resid_in, size_t i) {
  float x = LoadF32<DT>(src, i);
  if (resid_in) x = __fadd_rn(x, resid_in[i]);
  return x;
}

// dst[i] += v in DT (halves add in fp32 and round once).
template <gcclDataType_t DT>
__device__ __forceinline__ void Accumulate(void* dst, size_t i, float v) {
  if (DT == gcclFloat32) {
    float* d = static_cast<float*>(dst);
    d[i] = __fadd_rn(d[i], v);
  } else if (DT == gcclFloat64) {
    double* d = static_cast<double*>(dst);
    d[i] = __dadd_rn(d[i], static_cast<double>(v));
  } else if (DT == gcclFloat16) {
    uint16_t* d = static_cast<uint16_t*>(dst);
    d[i] = fb_float_to_half(__fadd_rn(fb_half_to_float(d[i]), v));
  } else {
    uint16_t* d = static_cast<uint16_t*>(dst);
    d[i] = fb_float_to_bf16(__fadd_rn(fb_bf16_to_float(d[i]), v));
  }
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

// Decoders give each thread a group of 8 consecutive elements of one bucket:
// f(b, base, g, r) for elements base + 8g .. base + 8g + r - 1 of bucket b.
template <typename F>
__device__ __forceinline__ void ForEachBucketGroup(size_t n, unsigned bucket, F&& f) {
  const size_t groups = (bucket + 7) / 8;
  const size_t items = (n + bucket - 1) / bucket * groups;
  for (size_t w = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; w < items;
       w += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t b = w / groups, g = w % groups, base = b * bucket;
    const size_t m = n - base < bucket ? n - base : bucket;
    if (g * 8 < m) f(b, base, g, m - g * 8 < 8 ? m - g * 8 : 8);
  }
}

// Threads for ForEachBucketGroup over n elements.
inline size_t BucketGroups(size_t n, unsigned bucket) {
  return (n + bucket - 1) / bucket * ((bucket + 7) / 8);
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

}  // namespace gk

#endif
