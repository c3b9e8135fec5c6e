// test_hier.cc — the hierarchical allreduce (GCCL_ALGO=hier with
// GCCL_RANKS_PER_NODE=L), dense and compressed, and the group transport view its
// inter-node step runs on.
//
// Dense: exact inputs (harness CasePlan), so every rank's output must equal the
// reference bit for bit, for every p, node size (dividing p or not), count, op and
// placement. Compressed: every rank must hold the same bits, within a loose bound
// of the exact sum, with the residual staged for the whole tensor (the library's
// commit checks it) and, with error feedback, outputs plus residuals adding up to
// the inputs over several calls.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/harness.h"

extern "C" {
#include "transport/local.h"
#include "transport/subset.h"
}

namespace {

using gh::Case;
using gh::CasePlan;
using gh::RankTeam;
using gh::ScopedEnv;

// A team whose communicators run hier with nodes of L ranks (the environment is
// read at creation only); with link_gbps, under the link model (gccl_sim.h),
// where ranks of different nodes do not read each other's memory.
std::unique_ptr<RankTeam> HierTeam(int p, int L, const char* link_gbps = nullptr) {
  ScopedEnv algo("GCCL_ALGO", "hier");
  ScopedEnv gbps("GCCL_SIM_LINK_GBPS", link_gbps);
  ScopedEnv pace("GCCL_SIM_LINK_PACE", link_gbps != nullptr ? "0" : nullptr);
  ScopedEnv per_node("GCCL_RANKS_PER_NODE", std::to_string(L).c_str());
  const char* user = std::getenv("GCCL_TIMEOUT_MS");
  ScopedEnv timeout("GCCL_TIMEOUT_MS", user != nullptr ? std::string(user).c_str() : "60000");
  auto team = std::make_unique<RankTeam>(p);
  EXPECT_EQ(team->init_result(), gcclSuccess) << "p=" << p << " L=" << L;
  return team;
}

// ---- dense ------------------------------------------------------------------

TEST(HierDense, ExactOnEveryRankForEveryNodeSize) {
  for (int p = 1; p <= 8; ++p) {
    for (int L : {1, 2, 3, 4}) {
      std::unique_ptr<RankTeam> team = HierTeam(p, L);
      ASSERT_EQ(team->init_result(), gcclSuccess) << "p " << p << " L " << L;
      const size_t counts[] = {0, 1, static_cast<size_t>(p - 1), 7, 1000, 4099};
      for (size_t count : counts)
        for (gcclRedOp_t op : {gcclSum, gcclAvg})
          for (bool inplace : {false, true}) {
            Case c;
            c.dt = gcclFloat32;
            c.op = op;
            c.p = p;
            c.count = count;
            c.inplace = inplace;
            c.seed = 100 + count;
            CasePlan plan(c);
            ASSERT_TRUE(plan.RunOn(*team)) << "L=" << L;
          }
    }
  }
}

// Every datatype and op: the intra-node reduction and the inter-node allreduce
// run the caller's op (avg as a sum, divided once at the end).
TEST(HierDense, EveryTypeAndOp) {
  const int configs[][2] = {{7, 3}, {6, 4}};
  for (const auto& pl : configs) {
    std::unique_ptr<RankTeam> team = HierTeam(pl[0], pl[1]);
    for (gcclDataType_t dt : gh::kAllTypes)
      for (gcclRedOp_t op : gh::kAllOps) {
        Case c;
        c.dt = dt;
        c.op = op;
        c.p = pl[0];
        c.count = 301;
        c.inplace = (dt + op) % 2 == 0;
        c.misalign = dt == gcclFloat64 ? 1 : 0;
        CasePlan plan(c);
        ASSERT_TRUE(plan.RunOn(*team)) << "L=" << pl[1];
      }
  }
}

// Shares above the tuner's tree limit: halving-doubling across 2 and 3 nodes
// (one of them short), and the ring for a share over its 4 MiB limit on 3 nodes.
TEST(HierDense, LargeShares) {
  struct {
    int p, L;
    size_t count;
    bool inplace;
  } const cases[] = {{8, 4, 300017, false}, {7, 3, 300017, true}, {6, 2, 2200017, true}};
  for (const auto& k : cases) {
    std::unique_ptr<RankTeam> team = HierTeam(k.p, k.L);
    Case c;
    c.p = k.p;
    c.count = k.count;
    c.inplace = k.inplace;
    CasePlan plan(c);
    ASSERT_TRUE(plan.RunOn(*team)) << "L=" << k.L;
  }
}

// The same communicator alternates sizes: the cached groups serve every call.
TEST(HierDense, RepeatedCallsOfChangingSize) {
  std::unique_ptr<RankTeam> team = HierTeam(5, 2);
  for (int round = 0; round < 3; ++round)
    for (size_t count : {size_t{4099}, size_t{3}, size_t{20000}}) {
      Case c;
      c.p = 5;
      c.count = count;
      c.seed = 7 + static_cast<uint64_t>(round);
      CasePlan plan(c);
      ASSERT_TRUE(plan.RunOn(*team));
    }
}

// Under the link model, dense and compressed: the same exact results.
TEST(HierDense, UnderTheLinkModel) {
  std::unique_ptr<RankTeam> team = HierTeam(6, 4, "100");
  for (size_t count : {size_t{5}, size_t{4099}})
    for (bool inplace : {false, true}) {
      Case c;
      c.p = 6;
      c.count = count;
      c.inplace = inplace;
      CasePlan plan(c);
      ASSERT_TRUE(plan.RunOn(*team)) << "link model";
    }
}

// ---- compressed ---------------------------------------------------------------

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Input of `rank` at call t, element i: uniform in [-1, 1).
float Input(int rank, int t, size_t i) {
  const uint64_t h = Mix(static_cast<uint64_t>(rank) << 48 ^ static_cast<uint64_t>(t) << 40 ^ i);
  return static_cast<float>(static_cast<double>(h >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

struct CompressedCase {
  std::string spec;
  int p, L;
  size_t count;
  gcclRedOp_t op;
  bool inplace;
  gcclDataType_t dt = gcclFloat32;
  int calls = 2;
};

// Whether a spec turns error feedback on (top-k's default, else "ef=1").
bool Ef(const std::string& spec) {
  return spec.find("ef=1") != std::string::npos ||
         (spec.rfind("topk", 0) == 0 && spec.find("ef=0") == std::string::npos);
}

std::string Describe(const CompressedCase& c) {
  return c.spec + " p=" + std::to_string(c.p) + " L=" + std::to_string(c.L) + " count=" + std::to_string(c.count) +
         " " + gh::OpName(c.op) + " " + gh::TypeName(c.dt) + (c.inplace ? " in-place" : " out-of-place");
}

// Largest error against the exact result a codec may leave on one call: inputs
// are in [-1, 1], so a node's share sum lies in [-L, L] and the total in [-p, p];
// an element goes through at most one encode per node and its owner's re-encode,
// each off by at most one quantization step (three with error feedback, whose
// residual carries earlier calls' error into this one).
double ErrorBound(const CompressedCase& c) {
  const double p = c.p, nodes = (c.p + c.L - 1) / c.L, ef = Ef(c.spec) ? 3.0 : 1.0;
  double bound = 2.0 * p;  // top-k and random-k drop most of a call: only |sum| bounds it
  if (c.spec.rfind("uniform", 0) == 0) {
    const size_t at = c.spec.find("bits=");
    const double levels = std::ldexp(1.0, at == std::string::npos ? 4 : std::atoi(c.spec.c_str() + at + 5)) - 1;
    bound = ef * (nodes * 2.0 * c.L + 2.0 * p) / levels;
  } else if (c.spec.rfind("fp16", 0) == 0) {
    bound = ef * (nodes * c.L + p) / 2048.0;
  }
  if (c.dt == gcclFloat16) bound += p / 2048.0;  // the output's rounding
  if (c.dt == gcclBfloat16) bound += p / 256.0;
  if (c.op == gcclAvg) bound /= p;
  return bound + 1e-5;
}

// Runs c.calls compressed allreduces on every rank of the team, each with its own
// compressor; checks bit identity and the error of every call, and with error
// feedback that sum of outputs + sum of residuals = sum of inputs (sum op).
void RunCompressed(RankTeam& team, const CompressedCase& c) {
  SCOPED_TRACE(Describe(c));
  const int p = c.p;
  const size_t n = c.count, sz = gh::TypeSize(c.dt);
  std::vector<gcclCompressor_t> comps(p, nullptr);
  for (int r = 0; r < p; ++r) ASSERT_EQ(gcclCompressorCreate(&comps[r], c.spec.c_str(), n, c.dt), gcclSuccess);
  std::vector<double> out_sum(n, 0.0), in_sum(n, 0.0);
  for (int t = 0; t < c.calls; ++t) {
    std::vector<std::vector<unsigned char>> send(p, std::vector<unsigned char>(n * sz + 1)),
        recv(p, std::vector<unsigned char>(n * sz + 1));
    std::vector<double> exact(n, 0.0);
    for (int r = 0; r < p; ++r)
      for (size_t i = 0; i < n; ++i) {
        gh::StoreDouble(c.dt, send[r].data(), i, Input(r, t, i));
        exact[i] += gh::LoadDouble(c.dt, send[r].data(), i);  // the value after rounding to dt
      }
    std::vector<gcclResult_t> res(p, gcclInternalError);
    team.Run([&](int r, gcclComm_t comm) {
      void* out = c.inplace ? send[r].data() : recv[r].data();
      res[r] = gcclAllReduceCompressed(send[r].data(), out, n, c.dt, c.op, comps[r], comm, nullptr);
    });
    for (int r = 0; r < p; ++r)
      ASSERT_EQ(res[r], gcclSuccess) << "call " << t << " rank " << r << ": " << gcclGetLastError(team.comm(r));
    const auto output = [&](int r) { return c.inplace ? send[r].data() : recv[r].data(); };
    for (int r = 1; r < p; ++r)
      ASSERT_TRUE(gh::SameBytes(output(r), output(0), n * sz))
          << "call " << t << ": rank " << r << " is not bit-identical to rank 0";
    const double bound = ErrorBound(c), div = c.op == gcclAvg ? p : 1;
    for (size_t i = 0; i < n; ++i) {
      const double got = gh::LoadDouble(c.dt, output(0), i);
      ASSERT_LE(std::fabs(got - exact[i] / div), bound) << "call " << t << " element " << i;
      out_sum[i] += got * div;
      in_sum[i] += exact[i];
    }
  }
  if (Ef(c.spec) && c.dt == gcclFloat32 && c.op == gcclSum) {
    std::vector<float> residual(n);
    for (int r = 0; r < p; ++r) {
      ASSERT_EQ(gcclCompressorGetResidual(comps[r], residual.data()), gcclSuccess);
      for (size_t i = 0; i < n; ++i) out_sum[i] += residual[i];
    }
    for (size_t i = 0; i < n; ++i)
      ASSERT_NEAR(out_sum[i], in_sum[i], 1e-4 * (1 + c.calls * p)) << "telescoping, element " << i;
  }
  for (gcclCompressor_t comp : comps) gcclCompressorDestroy(comp);
}

TEST(HierCompressed, DenseCodecsEveryNodeSize) {
  for (int p = 2; p <= 8; ++p)
    for (int L : {1, 2, 3, 4}) {
      if (L > p) continue;
      std::unique_ptr<RankTeam> team = HierTeam(p, L);
      ASSERT_EQ(team->init_result(), gcclSuccess) << "p " << p << " L " << L;
      const size_t counts[] = {0, 1, static_cast<size_t>(p - 1), 7, 1000, 4099};
      int k = 0;
      for (size_t count : counts)
        for (const char* spec : {"uniform:bits=8", "fp16"}) {
          ++k;
          CompressedCase c{spec, p, L, count, k % 3 == 0 ? gcclAvg : gcclSum, k % 2 == 0};
          RunCompressed(*team, c);
          if (HasFatalFailure()) return;
        }
    }
}

TEST(HierCompressed, ErrorFeedbackTelescopes) {
  const int configs[][2] = {{5, 2}, {8, 3}, {4, 4}};
  for (const auto& pl : configs) {
    std::unique_ptr<RankTeam> team = HierTeam(pl[0], pl[1]);
    for (bool inplace : {false, true}) {
      CompressedCase c{"uniform:bits=4,ef=1", pl[0], pl[1], 2053, gcclSum, inplace};
      c.calls = 4;
      RunCompressed(*team, c);
      if (HasFatalFailure()) return;
    }
  }
}

TEST(HierCompressed, UnderTheLinkModel) {
  std::unique_ptr<RankTeam> team = HierTeam(7, 3, "100");
  for (const char* spec : {"uniform:bits=4,ef=1", "topk:ratio=0.1"}) {
    CompressedCase c{spec, 7, 3, 3001, gcclSum, false};
    c.calls = 3;
    RunCompressed(*team, c);
    if (HasFatalFailure()) return;
  }
}

TEST(HierCompressed, NarrowAndWideTypes) {
  std::unique_ptr<RankTeam> team = HierTeam(7, 3);
  for (gcclDataType_t dt : {gcclFloat16, gcclBfloat16, gcclFloat64}) {
    CompressedCase c{"uniform:bits=8", 7, 3, 999, gcclSum, dt == gcclFloat16};
    c.dt = dt;
    RunCompressed(*team, c);
    if (HasFatalFailure()) return;
  }
}

// The sparse codecs: top-k (sparse allgather on 3 nodes, error feedback on by
// default) and random-k, on a share of the tensor each.
TEST(HierCompressed, SparseCodecs) {
  const int configs[][2] = {{6, 2}, {7, 3}};
  for (const auto& pl : configs) {
    std::unique_ptr<RankTeam> team = HierTeam(pl[0], pl[1]);
    for (const char* spec : {"topk:ratio=0.1", "randk:ratio=0.25,ef=1"})
      for (size_t count : {size_t{5}, size_t{4099}}) {
        CompressedCase c{spec, pl[0], pl[1], count, gcclSum, count == 5};
        c.calls = 3;
        RunCompressed(*team, c);
        if (HasFatalFailure()) return;
      }
  }
}

// One node (L >= p): nothing crosses a node boundary, so nothing is compressed:
// integer-valued inputs sum exactly and the residual stays zero.
TEST(HierCompressed, OneNodeIsExact) {
  for (int p : {3, 4}) {
    std::unique_ptr<RankTeam> team = HierTeam(p, 4);
    const size_t n = 1001;
    std::vector<gcclCompressor_t> comps(p, nullptr);
    for (int r = 0; r < p; ++r)
      ASSERT_EQ(gcclCompressorCreate(&comps[r], "uniform:bits=2,ef=1", n, gcclFloat32), gcclSuccess);
    std::vector<std::vector<float>> in(p, std::vector<float>(n)), out(p, std::vector<float>(n));
    std::vector<float> exact(n, 0.0f);
    for (int r = 0; r < p; ++r)
      for (size_t i = 0; i < n; ++i) {
        in[r][i] = std::nearbyint(Input(r, 0, i) * 100.0f);
        exact[i] += in[r][i];
      }
    std::vector<gcclResult_t> res(p, gcclInternalError);
    team->Run([&](int r, gcclComm_t comm) {
      res[r] = gcclAllReduceCompressed(in[r].data(), out[r].data(), n, gcclFloat32, gcclSum, comps[r], comm, nullptr);
    });
    std::vector<float> residual(n);
    for (int r = 0; r < p; ++r) {
      ASSERT_EQ(res[r], gcclSuccess) << "p=" << p << " rank " << r << ": " << gcclGetLastError(team->comm(r));
      EXPECT_EQ(out[r], exact) << "p=" << p << " rank " << r;
      ASSERT_EQ(gcclCompressorGetResidual(comps[r], residual.data()), gcclSuccess);
      EXPECT_EQ(residual, std::vector<float>(n, 0.0f)) << "p=" << p << " rank " << r;
    }
    for (gcclCompressor_t comp : comps) gcclCompressorDestroy(comp);
  }
}

// inf or NaN on one rank reaches every rank at that index, through a node's sum
// and the compressed inter-node step (random-k's agreement on exceptions runs
// the group view's allgather_small).
TEST(HierCompressed, NonFiniteInputsStayNonFinite) {
  const int p = 7, L = 3;
  const size_t n = 1000, inf_at = 3, nan_at = 517;
  std::unique_ptr<RankTeam> team = HierTeam(p, L);
  for (const char* spec : {"uniform:bits=8", "randk:ratio=0.25", "topk:ratio=0.1"}) {
    SCOPED_TRACE(spec);
    std::vector<gcclCompressor_t> comps(p, nullptr);
    for (int r = 0; r < p; ++r) ASSERT_EQ(gcclCompressorCreate(&comps[r], spec, n, gcclFloat32), gcclSuccess);
    std::vector<std::vector<float>> bufs(p, std::vector<float>(n));
    for (int r = 0; r < p; ++r)
      for (size_t i = 0; i < n; ++i) bufs[r][i] = Input(r, 0, i);
    bufs[4][inf_at] = INFINITY;  // in the second node
    bufs[6][nan_at] = NAN;       // the short node's only rank
    std::vector<gcclResult_t> res(p, gcclInternalError);
    team->Run([&](int r, gcclComm_t comm) {
      res[r] =
          gcclAllReduceCompressed(bufs[r].data(), bufs[r].data(), n, gcclFloat32, gcclSum, comps[r], comm, nullptr);
    });
    for (int r = 0; r < p; ++r) {
      ASSERT_EQ(res[r], gcclSuccess) << "rank " << r << ": " << gcclGetLastError(team->comm(r));
      EXPECT_FALSE(std::isfinite(bufs[r][inf_at])) << "rank " << r;
      EXPECT_FALSE(std::isfinite(bufs[r][nan_at])) << "rank " << r;
      EXPECT_TRUE(gh::SameBytes(bufs[r].data(), bufs[0].data(), n * sizeof(float))) << "rank " << r;
    }
    for (gcclCompressor_t comp : comps) gcclCompressorDestroy(comp);
  }
}

// ---- the group view -------------------------------------------------------------

// p local ranks; the even ranks and the odd ones form two groups (in reverse
// order, so group rank != parent rank / 2 matters). Both groups run
// allgather_small, barrier and a ring exchange at the same time.
TEST(SubsetTransport, TwoGroupsSideBySide) {
  for (int p : {1, 2, 5, 6}) {
    struct local_world* w = nullptr;
    ASSERT_EQ(local_world_create(&w, p), gcclSuccess);
    std::vector<struct transport*> tps(p, nullptr);
    for (int r = 0; r < p; ++r) ASSERT_EQ(local_transport_create(&tps[r], w, r, 30000), gcclSuccess);
    std::vector<std::string> errors(p);
    std::vector<std::thread> threads;
    for (int r = 0; r < p; ++r)
      threads.emplace_back([&, r] {
        std::vector<int> members;
        for (int m = p - 1; m >= 0; --m)
          if (m % 2 == r % 2) members.push_back(m);
        struct transport* g = nullptr;
        if (subset_transport_create(&g, tps[r], members.data(), static_cast<int>(members.size())) != gcclSuccess) {
          errors[r] = "create failed";
          return;
        }
        const int n = g->nranks, me = g->rank;
        if (members[me] != r || n != static_cast<int>(members.size()) || g->shares_address_space != 0)
          errors[r] = "wrong rank, size or address-space flag";
        for (int round = 0; round < 3 && errors[r].empty(); ++round) {
          int in[2] = {r, round}, out[16];
          if (g->ops->allgather_small(g, in, sizeof in, out) != gcclSuccess) errors[r] = "allgather_small failed";
          for (int m = 0; m < n && errors[r].empty(); ++m)
            if (out[2 * m] != members[m] || out[2 * m + 1] != round) errors[r] = "allgather_small slot wrong";
          if (errors[r].empty() && g->ops->barrier(g) != gcclSuccess) errors[r] = "barrier failed";
          const int next = (me + 1) % n, prev = (me + n - 1) % n;
          int sent = 100 * r + round, got = -1;
          if (errors[r].empty() && tp_sendrecv(g, next, &sent, sizeof sent, prev, &got, sizeof got) != gcclSuccess)
            errors[r] = "sendrecv failed";
          if (errors[r].empty() && got != 100 * members[prev] + round) errors[r] = "sendrecv got the wrong peer";
        }
        g->ops->destroy(g);
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < p; ++r) EXPECT_EQ(errors[r], "") << "p=" << p << " rank " << r;
    for (int r = 0; r < p; ++r) tps[r]->ops->destroy(tps[r]);
    local_world_unref(w);
  }
}

TEST(SubsetTransport, RejectsANonMember) {
  struct local_world* w = nullptr;
  ASSERT_EQ(local_world_create(&w, 3), gcclSuccess);
  struct transport* tp = nullptr;
  ASSERT_EQ(local_transport_create(&tp, w, 0, 1000), gcclSuccess);
  const int members[] = {1, 2};
  struct transport* g = reinterpret_cast<struct transport*>(&w);
  EXPECT_EQ(subset_transport_create(&g, tp, members, 2), gcclInternalError);
  EXPECT_EQ(g, nullptr);
  tp->ops->destroy(tp);
  local_world_unref(w);
}

}  // namespace
