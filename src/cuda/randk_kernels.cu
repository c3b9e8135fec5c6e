// randk_kernels.cu — random-k on the GPU (codec_randk.c's format and error
// feedback): one pass over x finds every exception and writes the residual x
// (0 at exceptions); then one thread per kept value j gathers x at
// randk_index(key, n, k, j) — the same pure function the CPU and every rank use —
// and decoding scatters the values back to those indices.
#include "compress/randk.h"
#include "cuda/device_math.cuh"
#include "cuda/sparse_kernels.h"

namespace {

__device__ __forceinline__ uint32_t Key(float x) {
  return fb_bits(x) & 0x7FFFFFFFu;
}

template <gcclDataType_t DT>
__global__ void ScanExceptions(const void* src, const float* resid_in, float* resid_out, size_t n, uint32_t exc_key,
                               unsigned long long* nexc) {
  unsigned long long mine = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = gk::InputX<DT>(src, resid_in, i);
    const bool exc = Key(x) >= exc_key;
    if (resid_out) resid_out[i] = exc ? 0.0f : x;
    mine += exc;
  }
  if (mine) atomicAdd(nexc, mine);
}

template <gcclDataType_t DT>
__global__ void Gather(const void* src, const float* resid_in, float* resid_out, size_t n, size_t k, uint64_t key,
                       int vt, uint32_t exc_key, unsigned char* values) {
  const size_t vs = vt == 0 ? 4 : 2;
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < k;
       j += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t i = randk_index(key, n, k, j);
    const float x = gk::InputX<DT>(src, resid_in, i);
    if (Key(x) >= exc_key) {
      gk::ValuesPut(values + j * vs, vt, 0.0f);  // its raw value travels as an exception
    } else {
      const float dec = gk::ValuesPut(values + j * vs, vt, x);
      if (resid_out) resid_out[i] = __fsub_rn(x, dec);
    }
  }
}

template <gcclDataType_t DT>
__global__ void Scatter(const unsigned char* values, size_t n, size_t k, uint64_t key, int vt, void* dst) {
  const size_t vs = vt == 0 ? 4 : 2;
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < k;
       j += static_cast<size_t>(gridDim.x) * blockDim.x)
    gk::Accumulate<DT>(dst, randk_index(key, n, k, j), gk::ValuesGet(values + j * vs, vt));
}

}  // namespace

extern "C" cudaError_t gk_randk_encode(const void* src, gcclDataType_t dt, const float* resid_in, float* resid_out,
                                       size_t n, size_t k, uint64_t key, int vt, uint32_t exc_key,
                                       unsigned char* values, unsigned long long* counts, cudaStream_t s) {
  cudaError_t e = cudaMemsetAsync(counts, 0, sizeof *counts, s);
  if (e != cudaSuccess || n == 0) return e;
  return gk::LaunchFloat(dt, [&](auto tag) {
    constexpr gcclDataType_t DT = decltype(tag)::value;
    ScanExceptions<DT><<<gk::Blocks(n), gk::kThreads, 0, s>>>(src, resid_in, resid_out, n, exc_key, counts);
    if (k) Gather<DT><<<gk::Blocks(k), gk::kThreads, 0, s>>>(src, resid_in, resid_out, n, k, key, vt, exc_key, values);
  });
}

extern "C" cudaError_t gk_randk_decode(const unsigned char* values, size_t n, size_t k, uint64_t key, int vt, void* dst,
                                       gcclDataType_t dt, cudaStream_t s) {
  if (k == 0) return cudaSuccess;
  return gk::LaunchFloat(dt, [&](auto tag) {
    constexpr gcclDataType_t DT = decltype(tag)::value;
    Scatter<DT><<<gk::Blocks(k), gk::kThreads, 0, s>>>(values, n, k, key, vt, dst);
  });
}
