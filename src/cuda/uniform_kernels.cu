// uniform_kernels.cu — min-max quantization on the GPU (codec_uniform.c's format
// and arithmetic, through codec_math.h). Encode: one warp per bucket; a first
// pass finds the finite min and max, a second writes the codes (each lane packs
// groups of 8 codes = `bits` whole bytes) and the new residual. The bucket's
// elements are read twice, the second time from L1/L2. Decode: one warp per
// bucket, a lane per element.
#include <float.h>

#include "compress/codec_math.h"
#include "compress/rng.h"
#include "cuda/device_math.cuh"
#include "cuda/gpu_kernels.h"

namespace {

// Bytes of a full bucket: min, max, then B codes of `bits` bits.
__host__ __device__ inline size_t BucketBytes(size_t bucket, unsigned bits) {
  return 8 + (bucket * bits + 7) / 8;
}

template <gcclDataType_t DT>
__global__ void UniformEncode(const void* src, const float* resid_in, float* resid_out, size_t n, unsigned bucket,
                              unsigned bits, int stochastic, uint64_t key, unsigned char* payload,
                              unsigned char* bucket_bad, unsigned long long* nbad) {
  const unsigned lane = threadIdx.x % 32;
  gk::ForEachBucketPerWarp(n, bucket, [&](size_t b, size_t base, size_t m) {
    unsigned char* out = payload + b * BucketBytes(bucket, bits);
    // Pass 1: min and max of the finite elements.
    float lo = FLT_MAX, hi = -FLT_MAX;
    int any = 0, bad = 0;
    for (size_t j = lane; j < m; j += 32) {
      float x = gk::InputX<DT>(src, resid_in, base + j);
      if (fb_finite(x)) {
        lo = fminf(lo, x);
        hi = fmaxf(hi, x);
        any = 1;
      } else {
        bad = 1;
      }
    }
    for (int w = 16; w >= 1; w /= 2) {
      lo = fminf(lo, __shfl_xor_sync(gk::kFullMask, lo, w));
      hi = fmaxf(hi, __shfl_xor_sync(gk::kFullMask, hi, w));
    }
    any = __any_sync(gk::kFullMask, any);
    bad = __any_sync(gk::kFullMask, bad);
    // + 0.0f turns -0 into +0, as on the CPU, so the order of min/max ties is moot.
    float mn = any ? __fadd_rn(lo, 0.0f) : 0.0f, mx = any ? __fadd_rn(hi, 0.0f) : 0.0f;
    struct uq_bucket p;
    const size_t code_bytes = (m * bits + 7) / 8;
    // A range that overflows fp32 makes every element an exception.
    const int verdict = !uq_bucket_make(mn, mx, bits, &p) ? EXC_BUCKET_ALL
                        : bad                             ? EXC_BUCKET_NONFINITE
                                                          : EXC_BUCKET_NONE;
    gk::WarpBucketVerdict(verdict, lane, b, bucket_bad, nbad, out, 8 + code_bytes, resid_out, base, m);
    if (verdict == EXC_BUCKET_ALL) return;
    if (lane == 0) {
      gk::PutU32(out, fb_bits(mn));
      gk::PutU32(out + 4, fb_bits(mx));
    }
    // Pass 2: the codes, a group of 8 per lane at a time; non-finite x codes as 0.0f.
    unsigned char* codes = out + 8;
    for (size_t g = lane; g * 8 < m; g += 32) {
      const size_t j0 = g * 8;
      const size_t r = m - j0 < 8 ? m - j0 : 8;
      uint64_t acc = 0;
      for (size_t k = 0; k < r; k++) {
        const size_t i = base + j0 + k;
        float x = gk::InputX<DT>(src, resid_in, i);
        int fin = fb_finite(x);
        float v = fin ? x : 0.0f;
        float u = stochastic ? uq_uniform(key, base, j0 + k) : 0.5f;
        uint32_t q = uq_quant(v, &p, u);
        acc |= static_cast<uint64_t>(q) << (k * bits);
        if (resid_out) resid_out[i] = fin ? __fsub_rn(v, uq_dequant(q, &p)) : 0.0f;
      }
      const size_t nb = (r * bits + 7) / 8;
      for (size_t o = 0; o < nb; o++) codes[g * bits + o] = static_cast<unsigned char>(acc >> (8 * o));
    }
  });
}

struct UniformBucket {
  const unsigned char* codes;
  struct uq_bucket p;
};

template <gcclDataType_t DT>
__global__ void UniformDecode(const unsigned char* payload, size_t n, unsigned bucket, unsigned bits, void* dst) {
  gk::DecodeBucketsPerWarp<DT>(
      n, bucket, dst,
      [&](size_t b) {
        const unsigned char* in = payload + b * BucketBytes(bucket, bits);
        UniformBucket q;
        q.codes = in + 8;
        uq_bucket_make(fb_float(gk::GetU32(in)), fb_float(gk::GetU32(in + 4)), bits, &q.p);  // validated on the host
        return q;
      },
      [&](const UniformBucket& q, size_t j) { return uq_dequant(uq_get_code(q.codes, j, bits), &q.p); });
}

}  // namespace

extern "C" cudaError_t gk_uniform_encode(const void* src, gcclDataType_t dt, const float* resid_in, float* resid_out,
                                         size_t n, unsigned bucket, unsigned bits, int stochastic, uint64_t key,
                                         unsigned char* payload, unsigned char* bucket_bad, unsigned long long* nbad,
                                         cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const size_t nbuckets = (n + bucket - 1) / bucket;
  const unsigned blocks = gk::Blocks(nbuckets * 32);
  return gk::LaunchFloat(dt, [&](auto tag) {
    constexpr gcclDataType_t DT = decltype(tag)::value;
    UniformEncode<DT><<<blocks, gk::kThreads, 0, s>>>(src, resid_in, resid_out, n, bucket, bits, stochastic, key,
                                                      payload, bucket_bad, nbad);
  });
}

extern "C" cudaError_t gk_uniform_decode(const unsigned char* payload, size_t n, unsigned bucket, unsigned bits,
                                         void* dst, gcclDataType_t dt, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return gk::LaunchFloat(dt, [&](auto tag) {
    constexpr gcclDataType_t DT = decltype(tag)::value;
    UniformDecode<DT>
        <<<gk::Blocks((n + bucket - 1) / bucket * 32), gk::kThreads, 0, s>>>(payload, n, bucket, bits, dst);
  });
}
