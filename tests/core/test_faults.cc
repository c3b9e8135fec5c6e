// test_faults.cc — collectives under injected faults (GCCL_FAULT, src/transport/fault.h)
// on thread ranks: a corrupted, truncated or duplicated compressed frame, a dropped
// message, a rank that stops responding, a late message, and an abort that frees
// ranks stuck on a stopped peer.
//
// What every case checks: no rank reports success with a wrong result; a lost
// message or a silent peer ends every rank's call within GCCL_TIMEOUT_MS + 1 s;
// a failed call leaves sendbuff and the compressor's residual as they were; and
// the same call on a fresh communicator then succeeds with the bits a run without
// the fault gives. Each test counts the faults its ranks injected and survived,
// and the binary prints the totals by class.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/faults.h"
#include "core/harness.h"
#include "gccl.h"

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kTimeoutMs = 500;
// Allowed past GCCL_TIMEOUT_MS: 1 s, more under sanitizers (5-10x slower).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr double kSlackMs = 2500;
#else
constexpr double kSlackMs = 1000;
#endif

// ---- the tally of faults injected and survived, by class ---------------------------

struct Tally {
  std::mutex mu;
  uint64_t injected[FAULT_KINDS] = {};
  uint64_t survived[FAULT_KINDS] = {};
};

Tally& TheTally() {
  static Tally t;
  return t;
}

class TallyPrinter : public ::testing::Environment {
 public:
  void TearDown() override {
    Tally& t = TheTally();
    std::lock_guard<std::mutex> lk(t.mu);
    std::string line = "[ faults ] injected/survived:";
    uint64_t all = 0;
    for (int k = 0; k < FAULT_KINDS; ++k) {
      all += t.injected[k];
      line += " " + std::string(fault_kind_name(static_cast<fault_kind>(k))) + " " + std::to_string(t.injected[k]) +
              "/" + std::to_string(t.survived[k]);
    }
    if (all > 0) std::printf("%s\n", line.c_str());
  }
};

::testing::Environment* const kTallyPrinter = ::testing::AddGlobalTestEnvironment(new TallyPrinter);

// ---- communicators and ranks --------------------------------------------------------

// p communicators of gcclCommInitAll under GCCL_FAULT=fault (nullptr: unset) and
// GCCL_ALGO=algo, timing out after timeout_ms.
std::vector<gcclComm_t> MakeComms(int p, const char* fault, const char* algo, int timeout_ms = kTimeoutMs) {
  gh::ScopedEnv f("GCCL_FAULT", fault);
  gh::ScopedEnv a("GCCL_ALGO", algo);
  gh::ScopedEnv t("GCCL_TIMEOUT_MS", std::to_string(timeout_ms).c_str());
  std::vector<gcclComm_t> comms(static_cast<size_t>(p), nullptr);
  const gcclResult_t r = gcclCommInitAll(comms.data(), p);
  EXPECT_EQ(r, gcclSuccess) << gcclGetLastError(nullptr);
  if (r != gcclSuccess) comms.clear();
  return comms;
}

struct RankOutcome {
  gcclResult_t result = gcclInternalError;
  std::string error;
  double ms = 0;
};

// Runs call(rank, comm) on one thread per rank; each rank's result, message and time.
std::vector<RankOutcome> RunRanks(const std::vector<gcclComm_t>& comms,
                                  const std::function<gcclResult_t(int, gcclComm_t)>& call) {
  std::vector<RankOutcome> out(comms.size());
  std::vector<std::thread> threads;
  for (size_t r = 0; r < comms.size(); ++r)
    threads.emplace_back([&, r] {
      const auto t0 = Clock::now();
      out[r].result = call(static_cast<int>(r), comms[r]);
      out[r].ms = gh::MsSince(t0);
      // The thread's own copy: an abort from another thread may free the communicator.
      if (out[r].result != gcclSuccess) out[r].error = gcclGetLastError(nullptr);
    });
  for (auto& t : threads) t.join();
  return out;
}

// Adds what comms injected to the tally and returns it by kind.
std::vector<uint64_t> Count(const std::vector<gcclComm_t>& comms) {
  std::vector<uint64_t> total(FAULT_KINDS, 0);
  for (gcclComm_t c : comms) {
    uint64_t n[FAULT_KINDS];
    EXPECT_EQ(comm_faults_injected(c, n), gcclSuccess);
    for (int k = 0; k < FAULT_KINDS; ++k) total[static_cast<size_t>(k)] += n[k];
  }
  Tally& t = TheTally();
  std::lock_guard<std::mutex> lk(t.mu);
  for (int k = 0; k < FAULT_KINDS; ++k) {
    t.injected[k] += total[static_cast<size_t>(k)];
  }
  return total;
}

void DestroyAll(std::vector<gcclComm_t>& comms) {
  for (gcclComm_t c : comms) EXPECT_EQ(gcclCommDestroy(c), gcclSuccess);
  comms.clear();
}

std::string Describe(const std::vector<RankOutcome>& o) {
  std::string s;
  for (size_t r = 0; r < o.size(); ++r)
    s += "\n  rank " + std::to_string(r) + ": " + gcclGetErrorString(o[r].result) + " after " +
         std::to_string(static_cast<int>(o[r].ms)) + " ms" + (o[r].error.empty() ? "" : ": " + o[r].error);
  return s;
}

// ---- one collective, its inputs and its state --------------------------------------

// An allreduce of n floats on p ranks, dense (spec "") or compressed with error
// feedback, run as a sequence of calls on a faulted set of communicators and, as a
// reference, on a clean set with twin compressors that start from the same state.
class AllReduceCase {
 public:
  AllReduceCase(int p, size_t n, std::string spec) : p_(p), n_(n), spec_(std::move(spec)) {
    for (int r = 0; r < p; ++r) {
      std::vector<float> x(n), e(n);
      for (size_t i = 0; i < n; ++i) {
        x[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + r) * (1.0 + 0.25 * r));
        e[i] = static_cast<float>(0.01 * std::cos(0.11 * static_cast<double>(i) * (r + 1)));
      }
      in_.push_back(x);
      residual0_.push_back(e);
    }
    comps_ = MakeCompressors();
    ref_comps_ = MakeCompressors();
  }
  ~AllReduceCase() {
    for (gcclCompressor_t c : comps_) gcclCompressorDestroy(c);
    for (gcclCompressor_t c : ref_comps_) gcclCompressorDestroy(c);
  }
  AllReduceCase(const AllReduceCase&) = delete;
  AllReduceCase& operator=(const AllReduceCase&) = delete;

  int p() const { return p_; }

  // The next call of the sequence on `comms`, with the faulted ranks' compressors;
  // each rank's output lands in out(rank).
  std::vector<RankOutcome> Call(const std::vector<gcclComm_t>& comms) {
    out_.assign(static_cast<size_t>(p_), std::vector<float>(n_, -7.0f));
    return RunRanks(comms, [&](int r, gcclComm_t c) { return CallWith(comps_, r, c, out_[static_cast<size_t>(r)]); });
  }

  // The same call on clean communicators with the reference compressors: what
  // every rank must return. Fails the test if the clean run does.
  std::vector<float> Reference(const std::vector<gcclComm_t>& clean) {
    std::vector<std::vector<float>> ref(static_cast<size_t>(p_), std::vector<float>(n_, -9.0f));
    auto o =
        RunRanks(clean, [&](int r, gcclComm_t c) { return CallWith(ref_comps_, r, c, ref[static_cast<size_t>(r)]); });
    for (const RankOutcome& x : o) EXPECT_EQ(x.result, gcclSuccess) << "the clean run failed" << Describe(o);
    for (int r = 1; r < p_; ++r)
      EXPECT_EQ(ref[static_cast<size_t>(r)], ref[0]) << "clean run: rank " << r << " differs";
    for (size_t i = 0; i < n_; i += 97) {  // and it is the sum (these codecs err by far less than 0.05)
      double sum = 0;
      for (int r = 0; r < p_; ++r) sum += static_cast<double>(in_[static_cast<size_t>(r)][i]);
      if (calls_ == 0 && !spec_.empty()) {
        for (int r = 0; r < p_; ++r) sum += static_cast<double>(residual0_[static_cast<size_t>(r)][i]);
      }
      if (calls_ == 0) {
        EXPECT_NEAR(ref[0][i], sum, 0.05) << "element " << i;
      }
    }
    calls_++;
    return ref[0];
  }

  const std::vector<float>& out(int r) const { return out_[static_cast<size_t>(r)]; }

  // Each rank's sendbuff and residual now.
  struct State {
    std::vector<std::vector<float>> in, residual;
  };
  State Snapshot() {
    State st{in_, {}};
    for (int r = 0; r < p_; ++r) {
      std::vector<float> e(n_, 0.0f);
      if (!spec_.empty()) {
        EXPECT_EQ(gcclCompressorGetResidual(comps_[static_cast<size_t>(r)], e.data()), gcclSuccess);
      }
      st.residual.push_back(e);
    }
    return st;
  }

 private:
  std::vector<gcclCompressor_t> MakeCompressors() {
    std::vector<gcclCompressor_t> comps(static_cast<size_t>(p_), nullptr);
    if (spec_.empty()) return comps;
    for (int r = 0; r < p_; ++r) {
      const size_t R = static_cast<size_t>(r);
      EXPECT_EQ(gcclCompressorCreate(&comps[R], spec_.c_str(), n_, gcclFloat32), gcclSuccess)
          << spec_ << ": " << gcclGetLastError(nullptr);
      EXPECT_EQ(gcclCompressorSetResidual(comps[R], residual0_[R].data()), gcclSuccess);
    }
    return comps;
  }

  gcclResult_t CallWith(const std::vector<gcclCompressor_t>& comps, int r, gcclComm_t comm, std::vector<float>& out) {
    const size_t R = static_cast<size_t>(r);
    if (spec_.empty()) return gcclAllReduce(in_[R].data(), out.data(), n_, gcclFloat32, gcclSum, comm, nullptr);
    return gcclAllReduceCompressed(in_[R].data(), out.data(), n_, gcclFloat32, gcclSum, comps[R], comm, nullptr);
  }

  int p_;
  size_t n_;
  std::string spec_;
  int calls_ = 0;
  std::vector<std::vector<float>> in_, residual0_, out_;
  std::vector<gcclCompressor_t> comps_, ref_comps_;
};

// ---- the scenario every test runs ---------------------------------------------------

struct Scenario {
  int p;
  std::string spec;   // "" dense
  const char* algo;   // GCCL_ALGO
  std::string fault;  // GCCL_FAULT
  fault_kind kind;    // the class of the fault, for the tally
  bool fails = true;  // the fault must make a call fail (a short delay must not)
  int calls = 2;      // calls made on the faulted communicators, up to the first failure
  size_t n = 3000;
};

struct ScenarioResult {
  std::vector<RankOutcome> failed_call;  // the outcomes of the call that failed; empty if none did
  int failed_at = -1;                    // its number in the sequence, from 1
};

// Runs the sequence under the fault and checks the contract:
// - a rank that succeeds returns the clean run's bits: no wrong answer is a success;
// - a rank that fails does so within GCCL_TIMEOUT_MS + 1 s and leaves its sendbuff
//   and residual as they were before the call;
// - a call fails on every rank or on none, and leaves every rank's communicator
//   broken (its next call fails at once);
// - the failed call, repeated on fresh communicators, gives the clean run's bits.
ScenarioResult RunFaulted(const Scenario& s) {
  SCOPED_TRACE("GCCL_FAULT=" + s.fault + " GCCL_ALGO=" + s.algo + " spec \"" + s.spec + "\"");
  ScenarioResult res;
  AllReduceCase c(s.p, s.n, s.spec);
  std::vector<gcclComm_t> clean = MakeComms(s.p, nullptr, s.algo, 20000);
  std::vector<gcclComm_t> comms = MakeComms(s.p, s.fault.c_str(), s.algo);
  if (comms.size() != static_cast<size_t>(s.p) || clean.size() != static_cast<size_t>(s.p)) return res;
  std::vector<float> ref;
  for (int call = 1; call <= s.calls && res.failed_at < 0; ++call) {
    const AllReduceCase::State before = c.Snapshot();
    ref = c.Reference(clean);
    auto o = c.Call(comms);
    int failed = 0;
    for (int r = 0; r < s.p; ++r) {
      const RankOutcome& x = o[static_cast<size_t>(r)];
      if (x.result == gcclSuccess) {
        EXPECT_EQ(c.out(r), ref) << "call " << call << ", rank " << r << ": success with a wrong result" << Describe(o);
        continue;
      }
      failed++;
      EXPECT_LT(x.ms, kTimeoutMs + kSlackMs) << "call " << call << Describe(o);
      const AllReduceCase::State now = c.Snapshot();
      EXPECT_EQ(now.in[static_cast<size_t>(r)], before.in[static_cast<size_t>(r)])
          << "rank " << r << ": sendbuff changed by a failed call";
      EXPECT_EQ(now.residual[static_cast<size_t>(r)], before.residual[static_cast<size_t>(r)])
          << "rank " << r << ": residual changed by a failed call";
    }
    if (failed == 0) continue;
    res.failed_at = call;
    res.failed_call = o;
    std::printf("[ fault  ] %s, call %d:%s\n", s.fault.c_str(), call, Describe(o).c_str());
    EXPECT_EQ(failed, s.p) << "a call failed on some ranks only" << Describe(o);
    for (gcclComm_t comm : comms) {
      gcclResult_t async = gcclSuccess;
      EXPECT_EQ(gcclCommGetAsyncError(comm, &async), gcclSuccess);
      EXPECT_NE(async, gcclSuccess) << "a communicator of the failed call is not in an error state";
    }
  }
  const std::vector<uint64_t> injected = Count(comms);
  EXPECT_EQ(injected[static_cast<size_t>(s.kind)], 1u) << "the fault was not injected";
  EXPECT_EQ(res.failed_at >= 0, s.fails) << (s.fails ? "no call failed" : "a call failed");
  DestroyAll(comms);
  DestroyAll(clean);
  if (res.failed_at >= 0) {  // the failed call again, on fresh communicators without the fault
    comms = MakeComms(s.p, nullptr, s.algo);
    auto again = c.Call(comms);
    DestroyAll(comms);
    for (int r = 0; r < s.p; ++r) {
      EXPECT_EQ(again[static_cast<size_t>(r)].result, gcclSuccess)
          << "the call again, on a fresh communicator" << Describe(again);
      EXPECT_EQ(c.out(r), ref) << "rank " << r << ": the call again gives other bits than the clean run";
    }
  }
  if (!::testing::Test::HasFailure()) {
    Tally& t = TheTally();
    std::lock_guard<std::mutex> lk(t.mu);
    t.survived[s.kind] += injected[static_cast<size_t>(s.kind)];
  }
  return res;
}

int CountResult(const std::vector<RankOutcome>& o, gcclResult_t r) {
  int n = 0;
  for (const RankOutcome& x : o) n += x.result == r;
  return n;
}

bool AllTimeoutOrRemote(const std::vector<RankOutcome>& o) {
  for (const RankOutcome& x : o)
    if (x.result != gcclTimeout && x.result != gcclRemoteError) return false;
  return !o.empty();
}

// ---- corrupted, truncated and duplicated frames --------------------------------------
//
// sra on 3 ranks: each rank's sends 1 and 2 are its phase-1 frames (to its two
// peers), 3 and 4 the ring's frames of phase 2 (to rank r + 1); the first call's.

class CorruptFrame : public ::testing::TestWithParam<const char*> {
 protected:
  // sra on 3 ranks under `fault`: gcclCorruptData on at least `lo`, at most `hi` ranks.
  void ExpectCorruptOn(const char* fault, fault_kind kind, int lo, int hi) {
    auto o = RunFaulted({3, GetParam(), "sra", fault, kind}).failed_call;
    EXPECT_GE(CountResult(o, gcclCorruptData), lo) << Describe(o);
    EXPECT_LE(CountResult(o, gcclCorruptData), hi) << Describe(o);
  }
};

// Byte 70 is in the payload (the header has 64 bytes); the CRC catches it.
TEST_P(CorruptFrame, BitFlipInAScatterFrame) {
  ExpectCorruptOn("flip:rank=1,send=1,byte=70,bit=2", FAULT_FLIP, 1, 1);
}

TEST_P(CorruptFrame, BitFlipInAHeader) {
  ExpectCorruptOn("flip:rank=2,send=2,byte=9,bit=0", FAULT_FLIP, 1, 1);
}

// Its sender and the third rank have all they need by then: they must fail anyway.
TEST_P(CorruptFrame, BitFlipInTheLastRingFrame) {
  ExpectCorruptOn("flip:rank=0,send=4,byte=100,bit=7", FAULT_FLIP, 1, 1);
}

TEST_P(CorruptFrame, TruncatedScatterFrame) {
  ExpectCorruptOn("truncate:rank=1,send=2,bytes=100", FAULT_TRUNCATE, 1, 1);
}

// The ring may forward the frame before it decodes it: its next receiver fails too.
TEST_P(CorruptFrame, TruncatedRingFrameToItsHeader) {
  ExpectCorruptOn("truncate:rank=2,send=3,bytes=64", FAULT_TRUNCATE, 1, 2);
}

// Its receiver takes the copy for the next frame from that peer (the next call's);
// the frame it displaces is never received, and its sender times out.
TEST_P(CorruptFrame, DuplicatedScatterFrame) {
  ExpectCorruptOn("duplicate:rank=0,send=1", FAULT_DUPLICATE, 0, 0);
}

TEST_P(CorruptFrame, DuplicatedRingFrame) {
  ExpectCorruptOn("duplicate:rank=1,send=3", FAULT_DUPLICATE, 0, 0);
}

INSTANTIATE_TEST_SUITE_P(Codecs, CorruptFrame, ::testing::Values("uniform:bits=8,ef=1", "fp16:ef=1"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           const std::string spec = info.param;
                           return spec.substr(0, spec.find(':'));
                         });

// ---- lost messages, silent ranks, late messages --------------------------------------

// A fault that ends every rank's call with gcclTimeout or gcclRemoteError.
void ExpectLost(const Scenario& s) {
  auto o = RunFaulted(s).failed_call;
  EXPECT_TRUE(AllTimeoutOrRemote(o)) << Describe(o);
}

// Rank 2 takes rank 1's third message for its second: the sums it passes on are wrong.
TEST(LostMessage, DroppedDenseRingMessage) {
  ExpectLost({3, "", "ring", "drop:rank=1,send=2", FAULT_DROP});
}

TEST(LostMessage, DroppedCompressedFrame) {
  ExpectLost({3, "uniform:bits=8,ef=1", "sra", "drop:rank=2,send=3", FAULT_DROP});
}

// Operation 1 is the agreement's small allgather of the first collective.
TEST(SilentRank, StopsInTheAgreement) {
  ExpectLost({3, "", "ring", "stop:rank=2,op=1", FAULT_STOP});
}

TEST(SilentRank, StopsMidCompressedCollective) {
  ExpectLost({3, "uniform:bits=8,ef=1", "sra", "stop:rank=1,op=6", FAULT_STOP});
}

// Rank 3, a leaf, has sent its part: ranks 0 and 1 have their results before it stops.
TEST(SilentRank, StopsInADenseTree) {
  ExpectLost({4, "", "tree", "stop:rank=3,op=4", FAULT_STOP});
}

TEST(LateMessage, DelayBelowTheTimeoutIsSurvived) {
  RunFaulted({3, "uniform:bits=8,ef=1", "sra", "delay:rank=1,send=3,ms=100", FAULT_DELAY, false});
}

TEST(LateMessage, DelayPastTheTimeoutFails) {
  ExpectLost({3, "fp16:ef=1", "sra", "delay:rank=0,send=2,ms=1200", FAULT_DELAY});
}

// ---- abort ---------------------------------------------------------------------------
// (test_errors.cc covers an abort of an idle peer and of the blocked rank's own
// communicator; here the ranks are stuck on a peer that stopped mid-collective.)

TEST(AbortFaulted, AbortOfTheSilentRankFreesEveryRank) {
  const int p = 3;
  AllReduceCase c(p, 3000, "uniform:bits=8,ef=1");
  const AllReduceCase::State before = c.Snapshot();
  std::vector<gcclComm_t> comms = MakeComms(p, "stop:rank=1,op=3", "sra", 20000);
  ASSERT_EQ(comms.size(), static_cast<size_t>(p));
  Clock::time_point abort_at{};
  std::atomic<bool> aborted{false};
  std::thread aborter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    abort_at = Clock::now();
    aborted = true;
    EXPECT_EQ(gcclCommAbort(comms[1]), gcclSuccess);  // returns once rank 1's call has left
  });
  auto o = c.Call(comms);
  aborter.join();
  const double after_abort = gh::MsSince(abort_at);
  EXPECT_TRUE(aborted.load());
  EXPECT_LT(after_abort, kSlackMs) << "the abort did not free the ranks long before their 20 s timeout";
  EXPECT_TRUE(AllTimeoutOrRemote(o)) << Describe(o);
  const AllReduceCase::State now = c.Snapshot();
  EXPECT_EQ(now.in, before.in) << "sendbuff changed by a failed call";
  EXPECT_EQ(now.residual, before.residual) << "residual changed by a failed call";
  comms.erase(comms.begin() + 1);  // aborted: freed
  Count(comms);
  DestroyAll(comms);
  // The call again on fresh communicators: the bits of a clean run.
  std::vector<gcclComm_t> clean = MakeComms(p, nullptr, "sra", 20000);
  const std::vector<float> ref = c.Reference(clean);
  DestroyAll(clean);
  comms = MakeComms(p, nullptr, "sra", 20000);
  auto again = c.Call(comms);
  DestroyAll(comms);
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(again[static_cast<size_t>(r)].result, gcclSuccess) << Describe(again);
    EXPECT_EQ(c.out(r), ref) << "rank " << r;
  }
  if (!::testing::Test::HasFailure()) {
    Tally& t = TheTally();
    std::lock_guard<std::mutex> lk(t.mu);
    t.injected[FAULT_STOP] += 1;  // rank 1's, whose communicator the abort freed
    t.survived[FAULT_STOP] += 1;
  }
}

}  // namespace
