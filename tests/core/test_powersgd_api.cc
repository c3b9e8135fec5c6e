// test_powersgd_api.cc — the gcclPowerSgd* steps with the sums done by the
// caller (here in rank order, in one thread, as torch.distributed would do them
// across processes): a sum of rank <= R comes back within fp32 rounding,
// bit-identical on every rank; at p = 1 the steps give gcclAllReduceCompressed's
// bits; error feedback telescopes; a non-finite input gives NaN everywhere and
// keeps the state; steps out of order and bad buffers are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/harness.h"
#include "gccl.h"

namespace {

struct Shape {
  size_t rows = 0, cols = 0, rank = 0;
};

Shape ShapeOf(gcclCompressor_t c) {
  Shape s;
  EXPECT_EQ(gcclPowerSgdShape(c, &s.rows, &s.cols, &s.rank), gcclSuccess) << gcclGetLastError(nullptr);
  return s;
}

// One call of p ranks' compressors over inputs in[r]: each step on every rank,
// the factors summed in rank order between them. Returns every rank's output.
std::vector<std::vector<float>> StepsOnce(std::vector<gcclCompressor_t>& comps, const std::vector<std::vector<float>>& in,
                                          gcclRedOp_t op) {
  size_t p = comps.size(), n = in[0].size();
  Shape s = ShapeOf(comps[0]);
  std::vector<std::vector<float>> ps(p, std::vector<float>(s.rows * s.rank)), qs(p, std::vector<float>(s.cols * s.rank));
  std::vector<float> sum_p(s.rows * s.rank, 0.0f), sum_q(s.cols * s.rank, 0.0f);
  for (size_t r = 0; r < p; r++) {
    EXPECT_EQ(gcclPowerSgdComputeP(comps[r], in[r].data(), ps[r].data()), gcclSuccess) << gcclGetLastError(nullptr);
    for (size_t i = 0; i < sum_p.size(); i++) sum_p[i] += ps[r][i];
  }
  for (size_t r = 0; r < p; r++) {
    EXPECT_EQ(gcclPowerSgdComputeQ(comps[r], sum_p.data(), qs[r].data()), gcclSuccess) << gcclGetLastError(nullptr);
    for (size_t i = 0; i < sum_q.size(); i++) sum_q[i] += qs[r][i];
  }
  std::vector<std::vector<float>> out(p, std::vector<float>(n));
  for (size_t r = 0; r < p; r++)
    EXPECT_EQ(gcclPowerSgdComputeOutput(comps[r], sum_q.data(), out[r].data(), int(p), op), gcclSuccess)
        << gcclGetLastError(nullptr);
  return out;
}

std::vector<gcclCompressor_t> Make(size_t p, const std::string& spec, size_t n) {
  std::vector<gcclCompressor_t> comps(p, nullptr);
  for (auto& c : comps) EXPECT_EQ(gcclCompressorCreate(&c, spec.c_str(), n, gcclFloat32), gcclSuccess);
  return comps;
}

void Destroy(std::vector<gcclCompressor_t>& comps) {
  for (auto c : comps) gcclCompressorDestroy(c);
}

// Rank r's input: rank 1 (u_r v^T), so the sum over ranks has rank <= 2.
std::vector<float> Input(size_t r, size_t cols, size_t n) {
  std::vector<float> x(n);
  for (size_t e = 0; e < n; e++) x[e] = float(((e / cols) * 7 + r) % 5) * float((e % cols) * 3 % 4);
  return x;
}

TEST(PowerSgdSteps, LowRankSumOnEveryRankBitIdentical) {
  const size_t cols = 11, n = 13 * cols - 4;  // a padded last row
  for (size_t p = 1; p <= 8; p++) {
    SCOPED_TRACE("p " + std::to_string(p));
    auto comps = Make(p, "powersgd:rank=2,cols=11", n);
    std::vector<std::vector<float>> in;
    std::vector<double> sum(n, 0.0);
    for (size_t r = 0; r < p; r++) {
      in.push_back(Input(r, cols, n));
      for (size_t e = 0; e < n; e++) sum[e] += in.back()[e];
    }
    for (gcclRedOp_t op : {gcclSum, gcclAvg}) {
      auto out = StepsOnce(comps, in, op);
      double div = op == gcclAvg ? double(p) : 1.0, scale = 0;
      for (double v : sum) scale = std::max(scale, std::fabs(v / div));
      for (size_t e = 0; e < n; e++) ASSERT_NEAR(out[0][e], sum[e] / div, 1e-4 * scale + 1e-5) << "element " << e;
      for (size_t r = 1; r < p; r++) EXPECT_EQ(0, std::memcmp(out[0].data(), out[r].data(), n * sizeof(float)));
    }
    Destroy(comps);
  }
}

// One rank: the steps are the collective's computation, bit for bit, call after
// call (residual and warm-started Q carried alike).
TEST(PowerSgdSteps, MatchTheCollectiveBitForBitOnOneRank) {
  const size_t n = 500;
  const char* spec = "powersgd:rank=3";
  gcclComm_t comm = nullptr;
  ASSERT_EQ(gcclCommInitAll(&comm, 1), gcclSuccess);
  gcclCompressor_t coll = nullptr;
  ASSERT_EQ(gcclCompressorCreate(&coll, spec, n, gcclFloat32), gcclSuccess);
  auto steps = Make(1, spec, n);
  for (int t = 0; t < 4; t++) {
    std::vector<std::vector<float>> in{std::vector<float>(n)};
    for (size_t e = 0; e < n; e++) in[0][e] = std::sin(0.37f * float(e) + float(t)) * float(e % 13);
    std::vector<float> want(n);
    ASSERT_EQ(gcclAllReduceCompressed(in[0].data(), want.data(), n, gcclFloat32, gcclSum, coll, comm, nullptr),
              gcclSuccess);
    auto got = StepsOnce(steps, in, gcclSum);
    EXPECT_EQ(0, std::memcmp(want.data(), got[0].data(), n * sizeof(float))) << "call " << t;
  }
  Destroy(steps);
  gcclCompressorDestroy(coll);
  gcclCommDestroy(comm);
}

// sum_t out_t + sum_r residual_r = sum_t sum_r g_t,r, with a full-rank input.
TEST(PowerSgdSteps, ErrorFeedbackTelescopes) {
  const size_t p = 3, n = 120;
  auto comps = Make(p, "powersgd:rank=1", n);
  std::vector<double> total(n, 0.0), got(n, 0.0);
  for (int t = 0; t < 5; t++) {
    std::vector<std::vector<float>> in(p, std::vector<float>(n));
    for (size_t r = 0; r < p; r++)
      for (size_t e = 0; e < n; e++) {
        in[r][e] = float(int((e * 31 + size_t(t) * 7 + r * 13) % 17) - 8);
        total[e] += in[r][e];
      }
    auto out = StepsOnce(comps, in, gcclSum);
    for (size_t e = 0; e < n; e++) got[e] += out[0][e];
  }
  std::vector<float> resid(n);
  for (auto c : comps) {
    ASSERT_EQ(gcclCompressorGetResidual(c, resid.data()), gcclSuccess);
    for (size_t e = 0; e < n; e++) got[e] += resid[e];
  }
  for (size_t e = 0; e < n; e++) EXPECT_NEAR(got[e], total[e], 1e-3 * (1 + std::fabs(total[e])));
  Destroy(comps);
}

TEST(PowerSgdSteps, NonFiniteInputGivesNanOnEveryRankAndKeepsTheState) {
  const size_t p = 3, n = 60;
  auto comps = Make(p, "powersgd:rank=2", n);
  std::vector<std::vector<float>> in(p, std::vector<float>(n, 1.0f));
  in[0][3] = 2.0f;
  StepsOnce(comps, in, gcclSum);  // a residual and a Q worth keeping
  size_t bytes = 0;
  ASSERT_EQ(gcclCompressorGetState(comps[2], nullptr, 0, &bytes), gcclSuccess);
  std::vector<float> q_before(bytes / 4), q_after(bytes / 4), e_before(n), e_after(n);
  ASSERT_EQ(gcclCompressorGetState(comps[2], q_before.data(), bytes, &bytes), gcclSuccess);
  ASSERT_EQ(gcclCompressorGetResidual(comps[2], e_before.data()), gcclSuccess);
  in[1][17] = INFINITY;
  auto out = StepsOnce(comps, in, gcclAvg);
  for (size_t r = 0; r < p; r++)
    for (size_t e = 0; e < n; e++) ASSERT_TRUE(std::isnan(out[r][e])) << "rank " << r << " element " << e;
  ASSERT_EQ(gcclCompressorGetState(comps[2], q_after.data(), bytes, &bytes), gcclSuccess);
  ASSERT_EQ(gcclCompressorGetResidual(comps[2], e_after.data()), gcclSuccess);
  EXPECT_EQ(0, std::memcmp(q_before.data(), q_after.data(), bytes));
  EXPECT_EQ(0, std::memcmp(e_before.data(), e_after.data(), n * sizeof(float)));
  Destroy(comps);
}

// Counts 0, 1 and a prime below the rank: tiny matrices, every step still runs.
TEST(PowerSgdSteps, TinyTensors) {
  for (size_t n : {size_t(0), size_t(1), size_t(3)}) {
    SCOPED_TRACE("n " + std::to_string(n));
    auto comps = Make(2, "powersgd:rank=4", n);
    std::vector<std::vector<float>> in(2, std::vector<float>(n, 0.0f));
    for (size_t e = 0; e < n; e++) in[0][e] = float(e + 1), in[1][e] = float(2 * e + 3);
    auto out = StepsOnce(comps, in, gcclSum);
    for (size_t e = 0; e < n; e++) EXPECT_NEAR(out[0][e], in[0][e] + in[1][e], 1e-4);
    EXPECT_EQ(0, n ? std::memcmp(out[0].data(), out[1].data(), n * sizeof(float)) : 0);
    Destroy(comps);
  }
}

std::string LastError() {
  return gcclGetLastError(nullptr);
}

TEST(PowerSgdSteps, StepsOutOfOrderAndBadBuffersAreRefused) {
  const size_t n = 100;
  gcclCompressor_t c = nullptr;
  ASSERT_EQ(gcclCompressorCreate(&c, "powersgd:rank=2,cols=10", n, gcclFloat32), gcclSuccess);
  Shape s = ShapeOf(c);
  EXPECT_EQ(s.rows, 10u);
  EXPECT_EQ(s.cols, 10u);
  EXPECT_EQ(s.rank, 2u);
  std::vector<float> x(n, 1.0f), out(n), P(s.rows * s.rank), Q(s.cols * s.rank);
  EXPECT_EQ(gcclPowerSgdComputeQ(c, P.data(), Q.data()), gcclInvalidUsage);
  EXPECT_NE(LastError().find("after gcclPowerSgdComputeP"), std::string::npos) << LastError();
  EXPECT_EQ(gcclPowerSgdComputeOutput(c, Q.data(), out.data(), 1, gcclSum), gcclInvalidUsage);
  ASSERT_EQ(gcclPowerSgdComputeP(c, x.data(), P.data()), gcclSuccess);
  EXPECT_EQ(gcclPowerSgdComputeOutput(c, Q.data(), out.data(), 1, gcclSum), gcclInvalidUsage);
  EXPECT_NE(LastError().find("after gcclPowerSgdComputeQ"), std::string::npos) << LastError();
  EXPECT_EQ(gcclPowerSgdComputeQ(c, P.data(), P.data() + 1), gcclInvalidArgument);  // overlapping
  EXPECT_NE(LastError().find("overlap"), std::string::npos) << LastError();
  EXPECT_EQ(gcclPowerSgdComputeQ(c, nullptr, Q.data()), gcclInvalidArgument);
  EXPECT_NE(LastError().find("NULL"), std::string::npos) << LastError();
  ASSERT_EQ(gcclPowerSgdComputeQ(c, P.data(), Q.data()), gcclSuccess);
  EXPECT_EQ(gcclPowerSgdComputeOutput(c, Q.data(), out.data(), 0, gcclSum), gcclInvalidArgument);
  EXPECT_NE(LastError().find("nranks"), std::string::npos) << LastError();
  EXPECT_EQ(gcclPowerSgdComputeOutput(c, Q.data(), out.data(), 1, gcclMax), gcclInvalidArgument);
  EXPECT_NE(LastError().find("gcclSum or gcclAvg"), std::string::npos) << LastError();
  EXPECT_EQ(gcclPowerSgdComputeOutput(c, Q.data(), nullptr, 1, gcclSum), gcclInvalidArgument);
  ASSERT_EQ(gcclPowerSgdComputeOutput(c, Q.data(), out.data(), 1, gcclSum), gcclSuccess);
  // After the call, the next starts with ComputeP again.
  EXPECT_EQ(gcclPowerSgdComputeQ(c, P.data(), Q.data()), gcclInvalidUsage);
  // A call abandoned after ComputeQ changes nothing: the next call's bits are
  // those of a compressor that never saw it.
  gcclCompressor_t d = nullptr;
  ASSERT_EQ(gcclCompressorCreate(&d, "powersgd:rank=2,cols=10", n, gcclFloat32), gcclSuccess);
  std::vector<float> y(n);
  for (size_t e = 0; e < n; e++) y[e] = float(e % 7);
  std::vector<float> out_d(n), P2(P.size()), Q2(Q.size());
  ASSERT_EQ(gcclPowerSgdComputeP(d, x.data(), P2.data()), gcclSuccess);  // d gets c's first call
  ASSERT_EQ(gcclPowerSgdComputeQ(d, P2.data(), Q2.data()), gcclSuccess);
  ASSERT_EQ(gcclPowerSgdComputeOutput(d, Q2.data(), out_d.data(), 1, gcclSum), gcclSuccess);
  ASSERT_EQ(gcclPowerSgdComputeP(c, y.data(), P.data()), gcclSuccess);  // abandoned
  ASSERT_EQ(gcclPowerSgdComputeQ(c, P.data(), Q.data()), gcclSuccess);
  std::vector<std::vector<float>> in{y};
  std::vector<gcclCompressor_t> one{c}, other{d};
  auto got_c = StepsOnce(one, in, gcclSum), got_d = StepsOnce(other, in, gcclSum);
  EXPECT_EQ(0, std::memcmp(got_c[0].data(), got_d[0].data(), n * sizeof(float)));
  gcclCompressorDestroy(c);
  gcclCompressorDestroy(d);
}

}  // namespace
