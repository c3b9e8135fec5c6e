// exceptions.cu — the frame's exceptions list on the GPU (codec.h: elements a codec
// cannot represent travel verbatim after the payload), the raw-frame fallback, and
// decoding around exceptions. Exceptions are rare (non-finite inputs, overflowing
// buckets), so the driver runs these kernels only when an encode kernel counted some.
#include <thrust/iterator/counting_iterator.h>

#include <cub/device/device_select.cuh>

#include "cuda/device_math.cuh"
#include "cuda/gpu_kernels.h"

namespace {

// Whether element i is an exception: its |x| bits reach exc_key (0x7F800000: not
// finite), or its bucket's scale overflowed (bucket 0: a codec without buckets).
template <gcclDataType_t DT>
struct IsException {
  const void* src;
  const float* resid_in;
  uint32_t exc_key;
  unsigned bucket;
  const unsigned char* bucket_bad;
  __device__ bool operator()(unsigned long long i) const {
    if (bucket && bucket_bad[i / bucket] == EXC_BUCKET_ALL) return true;
    return (fb_bits(gk::InputX<DT>(src, resid_in, i)) & 0x7FFFFFFFu) >= exc_key;
  }
};

template <gcclDataType_t DT>
cudaError_t Select(const void* src, const float* resid_in, size_t n, uint32_t exc_key, unsigned bucket,
                   const unsigned char* bucket_bad, uint64_t* exc, unsigned long long* nexc, void* scratch,
                   size_t* scratch_bytes, cudaStream_t s) {
  thrust::counting_iterator<unsigned long long> index(0);
  auto* out = reinterpret_cast<unsigned long long*>(exc);
  return cub::DeviceSelect::If(scratch, *scratch_bytes, index, out, nexc, static_cast<long long>(n),
                               IsException<DT>{src, resid_in, exc_key, bucket, bucket_bad}, s);
}

template <gcclDataType_t DT>
__global__ void WriteEntries(const void* src, const uint64_t* exc, size_t nexc, unsigned char* out) {
  constexpr size_t es = DT == gcclFloat64 ? 8 : DT == gcclFloat32 ? 4 : 2;
  const unsigned char* s = static_cast<const unsigned char*>(src);
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < nexc;
       j += static_cast<size_t>(gridDim.x) * blockDim.x) {
    unsigned char* e = out + j * (8 + es);
    const uint64_t i = exc[j];
    for (int b = 0; b < 8; b++) e[b] = static_cast<unsigned char>(i >> (8 * b));
    for (size_t b = 0; b < es; b++) e[8 + b] = s[i * es + b];
  }
}

template <gcclDataType_t DT>
__global__ void RawResidual(const void* src, const float* resid_in, float* resid_out, size_t n) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x)
    resid_out[i] = fb_finite(gk::InputX<DT>(src, resid_in, i)) ? resid_in[i] : 0.0f;
}

// The dst element at i, widened exactly to double (halves and fp32 are exact in it).
template <gcclDataType_t DT>
__device__ double LoadWide(const void* dst, size_t i) {
  if (DT == gcclFloat64) return static_cast<const double*>(dst)[i];
  return gk::WidenF32(gk::LoadF32<DT>(dst, i));
}

template <gcclDataType_t DT>
__global__ void SaveAt(const void* dst, const unsigned char* entries, size_t nexc, double* saved) {
  constexpr size_t es = DT == gcclFloat64 ? 8 : DT == gcclFloat32 ? 4 : 2;
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < nexc;
       j += static_cast<size_t>(gridDim.x) * blockDim.x)
    saved[j] = LoadWide<DT>(dst, gk::GetU64(entries + j * (8 + es)));
}

// dst[i] = saved + raw, in DT's arithmetic (decode.c's add_raw). The bucket codecs'
// CPU decoders add the zeroed slot first (block_accumulate: dst + 0, so a -0 there
// becomes +0); the sparse ones skip it, which differs only for a raw -0, and only
// an overflowing bucket sends one.
template <gcclDataType_t DT>
__global__ void ApplyAt(void* dst, const unsigned char* entries, size_t nexc, const double* saved) {
  constexpr size_t es = DT == gcclFloat64 ? 8 : DT == gcclFloat32 ? 4 : 2;
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < nexc;
       j += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const unsigned char* e = entries + j * (8 + es);
    const size_t i = gk::GetU64(e);
    const double base = saved[j] == 0.0 ? 0.0 : saved[j];
    if (DT == gcclFloat64) {
      const double raw = __longlong_as_double(static_cast<long long>(gk::GetU64(e + 8)));
      static_cast<double*>(dst)[i] = gk::AddF64(base, raw);
    } else if (DT == gcclFloat32) {
      const float raw = fb_float(gk::GetU32(e + 8));
      static_cast<float*>(dst)[i] = gk::AddF32(gk::NarrowF64(base), raw);
    } else {
      const uint16_t bits = static_cast<uint16_t>(e[8] | (e[9] << 8));
      const float raw = DT == gcclFloat16 ? fb_half_to_float(bits) : fb_bf16_to_float(bits);
      const float sum = gk::AddF32(gk::NarrowF64(base), raw);
      static_cast<uint16_t*>(dst)[i] = DT == gcclFloat16 ? fb_float_to_half(sum) : fb_float_to_bf16(sum);
    }
  }
}

template <gcclDataType_t DT>
__global__ void RawDecode(const void* payload, size_t n, void* dst) {
  gk::ForEachElementUnrolled(n, [&](const size_t* i, const bool* ok) {
    if constexpr (DT == gcclFloat64) {  // a raw fp64 frame carries doubles
      const double* in = static_cast<const double*>(payload);
      double* d = static_cast<double*>(dst);
      double v[gk::kUnroll], old[gk::kUnroll];
#pragma unroll
      for (int u = 0; u < gk::kUnroll; u++)
        if (ok[u]) v[u] = in[i[u]], old[u] = d[i[u]];
#pragma unroll
      for (int u = 0; u < gk::kUnroll; u++)
        if (ok[u]) d[i[u]] = gk::AddF64(old[u], v[u]);
    } else {
      float v[gk::kUnroll];
#pragma unroll
      for (int u = 0; u < gk::kUnroll; u++) v[u] = ok[u] ? gk::LoadF32<DT>(payload, i[u]) : 0.0f;
      gk::AccumulateUnrolled<DT>(dst, i, ok, v);
    }
  });
}

}  // namespace

extern "C" size_t gk_exceptions_scratch(size_t n) {
  size_t bytes = 0;
  if (Select<gcclFloat32>(nullptr, nullptr, n, 0, 0, nullptr, nullptr, nullptr, nullptr, &bytes, 0) != cudaSuccess)
    return 0;
  return bytes;
}

extern "C" cudaError_t gk_exceptions_select(const void* src, gcclDataType_t dt, const float* resid_in, size_t n,
                                            uint32_t exc_key, unsigned bucket, const unsigned char* bucket_bad,
                                            uint64_t* exc, unsigned long long* nexc, void* scratch,
                                            size_t scratch_bytes, cudaStream_t s) {
  return gk::DispatchFloat(dt, [&](auto tag) {
    constexpr gcclDataType_t DT = decltype(tag)::value;
    size_t bytes = scratch_bytes;
    return Select<DT>(src, resid_in, n, exc_key, bucket, bucket_bad, exc, nexc, scratch, &bytes, s);
  });
}

extern "C" cudaError_t gk_exceptions_write(const void* src, gcclDataType_t dt, const uint64_t* exc, size_t nexc,
                                           unsigned char* out, cudaStream_t s) {
  if (nexc == 0) return cudaSuccess;
  return gk::LaunchFloat(dt, [&](auto tag) {
    constexpr gcclDataType_t DT = decltype(tag)::value;
    WriteEntries<DT><<<gk::Blocks(nexc), gk::kThreads, 0, s>>>(src, exc, nexc, out);
  });
}

extern "C" cudaError_t gk_raw_residual(const void* src, gcclDataType_t dt, const float* resid_in, float* resid_out,
                                       size_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return gk::LaunchFloat(dt, [&](auto tag) {
    constexpr gcclDataType_t DT = decltype(tag)::value;
    RawResidual<DT><<<gk::Blocks(n), gk::kThreads, 0, s>>>(src, resid_in, resid_out, n);
  });
}

extern "C" cudaError_t gk_exceptions_save(const void* dst, gcclDataType_t dt, const unsigned char* entries, size_t nexc,
                                          double* saved, cudaStream_t s) {
  if (nexc == 0) return cudaSuccess;
  return gk::LaunchFloat(dt, [&](auto tag) {
    constexpr gcclDataType_t DT = decltype(tag)::value;
    SaveAt<DT><<<gk::Blocks(nexc), gk::kThreads, 0, s>>>(dst, entries, nexc, saved);
  });
}

extern "C" cudaError_t gk_exceptions_apply(void* dst, gcclDataType_t dt, const unsigned char* entries, size_t nexc,
                                           const double* saved, cudaStream_t s) {
  if (nexc == 0) return cudaSuccess;
  return gk::LaunchFloat(dt, [&](auto tag) {
    constexpr gcclDataType_t DT = decltype(tag)::value;
    ApplyAt<DT><<<gk::Blocks(nexc), gk::kThreads, 0, s>>>(dst, entries, nexc, saved);
  });
}

extern "C" cudaError_t gk_raw_decode(const unsigned char* payload, size_t n, void* dst, gcclDataType_t dt,
                                     cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return gk::LaunchFloat(dt, [&](auto tag) {
    constexpr gcclDataType_t DT = decltype(tag)::value;
    RawDecode<DT><<<gk::Blocks(gk::UnrolledItems(n)), gk::kThreads, 0, s>>>(payload, n, dst);
  });
}
