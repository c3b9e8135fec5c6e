// test_collectives.cc — every dense collective, datatype and op on p = 1..8 thread
// ranks, compared exactly with a reference and bit for bit across ranks; in place
// and out of place; each algorithm forced through GCCL_ALGO.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/harness.h"
#include "gccl.h"

namespace {

using gh::Case;
using gh::CasePlan;
using gh::Coll;
using gh::RankTeam;

constexpr int kMaxRanks = 8;
constexpr size_t kBigCount = (size_t{1} << 20) + 3;
constexpr int kMaxFailingCases = 6;  // per test, so that a broken collective does not flood the log

// The small counts of the matrix: 0, 1, 2, 3, 7, p-1, p+1 and 1000.
std::vector<size_t> SmallCounts(int p) {
  std::set<size_t> s = {0, 1, 2, 3, 7, static_cast<size_t>(p - 1), static_cast<size_t>(p + 1), 1000};
  return {s.begin(), s.end()};
}

// Counts also run in place (every dtype and op).
std::vector<size_t> InPlaceCounts(int p) {
  std::set<size_t> s = {0, 1, 3, static_cast<size_t>(p - 1), static_cast<size_t>(p + 1), 1000};
  return {s.begin(), s.end()};
}

std::vector<int> Roots(int p) {
  std::set<int> s = {0, p - 1};
  return {s.begin(), s.end()};
}

// Seeds differ per case (an odd seed also makes the root-only collectives pass
// NULL for the buffers they must not touch).
uint64_t CaseSeed(const Case& c) {
  return gh::Mix64((static_cast<uint64_t>(c.coll) << 56) ^ (static_cast<uint64_t>(c.dt) << 48) ^
                   (static_cast<uint64_t>(c.op) << 40) ^ (static_cast<uint64_t>(c.p) << 32) ^ (c.count << 8) ^
                   (static_cast<uint64_t>(c.root) << 2) ^ (c.inplace ? 1u : 0u));
}

// The matrix for one collective and p: every datatype x op (where it has one) x
// small count x root {0, p-1}, out of place; in place on a subset of counts.
std::vector<Case> MatrixCases(Coll coll, int p) {
  std::vector<Case> cases;
  for (gcclDataType_t dt : gh::kAllTypes) {
    std::vector<gcclRedOp_t> ops;
    if (gh::CollHasOp(coll))
      ops.assign(std::begin(gh::kAllOps), std::end(gh::kAllOps));
    else
      ops.push_back(gcclSum);
    for (gcclRedOp_t op : ops) {
      std::vector<int> roots = gh::CollHasRoot(coll) ? Roots(p) : std::vector<int>{0};
      for (int inplace = 0; inplace < 2; ++inplace) {
        for (size_t count : inplace ? InPlaceCounts(p) : SmallCounts(p)) {
          for (int root : roots) {
            Case c;
            c.coll = coll;
            c.dt = dt;
            c.op = op;
            c.p = p;
            c.count = count;
            c.inplace = inplace != 0;
            c.root = root;
            c.seed = CaseSeed(c);
            cases.push_back(c);
          }
        }
      }
    }
  }
  return cases;
}

// Runs cases on a team, stopping after kMaxFailingCases failures.
void RunCases(RankTeam& team, const std::vector<Case>& cases) {
  int failing = 0;
  for (const Case& c : cases) {
    CasePlan plan(c);
    if (!plan.RunOn(team) && ++failing >= kMaxFailingCases) {
      ADD_FAILURE() << "stopping after " << failing << " failing cases (of " << cases.size() << ")";
      return;
    }
  }
}

// ---- the harness's own helpers ------------------------------------------------

TEST(Harness, HalfAndBfloat16Conversions) {
  EXPECT_EQ(gh::FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(gh::FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(gh::FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(gh::FloatToHalf(65520.0f), 0x7c00);               // rounds up to inf
  EXPECT_EQ(gh::FloatToHalf(1.0f + 1.0f / 2048), 0x3c00);     // tie to even (down)
  EXPECT_EQ(gh::FloatToHalf(1.0f + 3.0f / 2048), 0x3c02);     // tie to even (up)
  EXPECT_EQ(gh::FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(gh::FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(gh::FloatToHalf(0.1f), 0x2e66);
  EXPECT_EQ(gh::FloatToHalf(INFINITY), 0x7c00);
  EXPECT_TRUE(std::isnan(gh::HalfToFloat(gh::FloatToHalf(NAN))));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const auto hh = static_cast<uint16_t>(h);
    const float f = gh::HalfToFloat(hh);
    if (!std::isnan(f)) {
      ASSERT_EQ(gh::FloatToHalf(f), hh) << "half 0x" << std::hex << h;
    }
  }
  EXPECT_EQ(gh::FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(gh::FloatToBf16(-3.0f), 0xc040);
  EXPECT_EQ(gh::FloatToBf16(1.0f + 1.0f / 256), 0x3f80);  // tie to even
  EXPECT_EQ(gh::FloatToBf16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_EQ(gh::Bf16ToFloat(0x4049), 3.140625f);
}

TEST(Harness, ReferenceInputsAreExactAndVaried) {
  // Float inputs and their sums over p ranks are exactly representable; avg
  // inputs sum to a multiple of p; integer references wrap.
  for (gcclDataType_t dt : {gcclFloat16, gcclBfloat16, gcclFloat32, gcclFloat64}) {
    for (int p = 1; p <= kMaxRanks; ++p) {
      for (size_t i = 0; i < 200; ++i) {
        double s = 0;
        for (int r = 0; r < p; ++r) {
          const double v = gh::FloatInput(dt, gcclAvg, p, r, i, 7);
          unsigned char buf[8] = {};
          gh::StoreDouble(dt, buf, 0, v);
          ASSERT_EQ(gh::LoadDouble(dt, buf, 0), v) << gh::TypeName(dt);
          s += v;
          gh::StoreDouble(dt, buf, 0, s);
          ASSERT_EQ(gh::LoadDouble(dt, buf, 0), s) << gh::TypeName(dt) << " partial sum";
        }
        if (p > 1) {
          ASSERT_EQ(std::fmod(s, p), 0.0) << gh::TypeName(dt) << " p=" << p;
        }
      }
    }
  }
  int8_t out[64];
  gh::RefReduce(gcclInt8, gcclSum, 8, 3, 0, 64, out);
  for (size_t i = 0; i < 64; ++i) {
    int s = 0;
    for (int r = 0; r < 8; ++r) s += static_cast<int8_t>(gh::IntInput(gcclInt8, gcclSum, r, i, 3));
    ASSERT_EQ(out[i], static_cast<int8_t>(static_cast<uint8_t>(s)));
  }
}

// ---- the matrix: collective x p ---------------------------------------------

struct MatrixParam {
  Coll coll;
  int p;
};

class CollectiveMatrix : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(CollectiveMatrix, AllTypesOpsCountsExact) {
  const MatrixParam mp = GetParam();
  RankTeam& team = gh::SharedTeam(mp.p);
  ASSERT_EQ(team.init_result(), gcclSuccess);
  RunCases(team, MatrixCases(mp.coll, mp.p));
}

std::vector<MatrixParam> AllMatrixParams() {
  std::vector<MatrixParam> v;
  for (Coll c : {Coll::AllReduce, Coll::AllGather, Coll::ReduceScatter, Coll::Broadcast, Coll::Reduce})
    for (int p = 1; p <= kMaxRanks; ++p) v.push_back({c, p});
  return v;
}

INSTANTIATE_TEST_SUITE_P(All, CollectiveMatrix, ::testing::ValuesIn(AllMatrixParams()),
                         [](const ::testing::TestParamInfo<MatrixParam>& info) {
                           return std::string(gh::CollName(info.param.coll)) + "_p" + std::to_string(info.param.p);
                         });

// ---- a middle root, for the rooted collectives -------------------------------

TEST(Collectives, MiddleRoot) {
  for (int p = 3; p <= kMaxRanks; ++p) {
    RankTeam& team = gh::SharedTeam(p);
    ASSERT_EQ(team.init_result(), gcclSuccess);
    std::vector<Case> cases;
    for (Coll coll : {Coll::Broadcast, Coll::Reduce})
      for (gcclDataType_t dt : {gcclInt8, gcclFloat16, gcclUint64})
        for (size_t count : {size_t{1}, static_cast<size_t>(p + 1), size_t{1000}}) {
          Case c;
          c.coll = coll;
          c.dt = dt;
          c.op = gcclMax;
          c.p = p;
          c.count = count;
          c.root = p / 2;
          c.inplace = (count & 1) == 0;
          c.seed = CaseSeed(c) | 1;
          cases.push_back(c);
        }
    RunCases(team, cases);
  }
}

// ---- big counts: 2^20 + 3 elements, a few combinations -----------------------

class BigCount : public ::testing::TestWithParam<Case> {};

TEST_P(BigCount, Exact) {
  Case c = GetParam();
  c.seed = CaseSeed(c);
  RankTeam& team = gh::SharedTeam(c.p);
  ASSERT_EQ(team.init_result(), gcclSuccess);
  CasePlan plan(c);
  plan.RunOn(team);
}

Case Big(Coll coll, gcclDataType_t dt, gcclRedOp_t op, int p, bool inplace, int root = 0) {
  Case c;
  c.coll = coll;
  c.dt = dt;
  c.op = op;
  c.p = p;
  c.count = kBigCount;
  c.inplace = inplace;
  c.root = root;
  return c;
}

std::vector<Case> BigCases() {
  std::vector<Case> v;
  for (int p = 1; p <= kMaxRanks; ++p) v.push_back(Big(Coll::AllReduce, gcclFloat32, gcclSum, p, p % 2 == 0));
  v.push_back(Big(Coll::AllReduce, gcclBfloat16, gcclAvg, 3, false));
  v.push_back(Big(Coll::AllReduce, gcclInt8, gcclProd, 5, true));
  v.push_back(Big(Coll::AllReduce, gcclFloat16, gcclMax, 7, false));
  v.push_back(Big(Coll::AllReduce, gcclInt64, gcclMin, 6, false));
  v.push_back(Big(Coll::ReduceScatter, gcclFloat32, gcclSum, 2, false));
  v.push_back(Big(Coll::AllGather, gcclUint8, gcclSum, 3, true));
  // Outputs over 16 MiB in all: the direct copies use streaming stores.
  v.push_back(Big(Coll::AllGather, gcclFloat32, gcclSum, 4, false));
  v.push_back(Big(Coll::AllGather, gcclFloat32, gcclSum, 3, true));
  v.push_back(Big(Coll::Broadcast, gcclFloat64, gcclSum, 5, false, 4));
  v.push_back(Big(Coll::Reduce, gcclFloat32, gcclSum, 7, false, 0));
  return v;
}

INSTANTIATE_TEST_SUITE_P(All, BigCount, ::testing::ValuesIn(BigCases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           std::string s = std::string(gh::CollName(c.coll)) + "_" + gh::TypeName(c.dt) + "_" +
                                           gh::OpName(c.op) + "_p" + std::to_string(c.p) +
                                           (c.inplace ? "_inplace" : "");
                           return s;
                         });

// ---- bit-identical results with values that do round -----------------------------
// Random reals (not exact small integers): the result depends on the order of the
// additions, but must be the same on every rank, the same on a repeated call, and
// close to the exact sum.

void FillRandomReal(gcclDataType_t dt, uint64_t seed, int rank, size_t n, void* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint64_t h = gh::ElemHash(seed, rank, i, dt, gcclSum);
    const double u = static_cast<double>(h >> 11) / 9007199254740992.0;  // [0, 1)
    gh::StoreDouble(dt, out, i, 2 * u - 1 + (rank % 3) * 0.37);
  }
}

double UnitRoundoff(gcclDataType_t dt) {
  switch (dt) {
    case gcclFloat16:
      return std::ldexp(1.0, -11);
    case gcclBfloat16:
      return std::ldexp(1.0, -8);
    case gcclFloat32:
      return std::ldexp(1.0, -24);
    default:
      return std::ldexp(1.0, -53);
  }
}

// AllReduce sum/avg of random reals on `team`: every rank bit-identical to rank 0,
// a repeated call identical to the first, and each element within
// 2(p+1)u * sum|x| of the exact result.
void CheckInexactAllReduce(RankTeam& team, gcclDataType_t dt, gcclRedOp_t op, size_t n, const std::string& what) {
  const int p = team.size();
  const size_t sz = gh::TypeSize(dt);
  std::vector<std::vector<unsigned char>> in(static_cast<size_t>(p)), out1(static_cast<size_t>(p)),
      out2(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    in[r].resize(n * sz);
    out1[r].resize(n * sz);
    out2[r].resize(n * sz);
    FillRandomReal(dt, 99 + n, r, n, in[r].data());
  }
  std::vector<gcclResult_t> res1(static_cast<size_t>(p)), res2(static_cast<size_t>(p));
  team.Run([&](int r, gcclComm_t comm) {
    res1[r] = gcclAllReduce(in[r].data(), out1[r].data(), n, dt, op, comm, nullptr);
    res2[r] = gcclAllReduce(in[r].data(), out2[r].data(), n, dt, op, comm, nullptr);
  });
  const std::string tag =
      what + " " + gh::TypeName(dt) + " " + gh::OpName(op) + " p=" + std::to_string(p) + " count=" + std::to_string(n);
  for (int r = 0; r < p; ++r) {
    ASSERT_EQ(res1[r], gcclSuccess) << tag << " rank " << r << ": " << gcclGetLastError(team.comm(r));
    ASSERT_EQ(res2[r], gcclSuccess) << tag << " rank " << r << ": " << gcclGetLastError(team.comm(r));
  }
  for (int r = 0; r < p; ++r) {
    const size_t d = gh::FirstDiff(dt, out1[r].data(), out1[0].data(), n);
    EXPECT_EQ(d, n) << tag << ": rank " << r << " differs from rank 0 at [" << d << "]: "
                    << (d < n ? gh::FormatElem(dt, out1[r].data(), d) + " vs " + gh::FormatElem(dt, out1[0].data(), d)
                              : "");
    const size_t d2 = gh::FirstDiff(dt, out2[r].data(), out1[r].data(), n);
    EXPECT_EQ(d2, n) << tag << ": rank " << r << " repeated call differs at [" << d2 << "]";
  }
  const double u = UnitRoundoff(dt);
  for (size_t i = 0; i < n; ++i) {
    double exact = 0, mag = 0;
    for (int r = 0; r < p; ++r) {
      const double v = gh::LoadDouble(dt, in[r].data(), i);
      exact += v;
      mag += std::fabs(v);
    }
    if (op == gcclAvg) {
      exact /= p;
      mag /= p;
    }
    const double got = gh::LoadDouble(dt, out1[0].data(), i);
    ASSERT_LE(std::fabs(got - exact), 2 * (p + 1) * u * mag + 1e-300) << tag << " at [" << i << "]";
  }
}

TEST(Collectives, InexactFloatsBitIdenticalAcrossRanks) {
  for (int p = 1; p <= kMaxRanks; ++p) {
    RankTeam& team = gh::SharedTeam(p);
    ASSERT_EQ(team.init_result(), gcclSuccess);
    for (gcclDataType_t dt : {gcclFloat16, gcclBfloat16, gcclFloat32, gcclFloat64})
      for (gcclRedOp_t op : {gcclSum, gcclAvg})
        for (size_t n : {size_t{13}, size_t{1000}, size_t{40001}}) CheckInexactAllReduce(team, dt, op, n, "auto");
  }
}

// ---- the same buffers, many calls in a row, alternating collectives -------------

TEST(Collectives, BackToBackMixedSequence) {
  for (int p : {2, 3, 8}) {
    RankTeam& team = gh::SharedTeam(p);
    ASSERT_EQ(team.init_result(), gcclSuccess);
    std::vector<Case> cases;
    for (int i = 0; i < 40; ++i) {
      Case c;
      c.coll = static_cast<Coll>(i % 5);
      c.dt = gh::kAllTypes[(i * 3) % 10];
      c.op = gh::kAllOps[(i * 7) % 5];
      c.p = p;
      c.count = static_cast<size_t>((i * 37) % 101);
      c.root = i % p;
      c.inplace = (i % 3) == 0;
      c.seed = 1000 + static_cast<uint64_t>(i);
      cases.push_back(c);
    }
    RunCases(team, cases);
  }
}

// ---- buffers that are element-aligned but not vector-aligned ---------------------

TEST(Collectives, MisalignedBuffers) {
  for (int p : {1, 2, 3, 5, 8}) {
    RankTeam& team = gh::SharedTeam(p);
    ASSERT_EQ(team.init_result(), gcclSuccess);
    std::vector<Case> cases;
    for (Coll coll : {Coll::AllReduce, Coll::AllGather, Coll::ReduceScatter, Coll::Broadcast, Coll::Reduce})
      for (gcclDataType_t dt : {gcclInt8, gcclFloat16, gcclBfloat16, gcclFloat32, gcclFloat64, gcclUint64})
        for (size_t count : {size_t{33}, size_t{4099}})
          for (int inplace = 0; inplace < 2; ++inplace) {
            Case c;
            c.coll = coll;
            c.dt = dt;
            c.op = gh::CollHasOp(coll) ? (dt == gcclInt8 ? gcclProd : gcclSum) : gcclSum;
            c.p = p;
            c.count = count;
            c.inplace = inplace != 0;
            c.root = p - 1;
            c.misalign = 1;
            c.seed = CaseSeed(c) ^ 0x3a;
            cases.push_back(c);
          }
    RunCases(team, cases);
  }
}

// ---- different communicators used from different threads at once -----------------

TEST(Collectives, CommunicatorsUsedConcurrently) {
  // Thread safety: teams of 2, 3 and 4 ranks (9 threads) run at the same time.
  const int sizes[] = {2, 3, 4};
  std::vector<std::unique_ptr<RankTeam>> teams;
  for (int p : sizes) {
    gh::ScopedEnv timeout("GCCL_TIMEOUT_MS", "60000");
    teams.emplace_back(new RankTeam(p));
    ASSERT_EQ(teams.back()->init_result(), gcclSuccess);
  }
  std::vector<std::vector<Case>> cases(teams.size());
  for (size_t t = 0; t < teams.size(); ++t)
    for (int i = 0; i < 30; ++i) {
      Case c;
      c.coll = static_cast<Coll>((i + static_cast<int>(t)) % 5);
      c.dt = gh::kAllTypes[(i * 7 + static_cast<int>(t)) % 10];
      c.op = gh::kAllOps[i % 5];
      c.p = sizes[t];
      c.count = static_cast<size_t>(1 + (i * 131) % 3001);
      c.root = i % sizes[t];
      c.inplace = (i % 4) == 1;
      c.seed = 5000 + 100 * t + static_cast<uint64_t>(i);
      cases[t].push_back(c);
    }
  // Plans are built and checked by each driver thread; failures are collected
  // and reported here (gtest assertions from several threads are fine on POSIX).
  std::vector<std::thread> drivers;
  for (size_t t = 0; t < teams.size(); ++t)
    drivers.emplace_back([&, t] {
      for (const Case& c : cases[t]) {
        CasePlan plan(c);
        plan.RunOn(*teams[t]);
      }
    });
  for (auto& d : drivers) d.join();
}

// ---- each algorithm forced through GCCL_ALGO ------------------------------------

struct AlgoParam {
  const char* algo;
  int p;
};

class ForcedAlgo : public ::testing::TestWithParam<AlgoParam> {};

TEST_P(ForcedAlgo, AllReduceExact) {
  const AlgoParam ap = GetParam();
  const int p = ap.p;
  std::unique_ptr<RankTeam> team;
  {
    gh::ScopedEnv algo("GCCL_ALGO", ap.algo);
    gh::ScopedEnv timeout("GCCL_TIMEOUT_MS", "60000");
    team.reset(new RankTeam(p));
  }
  ASSERT_EQ(team->init_result(), gcclSuccess) << gcclGetLastError(nullptr);
  std::vector<Case> cases;
  const std::pair<gcclDataType_t, gcclRedOp_t> combos[] = {
      {gcclFloat32, gcclSum}, {gcclInt32, gcclProd}, {gcclBfloat16, gcclMax}, {gcclFloat16, gcclAvg},
      {gcclInt8, gcclSum},    {gcclUint64, gcclMin}, {gcclFloat64, gcclAvg},  {gcclUint8, gcclAvg}};
  std::set<size_t> counts = {0, 1, 3, 7, static_cast<size_t>(p - 1), static_cast<size_t>(p + 1), 1000};
  for (auto [dt, op] : combos)
    for (size_t count : counts)
      for (int inplace = 0; inplace < 2; ++inplace) {
        if (inplace && count != 1000 && count != static_cast<size_t>(p + 1)) continue;
        Case c;
        c.coll = Coll::AllReduce;
        c.dt = dt;
        c.op = op;
        c.p = p;
        c.count = count;
        c.inplace = inplace != 0;
        c.seed = CaseSeed(c) ^ 0xa160;
        cases.push_back(c);
      }
  // A count large enough for chunked / pipelined paths.
  Case big;
  big.coll = Coll::AllReduce;
  big.dt = gcclFloat32;
  big.op = gcclSum;
  big.p = p;
  big.count = (size_t{1} << 18) + 3;
  big.seed = 77;
  cases.push_back(big);
  // Above the communicator's 4 MiB scratch: float32 at p = 8, bfloat16 at p = 5.
  if (p == 8) {
    big.count = kBigCount;
    big.inplace = true;
    big.seed = 78;
    cases.push_back(big);
  }
  if (p == 5) {
    big.dt = gcclBfloat16;
    big.op = gcclAvg;
    big.count = (size_t{1} << 21) + 5;
    big.seed = 79;
    cases.push_back(big);
  }
  // The other collectives must still work when GCCL_ALGO names an algorithm they
  // may not have.
  for (Coll coll : {Coll::AllGather, Coll::ReduceScatter, Coll::Broadcast, Coll::Reduce})
    for (size_t count : {static_cast<size_t>(p + 1), size_t{1000}}) {
      Case c;
      c.coll = coll;
      c.dt = gcclFloat32;
      c.op = gcclSum;
      c.p = p;
      c.count = count;
      c.root = p - 1;
      c.seed = CaseSeed(c) ^ 0xa161;
      cases.push_back(c);
    }
  RunCases(*team, cases);
  CheckInexactAllReduce(*team, gcclFloat32, gcclSum, 4099, ap.algo);
  CheckInexactAllReduce(*team, gcclBfloat16, gcclAvg, 777, ap.algo);
}

std::vector<AlgoParam> AllAlgoParams() {
  std::vector<AlgoParam> v;
  for (const char* a : {"ring", "rhd", "tree", "direct", "split"})
    for (int p = 1; p <= kMaxRanks; ++p) v.push_back({a, p});
  return v;
}

INSTANTIATE_TEST_SUITE_P(All, ForcedAlgo, ::testing::ValuesIn(AllAlgoParams()),
                         [](const ::testing::TestParamInfo<AlgoParam>& info) {
                           return std::string(info.param.algo) + "_p" + std::to_string(info.param.p);
                         });

}  // namespace
