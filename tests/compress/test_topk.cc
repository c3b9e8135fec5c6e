// test_topk.cc — top-k (compress/topk_select.c, codec_topk.c): exact selection against a sort, approx, values, error
// feedback, exceptions, zstd, and hostile frames.
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
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
#include "compress/index_code.h"
#include "compress/spec.h"
#include "compress/topk.h"
}

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

struct Frame {
  gcclResult_t res = gcclSuccess;
  frame_header h{};
  std::vector<unsigned char> payload;
  std::vector<uint64_t> exc;
};

codec_spec Spec(const std::string& text) {
  codec_spec s{};
  EXPECT_EQ(spec_parse(text.c_str(), &s), gcclSuccess) << text;
  return s;
}

// Encodes x with the codec's ops, as the compressor would; with error feedback
// (the spec's ef) x becomes the residual. state_n: the scratch's size (>= x.size()).
Frame Encode(const std::string& spec, std::vector<float>& x, size_t state_n = 0) {
  codec_spec s = Spec(spec);
  const codec_ops& ops = codec_topk_ops;
  Frame f;
  void* st = nullptr;
  f.res = ops.state_create(&s, state_n ? state_n : x.size(), &st);
  if (f.res != gcclSuccess) return f;
  std::vector<unsigned char> buf(ops.payload_bound(&s, x.size()) + 1);
  exc_list exc{};
  encode_ctx ctx{};
  ctx.spec = &s;
  ctx.key = 1;
  ctx.shared_key = 2;
  ctx.exc = &exc;
  ctx.state = st;
  f.h.codec = CODEC_TOPK;
  f.h.dtype = gcclFloat32;
  f.h.count = x.size();
  size_t pb = 0;
  f.res = ops.encode(&ctx, x.data(), s.ef ? x.data() : nullptr, x.size(), buf.data(), &pb, &f.h);
  EXPECT_LE(pb, ops.payload_bound(&s, x.size()));
  f.h.payload_bytes = pb;
  f.payload.assign(buf.begin(), buf.begin() + pb);
  f.exc.assign(exc.idx, exc.idx + exc.n);
  free(exc.idx);
  ops.state_destroy(st);
  return f;
}

// The payload in a heap block of exactly its size, so ASan sees any read past it.
std::unique_ptr<unsigned char[]> Exact(const std::vector<unsigned char>& p) {
  std::unique_ptr<unsigned char[]> c(new unsigned char[p.size() ? p.size() : 1]);
  if (!p.empty()) std::memcpy(c.get(), p.data(), p.size());
  return c;
}

gcclResult_t Validate(const frame_header& h, const std::vector<unsigned char>& payload) {
  auto p = Exact(payload);
  return codec_topk_ops.validate(&h, p.get());
}

// What the payload adds to a zero tensor (exceptions skipped, not added).
std::vector<float> Decode(const Frame& f) {
  std::vector<float> dst(f.h.count, 0.0f);
  auto p = Exact(f.payload);
  EXPECT_EQ(codec_topk_ops.validate(&f.h, p.get()), gcclSuccess) << err_last();
  EXPECT_EQ(codec_topk_ops.decode_accumulate(&f.h, p.get(), f.exc.data(), f.exc.size(), dst.data()), gcclSuccess);
  return dst;
}

// The kept indices of a frame without zstd.
std::vector<uint64_t> Indices(const Frame& f) {
  size_t vals = f.h.k * values_size((spec_values)f.h.values);
  index_reader r;
  index_reader_init(&r, f.payload.data() + vals, f.payload.size() - vals, f.h.count, f.h.k);
  std::vector<uint64_t> out(f.h.k);
  size_t got = 0, step;
  while ((step = index_reader_next(&r, out.data() + got, out.size() - got)) > 0) got += step;
  out.resize(got);
  return out;
}

uint32_t Key(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u & 0x7FFFFFFFu;
}

// The first k eligible elements by (|x| descending, index ascending), as sorted
// indices: a full sort of (inverted key, index) pairs.
std::vector<uint64_t> Reference(const std::vector<float>& x, size_t k, uint32_t exc_key = 0x7F800000u) {
  std::vector<uint64_t> order;
  for (size_t i = 0; i < x.size(); i++)
    if (Key(x[i]) < exc_key) order.push_back((uint64_t)(0x7FFFFFFFu - Key(x[i])) << 32 | i);
  std::sort(order.begin(), order.end());
  order.resize(std::min(k, order.size()));
  for (auto& v : order) v &= 0xFFFFFFFFu;
  std::sort(order.begin(), order.end());
  return order;
}

enum Kind { kNormal, kTies, kAllEqual, kAscending, kDescending, kSpikes, kMostlyZero, kKinds };
const char* kKindNames[] = {"normal", "ties", "all-equal", "ascending", "descending", "spikes", "mostly-zero"};

std::vector<float> Data(Kind kind, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> x(n);
  const float mags[5] = {0.25f, 0.5f, 1.0f, 2.0f, 3.0f};
  for (size_t i = 0; i < n; i++) {
    switch (kind) {
      case kNormal:
        x[i] = normal(rng);
        break;
      case kTies:
        x[i] = mags[rng() % 5] * ((rng() & 1) ? 1.0f : -1.0f);
        break;
      case kAllEqual:
        x[i] = -1.5f;
        break;
      case kAscending:
        x[i] = (float)i * 0.5f;
        break;
      case kDescending:
        x[i] = -(float)(n - i) * 0.25f;
        break;
      case kSpikes:
        x[i] = (i % 97 == 3) ? 100.0f * normal(rng) : 1e-3f * normal(rng);
        break;
      case kMostlyZero:
        x[i] = (rng() % 100 == 0) ? normal(rng) : 0.0f;
        break;
      default:
        break;
    }
  }
  return x;
}

const size_t kSizes[] = {1, 2, 7, 100, 1000, 100003};
const char* kRatios[] = {"0.001", "0.01", "0.1", "0.5", "1"};

// Checks that f keeps exactly `want` with values x[want] (fp32 values) and nothing else.
void ExpectKeeps(const Frame& f, const std::vector<float>& x, const std::vector<uint64_t>& want,
                 const std::string& what) {
  ASSERT_EQ(f.res, gcclSuccess) << what << ": " << err_last();
  ASSERT_EQ(f.h.k, want.size()) << what;
  ASSERT_EQ(Indices(f), want) << what;
  EXPECT_EQ(f.h.payload_bytes, want.size() * 4 + index_code_bytes(x.size(), want.size())) << what;
  std::vector<float> dst = Decode(f);
  std::vector<float> expect(x.size(), 0.0f);
  for (uint64_t i : want) expect[i] = x[i];
  ASSERT_EQ(std::memcmp(dst.data(), expect.data(), x.size() * 4), 0) << what;
}

TEST(Topk, ExactMatchesSortReference) {
  for (int kind = 0; kind < kKinds; kind++) {
    for (size_t n : kSizes) {
      for (const char* ratio : kRatios) {
        std::vector<float> x = Data((Kind)kind, n, 100 + n);
        const std::vector<float> orig = x;
        std::string what = std::string(kKindNames[kind]) + " n=" + std::to_string(n) + " ratio=" + ratio;
        Frame f = Encode(std::string("topk:ef=0,ratio=") + ratio, x);
        EXPECT_EQ(x, orig) << what << ": without error feedback x is untouched";
        EXPECT_EQ(f.h.flags, 0u);
        EXPECT_EQ(f.h.values, (uint8_t)SPEC_VALUES_FP32);
        EXPECT_TRUE(f.exc.empty());
        ExpectKeeps(f, x, Reference(x, sparse_k(std::stod(ratio), n)), what);
      }
    }
  }
}

TEST(Topk, ExactErrorIsAtMostTheAverage) {
  for (Kind kind : {kNormal, kSpikes, kTies}) {
    for (size_t n : kSizes) {
      for (const char* ratio : kRatios) {
        std::vector<float> x = Data(kind, n, 7 + n);
        Frame f = Encode(std::string("topk:ef=0,ratio=") + ratio, x);
        ASSERT_EQ(f.res, gcclSuccess);
        std::vector<float> d = Decode(f);
        double err = 0, norm = 0;
        for (size_t i = 0; i < n; i++) {
          err += ((double)x[i] - d[i]) * ((double)x[i] - d[i]);
          norm += (double)x[i] * x[i];
        }
        double k = (double)sparse_k(std::stod(ratio), n);
        EXPECT_LE(err, (1.0 - k / (double)n) * norm * (1 + 1e-12) + 1e-30) << kKindNames[kind] << " n=" << n;
      }
    }
  }
}

// Hides structure from the 256 sample chunks (white box: chunk s starts at
// floor(s (n - 256) / 255)) so that the threshold guess fails in each way.
TEST(Topk, SampleMisleadingDataStillExact) {
  const size_t n = 1 << 20, k = sparse_k(0.01, n), small = 1 << 18;
  std::vector<bool> sampled(n, false);
  for (size_t s = 0; s < 256; s++)
    for (size_t i = s * (n - 256) / 255, e = i + 256; i < e; i++) sampled[i] = true;
  std::mt19937_64 rng(9);
  std::normal_distribution<float> normal;
  std::vector<std::pair<std::string, std::vector<float>>> cases;
  {  // big values only where the sample looks: too few candidates, retry, then the full radix select
    std::vector<float> x(n);
    for (size_t i = 0; i < n; i++) x[i] = sampled[i] ? 1.0f + normal(rng) : 1e-3f * normal(rng);
    cases.push_back({"sampled-big", x});
  }
  {  // 5 k big values the sample never sees: more candidates than the buffer
    std::vector<float> x(n);
    size_t hidden = 0;
    for (size_t i = 0; i < n; i++) {
      bool big = !sampled[i] && hidden < 5 * k && (i % 7 == 0);
      hidden += big;
      x[i] = big ? 10.0f + normal(rng) : 1e-3f * normal(rng);
    }
    cases.push_back({"hidden-big", x});
  }
  // Ties everywhere: the tie quota keeps them to one pass.
  cases.push_back({"all-equal", Data(kAllEqual, small, 1)});
  cases.push_back({"mostly-zero", Data(kMostlyZero, small, 2)});
  cases.push_back({"ties", Data(kTies, small, 3)});
  for (auto& [name, x] : cases) {
    std::vector<float> a = x;
    Frame f = Encode("topk:ef=0,ratio=0.01", a);
    ExpectKeeps(f, x, Reference(x, sparse_k(0.01, x.size())), name);
    Frame g = Encode("topk:ef=0,ratio=0.01,approx=1", a);
    ASSERT_EQ(g.res, gcclSuccess);
    ASSERT_LE(g.h.k, sparse_k(0.01, x.size())) << name;
    EXPECT_EQ(Indices(g), Reference(x, g.h.k)) << name << ": approx keeps a top set";
  }
}

TEST(Topk, ApproxKeepsATopSetOfAtMostK) {
  for (int kind = 0; kind < kKinds; kind++) {
    for (size_t n : {size_t(1), size_t(2), size_t(7), size_t(100), size_t(1000), size_t(100003), size_t(300007)}) {
      for (const char* ratio : kRatios) {
        if (n == 300007 && kind != kNormal) continue;
        std::vector<float> x = Data((Kind)kind, n, 300 + n);
        std::string what = std::string(kKindNames[kind]) + " n=" + std::to_string(n) + " ratio=" + ratio;
        size_t k = sparse_k(std::stod(ratio), n);
        Frame f = Encode(std::string("topk:ef=0,approx=1,ratio=") + ratio, x);
        ASSERT_EQ(f.res, gcclSuccess) << what;
        ASSERT_LE(f.h.k, k) << what;
        // The kept set is a top set: every kept |x| >= every dropped |x|.
        std::vector<uint64_t> kept = Indices(f);
        ASSERT_EQ(kept.size(), f.h.k);
        std::vector<bool> in(n, false);
        uint32_t min_kept = UINT32_MAX, max_dropped = 0;
        for (uint64_t i : kept) in[i] = true, min_kept = std::min(min_kept, Key(x[i]));
        for (size_t i = 0; i < n; i++)
          if (!in[i]) max_dropped = std::max(max_dropped, Key(x[i]));
        if (!kept.empty() && kept.size() < n) {
          EXPECT_GE(min_kept, max_dropped) << what;
        }
        ExpectKeeps(f, x, Reference(x, f.h.k), what);
        if (n <= 65536) {
          EXPECT_EQ(f.h.k, k) << what << ": small tensors are sampled whole, so exact";
        }
        if (kind == kNormal && n == 300007 && std::stod(ratio) >= 0.01) {
          EXPECT_GE((double)f.h.k, 0.85 * (double)k) << what;
        }
      }
    }
  }
}

// approx=1 as the GPU encoder computes it (topk_sample.h): the threshold t from
// the sample's eligible keys, then the exact top min(k, #{key >= t}). Covers a
// sample that overestimates the share (kept < k) and ones that miss the large
// values (t low: more than k reach it, so exactly k are kept).
TEST(Topk, ApproxKeepsTheTopOfMinKAndTheCountAboveTheSampleThreshold) {
  std::vector<std::pair<std::string, std::vector<float>>> cases;
  for (int kind : {kNormal, kTies, kSpikes, kMostlyZero, kAscending})
    cases.push_back({kKindNames[kind], Data((Kind)kind, 300007, 77 + kind)});
  std::vector<float> hidden = Data(kNormal, 1000003, 9);  // big values between the sampled chunks
  for (size_t i = 100; i < hidden.size(); i += 3907) hidden[i] = 1000.0f + (float)(i % 13);
  cases.push_back({"hidden-big", hidden});
  for (auto& [name, x] : cases) {
    for (const char* ratio : {"0.01", "0.001", "0.1"}) {
      const size_t n = x.size(), k = sparse_k(std::stod(ratio), n);
      ASSERT_TRUE(topk_approx_samples(n, k)) << name;
      std::vector<uint32_t> keys, tmp(TOPK_SAMPLE_CHUNKS * TOPK_SAMPLE_LEN);
      std::vector<size_t> hist(2048);
      for (size_t c = 0; c < TOPK_SAMPLE_CHUNKS; c++)
        for (size_t j = 0; j < TOPK_SAMPLE_LEN; j++) keys.push_back(Key(x[topk_sample_start(c, n) + j]));
      uint32_t t = topk_approx_threshold(keys.data(), keys.size(), n, k, tmp.data(), hist.data());
      size_t reach = 0;
      for (float v : x) reach += Key(v) >= t;
      std::vector<float> a = x;
      Frame f = Encode(std::string("topk:ef=0,approx=1,ratio=") + ratio, a);
      ASSERT_EQ(f.res, gcclSuccess);
      std::string what = name + " ratio=" + ratio;
      EXPECT_EQ(f.h.k, std::min(k, reach)) << what;
      EXPECT_EQ(Indices(f), Reference(x, std::min(k, reach))) << what;
    }
  }
}

TEST(Topk, HalfValuesDecodeToTheRoundedValues) {
  for (const char* vt : {"fp16", "bf16"}) {
    for (size_t n : {size_t(100), size_t(100003)}) {
      std::vector<float> x = Data(kNormal, n, 5);
      for (auto& v : x) v *= 3.3f;
      const std::vector<float> orig = x;
      Frame f = Encode(std::string("topk:ratio=0.05,values=") + vt, x);  // ef on by default
      ASSERT_EQ(f.res, gcclSuccess);
      EXPECT_EQ(f.h.values, (uint8_t)(std::string(vt) == "fp16" ? SPEC_VALUES_FP16 : SPEC_VALUES_BF16));
      std::vector<uint64_t> want = Reference(orig, sparse_k(0.05, n));
      ASSERT_EQ(Indices(f), want);
      EXPECT_EQ(f.h.payload_bytes, want.size() * 2 + index_code_bytes(n, want.size()));
      std::vector<float> d = Decode(f);
      std::vector<bool> in(n, false);
      for (uint64_t i : want) {
        in[i] = true;
        float r =
            std::string(vt) == "fp16" ? half_to_float(float_to_half(orig[i])) : bf16_to_float(float_to_bf16(orig[i]));
        ASSERT_EQ(d[i], r);
        ASSERT_EQ(x[i], orig[i] - r) << "residual";
      }
      for (size_t i = 0; i < n; i++)
        if (!in[i]) {
          ASSERT_TRUE(d[i] == 0.0f && x[i] == orig[i]);
        }
    }
  }
}

TEST(Topk, ValuesBeyondTheCarriedTypeAreExceptions) {
  std::vector<float> x = Data(kNormal, 1000, 6);
  x[10] = 70000.0f;   // rounds to inf in fp16
  x[20] = -65520.0f;  // exactly the fp16 overflow point
  x[30] = 65504.0f;   // the largest fp16: representable
  x[40] = FLT_MAX;    // bf16 overflow
  const std::vector<float> orig = x;
  Frame h = Encode("topk:ratio=0.01,values=fp16", x);
  ASSERT_EQ(h.res, gcclSuccess);
  EXPECT_EQ(h.exc, (std::vector<uint64_t>{10, 20, 40}));
  EXPECT_EQ(Indices(h), Reference(orig, 10, topk_exc_key(SPEC_VALUES_FP16)));
  EXPECT_EQ(x[10], 0.0f);
  EXPECT_EQ(x[20], 0.0f);
  EXPECT_EQ(x[40], 0.0f);
  EXPECT_EQ(Decode(h)[30], 65504.0f);

  x = orig;
  Frame b = Encode("topk:ratio=0.01,values=bf16", x);
  EXPECT_EQ(b.exc, (std::vector<uint64_t>{40}));
  x = orig;
  Frame f = Encode("topk:ratio=0.01", x);
  EXPECT_TRUE(f.exc.empty());
  std::vector<uint64_t> kept = Indices(f);
  for (uint64_t i : std::vector<uint64_t>{10, 20, 30, 40})
    EXPECT_TRUE(std::binary_search(kept.begin(), kept.end(), i)) << i;
}

TEST(Topk, ErrorFeedbackLeavesTheResidual) {
  for (const char* approx : {"0", "1"}) {
    std::vector<float> x = Data(kNormal, 100003, 8);
    const std::vector<float> orig = x;
    Frame f = Encode(std::string("topk:ratio=0.01,approx=") + approx, x);
    ASSERT_EQ(f.res, gcclSuccess);
    std::vector<float> d = Decode(f);
    for (size_t i = 0; i < x.size(); i++) ASSERT_EQ(x[i], orig[i] - d[i]) << i;
    for (uint64_t i : Indices(f)) ASSERT_EQ(x[i], 0.0f);
  }
}

TEST(Topk, NonFiniteValuesAreExceptionsNeverSelected) {
  for (size_t n : {size_t(7), size_t(1000), size_t(100003)}) {
    for (const char* spec : {"topk:ratio=0.1", "topk:ratio=0.1,approx=1", "topk:ratio=1", "topk:ratio=0.001"}) {
      std::vector<float> x = Data(kNormal, n, 11);
      std::vector<uint64_t> bad = {0, 3, n - 1};
      for (size_t i = 17; i < n; i += 997) bad.push_back(i);
      std::sort(bad.begin(), bad.end());
      bad.erase(std::unique(bad.begin(), bad.end()), bad.end());
      for (size_t j = 0; j < bad.size(); j++) x[bad[j]] = j % 3 == 0 ? kNaN : j % 3 == 1 ? kInf : -kInf;
      const std::vector<float> orig = x;
      Frame f = Encode(spec, x);
      ASSERT_EQ(f.res, gcclSuccess);
      EXPECT_EQ(f.exc, bad) << spec << " n=" << n;
      std::vector<uint64_t> kept = Indices(f);
      EXPECT_EQ(kept, Reference(orig, f.h.k)) << spec << " n=" << n;
      if (std::string(spec).find("approx") == std::string::npos) {
        EXPECT_EQ(f.h.k, std::min(sparse_k(std::stod(std::string(spec).substr(11)), n), n - bad.size()));
      }
      for (uint64_t i : bad) EXPECT_EQ(x[i], 0.0f) << "residual at an exception";
      std::vector<float> d = Decode(f);
      for (uint64_t i : bad) EXPECT_EQ(d[i], 0.0f);
    }
  }
  // Nothing finite: nothing kept.
  std::vector<float> x(50, kNaN);
  Frame f = Encode("topk:ratio=0.5", x);
  ASSERT_EQ(f.res, gcclSuccess);
  EXPECT_EQ(f.h.k, 0u);
  EXPECT_EQ(f.h.payload_bytes, 0u);
  EXPECT_EQ(f.exc.size(), 50u);
  EXPECT_EQ(Validate(f.h, f.payload), gcclSuccess);
}

TEST(Topk, EmptyTensor) {
  std::vector<float> x;
  Frame f = Encode("topk:ratio=0.5", x);
  ASSERT_EQ(f.res, gcclSuccess);
  EXPECT_EQ(f.h.k, 0u);
  EXPECT_EQ(f.h.payload_bytes, 0u);
  EXPECT_EQ(Validate(f.h, f.payload), gcclSuccess);
}

TEST(Topk, ScratchForALargerTensorServesASmallerOne) {
  std::vector<float> x = Data(kNormal, 5000, 12);
  Frame f = Encode("topk:ef=0,ratio=0.01", x, 300000);
  ExpectKeeps(f, x, Reference(x, sparse_k(0.01, 5000)), "state of 300000");
  std::vector<float> big(300001, 1.0f);
  codec_spec s = Spec("topk:ratio=0.01");
  void* st = nullptr;
  ASSERT_EQ(codec_topk_ops.state_create(&s, 1000, &st), gcclSuccess);
  exc_list exc{};
  encode_ctx ctx{};
  ctx.spec = &s;
  ctx.exc = &exc;
  ctx.state = st;
  frame_header h{};
  std::vector<unsigned char> buf(codec_topk_ops.payload_bound(&s, big.size()));
  size_t pb;
  EXPECT_EQ(codec_topk_ops.encode(&ctx, big.data(), nullptr, big.size(), buf.data(), &pb, &h), gcclInternalError);
  codec_topk_ops.state_destroy(st);
}

TEST(Topk, DecodeIntoEveryDtypeSkippingExceptions) {
  std::vector<float> x = Data(kNormal, 1000, 13);
  Frame f = Encode("topk:ef=0,ratio=0.05,values=bf16", x);
  ASSERT_EQ(f.res, gcclSuccess);
  std::vector<uint64_t> kept = Indices(f);
  std::vector<float> vals = Decode(f);
  // Pretend the third kept index is also an exception: it must be skipped.
  std::vector<uint64_t> exc = {kept[2]};
  auto p = Exact(f.payload);
  std::vector<float> d32(1000, 1.0f);
  std::vector<double> d64(1000, 1.0);
  std::vector<uint16_t> d16(1000, float_to_half(1.0f)), db16(1000, float_to_bf16(1.0f));
  frame_header h = f.h;
  for (gcclDataType_t dt : {gcclFloat32, gcclFloat64, gcclFloat16, gcclBfloat16}) {
    h.dtype = dt;
    void* dst = dt == gcclFloat32   ? (void*)d32.data()
                : dt == gcclFloat64 ? (void*)d64.data()
                : dt == gcclFloat16 ? (void*)d16.data()
                                    : (void*)db16.data();
    ASSERT_EQ(codec_topk_ops.decode_accumulate(&h, p.get(), exc.data(), exc.size(), dst), gcclSuccess);
  }
  for (size_t i = 0; i < 1000; i++) {
    float v = i == kept[2] ? 0.0f : vals[i];
    ASSERT_EQ(d32[i], 1.0f + v);
    ASSERT_EQ(d64[i], 1.0 + (double)v);
    ASSERT_EQ(d16[i], float_to_half(1.0f + v));
    ASSERT_EQ(db16[i], float_to_bf16(1.0f + v));
  }
}

bool HaveZstd() {
  codec_spec s = Spec("topk:zstd=1");
  void* st = nullptr;
  gcclResult_t r = codec_topk_ops.state_create(&s, 10, &st);
  codec_topk_ops.state_destroy(st);
  return r == gcclSuccess;
}

TEST(Topk, ZstdOnAndOffDecodeTheSame) {
  if (!HaveZstd()) GTEST_SKIP() << "built without zstd";
  const size_t n = 200000;
  std::vector<float> clustered(n, 0.0f);
  for (size_t c = 0; c < n; c += 10000)
    for (size_t i = c; i < c + 150; i++) clustered[i] = 1.0f;
  std::vector<std::pair<std::string, std::vector<float>>> cases = {
      {"normal", Data(kNormal, n, 14)}, {"clustered", clustered}, {"ties", Data(kTies, 1000, 15)}};
  for (auto& [name, x] : cases) {
    for (const char* opts : {"", ",approx=1", ",values=fp16"}) {
      std::vector<float> a = x, b = x;
      Frame plain = Encode(std::string("topk:ratio=0.01") + opts, a);
      Frame z = Encode(std::string("topk:zstd=1,ratio=0.01") + opts, b);
      ASSERT_EQ(z.res, gcclSuccess);
      EXPECT_EQ(plain.h.flags, 0u);
      EXPECT_EQ(Decode(z), Decode(plain)) << name << opts;
      EXPECT_EQ(a, b) << "same residual";
      EXPECT_EQ(z.h.k, plain.h.k);
      if (z.h.flags & FRAME_FLAG_ZSTD)
        EXPECT_LT(z.h.payload_bytes, plain.h.payload_bytes);
      else
        EXPECT_EQ(z.payload, plain.payload);
      if (name == "clustered") {  // runs of neighbours: the index section shrinks by more than half
        size_t vals = z.h.k * values_size((spec_values)z.h.values);
        EXPECT_TRUE(z.h.flags & FRAME_FLAG_ZSTD);
        EXPECT_LT(2 * (z.h.payload_bytes - vals), plain.h.payload_bytes - vals);
      }
    }
  }
}

TEST(Topk, ZstdSectionCorruptionIsRejected) {
  if (!HaveZstd()) GTEST_SKIP() << "built without zstd";
  const size_t n = 100000;
  std::vector<float> x(n, 0.0f);
  for (size_t c = 0; c < n; c += 5000)
    for (size_t i = c; i < c + 50; i++) x[i] = 2.0f;
  Frame z = Encode("topk:ef=0,zstd=1,ratio=0.01", x);
  ASSERT_EQ(z.res, gcclSuccess);
  ASSERT_TRUE(z.h.flags & FRAME_FLAG_ZSTD);
  ASSERT_EQ(Validate(z.h, z.payload), gcclSuccess);
  size_t vals = z.h.k * 4;
  // Every byte of the zstd frame flipped: rejected, or (checksum-free zstd) a legal set.
  for (size_t b = vals; b < z.payload.size(); b++) {
    Frame bad = z;
    bad.payload[b] ^= 0x5A;
    gcclResult_t r = Validate(bad.h, bad.payload);
    if (r == gcclSuccess) {
      std::vector<float> d = Decode(bad);
      EXPECT_EQ(d.size(), n);
    } else {
      EXPECT_EQ(r, gcclCorruptData) << b;
    }
  }
  // Truncated, extended, or the flag on a plain section.
  for (int delta : {-1, 1}) {
    Frame bad = z;
    if (delta < 0)
      bad.payload.pop_back();
    else
      bad.payload.push_back(0);
    bad.h.payload_bytes = bad.payload.size();
    EXPECT_EQ(Validate(bad.h, bad.payload), gcclCorruptData);
  }
  std::vector<float> y = x;
  Frame plain = Encode("topk:ef=0,ratio=0.01", y);
  plain.h.flags = FRAME_FLAG_ZSTD;
  EXPECT_EQ(Validate(plain.h, plain.payload), gcclCorruptData);
}

TEST(Topk, WithoutZstdTheKeyIsRefused) {
  if (HaveZstd()) GTEST_SKIP() << "built with zstd";
  codec_spec s = Spec("topk:zstd=1");
  void* st = nullptr;
  EXPECT_EQ(codec_topk_ops.state_create(&s, 10, &st), gcclInvalidArgument);
  std::vector<float> x = Data(kNormal, 1000, 16);
  {  // encode refuses too, whatever its scratch
    codec_spec plain = Spec("topk:ratio=0.01");
    ASSERT_EQ(codec_topk_ops.state_create(&plain, x.size(), &st), gcclSuccess);
    exc_list exc{};
    encode_ctx ctx{};
    ctx.spec = &s;
    ctx.exc = &exc;
    ctx.state = st;
    frame_header h{};
    std::vector<unsigned char> buf(codec_topk_ops.payload_bound(&s, x.size()));
    size_t pb;
    EXPECT_EQ(codec_topk_ops.encode(&ctx, x.data(), nullptr, x.size(), buf.data(), &pb, &h), gcclInvalidArgument);
    EXPECT_NE(std::string(err_last()).find("without zstd"), std::string::npos);
    codec_topk_ops.state_destroy(st);
  }
  Frame f = Encode("topk:ratio=0.01", x);
  f.h.flags = FRAME_FLAG_ZSTD;
  EXPECT_EQ(Validate(f.h, f.payload), gcclInvalidUsage);
  EXPECT_NE(std::string(err_last()).find("zstd"), std::string::npos);
}

TEST(Topk, ValidateRejectsHostileFrames) {
  std::vector<float> x = Data(kNormal, 1000, 17);
  Frame f = Encode("topk:ef=0,ratio=0.02", x);
  ASSERT_EQ(f.res, gcclSuccess);
  ASSERT_EQ(Validate(f.h, f.payload), gcclSuccess);
  {  // payload one byte short / long
    Frame b = f;
    b.payload.pop_back();
    b.h.payload_bytes--;
    EXPECT_EQ(Validate(b.h, b.payload), gcclCorruptData);
    b = f;
    b.payload.push_back(0);
    b.h.payload_bytes++;
    EXPECT_EQ(Validate(b.h, b.payload), gcclCorruptData);
  }
  for (uint64_t k : std::vector<uint64_t>{f.h.k - 1, f.h.k + 1, f.h.payload_bytes / 4 + 1, f.h.count, 0}) {
    frame_header h = f.h;
    h.k = k;
    EXPECT_EQ(Validate(h, f.payload), gcclCorruptData) << k;
  }
  for (float bad : {kNaN, kInf}) {  // a non-finite value
    Frame b = f;
    put_f32(b.payload.data() + 4 * 3, bad);
    EXPECT_EQ(Validate(b.h, b.payload), gcclCorruptData);
  }
  {  // fp16 NaN value
    std::vector<float> y = x;
    Frame h16 = Encode("topk:ef=0,ratio=0.02,values=fp16", y);
    uint16_t nan16 = 0x7E00;
    std::memcpy(h16.payload.data() + 2, &nan16, 2);
    EXPECT_EQ(Validate(h16.h, h16.payload), gcclCorruptData);
  }
  for (size_t cut = 0; cut < f.payload.size(); cut += 7) {  // truncations
    Frame b = f;
    b.payload.resize(cut);
    b.h.payload_bytes = cut;
    EXPECT_EQ(Validate(b.h, b.payload), gcclCorruptData) << cut;
  }
  {  // every bit of the index section flipped
    size_t vals = f.h.k * 4;
    for (size_t bit = vals * 8; bit < f.payload.size() * 8; bit++) {
      Frame b = f;
      b.payload[bit / 8] ^= (unsigned char)(1u << (bit % 8));
      gcclResult_t r = Validate(b.h, b.payload);
      if (r == gcclSuccess) {
        std::vector<uint64_t> idx = Indices(b);
        ASSERT_EQ(idx.size(), b.h.k);
        for (size_t j = 1; j < idx.size(); j++) ASSERT_GT(idx[j], idx[j - 1]);
        ASSERT_LT(idx.back(), b.h.count);
      } else {
        ASSERT_EQ(r, gcclCorruptData);
      }
    }
  }
  {  // huge counts: sizes overflow-checked, nothing read out of bounds
    frame_header h = f.h;
    for (uint64_t count : std::vector<uint64_t>{UINT64_MAX, UINT64_MAX / 2, UINT64_C(1) << 62}) {
      h.count = count;
      for (uint64_t k : std::vector<uint64_t>{1, f.h.k, count / 3, count}) {
        h.k = k;
        EXPECT_EQ(Validate(h, f.payload), gcclCorruptData) << count << " " << k;
      }
    }
  }
  {  // a legal one-index frame of a 2^62-element tensor validates
    frame_header h{};
    h.codec = CODEC_TOPK;
    h.dtype = gcclFloat32;
    h.count = UINT64_C(1) << 62;
    h.k = 1;
    std::vector<unsigned char> p(4 + index_code_bytes(h.count, 1));
    put_f32(p.data(), 1.5f);
    index_writer w;
    index_writer_init(&w, p.data() + 4, h.count, 1);
    index_writer_put(&w, h.count - 1);
    index_writer_finish(&w);
    h.payload_bytes = p.size();
    EXPECT_EQ(Validate(h, p), gcclSuccess) << err_last();
  }
}

TEST(Topk, ValuesEightAtATimeMatchTheScalarConversions) {
  // Every value a sparse codec may send: finite, below topk_exc_key. Magnitudes
  // from fp32 subnormals through fp16 subnormals to the overflow edge, both signs.
  std::mt19937_64 rng(19);
  for (spec_values vt : {SPEC_VALUES_FP32, SPEC_VALUES_FP16, SPEC_VALUES_BF16}) {
    std::vector<uint32_t> bits;
    for (uint32_t b : {0x00000000u, 0x80000000u, 0x00000001u, 0x33000000u, 0x33000001u, 0x387FC000u, 0x38800000u,
                       0x477FEFFFu, 0x477FE000u, 0x3F800000u, 0x7F7F7FFFu})
      if ((b & 0x7FFFFFFFu) < topk_exc_key(vt)) bits.push_back(b);
    while (bits.size() < 10007) {
      uint32_t b = (uint32_t)rng();
      if ((b & 0x7FFFFFFFu) < topk_exc_key(vt)) bits.push_back(b);
    }
    size_t vs = values_size(vt);
    std::vector<unsigned char> fast(bits.size() * vs), slow(bits.size() * vs);
    std::vector<float> dec(bits.size()), back(bits.size());
    topk_values_put(fast.data(), vt, bits.data(), bits.size(), dec.data());
    topk_values_get(fast.data(), vt, bits.size(), back.data());
    for (size_t j = 0; j < bits.size(); j++) {
      float f;
      std::memcpy(&f, &bits[j], 4);
      float want = values_put(slow.data() + j * vs, vt, f);
      ASSERT_EQ(std::memcmp(&dec[j], &want, 4), 0) << vt << " " << std::hex << bits[j];
      ASSERT_EQ(std::memcmp(&back[j], &want, 4), 0) << vt << " " << std::hex << bits[j];
    }
    ASSERT_EQ(fast, slow);
  }
}

// ---- the filter's AVX2 and portable paths agree ----------------------------------

struct FilterOut {
  gcclResult_t res;
  size_t count;
  std::vector<uint64_t> idx;
  std::vector<uint32_t> bits;
  std::vector<uint64_t> exc;
  bool operator==(const FilterOut& o) const {
    return res == o.res && count == o.count && idx == o.idx && bits == o.bits && exc == o.exc;
  }
};

FilterOut RunFilter(const std::vector<float>& x, uint32_t thr, uint32_t exc_key, size_t quota, size_t cap, int simd) {
  FilterOut o;
  std::vector<uint64_t> idx(cap + 1, 0xAA);
  std::vector<uint32_t> bits(cap + 1, 0xAA);
  exc_list exc{};
  // A copy at an odd offset: the vector loads must not assume alignment.
  std::vector<float> buf(x.size() + 1);
  std::copy(x.begin(), x.end(), buf.begin() + 1);
  o.res =
      topk_filter(buf.data() + 1, x.size(), thr, exc_key, quota, idx.data(), bits.data(), cap, &exc, simd, &o.count);
  size_t got = std::min(o.count, cap);
  o.idx.assign(idx.begin(), idx.begin() + got);
  o.bits.assign(bits.begin(), bits.begin() + got);
  o.exc.assign(exc.idx, exc.idx + exc.n);
  free(exc.idx);
  return o;
}

TEST(Topk, FilterSimdMatchesScalar) {
  std::mt19937_64 rng(18);
  for (size_t n : {0, 1, 7, 8, 9, 31, 32, 33, 63, 100, 1000, 4097, 100003}) {
    std::vector<float> x = Data(kNormal, n, rng());
    for (size_t i = 0; i < n; i++) {
      uint64_t r = rng() % 50;
      if (r == 0) x[i] = kNaN;
      if (r == 1) x[i] = -kInf;
      if (r == 2) x[i] = 1.0f;  // ties at a threshold
      if (r == 3) x[i] = -70000.0f;
    }
    for (uint32_t thr : {0u, Key(1.0f), Key(2.5f), Key(70000.0f)}) {
      for (uint32_t exc_key : {0x7F800000u, topk_exc_key(SPEC_VALUES_FP16)}) {
        if (thr > exc_key) continue;
        for (size_t quota : {size_t(0), size_t(3), n}) {
          for (size_t cap : {size_t(0), size_t(5), n / 20, n}) {
            FilterOut a = RunFilter(x, thr, exc_key, quota, cap, 0);
            FilterOut b = RunFilter(x, thr, exc_key, quota, cap, 1);
            ASSERT_EQ(a.res, gcclSuccess);
            ASSERT_TRUE(a == b) << "n=" << n << " thr=" << thr << " quota=" << quota << " cap=" << cap;
            // The scalar path's meaning, checked directly when it did not overflow.
            if (a.count <= cap) {
              size_t ties = 0;
              std::vector<uint64_t> want_idx, want_exc;
              for (size_t i = 0; i < n; i++) {
                uint32_t key = Key(x[i]);
                if (key >= exc_key)
                  want_exc.push_back(i);
                else if (key > thr || (key == thr && ties++ < quota))
                  want_idx.push_back(i);
              }
              ASSERT_EQ(a.idx, want_idx);
              ASSERT_EQ(a.exc, want_exc);
            }
          }
        }
      }
    }
  }
}

}  // namespace
