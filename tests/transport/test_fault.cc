// test_fault.cc — the fault injector (src/transport/fault.h): GCCL_FAULT's parser,
// strict about every malformed text, and each fault on single messages between
// endpoints of the local transport. What collectives do under these faults:
// tests/core/test_faults.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/faults.h"
#include "core/harness.h"
#include "gccl.h"

extern "C" {
#include "transport/local.h"
}

namespace {

using Clock = std::chrono::steady_clock;

// ---- GCCL_FAULT -----------------------------------------------------------------------

TEST(FaultConfig, ParsesEveryKind) {
  struct fault_config cfg;
  ASSERT_EQ(fault_config_parse(&cfg,
                               "drop:rank=0,send=5;delay:rank=1,send=2,ms=30,peer=2;truncate:rank=2,send=1,bytes=7;"
                               "duplicate:send=4,rank=1;flip:rank=1,send=3,byte=70,bit=2;stop:rank=2,op=10",
                               3),
            gcclSuccess)
      << gcclGetLastError(nullptr);
  ASSERT_EQ(cfg.n, 6);
  const fault_rule& drop = cfg.rules[0];
  EXPECT_EQ(drop.kind, FAULT_DROP);
  EXPECT_EQ(drop.rank, 0);
  EXPECT_EQ(drop.send, 5u);
  EXPECT_EQ(drop.peer, -1);
  EXPECT_EQ(cfg.rules[1].kind, FAULT_DELAY);
  EXPECT_EQ(cfg.rules[1].ms, 30u);
  EXPECT_EQ(cfg.rules[1].peer, 2);
  EXPECT_EQ(cfg.rules[2].bytes, 7u);
  EXPECT_EQ(cfg.rules[3].kind, FAULT_DUPLICATE);
  EXPECT_EQ(cfg.rules[3].rank, 1);
  EXPECT_EQ(cfg.rules[3].send, 4u);
  EXPECT_EQ(cfg.rules[4].byte, 70u);
  EXPECT_EQ(cfg.rules[4].bit, 2);
  EXPECT_EQ(cfg.rules[5].kind, FAULT_STOP);
  EXPECT_EQ(cfg.rules[5].op, 10u);
  for (int k = 0; k < FAULT_KINDS; ++k) EXPECT_STRNE(fault_kind_name(static_cast<fault_kind>(k)), "unknown");
}

TEST(FaultConfig, RejectsMalformedText) {
  const char* bad[] = {
      "",                                       // empty
      "explode:rank=0,send=1",                  // unknown kind
      "drop",                                   // no keys
      "drop:rank=0",                            // send missing
      "drop:rank=0,send=0",                     // sends count from 1
      "drop:rank=0,send=x",                     // not a number
      "drop:rank=0,send=-1",                    // negative
      "drop:rank= 0,send=1",                    // spaces
      "drop:rank=0,send=1x",                    // trailing junk
      "drop:rank=0,send=1,send=2",              // twice
      "drop:rank=3,send=1",                     // no rank 3 of 3
      "drop:rank=0,send=1,peer=0",              // to itself
      "drop:rank=0,send=1,peer=5",              // no such peer
      "drop:rank=0,send=1,ms=3",                // not a key of drop
      "drop:rank=0,send=1,",                    // trailing comma
      "drop:rank=0,send=1;",                    // empty fault
      ";drop:rank=0,send=1",                    // empty fault
      "drop:rank=0,send",                       // no value
      "drop:rank=0,send=99999999999999999999",  // overflows
      "flip:rank=0,send=1,byte=1,bit=8",        // bit 0..7
      "flip:rank=0,send=1,bit=1",               // byte missing
      "truncate:rank=0,send=1",                 // bytes missing
      "delay:rank=0,send=1,ms=99999999",        // over an hour
      "stop:rank=0,send=1",                     // stop counts operations
      "stop:rank=0,op=1,peer=1",                // stop has no peer
      "DROP:rank=0,send=1",                     // case matters
      "drop:rank=0,send=1;drop:rank=0,send=2;drop:rank=0,send=3;drop:rank=0,send=4;drop:rank=0,send=5;"
      "drop:rank=0,send=6;drop:rank=0,send=7;drop:rank=0,send=8;drop:rank=0,send=9",  // more than 8
  };
  for (const char* text : bad) {
    SCOPED_TRACE(std::string("GCCL_FAULT=") + text);
    struct fault_config cfg;
    EXPECT_EQ(fault_config_parse(&cfg, text, 3), gcclInvalidUsage);
    EXPECT_NE(std::string(gcclGetLastError(nullptr)).find("GCCL_FAULT"), std::string::npos)
        << gcclGetLastError(nullptr);
  }
}

TEST(FaultConfig, MalformedTextFailsCommunicatorCreation) {
  gh::ScopedEnv fault("GCCL_FAULT", "flip:rank=1,send=3,byte=70");
  gcclComm_t comms[2] = {reinterpret_cast<gcclComm_t>(uintptr_t{1}), reinterpret_cast<gcclComm_t>(uintptr_t{2})};
  EXPECT_EQ(gcclCommInitAll(comms, 2), gcclInvalidUsage);
  EXPECT_EQ(comms[0], nullptr);
  EXPECT_EQ(comms[1], nullptr);
  const std::string why = gcclGetLastError(nullptr);
  EXPECT_NE(why.find("GCCL_FAULT"), std::string::npos) << why;
  EXPECT_NE(why.find("bit"), std::string::npos) << why;
  // By id, each rank fails at once rather than waiting for the other.
  gcclUniqueId id;
  ASSERT_EQ(gcclGetUniqueId(&id), gcclSuccess);
  gcclComm_t one = nullptr;
  const auto t0 = Clock::now();
  EXPECT_EQ(gcclCommInitRank(&one, 2, id, 0), gcclInvalidUsage);
  EXPECT_LT(gh::MsSince(t0), 1000);
  EXPECT_EQ(one, nullptr);
}

TEST(FaultConfig, UnsetOrValidKeepsCommunicatorsWorking) {
  for (const char* text : {static_cast<const char*>(nullptr), "drop:rank=1,send=1000000"}) {
    gh::ScopedEnv fault("GCCL_FAULT", text);
    gcclComm_t comms[2] = {nullptr, nullptr};
    ASSERT_EQ(gcclCommInitAll(comms, 2), gcclSuccess) << gcclGetLastError(nullptr);
    std::vector<std::thread> ranks;
    float out[2][4] = {};
    for (int r = 0; r < 2; ++r)
      ranks.emplace_back([&, r] {
        const float in[4] = {1, 2, 3, static_cast<float>(r)};
        EXPECT_EQ(gcclAllReduce(in, out[r], 4, gcclFloat32, gcclSum, comms[r], nullptr), gcclSuccess);
      });
    for (auto& t : ranks) t.join();
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(out[r][0], 2.0f);
      EXPECT_EQ(out[r][3], 1.0f);
      uint64_t n[FAULT_KINDS];
      ASSERT_EQ(comm_faults_injected(comms[r], n), gcclSuccess);
      for (uint64_t x : n) EXPECT_EQ(x, 0u);
      EXPECT_EQ(gcclCommDestroy(comms[r]), gcclSuccess);
    }
  }
}

// ---- single messages -------------------------------------------------------------------

// p endpoints of the local transport, each wrapped by the fault injector.
class FaultRanks {
 public:
  FaultRanks(int p, const char* text, int64_t timeout_ms = 20000) : tps_(static_cast<size_t>(p), nullptr) {
    struct fault_config cfg;
    EXPECT_EQ(fault_config_parse(&cfg, text, p), gcclSuccess) << gcclGetLastError(nullptr);
    EXPECT_EQ(local_world_create(&w_, p), gcclSuccess);
    for (int r = 0; r < p; ++r) {
      struct transport* inner = nullptr;
      EXPECT_EQ(local_transport_create(&inner, w_, r, timeout_ms), gcclSuccess);
      EXPECT_EQ(fault_transport_create(&tps_[static_cast<size_t>(r)], inner, &cfg), gcclSuccess);
    }
  }
  ~FaultRanks() {
    for (struct transport* tp : tps_) tp->ops->destroy(tp);
    local_world_unref(w_);
  }
  struct transport* operator[](int r) const {
    return tps_[static_cast<size_t>(r)];
  }
  uint64_t Injected(int r, fault_kind k) const {
    uint64_t n[FAULT_KINDS];
    fault_transport_injected(tps_[static_cast<size_t>(r)], n);
    return n[k];
  }

 private:
  struct local_world* w_ = nullptr;
  std::vector<struct transport*> tps_;
};

std::vector<unsigned char> Bytes(size_t n, unsigned seed) {
  std::vector<unsigned char> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<unsigned char>(i * 7 + seed);
  return b;
}

// Sends msgs from rank 0 to rank 1, one after another; rank 1 receives each into
// a buffer of up to cap bytes. Returns what rank 1 received.
std::vector<std::vector<unsigned char>> Exchange(const FaultRanks& f,
                                                 const std::vector<std::vector<unsigned char>>& msgs, size_t cap,
                                                 int receives) {
  std::vector<std::vector<unsigned char>> got;
  std::thread sender([&] {
    for (const auto& m : msgs) EXPECT_EQ(tp_send(f[0], 1, m.data(), m.size()), gcclSuccess);
  });
  for (int i = 0; i < receives; ++i) {
    std::vector<unsigned char> buf(cap);
    size_t n = 0;
    tp_req req;
    EXPECT_EQ(f[1]->ops->irecv_upto(f[1], 0, buf.data(), cap, &n, &req), gcclSuccess);
    EXPECT_EQ(f[1]->ops->wait(f[1], req), gcclSuccess) << gcclGetLastError(nullptr);
    buf.resize(n);
    got.push_back(buf);
  }
  sender.join();
  return got;
}

TEST(FaultTransport, FlipChangesOneBitOfOneMessage) {
  FaultRanks f(2, "flip:rank=0,send=2,byte=5,bit=3");
  const std::vector<std::vector<unsigned char>> msgs = {Bytes(100, 1), Bytes(100, 2), Bytes(100, 3)};
  const auto sent = msgs;
  auto got = Exchange(f, msgs, 100, 3);
  EXPECT_EQ(msgs, sent) << "the sender's buffer was changed";
  EXPECT_EQ(got[0], msgs[0]);
  EXPECT_EQ(got[2], msgs[2]);
  std::vector<unsigned char> want = msgs[1];
  want[5] ^= 1u << 3;
  EXPECT_EQ(got[1], want);
  EXPECT_EQ(f.Injected(0, FAULT_FLIP), 1u);
  EXPECT_EQ(f.Injected(1, FAULT_FLIP), 0u);
}

TEST(FaultTransport, TruncateKeepsTheFirstBytes) {
  FaultRanks f(2, "truncate:rank=0,send=1,bytes=10;truncate:rank=0,send=2,bytes=500");
  const std::vector<std::vector<unsigned char>> msgs = {Bytes(100, 1), Bytes(100, 2)};
  auto got = Exchange(f, msgs, 200, 2);
  EXPECT_EQ(got[0], std::vector<unsigned char>(msgs[0].begin(), msgs[0].begin() + 10));
  EXPECT_EQ(got[1], msgs[1]) << "a cut longer than the message is not injected";
  EXPECT_EQ(f.Injected(0, FAULT_TRUNCATE), 1u);
}

TEST(FaultTransport, DuplicateDeliversACopyNextEvenAfterTheBufferChanged) {
  FaultRanks f(2, "duplicate:rank=0,send=1");
  std::vector<unsigned char> m = Bytes(64, 9);
  const std::vector<unsigned char> first = m;
  std::thread sender([&] {
    EXPECT_EQ(tp_send(f[0], 1, m.data(), m.size()), gcclSuccess);  // the copy is not waited for
    std::fill(m.begin(), m.end(), 0);
  });
  std::vector<unsigned char> a(64), b(64);
  ASSERT_EQ(tp_recv(f[1], 0, a.data(), 64), gcclSuccess);
  sender.join();
  ASSERT_EQ(tp_recv(f[1], 0, b.data(), 64), gcclSuccess);
  EXPECT_EQ(a, first);
  EXPECT_EQ(b, first);
  EXPECT_EQ(f.Injected(0, FAULT_DUPLICATE), 1u);
}

TEST(FaultTransport, DropCompletesTheSendAndStarvesTheReceive) {
  FaultRanks f(2, "drop:rank=0,send=1", 200);
  std::vector<unsigned char> m = Bytes(32, 1), r(32);
  ASSERT_EQ(tp_send(f[0], 1, m.data(), m.size()), gcclSuccess);
  const auto t0 = Clock::now();
  EXPECT_EQ(tp_recv(f[1], 0, r.data(), 32), gcclTimeout);
  EXPECT_GE(gh::MsSince(t0), 150);
  EXPECT_EQ(f.Injected(0, FAULT_DROP), 1u);
}

TEST(FaultTransport, DelayHoldsTheChosenMessageOnly) {
  FaultRanks f(3, "delay:rank=0,send=2,ms=150,peer=2");
  std::vector<unsigned char> m = Bytes(16, 1), r(16);
  std::thread sender([&] {
    EXPECT_EQ(tp_send(f[0], 2, m.data(), 16), gcclSuccess);  // send 1 to rank 2
    EXPECT_EQ(tp_send(f[0], 1, m.data(), 16), gcclSuccess);  // not counted with peer=2
    EXPECT_EQ(tp_send(f[0], 2, m.data(), 16), gcclSuccess);  // send 2 to rank 2: late
  });
  const auto t0 = Clock::now();
  ASSERT_EQ(tp_recv(f[2], 0, r.data(), 16), gcclSuccess);
  ASSERT_EQ(tp_recv(f[1], 0, r.data(), 16), gcclSuccess);
  EXPECT_LT(gh::MsSince(t0), 120);
  ASSERT_EQ(tp_recv(f[2], 0, r.data(), 16), gcclSuccess);
  EXPECT_GE(gh::MsSince(t0), 140);
  sender.join();
  EXPECT_EQ(r, m);
  EXPECT_EQ(f.Injected(0, FAULT_DELAY), 1u);
}

TEST(FaultTransport, StopBlocksUntilAbortThenEveryOperationFails) {
  FaultRanks f(2, "stop:rank=1,op=2");
  std::vector<unsigned char> r(16);
  std::atomic<bool> returned{false};
  gcclResult_t res = gcclSuccess;
  std::string why;
  std::thread rank1([&] {
    tp_req req;
    EXPECT_EQ(f[1]->ops->irecv(f[1], 0, r.data(), 16, &req), gcclSuccess);  // operation 1
    res = f[1]->ops->wait(f[1], req);                                       // operation 2: stops
    why = gcclGetLastError(nullptr);
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(returned) << "the stopped operation returned before the abort";
  const auto t0 = Clock::now();
  f[0]->ops->abort(f[0], gcclRemoteError);  // any rank's abort breaks the world
  rank1.join();
  EXPECT_LT(gh::MsSince(t0), 1000);
  EXPECT_EQ(res, gcclRemoteError);
  EXPECT_NE(why.find("stop"), std::string::npos) << why;
  EXPECT_EQ(f[1]->ops->barrier(f[1]), gcclRemoteError) << "a stopped rank stays silent";
  EXPECT_EQ(f.Injected(1, FAULT_STOP), 1u);
}

}  // namespace
