// test_terngrad.cc — the terngrad codec (compress/codec_terngrad.c) against a scalar model of its frame.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

extern "C" {
#include "common/dtype.h"
#include "common/result.h"
#include "compress/codec.h"
#include "compress/codec_util.h"
#include "compress/crc32c.h"
#include "compress/rng.h"
#include "compress/spec.h"

gcclResult_t terngrad_encode_path(struct encode_ctx* ctx, const float* x, float* resid, size_t n,
                                  unsigned char* payload, size_t* payload_bytes, struct frame_header* h, int simd);
gcclResult_t terngrad_decode_path(const struct frame_header* h, const unsigned char* payload, const uint64_t* exc,
                                  size_t nexc, void* dst, int simd);
}

namespace {

const codec_ops& ops = codec_terngrad_ops;
const uint64_t kKey = UINT64_C(0xC0FFEE1234567890);

bool HaveAvx2() {
  return __builtin_cpu_supports("avx2");
}

uint32_t Bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

codec_spec Spec(uint32_t bucket, bool ef = false) {
  codec_spec s;
  std::string text = "terngrad:bucket=" + std::to_string(bucket) + ",ef=" + (ef ? "1" : "0");
  EXPECT_EQ(spec_parse(text.c_str(), &s), gcclSuccess) << text;
  return s;
}

// What the codec is expected to produce, from the formulas at the top of codec_terngrad.c.
struct Model {
  std::vector<uint8_t> payload;
  std::vector<uint64_t> exc;
  std::vector<float> dec;    // decoded value, 0 at exceptions
  std::vector<float> resid;  // x - dec, 0 at exceptions
};

Model Reference(const std::vector<float>& x, size_t bucket, uint64_t key) {
  Model r;
  size_t n = x.size();
  r.dec.assign(n, 0.0f);
  r.resid.assign(n, 0.0f);
  for (size_t base = 0; base < n; base += bucket) {
    size_t m = std::min(bucket, n - base);
    std::vector<float> v(m);
    float scale = 0.0f;
    for (size_t j = 0; j < m; j++) {
      bool f = std::isfinite(x[base + j]);
      v[j] = f ? x[base + j] : 0.0f;
      if (!f) r.exc.push_back(base + j);
      scale = std::max(scale, std::fabs(v[j]));
    }
    std::vector<uint8_t> codes((m + 3) / 4, 0);
    for (size_t j = 0; j < m; j++) {
      unsigned c = 0;
      if (rng_uniform(key, base + j) * scale < std::fabs(v[j])) c = std::signbit(v[j]) ? 2 : 1;
      codes[j / 4] |= (uint8_t)(c << (2 * (j % 4)));
      float d = c == 1 ? scale : c == 2 ? -scale : 0.0f;
      if (std::isfinite(x[base + j])) {
        r.dec[base + j] = d;
        r.resid[base + j] = v[j] - d;
      }
    }
    uint8_t s[4];
    std::memcpy(s, &scale, 4);
    r.payload.insert(r.payload.end(), s, s + 4);
    r.payload.insert(r.payload.end(), codes.begin(), codes.end());
  }
  return r;
}

struct Encoded {
  gcclResult_t rc = gcclInternalError;
  std::vector<uint8_t> payload;
  frame_header h{};
  std::vector<uint64_t> exc;
  std::vector<float> resid;
};

Encoded Encode(const codec_spec& s, const std::vector<float>& x, bool ef, uint64_t key, int simd) {
  Encoded e;
  size_t n = x.size();
  void* state = nullptr;
  EXPECT_EQ(ops.state_create(&s, n, &state), gcclSuccess);
  exc_list l{nullptr, 0, 0};
  encode_ctx ctx{};
  ctx.spec = &s;
  ctx.key = key;
  ctx.exc = &l;
  ctx.state = state;
  std::vector<float> buf = x;
  size_t bound = ops.payload_bound(&s, n);
  e.payload.assign(bound, 0xEE);
  e.h.codec = CODEC_TERNGRAD;
  e.h.dtype = gcclFloat32;
  e.h.count = n;
  e.h.bits = 77;  // the codec must overwrite these
  e.h.rng_key = 5;
  size_t bytes = ~(size_t)0;
  e.rc = terngrad_encode_path(&ctx, buf.data(), ef ? buf.data() : nullptr, n, e.payload.data(), &bytes, &e.h, simd);
  EXPECT_LE(bytes, bound);
  if (e.rc == gcclSuccess) {
    e.payload.resize(bytes);
    EXPECT_EQ(ctx.payload_crc_valid, 1);
    EXPECT_EQ(ctx.payload_crc, crc32c(0, e.payload.data(), bytes));
  }
  e.h.payload_bytes = bytes;
  e.exc.assign(l.idx, l.idx + l.n);
  free(l.idx);
  ops.state_destroy(state);
  if (ef) e.resid = buf;
  return e;
}

std::vector<int> Paths() {
  std::vector<int> p{0};
  if (HaveAvx2()) p.push_back(1);
  return p;
}

void CheckEncode(const std::vector<float>& x, uint32_t bucket, const std::string& what, uint64_t key = kKey) {
  Model r = Reference(x, bucket, key);
  for (int simd : Paths()) {
    for (bool ef : {false, true}) {
      SCOPED_TRACE(what + " simd=" + std::to_string(simd) + " ef=" + std::to_string(ef));
      Encoded e = Encode(Spec(bucket, ef), x, ef, key, simd);
      ASSERT_EQ(e.rc, gcclSuccess);
      EXPECT_EQ(e.h.bits, 0u);
      EXPECT_EQ(e.h.bucket, bucket);
      EXPECT_EQ(e.h.rng_key, 0u);
      EXPECT_EQ(e.h.flags, 0u);
      ASSERT_EQ(e.payload.size(), r.payload.size());
      EXPECT_EQ(e.payload, r.payload);
      EXPECT_EQ(e.exc, r.exc);
      EXPECT_EQ(ops.validate(&e.h, e.payload.data()), gcclSuccess) << err_last();
      if (ef) {
        for (size_t i = 0; i < x.size(); i++)
          ASSERT_EQ(Bits(e.resid[i]), Bits(r.resid[i])) << "resid at " << i << " x=" << x[i];
      }
    }
  }
}

std::vector<float> Normal(size_t n, uint64_t seed, float sd = 1.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> x(n);
  for (auto& v : x) v = d(g);
  return x;
}

TEST(TerngradCodec, CodesAndScaleOnAKnownBucket) {
  // scale = max |x| = 4 (the NaN does not count); |x| = scale always codes nonzero.
  std::vector<float> x = {4.0f, -4.0f, 0.0f, -0.0f, NAN, 1.0f, -3.0f};
  for (int simd : Paths()) {
    Encoded e = Encode(Spec(8), x, false, kKey, simd);
    ASSERT_EQ(e.rc, gcclSuccess);
    ASSERT_EQ(e.payload.size(), 4u + 2u);
    EXPECT_EQ(get_f32(&e.payload[0]), 4.0f);
    EXPECT_EQ(e.payload[4] & 0x0F, 0x09);  // codes 1, 2
    EXPECT_EQ(e.payload[4] >> 4, 0);       // zeros code 0, whatever their sign
    EXPECT_EQ(e.payload[5] & 0x03, 0);     // NaN codes 0
    EXPECT_EQ(e.payload[5] >> 6, 0);       // pad
    EXPECT_EQ(e.exc, std::vector<uint64_t>{4});
    EXPECT_EQ(e.payload, Reference(x, 8, kKey).payload);
  }
}

TEST(TerngradCodec, MatchesModelForCountsAndBuckets) {
  for (uint32_t bucket : {1u, 3u, 4u, 512u, 4096u, 1u << 24}) {
    for (size_t n :
         {(size_t)0, (size_t)1, (size_t)7, (size_t)bucket - 1, (size_t)bucket, (size_t)bucket + 1, (size_t)100003}) {
      if (n > 200000) continue;
      CheckEncode(Normal(n, n * 31 + bucket), bucket, "bucket " + std::to_string(bucket) + " n " + std::to_string(n));
    }
  }
  for (size_t n = 1; n <= 40; n++) CheckEncode(Normal(n, n), 16, "small n " + std::to_string(n), n);
}

TEST(TerngradCodec, UnbiasedOverKeys) {
  const size_t n = 300, K = 1000;
  const uint32_t B = 128;
  std::vector<float> x = Normal(n, 21);
  x[5] = 0.0f;
  x[6] = -0.0f;
  std::vector<double> sum(n, 0.0);
  std::vector<float> scale(n);
  for (size_t call = 0; call < K; call++) {
    Encoded e = Encode(Spec(B), x, false, rng_key(42, call, 3), call % 2);
    ASSERT_EQ(e.rc, gcclSuccess);
    std::vector<float> dst(n, 0.0f);
    ASSERT_EQ(ops.decode_accumulate(&e.h, e.payload.data(), nullptr, 0, dst.data()), gcclSuccess);
    for (size_t i = 0; i < n; i++) {
      sum[i] += dst[i];
      scale[i] = get_f32(&e.payload[(i / B) * (4 + B / 4)]);
    }
  }
  double zsum = 0;
  for (size_t i = 0; i < n; i++) {
    double mean = sum[i] / K, a = std::fabs((double)x[i]);
    double sigma = std::sqrt(std::max(0.0, scale[i] * a - a * a) / K);
    EXPECT_LE(std::fabs(mean - x[i]), 4 * sigma + 1e-6 * scale[i]) << "element " << i << " x " << x[i];
    if (sigma > 0) zsum += (mean - x[i]) / sigma;
  }
  // The z-scores of n independent elements average to 0 with sd 1/sqrt(n): a systematic bias shows here.
  EXPECT_LT(std::fabs(zsum / n), 4.0 / std::sqrt((double)n));
}

TEST(TerngradCodec, NonFiniteGoToExceptionsInOrder) {
  const uint32_t B = 64;
  for (float b : {NAN, INFINITY, -INFINITY, -NAN}) {
    for (size_t n : {(size_t)1, (size_t)63, (size_t)64, (size_t)200}) {
      std::vector<float> x = Normal(n, 3);
      std::vector<size_t> at = {0, n / 2, n - 1};
      if (n > 64) at.insert(at.end(), {63, 64, 65, 127, 128, 199});
      for (size_t i : at) x[i] = b;
      CheckEncode(x, B, "bad " + std::to_string(b) + " n " + std::to_string(n));
    }
  }
  std::vector<float> x = Normal(200, 4);
  for (size_t i = 64; i < 128; i++) x[i] = NAN;
  CheckEncode(x, B, "NaN bucket");
  Encoded e = Encode(Spec(B), x, true, kKey, 1);
  ASSERT_EQ(e.exc.size(), 64u);
  EXPECT_EQ(e.exc.front(), 64u);
  EXPECT_EQ(e.exc.back(), 127u);
  EXPECT_EQ(get_f32(&e.payload[4 + 16]), 0.0f);
}

TEST(TerngradCodec, HugeValuesStayInThePayload) {
  // max |x| cannot overflow, so values near FLT_MAX are coded, not sent as exceptions.
  std::vector<float> x = Normal(300, 5);
  for (size_t i = 100; i < 140; i++) x[i] = (i % 2 ? -1.0f : 1.0f) * FLT_MAX * (0.5f + 0.01f * (float)(i - 100));
  x[110] = INFINITY;
  CheckEncode(x, 64, "huge");
  Encoded e = Encode(Spec(64), x, false, kKey, 1);
  EXPECT_EQ(e.exc, std::vector<uint64_t>{110});
}

// dst's dtype as float values, and back.
struct Dst {
  gcclDataType_t dt;
  std::vector<uint8_t> bytes;
  Dst(gcclDataType_t t, size_t n, uint64_t seed) : dt(t), bytes(n * dtype_size(t)) {
    std::vector<float> v = Normal(n, seed, 3.0f);
    for (size_t i = 0; i < n; i += 5) v[i] = -0.0f;  // -0.0 + +0.0 is +0.0: the sign of a zero decode shows
    for (size_t i = 0; i < n; i++) Set(i, v[i]);
  }
  void Set(size_t i, float v) {
    if (dt == gcclFloat32) std::memcpy(&bytes[4 * i], &v, 4);
    if (dt == gcclFloat64) {
      double d = v;
      std::memcpy(&bytes[8 * i], &d, 8);
    }
    if (dt == gcclFloat16 || dt == gcclBfloat16) {
      uint16_t h = dt == gcclFloat16 ? float_to_half(v) : float_to_bf16(v);
      std::memcpy(&bytes[2 * i], &h, 2);
    }
  }
  double Get(size_t i) const {
    if (dt == gcclFloat32) {
      float f;
      std::memcpy(&f, &bytes[4 * i], 4);
      return f;
    }
    if (dt == gcclFloat64) {
      double d;
      std::memcpy(&d, &bytes[8 * i], 8);
      return d;
    }
    uint16_t h;
    std::memcpy(&h, &bytes[2 * i], 2);
    return dt == gcclFloat16 ? half_to_float(h) : bf16_to_float(h);
  }
  // dst[i] += v with the accumulation rule of codec_util.h.
  void Add(size_t i, float v) {
    if (dt == gcclFloat32) {
      float f;
      std::memcpy(&f, &bytes[4 * i], 4);
      f += v;
      std::memcpy(&bytes[4 * i], &f, 4);
    } else if (dt == gcclFloat64) {
      double d;
      std::memcpy(&d, &bytes[8 * i], 8);
      d += (double)v;
      std::memcpy(&bytes[8 * i], &d, 8);
    } else {
      uint16_t h;
      std::memcpy(&h, &bytes[2 * i], 2);
      h = dt == gcclFloat16 ? float_to_half(half_to_float(h) + v) : float_to_bf16(bf16_to_float(h) + v);
      std::memcpy(&bytes[2 * i], &h, 2);
    }
  }
};

// Bit-exact everywhere but at exception indices, where the payload adds nothing:
// only the value must be unchanged (block_accumulate adds +0.0 there, which
// turns a -0.0 into +0.0; the decoder then adds the non-finite raw value anyway).
void ExpectSameDst(const Dst& got, const Dst& want, const std::vector<uint64_t>& exc) {
  size_t es = dtype_size(got.dt);
  size_t n = got.bytes.size() / es, bad = 0;
  for (size_t i = 0; i < n && bad < 10; i++) {
    bool is_exc = std::binary_search(exc.begin(), exc.end(), (uint64_t)i);
    bool same = is_exc ? got.Get(i) == want.Get(i) : std::memcmp(&got.bytes[i * es], &want.bytes[i * es], es) == 0;
    if (!same) {
      ADD_FAILURE() << "dst[" << i << "] = " << got.Get(i) << ", want " << want.Get(i) << (is_exc ? " (exc)" : "");
      bad++;
    }
  }
}

void CheckDecode(const std::vector<float>& x, uint32_t bucket, const std::string& what) {
  Model r = Reference(x, bucket, kKey);
  Encoded e = Encode(Spec(bucket), x, false, kKey, 0);
  ASSERT_EQ(e.rc, gcclSuccess);
  for (gcclDataType_t dt : {gcclFloat32, gcclFloat64, gcclFloat16, gcclBfloat16}) {
    e.h.dtype = dt;
    ASSERT_EQ(ops.validate(&e.h, e.payload.data()), gcclSuccess);
    Dst want(dt, x.size(), 77);
    for (size_t i = 0; i < x.size(); i++)
      if (!std::binary_search(r.exc.begin(), r.exc.end(), (uint64_t)i)) want.Add(i, r.dec[i]);
    for (int simd : Paths()) {
      SCOPED_TRACE(what + " dtype " + std::to_string(dt) + " simd " + std::to_string(simd));
      Dst got(dt, x.size(), 77);
      ASSERT_EQ(terngrad_decode_path(&e.h, e.payload.data(), e.exc.data(), e.exc.size(), got.bytes.data(), simd),
                gcclSuccess);
      ExpectSameDst(got, want, r.exc);
    }
    Dst viaops(dt, x.size(), 77);
    ASSERT_EQ(ops.decode_accumulate(&e.h, e.payload.data(), e.exc.data(), e.exc.size(), viaops.bytes.data()),
              gcclSuccess);
    ExpectSameDst(viaops, want, r.exc);
  }
}

TEST(TerngradCodec, DecodeAccumulateIntoEveryFloatDtype) {
  for (uint32_t bucket : {1u, 3u, 512u, 3000u}) {
    for (size_t n : {(size_t)0, (size_t)1, (size_t)7, (size_t)bucket + 1, (size_t)5003})
      CheckDecode(Normal(n, n + bucket), bucket, "bucket " + std::to_string(bucket) + " n " + std::to_string(n));
  }
  std::vector<float> x = Normal(5000, 8);
  for (size_t i : {0, 511, 512, 1023, 1024, 2047, 2048, 2100, 4999}) x[i] = (i % 2) ? NAN : -INFINITY;
  for (size_t i = 3072; i < 3584; i++) x[i] = NAN;
  CheckDecode(x, 512, "exceptions b512");
  CheckDecode(x, 3000, "exceptions b3000");
}

TEST(TerngradCodec, SignedZeros) {
  // Zero buckets, and zeros of both signs among other values: codes, residuals and decodes keep zero signs exact.
  std::vector<float> x(64, 0.0f);
  for (size_t i = 0; i < 64; i += 2) x[i] = -0.0f;
  for (size_t i = 32; i < 48; i++) x[i] = (i % 3) ? (float)i : -(float)i;
  CheckEncode(x, 16, "signed zeros");
  CheckDecode(x, 16, "signed zeros");
}

frame_header Header(uint64_t count, uint32_t bucket, uint64_t bytes) {
  frame_header h{};
  h.codec = CODEC_TERNGRAD;
  h.dtype = gcclFloat32;
  h.count = count;
  h.bucket = bucket;
  h.payload_bytes = bytes;
  return h;
}

TEST(TerngradCodec, ValidateRejectsBadPayloads) {
  std::vector<float> x = Normal(1000, 11);
  Encoded e = Encode(Spec(512), x, false, kKey, 1);
  ASSERT_EQ(e.payload.size(), 4 + 128 + 4 + 122u);
  ASSERT_EQ(ops.validate(&e.h, e.payload.data()), gcclSuccess);
  for (int d : {-1, 1}) {
    std::vector<uint8_t> p = e.payload;
    p.resize(p.size() + d);
    frame_header h = e.h;
    h.payload_bytes = p.size();
    EXPECT_EQ(ops.validate(&h, p.data()), gcclCorruptData);
  }
  for (size_t off : {(size_t)0, (size_t)132}) {
    for (float bad : {NAN, INFINITY, -INFINITY, -1.0f, -0.0f, -FLT_MIN}) {
      std::vector<uint8_t> p = e.payload;
      put_f32(&p[off], bad);
      EXPECT_EQ(ops.validate(&e.h, p.data()), gcclCorruptData) << bad << " at " << off;
    }
  }
  // Code 3 at the first, word-edge and last elements of each bucket.
  for (size_t elem : {0, 1, 3, 4, 31, 32, 33, 255, 256, 511, 512, 513, 512 + 480, 999}) {
    size_t b = elem / 512, j = elem % 512;
    size_t byte = b * 132 + 4 + j / 4;
    std::vector<uint8_t> p = e.payload;
    p[byte] |= (uint8_t)(3u << (2 * (j % 4)));
    EXPECT_EQ(ops.validate(&e.h, p.data()), gcclCorruptData) << "code 3 at element " << elem;
    p[byte] &= (uint8_t) ~(1u << (2 * (j % 4)));  // now code 2: legal
    EXPECT_EQ(ops.validate(&e.h, p.data()), gcclSuccess) << "code 2 at element " << elem;
  }
  // Pad bits of a 3-element tail (bits 6, 7 of its only code byte).
  Encoded t = Encode(Spec(512), Normal(515, 12), false, kKey, 1);
  ASSERT_EQ(ops.validate(&t.h, t.payload.data()), gcclSuccess);
  for (int bit : {6, 7}) {
    std::vector<uint8_t> p = t.payload;
    p.back() |= (uint8_t)(1u << bit);
    EXPECT_EQ(ops.validate(&t.h, p.data()), gcclCorruptData) << bit;
  }
}

TEST(TerngradCodec, ValidateSurvivesHostileHeaders) {
  std::vector<uint8_t> p(64, 0);
  frame_header h = Header(UINT64_MAX, 1, 64);
  EXPECT_EQ(ops.validate(&h, p.data()), gcclCorruptData);
  h = Header(UINT64_MAX, 1u << 24, 64);
  EXPECT_EQ(ops.validate(&h, p.data()), gcclCorruptData);
  h = Header(UINT64_C(1) << 62, 7, 64);
  EXPECT_EQ(ops.validate(&h, p.data()), gcclCorruptData);
  h = Header(0, 512, 0);
  EXPECT_EQ(ops.validate(&h, p.data()), gcclSuccess);
  h = Header(0, 0, 0);
  EXPECT_EQ(ops.validate(&h, p.data()), gcclCorruptData);
  h = Header(4 * 12, 4, 64);  // 12 buckets of 5 bytes = 60
  EXPECT_EQ(ops.validate(&h, p.data()), gcclCorruptData);
  h.payload_bytes = 60;
  EXPECT_EQ(ops.validate(&h, p.data()), gcclSuccess);
  std::vector<uint8_t> ones(60, 0xFF);  // scales NaN and codes 3
  EXPECT_EQ(ops.validate(&h, ones.data()), gcclCorruptData);
}

TEST(TerngradCodec, PayloadBound) {
  codec_spec s = Spec(512);
  EXPECT_EQ(ops.payload_bound(&s, 0), 0u);
  EXPECT_EQ(ops.payload_bound(&s, 1), 5u);
  EXPECT_EQ(ops.payload_bound(&s, 512), 132u);
  EXPECT_EQ(ops.payload_bound(&s, 517), 138u);
  codec_spec one = Spec(1);
  EXPECT_EQ(ops.payload_bound(&one, SIZE_MAX), SIZE_MAX);
}

}  // namespace
