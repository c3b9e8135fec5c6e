// sign_kernels.cu — sign on the GPU (codec_sign.c's format and arithmetic, through
// codec_math.h). Encode: one warp per bucket. The scale is the mean |x| of the
// finite elements in the canonical summation order (gk::CanonWarpAdd). A second
// pass writes the bits with ballots. Decode: one warp per bucket, a lane per element.
#include "compress/codec_math.h"
#include "cuda/device_math.cuh"
#include "cuda/gpu_kernels.h"

namespace {

__host__ __device__ inline size_t BucketBytes(size_t bucket) {
  return 4 + (bucket + 7) / 8;
}

template <gcclDataType_t DT>
__global__ void SignEncode(const void* src, const float* resid_in, float* resid_out, size_t n, unsigned bucket,
                           unsigned char* payload, unsigned char* bucket_bad, unsigned long long* nbad) {
  const unsigned lane = threadIdx.x % 32;
  gk::ForEachBucketPerWarp(n, bucket, [&](size_t b, size_t base, size_t m) {
    unsigned char* out = payload + b * BucketBytes(bucket);
    // Pass 1: the canonical sum of |v| and the number of finite elements, 32
    // elements a step, kUnroll steps loaded at a time. Past m a lane adds +0.0f,
    // which leaves a canonical lane (>= +0) unchanged.
    float acc = 0.0f;
    size_t nf = 0;
    for (size_t j0 = 0; j0 < m; j0 += 32 * gk::kUnroll) {
      float x[gk::kUnroll];
      gk::LoadWarpSteps<DT>(src, resid_in, base, m, j0, lane, x);
#pragma unroll
      for (int u = 0; u < gk::kUnroll; u++) {
        const size_t j = j0 + 32 * static_cast<size_t>(u) + lane;
        const int fin = fb_finite(x[u]);
        acc = gk::CanonWarpAdd(acc, fabsf(fin ? x[u] : 0.0f), lane);
        nf += static_cast<size_t>(__popc(__ballot_sync(gk::kFullMask, j < m && fin)));
      }
    }
    const float scale = sign_scale(gk::CanonWarpTotal(acc, lane), nf);
    const size_t code_bytes = (m + 7) / 8;
    // A scale that overflowed makes every element an exception.
    const int verdict = gk::BucketVerdict(fb_finite(scale), nf < m);
    gk::WarpBucketVerdict(verdict, lane, b, bucket_bad, nbad, out, 4 + code_bytes, resid_out, base, m);
    if (verdict == EXC_BUCKET_ALL) return;
    if (lane == 0) gk::PutU32(out, fb_bits(scale));
    // Pass 2: 32 bits per ballot, bytes LSB first; non-finite x codes as +0.0f (bit 0).
    unsigned char* codes = out + 4;
    for (size_t j0 = 0; j0 < m; j0 += 32 * gk::kUnroll) {
      float x[gk::kUnroll];
      gk::LoadWarpSteps<DT>(src, resid_in, base, m, j0, lane, x);
#pragma unroll
      for (int u = 0; u < gk::kUnroll; u++) {
        const size_t s0 = j0 + 32 * static_cast<size_t>(u);  // the same in every lane
        if (s0 >= m) break;
        const size_t j = s0 + lane;
        const int fin = fb_finite(x[u]);
        const float v = fin ? x[u] : 0.0f;
        const uint32_t bit = sign_bit(v);
        const uint32_t word = __ballot_sync(gk::kFullMask, j < m && bit);
        if (j < m) gk::StoreResidual(resid_out, base + j, fin, v, sign_dequant(bit, scale));
        const size_t nbytes = (m - s0 + 7) / 8 < 4 ? (m - s0 + 7) / 8 : 4;
        if (lane < nbytes) codes[s0 / 8 + lane] = static_cast<unsigned char>(word >> (8 * lane));
      }
    }
  });
}

struct SignBucket {
  const unsigned char* codes;
  float scale;
};

template <gcclDataType_t DT>
__global__ void SignDecode(const unsigned char* payload, size_t n, unsigned bucket, void* dst) {
  gk::DecodeBucketsPerWarp<DT>(
      n, bucket, dst,
      [&](size_t b) {
        const unsigned char* in = payload + b * BucketBytes(bucket);
        return SignBucket{in + 4, fb_float(gk::GetU32(in))};
      },
      [&](const SignBucket& q, size_t j) { return sign_dequant((q.codes[j / 8] >> (j % 8)) & 1u, q.scale); });
}

}  // namespace

extern "C" cudaError_t gk_sign_encode(const void* src, gcclDataType_t dt, const float* resid_in, float* resid_out,
                                      size_t n, unsigned bucket, unsigned char* payload, unsigned char* bucket_bad,
                                      unsigned long long* nbad, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const size_t nbuckets = (n + bucket - 1) / bucket;
  return gk::LaunchFloat(dt, [&](auto tag) {
    constexpr gcclDataType_t DT = decltype(tag)::value;
    SignEncode<DT><<<gk::Blocks(nbuckets * 32), gk::kThreads, 0, s>>>(src, resid_in, resid_out, n, bucket, payload,
                                                                      bucket_bad, nbad);
  });
}

extern "C" cudaError_t gk_sign_decode(const unsigned char* payload, size_t n, unsigned bucket, void* dst,
                                      gcclDataType_t dt, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return gk::LaunchFloat(dt, [&](auto tag) {
    constexpr gcclDataType_t DT = decltype(tag)::value;
    SignDecode<DT><<<gk::Blocks((n + bucket - 1) / bucket * 32), gk::kThreads, 0, s>>>(payload, n, bucket, dst);
  });
}
