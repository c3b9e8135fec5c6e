// test_index_code.cc — Elias-Fano index sections (compress/index_code.c): round trips, sizes, hostile input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <vector>

extern "C" {
#include "common/result.h"
#include "compress/index_code.h"
}

namespace {

// A uniformly random k-subset of [0, n), sorted (Floyd's algorithm).
std::vector<uint64_t> RandomSet(uint64_t n, uint64_t k, std::mt19937_64& rng) {
  std::set<uint64_t> s;
  for (uint64_t j = n - k; j < n; j++) {
    uint64_t t = std::uniform_int_distribution<uint64_t>(0, j)(rng);
    if (!s.insert(t).second) s.insert(j);
  }
  return std::vector<uint64_t>(s.begin(), s.end());
}

std::vector<unsigned char> Encode(const std::vector<uint64_t>& idx, uint64_t n) {
  size_t bytes = index_code_bytes(n, idx.size());
  std::vector<unsigned char> out(bytes);
  index_writer w;
  index_writer_init(&w, out.data(), n, idx.size());
  for (uint64_t i : idx) index_writer_put(&w, i);
  index_writer_finish(&w);
  return out;
}

// Decodes whatever the reader yields (the section need not be valid), in chunks of `chunk`.
std::vector<uint64_t> Decode(const std::vector<unsigned char>& sec, uint64_t n, uint64_t k, size_t chunk = 256) {
  // An exact-size heap copy so that ASan catches any read past the end.
  std::unique_ptr<unsigned char[]> copy(new unsigned char[sec.size() ? sec.size() : 1]);
  if (!sec.empty()) std::memcpy(copy.get(), sec.data(), sec.size());
  index_reader r;
  index_reader_init(&r, copy.get(), sec.size(), n, k);
  std::vector<uint64_t> out, buf(chunk);
  size_t got;
  while ((got = index_reader_next(&r, buf.data(), chunk)) > 0) out.insert(out.end(), buf.begin(), buf.begin() + got);
  return out;
}

gcclResult_t Validate(const std::vector<unsigned char>& sec, uint64_t n, uint64_t k) {
  std::unique_ptr<unsigned char[]> copy(new unsigned char[sec.size() ? sec.size() : 1]);
  if (!sec.empty()) std::memcpy(copy.get(), sec.data(), sec.size());
  return index_code_validate(copy.get(), sec.size(), n, k);
}

TEST(IndexCode, RoundTripsRandomSets) {
  std::mt19937_64 rng(1);
  const uint64_t ns[] = {1, 2, 3, 7, 8, 9, 63, 64, 65, 100, 1000, 4096, 100003};
  for (uint64_t n : ns) {
    std::vector<uint64_t> ks = {0, 1, 2, n / 100, n / 10, n / 3, n / 2, n - 1, n};
    for (uint64_t k : ks) {
      if (k > n) continue;
      auto idx = RandomSet(n, k, rng);
      auto sec = Encode(idx, n);
      ASSERT_EQ(sec.size(), index_code_bytes(n, k));
      ASSERT_EQ(Validate(sec, n, k), gcclSuccess) << "n=" << n << " k=" << k;
      EXPECT_EQ(Decode(sec, n, k), idx) << "n=" << n << " k=" << k;
      EXPECT_EQ(Decode(sec, n, k, 3), idx) << "chunked, n=" << n << " k=" << k;
    }
  }
}

TEST(IndexCode, RoundTripsStructuredSets) {
  const uint64_t n = 50000;
  std::vector<std::vector<uint64_t>> sets;
  std::vector<uint64_t> prefix, suffix, clusters, stride;
  for (uint64_t i = 0; i < 500; i++) prefix.push_back(i);
  for (uint64_t i = n - 500; i < n; i++) suffix.push_back(i);
  for (uint64_t c = 0; c < n; c += 5000)
    for (uint64_t i = c; i < c + 40; i++) clusters.push_back(i);
  for (uint64_t i = 7; i < n; i += 97) stride.push_back(i);
  for (auto& s : {prefix, suffix, clusters, stride}) {
    auto sec = Encode(s, n);
    ASSERT_EQ(Validate(sec, n, s.size()), gcclSuccess);
    EXPECT_EQ(Decode(sec, n, s.size()), s);
  }
}

TEST(IndexCode, HugeUniverse) {
  // Indices of a 2^40-element tensor, and the 2^64 - 1 limit (low parts wider than 32 bits).
  std::mt19937_64 rng(2);
  for (uint64_t n : std::vector<uint64_t>{UINT64_C(1) << 40, UINT64_MAX}) {
    for (uint64_t k : std::vector<uint64_t>{1, 2, 100}) {
      std::set<uint64_t> s;
      while (s.size() < k) s.insert(rng() % n);
      std::vector<uint64_t> idx(s.begin(), s.end());
      if (k == 2) idx = {0, n - 1};
      auto sec = Encode(idx, n);
      ASSERT_EQ(Validate(sec, n, k), gcclSuccess);
      EXPECT_EQ(Decode(sec, n, k), idx);
    }
  }
}

TEST(IndexCode, SizeAtOnePercentIsNearEliasFanoBound) {
  // 1% of 25.6M: ~1.07 bytes per index (bar: 1.3).
  const uint64_t n = 25557032, k = 255570;
  double per = (double)index_code_bytes(n, k) / (double)k;
  EXPECT_LT(per, 1.1);
  EXPECT_GT(per, 1.0);
}

TEST(IndexCode, BoundCoversEverySmallerK) {
  for (uint64_t n = 1; n <= 300; n++)
    for (uint64_t k = 0; k <= n; k++) {
      size_t bound = index_code_bound(n, k);
      for (uint64_t j = 0; j <= k; j++)
        ASSERT_LE(index_code_bytes(n, j), bound) << "n=" << n << " k=" << k << " j=" << j;
    }
  // Larger tensors: every k on a grid, every j <= k on a finer one, plus j near k.
  for (uint64_t n : std::vector<uint64_t>{1000, 65537, 25557032, UINT64_C(1) << 40}) {
    for (int t = 0; t <= 60; t++) {
      uint64_t k = (uint64_t)((double)n * t / 60);
      size_t bound = index_code_bound(n, k);
      for (int u = 0; u <= 300; u++) {
        uint64_t j = (uint64_t)((double)k * u / 300);
        ASSERT_LE(index_code_bytes(n, j), bound) << "n=" << n << " k=" << k << " j=" << j;
      }
      for (uint64_t j = k > 50 ? k - 50 : 0; j <= k; j++) ASSERT_LE(index_code_bytes(n, j), bound);
    }
  }
  EXPECT_EQ(index_code_bytes(10, 11), SIZE_MAX);
  EXPECT_EQ(index_code_bound(10, 11), SIZE_MAX);
  EXPECT_NE(index_code_bound(UINT64_MAX, 1), SIZE_MAX);
}

TEST(IndexCode, RejectsWrongSize) {
  std::mt19937_64 rng(3);
  auto idx = RandomSet(1000, 37, rng);
  auto sec = Encode(idx, 1000);
  ASSERT_GT(sec.size(), 1u);
  std::vector<unsigned char> shorter(sec.begin(), sec.end() - 1);
  auto longer = sec;
  longer.push_back(0);
  EXPECT_EQ(Validate(shorter, 1000, 37), gcclCorruptData);
  EXPECT_EQ(Validate(longer, 1000, 37), gcclCorruptData);
  EXPECT_EQ(Validate(sec, 1000, 36), gcclCorruptData);
  EXPECT_EQ(Validate(sec, 1000, 38), gcclCorruptData);
  EXPECT_EQ(Validate({}, 10, 11), gcclCorruptData);
  EXPECT_EQ(Validate({}, 10, 0), gcclSuccess);
  EXPECT_EQ(Validate({0}, 10, 0), gcclCorruptData);
  // Readers of truncated or garbage sections stay inside them (ASan build checks).
  for (size_t cut = 0; cut < sec.size(); cut++) {
    std::vector<unsigned char> t(sec.begin(), sec.begin() + cut);
    EXPECT_EQ(Validate(t, 1000, 37), gcclCorruptData);
    EXPECT_LE(Decode(t, 1000, 37).size(), 37u);
  }
}

TEST(IndexCode, EveryBitFlipIsRejectedOrStillASortedSet) {
  std::mt19937_64 rng(4);
  for (uint64_t n : std::vector<uint64_t>{100, 1000, 5000}) {
    for (uint64_t k : std::vector<uint64_t>{1, 10, n / 10, n / 2}) {
      auto idx = RandomSet(n, k, rng);
      auto sec = Encode(idx, n);
      for (size_t bit = 0; bit < sec.size() * 8; bit++) {
        auto bad = sec;
        bad[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        gcclResult_t r = Validate(bad, n, k);
        auto got = Decode(bad, n, k);
        if (r == gcclSuccess) {
          // A flip of a low bit can give another legal set; it must be one.
          ASSERT_EQ(got.size(), k);
          for (size_t j = 0; j < got.size(); j++) {
            ASSERT_LT(got[j], n);
            if (j) {
              ASSERT_GT(got[j], got[j - 1]);
            }
          }
          ASSERT_NE(got, idx);
        } else {
          ASSERT_EQ(r, gcclCorruptData);
        }
      }
    }
  }
}

TEST(IndexCode, RejectsNonIncreasingAndOutOfRange) {
  const uint64_t n = 1000, k = 4;
  // L = floor(log2(997 / 4)) = 7: v = idx - i; equal indices make v decrease.
  std::vector<uint64_t> repeat = {10, 20, 20, 30};
  EXPECT_EQ(Validate(Encode(repeat, n), n, k), gcclCorruptData);
  std::vector<uint64_t> down = {10, 200, 150, 300};
  EXPECT_EQ(Validate(Encode(down, n), n, k), gcclCorruptData);
  // Last index n: v = n - k + 1 has high part (997 >> 7) = 7 <= (n-k) >> 7, so it
  // fits the layout but is out of range.
  std::vector<uint64_t> past = {1, 2, 3, n};
  EXPECT_EQ(Validate(Encode(past, n), n, k), gcclCorruptData);
  // Padding bits set.
  auto ok = Encode({1, 2, 3, 4}, n);
  ASSERT_EQ(ok.size(), 6u);  // 28 low bits in 4 bytes, 11 high bits in 2
  ASSERT_EQ(Validate(ok, n, k), gcclSuccess);
  auto pad = ok;
  pad.at(5) |= 0x80;  // bit 7 of the last byte: padding
  EXPECT_EQ(Validate(pad, n, k), gcclCorruptData);
}

TEST(IndexCode, RandomGarbageNeverCrashes) {
  std::mt19937_64 rng(5);
  for (int t = 0; t < 2000; t++) {
    uint64_t n = 1 + rng() % 3000, k = rng() % (n + 1);
    size_t bytes = index_code_bytes(n, k);
    if (rng() % 4 == 0) bytes = rng() % (bytes + 8);
    std::vector<unsigned char> g(bytes);
    for (auto& b : g) b = (unsigned char)rng();
    gcclResult_t r = Validate(g, n, k);
    auto got = Decode(g, n, k);
    EXPECT_LE(got.size(), k);
    if (r == gcclSuccess) {
      ASSERT_EQ(got.size(), k);
      for (size_t j = 1; j < got.size(); j++) ASSERT_GT(got[j], got[j - 1]);
      if (k) {
        ASSERT_LT(got.back(), n);
      }
    }
  }
}

}  // namespace
