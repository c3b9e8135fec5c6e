// test_frame.cc — CRC32C (compress/crc32c.c) and frame header write/validate (compress/frame.c).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "common/result.h"
#include "compress/crc32c.h"
#include "compress/frame.h"
}

namespace {

TEST(Crc32c, KnownVectors) {
  const char* s = "123456789";
  EXPECT_EQ(crc32c(0, s, 9), 0xE3069283u);
  EXPECT_EQ(crc32c_sw(0, s, 9), 0xE3069283u);
  EXPECT_EQ(crc32c(0, nullptr, 0), 0u);
  // RFC 3720 (iSCSI) B.4 test vectors.
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), inc(32), dec(32);
  for (int i = 0; i < 32; i++) {
    inc[i] = (uint8_t)i;
    dec[i] = (uint8_t)(31 - i);
  }
  EXPECT_EQ(crc32c(0, zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(crc32c(0, ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(crc32c(0, inc.data(), 32), 0x46DD794Eu);
  EXPECT_EQ(crc32c(0, dec.data(), 32), 0x113FDB5Cu);
  EXPECT_EQ(crc32c_sw(0, dec.data(), 32), 0x113FDB5Cu);
}

TEST(Crc32c, ChainingEqualsOneCall) {
  const char* s = "123456789";
  for (size_t cut = 0; cut <= 9; cut++) {
    EXPECT_EQ(crc32c(crc32c(0, s, cut), s + cut, 9 - cut), 0xE3069283u);
    EXPECT_EQ(crc32c_sw(crc32c_sw(0, s, cut), s + cut, 9 - cut), 0xE3069283u);
  }
}

TEST(Crc32c, HardwareMatchesSoftware) {
  if (!crc32c_hw_available()) GTEST_SKIP() << "no SSE4.2 on this CPU";
  std::mt19937_64 rng(42);
  std::vector<uint8_t> buf(3 * 3 * 1024 + 4096 + 16);  // lengths from 256 on take the PCLMULQDQ folds
  for (auto& b : buf) b = (uint8_t)rng();
  for (size_t align = 0; align < 8; align++) {
    for (size_t len = 0; len <= 300; len++) {
      uint32_t seed = (uint32_t)rng();
      ASSERT_EQ(crc32c_hw(seed, buf.data() + align, len), crc32c_sw(seed, buf.data() + align, len))
          << "align " << align << " len " << len;
    }
    for (size_t len :
         {319u, 320u, 335u, 1023u, 1024u, 3071u, 3072u, 3073u, 4095u, 4096u, 6144u, 9215u, 9216u, 13311u}) {
      uint32_t seed = (uint32_t)rng();
      ASSERT_EQ(crc32c_hw(seed, buf.data() + align, len), crc32c_sw(seed, buf.data() + align, len)) << len;
    }
  }
}

// A small topk frame: header, 24 payload bytes, 2 exceptions of float32.
std::vector<uint8_t> MakeFrame(frame_header* h_out = nullptr) {
  frame_header h{};
  h.codec = CODEC_TOPK;
  h.dtype = gcclFloat32;
  h.flags = 0;
  h.count = 100;
  h.payload_bytes = 24;
  h.exceptions = 2;
  h.values = SPEC_VALUES_FP16;
  h.k = 5;
  size_t total = 0;
  EXPECT_EQ(frame_total_bytes(&h, &total), gcclSuccess);
  EXPECT_EQ(total, 64u + 24u + 2u * 12u);
  std::vector<uint8_t> f(total);
  for (size_t i = FRAME_HEADER_BYTES; i < total; i++) f[i] = (uint8_t)(i * 7 + 3);
  EXPECT_EQ(frame_header_write(f.data(), f.size(), &h), gcclSuccess) << err_last();
  if (h_out) *h_out = h;
  return f;
}

TEST(Frame, WriteValidateRoundTrip) {
  frame_header in;
  std::vector<uint8_t> f = MakeFrame(&in);
  frame_header out{};
  ASSERT_EQ(frame_validate(f.data(), f.size(), 100, gcclFloat32, &out), gcclSuccess) << err_last();
  EXPECT_EQ(out.version, FRAME_VERSION);
  EXPECT_EQ(out.codec, CODEC_TOPK);
  EXPECT_EQ(out.dtype, gcclFloat32);
  EXPECT_EQ(out.count, 100u);
  EXPECT_EQ(out.payload_bytes, 24u);
  EXPECT_EQ(out.exceptions, 2u);
  EXPECT_EQ(out.values, SPEC_VALUES_FP16);
  EXPECT_EQ(out.k, 5u);
  EXPECT_EQ(out.bits, 0u);
  EXPECT_EQ(out.bucket, 0u);
  // Byte layout is fixed little-endian.
  EXPECT_EQ(std::memcmp(f.data(), "GCCF", 4), 0);
  EXPECT_EQ(f[5], CODEC_TOPK);
  EXPECT_EQ(f[8], 100);
  EXPECT_EQ(f[40], 5);
  uint32_t crc = f[60] | f[61] << 8 | f[62] << 16 | (uint32_t)f[63] << 24;
  EXPECT_EQ(crc, out.crc);
}

TEST(Frame, EveryCodecRoundTrips) {
  for (int c = 0; c < CODEC_COUNT; c++) {
    frame_header h{};
    h.codec = (codec_id)c;
    h.dtype = gcclBfloat16;
    h.count = 1000;
    h.payload_bytes = 10;
    unsigned keys = spec_codec_keys(h.codec);
    if (keys & SPEC_KEY_BITS) h.bits = 3;
    if (keys & SPEC_KEY_BUCKET) h.bucket = 512;
    if (keys & SPEC_KEY_RATIO) h.k = 10;
    if (c == CODEC_RANDK) h.rng_key = 0xDEADBEEFCAFEull;
    if (c == CODEC_TOPK) h.flags = FRAME_FLAG_ZSTD;
    std::vector<uint8_t> f(64 + 10);
    ASSERT_EQ(frame_header_write(f.data(), f.size(), &h), gcclSuccess) << c << err_last();
    frame_header out{};
    ASSERT_EQ(frame_validate(f.data(), f.size(), 1000, gcclBfloat16, &out), gcclSuccess) << c << err_last();
    EXPECT_EQ(out.rng_key, h.rng_key);
    EXPECT_EQ(out.bits, h.bits);
    EXPECT_EQ(out.bucket, h.bucket);
    EXPECT_EQ(out.flags, h.flags);
  }
  // none carries any dtype; an empty tensor is a legal frame.
  frame_header h{};
  h.codec = CODEC_NONE;
  h.dtype = gcclInt64;
  std::vector<uint8_t> f(64);
  ASSERT_EQ(frame_header_write(f.data(), f.size(), &h), gcclSuccess);
  EXPECT_EQ(frame_validate(f.data(), f.size(), 0, gcclInt64, nullptr), gcclSuccess) << err_last();
}

TEST(Frame, WriteRejectsIllegalHeaders) {
  std::vector<uint8_t> f(1024);
  auto expect_bad = [&](frame_header h, const char* needle) {
    err_clear();
    EXPECT_EQ(frame_header_write(f.data(), f.size(), &h), gcclInvalidArgument) << needle;
    EXPECT_NE(std::string(err_last()).find(needle), std::string::npos) << err_last();
  };
  frame_header base{};
  base.codec = CODEC_UNIFORM;
  base.dtype = gcclFloat32;
  base.count = 10;
  base.bits = 4;
  base.bucket = 512;
  frame_header h = base;
  h.bits = 9;
  expect_bad(h, "bits=9");
  h = base;
  h.bucket = 0;
  expect_bad(h, "bucket=0");
  h = base;
  h.dtype = gcclInt32;
  expect_bad(h, "non-float");
  h = base;
  h.k = 1;
  expect_bad(h, "k=1");
  h = base;
  h.payload_bytes = 2000;
  expect_bad(h, "does not fit");
  h = base;
  h.payload_bytes = UINT64_MAX - 10;
  expect_bad(h, "does not fit");
  h = base;
  h.exceptions = 11;
  expect_bad(h, "exceptions");
  h = base;
  h.flags = FRAME_FLAG_ZSTD;
  expect_bad(h, "zstd");
}

TEST(Frame, EverySingleBitFlipFails) {
  std::vector<uint8_t> f = MakeFrame();
  for (size_t byte = 0; byte < f.size(); byte++) {
    for (int bit = 0; bit < 8; bit++) {
      std::vector<uint8_t> g = f;
      g[byte] ^= (uint8_t)(1u << bit);
      err_clear();
      ASSERT_EQ(frame_validate(g.data(), g.size(), 100, gcclFloat32, nullptr), gcclCorruptData)
          << "byte " << byte << " bit " << bit;
      ASSERT_NE(std::string(err_last()).find("corrupt frame"), std::string::npos);
    }
  }
}

TEST(Frame, EveryTruncationFails) {
  std::vector<uint8_t> f = MakeFrame();
  for (size_t len = 0; len < f.size(); len++) {
    // A fresh exact-size copy so ASan would catch a read past the given length.
    std::vector<uint8_t> g(f.begin(), f.begin() + len);
    EXPECT_EQ(frame_validate(len ? g.data() : f.data(), len, 100, gcclFloat32, nullptr), gcclCorruptData) << len;
  }
  // Trailing bytes are as wrong as missing ones.
  f.push_back(0);
  EXPECT_EQ(frame_validate(f.data(), f.size(), 100, gcclFloat32, nullptr), gcclCorruptData);
  EXPECT_NE(std::string(err_last()).find("do not add up"), std::string::npos) << err_last();
  EXPECT_EQ(frame_validate(nullptr, 0, 100, gcclFloat32, nullptr), gcclCorruptData);
}

TEST(Frame, RandomBytesFail) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 20000; trial++) {
    size_t len = rng() % 200;
    std::vector<uint8_t> g(len);
    for (auto& b : g) b = (uint8_t)rng();
    if (len >= 4 && trial % 2) std::memcpy(g.data(), "GCCF", 4);  // get past the magic half the time
    if (len >= 5 && trial % 4 == 1) g[4] = FRAME_VERSION;
    ASSERT_EQ(frame_validate(g.data(), len, 100, gcclFloat32, nullptr), gcclCorruptData) << trial;
  }
}

TEST(Frame, WrongExpectationsFail) {
  std::vector<uint8_t> f = MakeFrame();
  EXPECT_EQ(frame_validate(f.data(), f.size(), 99, gcclFloat32, nullptr), gcclCorruptData);
  EXPECT_NE(std::string(err_last()).find("receiver expects 99"), std::string::npos) << err_last();
  EXPECT_EQ(frame_validate(f.data(), f.size(), 101, gcclFloat32, nullptr), gcclCorruptData);
  EXPECT_EQ(frame_validate(f.data(), f.size(), 100, gcclFloat16, nullptr), gcclCorruptData);
  EXPECT_NE(std::string(err_last()).find("receiver expects float16"), std::string::npos) << err_last();
  EXPECT_EQ(frame_validate(f.data(), f.size(), 100, gcclBfloat16, nullptr), gcclCorruptData);
}

TEST(Frame, IllegalFieldsWithValidCrcFail) {
  // Corrupt one field, then fix the CRC, so each field check is hit on its own.
  auto patch_crc = [](std::vector<uint8_t>& f) {
    std::memset(&f[60], 0, 4);
    uint32_t crc = frame_crc(f.data(), f.size());
    for (int i = 0; i < 4; i++) f[60 + i] = (uint8_t)(crc >> (8 * i));
  };
  struct Case {
    size_t offset;
    uint8_t value;
    const char* needle;
  } cases[] = {
      {4, 2, "version"},
      {5, CODEC_COUNT, "unknown codec"},
      {6, gcclNumTypes, "invalid dtype"},
      {7, 0x80, "flags"},
      {32, 1, "bits=1"},
      {33, 3, "values=3"},
      {34, 1, "reserved"},
      {36, 1, "bucket=1"},
      {41, 1, "k="},
      {48, 1, "rng_key"},
      {56, 1, "reserved"},
      {24, 200, "exceptions"},
      {0, 'X', "magic"},
      {6, gcclInt32, "non-float"},
  };
  for (const auto& c : cases) {
    std::vector<uint8_t> f = MakeFrame();
    f[c.offset] = c.value;
    patch_crc(f);
    err_clear();
    EXPECT_EQ(frame_validate(f.data(), f.size(), 100, gcclFloat32, nullptr), gcclCorruptData) << c.needle;
    EXPECT_NE(std::string(err_last()).find(c.needle), std::string::npos) << c.needle << " vs " << err_last();
  }
  // The CRC check itself.
  std::vector<uint8_t> f = MakeFrame();
  f[70] ^= 1;
  EXPECT_EQ(frame_validate(f.data(), f.size(), 100, gcclFloat32, nullptr), gcclCorruptData);
  EXPECT_NE(std::string(err_last()).find("CRC32C"), std::string::npos) << err_last();
}

}  // namespace
