// test_sign.cc — the sign codec (compress/codec_sign.c) against a scalar model of its frame.
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
#include "compress/spec.h"

gcclResult_t sign_encode_path(struct encode_ctx* ctx, const float* x, float* resid, size_t n, unsigned char* payload,
                              size_t* payload_bytes, struct frame_header* h, int simd);
gcclResult_t sign_decode_path(const struct frame_header* h, const unsigned char* payload, const uint64_t* exc,
                              size_t nexc, void* dst, int simd, int store);
}

namespace {

const codec_ops& ops = codec_sign_ops;

bool HaveAvx2() {
  return __builtin_cpu_supports("avx2");
}

uint32_t Bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return u;
}

codec_spec Spec(uint32_t bucket) {
  codec_spec s;
  std::string text = "sign:bucket=" + std::to_string(bucket);
  EXPECT_EQ(spec_parse(text.c_str(), &s), gcclSuccess) << text;
  return s;
}

// What the codec is expected to produce, computed element by element from the
// formulas at the top of codec_sign.c.
struct Model {
  std::vector<uint8_t> payload;
  std::vector<uint64_t> exc;
  std::vector<float> dec;    // decoded value, 0 at exceptions
  std::vector<float> resid;  // x - dec, 0 at exceptions
  std::vector<float> scales;
};

Model Reference(const std::vector<float>& x, size_t bucket) {
  Model r;
  size_t n = x.size();
  r.dec.assign(n, 0.0f);
  r.resid.assign(n, 0.0f);
  for (size_t base = 0; base < n; base += bucket) {
    size_t m = std::min(bucket, n - base);
    std::vector<float> v(m);
    size_t finite = 0;
    std::vector<uint64_t> bexc;
    for (size_t j = 0; j < m; j++) {
      bool f = std::isfinite(x[base + j]);
      v[j] = f ? x[base + j] : 0.0f;
      finite += f;
      if (!f) bexc.push_back(base + j);
    }
    float sum = canon_sum_abs(v.data(), m);
    float scale = finite ? sum / (float)finite : 0.0f;
    std::vector<uint8_t> codes((m + 7) / 8, 0);
    if (!std::isfinite(scale)) {
      scale = 0.0f;
      bexc.clear();
      for (size_t j = 0; j < m; j++) bexc.push_back(base + j);
    } else {
      for (size_t j = 0; j < m; j++) {
        bool bit = std::signbit(v[j]);
        codes[j / 8] |= (uint8_t)(bit << (j % 8));
        r.dec[base + j] = bit ? -scale : scale;
        r.resid[base + j] = v[j] - r.dec[base + j];
      }
    }
    for (uint64_t e : bexc) r.dec[e] = r.resid[e] = 0.0f;
    r.exc.insert(r.exc.end(), bexc.begin(), bexc.end());
    r.scales.push_back(scale);
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

Encoded Encode(const codec_spec& s, const std::vector<float>& x, bool ef, int simd) {
  Encoded e;
  size_t n = x.size();
  void* state = nullptr;
  EXPECT_EQ(ops.state_create(&s, n, &state), gcclSuccess);
  exc_list l{nullptr, 0, 0};
  encode_ctx ctx{};
  ctx.spec = &s;
  ctx.key = 0;
  ctx.exc = &l;
  ctx.state = state;
  std::vector<float> buf = x;
  size_t bound = ops.payload_bound(&s, n);
  e.payload.assign(bound, 0xEE);
  e.h.codec = CODEC_SIGN;
  e.h.dtype = gcclFloat32;
  e.h.count = n;
  e.h.bits = 77;  // the codec must overwrite these
  e.h.rng_key = 5;
  size_t bytes = ~(size_t)0;
  e.rc = sign_encode_path(&ctx, buf.data(), ef ? buf.data() : nullptr, n, e.payload.data(), &bytes, &e.h, simd);
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

// Encodes with both paths, with and without EF, and checks everything against the model.
void CheckEncode(const std::vector<float>& x, uint32_t bucket, const std::string& what) {
  codec_spec s = Spec(bucket);
  Model r = Reference(x, bucket);
  for (int simd : Paths()) {
    for (bool ef : {false, true}) {
      SCOPED_TRACE(what + " simd=" + std::to_string(simd) + " ef=" + std::to_string(ef));
      Encoded e = Encode(s, x, ef, simd);
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

// Values over 20 orders of magnitude: any summation order but the canonical one
// gives different scale bits.
std::vector<float> WideRange(size_t n, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> e(-10.0f, 10.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = std::pow(10.0f, e(g)) * ((g() & 1) ? -1.0f : 1.0f);
  return x;
}

TEST(SignCodec, ScaleIsMeanAbsAndDecodedIsSignedScale) {
  // Bucket 4: {1, -2, 3, -4} -> mean 2.5; {0.5, -0.0, NaN, 1.5} -> (0.5 + 0 + 1.5) / 3.
  std::vector<float> x = {1, -2, 3, -4, 0.5f, -0.0f, NAN, 1.5f};
  codec_spec s = Spec(4);
  for (int simd : Paths()) {
    Encoded e = Encode(s, x, true, simd);
    ASSERT_EQ(e.rc, gcclSuccess);
    ASSERT_EQ(e.payload.size(), 10u);
    EXPECT_EQ(get_f32(&e.payload[0]), 2.5f);
    EXPECT_EQ(e.payload[4], 0x0Au);  // elements 1 and 3 negative
    EXPECT_EQ(get_f32(&e.payload[5]), 2.0f / 3.0f);
    EXPECT_EQ(e.payload[9], 0x02u);  // -0.0 is negative; NaN codes 0
    EXPECT_EQ(e.exc, std::vector<uint64_t>{6});
    std::vector<float> dst(8, 0.0f);
    ASSERT_EQ(sign_decode_path(&e.h, e.payload.data(), e.exc.data(), e.exc.size(), dst.data(), simd, 0), gcclSuccess);
    std::vector<float> want = {2.5f, -2.5f, 2.5f, -2.5f, 2.0f / 3, -2.0f / 3, 0.0f, 2.0f / 3};
    EXPECT_EQ(dst, want);
    EXPECT_EQ(e.resid[0], 1 - 2.5f);
    EXPECT_EQ(e.resid[5], 2.0f / 3);
    EXPECT_EQ(e.resid[6], 0.0f);
  }
}

TEST(SignCodec, ScaleMatchesMeanAbsOfRandomBuckets) {
  std::vector<float> x = Normal(5000, 1);
  x[17] = INFINITY;
  x[600] = NAN;
  codec_spec s = Spec(512);
  Encoded e = Encode(s, x, false, 1);
  ASSERT_EQ(e.rc, gcclSuccess);
  size_t off = 0;
  for (size_t base = 0; base < x.size(); base += 512) {
    size_t m = std::min<size_t>(512, x.size() - base);
    double sum = 0;
    size_t cnt = 0;
    for (size_t j = 0; j < m; j++)
      if (std::isfinite(x[base + j])) sum += std::fabs(x[base + j]), cnt++;
    EXPECT_NEAR(get_f32(&e.payload[off]), sum / cnt, 1e-5 * sum / cnt) << "bucket at " << base;
    off += 4 + (m + 7) / 8;
  }
}

TEST(SignCodec, MatchesModelForCountsAndBuckets) {
  for (uint32_t bucket : {1u, 3u, 8u, 512u, 4096u, 1u << 24}) {
    for (size_t n :
         {(size_t)0, (size_t)1, (size_t)7, (size_t)bucket - 1, (size_t)bucket, (size_t)bucket + 1, (size_t)100003}) {
      if (n > 200000) continue;
      CheckEncode(Normal(n, n * 31 + bucket), bucket, "bucket " + std::to_string(bucket) + " n " + std::to_string(n));
    }
  }
}

TEST(SignCodec, SimdSumIsCanonicalOrder) {
  // Lengths around the 16-lane and 8-lane boundaries; the payload's scales must equal canon_sum_abs / count.
  for (size_t n = 1; n <= 70; n++) CheckEncode(WideRange(n, n), 64, "wide n " + std::to_string(n));
  CheckEncode(WideRange(100000, 9), 512, "wide large");
  CheckEncode(WideRange(100000, 10), 1000, "wide bucket 1000");
}

TEST(SignCodec, NonFiniteGoToExceptionsInOrder) {
  const uint32_t B = 64;
  const float bad[] = {NAN, INFINITY, -INFINITY, -NAN};
  for (float b : bad) {
    for (size_t n : {(size_t)1, (size_t)63, (size_t)64, (size_t)200}) {
      std::vector<float> x = Normal(n, 3);
      std::vector<size_t> at = {0, n / 2, n - 1};
      if (n > 64) at.insert(at.end(), {63, 64, 65, 127, 128, 199});
      for (size_t i : at) x[i] = b;
      CheckEncode(x, B, "bad " + std::to_string(b) + " n " + std::to_string(n));
      Encoded e = Encode(Spec(B), x, false, 1);
      ASSERT_TRUE(std::is_sorted(e.exc.begin(), e.exc.end()));
      EXPECT_EQ(std::adjacent_find(e.exc.begin(), e.exc.end()), e.exc.end());
    }
  }
  // A whole bucket of NaN: scale 0 (no finite values), every element an exception.
  std::vector<float> x = Normal(200, 4);
  for (size_t i = 64; i < 128; i++) x[i] = NAN;
  CheckEncode(x, B, "NaN bucket");
  Encoded e = Encode(Spec(B), x, true, 1);
  ASSERT_EQ(e.exc.size(), 64u);
  EXPECT_EQ(e.exc.front(), 64u);
  EXPECT_EQ(e.exc.back(), 127u);
  EXPECT_EQ(get_f32(&e.payload[4 + 8]), 0.0f);
}

TEST(SignCodec, OverflowingScaleSendsBucketAsExceptions) {
  std::vector<float> x = Normal(300, 5);
  for (size_t i = 100; i < 128; i++) x[i] = (i % 2 ? -1.0f : 1.0f) * FLT_MAX * 0.9f;  // sum overflows
  x[110] = NAN;  // already an exception before the range is pushed
  x[250] = INFINITY;
  CheckEncode(x, 64, "overflow");
  Encoded e = Encode(Spec(64), x, true, 1);
  std::vector<uint64_t> want;
  for (uint64_t i = 64; i < 128; i++) want.push_back(i);
  want.push_back(250);
  EXPECT_EQ(e.exc, want);
  for (size_t i = 64; i < 128; i++) EXPECT_EQ(Bits(e.resid[i]), 0u);
  // Single huge values that do not overflow stay in the payload.
  std::vector<float> y = {FLT_MAX, -FLT_MAX, 1.0f};
  CheckEncode(y, 1, "FLT_MAX bucket 1");
  EXPECT_TRUE(Encode(Spec(1), y, false, 1).exc.empty());
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
  codec_spec s = Spec(bucket);
  Model r = Reference(x, bucket);
  Encoded e = Encode(s, x, false, 0);
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
      ASSERT_EQ(sign_decode_path(&e.h, e.payload.data(), e.exc.data(), e.exc.size(), got.bytes.data(), simd, 0),
                gcclSuccess);
      ExpectSameDst(got, want, r.exc);
    }
    Dst viaops(dt, x.size(), 77);
    ASSERT_EQ(ops.decode_accumulate(&e.h, e.payload.data(), e.exc.data(), e.exc.size(), viaops.bytes.data()),
              gcclSuccess);
    ExpectSameDst(viaops, want, r.exc);
  }
}

TEST(SignCodec, DecodeAccumulateIntoEveryFloatDtype) {
  for (uint32_t bucket : {1u, 3u, 512u, 3000u}) {
    for (size_t n : {(size_t)0, (size_t)1, (size_t)7, (size_t)bucket + 1, (size_t)5003})
      CheckDecode(Normal(n, n + bucket), bucket, "bucket " + std::to_string(bucket) + " n " + std::to_string(n));
  }
  // Exceptions inside and at the edges of decode chunks (1024 elements) and buckets.
  std::vector<float> x = Normal(5000, 8);
  for (size_t i : {0, 511, 512, 1023, 1024, 2047, 2048, 2100, 4999}) x[i] = (i % 2) ? NAN : -INFINITY;
  for (size_t i = 3072; i < 3584; i++) x[i] = NAN;
  CheckDecode(x, 512, "exceptions b512");
  CheckDecode(x, 3000, "exceptions b3000");
}

TEST(SignCodec, SignedZeros) {
  // Zero buckets, and zeros of both signs among other values: codes, residuals and decodes keep zero signs exact.
  std::vector<float> x(64, 0.0f);
  for (size_t i = 0; i < 64; i += 2) x[i] = -0.0f;
  for (size_t i = 32; i < 48; i++) x[i] = (i % 3) ? (float)i : -(float)i;
  CheckEncode(x, 16, "signed zeros");
  CheckDecode(x, 16, "signed zeros");
}

frame_header Header(uint64_t count, uint32_t bucket, uint64_t bytes) {
  frame_header h{};
  h.codec = CODEC_SIGN;
  h.dtype = gcclFloat32;
  h.count = count;
  h.bucket = bucket;
  h.payload_bytes = bytes;
  return h;
}

TEST(SignCodec, ValidateRejectsBadPayloads) {
  std::vector<float> x = Normal(1000, 11);
  Encoded e = Encode(Spec(512), x, false, 1);
  ASSERT_EQ(e.payload.size(), 2 * 4 + 64 + 61u);
  ASSERT_EQ(ops.validate(&e.h, e.payload.data()), gcclSuccess);
  // Wrong size, both ways (the buffer really is that long, so ASan sees any overread).
  for (int d : {-1, 1}) {
    std::vector<uint8_t> p = e.payload;
    p.resize(p.size() + d);
    frame_header h = e.h;
    h.payload_bytes = p.size();
    EXPECT_EQ(ops.validate(&h, p.data()), gcclCorruptData);
  }
  // Illegal scales in the first and the last bucket.
  for (size_t off : {(size_t)0, (size_t)68}) {
    for (float bad : {NAN, INFINITY, -INFINITY, -1.0f, -0.0f, -FLT_MIN}) {
      std::vector<uint8_t> p = e.payload;
      put_f32(&p[off], bad);
      EXPECT_EQ(ops.validate(&e.h, p.data()), gcclCorruptData) << bad << " at " << off;
    }
  }
  // Pad bits of the 1000 - 512 = 488-element tail are all used (488 % 8 == 0); make a tail that has some.
  Encoded t = Encode(Spec(512), Normal(515, 12), false, 1);
  ASSERT_EQ(ops.validate(&t.h, t.payload.data()), gcclSuccess);
  for (int bit = 3; bit < 8; bit++) {
    std::vector<uint8_t> p = t.payload;
    p.back() |= (uint8_t)(1u << bit);
    EXPECT_EQ(ops.validate(&t.h, p.data()), gcclCorruptData) << bit;
  }
  std::vector<uint8_t> p = t.payload;
  p.back() ^= 0x07;  // legal bits only
  EXPECT_EQ(ops.validate(&t.h, p.data()), gcclSuccess);
}

TEST(SignCodec, ValidateSurvivesHostileHeaders) {
  std::vector<uint8_t> p(64, 0);
  // Sizes that overflow 64 bits, and sizes that do not match, never read the payload.
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
  h = Header(0, 512, 1);
  EXPECT_EQ(ops.validate(&h, p.data()), gcclCorruptData);
  h = Header(8 * 12, 8, 64);  // 12 buckets of 5 bytes = 60
  EXPECT_EQ(ops.validate(&h, p.data()), gcclCorruptData);
  h.payload_bytes = 60;
  EXPECT_EQ(ops.validate(&h, p.data()), gcclSuccess);
}

TEST(SignCodec, PayloadBound) {
  codec_spec s = Spec(512);
  EXPECT_EQ(ops.payload_bound(&s, 0), 0u);
  EXPECT_EQ(ops.payload_bound(&s, 1), 5u);
  EXPECT_EQ(ops.payload_bound(&s, 512), 68u);
  EXPECT_EQ(ops.payload_bound(&s, 513), 73u);
  codec_spec one = Spec(1);
  EXPECT_EQ(ops.payload_bound(&one, SIZE_MAX), SIZE_MAX);  // saturates instead of wrapping
}

TEST(SignCodec, EncodeRefusesStateForASmallerTensor) {
  codec_spec s = Spec(512);
  void* state = nullptr;
  ASSERT_EQ(ops.state_create(&s, 10, &state), gcclSuccess);
  exc_list l{nullptr, 0, 0};
  encode_ctx ctx{};
  ctx.spec = &s;
  ctx.key = 0;
  ctx.exc = &l;
  ctx.state = state;
  std::vector<float> x(100, 1.0f);
  std::vector<uint8_t> p(ops.payload_bound(&s, 100));
  frame_header h{};
  size_t bytes = 0;
  EXPECT_EQ(ops.encode(&ctx, x.data(), nullptr, 100, p.data(), &bytes, &h), gcclInternalError);
  ops.state_destroy(state);
  ctx.state = nullptr;
  EXPECT_EQ(ops.encode(&ctx, x.data(), nullptr, 100, p.data(), &bytes, &h), gcclInternalError);
}

}  // namespace
