// test_qsgd.cc — the qsgd codec (compress/codec_qsgd.c) against a scalar model of its frame.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
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
}

namespace {

const codec_ops& ops = codec_qsgd_ops;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

bool HaveAvx2() {
  return __builtin_cpu_supports("avx2");
}

// Runs the codec's portable scalar paths while alive.
struct ForceScalar {
  explicit ForceScalar(bool on) : old(codec_force_scalar) { codec_force_scalar = on; }
  ~ForceScalar() { codec_force_scalar = old; }
  int old;
};

std::vector<bool> Paths() {  // true = scalar
  std::vector<bool> p{true};
  if (HaveAvx2()) p.push_back(false);
  return p;
}

codec_spec Spec(unsigned bits, uint32_t bucket) {
  codec_spec s;
  std::string text = "qsgd:bits=" + std::to_string(bits) + ",bucket=" + std::to_string(bucket);
  EXPECT_EQ(spec_parse(text.c_str(), &s), gcclSuccess) << text;
  return s;
}

// Sum of v[i]^2 in the canonical order: element i in lane i % 16, lanes summed
// in index order, then lane[j] += lane[j + w] for w = 8, 4, 2, 1.
float CanonSumSq(const std::vector<float>& v) {
  float lane[16] = {0};
  for (size_t i = 0; i < v.size(); i++) lane[i % 16] += v[i] * v[i];
  for (int w = 8; w >= 1; w /= 2)
    for (int j = 0; j < w; j++) lane[j] += lane[j + w];
  return lane[0];
}

// The frame the codec must write, element by element from the formulas at the top
// of codec_qsgd.c.
struct Model {
  std::vector<uint8_t> payload;
  std::vector<uint64_t> exc;
  std::vector<float> dec;   // decoded value, 0 at exceptions
  std::vector<float> norm;  // per bucket
};

Model Reference(const std::vector<float>& x, const codec_spec& s, uint64_t key) {
  Model r;
  size_t n = x.size(), bucket = s.bucket;
  unsigned b = s.bits, w = b + 1, smax = (1u << b) - 1;
  float sf = (float)smax;
  r.dec.assign(n, 0.0f);
  for (size_t base = 0; base < n; base += bucket) {
    size_t m = std::min(bucket, n - base);
    std::vector<uint64_t> bexc;
    std::vector<float> v(m);
    for (size_t j = 0; j < m; j++) {
      bool f = std::isfinite(x[base + j]);
      v[j] = f ? x[base + j] : 0.0f;
      if (!f) bexc.push_back(base + j);
    }
    float norm = std::sqrt(CanonSumSq(v)), step = norm / sf;
    std::vector<uint8_t> codes((m * w + 7) / 8, 0);
    if (!std::isfinite(norm) || !std::isfinite(sf * step)) {
      norm = 0.0f;
      bexc.clear();
      for (size_t j = 0; j < m; j++) bexc.push_back(base + j);
    } else {
      float inv = norm > 0 ? sf / norm : 0.0f;
      if (!std::isfinite(inv)) inv = 0.0f;
      for (size_t j = 0; j < m; j++) {
        float t = std::floor(std::fabs(v[j]) * inv + rng_uniform(key, base + j));
        unsigned l = t > sf ? smax : (unsigned)t;
        bool neg = l != 0 && std::signbit(v[j]);
        unsigned code = l | (unsigned)neg << b;
        for (unsigned k = 0; k < w; k++)
          if ((code >> k) & 1) codes[(j * w + k) / 8] |= (uint8_t)(1u << ((j * w + k) % 8));
        float d = (float)l * step;
        r.dec[base + j] = neg ? -d : d;
      }
    }
    for (uint64_t e : bexc) r.dec[e] = 0.0f;
    r.exc.insert(r.exc.end(), bexc.begin(), bexc.end());
    r.norm.push_back(norm);
    uint8_t meta[4];
    std::memcpy(meta, &norm, 4);
    r.payload.insert(r.payload.end(), meta, meta + 4);
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

Encoded Encode(const codec_spec& s, const std::vector<float>& x, uint64_t key, bool ef, bool scalar) {
  ForceScalar fs(scalar);
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
  e.h.codec = CODEC_QSGD;
  e.h.dtype = gcclFloat32;
  e.h.count = n;
  e.h.bits = 77;  // the codec must overwrite these
  e.h.rng_key = 5;
  e.h.flags = 9;
  size_t bytes = ~(size_t)0;
  e.rc = ops.encode(&ctx, buf.data(), ef ? buf.data() : nullptr, n, e.payload.data(), &bytes, &e.h);
  EXPECT_EQ(bytes, bound);  // qsgd's size is exact
  if (e.rc == gcclSuccess) {
    e.payload.resize(bytes);
    EXPECT_TRUE(ctx.payload_crc_valid);
    EXPECT_EQ(ctx.payload_crc, crc32c(0, e.payload.data(), bytes));
  }
  e.h.payload_bytes = bytes;
  e.h.exceptions = l.n;
  e.exc.assign(l.idx, l.idx + l.n);
  free(l.idx);
  ops.state_destroy(state);
  if (ef) e.resid = buf;
  return e;
}

size_t DtypeBytes(gcclDataType_t dt) {
  return dt == gcclFloat64 ? 8 : dt == gcclFloat32 ? 4 : 2;
}

// A dst of n elements of dt holding `init` (rounded to dt).
std::vector<uint8_t> MakeDst(gcclDataType_t dt, const std::vector<float>& init) {
  std::vector<uint8_t> d(init.size() * DtypeBytes(dt));
  for (size_t i = 0; i < init.size(); i++) {
    switch (dt) {
      case gcclFloat32:
        std::memcpy(&d[4 * i], &init[i], 4);
        break;
      case gcclFloat64: {
        double v = init[i];
        std::memcpy(&d[8 * i], &v, 8);
        break;
      }
      case gcclFloat16: {
        uint16_t h = float_to_half(init[i]);
        std::memcpy(&d[2 * i], &h, 2);
        break;
      }
      default: {
        uint16_t h = float_to_bf16(init[i]);
        std::memcpy(&d[2 * i], &h, 2);
        break;
      }
    }
  }
  return d;
}

// dst[i] + v in dt, as block_accumulate defines it.
std::vector<uint8_t> AddExpected(gcclDataType_t dt, const std::vector<uint8_t>& dst, const std::vector<float>& v,
                                 const std::vector<uint64_t>& exc) {
  std::vector<uint8_t> d = dst;
  std::vector<bool> skip(v.size(), false);
  for (uint64_t e : exc) skip[e] = true;
  for (size_t i = 0; i < v.size(); i++) {
    if (skip[i]) continue;
    switch (dt) {
      case gcclFloat32: {
        float a;
        std::memcpy(&a, &d[4 * i], 4);
        a += v[i];
        std::memcpy(&d[4 * i], &a, 4);
        break;
      }
      case gcclFloat64: {
        double a;
        std::memcpy(&a, &d[8 * i], 8);
        a += (double)v[i];
        std::memcpy(&d[8 * i], &a, 8);
        break;
      }
      case gcclFloat16: {
        uint16_t h;
        std::memcpy(&h, &d[2 * i], 2);
        h = float_to_half(half_to_float(h) + v[i]);
        std::memcpy(&d[2 * i], &h, 2);
        break;
      }
      default: {
        uint16_t h;
        std::memcpy(&h, &d[2 * i], 2);
        h = float_to_bf16(bf16_to_float(h) + v[i]);
        std::memcpy(&d[2 * i], &h, 2);
        break;
      }
    }
  }
  return d;
}

// Validates and decodes e into a copy of dst of dtype dt.
std::vector<uint8_t> Decode(const Encoded& e, gcclDataType_t dt, const std::vector<uint8_t>& dst, bool scalar) {
  ForceScalar fs(scalar);
  frame_header h = e.h;
  h.dtype = dt;
  std::vector<uint8_t> out = dst;
  EXPECT_EQ(ops.validate(&h, e.payload.data()), gcclSuccess) << err_last();
  EXPECT_EQ(ops.decode_accumulate(&h, e.payload.data(), e.exc.data(), e.exc.size(), out.data()), gcclSuccess);
  return out;
}

std::vector<float> Decode32(const Encoded& e, bool scalar) {
  std::vector<uint8_t> d = Decode(e, gcclFloat32, MakeDst(gcclFloat32, std::vector<float>(e.h.count, 0.0f)), scalar);
  std::vector<float> v(e.h.count);
  if (!v.empty()) std::memcpy(v.data(), d.data(), d.size());
  return v;
}

std::vector<float> RandomNormal(size_t n, uint32_t seed, float scale = 1.0f, float shift = 0.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = shift + scale * nd(g);
  return x;
}

// Bit equality of float vectors (so -0 vs +0 and NaN payloads count).
void ExpectSameBits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); i++)
    ASSERT_EQ(0, std::memcmp(&a[i], &b[i], 4)) << what << " at " << i << ": " << a[i] << " vs " << b[i];
}

// Encodes x on every path, with and without EF, and checks the payload, the
// exceptions, the residual and an fp32 decode against the model.
void CheckAgainstModel(const std::vector<float>& x, const codec_spec& s, uint64_t key, const std::string& what) {
  Model r = Reference(x, s, key);
  for (bool scalar : Paths()) {
    for (bool ef : {false, true}) {
      SCOPED_TRACE(what + (scalar ? " scalar" : " avx2") + (ef ? " ef" : ""));
      Encoded e = Encode(s, x, key, ef, scalar);
      ASSERT_EQ(e.rc, gcclSuccess);
      EXPECT_EQ(e.h.bits, s.bits);
      EXPECT_EQ(e.h.bucket, s.bucket);
      EXPECT_EQ(e.h.rng_key, 0u);
      EXPECT_EQ(e.h.flags, 0u);
      EXPECT_EQ(e.h.k, 0u);
      EXPECT_EQ(e.h.values, 0u);
      ASSERT_EQ(e.payload, r.payload);
      ASSERT_EQ(e.exc, r.exc);
      if (ef) {
        std::vector<float> want(x.size());
        for (size_t i = 0; i < x.size(); i++) want[i] = std::isfinite(x[i]) ? x[i] - r.dec[i] : 0.0f;
        for (uint64_t i : r.exc) want[i] = 0.0f;
        ExpectSameBits(e.resid, want, "residual");
      }
      // 0 + dec: the model's dec with -0 turned to +0 (and 0 at exceptions).
      std::vector<float> want(r.dec.size());
      for (size_t i = 0; i < want.size(); i++) want[i] = 0.0f + r.dec[i];
      for (bool dscalar : Paths()) ExpectSameBits(Decode32(e, dscalar), want, "decode");
    }
  }
}

TEST(Qsgd, MatchesModelForEveryBitsBucketAndCount) {
  for (unsigned bits = 1; bits <= 8; bits++) {
    for (uint32_t bucket : {1u, 3u, 512u, 0u}) {  // 0: larger than n
      std::vector<size_t> counts{0, 1, 7, 1003};
      if (bucket) counts.insert(counts.end(), {bucket - 1, bucket, bucket + 1, 3 * (size_t)bucket + 77});
      for (size_t n : counts) {
        uint32_t b = bucket ? bucket : (uint32_t)n + 5;
        std::vector<float> x = RandomNormal(n, (uint32_t)(n * 31 + bits), 0.01f, bits % 2 ? 0.0f : 0.003f);
        if (n > 5) x[n / 2] = -x[n / 3];  // a repeated magnitude
        if (n > 9) x[9] = -0.0f;          // sign of zero: l = 0, so neg = 0
        CheckAgainstModel(x, Spec(bits, b), 0x1234567890ABCDEFull + n,
                          "bits=" + std::to_string(bits) + " bucket=" + std::to_string(b) + " n=" + std::to_string(n));
      }
    }
  }
}

TEST(Qsgd, LargeTensorWithBucketsAboveTheDecodeChunk) {
  std::vector<float> x = RandomNormal(250007, 7, 3.0f, -1.0f);
  for (unsigned bits : {1u, 2u, 3u, 4u, 7u, 8u}) {
    CheckAgainstModel(x, Spec(bits, 3000), 1, "bucket 3000 bits " + std::to_string(bits));
    CheckAgainstModel(x, Spec(bits, 100000), 2, "bucket 100000 bits " + std::to_string(bits));
  }
}

TEST(Qsgd, DecodeAccumulatesIntoEveryDtype) {
  std::vector<float> x = RandomNormal(2053, 11, 2.0f);
  x[5] = kNaN;
  x[700] = kInf;
  std::vector<float> init = RandomNormal(x.size(), 12, 4.0f);
  for (unsigned bits : {2u, 3u, 7u, 8u}) {
    codec_spec s = Spec(bits, 256);
    Model r = Reference(x, s, 99);
    Encoded e = Encode(s, x, 99, false, false);
    ASSERT_EQ(e.rc, gcclSuccess);
    ASSERT_EQ(e.exc, (std::vector<uint64_t>{5, 700}));
    for (gcclDataType_t dt : {gcclFloat32, gcclFloat64, gcclFloat16, gcclBfloat16}) {
      std::vector<uint8_t> dst = MakeDst(dt, init);
      std::vector<uint8_t> want = AddExpected(dt, dst, r.dec, r.exc);
      for (bool scalar : Paths()) {
        std::vector<uint8_t> got = Decode(e, dt, dst, scalar);
        EXPECT_EQ(got, want) << "dtype " << dt << " bits " << bits << (scalar ? " scalar" : " avx2");
      }
    }
  }
}

TEST(Qsgd, NormIsTheCanonicalSumOfSquares) {
  // The library's canon_sum_sq (the definition the GPU follows) over the bucket
  // with non-finite values zeroed in place.
  for (size_t m : {1u, 15u, 16u, 17u, 100u, 512u, 1000u}) {
    std::vector<float> x = RandomNormal(m, (uint32_t)m, 1e3f);
    x[m / 2] = kNaN;
    std::vector<float> v = x;
    v[m / 2] = 0.0f;
    float want = std::sqrt(canon_sum_sq(v.data(), m));
    EXPECT_EQ(want, std::sqrt(CanonSumSq(v)));
    for (bool scalar : Paths()) {
      Encoded e = Encode(Spec(4, (uint32_t)m), x, 0, false, scalar);
      float norm;
      std::memcpy(&norm, e.payload.data(), 4);
      EXPECT_EQ(norm, want) << m;
    }
  }
}

TEST(Qsgd, IsUnbiased) {
  const int kKeys = 1000;
  std::vector<float> x = RandomNormal(200, 31, 1.0f);
  x[7] = 0.0f;
  for (unsigned bits : {1u, 2u, 4u, 8u}) {
    codec_spec s = Spec(bits, 100);
    Model r0 = Reference(x, s, 0);  // the levels do not depend on the key
    std::vector<double> sum(x.size(), 0.0);
    for (int k = 0; k < kKeys; k++) {
      Encoded e = Encode(s, x, rng_key(77, (uint64_t)k, 3), false, !(k % 2) || !HaveAvx2());  // both paths
      ASSERT_EQ(e.rc, gcclSuccess);
      std::vector<float> d = Decode32(e, false);
      for (size_t i = 0; i < x.size(); i++) sum[i] += d[i];
    }
    for (size_t i = 0; i < x.size(); i++) {
      double step = r0.norm[i / 100] / (double)((1u << bits) - 1);
      double pos = std::fabs((double)x[i]) / step;  // where |x| sits between levels
      double p = pos - std::floor(pos);
      double sigma = step * std::sqrt(p * (1 - p) / kKeys);
      double slack = 1e-5 * step + 4 * FLT_EPSILON * std::fabs(x[i]);
      EXPECT_LE(std::fabs(sum[i] / kKeys - x[i]), 4 * sigma + slack) << "bits " << bits << " at " << i << " p " << p;
    }
  }
}

TEST(Qsgd, VarianceWithinLemma31) {
  // Alistarh et al. Lemma 3.1: E||Q(v) - v||^2 <= min(n / s^2, sqrt(n) / s) ||v||^2.
  const int kKeys = 1000;
  for (size_t n : {1u, 7u, 64u, 512u}) {
    for (int kind = 0; kind < 2; kind++) {
      std::vector<float> x = RandomNormal(n, (uint32_t)n + 100 * kind, 1.0f);
      if (kind == 1) {  // uniform magnitudes in [0, 1), random signs
        std::mt19937 g((uint32_t)n);
        for (auto& v : x) v = (g() & 1 ? -1.0f : 1.0f) * (float)(g() >> 8) * 0x1p-24f;
      }
      double norm2 = 0;
      for (float v : x) norm2 += (double)v * v;
      for (unsigned bits = 1; bits <= 8; bits++) {
        codec_spec s = Spec(bits, (uint32_t)n);
        double err = 0;
        for (int k = 0; k < kKeys; k++) {
          std::vector<float> d = Decode32(Encode(s, x, rng_key(5, (uint64_t)k, 0), false, false), false);
          for (size_t i = 0; i < n; i++) err += ((double)d[i] - x[i]) * ((double)d[i] - x[i]);
        }
        double sl = (double)((1u << bits) - 1);
        double bound = std::min((double)n / (sl * sl), std::sqrt((double)n) / sl) * norm2;
        EXPECT_LE(err / kKeys, bound) << "n " << n << " bits " << bits << " kind " << kind;
      }
    }
  }
}

TEST(Qsgd, NonFiniteInputsBecomeExceptions) {
  const uint32_t B = 64;
  size_t n = 4 * B + 5;
  std::vector<float> x = RandomNormal(n, 51, 1.0f);
  x[0] = kNaN;
  x[31] = kInf;
  x[B - 1] = -kInf;
  for (size_t j = B; j < 2 * B; j++) x[j] = j % 3 == 0 ? kNaN : j % 3 == 1 ? kInf : -kInf;  // a whole bucket
  x[2 * B] = -kNaN;
  x[n - 1] = kInf;
  std::vector<uint64_t> want{0, 31, B - 1};
  for (size_t j = B; j < 2 * B; j++) want.push_back(j);
  want.push_back(2 * B);
  want.push_back(n - 1);
  codec_spec s = Spec(4, B);
  CheckAgainstModel(x, s, 5, "non-finite");
  // The other elements decode exactly as when the non-finite ones are 0 (the
  // norm is over the finite values).
  std::vector<float> y = x;
  for (uint64_t i : want) y[i] = 0.0f;
  std::vector<bool> is_exc(n, false);
  for (uint64_t i : want) is_exc[i] = true;
  for (bool scalar : Paths()) {
    Encoded e = Encode(s, x, 5, true, scalar);
    ASSERT_EQ(e.exc, want);
    std::vector<float> d = Decode32(e, scalar), dy = Decode32(Encode(s, y, 5, false, scalar), scalar);
    for (size_t i = 0; i < n; i++) {
      if (is_exc[i]) {
        EXPECT_EQ(d[i], 0.0f) << i;
        EXPECT_EQ(e.resid[i], 0.0f) << i;
      } else {
        EXPECT_EQ(d[i], dy[i]) << i;
        EXPECT_EQ(e.resid[i], x[i] - d[i]) << i;
      }
    }
  }
  CheckAgainstModel(std::vector<float>(10, kNaN), Spec(8, 4), 0, "all NaN");
}

TEST(Qsgd, OverflowingNormSendsTheBucketAsExceptions) {
  const uint32_t B = 16;
  std::vector<float> x = RandomNormal(4 * B, 61, 1.0f);
  x[B + 2] = FLT_MAX;  // bucket 1: the sum of squares overflows
  x[B + 9] = -FLT_MAX;
  x[2 * B + 1] = kNaN;  // bucket 2: a NaN (pushed first) and an overflow from many 1e19s
  for (size_t j = 2 * B + 2; j < 3 * B; j++) x[j] = (j % 2 ? 1e19f : -1e19f);
  std::vector<uint64_t> want;
  for (uint64_t i = B; i < 3 * B; i++) want.push_back(i);
  for (bool scalar : Paths()) {
    Encoded e = Encode(Spec(5, B), x, 0, true, scalar);
    ASSERT_EQ(e.rc, gcclSuccess);
    EXPECT_EQ(e.exc, want);
    size_t per = 4 + (B * 6 + 7) / 8;
    for (size_t b = 1; b < 3; b++)
      for (size_t i = 0; i < per; i++) EXPECT_EQ(e.payload[b * per + i], 0) << b << " " << i;
    for (uint64_t i : want) EXPECT_EQ(e.resid[i], 0.0f) << i;
    for (float v : Decode32(e, scalar)) EXPECT_TRUE(std::isfinite(v));
  }
  CheckAgainstModel(x, Spec(5, B), 0, "overflow");
  // Just below: 1.8e19 squared stays finite.
  std::vector<float> y{1.8e19f, 0.0f, -1.0f, 3.0f};
  CheckAgainstModel(y, Spec(8, 4), 0, "near overflow");
  EXPECT_TRUE(Encode(Spec(8, 4), y, 0, false, false).exc.empty());
}

TEST(Qsgd, TinyNorms) {
  // Squares underflow (norm 0 or denormal-derived, s / norm may overflow): every
  // decoded value stays finite and within the bucket's scale.
  std::vector<float> x{1e-45f, -3e-45f, 0.0f,  2e-45f, 1e-22f, -1.5e-22f, 0.0f,    1e-23f,
                       -0.0f,  0.0f,    -0.0f, -0.0f,  1e-38f, 1.1e-38f,  -1e-38f, 0.0f};
  for (unsigned bits = 1; bits <= 8; bits++) {
    CheckAgainstModel(x, Spec(bits, 4), 3, "tiny bits " + std::to_string(bits));
    std::vector<float> d = Decode32(Encode(Spec(bits, 4), x, 3, false, false), false);
    for (size_t i = 0; i < x.size(); i++) EXPECT_LE(std::fabs(d[i] - x[i]), 4e-22f) << i;
  }
}

TEST(Qsgd, ScalarAndAvx2AreBitIdentical) {
  if (!HaveAvx2()) GTEST_SKIP() << "no AVX2";
  std::mt19937 g(71);
  for (int trial = 0; trial < 200; trial++) {
    unsigned bits = 1 + trial % 8;
    uint32_t bucket = std::vector<uint32_t>{1, 5, 8, 31, 32, 33, 100, 512, 1000, 1025}[trial % 10];
    size_t n = g() % 3000;
    std::vector<float> x = RandomNormal(n, g(), trial % 4 ? 1.0f : 1e-20f, trial % 5 ? 0.0f : 10.0f);
    if (n > 10 && trial % 7 == 0) x[g() % n] = kNaN;
    codec_spec s = Spec(bits, bucket);
    uint64_t key = ((uint64_t)g() << 32) | g();
    for (bool ef : {false, true}) {
      Encoded a = Encode(s, x, key, ef, true), b = Encode(s, x, key, ef, false);
      ASSERT_EQ(a.payload, b.payload) << trial;
      ASSERT_EQ(a.exc, b.exc) << trial;
      ExpectSameBits(a.resid, b.resid, "resid");
      for (gcclDataType_t dt : {gcclFloat32, gcclFloat64, gcclFloat16, gcclBfloat16}) {
        std::vector<uint8_t> dst = MakeDst(dt, RandomNormal(n, trial));
        ASSERT_EQ(Decode(a, dt, dst, true), Decode(a, dt, dst, false)) << trial << " dtype " << dt;
      }
    }
  }
}

TEST(Qsgd, ValidateRejectsCorruptPayloads) {
  for (unsigned bits : {1u, 3u, 4u, 7u, 8u}) {
    SCOPED_TRACE("bits " + std::to_string(bits));
    unsigned w = bits + 1;
    std::vector<float> x = RandomNormal(100, 81, 1.0f);
    Encoded e = Encode(Spec(bits, 16), x, 0, false, false);  // 7 buckets, the last of 4 elements
    ASSERT_EQ(e.rc, gcclSuccess);
    for (bool scalar : Paths()) {
      ForceScalar fs(scalar);
      ASSERT_EQ(ops.validate(&e.h, e.payload.data()), gcclSuccess) << err_last();
    }
    size_t per = 4 + (16 * w + 7) / 8;
    auto rejects = [&](const std::vector<uint8_t>& p, frame_header h, const char* what) {
      for (bool scalar : Paths()) {
        ForceScalar fs(scalar);
        // An exact-size heap copy, so ASan sees any read past the payload.
        std::unique_ptr<uint8_t[]> buf(new uint8_t[p.size() + 1]);
        if (!p.empty()) std::memcpy(buf.get(), p.data(), p.size());
        EXPECT_EQ(ops.validate(&h, buf.get()), gcclCorruptData) << what;
      }
    };
    auto with_norm = [&](size_t bucket, float norm) {
      std::vector<uint8_t> p = e.payload;
      std::memcpy(&p[bucket * per], &norm, 4);
      return p;
    };
    frame_header h = e.h;
    h.payload_bytes--;
    rejects(std::vector<uint8_t>(e.payload.begin(), e.payload.end() - 1), h, "one byte short");
    h.payload_bytes += 2;
    std::vector<uint8_t> longer = e.payload;
    longer.push_back(0);
    rejects(longer, h, "one byte long");
    h = e.h;
    h.count = 95;
    rejects(e.payload, h, "count does not match");
    h = e.h;
    h.count = UINT64_MAX;
    h.bucket = 1;
    rejects(e.payload, h, "size overflows");
    rejects(with_norm(0, kNaN), e.h, "NaN norm");
    rejects(with_norm(3, kInf), e.h, "inf norm");
    rejects(with_norm(6, -1.0f), e.h, "negative norm");
    rejects(with_norm(2, -0.0f), e.h, "-0 norm");
    if (bits == 7) rejects(with_norm(2, FLT_MAX), e.h, "top level overflows");  // 127 * (FLT_MAX / 127) = inf
    std::vector<uint8_t> pad = e.payload;
    ASSERT_EQ(pad.size(), e.h.payload_bytes);
    pad[pad.size() - 1] |= 0x80;  // 4 codes of w bits leave 8 - 4w % 8 pad bits (w = 4, 8: none)
    if ((4 * w) % 8) rejects(pad, e.h, "pad bit set");
    // A code with the sign set and level 0, at element 0 and at the last element.
    for (size_t j : {(size_t)0, (size_t)99}) {
      std::vector<uint8_t> p = e.payload;
      size_t b = j / 16, k = j % 16;
      for (unsigned t = 0; t < w; t++) {
        size_t bit = k * w + t;
        uint8_t& byte = p[b * per + 4 + bit / 8];
        byte = (uint8_t)(t == bits ? byte | (1u << (bit % 8)) : byte & ~(1u << (bit % 8)));
      }
      rejects(p, e.h, "sign with level 0");
    }
    EXPECT_EQ(ops.validate(&e.h, with_norm(2, 0.0f).data()), gcclSuccess);  // norm 0 is legal
  }
  Encoded z = Encode(Spec(3, 16), {}, 0, false, false);
  EXPECT_EQ(z.h.payload_bytes, 0u);
  EXPECT_EQ(ops.validate(&z.h, z.payload.data()), gcclSuccess);
}

TEST(Qsgd, PayloadBoundIsExactAndSaturates) {
  codec_spec s = Spec(3, 512);  // 4-bit codes
  EXPECT_EQ(ops.payload_bound(&s, 0), 0u);
  EXPECT_EQ(ops.payload_bound(&s, 1), 5u);
  EXPECT_EQ(ops.payload_bound(&s, 512), 4u + 256u);
  EXPECT_EQ(ops.payload_bound(&s, 1025), 2 * 260u + 5u);
  codec_spec one = Spec(8, 1);
  EXPECT_EQ(ops.payload_bound(&one, SIZE_MAX / 2), SIZE_MAX);
}

}  // namespace
