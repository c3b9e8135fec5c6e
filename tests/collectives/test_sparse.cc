// test_sparse.cc — the top-k and random-k allreduces (sparse-ag, sparse-sr, randk) and topk's global key.
//
// References come from the codec alone: one fp32 compressor per rank with the
// same spec, gcclEncode of that rank's input, and gcclDecodeAccumulate of the
// frames in rank order. The sparse allreduces add the same decoded values in the
// same order, so they must match it bit for bit; randk's dense allreduce adds in
// another order, so its inputs are integers (every sum exact).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/harness.h"

extern "C" {
#include "collectives/algorithms.h"
#include "collectives/sparse.h"
#include "common/result.h"
#include "compress/spec.h"
#include "transport/local.h"
}

namespace {

using gh::RankTeam;
using Vec = std::vector<float>;

// One team per (algorithm, p), made with GCCL_ALGO set: the communicator reads it at creation.
RankTeam& Team(const std::string& algo, int p) {
  static std::mutex mu;
  static std::map<std::pair<std::string, int>, std::unique_ptr<RankTeam>> teams;
  std::lock_guard<std::mutex> lk(mu);
  std::unique_ptr<RankTeam>& t = teams[{algo, p}];
  if (t && !t->Healthy()) t.reset();
  if (!t) {
    gh::ScopedEnv a("GCCL_ALGO", algo.c_str());
    gh::ScopedEnv timeout("GCCL_TIMEOUT_MS", "60000");
    t.reset(new RankTeam(p));
  }
  return *t;
}

// Rank r's compressors, destroyed with the object.
struct Compressors {
  std::vector<gcclCompressor_t> c;
  Compressors(const std::string& spec, int p, size_t count, gcclDataType_t dt) : c(static_cast<size_t>(p), nullptr) {
    for (auto& x : c) EXPECT_EQ(gcclCompressorCreate(&x, spec.c_str(), count, dt), gcclSuccess) << spec;
  }
  ~Compressors() {
    for (auto x : c)
      if (x) gcclCompressorDestroy(x);
  }
  Compressors(const Compressors&) = delete;
  Compressors& operator=(const Compressors&) = delete;
  gcclCompressor_t operator[](int r) const { return c[static_cast<size_t>(r)]; }
};

// Inputs: multiples of 1/64 in (-16, 16) (sums of p <= 8 exact in fp32), or
// integers in [-50, 50] when `integer`. Distinct per rank, call and index.
std::vector<Vec> Inputs(int p, size_t n, uint64_t seed, bool integer) {
  std::vector<Vec> in(static_cast<size_t>(p), Vec(n));
  for (int r = 0; r < p; ++r)
    for (size_t i = 0; i < n; ++i) {
      uint64_t h = gh::Mix64(seed * 1315423911u + static_cast<uint64_t>(r) * 0x9E3779B9u + i);
      in[static_cast<size_t>(r)][i] = integer ? static_cast<float>(static_cast<int>(h % 101) - 50)
                                              : static_cast<float>(static_cast<int>(h % 2047) - 1023) / 64.0f;
    }
  return in;
}

struct Outcome {
  std::vector<gcclResult_t> res;
  std::vector<std::vector<unsigned char>> bytes;  // each rank's output, in dt
  std::vector<Vec> out;                           // the same as fp32
};

// One gcclAllReduceCompressed on every rank of team with comps; in[r] converted to dt.
Outcome AllReduce(RankTeam& team, const Compressors& comps, const std::vector<Vec>& in, gcclDataType_t dt, bool inplace,
                  gcclRedOp_t op = gcclSum) {
  const int p = team.size();
  const size_t n = in[0].size(), sz = gh::TypeSize(dt);
  Outcome o;
  o.res.assign(static_cast<size_t>(p), gcclInternalError);
  o.bytes.assign(static_cast<size_t>(p), std::vector<unsigned char>(n * sz + 1));
  std::vector<std::vector<unsigned char>> send(static_cast<size_t>(p), std::vector<unsigned char>(n * sz + 1));
  for (int r = 0; r < p; ++r)
    for (size_t i = 0; i < n; ++i) {
      auto& dst = inplace ? o.bytes[static_cast<size_t>(r)] : send[static_cast<size_t>(r)];
      gh::StoreDouble(dt, dst.data(), i, in[static_cast<size_t>(r)][i]);
    }
  team.Run([&](int r, gcclComm_t comm) {
    const size_t ur = static_cast<size_t>(r);
    void* recv = o.bytes[ur].data();
    const void* sbuf = inplace ? recv : send[ur].data();
    o.res[ur] = gcclAllReduceCompressed(sbuf, recv, n, dt, op, comps[r], comm, nullptr);
  });
  for (int r = 0; r < p; ++r) {
    Vec v(n);
    for (size_t i = 0; i < n; ++i)
      v[i] = static_cast<float>(gh::LoadDouble(dt, o.bytes[static_cast<size_t>(r)].data(), i));
    o.out.push_back(std::move(v));
    o.bytes[static_cast<size_t>(r)].resize(n * sz);
  }
  return o;
}

// The rank-order sum of every rank's decoded frame, from fp32 reference compressors.
Vec RefSum(const Compressors& refs, const std::vector<Vec>& in) {
  const size_t n = in[0].size();
  Vec acc(n, 0.0f);
  for (size_t r = 0; r < in.size(); ++r) {
    size_t cap = 0, bytes = 0;
    EXPECT_EQ(gcclEncodeBound(refs[static_cast<int>(r)], &cap), gcclSuccess);
    std::vector<unsigned char> frame(cap);
    EXPECT_EQ(gcclEncode(refs[static_cast<int>(r)], in[r].data(), frame.data(), cap, &bytes), gcclSuccess);
    EXPECT_EQ(gcclDecodeAccumulate(frame.data(), bytes, acc.data(), n, gcclFloat32), gcclSuccess);
  }
  return acc;
}

Vec Residual(gcclCompressor_t c, size_t n) {
  Vec e(n + 1);
  EXPECT_EQ(gcclCompressorGetResidual(c, e.data()), gcclSuccess);
  e.resize(n);
  return e;
}

// Every rank returned success and holds the same bytes as rank 0.
::testing::AssertionResult AllAgree(const Outcome& o) {
  for (size_t r = 0; r < o.res.size(); ++r) {
    if (o.res[r] != gcclSuccess) return ::testing::AssertionFailure() << "rank " << r << " returned " << o.res[r];
    if (o.bytes[r] != o.bytes[0]) return ::testing::AssertionFailure() << "rank " << r << " differs from rank 0";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult SameAs(const Vec& got, const Vec& want) {
  for (size_t i = 0; i < want.size(); ++i) {
    uint32_t g, w;
    std::memcpy(&g, &got[i], 4);
    std::memcpy(&w, &want[i], 4);
    if (g != w) return ::testing::AssertionFailure() << "[" << i << "] got " << got[i] << ", want " << want[i];
  }
  return ::testing::AssertionSuccess();
}

std::vector<size_t> Counts(int p) {
  std::vector<size_t> c = {0, 1, static_cast<size_t>(p - 1), 7, 1000, 4099};
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

const char* const kSparseAlgos[] = {"sparse-ag", "sparse-sr"};

// ---- top-k: the result is the rank-order sum of every rank's top-k selection --------------

TEST(SparseAllReduce, TopkMatchesSumOfSelections) {
  const char* const specs[] = {"topk:ratio=0.01",
                               "topk:ratio=0.1",
                               "topk:ratio=0.1,ef=0",
                               "topk:ratio=0.1,approx=1",
                               "topk:ratio=0.1,values=fp16",
                               "topk:ratio=0.1,zstd=1",
                               "topk:ratio=1"};
  for (const char* algo : kSparseAlgos)
    for (int p = 1; p <= 8; ++p) {
      RankTeam& team = Team(algo, p);
      ASSERT_EQ(team.init_result(), gcclSuccess);
      for (size_t n : Counts(p)) {
        for (const char* spec : specs) {
          SCOPED_TRACE(std::string(algo) + " p=" + std::to_string(p) + " n=" + std::to_string(n) + " " + spec);
          Compressors comps(spec, p, n, gcclFloat32), refs(spec, p, n, gcclFloat32);
          // two calls, so error feedback carries a residual into the second
          for (int call = 0; call < 2; ++call) {
            std::vector<Vec> in = Inputs(p, n, 17 * n + static_cast<uint64_t>(call), false);
            Outcome o = AllReduce(team, comps, in, gcclFloat32, (n + static_cast<size_t>(call)) % 2 == 0);
            ASSERT_TRUE(AllAgree(o));
            ASSERT_TRUE(SameAs(o.out[0], RefSum(refs, in)));
          }
          for (int r = 0; r < p; ++r) ASSERT_TRUE(SameAs(Residual(comps[r], n), Residual(refs[r], n))) << "rank " << r;
        }
      }
    }
}

// Above 65,536 elements top-k samples its threshold (approx=1) and filters with
// SIMD; the reference encodes the same way.
TEST(SparseAllReduce, LargerTensors) {
  const size_t n = 100003;
  for (const char* algo : kSparseAlgos)
    for (const char* spec : {"topk:ratio=0.01", "topk:ratio=0.01,approx=1", "topk:ratio=0.01,global=1"}) {
      const int p = 3;
      SCOPED_TRACE(std::string(algo) + " " + spec);
      Compressors comps(spec, p, n, gcclFloat32), refs(spec, p, n, gcclFloat32);
      std::vector<Vec> in = Inputs(p, n, 12, false);
      Outcome o = AllReduce(Team(algo, p), comps, in, gcclFloat32, true);
      ASSERT_TRUE(AllAgree(o));
      Vec ref = RefSum(refs, in);
      size_t nonzero = 0;
      for (size_t i = 0; i < n; ++i) {
        nonzero += o.out[0][i] != 0.0f;
        if (o.out[0][i] != 0.0f) {
          ASSERT_EQ(o.out[0][i], ref[i]) << "[" << i << "]";  // kept entries are the sums themselves
        }
      }
      if (std::strstr(spec, "global")) {
        EXPECT_LE(nonzero, 1000u + p);  // ~k of the sum's ~p k entries
      } else {
        ASSERT_TRUE(SameAs(o.out[0], ref));
      }
    }
}

TEST(SparseAllReduce, CountZeroAndRatioOneExact) {
  for (const char* algo : kSparseAlgos)
    for (int p : {1, 3, 8}) {
      RankTeam& team = Team(algo, p);
      for (size_t n : Counts(p)) {
        SCOPED_TRACE(std::string(algo) + " p=" + std::to_string(p) + " n=" + std::to_string(n));
        Compressors comps("topk:ratio=1", p, n, gcclFloat32);
        std::vector<Vec> in = Inputs(p, n, n, true);
        Outcome o = AllReduce(team, comps, in, gcclFloat32, false);
        ASSERT_TRUE(AllAgree(o));
        Vec exact(n, 0.0f);
        for (const Vec& v : in)
          for (size_t i = 0; i < n; ++i) exact[i] += v[i];
        ASSERT_TRUE(SameAs(o.out[0], exact));
      }
    }
}

// fp16, bf16 and fp64 tensors: the same selections, rounded once into the dtype.
TEST(SparseAllReduce, OtherDatatypes) {
  for (const char* algo : kSparseAlgos)
    for (int p : {2, 5}) {
      RankTeam& team = Team(algo, p);
      for (gcclDataType_t dt : {gcclFloat16, gcclBfloat16, gcclFloat64})
        for (size_t n : {size_t{7}, size_t{1000}}) {
          SCOPED_TRACE(std::string(algo) + " " + gh::TypeName(dt) + " n=" + std::to_string(n));
          Compressors comps("topk:ratio=0.1", p, n, dt), refs("topk:ratio=0.1", p, n, gcclFloat32);
          std::vector<Vec> in = Inputs(p, n, 3 * n, true);
          Outcome o = AllReduce(team, comps, in, dt, n == 7);
          ASSERT_TRUE(AllAgree(o));
          ASSERT_TRUE(SameAs(o.out[0], RefSum(refs, in)));  // integer sums: exact in every dtype
        }
    }
}

TEST(SparseAllReduce, AvgDividesTheSum) {
  for (const char* algo : kSparseAlgos) {
    const int p = 4;
    const size_t n = 999;
    RankTeam& team = Team(algo, p);
    Compressors comps("topk:ratio=0.1", p, n, gcclFloat32), refs("topk:ratio=0.1", p, n, gcclFloat32);
    std::vector<Vec> in = Inputs(p, n, 5, true);
    Outcome o = AllReduce(team, comps, in, gcclFloat32, false, gcclAvg);
    ASSERT_TRUE(AllAgree(o));
    Vec sum = RefSum(refs, in);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(o.out[0][i], sum[i] / p) << algo << " [" << i << "]";
  }
}

// Σ_t out_t + Σ_r e_r = Σ_t Σ_r g_t,r (integers: exact).
void ExpectTelescoping(const std::string& algo, const char* spec, int p, size_t n, bool integer_check = true) {
  SCOPED_TRACE(algo + " " + spec + " p=" + std::to_string(p) + " n=" + std::to_string(n));
  RankTeam& team = Team(algo, p);
  Compressors comps(spec, p, n, gcclFloat32);
  std::vector<double> lhs(n, 0.0), rhs(n, 0.0);
  for (int call = 0; call < 4; ++call) {
    std::vector<Vec> in = Inputs(p, n, 100 + static_cast<uint64_t>(call), true);
    Outcome o = AllReduce(team, comps, in, gcclFloat32, call % 2 == 1);
    ASSERT_TRUE(AllAgree(o));
    for (size_t i = 0; i < n; ++i) {
      lhs[i] += o.out[0][i];
      for (const Vec& v : in) rhs[i] += v[i];
    }
  }
  for (int r = 0; r < p; ++r) {
    Vec e = Residual(comps[r], n);
    for (size_t i = 0; i < n; ++i) lhs[i] += e[i];
  }
  for (size_t i = 0; i < n; ++i) {
    if (integer_check)
      ASSERT_EQ(lhs[i], rhs[i]) << "[" << i << "]";
    else
      ASSERT_NEAR(lhs[i], rhs[i], 1e-3) << "[" << i << "]";
  }
}

TEST(SparseAllReduce, ErrorFeedbackTelescopes) {
  for (const char* algo : kSparseAlgos)
    for (int p : {1, 3, 8}) {
      ExpectTelescoping(algo, "topk:ratio=0.05", p, 1001);
      ExpectTelescoping(algo, "topk:ratio=0.05,global=1", p, 1001);
    }
  for (int p : {1, 2, 5, 8}) ExpectTelescoping("randk", "randk:ratio=0.1,ef=1", p, 1001);
}

// ---- global=1: about k entries of the sum survive, the largest of each range ----------------

TEST(SparseAllReduce, GlobalKeepsTheLargestOfEachRange) {
  for (int p : {1, 2, 3, 8})
    for (size_t n : {size_t{7}, size_t{1000}, size_t{4099}}) {
      const char* spec = "topk:ratio=0.05,global=1";
      SCOPED_TRACE("p=" + std::to_string(p) + " n=" + std::to_string(n));
      std::vector<Vec> in = Inputs(p, n, 9 * n, false);
      Compressors ag(spec, p, n, gcclFloat32), sr(spec, p, n, gcclFloat32), refs(spec, p, n, gcclFloat32);
      Outcome oa = AllReduce(Team("sparse-ag", p), ag, in, gcclFloat32, false);
      Outcome os = AllReduce(Team("sparse-sr", p), sr, in, gcclFloat32, true);
      ASSERT_TRUE(AllAgree(oa));
      ASSERT_TRUE(AllAgree(os));
      ASSERT_TRUE(SameAs(oa.out[0], os.out[0]));  // the same sums, the same selection
      Vec sum = RefSum(refs, in);                 // before re-sparsification
      const size_t k = std::max<size_t>(1, static_cast<size_t>(std::floor(0.05 * static_cast<double>(n) + 0.5)));
      for (int q = 0; q < p; ++q) {
        const size_t base = n / static_cast<size_t>(p), extra = n % static_cast<size_t>(p), uq = static_cast<size_t>(q);
        const size_t off = uq * base + std::min(uq, extra), len = base + (uq < extra ? 1 : 0);
        const size_t keep = (k * len + n - 1) / n;
        size_t kept = 0;
        float min_kept = INFINITY, max_dropped = 0;
        for (size_t i = off; i < off + len; ++i) {
          if (os.out[0][i] != 0.0f) {
            ASSERT_EQ(os.out[0][i], sum[i]) << "[" << i << "]";  // kept entries are the sums themselves
            ++kept;
            min_kept = std::min(min_kept, std::fabs(sum[i]));
          } else {
            max_dropped = std::max(max_dropped, std::fabs(sum[i]));
          }
        }
        EXPECT_LE(kept, keep) << "range " << q;
        if (kept < keep) {
          EXPECT_EQ(max_dropped, 0.0f) << "range " << q;
        }
        EXPECT_GE(min_kept, max_dropped) << "range " << q;
      }
    }
}

// ---- random-k: the sum of every rank's randk frame, values through a dense allreduce ------

TEST(RandkAllReduce, MatchesSumOfFrames) {
  const char* const specs[] = {"randk:ratio=0.01", "randk:ratio=0.1", "randk:ratio=0.1,ef=1,seed=3",
                               "randk:ratio=0.1,values=fp16", "randk:ratio=1"};
  for (int p = 1; p <= 8; ++p) {
    RankTeam& team = Team("randk", p);
    ASSERT_EQ(team.init_result(), gcclSuccess);
    for (size_t n : Counts(p)) {
      for (const char* spec : specs) {
        SCOPED_TRACE("p=" + std::to_string(p) + " n=" + std::to_string(n) + " " + spec);
        Compressors comps(spec, p, n, gcclFloat32), refs(spec, p, n, gcclFloat32);
        for (int call = 0; call < 2; ++call) {  // the second draws other indices
          std::vector<Vec> in = Inputs(p, n, 31 * n + static_cast<uint64_t>(call), true);
          Outcome o = AllReduce(team, comps, in, gcclFloat32, (n + static_cast<size_t>(call)) % 2 == 1);
          ASSERT_TRUE(AllAgree(o));
          ASSERT_TRUE(SameAs(o.out[0], RefSum(refs, in)));
        }
        for (int r = 0; r < p; ++r) ASSERT_TRUE(SameAs(Residual(comps[r], n), Residual(refs[r], n))) << "rank " << r;
      }
    }
  }
}

TEST(RandkAllReduce, OtherDatatypes) {
  const int p = 3;
  RankTeam& team = Team("randk", p);
  for (gcclDataType_t dt : {gcclFloat16, gcclBfloat16, gcclFloat64}) {
    const size_t n = 1000;
    SCOPED_TRACE(gh::TypeName(dt));
    Compressors comps("randk:ratio=0.1", p, n, dt), refs("randk:ratio=0.1", p, n, gcclFloat32);
    std::vector<Vec> in = Inputs(p, n, 77, true);
    Outcome o = AllReduce(team, comps, in, dt, true);
    ASSERT_TRUE(AllAgree(o));
    ASSERT_TRUE(SameAs(o.out[0], RefSum(refs, in)));
  }
}

// Sums beyond fp32's range: the summed value overflows to inf, which the sum
// frame carries as an exception.
TEST(RandkAllReduce, OverflowingSumsStayInfinite) {
  const int p = 4;
  const size_t n = 100;
  Compressors comps("randk:ratio=0.5", p, n, gcclFloat32), refs("randk:ratio=0.5", p, n, gcclFloat32);
  std::vector<Vec> in(p, Vec(n, 3e38f));
  Outcome o = AllReduce(Team("randk", p), comps, in, gcclFloat32, false);
  ASSERT_TRUE(AllAgree(o));
  Vec ref = RefSum(refs, in);
  size_t inf = 0;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(std::isinf(o.out[0][i]), std::isinf(ref[i])) << "[" << i << "]";
    inf += std::isinf(o.out[0][i]);
  }
  EXPECT_EQ(inf, 50u);
}

// ---- non-finite inputs reach every rank --------------------------------------------------------

TEST(SparseAllReduce, NonFiniteInputsPropagate) {
  struct Run {
    const char* algo;
    const char* spec;
  } runs[] = {{"sparse-ag", "topk:ratio=0.01"},
              {"sparse-sr", "topk:ratio=0.01"},
              {"sparse-sr", "topk:ratio=0.01,global=1"},
              {"sparse-ag", "topk:ratio=0.1,values=fp16"},
              {"randk", "randk:ratio=0.01"},
              {"randk", "randk:ratio=0.1,ef=1"}};
  for (const Run& run : runs)
    for (int p : {1, 2, 5, 8}) {
      const size_t n = 1000;
      SCOPED_TRACE(std::string(run.algo) + " " + run.spec + " p=" + std::to_string(p));
      RankTeam& team = Team(run.algo, p);
      Compressors comps(run.spec, p, n, gcclFloat32);
      std::vector<Vec> in = Inputs(p, n, 4, true);
      const size_t bad[] = {0, 321, n - 1};
      in[0][bad[0]] = NAN;
      in[static_cast<size_t>(p - 1)][bad[1]] = INFINITY;
      in[static_cast<size_t>(p / 2)][bad[2]] = -INFINITY;
      for (int call = 0; call < 2; ++call) {  // and the residual stays finite for the next call
        Outcome o = AllReduce(team, comps, in, gcclFloat32, call == 1);
        ASSERT_TRUE(AllAgree(o));
        for (size_t i = 0; i < n; ++i) {
          const bool want = i == bad[0] || i == bad[1] || i == bad[2];
          ASSERT_EQ(!std::isfinite(o.out[0][i]), want) << "[" << i << "] = " << o.out[0][i];
        }
      }
      for (int r = 0; r < p; ++r)
        for (float e : Residual(comps[r], n)) ASSERT_TRUE(std::isfinite(e));
    }
}

// So many non-finite inputs that frames go raw (the whole tensor verbatim): the
// split-reduce then decodes them densely, randk sums whole frames.
TEST(SparseAllReduce, RawFramesStillSum) {
  struct Run {
    const char* algo;
    const char* spec;
  } runs[] = {{"sparse-ag", "topk:ratio=0.1"}, {"sparse-sr", "topk:ratio=0.1"}, {"randk", "randk:ratio=0.1"}};
  for (const Run& run : runs)
    for (int p : {1, 3, 4}) {
      const size_t n = 500;
      SCOPED_TRACE(std::string(run.algo) + " p=" + std::to_string(p));
      Compressors comps(run.spec, p, n, gcclFloat32), refs(run.spec, p, n, gcclFloat32);
      std::vector<Vec> in = Inputs(p, n, 8, true);
      for (size_t i = 0; i < n; i += 3) in[1 % static_cast<size_t>(p)][i] = i % 2 ? INFINITY : NAN;
      {
        Compressors probe(run.spec, 1, n, gcclFloat32);
        size_t cap = 0, bytes = 0;
        ASSERT_EQ(gcclEncodeBound(probe[0], &cap), gcclSuccess);
        std::vector<unsigned char> frame(cap);
        ASSERT_EQ(gcclEncode(probe[0], in[1 % static_cast<size_t>(p)].data(), frame.data(), cap, &bytes), gcclSuccess);
        ASSERT_TRUE(frame[7] & 0x02) << "the frame is not raw (header flags byte)";
      }
      Outcome o = AllReduce(Team(run.algo, p), comps, in, gcclFloat32, false);
      ASSERT_TRUE(AllAgree(o));
      Vec ref = RefSum(refs, in);
      for (size_t i = 0; i < n; ++i) {
        if (!std::isfinite(ref[i]))
          ASSERT_FALSE(std::isfinite(o.out[0][i])) << "[" << i << "]";
        else
          ASSERT_EQ(o.out[0][i], ref[i]) << "[" << i << "]";
      }
    }
}

// ---- sparse-sr's range messages ------------------------------------------------------------

std::vector<unsigned char> RangeMessage(const Vec& x) {
  std::vector<unsigned char> m(RANGE_HEADER + 4 * x.size());
  m.resize(sparse_range_write(m.data(), x.data(), x.size()));
  return m;
}

Vec Sparse(size_t len, size_t every, float first) {
  Vec x(len, 0.0f);
  for (size_t i = 0; i < len; i += every) x[i] = first + static_cast<float>(i);
  return x;
}

TEST(SparseRangeMessage, RoundTripsSparseAndDense) {
  for (size_t len : {1, 2, 7, 1000})
    for (size_t every : {1, 2, 3, 50, 2000}) {
      SCOPED_TRACE("len=" + std::to_string(len) + " every=" + std::to_string(every));
      Vec x = Sparse(len, every, 1.0f);
      x[0] = -0.0f;  // an entry: its bits travel
      x[len - 1] = NAN;
      std::vector<unsigned char> m = RangeMessage(x);
      ASSERT_LE(m.size(), RANGE_HEADER + 4 * len);
      if (every == 1) {
        EXPECT_EQ(m[3], 'D');  // every element set: dense
      }
      if (every >= 3 && len >= 7) {
        EXPECT_EQ(m[3], 'S');  // a third or less: sparse
      }
      Vec set(len, 5.0f), add(len, 1.0f);
      ASSERT_EQ(sparse_range_apply(m.data(), m.size(), set.data(), len, 0, 3), gcclSuccess);
      ASSERT_EQ(sparse_range_apply(m.data(), m.size(), add.data(), len, 1, 3), gcclSuccess);
      for (size_t i = 0; i < len; ++i) {
        uint32_t a, b;
        std::memcpy(&a, &set[i], 4);
        std::memcpy(&b, &x[i], 4);
        ASSERT_EQ(a, b) << "[" << i << "]";
        if (std::isfinite(x[i])) {
          ASSERT_EQ(add[i], 1.0f + x[i]) << "[" << i << "]";
        }
      }
    }
}

TEST(SparseRangeMessage, CorruptMessagesAreRejected) {
  const size_t len = 1000;
  const std::vector<unsigned char> sparse = RangeMessage(Sparse(len, 37, 1.0f)),
                                   dense = RangeMessage(Sparse(len, 1, 1.0f));
  ASSERT_EQ(sparse[3], 'S');
  ASSERT_EQ(dense[3], 'D');
  auto rejected = [&](std::vector<unsigned char> m, size_t bytes, size_t range) {
    Vec dst(range, 2.0f);
    gcclResult_t r = sparse_range_apply(m.data(), bytes, dst.data(), range, 1, 6);
    for (float v : dst)
      if (v != 2.0f) return ::testing::AssertionFailure() << "dst written";
    if (r != gcclCorruptData) return ::testing::AssertionFailure() << "returned " << r;
    return gh::MentionsAny(gcclGetLastError(nullptr), {"rank 6"});
  };
  for (const auto& m : {sparse, dense}) {
    EXPECT_TRUE(rejected(m, m.size() - 1, len));  // truncated
    EXPECT_TRUE(rejected(m, 10, len));            // shorter than the header
    std::vector<unsigned char> bad = m;
    bad[0] ^= 1;  // tag
    EXPECT_TRUE(rejected(bad, bad.size(), len));
    bad = m;
    bad[5] = 1;  // reserved
    EXPECT_TRUE(rejected(bad, bad.size(), len));
    bad = m;
    bad[8] += 1;  // entry count
    EXPECT_TRUE(rejected(bad, bad.size(), len));
  }
  EXPECT_TRUE(rejected(dense, dense.size(), len + 1));  // another range's length
  // an index section with one more set bit than entries
  std::vector<unsigned char> bad = sparse;
  size_t i = bad.size() - 1;
  while (bad[i] == 0xFF) --i;
  for (int b = 0; b < 8; ++b)
    if (!(bad[i] >> b & 1)) {
      bad[i] = static_cast<unsigned char>(bad[i] | 1 << b);
      break;
    }
  EXPECT_TRUE(rejected(bad, bad.size(), len));
}

// ---- the global key --------------------------------------------------------------------------

TEST(SparseSpec, GlobalKey) {
  codec_spec s{};
  ASSERT_EQ(spec_parse("topk:global=1,ratio=0.1", &s), gcclSuccess);
  EXPECT_EQ(s.global, 1);
  char buf[SPEC_FORMAT_MAX];
  ASSERT_EQ(spec_format(&s, buf, sizeof buf), gcclSuccess);
  EXPECT_STREQ(buf, "topk:ratio=0.10000000000000001,approx=0,values=fp32,ef=1,seed=0,zstd=0,global=1");
  codec_spec back{};
  ASSERT_EQ(spec_parse(buf, &back), gcclSuccess);
  EXPECT_EQ(back.global, 1);
  ASSERT_EQ(spec_parse("topk:global=0", &s), gcclSuccess);
  EXPECT_EQ(s.global, 0);
  ASSERT_EQ(spec_format(&s, buf, sizeof buf), gcclSuccess);
  EXPECT_STREQ(buf, "topk:ratio=0.01,approx=0,values=fp32,ef=1,seed=0,zstd=0");  // the default is not printed
  for (const char* bad :
       {"topk:global=2", "topk:global=", "topk:global=1,global=1", "randk:global=1", "sign:global=0"}) {
    s.global = 7;
    EXPECT_EQ(spec_parse(bad, &s), gcclInvalidArgument) << bad;
    EXPECT_EQ(s.global, 7) << bad;
  }
}

// Ranks that disagree on global fail together.
TEST(SparseSpec, GlobalMismatchIsInvalidUsage) {
  const int p = 3;
  const size_t n = 100;
  RankTeam& team = Team("sparse-sr", p);
  gcclCompressor_t c[p];
  for (int r = 0; r < p; ++r)
    ASSERT_EQ(gcclCompressorCreate(&c[r], r == 1 ? "topk:global=1" : "topk", n, gcclFloat32), gcclSuccess);
  std::vector<Vec> buf(p, Vec(n, 1.0f));
  std::vector<gcclResult_t> res(p);
  team.Run([&](int r, gcclComm_t comm) {
    res[static_cast<size_t>(r)] =
        gcclAllReduceCompressed(buf[static_cast<size_t>(r)].data(), buf[static_cast<size_t>(r)].data(), n, gcclFloat32,
                                gcclSum, c[r], comm, nullptr);
  });
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(res[static_cast<size_t>(r)], gcclInvalidUsage) << "rank " << r;
    gcclCompressorDestroy(c[r]);
  }
}

// ---- a peer that announces an impossible frame size ------------------------------------

// Rank 0's transport reports rank 1's announced frame size (the only 8-byte small
// allgather of sparse-ag) as one byte past the codec's bound.
const transport_ops* g_honest_ops = nullptr;
uint64_t g_lie_bytes = 0;

gcclResult_t AllgatherSmallThatLies(struct transport* tp, const void* in, size_t bytes, void* out) {
  gcclResult_t r = g_honest_ops->allgather_small(tp, in, bytes, out);
  if (r == gcclSuccess && bytes == sizeof(uint64_t)) std::memcpy(static_cast<char*>(out) + bytes, &g_lie_bytes, bytes);
  return r;
}

TEST(SparseAllReduce, AFrameSizeAboveTheBoundIsCorruptNotAnAllocation) {
  const int p = 2;
  const size_t n = 1000;
  Compressors comps("topk:ratio=0.1", p, n, gcclFloat32);
  size_t bound = 0;
  ASSERT_EQ(gcclEncodeBound(comps[0], &bound), gcclSuccess);
  g_lie_bytes = bound + 1;
  struct local_world* w = nullptr;
  ASSERT_EQ(local_world_create(&w, p), gcclSuccess);
  std::vector<struct transport*> tps(p, nullptr);
  for (int r = 0; r < p; ++r) ASSERT_EQ(local_transport_create(&tps[r], w, r, 20000), gcclSuccess);
  transport_ops lying = *tps[0]->ops;
  g_honest_ops = tps[0]->ops;
  lying.allgather_small = AllgatherSmallThatLies;
  tps[0]->ops = &lying;
  const std::vector<Vec> in = Inputs(p, n, 77, false);
  std::vector<Vec> out(p, Vec(n, -1.0f));
  std::vector<gcclResult_t> res(p, gcclInternalError);
  std::vector<std::string> text(p);
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r)
    threads.emplace_back([&, r] {
      const size_t ur = static_cast<size_t>(r);
      std::vector<unsigned char> scratch(1 << 16);
      struct coll_ctx ctx = {
          tps[ur], r, p, scratch.data(), scratch.size(), nullptr, nullptr, p, nullptr, 0, nullptr, {}, nullptr, 0};
      struct coll_args a = coll_call(COLL_ALLREDUCE, in[ur].data(), out[ur].data(), n, gcclFloat32, gcclSum, 0);
      a.comp = comps[r];
      res[ur] = allreduce_sparse_ag(&ctx, &a);
      text[ur] = err_last();
      if (res[ur] != gcclSuccess) tps[ur]->ops->abort(tps[ur], res[ur]);  // as a communicator does
      tps[ur]->ops->cancel_all(tps[ur]);
      coll_workspace_free(&ctx);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < p; ++r) tps[static_cast<size_t>(r)]->ops->destroy(tps[static_cast<size_t>(r)]);
  local_world_unref(w);
  EXPECT_EQ(res[0], gcclCorruptData) << text[0];
  EXPECT_NE(text[0].find("announces"), std::string::npos) << text[0];
  EXPECT_NE(text[0].find(std::to_string(bound + 1)), std::string::npos) << text[0];
  EXPECT_NE(res[1], gcclSuccess) << "the honest rank must not succeed alone";
  for (int r = 0; r < p; ++r)
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(out[static_cast<size_t>(r)][i], -1.0f) << "rank " << r << " wrote its output";
}

}  // namespace
