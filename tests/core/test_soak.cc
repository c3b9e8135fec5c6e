// test_soak.cc — the soak test: many mixed collectives on 8 thread ranks, every
// result checked, and the process's resident memory, open file descriptors and
// threads compared before and after.
//
// Each call draws from one seeded generator:
//  - a communicator set (made with gcclCommInitAll): the tuner's choice; ring, rhd
//    or tree forced; ring-requant forced; two nodes of four (hier);
//  - a dense collective (any datatype, op, root, count), checked exactly against
//    the harness's reference, or a compressed allreduce (sum or avg), checked
//    exactly (none, fp16, bf16, topk:ratio=1 on small integers), within each
//    quantization's bound (uniform 8 and 4 bits), or for agreement and magnitude
//    (sign with error feedback);
//  - in place or out of place;
//  - how it is launched: from every rank's thread, on per-rank streams, or in a
//    group from one thread, with or without streams.
// Sizes run log-uniformly up to GCCL_SOAK_MAX_BYTES (default 256 KiB), with 0 and
// 1 element among them. The warm-up (the first min(500, calls / 4) calls) begins
// with the largest size on every set and codec, so workspaces reach their final
// size in it;
// after it, resident memory may grow by at most 5%. GCCL_SOAK_CALLS (default 300)
// sets the calls; scripts/soak.sh runs the long form, 10,000 calls of up to 8 MiB.
#include <dirent.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/harness.h"
#include "gccl.h"

namespace {

using gh::Case;
using gh::CasePlan;
using gh::Coll;

constexpr int kRanks = 8;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // their allocators hold freed memory: RSS says nothing
#else
constexpr bool kSanitized = false;
#endif

size_t EnvSize(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? static_cast<size_t>(std::strtoull(v, nullptr, 10)) : fallback;
}

size_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

int OpenFds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (struct dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n - 1;  // the directory's own descriptor
}

int Threads() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Threads:", 0) == 0) return std::atoi(line.c_str() + 8);
  return -1;
}

// The communicator sets: GCCL_ALGO and GCCL_RANKS_PER_NODE at creation.
struct SetSpec {
  const char* name;
  const char* algo;
  const char* per_node;
};
const SetSpec kSets[] = {{"tuner", nullptr, nullptr},
                         {"ring", "ring", nullptr},
                         {"rhd", "rhd", nullptr},
                         {"tree", "tree", nullptr},
                         {"ring-requant", "ring-requant", nullptr},
                         {"hier 2x4", nullptr, "4"}};
constexpr int kNumSets = sizeof kSets / sizeof kSets[0];

// Compressed codecs and how each result is checked. Inputs are integers in
// [-8, 8], so sums of 8 are exact in fp32, fp16 and bf16.
struct CodecSpec {
  const char* spec;
  double levels;  // uniform: 2^bits - 1 (a bound per quantization); 0: exact; -1: sign
};
const CodecSpec kCodecs[] = {
    {"none", 0},      {"fp16", 0}, {"bf16", 0}, {"topk:ratio=1", 0}, {"uniform:bits=8", 255}, {"uniform:bits=4", 15},
    {"sign:ef=1", -1}};
constexpr int kNumCodecs = sizeof kCodecs / sizeof kCodecs[0];
constexpr double kInputMax = 8;

float CompressedInput(uint64_t seed, int rank, size_t i) {
  return static_cast<float>(static_cast<int>(gh::Mix64(seed ^ (static_cast<uint64_t>(rank) << 40) ^ i) % 17) - 8);
}

enum class Launch { Threads, Streams, Group, GroupStreams };

// Everything the calls share: the sets, per-rank streams, a thread per rank.
class Soak {
 public:
  Soak() : team_(kRanks) {
    for (int s = 0; s < kNumSets; ++s) {
      gh::ScopedEnv algo("GCCL_ALGO", kSets[s].algo), per_node("GCCL_RANKS_PER_NODE", kSets[s].per_node);
      comms_[s].assign(kRanks, nullptr);
      if (gcclCommInitAll(comms_[s].data(), kRanks) != gcclSuccess) ok_ = false;
    }
    streams_.assign(kRanks, nullptr);
    for (int r = 0; r < kRanks; ++r)
      if (gcclStreamCreate(&streams_[static_cast<size_t>(r)]) != gcclSuccess) ok_ = false;
    ok_ = ok_ && team_.init_result() == gcclSuccess;
  }
  ~Soak() {
    for (gcclStream_t s : streams_)
      if (s != nullptr) gcclStreamDestroy(s);
    for (auto& set : comms_)
      for (gcclComm_t c : set)
        if (c != nullptr) gcclCommDestroy(c);
  }
  bool ok() const { return ok_; }

  // Issues issue(r, comm, stream) on every rank as `how` says; results[r] is what
  // rank r's call (or its stream's synchronize) returned.
  std::vector<gcclResult_t> Run(enum Launch how, int set,
                                const std::function<gcclResult_t(int, gcclComm_t, gcclStream_t)>& issue) {
    std::vector<gcclResult_t> res(kRanks, gcclInternalError);
    const std::vector<gcclComm_t>& comms = comms_[set];
    const bool streams = how == Launch::Streams || how == Launch::GroupStreams;
    if (how == Launch::Threads || how == Launch::Streams) {
      team_.Run([&](int r, gcclComm_t) {
        gcclStream_t s = streams ? streams_[static_cast<size_t>(r)] : nullptr;
        gcclResult_t e = issue(r, comms[static_cast<size_t>(r)], s);
        res[static_cast<size_t>(r)] = e == gcclSuccess && s != nullptr ? gcclStreamSynchronize(s) : e;
      });
      return res;
    }
    gcclResult_t e = gcclGroupStart();
    for (int r = 0; r < kRanks && e == gcclSuccess; ++r)
      e = issue(r, comms[static_cast<size_t>(r)], streams ? streams_[static_cast<size_t>(r)] : nullptr);
    gcclResult_t end = gcclGroupEnd();
    for (int r = 0; r < kRanks; ++r) {
      gcclResult_t sync = streams ? gcclStreamSynchronize(streams_[static_cast<size_t>(r)]) : gcclSuccess;
      res[static_cast<size_t>(r)] = e != gcclSuccess ? e : end != gcclSuccess ? end : sync;
    }
    return res;
  }

 private:
  gh::RankTeam team_;
  std::vector<gcclComm_t> comms_[kNumSets];
  std::vector<gcclStream_t> streams_;
  bool ok_ = true;
};

// One compressed allreduce on every rank, checked. True when all is well.
bool CompressedCall(Soak& soak, int set, enum Launch how, const CodecSpec& codec, size_t n, gcclRedOp_t op,
                    bool inplace, uint64_t seed, const std::string& what) {
  std::vector<std::vector<float>> send(kRanks), recv(kRanks);
  std::vector<gcclCompressor_t> comp(kRanks, nullptr);
  for (int r = 0; r < kRanks; ++r) {
    send[r].resize(n);
    for (size_t i = 0; i < n; ++i) send[r][i] = CompressedInput(seed, r, i);
    recv[r] = inplace ? send[r] : std::vector<float>(n, -1.0f);
    if (gcclCompressorCreate(&comp[r], codec.spec, n, gcclFloat32) != gcclSuccess) {
      ADD_FAILURE() << what << ": gcclCompressorCreate: " << gcclGetLastError(nullptr);
      for (gcclCompressor_t c : comp) gcclCompressorDestroy(c);
      return false;
    }
  }
  std::vector<gcclResult_t> res = soak.Run(how, set, [&](int r, gcclComm_t comm, gcclStream_t s) {
    return gcclAllReduceCompressed(inplace ? recv[r].data() : send[r].data(), recv[r].data(), n, gcclFloat32, op,
                                   comp[r], comm, s);
  });
  for (gcclCompressor_t c : comp) gcclCompressorDestroy(c);
  for (int r = 0; r < kRanks; ++r)
    if (res[r] != gcclSuccess) {
      ADD_FAILURE() << what << ": rank " << r << " returned " << gcclGetErrorString(res[r]);
      return false;
    }
  for (int r = 1; r < kRanks; ++r)
    if (n > 0 && std::memcmp(recv[r].data(), recv[0].data(), n * sizeof(float)) != 0) {
      ADD_FAILURE() << what << ": rank " << r << "'s result is not bit-identical to rank 0's";
      return false;
    }
  for (int r = 0; r < kRanks && !inplace; ++r)
    for (size_t i = 0; i < n; ++i)
      if (send[r][i] != CompressedInput(seed, r, i)) {
        ADD_FAILURE() << what << ": rank " << r << "'s sendbuff changed";
        return false;
      }
  // Each quantization of a sum of m inputs errs by under (its range) / levels <=
  // 2 m 8 / levels; sra quantizes every input and then the sum of all, the ring
  // (ring-requant) the partial sums of 1..p inputs, hier each node's sum of 4 and
  // then the sum of all.
  const double p = kRanks, div = op == gcclAvg ? p : 1.0, range = 2 * kInputMax;
  const bool ring = std::string(kSets[set].name) == "ring-requant";
  const double steps = ring ? p * (p + 1) / 2 : kSets[set].per_node != nullptr ? 2 * 4 + p : p + p;
  const double bound = codec.levels > 0 ? steps * range / codec.levels / div + 1e-4 : 0;
  for (size_t i = 0; i < n; ++i) {
    double exact = 0;
    for (int r = 0; r < kRanks; ++r) exact += CompressedInput(seed, r, i);
    exact /= div;
    const double got = recv[0][i];
    const bool good = codec.levels < 0 ? std::isfinite(got) && std::fabs(got) <= p * kInputMax / div
                                       : std::fabs(got - exact) <= bound;
    if (!good) {
      ADD_FAILURE() << what << ": element " << i << " is " << got << ", the exact result " << exact << " (bound "
                    << bound << ")";
      return false;
    }
  }
  return true;
}

TEST(Soak, MixedCollectivesCheckedWithoutLeaks) {
  const size_t calls = EnvSize("GCCL_SOAK_CALLS", 300), max_bytes = EnvSize("GCCL_SOAK_MAX_BYTES", 256 << 10);
  const size_t warmup = std::min<size_t>(500, calls / 4);
#ifdef __GLIBC__
  // A fixed mmap threshold: glibc otherwise raises it to the largest block freed
  // (up to 32 MiB), and the test's own buffers then stay resident in its heaps.
  mallopt(M_MMAP_THRESHOLD, 128 << 10);
#endif
  gh::ScopedEnv timeout("GCCL_TIMEOUT_MS", "60000");
  std::thread([] {}).join();  // runtimes that start a thread of their own with the first one (TSan) have now
  const int fds0 = OpenFds(), threads0 = Threads();
  size_t rss_warm = 0, rss_end = 0, failures = 0;
  {
    Soak soak;
    ASSERT_TRUE(soak.ok()) << gcclGetLastError(nullptr);
    std::mt19937_64 rng(20261205);
    auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
    const Coll kColls[] = {Coll::AllReduce, Coll::AllGather, Coll::ReduceScatter, Coll::Broadcast, Coll::Reduce};
    for (size_t call = 0; call < calls && failures < 5; ++call) {
      if (call == warmup) rss_warm = ResidentBytes();
      // First the largest size on every set: a dense call, then every codec.
      const size_t per_set = 1 + kNumCodecs;
      const bool warming = call < kNumSets * per_set;
      const int set = warming ? static_cast<int>(call / per_set) : static_cast<int>(pick(kNumSets));
      const enum Launch how = static_cast<enum Launch>(pick(4));
      const bool compressed = warming ? call % per_set != 0 : pick(3) == 0;
      // log-uniform bytes in [1, max_bytes], and now and then none at all
      size_t bytes = warming ? max_bytes
                             : static_cast<size_t>(std::exp(std::log(static_cast<double>(max_bytes)) *
                                                            static_cast<double>(rng() % 1000001) / 1e6));
      if (!warming && pick(20) == 0) bytes = 0;
      const bool inplace = pick(2) == 0;
      const uint64_t seed = gh::Mix64(call + 1);
      if (compressed) {
        const CodecSpec& codec = warming ? kCodecs[call % per_set - 1] : kCodecs[pick(kNumCodecs)];
        const size_t n = bytes / sizeof(float);
        const gcclRedOp_t op = pick(2) ? gcclSum : gcclAvg;
        const std::string what = "call " + std::to_string(call) + ": " + kSets[set].name + " AllReduceCompressed " +
                                 codec.spec + " count=" + std::to_string(n) + (inplace ? " in place" : "") +
                                 " launch " + std::to_string(static_cast<int>(how));
        if (!CompressedCall(soak, set, how, codec, n, op, inplace, seed, what)) ++failures;
        continue;
      }
      Case c;
      c.p = kRanks;
      c.coll = warming ? Coll::AllGather : kColls[pick(5)];
      c.dt = warming ? gcclFloat64 : gh::kAllTypes[pick(sizeof gh::kAllTypes / sizeof gh::kAllTypes[0])];
      c.op = gh::kAllOps[pick(sizeof gh::kAllOps / sizeof gh::kAllOps[0])];
      c.root = static_cast<int>(pick(kRanks));
      c.inplace = inplace;
      c.seed = seed;
      c.count = bytes / gh::TypeSize(c.dt);
      if (c.coll == Coll::AllGather || c.coll == Coll::ReduceScatter) c.count /= kRanks;  // p counts travel
      CasePlan plan(c);
      std::vector<gcclResult_t> res =
          soak.Run(how, set, [&](int r, gcclComm_t comm, gcclStream_t s) { return plan.Issue(r, comm, s); });
      SCOPED_TRACE("call " + std::to_string(call) + ": " + kSets[set].name + ", launch " +
                   std::to_string(static_cast<int>(how)));
      if (!plan.Check(res)) ++failures;
    }
    rss_end = ResidentBytes();
  }
  EXPECT_EQ(failures, 0u);
  const int fds1 = OpenFds(), threads1 = Threads();
  std::printf(
      "soak: %zu calls of up to %zu bytes on %d ranks, %zu failed; resident %.1f MiB after %zu calls, "
      "%.1f MiB at the end; descriptors %d -> %d, threads %d -> %d\n",
      calls, max_bytes, kRanks, failures, rss_warm / 1048576.0, warmup, rss_end / 1048576.0, fds0, fds1, threads0,
      threads1);
  EXPECT_EQ(fds1, fds0) << "file descriptors leaked";
  EXPECT_EQ(threads1, threads0) << "threads leaked";
  if (kSanitized)
    std::printf("soak: resident memory not compared (a sanitizer's allocator keeps freed memory)\n");
  else
    EXPECT_LE(static_cast<double>(rss_end), 1.05 * static_cast<double>(rss_warm))
        << "resident memory grew by more than 5% after the warm-up";
}

}  // namespace
