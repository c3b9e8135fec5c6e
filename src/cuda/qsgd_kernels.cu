// qsgd_kernels.cu — QSGD on the GPU (codec_qsgd.c's format and arithmetic, through
// codec_math.h). Encode: one warp per bucket. A first pass takes the canonical sum
// of squares of the finite elements (gk::CanonWarpAdd: codec_util.c's canon_sum_sq
// order, products rounded before they are added, as on the CPU) and the norm from
// it; a second draws each element's level with rng_uniform(key, its index), as the
// CPU does, and each lane packs groups of 8 codes (w = bits + 1 whole bytes) and
// writes the new residual. The bucket's elements are read twice, the second time
// from L1/L2. Decode: one warp per bucket, a lane per element.
#include "compress/codec_math.h"
#include "compress/rng.h"
#include "cuda/device_math.cuh"
#include "cuda/gpu_kernels.h"

namespace {

// Bytes of a full bucket: the norm, then B codes of bits + 1 bits.
__host__ __device__ inline size_t BucketBytes(size_t bucket, unsigned bits) {
  return 4 + (bucket * (bits + 1) + 7) / 8;
}

template <gcclDataType_t DT>
__global__ void QsgdEncode(const void* src, const float* resid_in, float* resid_out, size_t n, unsigned bucket,
                           unsigned bits, uint64_t key, unsigned char* payload, unsigned char* bucket_bad,
                           unsigned long long* nbad) {
  const unsigned lane = threadIdx.x % 32;
  const unsigned w = bits + 1;
  gk::ForEachBucketPerWarp(n, bucket, [&](size_t b, size_t base, size_t m) {
    unsigned char* out = payload + b * BucketBytes(bucket, bits);
    // Pass 1: the canonical sum of v * v, v = x, or +0.0f where x is not finite.
    float acc = 0.0f;
    int bad = 0;
    for (size_t j0 = 0; j0 < m; j0 += 32) {
      const size_t j = j0 + lane;
      int fin = 1;
      const float v = j < m ? gk::FiniteInputX<DT>(src, resid_in, base + j, &fin) : 0.0f;
      bad |= !fin;
      acc = gk::CanonWarpAdd(acc, __fmul_rn(v, v), lane);
    }
    const float norm = qs_norm(gk::CanonWarpTotal(acc, lane));
    struct qs_bucket p;
    // A sum of squares that overflowed makes every element an exception.
    const int verdict = gk::BucketVerdict(qs_bucket_make(norm, bits, &p), __any_sync(gk::kFullMask, bad));
    gk::WarpBucketVerdict(verdict, lane, b, bucket_bad, nbad, out, 4 + (m * w + 7) / 8, resid_out, base, m);
    if (verdict == EXC_BUCKET_ALL) return;
    if (lane == 0) gk::PutU32(out, fb_bits(norm));
    // Pass 2: groups of 8 codes, w whole bytes each; non-finite x codes as 0.0f.
    gk::ForEachLaneGroup(m, lane, 8, [&](size_t j0, size_t r) {
      uint32_t c[8] = {0};
      for (size_t k = 0; k < r; k++) {
        const size_t i = base + j0 + k;
        int fin;
        const float v = gk::FiniteInputX<DT>(src, resid_in, i, &fin);
        c[k] = qs_quant(v, &p, rng_uniform(key, i));
        gk::StoreResidual(resid_out, i, fin, v, qs_dequant(c[k], &p));
      }
      qs_put_group(c, w, out + 4 + j0 / 8 * w, r);
    });
  });
}

struct QsgdBucket {
  const unsigned char* codes;
  struct qs_bucket p;
};

template <gcclDataType_t DT>
__global__ void QsgdDecode(const unsigned char* payload, size_t n, unsigned bucket, unsigned bits, void* dst) {
  gk::DecodeBucketsPerWarp<DT>(
      n, bucket, dst,
      [&](size_t b) {
        const unsigned char* in = payload + b * BucketBytes(bucket, bits);
        QsgdBucket q;
        q.codes = in + 4;
        qs_bucket_make(fb_float(gk::GetU32(in)), bits, &q.p);  // validated on the host
        return q;
      },
      [&](const QsgdBucket& q, size_t j) { return qs_dequant(packed_code_get(q.codes, j, bits + 1), &q.p); });
}

}  // namespace

extern "C" cudaError_t gk_qsgd_encode(const void* src, gcclDataType_t dt, const float* resid_in, float* resid_out,
                                      size_t n, unsigned bucket, unsigned bits, uint64_t key, unsigned char* payload,
                                      unsigned char* bucket_bad, unsigned long long* nbad, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const unsigned blocks = gk::Blocks((n + bucket - 1) / bucket * 32);
  return gk::LaunchFloat(dt, [&](auto tag) {
    QsgdEncode<decltype(tag)::value>
        <<<blocks, gk::kThreads, 0, s>>>(src, resid_in, resid_out, n, bucket, bits, key, payload, bucket_bad, nbad);
  });
}

extern "C" cudaError_t gk_qsgd_decode(const unsigned char* payload, size_t n, unsigned bucket, unsigned bits, void* dst,
                                      gcclDataType_t dt, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const unsigned blocks = gk::Blocks((n + bucket - 1) / bucket * 32);
  return gk::LaunchFloat(dt, [&](auto tag) {
    QsgdDecode<decltype(tag)::value><<<blocks, gk::kThreads, 0, s>>>(payload, n, bucket, bits, dst);
  });
}
