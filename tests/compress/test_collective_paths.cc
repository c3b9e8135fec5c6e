// test_collective_paths.cc — the codec entry points the compressed collectives use
// (compress/compressor.h), against the public codec API, for every codec:
//  - where codecs build input + residual bucket by bucket (fills_input), the frames and
//    residuals of compressor_encode_f32 (EF_ADD and an owner's EF_RESTAGE) and of
//    gcclEncode equal, bit for bit, those of the eager conversion of the same values;
//  - frame_decode_f32_to writes what clearing the output and accumulating the frame
//    gives, bit for bit (-0.0 included), also through decode_store_f32 and at
//    addresses that are not 32-byte aligned, and writes nothing outside its range.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec_cases.h"

extern "C" {
#include "common/dtype.h"
#include "compress/compressor.h"
#include "compress/decode.h"
}

namespace {

using codec_cases::AllCases;
using codec_cases::CodecCase;
using codec_cases::Unavailable;

const size_t kCounts[] = {0, 1, 7, 8, 9, 513, 1031, 5003};

// N(0, 1) values with zeros of both signs sprinkled in, a whole 512-element stretch
// of -0.0 (a bucket of sign decodes to -0.0 there), and with `specials` a NaN and
// an inf (exceptions for most codecs).
std::vector<float> Input(size_t n, uint32_t seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; i++) x[i] = i % 97 == 5 ? -0.0f : i % 89 == 7 ? 0.0f : normal(rng);
  for (size_t i = 1024; i < 1536 && i < n; i++) x[i] = -0.0f;
  if (specials && n > 3) {
    x[3] = NAN;
    x[n / 2] = INFINITY;
  }
  return x;
}

std::vector<unsigned char> EncodeWithApi(gcclCompressor_t c, const std::vector<float>& x) {
  size_t bound = 0, bytes = 0;
  EXPECT_EQ(gcclEncodeBound(c, &bound), gcclSuccess);
  std::vector<unsigned char> frame(bound);
  EXPECT_EQ(gcclEncode(c, x.data(), frame.data(), frame.size(), &bytes), gcclSuccess) << gcclGetLastError(nullptr);
  frame.resize(bytes);
  return frame;
}

std::vector<float> Residual(gcclCompressor_t c, size_t n) {
  std::vector<float> r(n + 1);
  EXPECT_EQ(gcclCompressorGetResidual(c, r.data()), gcclSuccess) << gcclGetLastError(nullptr);
  r.resize(n);
  return r;
}

class CollectivePath : public ::testing::TestWithParam<CodecCase> {
 protected:
  void SetUp() override {
    std::string why = Unavailable(GetParam().spec);
    if (!why.empty()) GTEST_SKIP() << why;
  }
};

// The fp32 input with its residual built bucket by bucket where the codec fills its
// input (compressor_encode_f32 and gcclEncode), against the same values given as
// fp64, which take the eager conversion: the same frames and residuals.
TEST_P(CollectivePath, EncodeF32WithErrorFeedbackEqualsTheConvertedInput) {
  const std::string spec = codec_cases::WithEf(GetParam().spec, 1);
  for (size_t n : kCounts) {
    for (bool specials : {false, true}) {
      SCOPED_TRACE(spec + " n " + std::to_string(n) + (specials ? " with nan/inf" : ""));
      gcclCompressor_t api = nullptr, coll = nullptr, eager = nullptr;
      ASSERT_EQ(gcclCompressorCreate(&api, spec.c_str(), n, gcclFloat32), gcclSuccess);
      ASSERT_EQ(gcclCompressorCreate(&coll, spec.c_str(), n, gcclFloat32), gcclSuccess);
      ASSERT_EQ(gcclCompressorCreate(&eager, spec.c_str(), n, gcclFloat32), gcclSuccess);
      for (uint32_t call = 0; call < 3; call++) {  // later calls carry a residual
        std::vector<float> x = Input(n, 100 * call + (uint32_t)n, specials);
        std::vector<double> x64(x.begin(), x.end());
        std::vector<unsigned char> want(compressor_bound_f32(eager, n)), got(want.size());
        size_t lw = 0, lg = 0;
        ASSERT_EQ(compressor_encode_f32(eager, x64.data(), gcclFloat64, 0, n, EF_ADD, 0, want.data(), want.size(), &lw),
                  gcclSuccess)
            << gcclGetLastError(nullptr);
        ASSERT_EQ(compressor_encode_f32(coll, x.data(), gcclFloat32, 0, n, EF_ADD, 0, got.data(), got.size(), &lg),
                  gcclSuccess);
        ASSERT_EQ(compressor_commit(eager), gcclSuccess);
        ASSERT_EQ(compressor_commit(coll), gcclSuccess);
        want.resize(lw);
        got.resize(lg);
        EXPECT_EQ(got, want) << "call " << call;
        EXPECT_EQ(EncodeWithApi(api, x), want) << "gcclEncode, call " << call;
        std::vector<float> re = Residual(eager, n), rc = Residual(coll, n), ra = Residual(api, n);
        EXPECT_EQ(std::memcmp(re.data(), rc.data(), n * sizeof(float)), 0) << "residual after call " << call;
        EXPECT_EQ(std::memcmp(re.data(), ra.data(), n * sizeof(float)), 0) << "gcclEncode's residual, call " << call;
      }
      gcclCompressorDestroy(api);
      gcclCompressorDestroy(coll);
      gcclCompressorDestroy(eager);
    }
  }
}

// An owner's re-encode of its fp32 sum (EF_RESTAGE; the copy built bucket by bucket
// where the codec fills its input) against the same values given as fp64, which
// take the eager conversion: the same frame and the same staged residual.
TEST_P(CollectivePath, RestageOfAnFp32SumEqualsTheConvertedInput) {
  const std::string spec = codec_cases::WithEf(GetParam().spec, 1);
  for (size_t n : kCounts) {
    for (bool specials : {false, true}) {
      SCOPED_TRACE(spec + " n " + std::to_string(n) + (specials ? " with nan/inf" : ""));
      gcclCompressor_t a = nullptr, b = nullptr;
      ASSERT_EQ(gcclCompressorCreate(&a, spec.c_str(), n, gcclFloat32), gcclSuccess);
      ASSERT_EQ(gcclCompressorCreate(&b, spec.c_str(), n, gcclFloat32), gcclSuccess);
      std::vector<float> old = Input(n + 1, 3, false);  // a residual to add to
      if (codec_cases::Parse(spec).ef) {
        ASSERT_EQ(gcclCompressorSetResidual(a, old.data()), gcclSuccess) << gcclGetLastError(nullptr);
        ASSERT_EQ(gcclCompressorSetResidual(b, old.data()), gcclSuccess);
      }
      std::vector<float> x = Input(n, 11 + (uint32_t)n, specials);
      std::vector<double> x64(x.begin(), x.end());
      std::vector<unsigned char> fa(compressor_bound_f32(a, n)), fb(compressor_bound_f32(b, n));
      size_t la = 0, lb = 0;
      ASSERT_EQ(compressor_stage_keep(a, 0, n), gcclSuccess);
      ASSERT_EQ(compressor_stage_keep(b, 0, n), gcclSuccess);
      ASSERT_EQ(compressor_encode_f32(a, x.data(), gcclFloat32, 0, n, EF_RESTAGE, 1, fa.data(), fa.size(), &la),
                gcclSuccess);
      ASSERT_EQ(compressor_encode_f32(b, x64.data(), gcclFloat64, 0, n, EF_RESTAGE, 1, fb.data(), fb.size(), &lb),
                gcclSuccess);
      ASSERT_EQ(compressor_commit(a), gcclSuccess);
      ASSERT_EQ(compressor_commit(b), gcclSuccess);
      fa.resize(la);
      fb.resize(lb);
      EXPECT_EQ(fa, fb);
      std::vector<float> ra = Residual(a, n), rb = Residual(b, n);
      EXPECT_EQ(std::memcmp(ra.data(), rb.data(), n * sizeof(float)), 0);
      gcclCompressorDestroy(a);
      gcclCompressorDestroy(b);
    }
  }
}

TEST_P(CollectivePath, DecodeToEqualsClearThenAccumulateBitForBit) {
  // without error feedback, so that -0.0 inputs reach the codec (x + 0.0 is +0.0)
  const std::string spec = codec_cases::WithEf(GetParam().spec, 0);
  const uint32_t guard = 0xA5A5A5A5u;
  for (size_t n : kCounts) {
    for (bool specials : {false, true}) {
      SCOPED_TRACE(spec + " n " + std::to_string(n) + (specials ? " with nan/inf" : ""));
      gcclCompressor_t c = nullptr;
      ASSERT_EQ(gcclCompressorCreate(&c, spec.c_str(), n, gcclFloat32), gcclSuccess);
      std::vector<unsigned char> frame = EncodeWithApi(c, Input(n, 7 + (uint32_t)n, specials));
      gcclCompressorDestroy(c);
      std::vector<float> want(n + 1, 0.0f);  // one more: data() is never null, as memcmp needs
      ASSERT_EQ(frame_decode_accumulate(frame.data(), frame.size(), want.data(), n, gcclFloat32), gcclSuccess);

      // fp32 output, at aligned and unaligned addresses, over a buffer of guard bits
      for (size_t at : {0, 1, 3}) {
        std::vector<uint32_t> buf(n + 16, guard);
        float* out = reinterpret_cast<float*>(buf.data() + 8 + at);
        ASSERT_EQ(frame_decode_f32_to(frame.data(), frame.size(), out, gcclFloat32, n, nullptr), gcclSuccess)
            << gcclGetLastError(nullptr);
        EXPECT_EQ(std::memcmp(out, want.data(), n * sizeof(float)), 0) << "offset " << at;
        for (size_t i = 0; i < 8 + at; i++) EXPECT_EQ(buf[i], guard) << "written before the output, at " << i;
        for (size_t i = 8 + at + n; i < buf.size(); i++) EXPECT_EQ(buf[i], guard) << "written after the output";
      }
      // other output dtypes: decoded in fp32, rounded once
      for (gcclDataType_t dt : {gcclFloat64, gcclFloat16, gcclBfloat16}) {
        size_t es = dtype_size(dt);
        std::vector<unsigned char> expect(n * es + 1), got(n * es + 1, 0xA5);
        f32_store(expect.data(), dt, want.data(), n);
        std::vector<float> stage(n + 1);
        ASSERT_EQ(frame_decode_f32_to(frame.data(), frame.size(), got.data(), dt, n, stage.data()), gcclSuccess);
        EXPECT_EQ(std::memcmp(got.data(), expect.data(), n * es), 0) << "dtype " << dt;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, CollectivePath, ::testing::ValuesIn(AllCases()),
                         [](const auto& info) { return codec_cases::CaseName(info.param.spec); });

}  // namespace
