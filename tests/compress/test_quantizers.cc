// test_quantizers.cc — the two multi-bit bucket quantizers, uniform (compress/codec_uniform.c)
// and qsgd (compress/codec_qsgd.c), against scalar models of their frames: one
// parametrised suite for the properties they share, then each codec's own.
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

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

bool HaveAvx2() {
  return __builtin_cpu_supports("avx2");
}

// Runs the codecs' portable scalar paths while alive.
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

// The frame a codec must write, element by element from the formulas at the top
// of its file.
struct Model {
  std::vector<uint8_t> payload;
  std::vector<uint64_t> exc;
  std::vector<float> dec;       // decoded value, 0 at exceptions
  std::vector<float> mn, step;  // uniform: per bucket
  std::vector<float> norm;      // qsgd: per bucket
};

// ---- uniform's model -------------------------------------------------------------------

codec_spec UniformSpec(unsigned bits, uint32_t bucket, bool stochastic) {
  codec_spec s;
  std::string text = "uniform:bits=" + std::to_string(bits) + ",bucket=" + std::to_string(bucket) +
                     ",round=" + (stochastic ? "stochastic" : "nearest");
  EXPECT_EQ(spec_parse(text.c_str(), &s), gcclSuccess) << text;
  return s;
}

// Written with floor and clamp as codec_uniform.c's comment states them.
Model UniformReference(const std::vector<float>& x, const codec_spec& s, uint64_t key) {
  Model r;
  size_t n = x.size(), bucket = s.bucket;
  unsigned L = (1u << s.bits) - 1;
  float lf = (float)L;
  r.dec.assign(n, 0.0f);
  for (size_t base = 0; base < n; base += bucket) {
    size_t m = std::min(bucket, n - base);
    std::vector<uint64_t> bexc;
    float lo = 0, hi = 0;
    bool any = false;
    for (size_t j = 0; j < m; j++) {
      float v = x[base + j];
      if (!std::isfinite(v)) {
        bexc.push_back(base + j);
      } else if (!any) {
        lo = hi = v;
        any = true;
      } else {
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
    }
    lo += 0.0f;
    hi += 0.0f;
    float range = hi - lo, step = range / lf;
    std::vector<uint8_t> codes((m * s.bits + 7) / 8, 0);
    if (!std::isfinite(range) || !std::isfinite(lo + lf * step)) {
      lo = hi = step = 0.0f;
      bexc.clear();
      for (size_t j = 0; j < m; j++) bexc.push_back(base + j);
    } else {
      float inv = range > 0 ? lf / range : 0.0f;
      if (!std::isfinite(inv)) inv = 0.0f;
      for (size_t j = 0; j < m; j++) {
        float v = std::isfinite(x[base + j]) ? x[base + j] : 0.0f;
        float u = s.round == SPEC_ROUND_STOCHASTIC ? rng_uniform16(key, base + (j & ~size_t{15}) + j % 8, (j >> 3) & 1)
                                                   : 0.5f;
        float t = std::floor((v - lo) * inv + u);
        unsigned q = t < 0 ? 0u : t > lf ? L : (unsigned)t;
        for (unsigned b = 0; b < s.bits; b++)
          if ((q >> b) & 1) codes[(j * s.bits + b) / 8] |= (uint8_t)(1u << ((j * s.bits + b) % 8));
        r.dec[base + j] = lo + (float)q * step;
      }
    }
    for (uint64_t e : bexc) r.dec[e] = 0.0f;
    r.exc.insert(r.exc.end(), bexc.begin(), bexc.end());
    r.mn.push_back(lo);
    r.step.push_back(step);
    uint8_t meta[8];
    std::memcpy(meta, &lo, 4);
    std::memcpy(meta + 4, &hi, 4);
    r.payload.insert(r.payload.end(), meta, meta + 8);
    r.payload.insert(r.payload.end(), codes.begin(), codes.end());
  }
  return r;
}

// ---- qsgd's model ----------------------------------------------------------------------

codec_spec QsgdSpec(unsigned bits, uint32_t bucket, bool /* qsgd always rounds stochastically */) {
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

Model QsgdReference(const std::vector<float>& x, const codec_spec& s, uint64_t key) {
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

// ---- what differs between the two --------------------------------------------------------

struct Quantizer {
  const char* name;
  const codec_ops* ops;
  codec_id id;
  unsigned meta_bytes;                   // per bucket
  unsigned (*code_bits)(unsigned bits);  // per element
  std::vector<bool> roundings;           // stochastic flags a test tries
  codec_spec (*spec)(unsigned bits, uint32_t bucket, bool stochastic);
  Model (*reference)(const std::vector<float>& x, const codec_spec& s, uint64_t key);
  // MatchesModel: values worth a look (a repeated value or magnitude, a signed zero).
  void (*vary)(std::vector<float>& x);
  // NonFinite: a finite stand-in for non-finite x[i] (B elements a bucket, n in
  // all) under which the other elements decode exactly as they do now.
  float (*stand_in)(const std::vector<float>& x, uint64_t i, size_t B, size_t n);
  // Overflow: buckets 1 and 2 (of B) made to overflow the bucket's scale.
  void (*overflow)(std::vector<float>& x, size_t B);
  // Tiny: scales near the bottom of fp32, and how far a decoded value may be off.
  std::vector<float> tiny;
  float tiny_tol;
  // Unbiased: the bits tried, values worth a look, and where x sits between the
  // two levels it rounds to (step and position in steps) under model r0.
  std::vector<unsigned> unbiased_bits;
  void (*vary_unbiased)(std::vector<float>& x);
  void (*grid)(const Model& r0, size_t bucket, unsigned bits, float x, double* step, double* pos);
  // Validate: the bits tried, and a count that does not match the 100 encoded.
  std::vector<unsigned> validate_bits;
  uint64_t wrong_count;
  // payload_bound of bits=3, bucket=512 for 1, 512 and 1025 elements.
  size_t bound1, bound512, bound1025;
};

const Quantizer kUniform = {
    "uniform",
    &codec_uniform_ops,
    CODEC_UNIFORM,
    8,                                   // min and max
    [](unsigned bits) { return bits; },  // code bits
    {false, true},                       // round=nearest and round=stochastic
    UniformSpec,
    UniformReference,
    [](std::vector<float>& x) {
      size_t n = x.size();
      if (n > 5) x[n / 2] = x[n / 3];  // a repeated value
    },
    // A value already in the bucket: min and max unchanged.
    [](const std::vector<float>& x, uint64_t i, size_t B, size_t n) {
      return i < B ? x[1] : i < 2 * B ? 0.0f : i < 3 * B ? x[2 * B + 1] : x[n - 2];
    },
    [](std::vector<float>& x, size_t B) {
      x[B + 2] = FLT_MAX;
      x[B + 9] = -FLT_MAX;  // bucket 1: max - min = inf
      x[2 * B + 1] = kNaN;  // bucket 2: a NaN (pushed first) and an overflow
      x[2 * B + 5] = -3e38f;
      x[2 * B + 6] = 3e38f;
    },
    // Denormal ranges (L / r overflows: inv becomes 0), constant buckets, signed zeros.
    {1e-45f, 3e-45f, 0.0f, 2e-45f, 5.0f, 5.0f, 5.0f, 5.0f, -0.0f, 0.0f, -0.0f, -0.0f, 1e-38f, 1.1e-38f, -1e-38f, 0.0f},
    2.2e-38f,
    {1u, 2u, 4u},  // unbiased_bits
    // min, max and a repeated value land on the grid: zero variance there
    [](std::vector<float>& x) { x[3] = x[4]; },
    [](const Model& r0, size_t b, unsigned, float x, double* step, double* pos) {
      *step = r0.step[b];
      *pos = ((double)x - r0.mn[b]) / *step;
    },
    {5u},         // validate_bits
    99,           // wrong_count
    9,            // bound1
    8 + 192,      // bound512
    2 * 200 + 9,  // bound1025
};

const Quantizer kQsgd = {
    "qsgd",
    &codec_qsgd_ops,
    CODEC_QSGD,
    4,                                       // norm
    [](unsigned bits) { return bits + 1; },  // code bits: level and sign
    {true},                                  // always stochastic
    QsgdSpec,
    QsgdReference,
    [](std::vector<float>& x) {
      size_t n = x.size();
      if (n > 5) x[n / 2] = -x[n / 3];  // a repeated magnitude
      if (n > 9) x[9] = -0.0f;          // sign of zero: l = 0, so neg = 0
    },
    // 0: the norm is over the finite values.
    [](const std::vector<float>&, uint64_t, size_t, size_t) { return 0.0f; },
    [](std::vector<float>& x, size_t B) {
      x[B + 2] = FLT_MAX;  // bucket 1: the sum of squares overflows
      x[B + 9] = -FLT_MAX;
      x[2 * B + 1] = kNaN;  // bucket 2: a NaN (pushed first) and an overflow from many 1e19s
      for (size_t j = 2 * B + 2; j < 3 * B; j++) x[j] = (j % 2 ? 1e19f : -1e19f);
    },
    // Squares underflow (norm 0 or denormal-derived, s / norm may overflow).
    {1e-45f, -3e-45f, 0.0f, 2e-45f, 1e-22f, -1.5e-22f, 0.0f, 1e-23f, -0.0f, 0.0f, -0.0f, -0.0f, 1e-38f, 1.1e-38f,
     -1e-38f, 0.0f},
    4e-22f,
    {1u, 2u, 4u, 8u},  // unbiased_bits
    [](std::vector<float>& x) { x[7] = 0.0f; },
    [](const Model& r0, size_t b, unsigned bits, float x, double* step, double* pos) {
      *step = r0.norm[b] / (double)((1u << bits) - 1);
      *pos = std::fabs((double)x) / *step;  // where |x| sits between levels
    },
    {1u, 3u, 4u, 7u, 8u},  // validate_bits
    95,                    // wrong_count
    5,                     // bound1
    4 + 256,               // bound512
    2 * 260 + 5,           // bound1025
};

// ---- encode, decode and the model check, for either codec -------------------------------------

struct Encoded {
  gcclResult_t rc = gcclInternalError;
  std::vector<uint8_t> payload;
  frame_header h{};
  std::vector<uint64_t> exc;
  std::vector<float> resid;
};

Encoded Encode(const Quantizer& q, const codec_spec& s, const std::vector<float>& x, uint64_t key, bool ef,
               bool scalar) {
  ForceScalar fs(scalar);
  const codec_ops& ops = *q.ops;
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
  e.h.codec = q.id;
  e.h.dtype = gcclFloat32;
  e.h.count = n;
  e.h.bits = 77;  // the codec must overwrite these
  e.h.rng_key = 5;
  e.h.flags = 9;
  size_t bytes = ~(size_t)0;
  e.rc = ops.encode(&ctx, buf.data(), ef ? buf.data() : nullptr, n, e.payload.data(), &bytes, &e.h);
  EXPECT_EQ(bytes, bound);  // the size is exact
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
std::vector<uint8_t> Decode(const Quantizer& q, const Encoded& e, gcclDataType_t dt, const std::vector<uint8_t>& dst,
                            bool scalar) {
  ForceScalar fs(scalar);
  frame_header h = e.h;
  h.dtype = dt;
  std::vector<uint8_t> out = dst;
  EXPECT_EQ(q.ops->validate(&h, e.payload.data()), gcclSuccess) << err_last();
  EXPECT_EQ(q.ops->decode_accumulate(&h, e.payload.data(), e.exc.data(), e.exc.size(), out.data()), gcclSuccess);
  return out;
}

std::vector<float> Decode32(const Quantizer& q, const Encoded& e, bool scalar) {
  std::vector<uint8_t> d = Decode(q, e, gcclFloat32, MakeDst(gcclFloat32, std::vector<float>(e.h.count, 0.0f)), scalar);
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
void CheckAgainstModel(const Quantizer& q, const std::vector<float>& x, const codec_spec& s, uint64_t key,
                       const std::string& what) {
  Model r = q.reference(x, s, key);
  for (bool scalar : Paths()) {
    for (bool ef : {false, true}) {
      SCOPED_TRACE(what + (scalar ? " scalar" : " avx2") + (ef ? " ef" : ""));
      Encoded e = Encode(q, s, x, key, ef, scalar);
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
      for (bool dscalar : Paths()) ExpectSameBits(Decode32(q, e, dscalar), want, "decode");
    }
  }
}

std::string RoundName(bool stochastic) {
  return stochastic ? " stochastic" : " nearest";
}

// ---- the properties both share -------------------------------------------------------------

class Quantizers : public ::testing::TestWithParam<const Quantizer*> {};

TEST_P(Quantizers, MatchesModelForEveryBitsBucketAndCount) {
  const Quantizer& q = *GetParam();
  for (unsigned bits = 1; bits <= 8; bits++) {
    for (uint32_t bucket : {1u, 3u, 512u, 0u}) {  // 0: larger than n
      std::vector<size_t> counts{0, 1, 7, 1003};
      if (bucket) counts.insert(counts.end(), {bucket - 1, bucket, bucket + 1, 3 * (size_t)bucket + 77});
      for (size_t n : counts) {
        uint32_t b = bucket ? bucket : (uint32_t)n + 5;
        for (bool stochastic : q.roundings) {
          std::vector<float> x = RandomNormal(n, (uint32_t)(n * 31 + bits), 0.01f, bits % 2 ? 0.0f : 0.003f);
          q.vary(x);
          CheckAgainstModel(q, x, q.spec(bits, b, stochastic), 0x1234567890ABCDEFull + n,
                            "bits=" + std::to_string(bits) + " bucket=" + std::to_string(b) +
                                " n=" + std::to_string(n) + RoundName(stochastic));
        }
      }
    }
  }
}

TEST_P(Quantizers, LargeTensorWithBucketsAboveTheDecodeChunk) {
  // Buckets of 3000 and 100000 decode in several 1024-element chunks.
  const Quantizer& q = *GetParam();
  std::vector<float> x = RandomNormal(250007, 7, 3.0f, -1.0f);
  for (unsigned bits : {1u, 2u, 3u, 4u, 7u, 8u}) {
    CheckAgainstModel(q, x, q.spec(bits, 3000, false), 1, "bucket 3000 bits " + std::to_string(bits));
    CheckAgainstModel(q, x, q.spec(bits, 100000, true), 2, "bucket 100000 bits " + std::to_string(bits));
  }
}

TEST_P(Quantizers, DecodeAccumulatesIntoEveryDtype) {
  const Quantizer& q = *GetParam();
  std::vector<float> x = RandomNormal(2053, 11, 2.0f);
  x[5] = kNaN;
  x[700] = kInf;
  std::vector<float> init = RandomNormal(x.size(), 12, 4.0f);
  for (unsigned bits : {2u, 3u, 4u, 7u, 8u}) {
    codec_spec s = q.spec(bits, 256, bits == 4);
    Model r = q.reference(x, s, 99);
    Encoded e = Encode(q, s, x, 99, false, false);
    ASSERT_EQ(e.rc, gcclSuccess);
    ASSERT_EQ(e.exc, (std::vector<uint64_t>{5, 700}));
    for (gcclDataType_t dt : {gcclFloat32, gcclFloat64, gcclFloat16, gcclBfloat16}) {
      std::vector<uint8_t> dst = MakeDst(dt, init);
      std::vector<uint8_t> want = AddExpected(dt, dst, r.dec, r.exc);
      for (bool scalar : Paths()) {
        std::vector<uint8_t> got = Decode(q, e, dt, dst, scalar);
        EXPECT_EQ(got, want) << "dtype " << dt << " bits " << bits << (scalar ? " scalar" : " avx2");
      }
    }
  }
}

TEST_P(Quantizers, StochasticRoundingIsUnbiased) {
  const Quantizer& q = *GetParam();
  const int kKeys = 1000;
  std::vector<float> x = RandomNormal(200, 31, 1.0f);
  q.vary_unbiased(x);
  for (unsigned bits : q.unbiased_bits) {
    codec_spec s = q.spec(bits, 100, true);
    Model r0 = q.reference(x, s, 0);  // the levels do not depend on the key
    std::vector<double> sum(x.size(), 0.0);
    for (int k = 0; k < kKeys; k++) {
      uint64_t key = rng_key(77, (uint64_t)k, 3);
      Encoded e = Encode(q, s, x, key, false, !(k % 2) || !HaveAvx2());  // both paths
      ASSERT_EQ(e.rc, gcclSuccess);
      std::vector<float> d = Decode32(q, e, false);
      for (size_t i = 0; i < x.size(); i++) sum[i] += d[i];
    }
    for (size_t i = 0; i < x.size(); i++) {
      double step, pos;
      q.grid(r0, i / 100, bits, x[i], &step, &pos);
      double p = pos - std::floor(pos);
      double sigma = step * std::sqrt(p * (1 - p) / kKeys);
      double mean = sum[i] / kKeys;
      double slack = 1e-5 * step + 4 * FLT_EPSILON * std::fabs(x[i]);
      EXPECT_LE(std::fabs(mean - x[i]), 4 * sigma + slack) << "bits " << bits << " at " << i << " p " << p;
    }
  }
}

TEST_P(Quantizers, NonFiniteInputsBecomeExceptions) {
  const Quantizer& q = *GetParam();
  const uint32_t B = 64;
  size_t n = 4 * B + 5;
  std::vector<float> x = RandomNormal(n, 51, 1.0f);
  x[0] = kNaN;       // first of the tensor and of bucket 0
  x[31] = kInf;      // middle
  x[B - 1] = -kInf;  // last of bucket 0
  for (size_t j = B; j < 2 * B; j++) x[j] = j % 3 == 0 ? kNaN : j % 3 == 1 ? kInf : -kInf;  // a whole bucket
  x[2 * B] = -kNaN;                                                                         // first of bucket 2
  x[n - 1] = kInf;                                                                          // last of the tensor
  std::vector<uint64_t> want{0, 31, B - 1};
  for (size_t j = B; j < 2 * B; j++) want.push_back(j);
  want.push_back(2 * B);
  want.push_back(n - 1);
  std::vector<bool> is_exc(n, false);
  for (uint64_t i : want) is_exc[i] = true;
  for (bool stochastic : q.roundings) {
    codec_spec s = q.spec(4, B, stochastic);
    CheckAgainstModel(q, x, s, 5, "non-finite" + RoundName(stochastic));
    // The other elements decode exactly as when the non-finite ones are replaced
    // by the codec's stand-in.
    std::vector<float> y = x;
    for (uint64_t i : want) y[i] = q.stand_in(x, i, B, n);
    for (bool scalar : Paths()) {
      Encoded e = Encode(q, s, x, 5, true, scalar);
      ASSERT_EQ(e.exc, want);
      std::vector<float> d = Decode32(q, e, scalar);
      std::vector<float> dy = Decode32(q, Encode(q, s, y, 5, false, scalar), scalar);
      for (size_t i = 0; i < n; i++) {
        if (is_exc[i]) {
          EXPECT_EQ(d[i], 0.0f) << i;  // the codec adds nothing there
          EXPECT_EQ(e.resid[i], 0.0f) << i;
        } else {
          EXPECT_EQ(d[i], dy[i]) << i;
          EXPECT_EQ(e.resid[i], x[i] - d[i]) << i;
        }
      }
    }
  }
  // Nothing finite at all.
  CheckAgainstModel(q, std::vector<float>(10, kNaN), q.spec(8, 4, false), 0, "all NaN");
}

TEST_P(Quantizers, OverflowingScaleSendsTheBucketAsExceptions) {
  const Quantizer& q = *GetParam();
  const uint32_t B = 16;
  std::vector<float> x = RandomNormal(4 * B, 61, 1.0f);
  q.overflow(x, B);
  std::vector<uint64_t> want;
  for (uint64_t i = B; i < 3 * B; i++) want.push_back(i);
  for (bool scalar : Paths()) {
    Encoded e = Encode(q, q.spec(5, B, false), x, 0, true, scalar);
    ASSERT_EQ(e.rc, gcclSuccess);
    EXPECT_EQ(e.exc, want);
    size_t per = q.meta_bytes + (B * q.code_bits(5) + 7) / 8;
    for (size_t b = 1; b < 3; b++)
      for (size_t i = 0; i < per; i++) EXPECT_EQ(e.payload[b * per + i], 0) << b << " " << i;
    for (uint64_t i : want) EXPECT_EQ(e.resid[i], 0.0f) << i;
    std::vector<float> d = Decode32(q, e, scalar);
    for (size_t i = 0; i < x.size(); i++) EXPECT_TRUE(std::isfinite(d[i])) << i;
  }
  CheckAgainstModel(q, x, q.spec(5, B, false), 0, "overflow");
}

TEST_P(Quantizers, TinyScales) {
  // Every decoded value stays finite and within the codec's tolerance.
  const Quantizer& q = *GetParam();
  const std::vector<float>& x = q.tiny;
  for (unsigned bits = 1; bits <= 8; bits++) {
    for (bool st : q.roundings) {
      CheckAgainstModel(q, x, q.spec(bits, 4, st), 3, "tiny bits " + std::to_string(bits) + RoundName(st));
      std::vector<float> d = Decode32(q, Encode(q, q.spec(bits, 4, st), x, 3, false, false), false);
      for (size_t i = 0; i < x.size(); i++) EXPECT_LE(std::fabs(d[i] - x[i]), q.tiny_tol) << i;
    }
  }
}

TEST_P(Quantizers, ScalarAndAvx2AreBitIdentical) {
  if (!HaveAvx2()) GTEST_SKIP() << "no AVX2";
  const Quantizer& q = *GetParam();
  std::mt19937 g(71);
  for (int trial = 0; trial < 200; trial++) {
    unsigned bits = 1 + trial % 8;
    uint32_t bucket = std::vector<uint32_t>{1, 5, 8, 31, 32, 33, 100, 512, 1000, 1025}[trial % 10];
    size_t n = g() % 3000;
    bool stochastic = trial % 3 == 0;
    std::vector<float> x = RandomNormal(n, g(), trial % 4 ? 1.0f : 1e-20f, trial % 5 ? 0.0f : 10.0f);
    if (n > 10 && trial % 7 == 0) x[g() % n] = kNaN;
    codec_spec s = q.spec(bits, bucket, stochastic);
    uint64_t key = ((uint64_t)g() << 32) | g();
    for (bool ef : {false, true}) {
      Encoded a = Encode(q, s, x, key, ef, true), b = Encode(q, s, x, key, ef, false);
      ASSERT_EQ(a.payload, b.payload) << trial;
      ASSERT_EQ(a.exc, b.exc) << trial;
      ExpectSameBits(a.resid, b.resid, "resid");
      for (gcclDataType_t dt : {gcclFloat32, gcclFloat64, gcclFloat16, gcclBfloat16}) {
        std::vector<uint8_t> dst = MakeDst(dt, RandomNormal(n, trial));
        ASSERT_EQ(Decode(q, a, dt, dst, true), Decode(q, a, dt, dst, false)) << trial << " dtype " << dt;
      }
    }
  }
}

// validate on an exact-size heap copy of p (so ASan sees any read past the
// payload), on every path: gcclCorruptData.
void ExpectRejects(const Quantizer& q, const std::vector<uint8_t>& p, const frame_header& h, const char* what) {
  for (bool scalar : Paths()) {
    ForceScalar fs(scalar);
    std::unique_ptr<uint8_t[]> buf(new uint8_t[p.size() + 1]);
    if (!p.empty()) std::memcpy(buf.get(), p.data(), p.size());
    EXPECT_EQ(q.ops->validate(&h, buf.get()), gcclCorruptData) << what;
  }
}

TEST_P(Quantizers, ValidateRejectsWrongSizesAndPadBits) {
  const Quantizer& q = *GetParam();
  for (unsigned bits : q.validate_bits) {
    SCOPED_TRACE("bits " + std::to_string(bits));
    std::vector<float> x = RandomNormal(100, 81, 1.0f);
    Encoded e = Encode(q, q.spec(bits, 16, false), x, 0, false, false);  // 7 buckets, the last of 4 elements
    ASSERT_EQ(e.rc, gcclSuccess);
    for (bool scalar : Paths()) {
      ForceScalar fs(scalar);
      ASSERT_EQ(q.ops->validate(&e.h, e.payload.data()), gcclSuccess) << err_last();
    }
    frame_header h = e.h;
    h.payload_bytes--;
    ExpectRejects(q, std::vector<uint8_t>(e.payload.begin(), e.payload.end() - 1), h, "one byte short");
    h.payload_bytes += 2;
    std::vector<uint8_t> longer = e.payload;
    longer.push_back(0);
    ExpectRejects(q, longer, h, "one byte long");
    h = e.h;
    h.count = q.wrong_count;
    ExpectRejects(q, e.payload, h, "count does not match");
    h = e.h;
    h.count = UINT64_MAX;
    h.bucket = 1;
    ExpectRejects(q, e.payload, h, "size overflows");
    std::vector<uint8_t> pad = e.payload;
    ASSERT_EQ(pad.size(), e.h.payload_bytes);
    pad[pad.size() - 1] |= 0x80;  // 4 codes of w bits leave 8 - 4w % 8 pad bits (w = 4, 8: none)
    if ((4 * q.code_bits(bits)) % 8) ExpectRejects(q, pad, e.h, "pad bit set");
    // An empty tensor has an empty payload.
    Encoded z = Encode(q, q.spec(bits, 16, false), {}, 0, false, false);
    EXPECT_EQ(z.h.payload_bytes, 0u);
    EXPECT_EQ(q.ops->validate(&z.h, z.payload.data()), gcclSuccess);
  }
}

TEST_P(Quantizers, PayloadBoundIsExactAndSaturates) {
  const Quantizer& q = *GetParam();
  codec_spec s = q.spec(3, 512, false);
  EXPECT_EQ(q.ops->payload_bound(&s, 0), 0u);
  EXPECT_EQ(q.ops->payload_bound(&s, 1), q.bound1);
  EXPECT_EQ(q.ops->payload_bound(&s, 512), q.bound512);
  EXPECT_EQ(q.ops->payload_bound(&s, 1025), q.bound1025);
  codec_spec one = q.spec(8, 1, false);
  EXPECT_EQ(q.ops->payload_bound(&one, SIZE_MAX / 2), SIZE_MAX);
}

INSTANTIATE_TEST_SUITE_P(Codecs, Quantizers, ::testing::Values(&kUniform, &kQsgd),
                         [](const auto& info) { return std::string(info.param->name); });

// ---- uniform's own -------------------------------------------------------------------------

TEST(Uniform, NearestIsWithinHalfAStep) {
  std::vector<float> x = RandomNormal(5000, 21, 1.0f, 0.5f);
  for (unsigned bits = 1; bits <= 8; bits++) {
    codec_spec s = UniformSpec(bits, 512, false);
    Model r = UniformReference(x, s, 0);
    Encoded e = Encode(kUniform, s, x, 0, false, false);
    ASSERT_EQ(e.rc, gcclSuccess);
    std::vector<float> d = Decode32(kUniform, e, false);
    for (size_t i = 0; i < x.size(); i++) {
      size_t b = i / 512;
      float mag = std::max(std::fabs(r.mn[b]), std::fabs(r.mn[b] + (float)((1u << bits) - 1) * r.step[b]));
      float slack = 4 * mag * FLT_EPSILON;
      ASSERT_LE(std::fabs(d[i] - x[i]), r.step[b] / 2 + slack) << "bits " << bits << " at " << i;
    }
  }
}

TEST(Uniform, StochasticLandsOnTheTwoNeighbouringLevels) {
  std::vector<float> x = RandomNormal(1000, 41, 1.0f);
  codec_spec s = UniformSpec(3, 1000, true);
  Model r0 = UniformReference(x, s, 0);
  float mn = r0.mn[0], step = r0.step[0];
  for (uint64_t key : {1ull, 2ull, 0xFFFFFFFFFFFFFFFFull}) {
    std::vector<float> d = Decode32(kUniform, Encode(kUniform, s, x, key, false, false), false);
    size_t up = 0;
    for (size_t i = 0; i < x.size(); i++) {
      float q = std::nearbyint((d[i] - mn) / step);
      ASSERT_TRUE(q >= 0 && q <= 7 && d[i] == 0.0f + (mn + q * step)) << i << ": " << d[i] << " is no level";
      ASSERT_LE(std::fabs(d[i] - x[i]), step * (1 + 1e-5f)) << i;
      up += d[i] > x[i];
    }
    EXPECT_GT(up, 300u);  // rounds up about half the time
    EXPECT_LT(up, 700u);
  }
}

TEST(Uniform, RangesNearFltMax) {
  // A range just below overflow, and one whose top level would round to inf.
  std::vector<float> y{-FLT_MAX / 2, FLT_MAX / 2, 0.0f, 1.0f, FLT_MAX, 0.0f, 1e38f, 2.0f};
  for (unsigned bits = 1; bits <= 8; bits++) {
    CheckAgainstModel(kUniform, y, UniformSpec(bits, 4, false), 0, "near FLT_MAX bits " + std::to_string(bits));
    Encoded e = Encode(kUniform, UniformSpec(bits, 4, false), y, 0, false, false);
    for (float v : Decode32(kUniform, e, false)) EXPECT_TRUE(std::isfinite(v));
    // Both ranges are FLT_MAX: finite, but 31 * (FLT_MAX / 31) rounds to inf.
    if (bits == 5) {
      EXPECT_EQ(e.exc, (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7}));
    } else if (bits == 4) {
      EXPECT_TRUE(e.exc.empty());
    }
  }
}

TEST(Uniform, NegativeZeroMinIsWrittenAsPositiveZero) {
  for (unsigned bits = 1; bits <= 8; bits++) {
    for (bool st : {false, true}) {
      Encoded e = Encode(kUniform, UniformSpec(bits, 4, st), kUniform.tiny, 3, false, false);
      uint32_t mn_bits;  // bucket 2 is {-0, 0, -0, -0}: its min -0 is written as +0
      std::memcpy(&mn_bits, &e.payload[2 * (8 + (4 * bits + 7) / 8)], 4);
      EXPECT_EQ(mn_bits, 0u);
    }
  }
}

TEST(Uniform, ValidateRejectsCorruptMinMax) {
  std::vector<float> x = RandomNormal(100, 81, 1.0f);
  Encoded e = Encode(kUniform, UniformSpec(5, 16, false), x, 0, false, false);  // 7 buckets of 8 + 10 bytes
  ASSERT_EQ(e.rc, gcclSuccess);
  size_t per = 8 + 10;
  auto with_meta = [&](size_t bucket, float mn, float mx) {
    std::vector<uint8_t> p = e.payload;
    std::memcpy(&p[bucket * per], &mn, 4);
    std::memcpy(&p[bucket * per + 4], &mx, 4);
    return p;
  };
  ExpectRejects(kUniform, with_meta(2, kNaN, 1.0f), e.h, "NaN min");
  ExpectRejects(kUniform, with_meta(2, 0.0f, kNaN), e.h, "NaN max");
  ExpectRejects(kUniform, with_meta(0, -kInf, 1.0f), e.h, "-inf min");
  ExpectRejects(kUniform, with_meta(6, 0.0f, kInf), e.h, "inf max");
  ExpectRejects(kUniform, with_meta(3, 2.0f, 1.0f), e.h, "min > max");
  ExpectRejects(kUniform, with_meta(1, -FLT_MAX, FLT_MAX), e.h, "range overflows");
  ExpectRejects(kUniform, with_meta(1, 0.0f, FLT_MAX), e.h, "top level overflows");  // 31 * (FLT_MAX / 31) = inf
  // A bucket of all exceptions (meta 0, 0) is legal.
  EXPECT_EQ(codec_uniform_ops.validate(&e.h, with_meta(2, 0.0f, 0.0f).data()), gcclSuccess);
}

// ---- qsgd's own ----------------------------------------------------------------------------

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
      Encoded e = Encode(kQsgd, QsgdSpec(4, (uint32_t)m, true), x, 0, false, scalar);
      float norm;
      std::memcpy(&norm, e.payload.data(), 4);
      EXPECT_EQ(norm, want) << m;
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
        codec_spec s = QsgdSpec(bits, (uint32_t)n, true);
        double err = 0;
        for (int k = 0; k < kKeys; k++) {
          std::vector<float> d = Decode32(kQsgd, Encode(kQsgd, s, x, rng_key(5, (uint64_t)k, 0), false, false), false);
          for (size_t i = 0; i < n; i++) err += ((double)d[i] - x[i]) * ((double)d[i] - x[i]);
        }
        double sl = (double)((1u << bits) - 1);
        double bound = std::min((double)n / (sl * sl), std::sqrt((double)n) / sl) * norm2;
        EXPECT_LE(err / kKeys, bound) << "n " << n << " bits " << bits << " kind " << kind;
      }
    }
  }
}

TEST(Qsgd, NormNearOverflow) {
  // Just below: 1.8e19 squared stays finite.
  std::vector<float> y{1.8e19f, 0.0f, -1.0f, 3.0f};
  CheckAgainstModel(kQsgd, y, QsgdSpec(8, 4, true), 0, "near overflow");
  EXPECT_TRUE(Encode(kQsgd, QsgdSpec(8, 4, true), y, 0, false, false).exc.empty());
}

TEST(Qsgd, ValidateRejectsCorruptNormsAndCodes) {
  for (unsigned bits : kQsgd.validate_bits) {
    SCOPED_TRACE("bits " + std::to_string(bits));
    unsigned w = bits + 1;
    std::vector<float> x = RandomNormal(100, 81, 1.0f);
    Encoded e = Encode(kQsgd, QsgdSpec(bits, 16, true), x, 0, false, false);  // 7 buckets, the last of 4 elements
    ASSERT_EQ(e.rc, gcclSuccess);
    size_t per = 4 + (16 * w + 7) / 8;
    auto with_norm = [&](size_t bucket, float norm) {
      std::vector<uint8_t> p = e.payload;
      std::memcpy(&p[bucket * per], &norm, 4);
      return p;
    };
    ExpectRejects(kQsgd, with_norm(0, kNaN), e.h, "NaN norm");
    ExpectRejects(kQsgd, with_norm(3, kInf), e.h, "inf norm");
    ExpectRejects(kQsgd, with_norm(6, -1.0f), e.h, "negative norm");
    ExpectRejects(kQsgd, with_norm(2, -0.0f), e.h, "-0 norm");
    if (bits == 7)
      ExpectRejects(kQsgd, with_norm(2, FLT_MAX), e.h, "top level overflows");  // 127 * (FLT_MAX / 127) = inf
    // A code with the sign set and level 0: at element 0, in the middle (40), in
    // a group fewer than 16 bytes before the payload's end (95: the AVX2 kernel's
    // bounded loads) and at the last element (the scalar tail).
    for (size_t j : {(size_t)0, (size_t)40, (size_t)95, (size_t)99}) {
      std::vector<uint8_t> p = e.payload;
      size_t b = j / 16, k = j % 16;
      for (unsigned t = 0; t < w; t++) {
        size_t bit = k * w + t;
        uint8_t& byte = p[b * per + 4 + bit / 8];
        byte = (uint8_t)(t == bits ? byte | (1u << (bit % 8)) : byte & ~(1u << (bit % 8)));
      }
      ExpectRejects(kQsgd, p, e.h, "sign with level 0");
    }
    EXPECT_EQ(codec_qsgd_ops.validate(&e.h, with_norm(2, 0.0f).data()), gcclSuccess);  // norm 0 is legal
  }
}

}  // namespace
