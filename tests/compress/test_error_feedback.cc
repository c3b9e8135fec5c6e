// test_error_feedback.cc — error feedback through the public API, for every lossy
// codec: the residual is exactly input minus decoded, the sum telescopes, a
// failed encode changes nothing, Set/GetResidual, and reproducible randomness.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "compress/codec_cases.h"

namespace {

using codec_cases::CodecCase;
using codec_cases::Compressor;
using codec_cases::EncodeFrame;
using codec_cases::LastError;
using codec_cases::Tensor;

uint32_t Bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

std::vector<float> Decode(const std::vector<unsigned char>& frame, size_t n) {
  Tensor d(gcclFloat32, n);
  EXPECT_EQ(gcclDecodeAccumulate(frame.data(), frame.size(), d.data(), n, gcclFloat32), gcclSuccess) << LastError();
  std::vector<float> out(n);
  std::memcpy(out.data(), d.data(), n * 4);
  return out;
}

std::vector<float> Residual(const Compressor& c, size_t n) {
  std::vector<float> r(n, -1.0f);
  EXPECT_EQ(gcclCompressorGetResidual(c.get(), r.data()), gcclSuccess) << LastError();
  return r;
}

Tensor RandomF32(std::mt19937_64& rng, size_t n, double scale = 1.0) {
  Tensor t(gcclFloat32, n);
  codec_cases::FillRandom(t, rng, scale);
  return t;
}

float At(const Tensor& t, size_t i) {
  return (float)t.Get(i);
}

class CodecErrorFeedback : public ::testing::TestWithParam<CodecCase> {
 protected:
  std::string Spec() const { return codec_cases::WithEf(GetParam().spec, 1); }
};

// With ef=1 the compressor feeds x_t = g_t + e_{t-1} to the codec and keeps
// e_t = x_t - D_t, where D_t is what the receiver decodes. Both are single fp32
// operations, so each step is checked bit for bit, and over T steps
//   sum_t D_t + e_T = sum_t g_t + sum_t (eta_t + eps_t)
// where eta_t, eps_t are the rounding errors of those two operations:
// |eta_t| <= u |x_t| and |eps_t| <= u |e_t| with u = 2^-24. The test's own sums
// are in double: 20 terms add at most 20 * 2^-53 of their magnitude. So the
// tolerance is u * sum_t(|x_t| + |e_t|) + 2^-45 * sum_t(|g_t| + |D_t|) per
// element — of the order of T * eps * (|g| + |e|), with no slack for a codec
// whose encoder and decoder disagree by even one ulp in a step.
TEST_P(CodecErrorFeedback, ResidualIsExactAndSumTelescopes) {
  const std::string spec = Spec();
  SKIP_IF_UNAVAILABLE(spec);
  const size_t n = 1031, T = 20;
  std::mt19937_64 rng(2024);
  Compressor c;
  ASSERT_EQ(c.Create(spec, n, gcclFloat32), gcclSuccess) << LastError();
  std::vector<float> e_prev(n, 0.0f), e(n);
  std::vector<double> sum_g(n, 0), sum_d(n, 0), tol(n, 0), mag(n, 0);
  for (size_t t = 0; t < T; t++) {
    SCOPED_TRACE("step " + std::to_string(t));
    Tensor g = RandomF32(rng, n, 0.5 + (double)(t % 3));  // magnitudes vary by step
    std::vector<unsigned char> frame;
    ASSERT_EQ(EncodeFrame(c, g, &frame), gcclSuccess) << LastError();
    std::vector<float> D = Decode(frame, n);
    e = Residual(c, n);
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
      float x = At(g, i) + e_prev[i];
      float want = x - D[i];
      if (Bits(e[i]) != Bits(want) && bad++ < 5)
        ADD_FAILURE() << "element " << i << ": x = " << x << ", decoded " << D[i] << ", residual " << e[i]
                      << " but x - decoded = " << want;
      sum_g[i] += At(g, i);
      sum_d[i] += D[i];
      tol[i] += std::fabs(x) + std::fabs(e[i]);
      mag[i] += std::fabs(At(g, i)) + std::fabs(D[i]);
    }
    ASSERT_EQ(bad, 0) << bad << " residuals differ from x - decoded";
    e_prev = e;
  }
  for (size_t i = 0; i < n; i++) {
    double lhs = sum_d[i] + (double)e[i];
    double bound = 0x1p-24 * tol[i] + 0x1p-45 * mag[i];
    ASSERT_LE(std::fabs(lhs - sum_g[i]), bound)
        << "element " << i << ": sum decoded + e_T = " << lhs << ", sum g = " << sum_g[i];
  }
}

// A refused encode leaves the residual and the call number as they were: the
// next encode gives what it would have given had the refused call not happened.
TEST_P(CodecErrorFeedback, FailedEncodeChangesNothing) {
  const std::string spec = Spec();
  SKIP_IF_UNAVAILABLE(spec);
  const size_t n = 517;
  std::mt19937_64 rng(5);
  Compressor a, b;
  ASSERT_EQ(a.Create(spec, n, gcclFloat32), gcclSuccess) << LastError();
  ASSERT_EQ(b.Create(spec, n, gcclFloat32), gcclSuccess);
  Tensor g1 = RandomF32(rng, n), g2 = RandomF32(rng, n), g3 = RandomF32(rng, n);
  std::vector<unsigned char> fa, fb;
  ASSERT_EQ(EncodeFrame(a, g1, &fa), gcclSuccess);
  ASSERT_EQ(EncodeFrame(b, g1, &fb), gcclSuccess);
  ASSERT_EQ(fa, fb);

  std::vector<float> before = Residual(a, n);
  size_t bound = a.Bound(), bytes = 0;
  std::vector<unsigned char> small(bound, 0);
  EXPECT_EQ(gcclEncode(a.get(), g2.data(), small.data(), bound - 1, &bytes), gcclInvalidArgument);
  EXPECT_EQ(gcclEncode(a.get(), g2.data(), nullptr, bound, &bytes), gcclInvalidArgument);
  EXPECT_EQ(gcclEncode(a.get(), g2.data(), small.data(), bound, nullptr), gcclInvalidArgument);
  EXPECT_EQ(gcclEncode(a.get(), g2.raw() + 2, small.data(), bound, &bytes), gcclInvalidArgument);
  std::vector<float> after = Residual(a, n);
  EXPECT_EQ(std::memcmp(before.data(), after.data(), n * 4), 0) << "a refused encode changed the residual";

  ASSERT_EQ(EncodeFrame(a, g3, &fa), gcclSuccess);
  ASSERT_EQ(EncodeFrame(b, g3, &fb), gcclSuccess);
  EXPECT_EQ(fa, fb) << "the encode after a refused one differs from an undisturbed compressor's";
  std::vector<float> ra = Residual(a, n), rb = Residual(b, n);
  EXPECT_EQ(std::memcmp(ra.data(), rb.data(), n * 4), 0);
}

// SetResidual then GetResidual gives the values back (for every float dtype),
// and an encode after SetResidual(r) of g equals an ef=0 encode of fl(g + r).
TEST_P(CodecErrorFeedback, SetResidualRoundTripAndEffect) {
  const std::string spec = Spec();
  SKIP_IF_UNAVAILABLE(spec);
  const size_t n = 300;
  std::mt19937_64 rng(77);
  for (gcclDataType_t dt : codec_cases::FloatTypes()) {
    SCOPED_TRACE(dtype_name(dt));
    Compressor c;
    ASSERT_EQ(c.Create(spec, n, dt), gcclSuccess) << LastError();
    Tensor r(dt, n), got(dt, n);
    for (size_t i = 0; i < n; i++) r.Set(i, (float)std::ldexp((double)(int)(rng() % 2001) - 1000, -9));
    ASSERT_EQ(gcclCompressorSetResidual(c.get(), r.data()), gcclSuccess) << LastError();
    ASSERT_EQ(gcclCompressorGetResidual(c.get(), got.data()), gcclSuccess);
    EXPECT_TRUE(got.BitsEqual(r)) << "GetResidual does not return what SetResidual stored";
  }
  Compressor with_ef, without;
  ASSERT_EQ(with_ef.Create(spec, n, gcclFloat32), gcclSuccess);
  ASSERT_EQ(without.Create(codec_cases::WithEf(spec, 0), n, gcclFloat32), gcclSuccess);
  Tensor r = RandomF32(rng, n, 0.3), g = RandomF32(rng, n), sum(gcclFloat32, n);
  for (size_t i = 0; i < n; i++) sum.Set(i, At(g, i) + At(r, i));
  ASSERT_EQ(gcclCompressorSetResidual(with_ef.get(), r.data()), gcclSuccess);
  std::vector<unsigned char> f1, f2;
  ASSERT_EQ(EncodeFrame(with_ef, g, &f1), gcclSuccess);
  ASSERT_EQ(EncodeFrame(without, sum, &f2), gcclSuccess);
  EXPECT_EQ(f1, f2) << "encoding g with residual r differs from encoding g + r without error feedback";
}

// Same spec and seed, same inputs: byte-identical frames, call after call.
// Another seed changes the frames of codecs that draw random numbers.
TEST_P(CodecErrorFeedback, SameSeedSameFrames) {
  std::string spec = Spec();
  SKIP_IF_UNAVAILABLE(spec);
  const bool seeded = spec_codec_keys(codec_cases::Parse(spec).codec) & SPEC_KEY_SEED;
  if (seeded) spec += ",seed=42";
  const size_t n = 700;
  Compressor a, b, other;
  ASSERT_EQ(a.Create(spec, n, gcclFloat32), gcclSuccess) << LastError();
  ASSERT_EQ(b.Create(spec, n, gcclFloat32), gcclSuccess);
  std::string other_spec = seeded ? spec.substr(0, spec.size() - 2) + "43" : spec;
  ASSERT_EQ(other.Create(other_spec, n, gcclFloat32), gcclSuccess);
  std::mt19937_64 rng(31);
  bool any_differs = false;
  for (int t = 0; t < 6; t++) {
    Tensor g = RandomF32(rng, n);
    std::vector<unsigned char> fa, fb, fo;
    ASSERT_EQ(EncodeFrame(a, g, &fa), gcclSuccess);
    ASSERT_EQ(EncodeFrame(b, g, &fb), gcclSuccess);
    ASSERT_EQ(EncodeFrame(other, g, &fo), gcclSuccess);
    ASSERT_EQ(fa, fb) << "step " << t << ": same spec and seed, different frames";
    any_differs |= fa != fo;
  }
  if (codec_cases::Stochastic(spec)) {
    EXPECT_TRUE(any_differs) << "seed 42 and seed 43 gave the same frames";
  }
}

INSTANTIATE_TEST_SUITE_P(LossyCodecs, CodecErrorFeedback, ::testing::ValuesIn(codec_cases::LossyCases()),
                         [](const auto& info) { return codec_cases::CaseName(info.param.spec); });

// Without error feedback, encoding the same tensor twice: codecs that draw random
// numbers give a different frame the second time (the call number advanced);
// deterministic ones give the same frame. A fresh compressor repeats call 0.
class CodecCallNumber : public ::testing::TestWithParam<CodecCase> {};

TEST_P(CodecCallNumber, AdvancesPerSuccessfulCall) {
  const std::string spec = codec_cases::WithEf(GetParam().spec, 0);
  SKIP_IF_UNAVAILABLE(spec);
  const codec_spec s = codec_cases::Parse(spec);
  const size_t n = 1000;
  std::mt19937_64 rng(8);
  Tensor g = RandomF32(rng, n);
  Compressor c, fresh;
  ASSERT_EQ(c.Create(spec, n, gcclFloat32), gcclSuccess) << LastError();
  ASSERT_EQ(fresh.Create(spec, n, gcclFloat32), gcclSuccess);
  std::vector<unsigned char> f0, f1, f2, g0;
  ASSERT_EQ(EncodeFrame(c, g, &f0), gcclSuccess);
  ASSERT_EQ(EncodeFrame(c, g, &f1), gcclSuccess);
  ASSERT_EQ(EncodeFrame(c, g, &f2), gcclSuccess);
  ASSERT_EQ(EncodeFrame(fresh, g, &g0), gcclSuccess);
  EXPECT_EQ(f0, g0) << "call 0 of two fresh compressors differs";
  if (codec_cases::Stochastic(spec)) {
    EXPECT_NE(f0, f1) << "calls 0 and 1 gave the same frame";
    EXPECT_NE(f1, f2) << "calls 1 and 2 gave the same frame";
  } else if (!(s.codec == CODEC_TOPK && s.approx)) {  // approx top-k may sample per call
    EXPECT_EQ(f0, f1) << "a deterministic codec changed its frame between calls";
  }
}

INSTANTIATE_TEST_SUITE_P(LossyCodecs, CodecCallNumber, ::testing::ValuesIn(codec_cases::LossyCases()),
                         [](const auto& info) { return codec_cases::CaseName(info.param.spec); });

}  // namespace
