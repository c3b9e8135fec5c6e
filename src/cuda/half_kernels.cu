// half_kernels.cu — fp16 and bf16 on the GPU: every element rounded to 16 bits,
// to nearest even, with the integer conversions of float_bits.h (codec_half.c's
// format and arithmetic; error feedback fused: one pass reads src and residual and
// writes codes and the new residual).
#include "cuda/device_math.cuh"
#include "cuda/gpu_kernels.h"

namespace {

template <gcclDataType_t DT, bool BF16>
__global__ void HalfEncode(const void* src, const float* resid_in, float* resid_out, size_t n, uint16_t* out) {
  gk::ForEachElementUnrolled(n, [&](const size_t* i, const bool* ok) {
    float x[gk::kUnroll];
#pragma unroll
    for (int u = 0; u < gk::kUnroll; u++) x[u] = ok[u] ? gk::InputX<DT>(src, resid_in, i[u]) : 0.0f;
#pragma unroll
    for (int u = 0; u < gk::kUnroll; u++) {
      if (!ok[u]) continue;
      const uint16_t h = BF16 ? fb_float_to_bf16(x[u]) : fb_float_to_half(x[u]);
      out[i[u]] = h;
      gk::StoreResidual(resid_out, i[u], fb_finite(x[u]), x[u], BF16 ? fb_bf16_to_float(h) : fb_half_to_float(h));
    }
  });
}

template <gcclDataType_t DT, bool BF16>
__global__ void HalfDecode(const uint16_t* in, size_t n, void* dst) {
  gk::ForEachElementUnrolled(n, [&](const size_t* i, const bool* ok) {
    float v[gk::kUnroll];
#pragma unroll
    for (int u = 0; u < gk::kUnroll; u++) {
      v[u] = ok[u] ? (BF16 ? fb_bf16_to_float(in[i[u]]) : fb_half_to_float(in[i[u]])) : 0.0f;
      // codec_half.c adds to other dtypes from a zeroed fp32 block (0.0f + v), where
      // a -0 code arrives as +0.
      if (DT != gcclFloat32 && fb_bits(v[u]) == 0x80000000u) v[u] = 0.0f;
    }
    gk::AccumulateUnrolled<DT>(dst, i, ok, v);
  });
}

}  // namespace

extern "C" cudaError_t gk_half_encode(int bf16, const void* src, gcclDataType_t dt, const float* resid_in,
                                      float* resid_out, size_t n, unsigned char* payload, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  uint16_t* out = reinterpret_cast<uint16_t*>(payload);  // the driver keeps payloads 16-byte aligned
  return gk::LaunchFloat(dt, [&](auto tag) {
    constexpr gcclDataType_t DT = decltype(tag)::value;
    if (bf16)
      HalfEncode<DT, true><<<gk::Blocks(gk::UnrolledItems(n)), gk::kThreads, 0, s>>>(src, resid_in, resid_out, n, out);
    else
      HalfEncode<DT, false><<<gk::Blocks(gk::UnrolledItems(n)), gk::kThreads, 0, s>>>(src, resid_in, resid_out, n, out);
  });
}

extern "C" cudaError_t gk_half_decode(int bf16, const unsigned char* payload, size_t n, void* dst, gcclDataType_t dt,
                                      cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const uint16_t* in = reinterpret_cast<const uint16_t*>(payload);
  return gk::LaunchFloat(dt, [&](auto tag) {
    constexpr gcclDataType_t DT = decltype(tag)::value;
    if (bf16)
      HalfDecode<DT, true><<<gk::Blocks(gk::UnrolledItems(n)), gk::kThreads, 0, s>>>(in, n, dst);
    else
      HalfDecode<DT, false><<<gk::Blocks(gk::UnrolledItems(n)), gk::kThreads, 0, s>>>(in, n, dst);
  });
}
