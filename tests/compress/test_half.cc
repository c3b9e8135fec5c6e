// test_half.cc — the fp16 and bf16 codecs (compress/codec_half.c) and the none codec.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

extern "C" {
#include "common/dtype.h"
#include "compress/codec_util.h"
#include "gccl.h"
}

namespace {

struct Compressor {
  gcclCompressor_t c = nullptr;
  Compressor(const char* spec, size_t n, gcclDataType_t dt = gcclFloat32) {
    EXPECT_EQ(gcclCompressorCreate(&c, spec, n, dt), gcclSuccess) << gcclGetLastError(nullptr);
  }
  ~Compressor() {
    if (c) gcclCompressorDestroy(c);
  }
  std::vector<uint8_t> Encode(const void* src) {
    size_t cap = 0, bytes = 0;
    EXPECT_EQ(gcclEncodeBound(c, &cap), gcclSuccess);
    std::vector<uint8_t> f(cap);
    EXPECT_EQ(gcclEncode(c, src, f.data(), f.size(), &bytes), gcclSuccess) << gcclGetLastError(nullptr);
    f.resize(bytes);
    return f;
  }
};

// Decodes a float32 frame into zeros.
std::vector<float> Decode(const std::vector<uint8_t>& f, size_t n) {
  std::vector<float> out(n, 0.0f);
  EXPECT_EQ(gcclDecodeAccumulate(f.data(), f.size(), out.data(), n, gcclFloat32), gcclSuccess)
      << gcclGetLastError(nullptr);
  return out;
}

float HalfValue(bool fp16, uint16_t code) {
  return fp16 ? half_to_float(code) : bf16_to_float(code);
}

// Checks d is the 16-bit value nearest to x, ties to the even code, using only the
// neighbouring codes — independent of how the codec rounds.
void ExpectNearestEven(bool fp16, float x, uint16_t code) {
  if (std::isnan(x)) {
    EXPECT_TRUE(std::isnan(HalfValue(fp16, code)));
    return;
  }
  double d = HalfValue(fp16, code);
  double max_finite = fp16 ? 65504.0 : (double)bf16_to_float(0x7F7F);
  double half_ulp_top = fp16 ? 16.0 : std::ldexp(1.0, 127 - 8);
  if (std::fabs((double)x) >= max_finite + half_ulp_top) {  // rounds to inf
    EXPECT_TRUE(std::isinf(d) && (d > 0) == (x > 0)) << x;
    return;
  }
  ASSERT_TRUE(std::isfinite(d)) << x;
  double err = std::fabs(d - (double)x);
  for (int step : {-1, 1}) {
    uint16_t mag = code & 0x7FFF, sign = code & 0x8000;
    if (mag == 0 && step < 0) continue;
    uint16_t nb = (uint16_t)(sign | (mag + step));
    double v = HalfValue(fp16, nb);
    if (!std::isfinite(v)) continue;
    double nerr = std::fabs(v - (double)x);
    EXPECT_LE(err, nerr) << "x=" << x << " code=" << code;
    if (err == nerr) {
      EXPECT_EQ(code & 1, 0) << "tie not to even: x=" << x;
    }
  }
}

class HalfCodec : public ::testing::TestWithParam<const char*> {};

TEST_P(HalfCodec, RoundsToNearestEven) {
  bool fp16 = std::string(GetParam()) == "fp16";
  std::mt19937 rng(1);
  std::vector<float> x;
  // Random bit patterns cover every exponent, subnormals, infs and NaNs; plus exact ties.
  for (int i = 0; i < 200000; i++) {
    uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, 4);
    x.push_back(f);
  }
  for (uint32_t code = 0; code < 0x7C00; code += 37) {  // midpoints between neighbouring codes
    float a = HalfValue(fp16, (uint16_t)code), b = HalfValue(fp16, (uint16_t)(code + 1));
    x.push_back((float)(((double)a + b) / 2));
    x.push_back(-(float)(((double)a + b) / 2));
  }
  for (float v : {0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, 1e-8f, 5.96e-8f, 2.98e-8f, 3.0e-8f, 1.0f, -1.0f})
    x.push_back(v);
  Compressor c(GetParam(), x.size());
  std::vector<uint8_t> f = c.Encode(x.data());
  ASSERT_EQ(f.size(), 64 + 2 * x.size());
  for (size_t i = 0; i < x.size(); i++) {
    uint16_t code;
    std::memcpy(&code, &f[64 + 2 * i], 2);
    ExpectNearestEven(fp16, x[i], code);
    if (HasFailure()) break;
  }
  std::vector<float> d = Decode(f, x.size());
  for (size_t i = 0; i < x.size(); i++) {
    uint16_t code;
    std::memcpy(&code, &f[64 + 2 * i], 2);
    float want = HalfValue(fp16, code);
    if (std::isnan(want))
      ASSERT_TRUE(std::isnan(d[i])) << i;
    else
      ASSERT_EQ(d[i], want) << i;
  }
}

TEST_P(HalfCodec, SimdAndScalarGiveTheSameBits) {
  std::mt19937 rng(2);
  std::normal_distribution<float> g(0.0f, 100.0f);
  for (size_t n : {0u, 1u, 7u, 8u, 15u, 16u, 17u, 4095u, 4096u, 4097u, 10007u}) {
    std::vector<float> x(n);
    for (auto& v : x) v = g(rng);
    if (n > 3) x[1] = NAN, x[2] = INFINITY, x[3] = 1e30f;
    std::string spec = std::string(GetParam()) + ":ef=1";
    Compressor simd(spec.c_str(), n), scalar(spec.c_str(), n);
    std::vector<uint8_t> a = simd.Encode(x.data());
    codec_force_scalar = 1;
    std::vector<uint8_t> b = scalar.Encode(x.data());
    std::vector<float> db = Decode(b, n);
    codec_force_scalar = 0;
    std::vector<float> da = Decode(a, n);
    ASSERT_EQ(a, b) << "n=" << n;
    ASSERT_TRUE(n == 0 || std::memcmp(da.data(), db.data(), n * 4) == 0) << "n=" << n;
    std::vector<float> ra(n), rb(n);
    ASSERT_EQ(gcclCompressorGetResidual(simd.c, ra.data()), gcclSuccess);
    ASSERT_EQ(gcclCompressorGetResidual(scalar.c, rb.data()), gcclSuccess);
    ASSERT_TRUE(n == 0 || std::memcmp(ra.data(), rb.data(), n * 4) == 0) << "n=" << n;
  }
}

TEST_P(HalfCodec, ErrorFeedbackKeepsWhatWasNotSent) {
  const size_t n = 1000;
  std::vector<float> x(n);
  std::mt19937 rng(3);
  std::normal_distribution<float> g;
  for (auto& v : x) v = g(rng);
  x[10] = -INFINITY;
  x[11] = NAN;
  std::string spec = std::string(GetParam()) + ":ef=1";
  Compressor c(spec.c_str(), n);
  std::vector<float> d = Decode(c.Encode(x.data()), n);
  std::vector<float> r(n);
  ASSERT_EQ(gcclCompressorGetResidual(c.c, r.data()), gcclSuccess);
  for (size_t i = 0; i < n; i++) {
    if (i == 10 || i == 11) {
      EXPECT_EQ(r[i], 0.0f);
      EXPECT_FALSE(std::isfinite(d[i]));
    } else {
      EXPECT_EQ(r[i], x[i] - d[i]) << i;
    }
  }
  EXPECT_TRUE(std::isinf(d[10]) && d[10] < 0);
  EXPECT_TRUE(std::isnan(d[11]));
}

TEST_P(HalfCodec, DecodesIntoEveryFloatType) {
  const size_t n = 513;
  std::mt19937 rng(4);
  std::normal_distribution<float> g;
  std::vector<float> x(n);
  for (auto& v : x) v = g(rng);
  Compressor c32(GetParam(), n);
  std::vector<float> want = Decode(c32.Encode(x.data()), n);
  // The same values as fp64, fp16 and bf16 tensors: decoded into base + frame.
  std::vector<double> x64(x.begin(), x.end()), dst64(n, 1.5);
  Compressor c64(GetParam(), n, gcclFloat64);
  std::vector<uint8_t> f64 = c64.Encode(x64.data());
  ASSERT_EQ(gcclDecodeAccumulate(f64.data(), f64.size(), dst64.data(), n, gcclFloat64), gcclSuccess);
  for (size_t i = 0; i < n; i++) ASSERT_EQ(dst64[i], 1.5 + (double)want[i]) << i;
  for (gcclDataType_t dt : {gcclFloat16, gcclBfloat16}) {
    std::vector<uint16_t> xs(n), dst(n, dt == gcclFloat16 ? float_to_half(1.5f) : float_to_bf16(1.5f));
    for (size_t i = 0; i < n; i++) xs[i] = dt == gcclFloat16 ? float_to_half(x[i]) : float_to_bf16(x[i]);
    Compressor ch(GetParam(), n, dt);
    std::vector<uint8_t> f = ch.Encode(xs.data());
    ASSERT_EQ(gcclDecodeAccumulate(f.data(), f.size(), dst.data(), n, dt), gcclSuccess);
    for (size_t i = 0; i < n; i++) {
      float xi = dt == gcclFloat16 ? half_to_float(xs[i]) : bf16_to_float(xs[i]);
      uint16_t code = std::string(GetParam()) == "fp16" ? float_to_half(xi) : float_to_bf16(xi);
      float dec = std::string(GetParam()) == "fp16" ? half_to_float(code) : bf16_to_float(code);
      uint16_t expect = dt == gcclFloat16 ? float_to_half(1.5f + dec) : float_to_bf16(1.5f + dec);
      ASSERT_EQ(dst[i], expect) << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Codecs, HalfCodec, ::testing::Values("fp16", "bf16"));

TEST(NoneCodec, ExactForEveryDatatype) {
  const size_t n = 1001;
  std::mt19937_64 rng(5);
  for (int t = 0; t < gcclNumTypes; t++) {
    gcclDataType_t dt = (gcclDataType_t)t;
    size_t es = dtype_size(dt);
    std::vector<uint8_t> x(n * es), base(n * es), dst(n * es), want(n * es);
    // Small integer values, so sums are exact in every type.
    for (size_t i = 0; i < n; i++) {
      double a = (double)(rng() % 50), b = (double)(rng() % 50);
      switch (dt) {
        case gcclFloat16: {
          uint16_t u = float_to_half((float)a), v = float_to_half((float)b), w = float_to_half((float)(a + b));
          std::memcpy(&x[2 * i], &u, 2);
          std::memcpy(&base[2 * i], &v, 2);
          std::memcpy(&want[2 * i], &w, 2);
          break;
        }
        case gcclBfloat16: {
          uint16_t u = float_to_bf16((float)a), v = float_to_bf16((float)b), w = float_to_bf16((float)(a + b));
          std::memcpy(&x[2 * i], &u, 2);
          std::memcpy(&base[2 * i], &v, 2);
          std::memcpy(&want[2 * i], &w, 2);
          break;
        }
        case gcclFloat32: {
          float u = (float)a, v = (float)b, w = (float)(a + b);
          std::memcpy(&x[4 * i], &u, 4);
          std::memcpy(&base[4 * i], &v, 4);
          std::memcpy(&want[4 * i], &w, 4);
          break;
        }
        case gcclFloat64: {
          double u = a, v = b, w = a + b;
          std::memcpy(&x[8 * i], &u, 8);
          std::memcpy(&base[8 * i], &v, 8);
          std::memcpy(&want[8 * i], &w, 8);
          break;
        }
        default: {
          uint64_t u = (uint64_t)a, v = (uint64_t)b, w = u + v;
          std::memcpy(&x[es * i], &u, es);
          std::memcpy(&base[es * i], &v, es);
          std::memcpy(&want[es * i], &w, es);
          break;
        }
      }
    }
    Compressor c("none", n, dt);
    std::vector<uint8_t> f = c.Encode(x.data());
    ASSERT_EQ(f.size(), 64 + n * es) << dtype_name(dt);
    ASSERT_EQ(0, std::memcmp(&f[64], x.data(), n * es));
    dst = base;
    ASSERT_EQ(gcclDecodeAccumulate(f.data(), f.size(), dst.data(), n, dt), gcclSuccess) << gcclGetLastError(nullptr);
    ASSERT_EQ(dst, want) << dtype_name(dt);
    // An unaligned frame decodes the same (the decoder bounces through an aligned buffer).
    std::vector<uint8_t> shifted(f.size() + 1);
    std::memcpy(&shifted[1], f.data(), f.size());
    dst = base;
    ASSERT_EQ(gcclDecodeAccumulate(&shifted[1], f.size(), dst.data(), n, dt), gcclSuccess);
    ASSERT_EQ(dst, want) << dtype_name(dt);
  }
}

TEST(RawFallback, ManyNonFiniteValuesSendTheTensorVerbatim) {
  // Exceptions cost 12 bytes each in fp32: a tensor full of NaN would make a
  // uniform frame bigger than the tensor, so the encoder sends it raw instead.
  const size_t n = 4096;
  std::vector<float> x(n, NAN);
  for (size_t i = 0; i < n; i += 2) x[i] = (float)i;
  Compressor c("uniform:bits=2,ef=1", n);
  std::vector<uint8_t> f = c.Encode(x.data());
  size_t bound = 0;
  ASSERT_EQ(gcclEncodeBound(c.c, &bound), gcclSuccess);
  EXPECT_LE(f.size(), bound);
  EXPECT_EQ(f.size(), 64 + 4 * n);
  EXPECT_EQ(f[7], 0x02) << "FRAME_FLAG_RAW";
  std::vector<float> d = Decode(f, n);
  for (size_t i = 0; i < n; i++) {
    if (i % 2)
      ASSERT_TRUE(std::isnan(d[i]));
    else
      ASSERT_EQ(d[i], x[i]);
  }
  std::vector<float> r(n);
  ASSERT_EQ(gcclCompressorGetResidual(c.c, r.data()), gcclSuccess);
  for (float v : r) ASSERT_EQ(v, 0.0f);  // everything finite was sent exactly
}

}  // namespace
