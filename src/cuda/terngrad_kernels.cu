// terngrad_kernels.cu — TernGrad on the GPU (codec_terngrad.c's format and
// arithmetic, through codec_math.h). Encode: one warp per bucket. A first pass
// finds the scale, max |x| over the finite elements (a max of values >= +0 does not
// depend on the order, so lanes reduce freely); a second draws each element's code
// with rng_uniform(key, its index), as the CPU does, one code byte (4 elements) per
// lane at a time, and writes the new residual. Decode: one warp per bucket, a lane
// per element.
#include "compress/codec_math.h"
#include "compress/rng.h"
#include "cuda/device_math.cuh"
#include "cuda/gpu_kernels.h"

namespace {

// Bytes of a full bucket: the scale, then B codes of 2 bits.
__host__ __device__ inline size_t BucketBytes(size_t bucket) {
  return 4 + (bucket + 3) / 4;
}

template <gcclDataType_t DT>
__global__ void TerngradEncode(const void* src, const float* resid_in, float* resid_out, size_t n, unsigned bucket,
                               uint64_t key, unsigned char* payload, unsigned char* bucket_bad,
                               unsigned long long* nbad) {
  const unsigned lane = threadIdx.x % 32;
  gk::ForEachBucketPerWarp(n, bucket, [&](size_t b, size_t base, size_t m) {
    unsigned char* out = payload + b * BucketBytes(bucket);
    // Pass 1: max |v| (max_abs), v = x, or +0.0f where x is not finite.
    float scale = 0.0f;
    int bad = 0;
    for (size_t j = lane; j < m; j += 32) {
      int fin;
      scale = fmaxf(scale, fabsf(gk::FiniteInputX<DT>(src, resid_in, base + j, &fin)));
      bad |= !fin;
    }
    for (int w = 16; w >= 1; w /= 2) scale = fmaxf(scale, __shfl_xor_sync(gk::kFullMask, scale, w));
    // A max of finite values is finite; the test is kept to match codec_terngrad.c.
    const int verdict = gk::BucketVerdict(fb_finite(scale), __any_sync(gk::kFullMask, bad));
    gk::WarpBucketVerdict(verdict, lane, b, bucket_bad, nbad, out, 4 + (m + 3) / 4, resid_out, base, m);
    if (verdict == EXC_BUCKET_ALL) return;
    if (lane == 0) gk::PutU32(out, fb_bits(scale));
    // Pass 2: one code byte (4 elements) at a time; non-finite x codes as 0.0f.
    // Bits past the bucket's last code stay zero (the pad).
    gk::ForEachLaneGroup(m, lane, 4, [&](size_t j0, size_t r) {
      unsigned byte = 0;
      for (size_t k = 0; k < r; k++) {
        const size_t i = base + j0 + k;
        int fin;
        const float v = gk::FiniteInputX<DT>(src, resid_in, i, &fin);
        const unsigned c = tern_code(v, scale, rng_uniform(key, i));
        byte |= c << (2 * k);
        gk::StoreResidual(resid_out, i, fin, v, tern_value(c, scale));
      }
      out[4 + j0 / 4] = static_cast<unsigned char>(byte);
    });
  });
}

struct TerngradBucket {
  const unsigned char* codes;
  float scale;
};

template <gcclDataType_t DT>
__global__ void TerngradDecode(const unsigned char* payload, size_t n, unsigned bucket, void* dst) {
  gk::DecodeBucketsPerWarp<DT>(
      n, bucket, dst,
      [&](size_t b) {
        const unsigned char* in = payload + b * BucketBytes(bucket);
        return TerngradBucket{in + 4, fb_float(gk::GetU32(in))};  // validated on the host
      },
      [&](const TerngradBucket& q, size_t j) { return tern_value(tern_get_code(q.codes, j), q.scale); });
}

}  // namespace

extern "C" cudaError_t gk_terngrad_encode(const void* src, gcclDataType_t dt, const float* resid_in, float* resid_out,
                                          size_t n, unsigned bucket, uint64_t key, unsigned char* payload,
                                          unsigned char* bucket_bad, unsigned long long* nbad, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const unsigned blocks = gk::Blocks((n + bucket - 1) / bucket * 32);
  return gk::LaunchFloat(dt, [&](auto tag) {
    TerngradEncode<decltype(tag)::value>
        <<<blocks, gk::kThreads, 0, s>>>(src, resid_in, resid_out, n, bucket, key, payload, bucket_bad, nbad);
  });
}

extern "C" cudaError_t gk_terngrad_decode(const unsigned char* payload, size_t n, unsigned bucket, void* dst,
                                          gcclDataType_t dt, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const unsigned blocks = gk::Blocks((n + bucket - 1) / bucket * 32);
  return gk::LaunchFloat(dt, [&](auto tag) {
    TerngradDecode<decltype(tag)::value><<<blocks, gk::kThreads, 0, s>>>(payload, n, bucket, dst);
  });
}
