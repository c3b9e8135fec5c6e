// test_frames_sum.cc — frames_sum_f32 (several checked frames summed in order into
// a fresh fp32 tensor, a block at a time) against clearing the output and
// frame_decode_accumulate'ing the frames one after the other: the same bits,
// -0.0 included, for top-k frames with and without exceptions, raw frames, mixes
// of both, frames of other codecs, block-edge counts and unaligned outputs, and
// nothing written outside the output.
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
#include "compress/frames_sum.h"
#include "gccl.h"
}

namespace {

using Frame = std::vector<unsigned char>;

// Counts around the 4096-element blocks, a prime, and a tensor of many blocks.
const size_t kCounts[] = {0, 1, 7, 4095, 4096, 4097, 3 * 4096 + 5, 100003};

enum class Kind { kNormal, kSpecials, kMostlyNan };

// N(0, 1) values with zeros of both signs; kSpecials adds NaN and inf (exceptions)
// on both sides of block edges; kMostlyNan makes every other element NaN, so that
// top-k sends the frame raw.
std::vector<float> Input(size_t n, uint32_t seed, Kind kind) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; i++) x[i] = i % 97 == 5 ? -0.0f : i % 89 == 7 ? 0.0f : normal(rng);
  if (kind == Kind::kSpecials)
    for (size_t i : {size_t{0}, size_t{3}, size_t{4095}, size_t{4096}, n / 2, n - 1})
      if (i < n) x[i] = (i + seed) % 2 ? NAN : -INFINITY;
  if (kind == Kind::kMostlyNan)
    for (size_t i = 0; i < n; i += 2) x[i] = NAN;
  return x;
}

// The frame-by-frame sum: a cleared output, then every frame accumulated in order.
std::vector<float> Reference(const std::vector<Frame>& frames, size_t n) {
  std::vector<float> out(n, 0.0f);
  for (const Frame& f : frames)
    EXPECT_EQ(frame_decode_accumulate(f.data(), f.size(), out.data(), n, gcclFloat32), gcclSuccess)
        << gcclGetLastError(nullptr);
  return out;
}

// frames_sum_f32 into an output `shift` floats past a 64-byte boundary, the
// floats around it poisoned and checked untouched.
std::vector<float> Sum(const std::vector<Frame>& frames, size_t n, size_t shift, gcclResult_t* res) {
  std::vector<const unsigned char*> ptr;
  std::vector<frame_header> head(frames.size());
  for (size_t r = 0; r < frames.size(); r++) {
    ptr.push_back(frames[r].data());
    EXPECT_EQ(frame_check(frames[r].data(), frames[r].size(), n, gcclFloat32, &head[r]), gcclSuccess);
  }
  std::vector<float> buf(n + 32, -7.0f);
  float* dst = buf.data() + 16;
  dst += (16 - (reinterpret_cast<uintptr_t>(dst) % 64) / 4 + shift) % 16;
  *res = frames_sum_f32(ptr.data(), head.data(), static_cast<int>(frames.size()), dst, n);
  for (float* q = buf.data(); q < dst; q++) EXPECT_EQ(*q, -7.0f) << "written before the output";
  for (float* q = dst + n; q < buf.data() + buf.size(); q++) EXPECT_EQ(*q, -7.0f) << "written after the output";
  return std::vector<float>(dst, dst + n);
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

std::vector<Frame> Frames(const std::string& spec, size_t n, int p, Kind kind) {
  std::vector<Frame> frames;
  for (int r = 0; r < p; r++)
    frames.push_back(codec_cases::EncodeFresh(spec, Input(n, 31 * static_cast<uint32_t>(r) + 5, kind)));
  return frames;
}

void ExpectSameAsFrameByFrame(const std::vector<Frame>& frames, size_t n) {
  std::vector<float> want = Reference(frames, n);
  for (size_t shift : {size_t{0}, size_t{1}, size_t{5}}) {
    SCOPED_TRACE("output at +" + std::to_string(shift) + " floats");
    gcclResult_t res;
    std::vector<float> got = Sum(frames, n, shift, &res);
    ASSERT_EQ(res, gcclSuccess) << gcclGetLastError(nullptr);
    ASSERT_TRUE(SameBits(got, want));
  }
}

TEST(FramesSum, TopkFramesEqualFrameByFrame) {
  for (const char* spec : {"topk:ratio=0.01", "topk:ratio=0.3", "topk:ratio=1", "topk:ratio=0.05,values=fp16",
                           "topk:ratio=0.05,values=bf16,zstd=1", "topk:ratio=0.01,approx=1"})
    for (size_t n : kCounts)
      for (int p : {1, 2, 3, 5, 8})
        for (Kind kind : {Kind::kNormal, Kind::kSpecials}) {
          if (!codec_cases::Unavailable(spec).empty()) continue;  // zstd=1 in a build without zstd
          SCOPED_TRACE(std::string(spec) + " n=" + std::to_string(n) + " p=" + std::to_string(p) +
                       (kind == Kind::kSpecials ? " with nan/inf" : ""));
          ExpectSameAsFrameByFrame(Frames(spec, n, p, kind), n);
        }
}

// Top-k frames sent raw (most of the input NaN) mixed with ordinary ones.
TEST(FramesSum, RawAndTopkFramesMixed) {
  for (size_t n : kCounts) {
    SCOPED_TRACE("n=" + std::to_string(n));
    std::vector<Frame> frames = Frames("topk:ratio=0.02", n, 2, Kind::kSpecials);
    frames.insert(frames.begin() + 1, codec_cases::EncodeFresh("topk:ratio=0.02", Input(n, 99, Kind::kMostlyNan)));
    frames.push_back(codec_cases::EncodeFresh("topk:ratio=0.02", Input(n, 98, Kind::kMostlyNan)));
    if (n >= 2) {
      frame_header h;
      ASSERT_EQ(frame_check(frames[1].data(), frames[1].size(), n, gcclFloat32, &h), gcclSuccess);
      ASSERT_TRUE(h.flags & FRAME_FLAG_RAW) << "the mostly-NaN frame is not raw";
    }
    ExpectSameAsFrameByFrame(frames, n);
  }
}

// Frames of a codec without a block cursor take the frame-by-frame path.
TEST(FramesSum, OtherCodecsEqualFrameByFrame) {
  for (const char* spec : {"sign", "uniform:bits=4", "fp16", "randk:ratio=0.1"})
    for (size_t n : {size_t{0}, size_t{7}, size_t{4097}}) {
      SCOPED_TRACE(std::string(spec) + " n=" + std::to_string(n));
      std::vector<Frame> frames = Frames(spec, n, 3, Kind::kSpecials);
      if (n > 0) frames.insert(frames.begin(), codec_cases::EncodeFresh("topk:ratio=0.1", Input(n, 3, Kind::kNormal)));
      ExpectSameAsFrameByFrame(frames, n);
    }
}

}  // namespace
