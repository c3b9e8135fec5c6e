// sign_kernels.cu — sign on the GPU (codec_sign.c's format and arithmetic, through
// codec_math.h). Encode: one warp per bucket. The scale is the mean |x| of the
// finite elements in the canonical summation order (gk::CanonWarpAdd). A second
// pass writes the bits with ballots.
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
    // Pass 1: the canonical sum of |v| and the number of finite elements. Past m a
    // lane adds +0.0f, which leaves a canonical lane (>= +0) unchanged.
    float acc = 0.0f;
    size_t nf = 0;
    for (size_t j0 = 0; j0 < m; j0 += 32) {
      const size_t j = j0 + lane;
      float x = j < m ? gk::InputX<DT>(src, resid_in, base + j) : 0.0f;
      int fin = fb_finite(x);
      acc = gk::CanonWarpAdd(acc, fabsf(fin ? x : 0.0f), lane);
      nf += static_cast<size_t>(__popc(__ballot_sync(gk::kFullMask, j < m && fin)));
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
    for (size_t j0 = 0; j0 < m; j0 += 32) {
      const size_t j = j0 + lane;
      float x = j < m ? gk::InputX<DT>(src, resid_in, base + j) : 0.0f;
      int fin = fb_finite(x);
      float v = fin ? x : 0.0f;
      uint32_t bit = sign_bit(v);
      uint32_t word = __ballot_sync(gk::kFullMask, j < m && bit);
      if (j < m && resid_out) resid_out[base + j] = fin ? __fsub_rn(v, sign_dequant(bit, scale)) : 0.0f;
      const size_t nbytes = (m - j0 + 7) / 8 < 4 ? (m - j0 + 7) / 8 : 4;
      if (lane < nbytes) codes[j0 / 8 + lane] = static_cast<unsigned char>(word >> (8 * lane));
    }
  });
}

// One thread per code byte (8 elements) of a bucket.
template <gcclDataType_t DT>
__global__ void SignDecode(const unsigned char* payload, size_t n, unsigned bucket, void* dst) {
  gk::ForEachBucketGroup(n, bucket, [&](size_t b, size_t base, size_t g, size_t r) {
    const unsigned char* in = payload + b * BucketBytes(bucket);
    const float scale = fb_float(gk::GetU32(in));
    const unsigned byte = in[4 + g];
    for (size_t k = 0; k < r; k++) gk::Accumulate<DT>(dst, base + g * 8 + k, sign_dequant((byte >> k) & 1u, scale));
  });
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
    SignDecode<DT><<<gk::Blocks(gk::BucketGroups(n, bucket)), gk::kThreads, 0, s>>>(payload, n, bucket, dst);
  });
}
