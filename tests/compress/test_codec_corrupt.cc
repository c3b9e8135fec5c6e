// test_codec_corrupt.cc — gcclDecodeAccumulate on damaged and hostile frames, for
// every codec: bit flips, truncations, wrong receiver, random bytes, and mutated
// frames with a recomputed CRC (so each codec's own validator is what stands).
// Never a crash, never a write outside dst, never a partial write on error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "compress/codec_cases.h"

namespace {

using codec_cases::CodecCase;
using codec_cases::Compressor;
using codec_cases::LastError;
using codec_cases::Reseal;
using codec_cases::Tensor;

constexpr size_t kCount = 37;
constexpr size_t kNaNIndex = 11;  // one exception in every frame

bool ZstdBuilt() {
  static const bool built = [] {
    if (!codec_cases::Unavailable("topk").empty()) return false;
    gcclCompressor_t c = nullptr;
    if (gcclCompressorCreate(&c, "topk:zstd=1", 1, gcclFloat32) != gcclSuccess) return false;
    gcclCompressorDestroy(c);
    return true;
  }();
  return built;
}

// True when codec id c has a complete ops table (the placeholder of a codec not
// written yet would crash the decoder, which is not what these tests look for).
bool CodecBuilt(unsigned c) {
  if (c >= CODEC_COUNT) return true;  // frame_validate rejects it before any ops are used
  const codec_ops* ops = codec_ops_for((codec_id)c);
  return ops != nullptr && ops->validate != nullptr && ops->decode_accumulate != nullptr;
}

// Decodes frame[0, len) into count elements of dt and checks the invariants:
// an allowed result, nothing written outside the count * size bytes of dst
// (guard bytes right before and after), dst unchanged on failure. Returns the
// result (gcclNumResults on a broken invariant). Frame and dst are heap blocks
// of exactly their size, so ASan also sees any access past either (a vector's
// spare capacity would hide it).
gcclResult_t CheckedDecode(const unsigned char* frame, size_t len, size_t count, gcclDataType_t dt,
                           const std::string& what) {
  constexpr size_t kGuard = 64;
  constexpr unsigned char kGuardByte = 0xC7;
  std::unique_ptr<unsigned char[]> exact(new unsigned char[len]);
  if (len) std::memcpy(exact.get(), frame, len);
  size_t body = count * dtype_size(dt);
  std::unique_ptr<unsigned char[]> buf(new unsigned char[2 * kGuard + body]);
  std::memset(buf.get(), kGuardByte, kGuard);
  std::memset(buf.get() + kGuard + body, kGuardByte, kGuard);
  for (size_t i = 0; i < body; i++) buf[kGuard + i] = (unsigned char)(i * 7 % 61);  // finite in every float dtype
  std::vector<unsigned char> before(buf.get() + kGuard, buf.get() + kGuard + body);

  gcclResult_t r = gcclDecodeAccumulate(exact.get(), len, buf.get() + kGuard, count, dt);
  bool allowed = r == gcclSuccess || r == gcclCorruptData || (r == gcclInvalidUsage && !ZstdBuilt());
  if (!allowed) {
    ADD_FAILURE() << what << ": result " << gcclGetErrorString(r) << " (" << LastError() << ")";
    return gcclNumResults;
  }
  for (size_t i = 0; i < kGuard; i++) {
    if (buf[i] != kGuardByte || buf[kGuard + body + i] != kGuardByte) {
      ADD_FAILURE() << what << ": decode wrote outside dst (result " << gcclGetErrorString(r) << ")";
      return gcclNumResults;
    }
  }
  if (r != gcclSuccess && body && std::memcmp(before.data(), buf.get() + kGuard, body) != 0) {
    ADD_FAILURE() << what << ": decode failed (" << LastError() << ") but changed dst";
    return gcclNumResults;
  }
  return r;
}

std::string Hex(const std::vector<unsigned char>& f) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (unsigned char b : f) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

struct Param {
  CodecCase c;
  gcclDataType_t dt;
};

void PrintTo(const Param& p, std::ostream* os) {
  *os << '"' << p.c.spec << "\" " << dtype_name(p.dt);
}

class CodecCorrupt : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    spec_ = GetParam().c.spec;
    dt_ = GetParam().dt;
    std::string why = codec_cases::Unavailable(spec_);
    if (!why.empty()) GTEST_SKIP() << spec_ << ": " << why;
    std::mt19937_64 rng(11);
    // Two frames: one with a NaN (the exceptions list follows the payload) and
    // one without (the payload ends the frame, so an over-read leaves the buffer).
    for (int with_nan = 1; with_nan >= 0; with_nan--) {
      Compressor c;
      ASSERT_EQ(c.Create(spec_, kCount, dt_), gcclSuccess) << LastError();
      Tensor src(dt_, kCount);
      codec_cases::FillRandom(src, rng);
      if (with_nan) src.Set(kNaNIndex, std::nan(""));
      std::vector<unsigned char> frame;
      ASSERT_EQ(codec_cases::EncodeFrame(c, src, &frame), gcclSuccess) << LastError();
      // none, fp16 and bf16 carry a NaN in their payload; the others list it.
      uint64_t want_exc = with_nan && codec_cases::LosslessExceptions(spec_) && spec_ != "none";
      ASSERT_EQ(codec_cases::FrameU64(frame, 24), want_exc) << "exceptions in the frame";
      ASSERT_EQ(CheckedDecode(frame.data(), frame.size(), kCount, dt_, "intact frame"), gcclSuccess) << LastError();
      frames_.push_back(frame);
    }
  }
  std::string spec_;
  gcclDataType_t dt_ = gcclFloat32;
  std::vector<std::vector<unsigned char>> frames_;
};

// CRC32C detects every single-bit error; header bits are also under the CRC.
TEST_P(CodecCorrupt, EveryBitFlipIsCorruptData) {
  for (std::vector<unsigned char> f : frames_) {
    for (size_t bit = 0; bit < f.size() * 8; bit++) {
      f[bit / 8] ^= (unsigned char)(1u << (bit % 8));
      gcclResult_t r = CheckedDecode(f.data(), f.size(), kCount, dt_, "bit " + std::to_string(bit));
      f[bit / 8] ^= (unsigned char)(1u << (bit % 8));
      ASSERT_EQ(r, gcclCorruptData) << "bit " << bit << " of " << f.size() * 8 << " flipped";
    }
  }
}

TEST_P(CodecCorrupt, EveryTruncationIsCorruptData) {
  for (const std::vector<unsigned char>& frame : frames_) {
    for (size_t len = 0; len < frame.size(); len++) {  // CheckedDecode copies exactly len bytes
      ASSERT_EQ(CheckedDecode(frame.data(), len, kCount, dt_, "length " + std::to_string(len)), gcclCorruptData)
          << "truncated to " << len << " of " << frame.size() << " bytes";
    }
    std::vector<unsigned char> longer = frame;
    longer.push_back(0);
    EXPECT_EQ(CheckedDecode(longer.data(), longer.size(), kCount, dt_, "one byte longer"), gcclCorruptData);
  }
}

TEST_P(CodecCorrupt, WrongReceiverIsCorruptData) {
  const std::vector<unsigned char>& frame = frames_[0];
  for (size_t count : {(size_t)0, kCount - 1, kCount + 1, 2 * kCount})
    EXPECT_EQ(CheckedDecode(frame.data(), frame.size(), count, dt_, "count " + std::to_string(count)), gcclCorruptData)
        << "receiver count " << count;
  for (int d = 0; d < gcclNumTypes; d++) {
    if (d == dt_) continue;
    EXPECT_EQ(CheckedDecode(frame.data(), frame.size(), kCount, (gcclDataType_t)d, dtype_name((gcclDataType_t)d)),
              gcclCorruptData)
        << "receiver dtype " << dtype_name((gcclDataType_t)d);
  }
}

// Mutations that keep the CRC valid, so frame_validate's field checks and the
// codec's validate are all that stand between hostile bytes and dst. Each
// mutated frame is a buffer of exactly its size, so ASan sees any over-read.
TEST_P(CodecCorrupt, ResealedMutationsNeverCrash) {
  std::mt19937_64 rng(std::hash<std::string>()(spec_) ^ dt_);
  const size_t entry = frame_exception_bytes(dt_);
  int accepted = 0, iterations = 6000;
  for (int it = 0; it < iterations; it++) {
    const std::vector<unsigned char>& frame = frames_[it % 2];
    const size_t payload = codec_cases::FrameU64(frame, 16);
    const size_t nexc = codec_cases::FrameU64(frame, 24);
    std::vector<unsigned char> f = frame;
    int kind = (int)(rng() % 7);
    auto byte_at = [&](size_t lo, size_t hi) { return lo + rng() % (hi - lo); };
    if (kind == 0 && f.size() > FRAME_HEADER_BYTES) {  // a few body bytes
      for (int j = 0, m = 1 + (int)(rng() % 4); j < m; j++)
        f[byte_at(FRAME_HEADER_BYTES, f.size())] = (unsigned char)rng();
    } else if (kind == 1 && f.size() > FRAME_HEADER_BYTES) {  // one body bit
      size_t b = byte_at(FRAME_HEADER_BYTES, f.size());
      f[b] ^= (unsigned char)(1u << (rng() % 8));
    } else if (kind == 6 && payload > 0) {  // move a payload bit: keeps the count of ones
      size_t nbits = payload * 8;           // that coded index sections check
      for (int j = 0, m = 1 + (int)(rng() % 2); j < m; j++) {
        size_t p = rng() % nbits, q = (p + nbits + (rng() % 33) - 16) % nbits;
        unsigned char* bp = &f[FRAME_HEADER_BYTES + p / 8];
        unsigned char* bq = &f[FRAME_HEADER_BYTES + q / 8];
        int vp = *bp >> (p % 8) & 1, vq = *bq >> (q % 8) & 1;
        if (vp != vq) {
          *bp ^= (unsigned char)(1u << (p % 8));
          *bq ^= (unsigned char)(1u << (q % 8));
        }
      }
    } else if (kind == 2) {  // codec parameters: small and large changes
      switch (rng() % 6) {
        case 0:
          f[32] = (unsigned char)(f[32] + (rng() % 2 ? 1 : -1));
          break;  // bits
        case 1:
          f[33] = (unsigned char)(rng() % 4);
          break;   // values
        case 2: {  // bucket
          uint32_t b = (uint32_t)codec_cases::FrameU64(f, 36);
          const uint32_t choices[] = {1, b + 1, b ? b - 1 : 0, 2 * b, b / 2, 1u << 24, (uint32_t)rng()};
          codec_cases::FramePutU32(f, 36, choices[rng() % 7]);
          break;
        }
        case 3: {  // k
          uint64_t k = codec_cases::FrameU64(f, 40);
          const uint64_t choices[] = {0, k + 1, k ? k - 1 : 0, kCount, kCount + 1, rng()};
          codec_cases::FramePutU64(f, 40, choices[rng() % 6]);
          break;
        }
        case 4:
          f[7] ^= (unsigned char)(1u << (rng() % 3));
          break;  // flags: zstd, raw, unknown
        default:
          codec_cases::FramePutU64(f, 48, rng());
          break;  // rng_key
      }
      if (rng() % 2 && f.size() > FRAME_HEADER_BYTES) f[byte_at(FRAME_HEADER_BYTES, f.size())] = (unsigned char)rng();
    } else if (kind == 3) {  // a payload of another length, the header saying so
      size_t len = rng() % (2 * payload + 16);
      if (rng() % 2) len = payload + 9 >= 18 ? payload + (rng() % 19) - 9 : rng() % (payload + 10);  // near miss
      std::vector<unsigned char> g(f.begin(), f.begin() + FRAME_HEADER_BYTES);
      for (size_t j = 0; j < len; j++)
        g.push_back(j < payload && rng() % 8 ? f[FRAME_HEADER_BYTES + j] : (unsigned char)rng());
      g.insert(g.end(), f.begin() + FRAME_HEADER_BYTES + payload, f.end());
      codec_cases::FramePutU64(g, 16, len);
      f = g;
    } else if (kind == 4 && nexc > 0) {  // an exception index out of range or out of order
      size_t j = rng() % nexc;
      const uint64_t choices[] = {0, kCount - 1, kCount, UINT64_MAX, rng() % kCount, kNaNIndex};
      codec_cases::FramePutU64(f, FRAME_HEADER_BYTES + payload + j * entry, choices[rng() % 6]);
    } else {  // the codec id: every codec's validator sees every other codec's payload
      unsigned c = (unsigned)(rng() % CODEC_COUNT);
      if (!CodecBuilt(c)) continue;
      f[5] = (unsigned char)c;
    }
    if (!CodecBuilt(f[5])) continue;
    Reseal(f);
    gcclResult_t r = CheckedDecode(f.data(), f.size(), kCount, dt_, "mutation " + std::to_string(it));
    ASSERT_NE(r, gcclNumResults) << "frame " << Hex(f);
    accepted += r == gcclSuccess;
  }
  RecordProperty("accepted", accepted);
}

std::vector<Param> CorruptParams() {
  std::vector<Param> p;
  for (const CodecCase& c : codec_cases::AllCases())
    for (gcclDataType_t dt : {gcclFloat32, gcclBfloat16}) p.push_back({c, dt});
  return p;
}

INSTANTIATE_TEST_SUITE_P(AllCodecs, CodecCorrupt, ::testing::ValuesIn(CorruptParams()), [](const auto& info) {
  return codec_cases::CaseName(info.param.c.spec) + "_" + dtype_name(info.param.dt);
});

// Random byte strings, some wearing a valid-looking header (magic, version, a
// known codec, the receiver's count and dtype, a sealed CRC) so that they get
// past the first checks.
TEST(CodecCorruptRandom, RandomBytesNeverCrash) {
  std::mt19937_64 rng(4242);
  int accepted = 0;
  for (int it = 0; it < 10000; it++) {
    size_t len = rng() % 3 == 0 ? rng() % FRAME_HEADER_BYTES : rng() % 600;
    std::vector<unsigned char> f(len);
    for (auto& b : f) b = (unsigned char)rng();
    gcclDataType_t dt = rng() % 2 ? gcclFloat32 : (gcclDataType_t)(rng() % gcclNumTypes);
    int shape = (int)(rng() % 4);
    if (shape >= 1 && len >= FRAME_HEADER_BYTES) {
      f[0] = 'G', f[1] = 'C', f[2] = 'C', f[3] = 'F', f[4] = FRAME_VERSION;
      f[34] = f[35] = 0;
      for (int j = 56; j < 60; j++) f[j] = 0;
    }
    if (shape >= 2 && len >= FRAME_HEADER_BYTES) {
      unsigned c = (unsigned)(rng() % CODEC_COUNT);
      if (!CodecBuilt(c)) continue;
      f[5] = (unsigned char)c;
      f[6] = (unsigned char)dt;
      f[7] &= (unsigned char)FRAME_FLAGS_KNOWN;
      codec_cases::FramePutU64(f, 8, kCount);
      if (rng() % 2) {  // sizes that add up, so the codec validator runs
        uint64_t nexc = rng() % 3, entry = frame_exception_bytes(dt);
        uint64_t body = len - FRAME_HEADER_BYTES;
        if (nexc * entry > body) nexc = 0;
        codec_cases::FramePutU64(f, 16, body - nexc * entry);
        codec_cases::FramePutU64(f, 24, nexc);
      }
      if (rng() % 2) {  // plausible parameters
        f[32] = (unsigned char)(rng() % 9);
        f[33] = (unsigned char)(rng() % 3);
        codec_cases::FramePutU32(f, 36, (uint32_t)(rng() % 600));
        codec_cases::FramePutU64(f, 40, rng() % (kCount + 1));
        if (f[5] != CODEC_RANDK) codec_cases::FramePutU64(f, 48, 0);
      }
    }
    if (shape == 3) Reseal(f);
    const unsigned char* p = len ? f.data() : reinterpret_cast<const unsigned char*>(&len);
    gcclResult_t r = CheckedDecode(p, len, kCount, dt, "random string " + std::to_string(it));
    ASSERT_NE(r, gcclNumResults) << "frame " << Hex(f);
    accepted += r == gcclSuccess;
  }
  RecordProperty("accepted", accepted);
}

}  // namespace
