// test_decode_range.cc — frame_decode_range: a run of whole buckets of a checked
// frame decoded on its own gives, bit for bit, what decoding the whole frame gives
// there (added, and stored as 0.0f + decoded), with exceptions inside, outside
// and on the edges of the range, for raw frames, and at every granule-aligned cut;
// codecs without ranges say so (granule 0); a misaligned range is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec_cases.h"

extern "C" {
#include "compress/decode.h"
#include "gccl.h"
}

namespace {

using Frame = std::vector<unsigned char>;

std::vector<float> Input(size_t n, uint32_t seed, bool specials, bool mostly_nan) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; i++) x[i] = i % 97 == 5 ? -0.0f : normal(rng);
  if (specials)
    for (size_t i : {size_t{0}, size_t{6}, size_t{7}, size_t{512}, size_t{1023}, n / 2, n - 1})
      if (i < n) x[i] = i % 2 ? NAN : -INFINITY;
  if (mostly_nan)
    for (size_t i = 0; i < n; i += 2) x[i] = NAN;
  return x;
}

bool SameBits(const float* a, const float* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0;
}

// Every cut of [0, n) into runs of `step` granules (the last run shorter), each run
// decoded added onto a copy of `base` and stored, against the whole frame's decode.
void ExpectRangesMatch(const Frame& f, size_t n, size_t step_granules) {
  frame_header h;
  ASSERT_EQ(frame_check(f.data(), f.size(), n, gcclFloat32, &h), gcclSuccess) << gcclGetLastError(nullptr);
  size_t g = frame_range_granule(&h);
  ASSERT_GT(g, 0u);
  std::vector<float> base(n);
  for (size_t i = 0; i < n; i++) base[i] = static_cast<float>(i % 13) - 6.5f;
  std::vector<float> added = base, stored(n, 0.0f);
  ASSERT_EQ(frame_decode_accumulate(f.data(), f.size(), added.data(), n, gcclFloat32), gcclSuccess);
  ASSERT_EQ(frame_decode_accumulate(f.data(), f.size(), stored.data(), n, gcclFloat32), gcclSuccess);
  size_t step = g * step_granules;
  for (size_t from = 0; from < n; from += step) {
    size_t len = n - from < step ? n - from : step;
    SCOPED_TRACE("range [" + std::to_string(from) + ", +" + std::to_string(len) + ")");
    std::vector<float> a(base.begin() + static_cast<long>(from), base.begin() + static_cast<long>(from + len));
    std::vector<float> s(len + 1, -7.0f);
    ASSERT_EQ(frame_decode_range(&h, f.data(), from, len, a.data(), 0), gcclSuccess) << gcclGetLastError(nullptr);
    ASSERT_EQ(frame_decode_range(&h, f.data(), from, len, s.data(), 1), gcclSuccess) << gcclGetLastError(nullptr);
    ASSERT_TRUE(SameBits(a.data(), added.data() + from, len));
    ASSERT_TRUE(SameBits(s.data(), stored.data() + from, len));
    ASSERT_EQ(s[len], -7.0f) << "written past the range";
  }
}

TEST(DecodeRange, RangesEqualTheWholeDecode) {
  for (const char* spec : {"fp16", "bf16", "sign", "sign:bucket=7,ef=0", "uniform:bits=4,round=nearest",
                           "uniform:bits=3,bucket=7,round=stochastic", "uniform:bits=8"})
    for (size_t n : {size_t{1}, size_t{7}, size_t{512}, size_t{1031}, size_t{5003}})
      for (bool specials : {false, true})
        for (size_t step : {size_t{1}, size_t{3}, size_t{64}}) {
          SCOPED_TRACE(std::string(spec) + " n=" + std::to_string(n) + (specials ? " with nan/inf" : "") + " step " +
                       std::to_string(step));
          ExpectRangesMatch(codec_cases::EncodeFresh(spec, Input(n, static_cast<uint32_t>(n) + 3, specials, false)), n,
                            step);
        }
}

TEST(DecodeRange, RawFrames) {
  for (const char* spec : {"sign", "uniform:bits=4", "uniform:bits=8"}) {  // fp16 carries NaN itself
    const size_t n = 1031;
    Frame f = codec_cases::EncodeFresh(spec, Input(n, 5, false, true));
    frame_header h;
    ASSERT_EQ(frame_check(f.data(), f.size(), n, gcclFloat32, &h), gcclSuccess);
    ASSERT_TRUE(h.flags & FRAME_FLAG_RAW) << spec << ": the mostly-NaN frame is not raw";
    EXPECT_EQ(frame_range_granule(&h), 1u);
    SCOPED_TRACE(spec);
    ExpectRangesMatch(f, n, 100);
  }
}

TEST(DecodeRange, CodecsWithoutRangesAndMisalignedRanges) {
  const size_t n = 1000;
  for (const char* spec : {"topk:ratio=0.1", "randk:ratio=0.1", "qsgd", "terngrad", "none"}) {
    Frame f = codec_cases::EncodeFresh(spec, Input(n, 9, false, false));
    frame_header h;
    ASSERT_EQ(frame_check(f.data(), f.size(), n, gcclFloat32, &h), gcclSuccess);
    EXPECT_EQ(frame_range_granule(&h), 0u) << spec;
    std::vector<float> d(n);
    EXPECT_EQ(frame_decode_range(&h, f.data(), 0, n, d.data(), 0), gcclInternalError) << spec;
  }
  Frame f = codec_cases::EncodeFresh("sign", Input(n, 9, false, false));  // buckets of 512
  frame_header h;
  ASSERT_EQ(frame_check(f.data(), f.size(), n, gcclFloat32, &h), gcclSuccess);
  std::vector<float> d(n);
  EXPECT_EQ(frame_decode_range(&h, f.data(), 1, 511, d.data(), 0), gcclInternalError);    // not on a bucket
  EXPECT_EQ(frame_decode_range(&h, f.data(), 0, 100, d.data(), 0), gcclInternalError);    // ends inside one
  EXPECT_EQ(frame_decode_range(&h, f.data(), 512, 600, d.data(), 0), gcclInternalError);  // past the end
  EXPECT_EQ(frame_decode_range(&h, f.data(), 512, 488, d.data(), 0), gcclSuccess);        // the last, shorter
}

}  // namespace
