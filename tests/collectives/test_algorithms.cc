// test_algorithms.cc — the message-passing schedules (ring, rhd, tree, split) driven
// directly over the local transport, one thread per rank, without the public API.
//
// Inputs are small integers, so every reduction order gives the exact result and
// each rank's output must equal the reference bit for bit (and hence every other
// rank's). Non-integer floats check bit-identity across ranks and runs on their own.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

extern "C" {
#include "collectives/algorithms.h"
#include "common/dtype.h"
#include "transport/local.h"
}

namespace {

using AlgoFn = gcclResult_t (*)(struct coll_ctx*, const struct coll_args*);
using Bytes = std::vector<unsigned char>;

constexpr int64_t kTimeoutMs = 30000;    // a schedule bug shows up as gcclTimeout, not a hang
constexpr size_t kSmallScratch = 4096;   // forces many segments
constexpr unsigned char kPoison = 0xA5;  // fills outputs before a call

// Runs body(ctx) on p threads, one local-transport endpoint and one scratch each
// (malloc'ed, as a communicator's is); returns every rank's result.
std::vector<gcclResult_t> RunRanks(int p, size_t scratch_bytes, int64_t timeout_ms,
                                   const std::function<gcclResult_t(struct coll_ctx*)>& body) {
  std::vector<gcclResult_t> res(p, gcclInternalError);
  struct local_world* w = nullptr;
  if (local_world_create(&w, p) != gcclSuccess) return res;
  std::vector<struct transport*> tps(p, nullptr);
  for (int r = 0; r < p; r++)
    if (local_transport_create(&tps[r], w, r, timeout_ms) != gcclSuccess) return res;
  std::vector<std::thread> threads;
  for (int r = 0; r < p; r++) {
    threads.emplace_back([&, r] {
      void* scratch = std::malloc(scratch_bytes);
      struct coll_ctx ctx = {tps[r],  r, p,       scratch, scratch_bytes, nullptr, nullptr, p,
                             nullptr, 0, nullptr, {},      nullptr,       0};
      res[r] = body(&ctx);
      if (res[r] != gcclSuccess) tps[r]->ops->cancel_all(tps[r]);
      std::free(scratch);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < p; r++) tps[r]->ops->destroy(tps[r]);
  local_world_unref(w);
  return res;
}

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool IsInt(gcclDataType_t dt) {
  return dt == gcclInt8 || dt == gcclInt32;
}

// Rank `rank`'s input element i, chosen so that every partial result is exact in
// dt: sums stay within +-24 (int8 sums wrap on purpose), float products are +-2^k
// with k <= 8, integer products wrap in int8.
int64_t Input(gcclRedOp_t op, gcclDataType_t dt, int rank, size_t i) {
  uint64_t h = Mix((uint64_t)rank << 40 ^ (uint64_t)i ^ (uint64_t)op << 56);
  switch (op) {
    case gcclProd: {
      static const int kFloat[] = {-2, -1, 1, 2};
      static const int kInt[] = {-5, -4, -3, -2, -1, 1, 2, 3, 4, 5};
      return IsInt(dt) ? kInt[h % 10] : kFloat[h % 4];
    }
    case gcclMax:
    case gcclMin:
      return (int64_t)(h % 201) - 100;
    default:  // sum, avg
      return dt == gcclInt8 ? (int64_t)(h % 256) - 128 : (int64_t)(h % 7) - 3;
  }
}

int64_t Combine(gcclRedOp_t op, int64_t a, int64_t b) {
  switch (op) {
    case gcclProd:
      return a * b;
    case gcclMax:
      return a > b ? a : b;
    case gcclMin:
      return a < b ? a : b;
    default:
      return a + b;
  }
}

// Stores integer v as element i of dt (integers wrap, as the kernels' do).
void Store(gcclDataType_t dt, unsigned char* buf, size_t i, int64_t v) {
  switch (dt) {
    case gcclInt8: {
      int8_t x = (int8_t)(uint8_t)(uint64_t)v;
      std::memcpy(buf + i, &x, 1);
      break;
    }
    case gcclInt32: {
      int32_t x = (int32_t)(uint32_t)(uint64_t)v;
      std::memcpy(buf + 4 * i, &x, 4);
      break;
    }
    case gcclFloat32: {
      float x = (float)v;
      std::memcpy(buf + 4 * i, &x, 4);
      break;
    }
    case gcclFloat64: {
      double x = (double)v;
      std::memcpy(buf + 8 * i, &x, 8);
      break;
    }
    case gcclFloat16: {
      uint16_t x = float_to_half((float)v);
      std::memcpy(buf + 2 * i, &x, 2);
      break;
    }
    case gcclBfloat16: {
      uint16_t x = float_to_bf16((float)v);
      std::memcpy(buf + 2 * i, &x, 2);
      break;
    }
    default:
      ADD_FAILURE() << "no test encoding for datatype " << dt;
  }
}

// Inputs and references are prefixes of arrays of kMaxElems elements (element i
// of rank r's input does not depend on the count), built once and shared by every
// call: generating them per call would cost more than the collectives. They live
// in read-only pages, and out-of-place calls get them as sendbuff: an algorithm
// that writes to its input crashes the test at once.
constexpr size_t kMaxElems = 100003;

const unsigned char* Frozen(const Bytes& b) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = (b.size() + page - 1) / page * page;
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) std::abort();
  std::memcpy(m, b.data(), b.size());
  mprotect(m, bytes, PROT_READ);
  return static_cast<const unsigned char*>(m);
}

const unsigned char* CachedInput(gcclRedOp_t op, gcclDataType_t dt, int rank) {
  static std::map<std::tuple<int, int, int>, const unsigned char*> cache;
  const unsigned char*& frozen = cache[{op, dt, rank}];
  if (!frozen) {
    Bytes b(kMaxElems * dtype_size(dt));
    for (size_t i = 0; i < kMaxElems; i++) Store(dt, b.data(), i, Input(op, dt, rank, i));
    frozen = Frozen(b);
  }
  return frozen;
}

// The exact reduction over ranks 0..p-1, folded in int64 and then stored in dt.
const unsigned char* CachedReduced(gcclRedOp_t op, gcclDataType_t dt, int p) {
  static std::map<std::tuple<int, int, int>, const unsigned char*> cache;
  const unsigned char*& frozen = cache[{op, dt, p}];
  if (!frozen) {
    std::vector<int64_t> acc(kMaxElems);
    for (int r = 0; r < p; r++)
      for (size_t i = 0; i < kMaxElems; i++) {
        int64_t v = Input(op, dt, r, i);
        acc[i] = r == 0 ? v : Combine(op, acc[i], v);
      }
    Bytes b(kMaxElems * dtype_size(dt));
    for (size_t i = 0; i < kMaxElems; i++) Store(dt, b.data(), i, acc[i]);
    frozen = Frozen(b);
  }
  return frozen;
}

const gcclDataType_t kTypes[] = {gcclFloat32, gcclFloat64, gcclInt32, gcclInt8, gcclFloat16, gcclBfloat16};
const gcclRedOp_t kOps[] = {gcclSum, gcclProd, gcclMax, gcclMin};

struct Case {
  enum coll_kind kind;
  AlgoFn fn;
  const char* algo;
  gcclDataType_t dt;
  gcclRedOp_t op;
  int p;
  size_t count;
  bool in_place;
  int root;
  size_t scratch_bytes;

  std::string Name() const {
    return std::string(coll_kind_str()) + "/" + algo + " " + dtype_name(dt) + " " + op_name(op) +
           " p=" + std::to_string(p) + " count=" + std::to_string(count) + (in_place ? " in-place" : " out-of-place") +
           " root=" + std::to_string(root) + " scratch=" + std::to_string(scratch_bytes);
  }
  const char* coll_kind_str() const {
    static const char* const kNames[] = {"allreduce", "allgather", "reducescatter", "broadcast", "reduce"};
    return kNames[kind];
  }
};

// Compares got with want; on a mismatch reports the first differing element.
bool SameBytes(const Case& c, const char* what, int rank, const unsigned char* got, const unsigned char* want,
               size_t bytes) {
  if (bytes == 0 || std::memcmp(got, want, bytes) == 0) return true;
  size_t es = dtype_size(c.dt), i = 0;
  while (std::memcmp(got + i * es, want + i * es, es) == 0) i++;
  auto hex = [es](const unsigned char* p) {
    char s[40] = "";
    for (size_t k = 0; k < es; k++) std::snprintf(s + 2 * k, 3, "%02x", p[es - 1 - k]);
    return std::string(s);
  };
  ADD_FAILURE() << c.Name() << ": rank " << rank << " " << what << " element " << i << " is 0x" << hex(got + i * es)
                << ", want 0x" << hex(want + i * es);
  return false;
}

// One call on every rank: its buffers, then its check against the references.
struct Prepared {
  Case c;
  std::vector<const unsigned char*> input;  // per rank, read-only
  const unsigned char* reduced = nullptr;   // the exact reduction of all inputs
  std::vector<Bytes> buf;                   // in place: the one buffer per rank
  std::vector<Bytes> out;                   // out of place: recvbuff
  std::vector<struct coll_args> args;       // per rank
  std::vector<gcclResult_t> res;            // per rank

  bool Reducing() const { return c.kind == COLL_ALLREDUCE || c.kind == COLL_REDUCESCATTER || c.kind == COLL_REDUCE; }
  size_t InElems() const { return c.kind == COLL_REDUCESCATTER ? (size_t)c.p * c.count : c.count; }
  size_t OutElems() const { return c.kind == COLL_ALLGATHER ? (size_t)c.p * c.count : c.count; }

  explicit Prepared(const Case& cs) : c(cs), input(c.p), buf(c.p), out(c.p), args(c.p), res(c.p, gcclInternalError) {
    const size_t es = dtype_size(c.dt), n = c.count, in_elems = InElems(), out_elems = OutElems();
    for (int r = 0; r < c.p; r++) input[r] = CachedInput(c.op, c.dt, r);
    if (Reducing()) reduced = CachedReduced(c.op, c.dt, c.p);
    // Buffers as a user would pass them; outputs start as a poison pattern.
    for (int r = 0; r < c.p; r++) {
      struct coll_args& a = args[r];
      a = coll_call(c.kind, nullptr, nullptr, n, c.dt, c.op, c.root);
      if (n == 0) continue;  // buffers may be NULL for count 0
      const size_t mine = (size_t)r * n * es;
      const bool root = r == c.root;
      if (c.in_place) {
        buf[r].assign(std::max(in_elems, out_elems) * es, kPoison);
        if (c.kind == COLL_ALLGATHER) {
          std::memcpy(buf[r].data() + mine, input[r], n * es);
          a.sendbuff = buf[r].data() + mine;
          a.recvbuff = buf[r].data();
        } else {
          std::memcpy(buf[r].data(), input[r], in_elems * es);
          a.sendbuff = buf[r].data();
          a.recvbuff = buf[r].data() + (c.kind == COLL_REDUCESCATTER ? mine : 0);
        }
      } else {
        out[r].assign(out_elems * es, kPoison);
        a.sendbuff = (c.kind == COLL_BROADCAST && !root) ? nullptr : input[r];
        a.recvbuff = (c.kind == COLL_REDUCE && !root) ? nullptr : out[r].data();
      }
    }
  }

  // Checks rank r's buffer (in place) or output (out of place) piece by piece.
  bool CheckRank(int r) const {
    const size_t es = dtype_size(c.dt), n = c.count, slot = n * es, mine = (size_t)r * slot;
    const unsigned char* got = c.in_place ? buf[r].data() : out[r].data();
    const char* what = c.in_place ? "buffer" : "output";
    switch (c.kind) {
      case COLL_ALLREDUCE:
        return SameBytes(c, what, r, got, reduced, slot);
      case COLL_REDUCE:
        if (r == c.root) return SameBytes(c, what, r, got, reduced, slot);
        return !c.in_place || SameBytes(c, what, r, got, input[r], slot);  // never written
      case COLL_BROADCAST:
        return SameBytes(c, what, r, got, input[c.root], slot);
      case COLL_ALLGATHER:
        for (int q = 0; q < c.p; q++)
          if (!SameBytes(c, what, r, got + (size_t)q * slot, input[q], slot)) return false;
        return true;
      case COLL_REDUCESCATTER:
        if (!c.in_place) return SameBytes(c, what, r, got, reduced + mine, slot);
        // in place, the other slots of the input stay as they were
        return SameBytes(c, what, r, got, input[r], mine) && SameBytes(c, what, r, got + mine, reduced + mine, slot) &&
               SameBytes(c, what, r, got + mine + slot, input[r] + mine + slot, InElems() * es - mine - slot);
      default:
        return false;
    }
  }

  bool Check() const {
    for (int r = 0; r < c.p; r++) {
      if (res[r] != gcclSuccess) {
        ADD_FAILURE() << c.Name() << ": rank " << r << " returned " << gcclGetErrorString(res[r]);
        return false;
      }
      if (c.count > 0 && !CheckRank(r)) return false;
    }
    return true;
  }
};

// Runs a batch of calls (same p and scratch) in one world, one after another on every
// rank, as an application would; then checks each. Returns the number that failed.
int RunBatch(const std::vector<Case>& cases) {
  if (cases.empty()) return 0;
  std::vector<std::unique_ptr<Prepared>> calls;
  for (const Case& c : cases) calls.push_back(std::make_unique<Prepared>(c));
  RunRanks(cases[0].p, cases[0].scratch_bytes, kTimeoutMs, [&](struct coll_ctx* ctx) {
    for (auto& call : calls) {
      gcclResult_t res = call->c.fn(ctx, &call->args[ctx->rank]);
      call->res[ctx->rank] = res;
      if (res != gcclSuccess) return res;  // later calls would not match up
    }
    return gcclSuccess;
  });
  int failures = 0;
  for (auto& call : calls) failures += !call->Check();
  return failures;
}

// Counts every algorithm must handle at p ranks (empty, fewer than p, uneven, large).
std::set<size_t> Counts(int p) {
  return {0, 1, 2, 3, 7, (size_t)p - 1, (size_t)p + 1, 1000, 100003};
}

// The sweep for one algorithm: p = 1..8, every count, type and op, in and out of
// place. To stay within seconds, the largest count takes every op on float32 and
// int8 but only sum on other types; reducescatter's and allgather's per-rank count
// there is 100003/p, so the whole vector has ~100003 elements as for the others.
void Sweep(enum coll_kind kind, AlgoFn fn, const char* algo) {
  const bool reducing = kind == COLL_ALLREDUCE || kind == COLL_REDUCESCATTER || kind == COLL_REDUCE;
  const bool rooted = kind == COLL_BROADCAST || kind == COLL_REDUCE;
  const bool slotted = kind == COLL_REDUCESCATTER || kind == COLL_ALLGATHER;
  int failures = 0;
  for (int p = 1; p <= 8; p++)
    for (int root : rooted ? std::set<int>{0, p / 2, p - 1} : std::set<int>{0})
      for (size_t count : Counts(p)) {
        const bool big = count > 1000;
        if (big && slotted) count = count / (size_t)p;
        if (big && rooted && root != 0) continue;
        // Small scratch: many segments at count 1000; an odd size for the largest
        // count, so that its segments divide nothing evenly.
        const size_t scratch = big ? 16 * kSmallScratch + 24 : kSmallScratch;
        std::vector<Case> batch;
        for (gcclDataType_t dt : kTypes)
          for (gcclRedOp_t op : kOps) {
            if (!reducing && op != gcclSum) continue;
            if (big && op != gcclSum && dt != gcclFloat32 && dt != gcclInt8) continue;
            for (bool in_place : {false, true})
              batch.push_back(Case{kind, fn, algo, dt, op, p, count, in_place, root, scratch});
          }
        failures += RunBatch(batch);
        if (failures >= 5) {
          ADD_FAILURE() << "stopping " << algo << " after 5 failing calls";
          return;
        }
      }
}

TEST(AlgorithmsAllReduce, RingMatchesExactReference) {
  Sweep(COLL_ALLREDUCE, allreduce_ring, "ring");
}
TEST(AlgorithmsAllReduce, RhdMatchesExactReference) {
  Sweep(COLL_ALLREDUCE, allreduce_rhd, "rhd");
}
TEST(AlgorithmsAllReduce, SplitMatchesExactReference) {
  Sweep(COLL_ALLREDUCE, allreduce_split, "split");
}
TEST(AlgorithmsAllReduce, TreeMatchesExactReference) {
  Sweep(COLL_ALLREDUCE, allreduce_tree, "tree");
}
TEST(AlgorithmsReduceScatter, RingMatchesExactReference) {
  Sweep(COLL_REDUCESCATTER, reducescatter_ring, "ring");
}
TEST(AlgorithmsAllGather, RingMatchesExactReference) {
  Sweep(COLL_ALLGATHER, allgather_ring, "ring");
}
TEST(AlgorithmsBroadcast, TreeMatchesExactReference) {
  Sweep(COLL_BROADCAST, broadcast_tree, "tree");
}
TEST(AlgorithmsReduce, TreeMatchesExactReference) {
  Sweep(COLL_REDUCE, reduce_tree, "tree");
}

// gcclAvg reduces exactly as gcclSum: the division is the caller's.
TEST(AlgorithmsAllReduce, AvgSumsWithoutDividing) {
  for (AlgoFn fn : {allreduce_ring, allreduce_rhd, allreduce_tree, allreduce_split})
    for (int p : {3, 4}) {
      std::vector<std::vector<float>> out(p, std::vector<float>(5));
      float in[5] = {1, 2, 3, 4, 5};
      auto res = RunRanks(p, kSmallScratch, kTimeoutMs, [&](struct coll_ctx* ctx) {
        struct coll_args a = coll_call(COLL_ALLREDUCE, in, out[ctx->rank].data(), 5, gcclFloat32, gcclAvg, 0);
        return fn(ctx, &a);
      });
      for (int r = 0; r < p; r++) {
        ASSERT_EQ(res[r], gcclSuccess);
        for (int i = 0; i < 5; i++) EXPECT_EQ(out[r][i], in[i] * (float)p);
      }
    }
}

// Non-integer floats: the sum depends on the order of additions, yet every rank must
// hold the same bits, and a second run must reproduce them.
TEST(AlgorithmsAllReduce, RandomFloatsBitIdenticalAcrossRanksAndRuns) {
  const size_t n = 30011;
  struct Algo {
    AlgoFn fn;
    const char* name;
  };
  for (Algo algo : {Algo{allreduce_ring, "ring"}, Algo{allreduce_rhd, "rhd"}, Algo{allreduce_tree, "tree"},
                    Algo{allreduce_split, "split"}})
    for (int p : {3, 5, 6, 8}) {
      std::vector<std::vector<float>> in(p, std::vector<float>(n));
      for (int r = 0; r < p; r++)
        for (size_t i = 0; i < n; i++) in[r][i] = (float)((double)(Mix(r * n + i) >> 11) * 0x1p-53 * 2 - 1);
      std::vector<std::vector<float>> first;
      for (int run = 0; run < 2; run++) {
        std::vector<std::vector<float>> out(p, std::vector<float>(n));
        auto res = RunRanks(p, kSmallScratch, kTimeoutMs, [&](struct coll_ctx* ctx) {
          struct coll_args a =
              coll_call(COLL_ALLREDUCE, in[ctx->rank].data(), out[ctx->rank].data(), n, gcclFloat32, gcclSum, 0);
          return algo.fn(ctx, &a);
        });
        for (int r = 0; r < p; r++) {
          ASSERT_EQ(res[r], gcclSuccess) << algo.name << " p=" << p;
          EXPECT_EQ(0, std::memcmp(out[r].data(), out[0].data(), n * sizeof(float)))
              << algo.name << " p=" << p << ": rank " << r << " differs from rank 0";
        }
        if (run == 0)
          first = out;
        else
          EXPECT_EQ(0, std::memcmp(out[0].data(), first[0].data(), n * sizeof(float))) << algo.name << " p=" << p;
      }
    }
}

// With the production scratch, a vector of 3 Mi floats still takes several segments.
TEST(AlgorithmsAllReduce, ProductionScratchLargeVector) {
  const size_t n = (size_t)3 << 20;
  struct Algo {
    AlgoFn fn;
    const char* name;
  };
  for (Algo algo : {Algo{allreduce_ring, "ring"}, Algo{allreduce_rhd, "rhd"}, Algo{allreduce_tree, "tree"},
                    Algo{allreduce_split, "split"}}) {
    const int p = 3;
    std::vector<std::vector<int32_t>> in(p, std::vector<int32_t>(n)), out(p, std::vector<int32_t>(n));
    for (int r = 0; r < p; r++)
      for (size_t i = 0; i < n; i++) in[r][i] = (int32_t)(i * 7 + (size_t)r);
    auto res = RunRanks(p, COLL_SCRATCH_BYTES, kTimeoutMs, [&](struct coll_ctx* ctx) {
      struct coll_args a =
          coll_call(COLL_ALLREDUCE, in[ctx->rank].data(), out[ctx->rank].data(), n, gcclInt32, gcclSum, 0);
      return algo.fn(ctx, &a);
    });
    for (int r = 0; r < p; r++) {
      ASSERT_EQ(res[r], gcclSuccess) << algo.name;
      size_t bad = 0;
      for (size_t i = 0; i < n; i++) bad += out[r][i] != (int32_t)(i * 21 + 3);
      EXPECT_EQ(bad, 0u) << algo.name << ": rank " << r;
    }
  }
}

// A peer that never calls: the others fail with gcclTimeout (not a hang), and an
// out-of-place call leaves sendbuff as it was.
TEST(AlgorithmsErrors, MissingPeerTimesOutAndLeavesSendbuffUnchanged) {
  const size_t n = 4099;
  struct Algo {
    AlgoFn fn;
    const char* name;
  };
  for (Algo algo : {Algo{allreduce_ring, "ring"}, Algo{allreduce_rhd, "rhd"}, Algo{allreduce_tree, "tree"},
                    Algo{allreduce_split, "split"}}) {
    const int p = 3;
    std::vector<std::vector<float>> in(p, std::vector<float>(n, 1.5f)), out(p, std::vector<float>(n));
    auto start = std::chrono::steady_clock::now();
    auto res = RunRanks(p, kSmallScratch, 200, [&](struct coll_ctx* ctx) {
      if (ctx->rank == 2) return gcclSuccess;  // never arrives
      struct coll_args a =
          coll_call(COLL_ALLREDUCE, in[ctx->rank].data(), out[ctx->rank].data(), n, gcclFloat32, gcclSum, 0);
      return algo.fn(ctx, &a);
    });
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(s, 5.0) << algo.name;
    for (int r = 0; r < 2; r++) {
      EXPECT_TRUE(res[r] == gcclTimeout || res[r] == gcclRemoteError)
          << algo.name << ": rank " << r << " returned " << gcclGetErrorString(res[r]);
      for (size_t i = 0; i < n; i++) ASSERT_EQ(in[r][i], 1.5f) << algo.name << ": sendbuff changed";
    }
  }
}

}  // namespace
