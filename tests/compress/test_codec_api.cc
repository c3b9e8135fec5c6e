// test_codec_api.cc — the public codec API (gcclCompressor*, gcclEncode*,
// gcclDecodeAccumulate) across every codec: argument checks, round trips for
// every float dtype and awkward counts, and non-finite values surviving.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compress/codec_cases.h"

namespace {

using codec_cases::AllCases;
using codec_cases::CodecCase;
using codec_cases::Compressor;
using codec_cases::EncodeFrame;
using codec_cases::FloatTypes;
using codec_cases::LastError;
using codec_cases::Tensor;

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// ---------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------

// A small valid setup for the argument tests: fp16 with error feedback serves a
// 16-element fp32 tensor; fp16 is always built.
struct ArgFixture {
  static constexpr size_t kCount = 16;
  Compressor c;
  Tensor src{gcclFloat32, kCount};
  std::vector<unsigned char> frame;
  size_t bound = 0;
  void SetUp(const char* spec = "fp16:ef=1") {
    ASSERT_EQ(c.Create(spec, kCount, gcclFloat32), gcclSuccess) << LastError();
    bound = c.Bound();
    std::mt19937_64 rng(1);
    codec_cases::FillRandom(src, rng);
    frame.assign(bound, 0);
  }
};

TEST(CodecApiArgs, NullArgumentsAreInvalidArgument) {
  ArgFixture f;
  ASSERT_NO_FATAL_FAILURE(f.SetUp());
  gcclCompressor_t c = f.c.get();
  Tensor buf(gcclFloat32, ArgFixture::kCount);
  size_t fb = 12345;

  auto expect_invalid = [](gcclResult_t r, const char* fn) {
    EXPECT_EQ(r, gcclInvalidArgument) << fn;
    EXPECT_TRUE(Contains(LastError(), fn)) << "message \"" << LastError() << "\" does not name " << fn;
  };
  expect_invalid(gcclCompressorCreate(nullptr, "fp16", 4, gcclFloat32), "gcclCompressorCreate");
  gcclCompressor_t made = reinterpret_cast<gcclCompressor_t>(&buf);  // must be reset to NULL on error
  expect_invalid(gcclCompressorCreate(&made, nullptr, 4, gcclFloat32), "gcclCompressorCreate");
  EXPECT_EQ(made, nullptr);
  expect_invalid(gcclCompressorDestroy(nullptr), "gcclCompressorDestroy");
  expect_invalid(gcclCompressorGetResidual(nullptr, buf.data()), "gcclCompressorGetResidual");
  expect_invalid(gcclCompressorGetResidual(c, nullptr), "gcclCompressorGetResidual");
  expect_invalid(gcclCompressorSetResidual(nullptr, buf.data()), "gcclCompressorSetResidual");
  expect_invalid(gcclCompressorSetResidual(c, nullptr), "gcclCompressorSetResidual");
  expect_invalid(gcclEncodeBound(nullptr, &fb), "gcclEncodeBound");
  expect_invalid(gcclEncodeBound(c, nullptr), "gcclEncodeBound");
  expect_invalid(gcclEncode(nullptr, f.src.data(), f.frame.data(), f.bound, &fb), "gcclEncode");
  expect_invalid(gcclEncode(c, nullptr, f.frame.data(), f.bound, &fb), "gcclEncode");
  expect_invalid(gcclEncode(c, f.src.data(), nullptr, f.bound, &fb), "gcclEncode");
  expect_invalid(gcclEncode(c, f.src.data(), f.frame.data(), f.bound, nullptr), "gcclEncode");
  EXPECT_EQ(fb, 12345u) << "a failed call wrote *frameBytes";

  ASSERT_EQ(gcclEncode(c, f.src.data(), f.frame.data(), f.bound, &fb), gcclSuccess) << LastError();
  expect_invalid(gcclDecodeAccumulate(nullptr, fb, buf.data(), ArgFixture::kCount, gcclFloat32),
                 "gcclDecodeAccumulate");
  expect_invalid(gcclDecodeAccumulate(f.frame.data(), fb, nullptr, ArgFixture::kCount, gcclFloat32),
                 "gcclDecodeAccumulate");
}

TEST(CodecApiArgs, InvalidDatatype) {
  for (int bad : {(int)gcclNumTypes, 11, 255, -1}) {
    gcclCompressor_t c = nullptr;
    EXPECT_EQ(gcclCompressorCreate(&c, "none", 4, (gcclDataType_t)bad), gcclInvalidArgument) << bad;
    EXPECT_EQ(c, nullptr);
    EXPECT_TRUE(Contains(LastError(), "datatype")) << LastError();
  }
  ArgFixture f;
  ASSERT_NO_FATAL_FAILURE(f.SetUp());
  size_t fb = 0;
  ASSERT_EQ(gcclEncode(f.c.get(), f.src.data(), f.frame.data(), f.bound, &fb), gcclSuccess);
  Tensor dst(gcclFloat64, ArgFixture::kCount);
  for (int bad : {(int)gcclNumTypes, 200, -3}) {
    EXPECT_EQ(gcclDecodeAccumulate(f.frame.data(), fb, dst.data(), ArgFixture::kCount, (gcclDataType_t)bad),
              gcclInvalidArgument)
        << bad;
    EXPECT_TRUE(Contains(LastError(), "datatype")) << LastError();
  }
}

TEST(CodecApiArgs, LossyCodecOnIntegerDtypeIsRejected) {
  const gcclDataType_t ints[] = {gcclInt8, gcclUint8, gcclInt32, gcclUint32, gcclInt64, gcclUint64};
  for (const char* codec : {"fp16", "bf16", "uniform", "qsgd", "sign", "terngrad", "topk", "randk"}) {
    for (gcclDataType_t dt : ints) {
      gcclCompressor_t c = nullptr;
      EXPECT_EQ(gcclCompressorCreate(&c, codec, 8, dt), gcclInvalidArgument) << codec << " " << dtype_name(dt);
      EXPECT_EQ(c, nullptr);
      std::string msg = LastError();
      EXPECT_TRUE(Contains(msg, codec) && Contains(msg, dtype_name(dt))) << msg;
    }
  }
  // none takes every dtype.
  for (int dt = 0; dt < gcclNumTypes; dt++) {
    Compressor c;
    EXPECT_EQ(c.Create("none", 8, (gcclDataType_t)dt), gcclSuccess) << dtype_name((gcclDataType_t)dt);
  }
}

TEST(CodecApiArgs, SpecErrorsNameTheCulprit) {
  struct Bad {
    const char* spec;
    const char* named;  // what the message must contain
  };
  const Bad bad[] = {
      {"foo", "foo"},
      {"topkk:ratio=0.1", "topkk"},
      {"", "\"\""},
      {"topk:bogus=1", "bogus"},
      {"topk:bits=4", "bits"},  // a key the codec does not use
      {"uniform:bits=9", "bits=9"},
      {"uniform:bits=0", "bits=0"},
      {"qsgd:bits=99999999999999999999", "bits"},
      {"uniform:bucket=0", "bucket=0"},
      {"sign:bucket=16777217", "bucket=16777217"},
      {"topk:ratio=0", "ratio=0"},
      {"topk:ratio=1.5", "ratio=1.5"},
      {"randk:ratio=-0.1", "-0.1"},
      {"topk:ratio=nan", "nan"},
      {"topk:values=fp8", "fp8"},
      {"uniform:round=up", "up"},
      {"sign:ef=2", "ef"},
      {"none:ef=1", "ef"},
      {"topk:ratio=0.1,ratio=0.2", "ratio"},
      {"topk:", "topk:"},
      {"topk:ratio", "ratio"},
      {"topk:seed=-1", "-1"},
  };
  for (const Bad& b : bad) {
    gcclCompressor_t c = nullptr;
    EXPECT_EQ(gcclCompressorCreate(&c, b.spec, 8, gcclFloat32), gcclInvalidArgument) << b.spec;
    EXPECT_EQ(c, nullptr) << b.spec;
    EXPECT_TRUE(Contains(LastError(), b.named))
        << "spec \"" << b.spec << "\": message \"" << LastError() << "\" does not name " << b.named;
  }
}

TEST(CodecApiArgs, CountTooLarge) {
  gcclCompressor_t c = nullptr;
  EXPECT_EQ(gcclCompressorCreate(&c, "none", SIZE_MAX, gcclFloat32), gcclInvalidArgument);
  EXPECT_EQ(c, nullptr);
  EXPECT_TRUE(Contains(LastError(), "count")) << LastError();
  ArgFixture f;
  ASSERT_NO_FATAL_FAILURE(f.SetUp());
  size_t fb = 0;
  ASSERT_EQ(gcclEncode(f.c.get(), f.src.data(), f.frame.data(), f.bound, &fb), gcclSuccess);
  float dst[4] = {0};
  EXPECT_EQ(gcclDecodeAccumulate(f.frame.data(), fb, dst, SIZE_MAX / 2, gcclFloat32), gcclInvalidArgument);
}

TEST(CodecApiArgs, CapBelowBound) {
  ArgFixture f;
  ASSERT_NO_FATAL_FAILURE(f.SetUp());
  ASSERT_GE(f.bound, (size_t)FRAME_HEADER_BYTES);
  for (size_t cap : {(size_t)0, (size_t)1, (size_t)FRAME_HEADER_BYTES, f.bound - 1}) {
    std::vector<unsigned char> frame(f.bound, 0x5A);
    size_t fb = 777;
    EXPECT_EQ(gcclEncode(f.c.get(), f.src.data(), frame.data(), cap, &fb), gcclInvalidArgument) << cap;
    EXPECT_TRUE(Contains(LastError(), std::to_string(f.bound))) << LastError();
    EXPECT_EQ(fb, 777u);
    EXPECT_EQ(frame, std::vector<unsigned char>(f.bound, 0x5A)) << "a refused encode wrote into the frame";
  }
  // A cap above the bound is fine.
  std::vector<unsigned char> big(f.bound + 100);
  size_t fb = 0;
  EXPECT_EQ(gcclEncode(f.c.get(), f.src.data(), big.data(), big.size(), &fb), gcclSuccess) << LastError();
  EXPECT_LE(fb, f.bound);
}

TEST(CodecApiArgs, MisalignedBuffers) {
  // fp32 elements at an odd address.
  ArgFixture f;
  ASSERT_NO_FATAL_FAILURE(f.SetUp());
  std::vector<uint64_t> store(64);
  unsigned char* odd = reinterpret_cast<unsigned char*>(store.data()) + 1;
  size_t fb = 0;
  EXPECT_EQ(gcclEncode(f.c.get(), odd, f.frame.data(), f.bound, &fb), gcclInvalidArgument);
  EXPECT_TRUE(Contains(LastError(), "align")) << LastError();
  ASSERT_EQ(gcclEncode(f.c.get(), f.src.data(), f.frame.data(), f.bound, &fb), gcclSuccess);
  EXPECT_EQ(gcclDecodeAccumulate(f.frame.data(), fb, odd, ArgFixture::kCount, gcclFloat32), gcclInvalidArgument);
  EXPECT_TRUE(Contains(LastError(), "align")) << LastError();
  EXPECT_EQ(gcclCompressorGetResidual(f.c.get(), odd), gcclInvalidArgument);
  EXPECT_EQ(gcclCompressorSetResidual(f.c.get(), odd), gcclInvalidArgument);
  // fp16 / fp64 elements: 2- and 8-byte alignment.
  Compressor h, d;
  ASSERT_EQ(h.Create("bf16", 8, gcclFloat16), gcclSuccess);
  ASSERT_EQ(d.Create("none", 8, gcclFloat64), gcclSuccess);
  std::vector<unsigned char> frame(d.Bound());
  EXPECT_EQ(gcclEncode(h.get(), odd, frame.data(), frame.size(), &fb), gcclInvalidArgument);
  EXPECT_EQ(gcclEncode(d.get(), odd + 3, frame.data(), frame.size(), &fb), gcclInvalidArgument);  // 4-aligned
  // A frame itself may sit at any address (it is a byte stream).
  Tensor src(gcclFloat64, 8), dst(gcclFloat64, 8);
  ASSERT_EQ(gcclEncode(d.get(), src.data(), frame.data(), frame.size(), &fb), gcclSuccess);
  std::vector<unsigned char> shifted(fb + 3);
  std::memcpy(shifted.data() + 3, frame.data(), fb);
  EXPECT_EQ(gcclDecodeAccumulate(shifted.data() + 3, fb, dst.data(), 8, gcclFloat64), gcclSuccess) << LastError();
}

TEST(CodecApiArgs, OverlappingBuffers) {
  ArgFixture f;
  ASSERT_NO_FATAL_FAILURE(f.SetUp());
  size_t src_bytes = f.src.bytes();
  std::vector<unsigned char> arena(src_bytes + f.bound + 64);
  std::memcpy(arena.data(), f.src.data(), src_bytes);
  std::vector<unsigned char> before = arena;
  size_t fb = 0;
  // The frame starts inside src, and src starts inside the frame.
  EXPECT_EQ(gcclEncode(f.c.get(), arena.data(), arena.data() + src_bytes - 4, f.bound, &fb), gcclInvalidArgument);
  EXPECT_TRUE(Contains(LastError(), "overlap")) << LastError();
  EXPECT_EQ(gcclEncode(f.c.get(), arena.data() + 8, arena.data(), f.bound, &fb), gcclInvalidArgument);
  EXPECT_EQ(arena, before);
  // Adjacent is not overlapping.
  EXPECT_EQ(gcclEncode(f.c.get(), arena.data(), arena.data() + src_bytes, f.bound, &fb), gcclSuccess) << LastError();

  // Decode: dst overlapping the frame (either side).
  std::vector<unsigned char> frame(arena.begin() + src_bytes, arena.begin() + src_bytes + fb);
  std::vector<uint64_t> store((fb + src_bytes) / 8 + 4);
  unsigned char* base = reinterpret_cast<unsigned char*>(store.data());
  std::memcpy(base, frame.data(), fb);
  std::vector<unsigned char> snap(base, base + store.size() * 8);
  EXPECT_EQ(gcclDecodeAccumulate(base, fb, base + 8, ArgFixture::kCount, gcclFloat32), gcclInvalidArgument);
  EXPECT_TRUE(Contains(LastError(), "overlap")) << LastError();
  std::memmove(base + 16, frame.data(), fb);
  EXPECT_EQ(gcclDecodeAccumulate(base + 16, fb, base, ArgFixture::kCount, gcclFloat32), gcclInvalidArgument);
  EXPECT_TRUE(Contains(LastError(), "overlap")) << LastError();
}

TEST(CodecApiArgs, ResidualWithoutErrorFeedback) {
  for (const char* spec : {"fp16", "none", "bf16:ef=0"}) {
    Compressor c;
    ASSERT_EQ(c.Create(spec, 8, gcclFloat32), gcclSuccess) << spec;
    Tensor r(gcclFloat32, 8);
    for (size_t i = 0; i < 8; i++) r.Set(i, 1.5);
    EXPECT_EQ(gcclCompressorSetResidual(c.get(), r.data()), gcclInvalidUsage) << spec;
    EXPECT_TRUE(Contains(LastError(), "ef")) << LastError();
    // Without error feedback the residual reads as zeros.
    EXPECT_EQ(gcclCompressorGetResidual(c.get(), r.data()), gcclSuccess) << spec;
    for (size_t i = 0; i < 8; i++) EXPECT_EQ(r.Bits(i), 0u) << spec << " element " << i;
  }
}

TEST(CodecApiArgs, SetResidualRejectsNonFinite) {
  for (gcclDataType_t dt : FloatTypes()) {
    SCOPED_TRACE(dtype_name(dt));
    const size_t n = 40;
    Compressor c;
    ASSERT_EQ(c.Create("fp16:ef=1", n, dt), gcclSuccess);
    Tensor good(dt, n), got(dt, n);
    for (size_t i = 0; i < n; i++) good.Set(i, 0.25 * (double)i - 3.0);
    ASSERT_EQ(gcclCompressorSetResidual(c.get(), good.data()), gcclSuccess) << LastError();
    ASSERT_EQ(gcclCompressorGetResidual(c.get(), got.data()), gcclSuccess);
    EXPECT_TRUE(got.BitsEqual(good));
    std::vector<double> poison = {std::nan(""), INFINITY, -INFINITY};
    if (dt == gcclFloat64) poison.push_back(1e300);  // finite in fp64, inf in the fp32 residual
    for (double p : poison) {
      Tensor bad = good;
      bad.Set(n - 3, p);
      EXPECT_EQ(gcclCompressorSetResidual(c.get(), bad.data()), gcclInvalidArgument) << p;
      EXPECT_TRUE(Contains(LastError(), std::to_string(n - 3))) << LastError();
      Tensor after(dt, n);
      ASSERT_EQ(gcclCompressorGetResidual(c.get(), after.data()), gcclSuccess);
      EXPECT_TRUE(after.BitsEqual(good)) << "a rejected SetResidual changed the residual";
    }
  }
}

// Count 0 for every codec: no buffers needed, a header-only frame that decodes.
class CodecZeroCount : public ::testing::TestWithParam<CodecCase> {};

TEST_P(CodecZeroCount, RoundTripWithNullBuffers) {
  const std::string spec = GetParam().spec;
  SKIP_IF_UNAVAILABLE(spec);
  for (int ef = 0; ef <= 1; ef++) {
    std::string s = codec_cases::WithEf(spec, ef);
    bool has_ef = codec_cases::Parse(s).ef;
    for (gcclDataType_t dt : FloatTypes()) {
      SCOPED_TRACE(s + " " + dtype_name(dt));
      Compressor c;
      ASSERT_EQ(c.Create(s, 0, dt), gcclSuccess) << LastError();
      size_t bound = c.Bound();
      ASSERT_GE(bound, (size_t)FRAME_HEADER_BYTES);
      std::vector<unsigned char> frame(bound);
      size_t fb = 0;
      ASSERT_EQ(gcclEncode(c.get(), nullptr, frame.data(), bound, &fb), gcclSuccess) << LastError();
      ASSERT_LE(fb, bound);
      EXPECT_EQ(gcclDecodeAccumulate(frame.data(), fb, nullptr, 0, dt), gcclSuccess) << LastError();
      EXPECT_EQ(gcclCompressorGetResidual(c.get(), nullptr), gcclSuccess) << LastError();
      EXPECT_EQ(gcclCompressorSetResidual(c.get(), nullptr), has_ef ? gcclSuccess : gcclInvalidUsage);
      uint64_t one = 0;  // room for one element of any dtype
      EXPECT_EQ(gcclDecodeAccumulate(frame.data(), fb, &one, 1, dt), gcclCorruptData)
          << "a frame of 0 elements decoded into 1";
      EXPECT_EQ(one, 0u);
      // A second encode (call number 1) works too.
      ASSERT_EQ(gcclEncode(c.get(), nullptr, frame.data(), bound, &fb), gcclSuccess) << LastError();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, CodecZeroCount, ::testing::ValuesIn(AllCases()),
                         [](const auto& info) { return codec_cases::CaseName(info.param.spec); });

// ---------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------

// none: bit-exact for all ten dtypes; accumulation adds in the dtype's own
// arithmetic (integers wrap, halves add in fp32 and round once).
TEST(CodecNone, ExactForEveryDtype) {
  std::mt19937_64 rng(7);
  for (int d = 0; d < gcclNumTypes; d++) {
    gcclDataType_t dt = (gcclDataType_t)d;
    size_t es = dtype_size(dt);
    for (size_t n : {0, 1, 7, 513, 100003}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " n=" + std::to_string(n));
      Compressor c;
      ASSERT_EQ(c.Create("none", n, dt), gcclSuccess) << LastError();
      EXPECT_EQ(c.Bound(), FRAME_HEADER_BYTES + n * es);
      Tensor src(dt, n), dec(dt, n), base(dt, n);
      codec_cases::FillRandom(src, rng);
      codec_cases::FillRandom(base, rng);
      std::vector<unsigned char> frame;
      ASSERT_EQ(EncodeFrame(c, src, &frame), gcclSuccess) << LastError();
      EXPECT_EQ(frame.size(), FRAME_HEADER_BYTES + n * es);
      ASSERT_EQ(gcclDecodeAccumulate(frame.data(), frame.size(), dec.data(), n, dt), gcclSuccess) << LastError();
      EXPECT_TRUE(dec.BitsEqual(src)) << "none is not exact";
      Tensor acc = base;
      ASSERT_EQ(gcclDecodeAccumulate(frame.data(), frame.size(), acc.data(), n, dt), gcclSuccess);
      uint64_t mask = es == 8 ? ~0ull : (1ull << (8 * es)) - 1;
      for (size_t i = 0; i < n; i++) {
        uint64_t want;
        switch (dt) {
          case gcclFloat32: {
            float v = (float)base.Get(i) + (float)src.Get(i);
            uint32_t u;
            std::memcpy(&u, &v, 4);
            want = u;
            break;
          }
          case gcclFloat64: {
            double v = base.Get(i) + src.Get(i);
            std::memcpy(&want, &v, 8);
            break;
          }
          case gcclFloat16:
            want = float_to_half((float)base.Get(i) + (float)src.Get(i));
            break;
          case gcclBfloat16:
            want = float_to_bf16((float)base.Get(i) + (float)src.Get(i));
            break;
          default:
            want = (base.Bits(i) + src.Bits(i)) & mask;
            break;
        }
        if (acc.Bits(i) != want) {
          ADD_FAILURE() << "element " << i << ": got bits " << acc.Bits(i) << ", want " << want;
          break;
        }
      }
    }
  }
}

class CodecRoundTrip : public ::testing::TestWithParam<CodecCase> {};

// For each float dtype and count: the frame fits the bound, decoding is
// deterministic and independent of the frame's alignment, decode_accumulate adds
// exactly the decoded values (in the dtype's arithmetic), the payload depends
// only on the fp32 values the codec sees (not on the caller's dtype), and the
// decoded tensor is close to the input where the codec promises that.
TEST_P(CodecRoundTrip, EveryFloatDtypeAndCount) {
  const std::string spec = GetParam().spec;
  const double max_rel = GetParam().max_rel_l2;
  SKIP_IF_UNAVAILABLE(spec);
  const codec_spec parsed = codec_cases::Parse(spec);
  std::mt19937_64 rng(12345);
  for (gcclDataType_t dt : FloatTypes()) {
    for (size_t n : {0, 1, 2, 7, 31, 512, 513, 100003}) {
      SCOPED_TRACE(spec + " " + dtype_name(dt) + " n=" + std::to_string(n));
      Compressor c;
      ASSERT_EQ(c.Create(spec, n, dt), gcclSuccess) << LastError();
      Tensor src(dt, n);
      codec_cases::FillRandom(src, rng);
      std::vector<unsigned char> frame;
      ASSERT_EQ(EncodeFrame(c, src, &frame), gcclSuccess) << LastError();
      EXPECT_EQ(frame[5], (unsigned)parsed.codec);
      EXPECT_EQ(frame[6], (unsigned)dt);
      EXPECT_EQ(codec_cases::FrameU64(frame, 8), n);
      EXPECT_EQ(codec_cases::FrameU64(frame, 24), 0u) << "exceptions for finite input";

      Tensor dec(dt, n), dec2(dt, n), dec3(dt, n);
      ASSERT_EQ(gcclDecodeAccumulate(frame.data(), frame.size(), dec.data(), n, dt), gcclSuccess) << LastError();
      ASSERT_EQ(gcclDecodeAccumulate(frame.data(), frame.size(), dec2.data(), n, dt), gcclSuccess);
      EXPECT_TRUE(dec.BitsEqual(dec2)) << "two decodes of one frame differ";
      std::vector<unsigned char> shifted(frame.size() + 1);
      std::memcpy(shifted.data() + 1, frame.data(), frame.size());
      ASSERT_EQ(gcclDecodeAccumulate(shifted.data() + 1, frame.size(), dec3.data(), n, dt), gcclSuccess);
      EXPECT_TRUE(dec.BitsEqual(dec3)) << "decoding a frame at an odd address differs";

      // The codec's own fp32 decoded values D: for fp32 the decode into zeros
      // (0 + D = D); otherwise the decode of an fp32 compressor's frame of the
      // same fp32 values, whose payload must be byte-identical.
      std::vector<float> D(n), x(n);
      for (size_t i = 0; i < n; i++) x[i] = (float)src.Get(i);
      if (dt == gcclFloat32 || parsed.codec == CODEC_NONE) {
        for (size_t i = 0; i < n; i++) D[i] = (float)dec.Get(i);
      } else {
        Compressor ref;
        ASSERT_EQ(ref.Create(spec, n, gcclFloat32), gcclSuccess);
        Tensor xs(gcclFloat32, n), Ds(gcclFloat32, n);
        for (size_t i = 0; i < n; i++) xs.Set(i, x[i]);
        std::vector<unsigned char> rf;
        ASSERT_EQ(EncodeFrame(ref, xs, &rf), gcclSuccess) << LastError();
        ASSERT_EQ(rf.size(), frame.size()) << "payload size depends on the caller's dtype";
        EXPECT_TRUE(std::equal(frame.begin() + 7, frame.begin() + FRAME_CRC_OFFSET, rf.begin() + 7))
            << "header fields depend on the caller's dtype";
        EXPECT_TRUE(std::equal(frame.begin() + FRAME_HEADER_BYTES, frame.end(), rf.begin() + FRAME_HEADER_BYTES))
            << "payload depends on the caller's dtype, not only on the fp32 values";
        ASSERT_EQ(gcclDecodeAccumulate(rf.data(), rf.size(), Ds.data(), n, gcclFloat32), gcclSuccess);
        for (size_t i = 0; i < n; i++) D[i] = (float)Ds.Get(i);
      }

      // decode into a nonzero buffer == base + decoded, in the dtype's arithmetic.
      Tensor base(dt, n);
      codec_cases::FillRandom(base, rng);
      Tensor acc = base;
      ASSERT_EQ(gcclDecodeAccumulate(frame.data(), frame.size(), acc.data(), n, dt), gcclSuccess);
      size_t bad = 0;
      for (size_t i = 0; i < n && bad < 5; i++) {
        Tensor want(dt, 2);  // [0]: decoded into zeros, [1]: decoded into base
        if (parsed.codec == CODEC_NONE) {
          want.SetBits(0, src.Bits(i));
          if (dt == gcclFloat16)
            want.SetBits(1, float_to_half((float)base.Get(i) + (float)src.Get(i)));
          else if (dt == gcclBfloat16)
            want.SetBits(1, float_to_bf16((float)base.Get(i) + (float)src.Get(i)));
          else
            want.Set(1,
                     dt == gcclFloat32 ? (double)((float)base.Get(i) + (float)src.Get(i)) : base.Get(i) + src.Get(i));
        } else {
          switch (dt) {
            case gcclFloat32:
              want.Set(0, 0.0f + D[i]);
              want.Set(1, (float)base.Get(i) + D[i]);
              break;
            case gcclFloat64:
              want.Set(0, 0.0 + (double)D[i]);
              want.Set(1, base.Get(i) + (double)D[i]);
              break;
            case gcclFloat16:
              want.SetBits(0, float_to_half(0.0f + D[i]));
              want.SetBits(1, float_to_half((float)base.Get(i) + D[i]));
              break;
            default:
              want.SetBits(0, float_to_bf16(0.0f + D[i]));
              want.SetBits(1, float_to_bf16((float)base.Get(i) + D[i]));
              break;
          }
        }
        if (dec.Bits(i) != want.Bits(0) || acc.Bits(i) != want.Bits(1)) {
          ADD_FAILURE() << "element " << i << ": decoded " << dec.Get(i) << " (want " << want.Get(0)
                        << "), accumulated onto " << base.Get(i) << " gives " << acc.Get(i) << " (want " << want.Get(1)
                        << ")";
          bad++;
        }
      }

      // Finite in, finite out; and the distance the codec promises.
      double err2 = 0, norm2 = 0;
      for (size_t i = 0; i < n; i++) {
        if (!std::isfinite(D[i])) {
          ADD_FAILURE() << "element " << i << " of finite input decoded to " << D[i];
          break;
        }
        err2 += ((double)D[i] - x[i]) * ((double)D[i] - x[i]);
        norm2 += (double)x[i] * x[i];
      }
      if (max_rel >= 0 && parsed.codec != CODEC_NONE) {
        EXPECT_LE(std::sqrt(err2), max_rel * std::sqrt(norm2) + 1e-30) << "decoded tensor too far from the input";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, CodecRoundTrip, ::testing::ValuesIn(AllCases()),
                         [](const auto& info) { return codec_cases::CaseName(info.param.spec); });

// ---------------------------------------------------------------------------
// Non-finite values
// ---------------------------------------------------------------------------

enum Special { kNaN, kPosInf, kNegInf, kNegNaN };

// The bit pattern of a special value in dt. NaNs carry a payload so that a
// verbatim exception can be told apart from a NaN the decoder made up.
uint64_t SpecialBits(gcclDataType_t dt, Special s) {
  switch (dt) {
    case gcclFloat32: {
      const uint32_t v[] = {0x7FC12345u, 0x7F800000u, 0xFF800000u, 0xFFC00321u};
      return v[s];
    }
    case gcclFloat64: {
      const uint64_t v[] = {0x7FF8000012345678ull, 0x7FF0000000000000ull, 0xFFF0000000000000ull, 0xFFF8000000000321ull};
      return v[s];
    }
    case gcclFloat16: {
      const uint16_t v[] = {0x7E21, 0x7C00, 0xFC00, 0xFE03};
      return v[s];
    }
    default: {
      const uint16_t v[] = {0x7FC5, 0x7F80, 0xFF80, 0xFFC3};
      return v[s];
    }
  }
}

struct Pattern {
  std::string name;
  std::vector<std::pair<size_t, Special>> at;
};

std::vector<Pattern> Patterns(size_t n) {
  std::vector<Pattern> p;
  const char* names[] = {"nan", "+inf", "-inf", "-nan"};
  for (int s = 0; s < 4; s++) {
    for (size_t i : {(size_t)0, n / 2, n - 1})
      p.push_back({std::string(names[s]) + "@" + std::to_string(i), {{i, (Special)s}}});
  }
  Pattern run{"run", {}};
  for (size_t i = 300; i < 340; i++) run.at.push_back({i, (Special)(i % 4)});
  p.push_back(run);
  p.push_back({"ends", {{0, kNaN}, {n / 2, kPosInf}, {n - 1, kNegInf}}});
  Pattern alt{"every-other", {}};
  for (size_t i = 0; i < n; i += 2) alt.at.push_back({i, (Special)((i / 2) % 4)});
  p.push_back(alt);
  Pattern all{"all-nan", {}};
  for (size_t i = 0; i < n; i++) all.at.push_back({i, kNaN});
  p.push_back(all);
  return p;
}

class CodecNonFinite : public ::testing::TestWithParam<CodecCase> {};

// NaN, +inf and -inf anywhere come back non-finite at their index (verbatim for
// codecs that send them as exceptions), everything else stays finite, and the
// error-feedback residual stays finite (0 at those indices) so the next step is
// clean.
TEST_P(CodecNonFinite, SurviveAndResidualStaysFinite) {
  const std::string spec = codec_cases::WithEf(GetParam().spec, 1);
  SKIP_IF_UNAVAILABLE(spec);
  const bool exact = codec_cases::LosslessExceptions(spec);
  const bool ef = codec_cases::Parse(spec).ef;
  const size_t n = 1100;
  std::mt19937_64 rng(99);
  for (gcclDataType_t dt : FloatTypes()) {
    for (const Pattern& pat : Patterns(n)) {
      SCOPED_TRACE(spec + " " + dtype_name(dt) + " " + pat.name);
      Compressor c;
      ASSERT_EQ(c.Create(spec, n, dt), gcclSuccess) << LastError();
      Tensor src(dt, n);
      codec_cases::FillRandom(src, rng);
      std::vector<char> special(n, 0);
      for (auto [i, s] : pat.at) {
        src.SetBits(i, SpecialBits(dt, s));
        special[i] = 1;
      }
      std::vector<unsigned char> frame;
      ASSERT_EQ(EncodeFrame(c, src, &frame), gcclSuccess) << LastError();
      Tensor dec(dt, n);
      ASSERT_EQ(gcclDecodeAccumulate(frame.data(), frame.size(), dec.data(), n, dt), gcclSuccess) << LastError();
      int failures = 0;
      for (size_t i = 0; i < n && failures < 5; i++) {
        double in = src.Get(i), out = dec.Get(i);
        bool ok;
        if (!special[i]) {
          ok = std::isfinite(out);
        } else if (std::isnan(in)) {
          ok = std::isnan(out);
        } else {
          ok = out == in;  // inf keeps its sign
        }
#if defined(__x86_64__)
        // Exceptions travel verbatim and x86 adds keep a quiet NaN's payload.
        if (ok && special[i] && exact && (dt == gcclFloat32 || dt == gcclFloat64)) ok = dec.Bits(i) == src.Bits(i);
#endif
        if (!ok) {
          ADD_FAILURE() << "element " << i << ": input " << in << " (bits 0x" << std::hex << src.Bits(i)
                        << ") decoded to " << out << " (bits 0x" << dec.Bits(i) << std::dec << ")";
          failures++;
        }
      }
      if (!ef) continue;
      Tensor r(dt, n);
      ASSERT_EQ(gcclCompressorGetResidual(c.get(), r.data()), gcclSuccess);
      for (size_t i = 0; i < n; i++) {
        if (!std::isfinite(r.Get(i)) || (special[i] && r.Get(i) != 0.0)) {
          ADD_FAILURE() << "residual[" << i << "] = " << r.Get(i) << (special[i] ? " at a non-finite input" : "");
          break;
        }
      }
      // The next, finite step decodes finite everywhere.
      Tensor next(dt, n), dec2(dt, n);
      codec_cases::FillRandom(next, rng);
      ASSERT_EQ(EncodeFrame(c, next, &frame), gcclSuccess) << LastError();
      ASSERT_EQ(gcclDecodeAccumulate(frame.data(), frame.size(), dec2.data(), n, dt), gcclSuccess);
      for (size_t i = 0; i < n; i++) {
        if (!std::isfinite(dec2.Get(i))) {
          ADD_FAILURE() << "step after the non-finite one: element " << i << " decoded to " << dec2.Get(i);
          break;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, CodecNonFinite, ::testing::ValuesIn(AllCases()),
                         [](const auto& info) { return codec_cases::CaseName(info.param.spec); });

// gcclEncodeBoundNonFinite: frames of inputs with e non-finite values fit the
// bound for e (and fill it exactly for a finite input of a quantizer: the size
// a framework can fix its slots at), never exceed gcclEncodeBound, and the bound
// grows with e until it reaches gcclEncodeBound.
TEST_P(CodecNonFinite, FramesFitTheNonFiniteBound) {
  const std::string spec = codec_cases::WithEf(GetParam().spec, 1);
  SKIP_IF_UNAVAILABLE(spec);
  const codec_id codec = codec_cases::Parse(spec).codec;
  const bool fixed_size = codec != CODEC_TOPK && codec != CODEC_RANDK;
  std::mt19937_64 rng(5);
  for (size_t n : {1, 7, 1100}) {
    for (gcclDataType_t dt : FloatTypes()) {
      SCOPED_TRACE(spec + " " + dtype_name(dt) + " n=" + std::to_string(n));
      Compressor c;
      ASSERT_EQ(c.Create(spec, n, dt), gcclSuccess) << LastError();
      size_t finite = 0, all = 0, prev = 0;
      ASSERT_EQ(gcclEncodeBoundNonFinite(c.get(), 0, &finite), gcclSuccess) << LastError();
      ASSERT_EQ(gcclEncodeBoundNonFinite(c.get(), SIZE_MAX, &all), gcclSuccess) << LastError();
      EXPECT_EQ(all, c.Bound());
      EXPECT_LE(finite, c.Bound());
      for (size_t e = 0; e <= n + 1; e++) {
        size_t b = 0;
        ASSERT_EQ(gcclEncodeBoundNonFinite(c.get(), e, &b), gcclSuccess);
        EXPECT_GE(b, prev);
        EXPECT_LE(b, c.Bound());
        prev = b;
      }
      Tensor src(dt, n);
      codec_cases::FillRandom(src, rng);
      std::vector<unsigned char> frame;
      ASSERT_EQ(EncodeFrame(c, src, &frame), gcclSuccess) << LastError();
      if (fixed_size) {
        EXPECT_EQ(frame.size(), finite);
      } else {
        EXPECT_LE(frame.size(), finite);
      }
      for (const Pattern& pat : Patterns(n)) {
        if (n < 340 && pat.name == "run") continue;  // its indices assume a longer tensor
        SCOPED_TRACE(pat.name);
        codec_cases::FillRandom(src, rng);
        for (auto [i, sp] : pat.at) src.SetBits(i, SpecialBits(dt, sp));
        size_t b = 0;
        ASSERT_EQ(gcclEncodeBoundNonFinite(c.get(), pat.at.size(), &b), gcclSuccess);
        ASSERT_EQ(EncodeFrame(c, src, &frame), gcclSuccess) << LastError();
        EXPECT_LE(frame.size(), b);
      }
    }
  }
}

}  // namespace
