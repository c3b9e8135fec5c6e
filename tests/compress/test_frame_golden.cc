// test_frame_golden.cc — frames and results pinned to the bit: a hash of every codec
// spec's frames (three gcclEncode calls, error feedback carried between them, the
// last with a NaN and an inf) and of their decodes, and of compressed allreduce
// results on 3 and 4 thread ranks, by the tuner's choice and with every algorithm
// forced, against a table recorded from the build before a
// refactor. A change of code that must not change behaviour (issue 28) keeps every
// row; a change that means to change a frame format or a schedule's arithmetic
// updates the table in the same commit and says why.
//
// The inputs come from integer arithmetic only (splitmix64), so they are the same
// on every machine. Frames with zstd=1 depend on the zstd library's version: the
// table holds Debian 12's (libzstd 1.5.4).
//
// To print the table after a deliberate change: GCCL_PRINT_GOLDEN=1 ./gccl_tests
// --gtest_filter='FrameGolden.*' and paste the lines it prints.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "compress/codec_cases.h"
#include "core/harness.h"
#include "gccl.h"

namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Input `call` of rank `rank`: values in [-scale, scale) with 24 random bits, a
// scale that changes per call so that quantizer ranges move; the third call has a
// NaN and an inf (after error feedback is added they stay non-finite).
std::vector<float> Input(size_t count, int rank, int call) {
  std::vector<float> x(count);
  const float scale = 0.5f + 0.25f * static_cast<float>(call) + 0.125f * static_cast<float>(rank);
  for (size_t i = 0; i < count; i++) {
    uint64_t r = SplitMix64((static_cast<uint64_t>(rank) << 56) ^ (static_cast<uint64_t>(call) << 48) ^ i);
    x[i] = scale * (static_cast<float>(r >> 40) / 8388608.0f - 1.0f);  // 24 bits: exact in float
  }
  if (call == 2 && count > 777) {
    x[5] = std::numeric_limits<float>::quiet_NaN();
    x[777] = std::numeric_limits<float>::infinity();
  }
  return x;
}

// FNV-1a, 64 bits.
struct Hash {
  uint64_t h = 0xcbf29ce484222325ULL;
  void Add(const void* data, size_t n) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
  }
  void AddSize(size_t n) {
    uint64_t v = n;
    Add(&v, sizeof v);
  }
};

// Compares `got` with the table row `key`; prints the row when asked to.
void ExpectGolden(const std::map<std::string, uint64_t>& table, const std::string& key, uint64_t got) {
  char line[256];
  std::snprintf(line, sizeof line, "      {\"%s\", 0x%016llxULL},", key.c_str(), static_cast<unsigned long long>(got));
  if (std::getenv("GCCL_PRINT_GOLDEN") != nullptr) std::printf("%s\n", line);
  auto it = table.find(key);
  if (it == table.end()) {
    ADD_FAILURE() << "no golden row for " << key << "; if it is new, add:\n" << line;
    return;
  }
  EXPECT_EQ(it->second, got) << key << ": frames or results changed; the row would now be:\n" << line;
}

const std::map<std::string, uint64_t>& EncodeTable() {
  static const std::map<std::string, uint64_t> table = {
      {"none", 0x9cc9cf88e1010a48ULL},
      {"fp16", 0xfdcc21457d079567ULL},
      {"bf16", 0x59ccdd279db68ec6ULL},
      {"uniform:bits=1,round=nearest", 0x607da64e962b730bULL},
      {"uniform:bits=1,round=stochastic", 0xd77b55d54d349197ULL},
      {"uniform:bits=4,round=nearest", 0x1571b84391c63846ULL},
      {"uniform:bits=4,round=stochastic", 0x12d0fa68ccb0f94eULL},
      {"uniform:bits=8,round=nearest", 0x02b01d122c2a13bdULL},
      {"uniform:bits=8,round=stochastic", 0xaeec8f0608b7dc92ULL},
      {"uniform:bits=3,bucket=7,round=stochastic", 0x7818e0341f8bfec0ULL},
      {"qsgd", 0x90c7b2fd938da902ULL},
      {"qsgd:bits=2,bucket=128", 0xe89df6a1499486bbULL},
      {"qsgd:bits=8,bucket=64", 0x8c852230d9f379fbULL},
      {"sign", 0xcb9f4b450a2f4966ULL},
      {"sign:bucket=7,ef=0", 0x50ccd614d10f37c1ULL},
      {"terngrad", 0x62d1399955bb9313ULL},
      {"terngrad:bucket=64", 0xf3a0e6776dfa96beULL},
      {"topk", 0x8c0721d1bc0ccbd6ULL},
      {"topk:ratio=1", 0xdcf0263befe0fdbaULL},
      {"topk:ratio=0.1,approx=0,values=fp32,zstd=0", 0x740681d8f7da3727ULL},
      {"topk:ratio=0.1,approx=0,values=fp16,zstd=0", 0x178f18da3fbca263ULL},
      {"topk:ratio=0.1,approx=0,values=bf16,zstd=0", 0xe972e5b45c2f16dbULL},
      {"topk:ratio=0.1,approx=0,values=fp32,zstd=1", 0x740681d8f7da3727ULL},
      {"topk:ratio=0.1,approx=0,values=fp16,zstd=1", 0x178f18da3fbca263ULL},
      {"topk:ratio=0.1,approx=0,values=bf16,zstd=1", 0xe972e5b45c2f16dbULL},
      {"topk:ratio=0.1,approx=1,values=fp32,zstd=0", 0x740681d8f7da3727ULL},
      {"topk:ratio=0.1,approx=1,values=fp16,zstd=0", 0x178f18da3fbca263ULL},
      {"topk:ratio=0.1,approx=1,values=bf16,zstd=0", 0xe972e5b45c2f16dbULL},
      {"topk:ratio=0.1,approx=1,values=fp32,zstd=1", 0x740681d8f7da3727ULL},
      {"topk:ratio=0.1,approx=1,values=fp16,zstd=1", 0x178f18da3fbca263ULL},
      {"topk:ratio=0.1,approx=1,values=bf16,zstd=1", 0xe972e5b45c2f16dbULL},
      {"randk", 0x57d51f9eebd1c2a5ULL},
      {"randk:ratio=0.5,values=fp16", 0xd450aa37d7bf3c0cULL},
      {"randk:ratio=0.05,values=bf16", 0xaa9c8ee27daab780ULL},
  };
  return table;
}

const std::map<std::string, uint64_t>& AllReduceTable() {
  static const std::map<std::string, uint64_t> table = {
      {"none p=3 n=1009", 0x03e36bef918a18f5ULL},
      {"fp16 p=3 n=1009", 0x90e5f6b1353b9f51ULL},
      {"bf16 p=3 n=1009", 0xa7dc60704b071566ULL},
      {"uniform:bits=8 p=3 n=1009", 0x1a5c53d38588657aULL},
      {"uniform:bits=4,round=nearest p=3 n=1009", 0x84c1e0b25c0135e7ULL},
      {"qsgd:bits=4 p=3 n=1009", 0x57be54db66a9f67aULL},
      {"sign p=3 n=1009", 0x8db7289889251e3fULL},
      {"terngrad p=3 n=1009", 0x3a9a8a49fb581076ULL},
      {"topk:ratio=0.01 p=3 n=1009", 0x79ec6f4cc9d3897aULL},
      {"topk:ratio=0.1,values=fp16 p=3 n=1009", 0x6965649bc100420bULL},
      {"randk:ratio=0.05 p=3 n=1009", 0x5f376646c463ce88ULL},
      {"none p=3 n=70001", 0x8151dcc40f6d979cULL},
      {"fp16 p=3 n=70001", 0x1d2589c39fb171d2ULL},
      {"bf16 p=3 n=70001", 0xa89d806e2f499e73ULL},
      {"uniform:bits=8 p=3 n=70001", 0x6c524bdd5fd95e00ULL},
      {"uniform:bits=4,round=nearest p=3 n=70001", 0x11b60a4a8da25659ULL},
      {"qsgd:bits=4 p=3 n=70001", 0x9c77dad457f0a43bULL},
      {"sign p=3 n=70001", 0x9d51bbcb1a056214ULL},
      {"terngrad p=3 n=70001", 0xae5b0e10101195aeULL},
      {"topk:ratio=0.01 p=3 n=70001", 0x14a7e2d57b57655cULL},
      {"topk:ratio=0.1,values=fp16 p=3 n=70001", 0x669cd28fa450c8feULL},
      {"randk:ratio=0.05 p=3 n=70001", 0x6694d18070cbcbe9ULL},
      {"none p=4 n=1009", 0xa640e575d0049b8fULL},
      {"fp16 p=4 n=1009", 0x4421e7ee38116781ULL},
      {"bf16 p=4 n=1009", 0xa423d086adf8ef4fULL},
      {"uniform:bits=8 p=4 n=1009", 0x9330d9e1cd019466ULL},
      {"uniform:bits=4,round=nearest p=4 n=1009", 0x2ef1ffbfd5835210ULL},
      {"qsgd:bits=4 p=4 n=1009", 0xa0234e130611179cULL},
      {"sign p=4 n=1009", 0xf5eaed58a8ff23b8ULL},
      {"terngrad p=4 n=1009", 0x81031fca65aa21c8ULL},
      {"topk:ratio=0.01 p=4 n=1009", 0x5d149389dc0ded54ULL},
      {"topk:ratio=0.1,values=fp16 p=4 n=1009", 0x2133af53ca6dbb72ULL},
      {"randk:ratio=0.05 p=4 n=1009", 0x1dc93bd39206d18bULL},
      {"none p=4 n=70001", 0x4761dc918e0dea0bULL},
      {"fp16 p=4 n=70001", 0xc6faf49d5776f9d9ULL},
      {"bf16 p=4 n=70001", 0xe9616ed8144b14d7ULL},
      {"uniform:bits=8 p=4 n=70001", 0x357d1d113ddfdd0eULL},
      {"uniform:bits=4,round=nearest p=4 n=70001", 0x03b38259303bdfbbULL},
      {"qsgd:bits=4 p=4 n=70001", 0x1fd01d255b82f210ULL},
      {"sign p=4 n=70001", 0xad41e32e84a99b6fULL},
      {"terngrad p=4 n=70001", 0x4bcfb23defdbedd4ULL},
      {"topk:ratio=0.01 p=4 n=70001", 0x4b9763daade7f5ceULL},
      {"topk:ratio=0.1,values=fp16 p=4 n=70001", 0xd7e4590bd6b8182bULL},
      {"randk:ratio=0.05 p=4 n=70001", 0xb5404df804054725ULL},
      {"ring none p=4 n=70001", 0xe23a8c3f81fb7900ULL},
      {"rhd none p=3 n=70001", 0x8151dcc40f6d979cULL},
      {"tree none p=4 n=70001", 0x6d4a04bc5151e0a6ULL},
      {"split none p=5 n=70001", 0x47b5f6662563642aULL},
      {"sra fp16 p=4 n=70001", 0xc6faf49d5776f9d9ULL},
      {"sra sign p=3 n=70001", 0x9d51bbcb1a056214ULL},
      {"sra uniform:bits=4,round=nearest p=4 n=70001", 0x03b38259303bdfbbULL},
      {"ring-requant fp16 p=4 n=70001", 0x53c5169d619136a2ULL},
      {"ring-requant bf16 p=3 n=70001", 0x309fc0cbc4331689ULL},
      {"sparse-ag topk:ratio=0.01 p=4 n=70001", 0x4b9763daade7f5ceULL},
      {"sparse-sr topk:ratio=0.01 p=3 n=70001", 0x14a7e2d57b57655cULL},
      {"randk randk:ratio=0.05 p=4 n=70001", 0xb5404df804054725ULL},
      {"hier uniform:bits=8 p=4 n=70001", 0xb30a8dbc09bd1a8cULL},
      {"hier fp16 p=3 n=70001", 0x0b18550ad715b024ULL},
      {"hier topk:ratio=0.01 p=4 n=70001", 0x20b8d2423591fb37ULL},
  };
  return table;
}

constexpr size_t kEncodeCount = 10007;  // prime: several buckets and a partial last one

TEST(FrameGolden, EveryCodecSpecsFramesAndDecodesAreUnchanged) {
  for (const codec_cases::CodecCase& cc : codec_cases::AllCases()) {
    const std::string spec = cc.spec;
    if (!codec_cases::Unavailable(spec).empty()) continue;  // zstd specs in a build without zstd
    SCOPED_TRACE(spec);
    gcclCompressor_t c = nullptr;
    ASSERT_EQ(gcclCompressorCreate(&c, spec.c_str(), kEncodeCount, gcclFloat32), gcclSuccess)
        << gcclGetLastError(nullptr);
    size_t cap = 0;
    ASSERT_EQ(gcclEncodeBound(c, &cap), gcclSuccess);
    std::vector<unsigned char> frame(cap);
    std::vector<float> decoded(kEncodeCount, 0.0f);
    Hash hash;
    for (int call = 0; call < 3; call++) {
      std::vector<float> x = Input(kEncodeCount, 0, call);
      size_t bytes = 0;
      ASSERT_EQ(gcclEncode(c, x.data(), frame.data(), cap, &bytes), gcclSuccess) << gcclGetLastError(nullptr);
      hash.AddSize(bytes);
      hash.Add(frame.data(), bytes);
      ASSERT_EQ(gcclDecodeAccumulate(frame.data(), bytes, decoded.data(), kEncodeCount, gcclFloat32), gcclSuccess)
          << gcclGetLastError(nullptr);
    }
    hash.Add(decoded.data(), decoded.size() * sizeof(float));
    std::vector<float> residual(kEncodeCount);
    ASSERT_EQ(gcclCompressorGetResidual(c, residual.data()), gcclSuccess);
    hash.Add(residual.data(), residual.size() * sizeof(float));
    ASSERT_EQ(gcclCompressorDestroy(c), gcclSuccess);
    ExpectGolden(EncodeTable(), spec, hash.h);
  }
}

// The specs of the compressed collectives' tests, one per schedule family: SRA
// quantizers, ring-requant's fp16/bf16, sparse all-gather codecs, dense "none".
const char* const kAllReduceSpecs[] = {
    "none",
    "fp16",
    "bf16",
    "uniform:bits=8",
    "uniform:bits=4,round=nearest",
    "qsgd:bits=4",
    "sign",
    "terngrad",
    "topk:ratio=0.01",
    "topk:ratio=0.1,values=fp16",
    "randk:ratio=0.05",
};

// Two compressed allreduces (error feedback carried) of rank-dependent inputs on p
// thread ranks; checks that every rank got the same bits and returns their hash.
uint64_t AllReduceHash(const char* spec, int p, size_t count) {
  std::vector<std::vector<float>> out(static_cast<size_t>(p), std::vector<float>(count * 2));
  gcclResult_t res = gh::RunRanks(p, [&](int rank, gcclComm_t comm) {
    gcclCompressor_t c = nullptr;
    ASSERT_EQ(gcclCompressorCreate(&c, spec, count, gcclFloat32), gcclSuccess) << gcclGetLastError(nullptr);
    for (int call = 0; call < 2; call++) {
      std::vector<float> x = Input(count, rank, call);
      float* y = out[static_cast<size_t>(rank)].data() + static_cast<size_t>(call) * count;
      ASSERT_EQ(gcclAllReduceCompressed(x.data(), y, count, gcclFloat32, gcclSum, c, comm, nullptr), gcclSuccess)
          << gcclGetLastError(comm);
    }
    ASSERT_EQ(gcclCompressorDestroy(c), gcclSuccess);
  });
  EXPECT_EQ(res, gcclSuccess);
  for (int r = 1; r < p; r++)
    EXPECT_EQ(std::memcmp(out[0].data(), out[static_cast<size_t>(r)].data(), out[0].size() * sizeof(float)), 0)
        << "rank " << r << " differs from rank 0";
  Hash hash;
  hash.Add(out[0].data(), out[0].size() * sizeof(float));
  return hash.h;
}

TEST(FrameGolden, CompressedAllReduceResultsAreUnchanged) {
  for (int p : {3, 4})
    for (size_t count : {size_t{1009}, size_t{70001}})
      for (const char* spec : kAllReduceSpecs) {
        const std::string key = std::string(spec) + " p=" + std::to_string(p) + " n=" + std::to_string(count);
        SCOPED_TRACE(key);
        ExpectGolden(AllReduceTable(), key, AllReduceHash(spec, p, count));
      }
}

// Every algorithm forced (GCCL_ALGO, read when a communicator is created), with the
// codecs it serves; hier with nodes of 2 ranks (3 ranks: one node of 1).
struct Forced {
  const char* algo;
  const char* spec;
  int p;
};
const Forced kForced[] = {
    {"ring", "none", 4},
    {"rhd", "none", 3},
    {"tree", "none", 4},
    {"split", "none", 5},
    {"sra", "fp16", 4},
    {"sra", "sign", 3},
    {"sra", "uniform:bits=4,round=nearest", 4},
    {"ring-requant", "fp16", 4},
    {"ring-requant", "bf16", 3},
    {"sparse-ag", "topk:ratio=0.01", 4},
    {"sparse-sr", "topk:ratio=0.01", 3},
    {"randk", "randk:ratio=0.05", 4},
    {"hier", "uniform:bits=8", 4},
    {"hier", "fp16", 3},
    {"hier", "topk:ratio=0.01", 4},
};

TEST(FrameGolden, EveryForcedAlgorithmsResultsAreUnchanged) {
  for (const Forced& f : kForced) {
    const std::string key = std::string(f.algo) + " " + f.spec + " p=" + std::to_string(f.p) + " n=70001";
    SCOPED_TRACE(key);
    gh::ScopedEnv algo("GCCL_ALGO", f.algo);
    gh::ScopedEnv per_node("GCCL_RANKS_PER_NODE", std::string(f.algo) == "hier" ? "2" : nullptr);
    ExpectGolden(AllReduceTable(), key, AllReduceHash(f.spec, f.p, 70001));
  }
}

}  // namespace
