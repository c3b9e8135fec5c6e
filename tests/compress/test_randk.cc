// test_randk.cc — random-k (compress/codec_randk.c): shared indices, strata, values, error feedback, exceptions.
#include <gtest/gtest.h>

#include <algorithm>
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
#include "compress/randk.h"
#include "compress/spec.h"
#include "compress/topk.h"
}

namespace {

struct Frame {
  gcclResult_t res = gcclSuccess;
  frame_header h{};
  std::vector<unsigned char> payload;
  std::vector<uint64_t> exc;
};

Frame Encode(const std::string& spec, std::vector<float>& x, uint64_t shared_key) {
  codec_spec s{};
  EXPECT_EQ(spec_parse(spec.c_str(), &s), gcclSuccess) << spec;
  const codec_ops& ops = codec_randk_ops;
  EXPECT_EQ(ops.state_create, nullptr);
  Frame f;
  std::vector<unsigned char> buf(ops.payload_bound(&s, x.size()) + 1);
  exc_list exc{};
  encode_ctx ctx{};
  ctx.spec = &s;
  ctx.key = 77;
  ctx.shared_key = shared_key;
  ctx.exc = &exc;
  f.h.codec = CODEC_RANDK;
  f.h.dtype = gcclFloat32;
  f.h.count = x.size();
  size_t pb = 0;
  f.res = ops.encode(&ctx, x.data(), s.ef ? x.data() : nullptr, x.size(), buf.data(), &pb, &f.h);
  f.h.payload_bytes = pb;
  f.payload.assign(buf.begin(), buf.begin() + pb);
  f.exc.assign(exc.idx, exc.idx + exc.n);
  free(exc.idx);
  return f;
}

std::unique_ptr<unsigned char[]> Exact(const std::vector<unsigned char>& p) {
  std::unique_ptr<unsigned char[]> c(new unsigned char[p.size() ? p.size() : 1]);
  if (!p.empty()) std::memcpy(c.get(), p.data(), p.size());
  return c;
}

gcclResult_t Validate(const frame_header& h, const std::vector<unsigned char>& payload) {
  auto p = Exact(payload);
  return codec_randk_ops.validate(&h, p.get());
}

std::vector<float> Decode(const Frame& f, std::vector<float> dst = {}) {
  if (dst.empty()) dst.assign(f.h.count, 0.0f);
  auto p = Exact(f.payload);
  EXPECT_EQ(codec_randk_ops.validate(&f.h, p.get()), gcclSuccess) << err_last();
  EXPECT_EQ(codec_randk_ops.decode_accumulate(&f.h, p.get(), f.exc.data(), f.exc.size(), dst.data()), gcclSuccess);
  return dst;
}

std::vector<size_t> Indices(uint64_t key, size_t n, size_t k) {
  std::vector<size_t> idx(k);
  for (size_t j = 0; j < k; j++) idx[j] = randk_index(key, n, k, j);
  return idx;
}

std::vector<float> Iota(size_t n) {  // distinct nonzero values, exact in fp32
  std::vector<float> x(n);
  for (size_t i = 0; i < n; i++) x[i] = (float)(i + 1);
  return x;
}

TEST(Randk, IndicesAreStratifiedAndIncreasing) {
  const std::pair<uint64_t, uint64_t> nk[] = {
      {1, 1},         {2, 1},      {2, 2},         {7, 3},     {100, 1},          {100, 100},
      {1000, 10},     {1000, 999}, {100003, 1000}, {65536, 7}, {1ull << 40, 100}, {1ull << 40, 1ull << 20},
      {UINT64_MAX, 3}};
  for (auto [n, k] : nk) {
    size_t prev = 0;
    size_t step = k > 5000 ? k / 5000 : 1;
    for (uint64_t j = 0; j < k; j += step) {
      size_t lo = (size_t)((unsigned __int128)j * n / k), hi = (size_t)((unsigned __int128)(j + 1) * n / k);
      size_t i = randk_index(12345, n, k, j);
      ASSERT_GE(i, lo) << n << " " << k << " " << j;
      ASSERT_LT(i, hi) << n << " " << k << " " << j;
      if (j) {
        ASSERT_GT(i, prev);
      }
      prev = i;
    }
  }
}

TEST(Randk, SameKeySameIndicesOtherKeyOthers) {
  const size_t n = 100003, k = 1000;
  EXPECT_EQ(Indices(1, n, k), Indices(1, n, k));
  EXPECT_NE(Indices(1, n, k), Indices(2, n, k));
  EXPECT_NE(Indices(1, n, k), Indices(1ull << 32, n, k));
  // Two ranks with different data, same shared key: same positions in the frames.
  std::vector<float> a = Iota(n), b = Iota(n);
  for (auto& v : b) v = -v * 3;
  Frame fa = Encode("randk:ratio=0.01,ef=0", a, 99), fb = Encode("randk:ratio=0.01,ef=0", b, 99);
  std::vector<float> da = Decode(fa), db = Decode(fb);
  std::vector<size_t> want = Indices(99, n, sparse_k(0.01, n));
  std::vector<size_t> got_a, got_b;
  for (size_t i = 0; i < n; i++) {
    if (da[i] != 0) got_a.push_back(i);
    if (db[i] != 0) got_b.push_back(i);
  }
  EXPECT_EQ(got_a, want);
  EXPECT_EQ(got_b, want);
}

TEST(Randk, FrameFieldsAndValues) {
  for (const char* vt : {"fp32", "fp16", "bf16"}) {
    for (size_t n : {1, 2, 7, 1000, 100003}) {
      for (const char* ratio : {"0.001", "0.01", "0.5", "1"}) {
        std::mt19937_64 rng(n);
        std::normal_distribution<float> normal;
        std::vector<float> x(n);
        for (auto& v : x) v = 5.0f * normal(rng);
        const std::vector<float> orig = x;
        uint64_t key = 0xC0FFEE + n;
        Frame f = Encode(std::string("randk:ratio=") + ratio + ",values=" + vt + ",ef=1", x, key);
        ASSERT_EQ(f.res, gcclSuccess);
        size_t k = sparse_k(std::stod(ratio), n), vs = std::string(vt) == "fp32" ? 4 : 2;
        EXPECT_EQ(f.h.k, k);
        EXPECT_EQ(f.h.rng_key, key);
        EXPECT_EQ(f.h.flags, 0u);
        EXPECT_EQ(f.h.bits, 0u);
        EXPECT_EQ(f.h.bucket, 0u);
        EXPECT_EQ(f.h.payload_bytes, k * vs);
        EXPECT_TRUE(f.exc.empty());
        std::vector<float> d = Decode(f);
        std::vector<bool> in(n, false);
        for (size_t i : Indices(key, n, k)) {
          in[i] = true;
          float r = std::string(vt) == "fp16"   ? half_to_float(float_to_half(orig[i]))
                    : std::string(vt) == "bf16" ? bf16_to_float(float_to_bf16(orig[i]))
                                                : orig[i];
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
}

TEST(Randk, EveryOffsetInAStratumIsDrawn) {
  // 100 strata of 10: over 2000 keys each offset should come up ~200 times per stratum
  // position, 20000 in all.
  std::vector<int> hits(10, 0);
  for (uint64_t key = 0; key < 2000; key++)
    for (size_t j = 0; j < 100; j++) hits[randk_index(key * 0x9E3779B97F4A7C15ull, 1000, 100, j) - j * 10]++;
  for (int h : hits) {
    EXPECT_GT(h, 19000);
    EXPECT_LT(h, 21000);
  }
}

TEST(Randk, NonFiniteAndUnrepresentableAreExceptions) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (size_t n : {size_t(1000), size_t(200003)}) {  // one scan span, and several
    for (const char* vt : {"fp32", "fp16"}) {
      std::vector<float> x(n);
      for (size_t i = 0; i < n; i++) x[i] = (float)(i % 50000 + 1);  // within fp16 range
      const uint64_t key = 5;
      std::vector<size_t> chosen = Indices(key, n, n / 10);
      // Chosen positions and others, all bad, in every scan span.
      std::vector<uint64_t> bad = {0, chosen[3], 333, chosen[50], n - 1};
      for (size_t i = 65536 - 1; i < n; i += 65536) bad.insert(bad.end(), {i, i + 1, chosen[i / 10]});
      std::sort(bad.begin(), bad.end());
      bad.erase(std::unique(bad.begin(), bad.end()), bad.end());
      for (size_t j = 0; j < bad.size(); j++) x[bad[j]] = j % 2 ? nan : -inf;
      x[777] = 1e6f;  // fine in fp32, beyond fp16 (777 is not in bad)
      const std::vector<float> orig = x;
      Frame f = Encode(std::string("randk:ratio=0.1,ef=1,values=") + vt, x, key);
      ASSERT_EQ(f.res, gcclSuccess);
      std::vector<uint64_t> want = bad;
      if (std::string(vt) == "fp16") {
        want.push_back(777);
        std::sort(want.begin(), want.end());
      }
      EXPECT_EQ(f.exc, want);
      size_t vs = std::string(vt) == "fp32" ? 4 : 2;
      for (size_t j : {size_t(3), size_t(50)})
        EXPECT_EQ(values_get(f.payload.data() + j * vs, (spec_values)f.h.values), 0.0f);
      for (uint64_t i : want) EXPECT_EQ(x[i], 0.0f) << "residual at exception " << i;
      std::vector<float> d = Decode(f);
      for (uint64_t i : want) EXPECT_EQ(d[i], 0.0f);
    }
  }
}

TEST(Randk, DecodeSkipsExceptionsAndAddsInEveryDtype) {
  const size_t n = 500;
  std::vector<float> x = Iota(n);
  Frame f = Encode("randk:ratio=0.1,ef=0", x, 8);
  std::vector<size_t> idx = Indices(8, n, 50);
  f.exc = {idx[0], idx[49]};
  auto p = Exact(f.payload);
  std::vector<double> d64(n, 0.5);
  std::vector<uint16_t> d16(n, float_to_half(0.5f));
  frame_header h = f.h;
  h.dtype = gcclFloat64;
  ASSERT_EQ(codec_randk_ops.decode_accumulate(&h, p.get(), f.exc.data(), 2, d64.data()), gcclSuccess);
  h.dtype = gcclFloat16;
  ASSERT_EQ(codec_randk_ops.decode_accumulate(&h, p.get(), f.exc.data(), 2, d16.data()), gcclSuccess);
  for (size_t j = 0; j < 50; j++) {
    size_t i = idx[j];
    double add = (j == 0 || j == 49) ? 0.0 : x[i];
    EXPECT_EQ(d64[i], 0.5 + add);
    EXPECT_EQ(d16[i], float_to_half(0.5f + (float)add));
  }
}

TEST(Randk, ValidateRejectsHostileFrames) {
  std::vector<float> x = Iota(1000);
  Frame f = Encode("randk:ratio=0.05,ef=0", x, 3);
  ASSERT_EQ(Validate(f.h, f.payload), gcclSuccess);
  for (uint64_t k : std::vector<uint64_t>{f.h.k - 1, f.h.k + 1, 0, UINT64_MAX / 2, UINT64_MAX / 4 + 1}) {
    frame_header h = f.h;
    h.k = k;
    EXPECT_EQ(Validate(h, f.payload), gcclCorruptData) << k;
  }
  Frame b = f;
  b.payload.pop_back();
  b.h.payload_bytes--;
  EXPECT_EQ(Validate(b.h, b.payload), gcclCorruptData);
  b = f;
  put_f32(b.payload.data() + 8, std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(Validate(b.h, b.payload), gcclCorruptData);
  b = f;
  put_f32(b.payload.data() + 4 * (b.h.k - 1), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(Validate(b.h, b.payload), gcclCorruptData);
  // A huge count with a small k is legal (k strata of a huge tensor): only sizes matter.
  frame_header h = f.h;
  h.count = UINT64_MAX;
  EXPECT_EQ(Validate(h, f.payload), gcclSuccess);
}

}  // namespace
