// test_streams_groups.cc — streams (FIFOs run by worker threads) and groups (one
// thread drives every rank of gcclCommInitAll), and the communicator queries.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
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

// Communicators of gcclCommInitAll, destroyed at scope exit.
struct AllComms {
  explicit AllComms(int p) : comms(static_cast<size_t>(p), nullptr) {
    gh::ScopedEnv timeout("GCCL_TIMEOUT_MS", "30000");  // a hang becomes a failure
    result = gcclCommInitAll(comms.data(), p);
  }
  ~AllComms() {
    for (gcclComm_t c : comms)
      if (c != nullptr) {
        EXPECT_EQ(gcclCommDestroy(c), gcclSuccess);
      }
  }
  gcclComm_t operator[](int r) const { return comms[static_cast<size_t>(r)]; }
  std::vector<gcclComm_t> comms;
  gcclResult_t result = gcclInternalError;
};

// One stream per rank, destroyed at scope exit.
struct Streams {
  explicit Streams(int p) : s(static_cast<size_t>(p), nullptr) {
    for (auto& x : s) EXPECT_EQ(gcclStreamCreate(&x), gcclSuccess);
  }
  ~Streams() {
    for (gcclStream_t x : s)
      if (x != nullptr) {
        EXPECT_EQ(gcclStreamDestroy(x), gcclSuccess);
      }
  }
  gcclStream_t operator[](int r) const { return s[static_cast<size_t>(r)]; }
  std::vector<gcclStream_t> s;
};

// A varied list of cases for p ranks (every collective, several types / ops).
std::vector<Case> MixedCases(int p, uint64_t seed) {
  std::vector<Case> v;
  const struct {
    Coll coll;
    gcclDataType_t dt;
    gcclRedOp_t op;
    size_t count;
    bool inplace;
  } specs[] = {
      {Coll::AllReduce, gcclFloat32, gcclSum, 1000, false},  {Coll::AllGather, gcclInt32, gcclSum, 7, false},
      {Coll::ReduceScatter, gcclFloat64, gcclMax, 5, false}, {Coll::Broadcast, gcclUint8, gcclSum, 13, false},
      {Coll::Reduce, gcclBfloat16, gcclSum, 33, false},      {Coll::AllReduce, gcclInt64, gcclProd, 5, true},
      {Coll::AllReduce, gcclFloat16, gcclAvg, 65, false},    {Coll::AllGather, gcclUint64, gcclSum, 3, true},
  };
  int i = 0;
  for (const auto& sp : specs) {
    Case c;
    c.coll = sp.coll;
    c.dt = sp.dt;
    c.op = sp.op;
    c.p = p;
    c.count = sp.count;
    c.inplace = sp.inplace;
    c.root = (i % 2) ? p - 1 : 0;
    c.seed = seed + static_cast<uint64_t>(i++);
    v.push_back(c);
  }
  return v;
}

// ---- streams, one thread per rank ----------------------------------------------------

TEST(Streams, SeveralCollectivesQueuedPerRank) {
  for (int p : {1, 2, 3, 5, 8}) {
    SCOPED_TRACE("p=" + std::to_string(p));
    RankTeam& team = gh::SharedTeam(p);
    ASSERT_EQ(team.init_result(), gcclSuccess);
    Streams streams(p);
    std::vector<Case> cases = MixedCases(p, 500);
    std::vector<std::unique_ptr<CasePlan>> plans;
    for (const Case& c : cases) plans.emplace_back(new CasePlan(c));
    // issue[r][i]: rank r's enqueue result for case i; sync[r]: its synchronize.
    std::vector<std::vector<gcclResult_t>> issue(p, std::vector<gcclResult_t>(cases.size(), gcclInternalError));
    std::vector<gcclResult_t> sync(p, gcclInternalError);
    team.Run([&](int r, gcclComm_t comm) {
      for (size_t i = 0; i < plans.size(); ++i) issue[r][i] = plans[i]->Issue(r, comm, streams[r]);
      sync[r] = gcclStreamSynchronize(streams[r]);
    });
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(sync[r], gcclSuccess) << "rank " << r << ": " << gcclGetLastError(team.comm(r));
      for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(issue[r][i], gcclSuccess) << gh::Describe(cases[i]);
    }
    for (auto& plan : plans) plan->Check(std::vector<gcclResult_t>(p, gcclSuccess));
  }
}

TEST(Streams, CallReturnsBeforeTheWorkIsDone) {
  // With a stream, rank 0's call must return even though rank 1 has not called yet
  // (a NULL-stream call would block here).
  const int p = 2;
  AllComms comms(p);
  ASSERT_EQ(comms.result, gcclSuccess);
  Streams streams(p);
  Case c;
  c.coll = Coll::AllReduce;
  c.dt = gcclInt32;
  c.op = gcclSum;
  c.p = p;
  c.count = 1000;
  c.seed = 9;
  CasePlan plan(c);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(plan.Issue(0, comms[0], streams[0]), gcclSuccess);
  EXPECT_LT(gh::MsSince(t0), 1000);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_EQ(plan.Issue(1, comms[1], streams[1]), gcclSuccess);
  std::vector<gcclResult_t> res = {gcclStreamSynchronize(streams[0]), gcclStreamSynchronize(streams[1])};
  plan.Check(res);
}

TEST(Streams, OneThreadQueuesForEveryRank) {
  for (int p : {2, 3, 4, 8}) {
    SCOPED_TRACE("p=" + std::to_string(p));
    AllComms comms(p);
    ASSERT_EQ(comms.result, gcclSuccess);
    Streams streams(p);
    std::vector<Case> cases = MixedCases(p, 600);
    std::vector<std::unique_ptr<CasePlan>> plans;
    for (const Case& c : cases) plans.emplace_back(new CasePlan(c));
    for (auto& plan : plans)
      for (int r = 0; r < p; ++r) ASSERT_EQ(plan->Issue(r, comms[r], streams[r]), gcclSuccess);
    std::vector<gcclResult_t> sync(p);
    for (int r = 0; r < p; ++r) sync[r] = gcclStreamSynchronize(streams[r]);
    for (auto& plan : plans) plan->Check(sync);
  }
}

TEST(Streams, DestroyWaitsForQueuedWork) {
  const int p = 3;
  AllComms comms(p);
  ASSERT_EQ(comms.result, gcclSuccess);
  Case c;
  c.coll = Coll::AllReduce;
  c.dt = gcclFloat32;
  c.op = gcclSum;
  c.p = p;
  c.count = 100003;
  c.seed = 11;
  CasePlan plan(c);
  std::vector<gcclStream_t> s(p);
  for (int r = 0; r < p; ++r) ASSERT_EQ(gcclStreamCreate(&s[r]), gcclSuccess);
  for (int r = 0; r < p; ++r) ASSERT_EQ(plan.Issue(r, comms[r], s[r]), gcclSuccess);
  for (int r = 0; r < p; ++r) EXPECT_EQ(gcclStreamDestroy(s[r]), gcclSuccess);
  plan.Check(std::vector<gcclResult_t>(p, gcclSuccess));
}

TEST(Streams, CommDestroyWaitsForPendingStreamWork) {
  const int p = 2;
  gcclComm_t comms[p] = {nullptr, nullptr};
  {
    gh::ScopedEnv timeout("GCCL_TIMEOUT_MS", "30000");
    ASSERT_EQ(gcclCommInitAll(comms, p), gcclSuccess);
  }
  Streams streams(p);
  Case c;
  c.coll = Coll::AllGather;
  c.dt = gcclFloat64;
  c.p = p;
  c.count = 50001;
  c.seed = 12;
  CasePlan plan(c);
  for (int r = 0; r < p; ++r) ASSERT_EQ(plan.Issue(r, comms[r], streams[r]), gcclSuccess);
  for (int r = 0; r < p; ++r) EXPECT_EQ(gcclCommDestroy(comms[r]), gcclSuccess);
  std::vector<gcclResult_t> sync(p);
  for (int r = 0; r < p; ++r) sync[r] = gcclStreamSynchronize(streams[r]);
  plan.Check(sync);
}

TEST(Streams, ArgumentErrorReturnedAtOnce) {
  const int p = 2;
  AllComms comms(p);
  ASSERT_EQ(comms.result, gcclSuccess);
  Streams streams(p);
  float buf[4] = {};
  EXPECT_EQ(gcclAllReduce(buf, nullptr, 4, gcclFloat32, gcclSum, comms[0], streams[0]), gcclInvalidArgument);
  EXPECT_TRUE(gh::MentionsAny(gcclGetLastError(comms[0]), {"buf", "null"}));
  EXPECT_EQ(gcclAllReduce(buf, buf, 4, static_cast<gcclDataType_t>(42), gcclSum, comms[0], streams[0]),
            gcclInvalidArgument);
  EXPECT_EQ(gcclBroadcast(buf, buf, 4, gcclFloat32, 2, comms[1], streams[1]), gcclInvalidArgument);
  // Nothing was queued, so synchronize has nothing to report.
  EXPECT_EQ(gcclStreamSynchronize(streams[0]), gcclSuccess);
  EXPECT_EQ(gcclStreamSynchronize(streams[1]), gcclSuccess);
}

TEST(Streams, MismatchReportedBySynchronize) {
  const int p = 2;
  AllComms comms(p);
  ASSERT_EQ(comms.result, gcclSuccess);
  Streams streams(p);
  std::vector<float> a(9, 1.0f), b(9, -7.0f), c(9, 2.0f), d(9, -7.0f);
  ASSERT_EQ(gcclAllReduce(a.data(), b.data(), 8, gcclFloat32, gcclSum, comms[0], streams[0]), gcclSuccess);
  ASSERT_EQ(gcclAllReduce(c.data(), d.data(), 9, gcclFloat32, gcclSum, comms[1], streams[1]), gcclSuccess);
  EXPECT_EQ(gcclStreamSynchronize(streams[0]), gcclInvalidUsage);
  EXPECT_TRUE(gh::MentionsAny(gcclGetLastError(comms[0]), {"count"}));
  EXPECT_EQ(gcclStreamSynchronize(streams[1]), gcclInvalidUsage);
  EXPECT_TRUE(gh::MentionsAny(gcclGetLastError(comms[1]), {"count"}));
  for (float x : b) EXPECT_EQ(x, -7.0f);
  for (float x : d) EXPECT_EQ(x, -7.0f);
  // The error is cleared once reported, and the communicators still work.
  EXPECT_EQ(gcclStreamSynchronize(streams[0]), gcclSuccess);
  EXPECT_EQ(gcclStreamSynchronize(streams[1]), gcclSuccess);
  Case k;
  k.coll = Coll::AllReduce;
  k.dt = gcclInt32;
  k.op = gcclMax;
  k.p = p;
  k.count = 31;
  k.seed = 13;
  CasePlan plan(k);
  for (int r = 0; r < p; ++r) ASSERT_EQ(plan.Issue(r, comms[r], streams[r]), gcclSuccess);
  std::vector<gcclResult_t> sync = {gcclStreamSynchronize(streams[0]), gcclStreamSynchronize(streams[1])};
  plan.Check(sync);
}

TEST(Streams, ErrorOnlyReportedOnceAndLaterWorkRuns) {
  // A failing item does not stop the items queued after it (ranks agree again).
  const int p = 2;
  AllComms comms(p);
  ASSERT_EQ(comms.result, gcclSuccess);
  Streams streams(p);
  std::vector<int32_t> a(4, 1), b(4, -1);
  ASSERT_EQ(gcclAllReduce(a.data(), b.data(), 4, gcclInt32, gcclSum, comms[0], streams[0]), gcclSuccess);
  ASSERT_EQ(gcclAllReduce(a.data(), b.data(), 4, gcclInt32, gcclMin, comms[1], streams[1]), gcclSuccess);
  Case k;
  k.coll = Coll::Broadcast;
  k.dt = gcclUint32;
  k.p = p;
  k.count = 10;
  k.root = 1;
  k.seed = 14;
  CasePlan plan(k);
  for (int r = 0; r < p; ++r) ASSERT_EQ(plan.Issue(r, comms[r], streams[r]), gcclSuccess);
  EXPECT_EQ(gcclStreamSynchronize(streams[0]), gcclInvalidUsage);
  EXPECT_EQ(gcclStreamSynchronize(streams[1]), gcclInvalidUsage);
  EXPECT_TRUE(gh::MentionsAny(gcclGetLastError(comms[1]), {"op"}));
  plan.Check(std::vector<gcclResult_t>(p, gcclSuccess));
}

// ---- groups: one thread drives every rank of gcclCommInitAll ----------------------------

class GroupAll : public ::testing::TestWithParam<int> {};

TEST_P(GroupAll, NullStreams) {
  const int p = GetParam();
  AllComms comms(p);
  ASSERT_EQ(comms.result, gcclSuccess);
  for (const Case& c : MixedCases(p, 700)) {
    SCOPED_TRACE(gh::Describe(c));
    CasePlan plan(c);
    ASSERT_EQ(gcclGroupStart(), gcclSuccess);
    for (int r = 0; r < p; ++r) EXPECT_EQ(plan.Issue(r, comms[r], nullptr), gcclSuccess);
    const gcclResult_t end = gcclGroupEnd();
    ASSERT_EQ(end, gcclSuccess) << gcclGetLastError(nullptr);
    plan.Check(std::vector<gcclResult_t>(p, gcclSuccess));
  }
}

TEST_P(GroupAll, OneStreamPerComm) {
  const int p = GetParam();
  AllComms comms(p);
  ASSERT_EQ(comms.result, gcclSuccess);
  Streams streams(p);
  for (const Case& c : MixedCases(p, 800)) {
    SCOPED_TRACE(gh::Describe(c));
    CasePlan plan(c);
    ASSERT_EQ(gcclGroupStart(), gcclSuccess);
    for (int r = 0; r < p; ++r) EXPECT_EQ(plan.Issue(r, comms[r], streams[r]), gcclSuccess);
    ASSERT_EQ(gcclGroupEnd(), gcclSuccess) << gcclGetLastError(nullptr);
    std::vector<gcclResult_t> sync(p);
    for (int r = 0; r < p; ++r) sync[r] = gcclStreamSynchronize(streams[r]);
    plan.Check(sync);
  }
}

TEST_P(GroupAll, SeveralCollectivesPerCommInOneGroup) {
  const int p = GetParam();
  AllComms comms(p);
  ASSERT_EQ(comms.result, gcclSuccess);
  std::vector<Case> cases = MixedCases(p, 900);
  std::vector<std::unique_ptr<CasePlan>> plans;
  for (const Case& c : cases) plans.emplace_back(new CasePlan(c));
  ASSERT_EQ(gcclGroupStart(), gcclSuccess);
  for (int r = 0; r < p; ++r)
    for (auto& plan : plans) EXPECT_EQ(plan->Issue(r, comms[r], nullptr), gcclSuccess);
  ASSERT_EQ(gcclGroupEnd(), gcclSuccess) << gcclGetLastError(nullptr);
  for (auto& plan : plans) plan->Check(std::vector<gcclResult_t>(p, gcclSuccess));
}

TEST_P(GroupAll, NestedGroupsLaunchAtOutermostEnd) {
  const int p = GetParam();
  AllComms comms(p);
  ASSERT_EQ(comms.result, gcclSuccess);
  Case c;
  c.coll = Coll::AllReduce;
  c.dt = gcclFloat64;
  c.op = gcclSum;
  c.p = p;
  c.count = 257;
  c.seed = 1000 + static_cast<uint64_t>(p);
  CasePlan plan(c);
  Case c2 = c;
  c2.coll = Coll::Broadcast;
  c2.dt = gcclInt8;
  c2.root = p - 1;
  c2.seed = 2000 + static_cast<uint64_t>(p);
  CasePlan plan2(c2);
  ASSERT_EQ(gcclGroupStart(), gcclSuccess);
  ASSERT_EQ(gcclGroupStart(), gcclSuccess);
  for (int r = 0; r < p; ++r) EXPECT_EQ(plan.Issue(r, comms[r], nullptr), gcclSuccess);
  ASSERT_EQ(gcclGroupEnd(), gcclSuccess) << gcclGetLastError(nullptr);
  std::string why;
  EXPECT_TRUE(plan.Untouched(&why)) << "the inner gcclGroupEnd launched work: " << why;
  ASSERT_EQ(gcclGroupStart(), gcclSuccess);  // a second nested group inside the outer one
  for (int r = 0; r < p; ++r) EXPECT_EQ(plan2.Issue(r, comms[r], nullptr), gcclSuccess);
  ASSERT_EQ(gcclGroupEnd(), gcclSuccess);
  EXPECT_TRUE(plan2.Untouched(&why)) << "the inner gcclGroupEnd launched work: " << why;
  ASSERT_EQ(gcclGroupEnd(), gcclSuccess) << gcclGetLastError(nullptr);
  plan.Check(std::vector<gcclResult_t>(p, gcclSuccess));
  plan2.Check(std::vector<gcclResult_t>(p, gcclSuccess));
  EXPECT_EQ(gcclGroupEnd(), gcclInvalidUsage) << "groups must be balanced again";
}

TEST_P(GroupAll, MismatchInGroupReturnsInvalidUsage) {
  const int p = GetParam();
  AllComms comms(p);
  ASSERT_EQ(comms.result, gcclSuccess);
  std::vector<std::vector<int32_t>> in(p, std::vector<int32_t>(8, 1)), out(p, std::vector<int32_t>(8, -3));
  ASSERT_EQ(gcclGroupStart(), gcclSuccess);
  for (int r = 0; r < p; ++r) {
    const int root = r == p - 1 ? 0 : p - 1;  // the last rank disagrees on the root
    EXPECT_EQ(gcclBroadcast(in[r].data(), out[r].data(), 8, gcclInt32, root, comms[r], nullptr), gcclSuccess);
  }
  EXPECT_EQ(gcclGroupEnd(), gcclInvalidUsage);
  for (int r = 0; r < p; ++r) {
    EXPECT_TRUE(gh::MentionsAny(gcclGetLastError(comms[r]), {"root"})) << "rank " << r;
    for (int32_t x : out[r]) EXPECT_EQ(x, -3) << "rank " << r << " receive buffer written";
  }
  // The communicators are still usable in a group.
  Case c;
  c.coll = Coll::AllReduce;
  c.dt = gcclUint32;
  c.op = gcclSum;
  c.p = p;
  c.count = 9;
  c.seed = 3000;
  CasePlan plan(c);
  ASSERT_EQ(gcclGroupStart(), gcclSuccess);
  for (int r = 0; r < p; ++r) EXPECT_EQ(plan.Issue(r, comms[r], nullptr), gcclSuccess);
  ASSERT_EQ(gcclGroupEnd(), gcclSuccess) << gcclGetLastError(nullptr);
  plan.Check(std::vector<gcclResult_t>(p, gcclSuccess));
}

TEST_P(GroupAll, ArgumentErrorInsideGroupReturnedAtOnce) {
  const int p = GetParam();
  AllComms comms(p);
  ASSERT_EQ(comms.result, gcclSuccess);
  float buf[4] = {};
  ASSERT_EQ(gcclGroupStart(), gcclSuccess);
  EXPECT_EQ(gcclAllReduce(buf, buf, 4, gcclFloat32, static_cast<gcclRedOp_t>(17), comms[0], nullptr),
            gcclInvalidArgument);
  EXPECT_TRUE(gh::MentionsAny(gcclGetLastError(comms[0]), {"op"}));
  EXPECT_EQ(gcclGroupEnd(), gcclSuccess) << "nothing valid was recorded: " << gcclGetLastError(nullptr);
}

INSTANTIATE_TEST_SUITE_P(P, GroupAll, ::testing::Values(2, 3, 4, 8));

// ---- communicator queries -------------------------------------------------------------------

TEST(CommQueries, InitAllCountRankVersion) {
  for (int p : {1, 2, 3, 8}) {
    AllComms comms(p);
    ASSERT_EQ(comms.result, gcclSuccess);
    for (int r = 0; r < p; ++r) {
      int n = -1, rank = -1;
      ASSERT_NE(comms[r], nullptr);
      EXPECT_EQ(gcclCommCount(comms[r], &n), gcclSuccess);
      EXPECT_EQ(n, p);
      EXPECT_EQ(gcclCommUserRank(comms[r], &rank), gcclSuccess);
      EXPECT_EQ(rank, r);
      gcclResult_t e = gcclInternalError;
      EXPECT_EQ(gcclCommGetAsyncError(comms[r], &e), gcclSuccess);
      EXPECT_EQ(e, gcclSuccess);
    }
  }
  int v = 0;
  EXPECT_EQ(gcclGetVersion(&v), gcclSuccess);
  EXPECT_EQ(v, GCCL_VERSION_CODE);
  EXPECT_EQ(v, GCCL_MAJOR * 10000 + GCCL_MINOR * 100 + GCCL_PATCH);
}

TEST(CommQueries, InitRankCountAndRank) {
  for (int p : {1, 5, 7}) {
    std::vector<int> counts(p, -1), ranks(p, -1);
    ASSERT_EQ(gh::RunRanks(p,
                           [&](int r, gcclComm_t comm) {
                             EXPECT_EQ(gcclCommCount(comm, &counts[r]), gcclSuccess);
                             EXPECT_EQ(gcclCommUserRank(comm, &ranks[r]), gcclSuccess);
                           }),
              gcclSuccess);
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(counts[r], p);
      EXPECT_EQ(ranks[r], r);
    }
  }
}

TEST(CommQueries, TwoCommunicatorsOnTheSameThreads) {
  // Two independent communicators over the same ranks, used alternately.
  const int p = 3;
  gcclUniqueId id1, id2;
  ASSERT_EQ(gcclGetUniqueId(&id1), gcclSuccess);
  ASSERT_EQ(gcclGetUniqueId(&id2), gcclSuccess);
  EXPECT_NE(std::memcmp(&id1, &id2, sizeof id1), 0) << "two unique ids are equal";
  std::vector<int32_t> out1(p, -1), out2(p, -1);
  std::vector<gcclResult_t> res(p, gcclInternalError);
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r)
    threads.emplace_back([&, r] {
      gcclComm_t a = nullptr, b = nullptr;
      gcclResult_t x = gcclCommInitRank(&a, p, id1, r);
      if (x == gcclSuccess) x = gcclCommInitRank(&b, p, id2, (r + 1) % p);  // other rank numbering
      int32_t v = r + 1, w = 10 * (r + 1);
      if (x == gcclSuccess) x = gcclAllReduce(&v, &out1[r], 1, gcclInt32, gcclSum, a, nullptr);
      if (x == gcclSuccess) x = gcclAllReduce(&w, &out2[r], 1, gcclInt32, gcclMax, b, nullptr);
      if (a != nullptr && gcclCommDestroy(a) != gcclSuccess) x = gcclInternalError;
      if (b != nullptr && gcclCommDestroy(b) != gcclSuccess) x = gcclInternalError;
      res[r] = x;
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(res[r], gcclSuccess) << "rank " << r;
    EXPECT_EQ(out1[r], 6);
    EXPECT_EQ(out2[r], 30);
  }
}

}  // namespace
