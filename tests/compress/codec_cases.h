// codec_cases.h — the codec specs every codec API test runs over, and the
// tensor/frame helpers those tests share (test_codec_api.cc,
// test_codec_corrupt.cc, test_error_feedback.cc).
#ifndef GCCL_TESTS_COMPRESS_CODEC_CASES_H
#define GCCL_TESTS_COMPRESS_CODEC_CASES_H

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "common/dtype.h"
#include "compress/codec.h"
#include "compress/frame.h"
#include "compress/spec.h"
#include "gccl.h"
}

namespace codec_cases {

// One spec under test. max_rel_l2 bounds ||decoded - x||_2 / ||x||_2 on random
// normal input; < 0 where the codec has no small deterministic bound (unbiased
// stochastic codecs, 1-bit quantizers, random-k), 0 for lossless.
struct CodecCase {
  const char* spec;
  double max_rel_l2;
};

// Every codec, and the parameter combinations that take different code paths.
// A few use small buckets so that short tensors still have several buckets and
// a partial last one.
// gtest prints a parameter with this (the spec, not the struct's bytes).
inline void PrintTo(const CodecCase& c, std::ostream* os) {
  *os << '"' << c.spec << '"';
}

inline const std::vector<CodecCase>& AllCases() {
  static const std::vector<CodecCase> cases = {
      {"none", 0.0},
      {"fp16", 1e-3},  // 2^-11 relative rounding error per element
      {"bf16", 8e-3},  // 2^-8
      {"uniform:bits=1,round=nearest", -1},
      {"uniform:bits=1,round=stochastic", -1},
      {"uniform:bits=4,round=nearest", 0.3},  // half a step of range/15 per element
      {"uniform:bits=4,round=stochastic", 0.6},
      {"uniform:bits=8,round=nearest", 0.02},
      {"uniform:bits=8,round=stochastic", 0.05},
      {"uniform:bits=3,bucket=7,round=stochastic", -1},
      {"qsgd", -1},
      {"qsgd:bits=2,bucket=128", -1},
      {"qsgd:bits=8,bucket=64", -1},
      {"sign", 1.0 + 1e-6},  // ||x - s*sign(x)||^2 = ||x||^2 - n*s^2 with s = mean|x|
      {"sign:bucket=7,ef=0", 1.0 + 1e-6},
      {"terngrad", -1},
      {"terngrad:bucket=64", -1},
      // top-k keeps some elements (rounded to the value type) and zeroes the rest:
      // never farther from x than 0 is.
      {"topk", 1.0 + 1e-6},
      {"topk:ratio=1", 1.0 + 1e-6},
      {"topk:ratio=0.1,approx=0,values=fp32,zstd=0", 1.0 + 1e-6},
      {"topk:ratio=0.1,approx=0,values=fp16,zstd=0", 1.0 + 1e-6},
      {"topk:ratio=0.1,approx=0,values=bf16,zstd=0", 1.0 + 1e-6},
      {"topk:ratio=0.1,approx=0,values=fp32,zstd=1", 1.0 + 1e-6},
      {"topk:ratio=0.1,approx=0,values=fp16,zstd=1", 1.0 + 1e-6},
      {"topk:ratio=0.1,approx=0,values=bf16,zstd=1", 1.0 + 1e-6},
      {"topk:ratio=0.1,approx=1,values=fp32,zstd=0", 1.0 + 1e-6},
      {"topk:ratio=0.1,approx=1,values=fp16,zstd=0", 1.0 + 1e-6},
      {"topk:ratio=0.1,approx=1,values=bf16,zstd=0", 1.0 + 1e-6},
      {"topk:ratio=0.1,approx=1,values=fp32,zstd=1", 1.0 + 1e-6},
      {"topk:ratio=0.1,approx=1,values=fp16,zstd=1", 1.0 + 1e-6},
      {"topk:ratio=0.1,approx=1,values=bf16,zstd=1", 1.0 + 1e-6},
      {"randk", -1},
      {"randk:ratio=0.5,values=fp16", -1},
      {"randk:ratio=0.05,values=bf16", -1},
  };
  return cases;
}

inline std::vector<CodecCase> LossyCases() {
  std::vector<CodecCase> out;
  for (const CodecCase& c : AllCases())
    if (std::string(c.spec) != "none") out.push_back(c);
  return out;
}

inline codec_spec Parse(const std::string& spec) {
  codec_spec s{};
  EXPECT_EQ(spec_parse(spec.c_str(), &s), gcclSuccess) << spec;
  return s;
}

// The spec with error feedback switched on (or off); "none" has no ef key.
inline std::string WithEf(const std::string& spec, int ef) {
  if (spec == "none") return spec;
  std::string key = ef ? "ef=1" : "ef=0";
  size_t at = spec.find("ef=");
  if (at != std::string::npos) return spec.substr(0, at) + key + spec.substr(at + 4);
  return spec + (spec.find(':') == std::string::npos ? ":" : ",") + key;
}

// fp16 and bf16 carry non-finite values in their own payload (rounded through
// 16 bits); every other codec sends them verbatim in the exceptions list.
inline bool LosslessExceptions(const std::string& spec) {
  codec_id c = Parse(spec).codec;
  return c != CODEC_FP16 && c != CODEC_BF16;
}

// Codecs that draw random numbers for every element or index choice, so that
// successive calls on the same input give different frames.
inline bool Stochastic(const std::string& spec) {
  codec_spec s = Parse(spec);
  return (s.codec == CODEC_UNIFORM && s.round == SPEC_ROUND_STOCHASTIC) || s.codec == CODEC_QSGD ||
         s.codec == CODEC_TERNGRAD || s.codec == CODEC_RANDK;
}

// Why spec cannot run in this build ("" when it can). A codec whose file is still
// the {0} placeholder would crash on the first call; it is skipped, by name.
inline std::string Unavailable(const std::string& spec) {
  codec_spec s{};
  if (spec_parse(spec.c_str(), &s) != gcclSuccess) return "spec does not parse";
  const codec_ops* ops = codec_ops_for(s.codec);
  if (ops == nullptr || ops->validate == nullptr || ops->decode_accumulate == nullptr ||
      (s.codec != CODEC_NONE && (ops->encode == nullptr || ops->payload_bound == nullptr)))
    return std::string("codec ") + spec_codec_name(s.codec) + " is not built yet (placeholder ops table)";
  if (s.zstd) {
    gcclCompressor_t c = nullptr;
    if (gcclCompressorCreate(&c, spec.c_str(), 1, gcclFloat32) != gcclSuccess) return "gccl built without zstd";
    gcclCompressorDestroy(c);
  }
  return "";
}

#define SKIP_IF_UNAVAILABLE(spec)                              \
  do {                                                         \
    std::string why_ = codec_cases::Unavailable(spec);         \
    if (!why_.empty()) GTEST_SKIP() << (spec) << ": " << why_; \
  } while (0)

// A gtest parameter name for a spec: non-alphanumerics become '_'.
inline std::string CaseName(const std::string& spec) {
  std::string out;
  for (char ch : spec) out += std::isalnum((unsigned char)ch) ? ch : '_';
  return out;
}

inline const std::vector<gcclDataType_t>& FloatTypes() {
  static const std::vector<gcclDataType_t> t = {gcclFloat32, gcclFloat64, gcclFloat16, gcclBfloat16};
  return t;
}

// count elements of dt, with numeric and bit access, in a heap block of exactly
// count * size bytes (operator new aligns it for any dtype), so ASan flags any
// access past the end.
class Tensor {
 public:
  Tensor(gcclDataType_t dt, size_t n) : dt_(dt), n_(n), es_(dtype_size(dt)), store_(n * es_, 0) {}
  gcclDataType_t dt() const { return dt_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * es_; }
  void* data() { return store_.data(); }
  const void* data() const { return store_.data(); }
  unsigned char* raw() { return store_.data(); }
  const unsigned char* raw() const { return store_.data(); }

  // The element as a double (halves widened exactly).
  double Get(size_t i) const {
    const unsigned char* p = raw() + i * es_;
    switch (dt_) {
      case gcclFloat32:
        return Load<float>(p);
      case gcclFloat64:
        return Load<double>(p);
      case gcclFloat16:
        return half_to_float(Load<uint16_t>(p));
      case gcclBfloat16:
        return bf16_to_float(Load<uint16_t>(p));
      case gcclInt8:
        return Load<int8_t>(p);
      case gcclUint8:
        return Load<uint8_t>(p);
      case gcclInt32:
        return Load<int32_t>(p);
      case gcclUint32:
        return Load<uint32_t>(p);
      case gcclInt64:
        return (double)Load<int64_t>(p);
      default:
        return (double)Load<uint64_t>(p);
    }
  }
  // Stores v rounded to the element type (halves to nearest even through fp32).
  void Set(size_t i, double v) {
    unsigned char* p = raw() + i * es_;
    switch (dt_) {
      case gcclFloat32:
        Store<float>(p, (float)v);
        break;
      case gcclFloat64:
        Store<double>(p, v);
        break;
      case gcclFloat16:
        Store<uint16_t>(p, float_to_half((float)v));
        break;
      case gcclBfloat16:
        Store<uint16_t>(p, float_to_bf16((float)v));
        break;
      default:
        SetBits(i, (uint64_t)(int64_t)v);
        break;
    }
  }
  uint64_t Bits(size_t i) const {
    uint64_t u = 0;
    std::memcpy(&u, raw() + i * es_, es_);
    return u;
  }
  void SetBits(size_t i, uint64_t u) { std::memcpy(raw() + i * es_, &u, es_); }
  bool BitsEqual(const Tensor& o) const {
    return n_ == o.n_ && es_ == o.es_ && (n_ == 0 || std::memcmp(raw(), o.raw(), bytes()) == 0);
  }

 private:
  template <class T>
  static T Load(const unsigned char* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  }
  template <class T>
  static void Store(unsigned char* p, T v) {
    std::memcpy(p, &v, sizeof v);
  }
  gcclDataType_t dt_;
  size_t n_, es_;
  std::vector<unsigned char> store_;
};

// Random-normal values (float types) or random bits (integers).
inline void FillRandom(Tensor& t, std::mt19937_64& rng, double scale = 1.0) {
  std::normal_distribution<double> normal(0.0, scale);
  bool is_float = dtype_is_float(t.dt());
  for (size_t i = 0; i < t.size(); i++) {
    if (is_float)
      t.Set(i, normal(rng));
    else
      t.SetBits(i, rng());
  }
}

// Owns a compressor.
class Compressor {
 public:
  Compressor() = default;
  Compressor(const Compressor&) = delete;
  Compressor& operator=(const Compressor&) = delete;
  ~Compressor() {
    if (c_) gcclCompressorDestroy(c_);
  }
  gcclResult_t Create(const std::string& spec, size_t n, gcclDataType_t dt) {
    return gcclCompressorCreate(&c_, spec.c_str(), n, dt);
  }
  gcclCompressor_t get() const { return c_; }
  size_t Bound() const {
    size_t b = 0;
    EXPECT_EQ(gcclEncodeBound(c_, &b), gcclSuccess);
    return b;
  }

 private:
  gcclCompressor_t c_ = nullptr;
};

// Bytes past the cap that an encoder must never touch.
constexpr size_t kFrameGuard = 64;
constexpr unsigned char kGuardByte = 0xA5;

// Encodes src with cap = gcclEncodeBound into *frame (resized to the frame).
// Fails the test if the encoder wrote past the cap or past the frame it reported.
inline gcclResult_t EncodeFrame(const Compressor& c, const Tensor& src, std::vector<unsigned char>* frame) {
  size_t bound = c.Bound();
  std::vector<unsigned char> buf(bound + kFrameGuard, kGuardByte);
  size_t fb = 0;
  gcclResult_t r = gcclEncode(c.get(), src.size() ? src.data() : nullptr, buf.data(), bound, &fb);
  for (size_t i = bound; i < buf.size(); i++) {
    if (buf[i] != kGuardByte) {
      ADD_FAILURE() << "encoder wrote byte " << i << " of a buffer with cap " << bound;
      break;
    }
  }
  if (r == gcclSuccess) {
    EXPECT_LE(fb, bound) << "frame larger than gcclEncodeBound";
    EXPECT_GE(fb, (size_t)FRAME_HEADER_BYTES);
    // An exactly sized copy: decoding it, ASan sees any read past the frame.
    *frame = std::vector<unsigned char>(buf.begin(), buf.begin() + (std::min)(fb, bound));
  } else {
    frame->clear();
  }
  return r;
}

inline uint64_t FrameU64(const std::vector<unsigned char>& f, size_t off) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | f[off + i];
  return v;
}
inline void FramePutU32(std::vector<unsigned char>& f, size_t off, uint32_t v) {
  for (int i = 0; i < 4; i++) f[off + i] = (unsigned char)(v >> (8 * i));
}
inline void FramePutU64(std::vector<unsigned char>& f, size_t off, uint64_t v) {
  for (int i = 0; i < 8; i++) f[off + i] = (unsigned char)(v >> (8 * i));
}
// Recomputes the CRC field, so a mutated frame reaches the codec's validator.
inline void Reseal(std::vector<unsigned char>& f) {
  if (f.size() >= FRAME_HEADER_BYTES) FramePutU32(f, FRAME_CRC_OFFSET, frame_crc(f.data(), f.size()));
}

inline std::string LastError() {
  return gcclGetLastError(nullptr);
}

// x's fp32 frame from a fresh compressor of spec (residual 0), exactly sized.
inline std::vector<unsigned char> EncodeFresh(const std::string& spec, const std::vector<float>& x) {
  gcclCompressor_t c = nullptr;
  EXPECT_EQ(gcclCompressorCreate(&c, spec.c_str(), x.size(), gcclFloat32), gcclSuccess) << LastError();
  size_t bound = 0, bytes = 0;
  EXPECT_EQ(gcclEncodeBound(c, &bound), gcclSuccess);
  std::vector<unsigned char> f(bound);
  EXPECT_EQ(gcclEncode(c, x.data(), f.data(), f.size(), &bytes), gcclSuccess) << LastError();
  f.resize(bytes);
  gcclCompressorDestroy(c);
  return f;
}

}  // namespace codec_cases

#endif
