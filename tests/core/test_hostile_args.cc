// test_hostile_args.cc — every public function of gccl.h and gccl_sim.h against
// every class of bad argument: NULL, zero, negative, counts whose byte size wraps,
// misaligned pointers, partially overlapping buffers, destroyed, aborted, made-up
// and wrong-kind handles, and calls on a communicator whose peer aborted.
//
// One row per (function, bad argument). Each must return its documented code, say
// in gcclGetLastError which function and what was wrong, write no byte of any
// buffer, and leave the live communicator, stream and compressor working. A
// header scan checks that no public function is missing. ctest runs the table a
// second time under valgrind (hostile_args_valgrind), which must report nothing.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "core/harness.h"
#include "gccl.h"
#include "gccl_sim.h"

#ifndef GCCL_SOURCE_DIR
#error "tests/CMakeLists.txt defines GCCL_SOURCE_DIR (the header scan reads include/)"
#endif

namespace {

using gh::MentionsAny;

constexpr size_t kCompCount = 16;  // the compressors' tensor

// Datatypes and ops travel through the table as int: a C++ variable of enum type
// must not hold a value outside the enum (UBSan checks), so bad values are cast
// only where they are passed to gccl.
gcclDataType_t Dt(int t) {
  return static_cast<gcclDataType_t>(t);
}
gcclRedOp_t Op(int op) {
  return static_cast<gcclRedOp_t>(op);
}
constexpr size_t kMemBytes = 4096;

// Everything the rows call with. Built once for the suite; the rows only read it.
struct World {
  gcclComm_t live = nullptr;       // one rank, healthy
  gcclComm_t destroyed = nullptr;  // gcclCommDestroy'd (the handle's value only)
  gcclComm_t aborted = nullptr;    // gcclCommAbort'ed
  gcclComm_t pair[2] = {};         // pair[1] aborted: pair[0] is in an error state
  gcclStream_t stream = nullptr, dead_stream = nullptr;
  gcclCompressor_t comp = nullptr, comp_noef = nullptr, dead_comp = nullptr;
  size_t bound = 0;                          // gcclEncodeBound(comp)
  alignas(64) unsigned char mem[kMemBytes];  // every buffer a row passes lies here
  alignas(64) unsigned char frame[1024];     // a valid frame of comp, frame_bytes long
  size_t frame_bytes = 0;
  int made_up = 0;  // its address is a handle nothing created

  gcclComm_t broken() const { return pair[0]; }
  float* f(size_t elem) { return reinterpret_cast<float*>(mem) + elem; }
  void* odd(size_t byte) { return mem + byte; }  // not aligned to 4 when byte % 4 != 0
  template <typename T>
  T fake() {
    return reinterpret_cast<T>(&made_up);
  }
};

World* g_world = nullptr;

void BuildWorld(World& w) {
  gcclUniqueId id;
  ASSERT_EQ(gcclGetUniqueId(&id), gcclSuccess);
  ASSERT_EQ(gcclCommInitRank(&w.live, 1, id, 0), gcclSuccess) << gcclGetLastError(nullptr);
  ASSERT_EQ(gcclGetUniqueId(&id), gcclSuccess);
  ASSERT_EQ(gcclCommInitRank(&w.destroyed, 1, id, 0), gcclSuccess);
  ASSERT_EQ(gcclCommDestroy(w.destroyed), gcclSuccess);
  ASSERT_EQ(gcclGetUniqueId(&id), gcclSuccess);
  ASSERT_EQ(gcclCommInitRank(&w.aborted, 1, id, 0), gcclSuccess);
  ASSERT_EQ(gcclCommAbort(w.aborted), gcclSuccess);
  ASSERT_EQ(gcclCommInitAll(w.pair, 2), gcclSuccess);
  ASSERT_EQ(gcclCommAbort(w.pair[1]), gcclSuccess);
  ASSERT_EQ(gcclStreamCreate(&w.stream), gcclSuccess);
  ASSERT_EQ(gcclStreamCreate(&w.dead_stream), gcclSuccess);
  ASSERT_EQ(gcclStreamDestroy(w.dead_stream), gcclSuccess);
  ASSERT_EQ(gcclCompressorCreate(&w.comp, "topk:ratio=0.25,ef=1", kCompCount, gcclFloat32), gcclSuccess);
  ASSERT_EQ(gcclCompressorCreate(&w.comp_noef, "uniform:bits=8,ef=0", kCompCount, gcclFloat32), gcclSuccess);
  ASSERT_EQ(gcclCompressorCreate(&w.dead_comp, "sign", kCompCount, gcclFloat32), gcclSuccess);
  ASSERT_EQ(gcclCompressorDestroy(w.dead_comp), gcclSuccess);
  ASSERT_EQ(gcclEncodeBound(w.comp, &w.bound), gcclSuccess);
  ASSERT_LE(w.bound, sizeof w.frame);
  float x[kCompCount];
  for (size_t i = 0; i < kCompCount; ++i) x[i] = static_cast<float>(i) - 7.0f;
  // A frame of a compressor without residual, so comp's residual stays zero.
  gcclCompressor_t once = nullptr;
  ASSERT_EQ(gcclCompressorCreate(&once, "topk:ratio=0.25", kCompCount, gcclFloat32), gcclSuccess);
  ASSERT_EQ(gcclEncode(once, x, w.frame, sizeof w.frame, &w.frame_bytes), gcclSuccess);
  ASSERT_EQ(gcclCompressorDestroy(once), gcclSuccess);
  for (size_t i = 0; i < kMemBytes; ++i) w.mem[i] = static_cast<unsigned char>(i * 37 + 11);
}

void TearDownWorld(World& w) {
  EXPECT_EQ(gcclCompressorDestroy(w.comp), gcclSuccess);
  EXPECT_EQ(gcclCompressorDestroy(w.comp_noef), gcclSuccess);
  EXPECT_EQ(gcclStreamDestroy(w.stream), gcclSuccess);
  EXPECT_EQ(gcclCommDestroy(w.pair[0]), gcclSuccess);
  EXPECT_EQ(gcclCommDestroy(w.live), gcclSuccess);
}

// ---- the table ------------------------------------------------------------------------

struct Row {
  std::string fn;   // the public function
  std::string cls;  // the bad argument
  std::function<gcclResult_t(World&)> call;
  gcclResult_t want;
  std::vector<std::string> words;  // the message names one of these (and fn)
};

// Functions that take a communicator, called with otherwise good arguments.
struct CommFn {
  const char* fn;
  std::function<gcclResult_t(World&, gcclComm_t)> call;
  bool collective;  // runs on the communicator (an error state refuses it)
};

std::vector<CommFn> CommFns() {
  return {
      {"gcclCommDestroy", [](World&, gcclComm_t c) { return gcclCommDestroy(c); }, false},
      {"gcclCommAbort", [](World&, gcclComm_t c) { return gcclCommAbort(c); }, false},
      {"gcclCommCount",
       [](World&, gcclComm_t c) {
         int n;
         return gcclCommCount(c, &n);
       },
       false},
      {"gcclCommUserRank",
       [](World&, gcclComm_t c) {
         int r;
         return gcclCommUserRank(c, &r);
       },
       false},
      {"gcclCommGetAsyncError",
       [](World&, gcclComm_t c) {
         gcclResult_t e;
         return gcclCommGetAsyncError(c, &e);
       },
       false},
      {"gcclCommSimTime",
       [](World&, gcclComm_t c) {
         double s;
         return gcclCommSimTime(c, &s);
       },
       false},
      {"gcclCommSimBytesSent",
       [](World&, gcclComm_t c) {
         uint64_t b;
         return gcclCommSimBytesSent(c, &b);
       },
       false},
      {"gcclCommSimInterNodeBytesSent",
       [](World&, gcclComm_t c) {
         uint64_t b;
         return gcclCommSimInterNodeBytesSent(c, &b);
       },
       false},
      {"gcclAllReduce",
       [](World& w, gcclComm_t c) { return gcclAllReduce(w.f(0), w.f(64), 8, gcclFloat32, gcclSum, c, nullptr); },
       true},
      {"gcclAllGather",
       [](World& w, gcclComm_t c) { return gcclAllGather(w.f(0), w.f(64), 8, gcclFloat32, c, nullptr); }, true},
      {"gcclReduceScatter",
       [](World& w, gcclComm_t c) { return gcclReduceScatter(w.f(0), w.f(64), 8, gcclFloat32, gcclSum, c, nullptr); },
       true},
      {"gcclBroadcast",
       [](World& w, gcclComm_t c) { return gcclBroadcast(w.f(0), w.f(64), 8, gcclFloat32, 0, c, nullptr); }, true},
      {"gcclReduce",
       [](World& w, gcclComm_t c) { return gcclReduce(w.f(0), w.f(64), 8, gcclFloat32, gcclSum, 0, c, nullptr); },
       true},
      {"gcclAllReduceCompressed",
       [](World& w, gcclComm_t c) {
         return gcclAllReduceCompressed(w.f(0), w.f(64), kCompCount, gcclFloat32, gcclSum, w.comp, c, nullptr);
       },
       true},
      {"gcclAllGatherCompressed",
       [](World& w, gcclComm_t c) {
         return gcclAllGatherCompressed(w.f(0), w.f(64), kCompCount, gcclFloat32, w.comp, c, nullptr);
       },
       true},
      {"gcclReduceScatterCompressed",
       [](World& w, gcclComm_t c) {
         // comp serves nranks * recvcount elements: 16 on one rank, 2 * 8 on the pair.
         int n = 1;
         if (gcclCommCount(c, &n) != gcclSuccess) n = 1;
         return gcclReduceScatterCompressed(w.f(0), w.f(64), kCompCount / static_cast<size_t>(n), gcclFloat32, gcclSum,
                                            w.comp, c, nullptr);
       },
       true},
  };
}

// A dense collective with every argument chosen by the row.
struct Dense {
  const char* fn;
  std::function<gcclResult_t(const void*, void*, size_t, int, int, int, gcclComm_t, gcclStream_t)> call;
  bool has_op, has_root;
};

std::vector<Dense> DenseFns() {
  return {
      {"gcclAllReduce",
       [](const void* s, void* r, size_t n, int t, int op, int, gcclComm_t c, gcclStream_t st) {
         return gcclAllReduce(s, r, n, Dt(t), Op(op), c, st);
       },
       true, false},
      {"gcclAllGather",
       [](const void* s, void* r, size_t n, int t, int, int, gcclComm_t c, gcclStream_t st) {
         return gcclAllGather(s, r, n, Dt(t), c, st);
       },
       false, false},
      {"gcclReduceScatter",
       [](const void* s, void* r, size_t n, int t, int op, int, gcclComm_t c, gcclStream_t st) {
         return gcclReduceScatter(s, r, n, Dt(t), Op(op), c, st);
       },
       true, false},
      {"gcclBroadcast",
       [](const void* s, void* r, size_t n, int t, int, int root, gcclComm_t c, gcclStream_t st) {
         return gcclBroadcast(s, r, n, Dt(t), root, c, st);
       },
       false, true},
      {"gcclReduce",
       [](const void* s, void* r, size_t n, int t, int op, int root, gcclComm_t c, gcclStream_t st) {
         return gcclReduce(s, r, n, Dt(t), Op(op), root, c, st);
       },
       true, true},
  };
}

// The compressed collectives, likewise (comp and count chosen by the row).
struct Compressed {
  const char* fn;
  std::function<gcclResult_t(const void*, void*, size_t, int, int, gcclCompressor_t, gcclComm_t, gcclStream_t)> call;
};

std::vector<Compressed> CompressedFns() {
  return {
      {"gcclAllReduceCompressed",
       [](const void* s, void* r, size_t n, int t, int op, gcclCompressor_t k, gcclComm_t c, gcclStream_t st) {
         return gcclAllReduceCompressed(s, r, n, Dt(t), Op(op), k, c, st);
       }},
      {"gcclAllGatherCompressed", [](const void* s, void* r, size_t n, int t, int, gcclCompressor_t k, gcclComm_t c,
                                     gcclStream_t st) { return gcclAllGatherCompressed(s, r, n, Dt(t), k, c, st); }},
      {"gcclReduceScatterCompressed",
       [](const void* s, void* r, size_t n, int t, int op, gcclCompressor_t k, gcclComm_t c, gcclStream_t st) {
         return gcclReduceScatterCompressed(s, r, n, Dt(t), Op(op), k, c, st);
       }},
  };
}

std::vector<Row> BuildRows() {
  std::vector<Row> rows;
  auto add = [&](std::string fn, std::string cls, std::function<gcclResult_t(World&)> call, gcclResult_t want,
                 std::vector<std::string> words) {
    rows.push_back({std::move(fn), std::move(cls), std::move(call), want, std::move(words)});
  };
  const gcclResult_t IA = gcclInvalidArgument, IU = gcclInvalidUsage, CD = gcclCorruptData;

  // ---- results, version, last error (never fail; must not crash on any input)
  for (int code : {-1, static_cast<int>(gcclNumResults), INT_MIN, INT_MAX})
    add("gcclGetErrorString", "code " + std::to_string(code),
        [code](World&) {
          const char* s = gcclGetErrorString(static_cast<gcclResult_t>(code));
          return s != nullptr && std::strlen(s) > 0 ? gcclSuccess : gcclInternalError;
        },
        gcclSuccess, {});
  const std::vector<std::pair<std::string, std::function<gcclComm_t(World&)>>> not_live = {
      {"destroyed comm", [](World& w) { return w.destroyed; }},
      {"aborted comm", [](World& w) { return w.aborted; }},
      {"made-up comm", [](World& w) { return w.fake<gcclComm_t>(); }},
      {"a stream as comm", [](World& w) { return reinterpret_cast<gcclComm_t>(w.stream); }},
  };
  for (const auto& nl : not_live)
    add("gcclGetLastError", nl.first,
        [get = nl.second](World& w) {
          // Falls back to the thread's text: set it, then ask through the dead handle.
          gcclGetVersion(nullptr);
          const std::string thread_text = gcclGetLastError(nullptr);
          const char* s = gcclGetLastError(get(w));
          return s != nullptr && thread_text == s ? gcclSuccess : gcclInternalError;
        },
        gcclSuccess, {});
  add("gcclGetVersion", "NULL version", [](World&) { return gcclGetVersion(nullptr); }, IA, {"version"});

  // ---- creation
  add("gcclGetUniqueId", "NULL id", [](World&) { return gcclGetUniqueId(nullptr); }, IA, {"id"});
  auto init_rank = [](gcclComm_t* out, int nranks, int rank, bool good_id) {
    gcclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (good_id && gcclGetUniqueId(&id) != gcclSuccess) return gcclInternalError;
    return gcclCommInitRank(out, nranks, id, rank);
  };
  add("gcclCommInitRank", "NULL comm", [=](World&) { return init_rank(nullptr, 1, 0, true); }, IA, {"comm"});
  for (int n : {0, -1, INT_MIN, 4097, INT_MAX})
    add("gcclCommInitRank", "nranks " + std::to_string(n),
        [=](World&) {
          gcclComm_t c = reinterpret_cast<gcclComm_t>(uintptr_t{1});
          gcclResult_t r = init_rank(&c, n, 0, true);
          return c == nullptr ? r : gcclInternalError;  // *comm is NULL on error
        },
        IA, {"nranks"});
  for (int rank : {-1, 2, INT_MIN, INT_MAX})
    add("gcclCommInitRank", "rank " + std::to_string(rank) + " of 2",
        [=](World&) {
          gcclComm_t c = reinterpret_cast<gcclComm_t>(uintptr_t{1});
          gcclResult_t r = init_rank(&c, 2, rank, true);
          return c == nullptr ? r : gcclInternalError;
        },
        IA, {"rank"});
  add("gcclCommInitRank", "zeroed id",
      [=](World&) {
        gcclComm_t c = reinterpret_cast<gcclComm_t>(uintptr_t{1});
        gcclResult_t r = init_rank(&c, 1, 0, false);
        return c == nullptr ? r : gcclInternalError;
      },
      IA, {"id"});
  add("gcclCommInitAll", "NULL comms", [](World&) { return gcclCommInitAll(nullptr, 2); }, IA, {"comms"});
  for (int n : {0, -5, INT_MIN, 4097, INT_MAX})
    add("gcclCommInitAll", "nranks " + std::to_string(n),
        [=](World&) {
          gcclComm_t c[2] = {reinterpret_cast<gcclComm_t>(uintptr_t{1}), nullptr};
          return gcclCommInitAll(c, n);
        },
        IA, {"nranks"});

  // ---- every function that takes a communicator, with a bad one
  for (const CommFn& cf : CommFns()) {
    add(cf.fn, "NULL comm", [call = cf.call](World& w) { return call(w, nullptr); }, IA, {"comm"});
    for (const auto& nl : not_live)
      add(cf.fn, nl.first, [call = cf.call, get = nl.second](World& w) { return call(w, get(w)); }, IA,
          {"not a live communicator"});
    if (cf.collective)  // a call after the peer's abort: refused by the error state
      add(cf.fn, "comm whose peer aborted", [call = cf.call](World& w) { return call(w, w.broken()); }, IU,
          {"error state"});
  }
  // Queries answer on a communicator in an error state; they name the error.
  add("gcclCommGetAsyncError", "comm whose peer aborted",
      [](World& w) {
        gcclResult_t e = gcclSuccess;
        gcclResult_t r = gcclCommGetAsyncError(w.broken(), &e);
        return r == gcclSuccess && e == gcclRemoteError ? gcclSuccess : gcclInternalError;
      },
      gcclSuccess, {});
  add("gcclCommCount", "NULL count", [](World& w) { return gcclCommCount(w.live, nullptr); }, IA, {"count"});
  add("gcclCommUserRank", "NULL rank", [](World& w) { return gcclCommUserRank(w.live, nullptr); }, IA, {"rank"});
  add("gcclCommGetAsyncError", "NULL asyncError", [](World& w) { return gcclCommGetAsyncError(w.live, nullptr); }, IA,
      {"asyncError"});
  add("gcclCommSimTime", "NULL seconds", [](World& w) { return gcclCommSimTime(w.live, nullptr); }, IA, {"NULL"});
  add("gcclCommSimBytesSent", "NULL bytes", [](World& w) { return gcclCommSimBytesSent(w.live, nullptr); }, IA,
      {"NULL"});
  add("gcclCommSimInterNodeBytesSent", "NULL bytes",
      [](World& w) { return gcclCommSimInterNodeBytesSent(w.live, nullptr); }, IA, {"NULL"});
  add("gcclCommSimTime", "comm without the link model",
      [](World& w) {
        double s;
        return gcclCommSimTime(w.live, &s);
      },
      IU, {"link model"});
  add("gcclCommSimBytesSent", "comm without the link model",
      [](World& w) {
        uint64_t b;
        return gcclCommSimBytesSent(w.live, &b);
      },
      IU, {"link model"});
  add("gcclCommSimInterNodeBytesSent", "comm without the link model",
      [](World& w) {
        uint64_t b;
        return gcclCommSimInterNodeBytesSent(w.live, &b);
      },
      IU, {"link model"});

  // ---- dense collectives, on the live one-rank communicator
  for (const Dense& d : DenseFns()) {
    auto c = d.call;
    add(d.fn, "NULL sendbuff",
        [c](World& w) { return c(nullptr, w.f(64), 4, gcclFloat32, gcclSum, 0, w.live, nullptr); }, IA, {"sendbuff"});
    add(d.fn, "NULL recvbuff",
        [c](World& w) { return c(w.f(0), nullptr, 4, gcclFloat32, gcclSum, 0, w.live, nullptr); }, IA, {"recvbuff"});
    for (int t : {-1, static_cast<int>(gcclNumTypes), INT_MAX})
      add(d.fn, "datatype " + std::to_string(t),
          [c, t](World& w) { return c(w.f(0), w.f(64), 4, t, gcclSum, 0, w.live, nullptr); }, IA, {"datatype"});
    add(d.fn, "bad datatype and count 0",
        [c](World& w) { return c(w.f(0), w.f(64), 0, -1, gcclSum, 0, w.live, nullptr); }, IA, {"datatype"});
    if (d.has_op)
      for (int op : {-1, static_cast<int>(gcclNumOps), INT_MIN})
        add(d.fn, "op " + std::to_string(op),
            [c, op](World& w) { return c(w.f(0), w.f(64), 4, gcclFloat32, op, 0, w.live, nullptr); }, IA, {"op"});
    if (d.has_root)
      for (int root : {-1, 1, INT_MIN, INT_MAX})
        add(d.fn, "root " + std::to_string(root),
            [c, root](World& w) { return c(w.f(0), w.f(64), 4, gcclFloat32, gcclSum, root, w.live, nullptr); }, IA,
            {"root"});
    // 2^62 floats are exactly 2^64 bytes: the byte size wraps to 0.
    for (size_t n : {SIZE_MAX, SIZE_MAX / 4 + 1, SIZE_MAX / 2})
      add(d.fn, "count " + std::to_string(n),
          [c, n](World& w) { return c(w.f(0), w.f(64), n, gcclFloat32, gcclSum, 0, w.live, nullptr); }, IA, {"count"});
    add(d.fn, "count 2^61 of float64 (wraps to 0 bytes)",
        [c](World& w) { return c(w.f(0), w.f(64), size_t{1} << 61, gcclFloat64, gcclSum, 0, w.live, nullptr); }, IA,
        {"count"});
    add(d.fn, "misaligned sendbuff",
        [c](World& w) { return c(w.odd(1), w.f(64), 4, gcclFloat32, gcclSum, 0, w.live, nullptr); }, IA,
        {"sendbuff", "aligned"});
    add(d.fn, "misaligned recvbuff",
        [c](World& w) { return c(w.f(0), w.odd(258), 4, gcclFloat32, gcclSum, 0, w.live, nullptr); }, IA,
        {"recvbuff", "aligned"});
    add(d.fn, "misaligned float64 (aligned to 4)",
        [c](World& w) { return c(w.f(1), w.f(64), 4, gcclFloat64, gcclSum, 0, w.live, nullptr); }, IA, {"aligned"});
    add(d.fn, "partial overlap",
        [c](World& w) { return c(w.f(0), w.f(1), 8, gcclFloat32, gcclSum, 0, w.live, nullptr); }, IA, {"overlap"});
    add(d.fn, "partial overlap, recv first",
        [c](World& w) { return c(w.f(7), w.f(0), 8, gcclFloat32, gcclSum, 0, w.live, nullptr); }, IA, {"overlap"});
    add(d.fn, "destroyed stream",
        [c](World& w) { return c(w.f(0), w.f(64), 4, gcclFloat32, gcclSum, 0, w.live, w.dead_stream); }, IA,
        {"stream"});
    add(d.fn, "made-up stream",
        [c](World& w) { return c(w.f(0), w.f(64), 4, gcclFloat32, gcclSum, 0, w.live, w.fake<gcclStream_t>()); }, IA,
        {"stream"});
    add(d.fn, "a comm as stream",
        [c](World& w) {
          return c(w.f(0), w.f(64), 4, gcclFloat32, gcclSum, 0, w.live, reinterpret_cast<gcclStream_t>(w.live));
        },
        IA, {"stream"});
  }

  // ---- compressed collectives
  for (const Compressed& k : CompressedFns()) {
    auto c = k.call;
    add(k.fn, "NULL compressor",
        [c](World& w) { return c(w.f(0), w.f(64), kCompCount, gcclFloat32, gcclSum, nullptr, w.live, nullptr); }, IA,
        {"compressor"});
    add(k.fn, "destroyed compressor",
        [c](World& w) { return c(w.f(0), w.f(64), kCompCount, gcclFloat32, gcclSum, w.dead_comp, w.live, nullptr); },
        IA, {"not a live compressor"});
    add(k.fn, "made-up compressor",
        [c](World& w) {
          return c(w.f(0), w.f(64), kCompCount, gcclFloat32, gcclSum, w.fake<gcclCompressor_t>(), w.live, nullptr);
        },
        IA, {"not a live compressor"});
    add(k.fn, "a comm as compressor",
        [c](World& w) {
          return c(w.f(0), w.f(64), kCompCount, gcclFloat32, gcclSum, reinterpret_cast<gcclCompressor_t>(w.live),
                   w.live, nullptr);
        },
        IA, {"not a live compressor"});
    add(k.fn, "compressor of another count",
        [c](World& w) { return c(w.f(0), w.f(64), kCompCount - 1, gcclFloat32, gcclSum, w.comp, w.live, nullptr); }, IA,
        {"elements"});
    add(k.fn, "compressor of another datatype",
        [c](World& w) { return c(w.f(0), w.f(64), kCompCount, gcclFloat64, gcclSum, w.comp, w.live, nullptr); }, IA,
        {"float32", "float64"});
    add(k.fn, "NULL sendbuff",
        [c](World& w) { return c(nullptr, w.f(64), kCompCount, gcclFloat32, gcclSum, w.comp, w.live, nullptr); }, IA,
        {"sendbuff"});
    add(k.fn, "misaligned sendbuff",
        [c](World& w) { return c(w.odd(2), w.f(64), kCompCount, gcclFloat32, gcclSum, w.comp, w.live, nullptr); }, IA,
        {"aligned"});
    add(k.fn, "partial overlap",
        [c](World& w) { return c(w.f(0), w.f(3), kCompCount, gcclFloat32, gcclSum, w.comp, w.live, nullptr); }, IA,
        {"overlap"});
    add(k.fn, "count SIZE_MAX",
        [c](World& w) { return c(w.f(0), w.f(64), SIZE_MAX, gcclFloat32, gcclSum, w.comp, w.live, nullptr); }, IA,
        {"count"});
    add(k.fn, "datatype -1",
        [c](World& w) { return c(w.f(0), w.f(64), kCompCount, -1, gcclSum, w.comp, w.live, nullptr); }, IA,
        {"datatype"});
    add(k.fn, "destroyed stream",
        [c](World& w) { return c(w.f(0), w.f(64), kCompCount, gcclFloat32, gcclSum, w.comp, w.live, w.dead_stream); },
        IA, {"stream"});
    if (k.fn != std::string("gcclAllGatherCompressed")) {
      add(k.fn, "op max",
          [c](World& w) { return c(w.f(0), w.f(64), kCompCount, gcclFloat32, gcclMax, w.comp, w.live, nullptr); }, IA,
          {"sum or avg"});
      add(k.fn, "op -1",
          [c](World& w) { return c(w.f(0), w.f(64), kCompCount, gcclFloat32, -1, w.comp, w.live, nullptr); }, IA,
          {"op"});
    }
  }

  // ---- streams and groups
  add("gcclStreamCreate", "NULL stream", [](World&) { return gcclStreamCreate(nullptr); }, IA, {"stream"});
  const std::vector<std::pair<std::string, std::function<gcclStream_t(World&)>>> bad_streams = {
      {"NULL stream", [](World&) { return gcclStream_t{nullptr}; }},
      {"destroyed stream", [](World& w) { return w.dead_stream; }},
      {"made-up stream", [](World& w) { return w.fake<gcclStream_t>(); }},
      {"a comm as stream", [](World& w) { return reinterpret_cast<gcclStream_t>(w.live); }},
  };
  for (const auto& bs : bad_streams) {
    add("gcclStreamSynchronize", bs.first, [get = bs.second](World& w) { return gcclStreamSynchronize(get(w)); }, IA,
        {"stream"});
    add("gcclStreamDestroy", bs.first, [get = bs.second](World& w) { return gcclStreamDestroy(get(w)); }, IA,
        {"stream"});
  }
  add("gcclGroupStart", "an empty group (zero calls)",
      [](World&) {
        gcclResult_t r = gcclGroupStart();
        gcclResult_t e = gcclGroupEnd();
        return r == gcclSuccess ? e : r;
      },
      gcclSuccess, {});
  add("gcclGroupEnd", "without gcclGroupStart", [](World&) { return gcclGroupEnd(); }, IU, {"gcclGroupStart"});
  add("gcclGroupEnd", "a recorded call's comm destroyed",
      [](World& w) {
        gcclUniqueId id;
        gcclComm_t tmp = nullptr;
        if (gcclGetUniqueId(&id) != gcclSuccess || gcclCommInitRank(&tmp, 1, id, 0) != gcclSuccess)
          return gcclInternalError;
        gcclGroupStart();
        gcclResult_t rec = gcclAllReduce(w.f(0), w.f(64), 4, gcclFloat32, gcclSum, tmp, nullptr);
        gcclCommDestroy(tmp);
        gcclResult_t end = gcclGroupEnd();
        return rec == gcclSuccess ? end : gcclInternalError;
      },
      IA, {"destroyed"});
  add("gcclGroupEnd", "a recorded call's stream destroyed",
      [](World& w) {
        gcclStream_t s = nullptr;
        if (gcclStreamCreate(&s) != gcclSuccess) return gcclInternalError;
        gcclGroupStart();
        gcclResult_t rec = gcclAllReduce(w.f(0), w.f(64), 4, gcclFloat32, gcclSum, w.live, s);
        gcclStreamDestroy(s);
        gcclResult_t end = gcclGroupEnd();
        return rec == gcclSuccess ? end : gcclInternalError;
      },
      IA, {"destroyed"});

  // ---- compressors
  add("gcclCompressorCreate", "NULL compressor",
      [](World&) { return gcclCompressorCreate(nullptr, "sign", 4, gcclFloat32); }, IA, {"compressor"});
  struct BadCreate {
    const char* cls;
    const char* spec;
    size_t count;
    int dt;
    std::vector<std::string> words;
  };
  const BadCreate creates[] = {
      {"NULL spec", nullptr, 4, gcclFloat32, {"spec"}},
      {"empty spec", "", 4, gcclFloat32, {"codec", "spec"}},
      {"unknown codec", "zip", 4, gcclFloat32, {"codec", "zip"}},
      {"unknown key", "topk:speed=3", 4, gcclFloat32, {"speed", "key"}},
      {"ratio 0", "topk:ratio=0", 4, gcclFloat32, {"ratio"}},
      {"ratio negative", "topk:ratio=-0.5", 4, gcclFloat32, {"ratio"}},
      {"bits 0", "uniform:bits=0", 4, gcclFloat32, {"bits"}},
      {"bits overflowing", "uniform:bits=99999999999999999999", 4, gcclFloat32, {"bits"}},
      {"datatype -1", "sign", 4, -1, {"datatype"}},
      {"datatype gcclNumTypes", "sign", 4, gcclNumTypes, {"datatype"}},
      {"count SIZE_MAX", "sign", SIZE_MAX, gcclFloat32, {"count"}},
      {"count SIZE_MAX / 4 + 1 (wraps in bytes)", "fp16", SIZE_MAX / 4 + 1, gcclFloat32, {"count"}},
      {"lossy codec on int32", "topk:ratio=0.5", 4, gcclInt32, {"int32", "floating"}},
  };
  for (const BadCreate& b : creates)
    add(
        "gcclCompressorCreate", b.cls,
        [b](World&) {
          gcclCompressor_t c = reinterpret_cast<gcclCompressor_t>(uintptr_t{1});
          gcclResult_t r = gcclCompressorCreate(&c, b.spec, b.count, Dt(b.dt));
          return c == nullptr ? r : gcclInternalError;  // *c is NULL on error
        },
        IA, b.words);
  const std::vector<std::pair<std::string, std::function<gcclCompressor_t(World&)>>> bad_comps = {
      {"NULL compressor", [](World&) { return gcclCompressor_t{nullptr}; }},
      {"destroyed compressor", [](World& w) { return w.dead_comp; }},
      {"made-up compressor", [](World& w) { return w.fake<gcclCompressor_t>(); }},
      {"a stream as compressor", [](World& w) { return reinterpret_cast<gcclCompressor_t>(w.stream); }},
  };
  for (const auto& bc : bad_comps) {
    auto get = bc.second;
    add("gcclCompressorDestroy", bc.first, [get](World& w) { return gcclCompressorDestroy(get(w)); }, IA,
        {"compressor"});
    add("gcclCompressorGetResidual", bc.first, [get](World& w) { return gcclCompressorGetResidual(get(w), w.f(0)); },
        IA, {"compressor"});
    add("gcclCompressorSetResidual", bc.first, [get](World& w) { return gcclCompressorSetResidual(get(w), w.f(0)); },
        IA, {"compressor"});
    add("gcclCompressorGetState", bc.first,
        [get](World& w) {
          size_t b;
          return gcclCompressorGetState(get(w), nullptr, 0, &b);
        },
        IA, {"compressor"});
    add("gcclCompressorSetState", bc.first, [get](World& w) { return gcclCompressorSetState(get(w), w.f(0), 0); }, IA,
        {"compressor"});
    add("gcclEncodeBound", bc.first,
        [get](World& w) {
          size_t b;
          return gcclEncodeBound(get(w), &b);
        },
        IA, {"compressor"});
    add("gcclEncodeBoundNonFinite", bc.first,
        [get](World& w) {
          size_t b;
          return gcclEncodeBoundNonFinite(get(w), 0, &b);
        },
        IA, {"compressor"});
    add("gcclEncode", bc.first,
        [get](World& w) {
          size_t fb;
          return gcclEncode(get(w), w.f(0), w.f(64), 1024, &fb);
        },
        IA, {"compressor"});
    add("gcclPowerSgdShape", bc.first,
        [get](World& w) {
          size_t a, b, c;
          return gcclPowerSgdShape(get(w), &a, &b, &c);
        },
        IA, {"compressor"});
    add("gcclPowerSgdComputeP", bc.first, [get](World& w) { return gcclPowerSgdComputeP(get(w), w.f(0), w.f(64)); },
        IA, {"compressor"});
    add("gcclPowerSgdComputeQ", bc.first, [get](World& w) { return gcclPowerSgdComputeQ(get(w), w.f(0), w.f(64)); },
        IA, {"compressor"});
    add("gcclPowerSgdComputeOutput", bc.first,
        [get](World& w) { return gcclPowerSgdComputeOutput(get(w), w.f(0), w.f(64), 1, gcclSum); }, IA, {"compressor"});
  }
  // the steps of a compressor of another codec (PowerSgdSteps tests the rest, with BLAS)
  add("gcclPowerSgdShape", "a top-k compressor",
      [](World& w) {
        size_t a, b, c;
        return gcclPowerSgdShape(w.comp, &a, &b, &c);
      },
      IA, {"not powersgd"});
  add("gcclPowerSgdComputeP", "a top-k compressor",
      [](World& w) { return gcclPowerSgdComputeP(w.comp, w.f(0), w.f(64)); }, IA, {"not powersgd"});
  add("gcclPowerSgdComputeQ", "a top-k compressor",
      [](World& w) { return gcclPowerSgdComputeQ(w.comp, w.f(0), w.f(64)); }, IA, {"not powersgd"});
  add("gcclPowerSgdComputeOutput", "a top-k compressor",
      [](World& w) { return gcclPowerSgdComputeOutput(w.comp, w.f(0), w.f(64), 1, gcclSum); }, IA, {"not powersgd"});
  add("gcclCompressorGetState", "NULL stateBytes",
      [](World& w) { return gcclCompressorGetState(w.comp, nullptr, 0, nullptr); }, IA, {"stateBytes"});
  add("gcclCompressorSetState", "bytes the compressor does not carry",
      [](World& w) { return gcclCompressorSetState(w.comp, w.f(0), 4); }, IA, {"carries"});
  add("gcclCompressorSetState", "SIZE_MAX bytes",
      [](World& w) { return gcclCompressorSetState(w.comp, w.f(0), SIZE_MAX); }, IA, {"carries"});
  add("gcclCompressorGetResidual", "NULL out", [](World& w) { return gcclCompressorGetResidual(w.comp, nullptr); }, IA,
      {"out"});
  add("gcclCompressorGetResidual", "misaligned out",
      [](World& w) { return gcclCompressorGetResidual(w.comp, w.odd(3)); }, IA, {"aligned"});
  add("gcclCompressorSetResidual", "NULL in", [](World& w) { return gcclCompressorSetResidual(w.comp, nullptr); }, IA,
      {"in"});
  add("gcclCompressorSetResidual", "misaligned in",
      [](World& w) { return gcclCompressorSetResidual(w.comp, w.odd(6)); }, IA, {"aligned"});
  add("gcclCompressorSetResidual", "a NaN in the residual",
      [](World& w) {
        float r[kCompCount] = {};
        r[5] = std::nanf("");
        return gcclCompressorSetResidual(w.comp, r);
      },
      IA, {"finite"});
  add("gcclCompressorSetResidual", "compressor without residual (ef=0)",
      [](World& w) {
        float r[kCompCount] = {};
        return gcclCompressorSetResidual(w.comp_noef, r);
      },
      IU, {"ef=0", "residual"});
  add("gcclEncodeBound", "NULL maxBytes", [](World& w) { return gcclEncodeBound(w.comp, nullptr); }, IA, {"maxBytes"});
  add("gcclEncodeBoundNonFinite", "NULL maxBytes",
      [](World& w) { return gcclEncodeBoundNonFinite(w.comp, 3, nullptr); }, IA, {"maxBytes"});
  add("gcclEncode", "NULL src",
      [](World& w) {
        size_t fb;
        return gcclEncode(w.comp, nullptr, w.f(64), 1024, &fb);
      },
      IA, {"src"});
  add("gcclEncode", "NULL frame",
      [](World& w) {
        size_t fb;
        return gcclEncode(w.comp, w.f(0), nullptr, 1024, &fb);
      },
      IA, {"frame"});
  add("gcclEncode", "NULL frameBytes", [](World& w) { return gcclEncode(w.comp, w.f(0), w.f(64), 1024, nullptr); }, IA,
      {"frameBytes"});
  add("gcclEncode", "misaligned src",
      [](World& w) {
        size_t fb;
        return gcclEncode(w.comp, w.odd(1), w.f(64), 1024, &fb);
      },
      IA, {"aligned"});
  add("gcclEncode", "cap 0",
      [](World& w) {
        size_t fb;
        return gcclEncode(w.comp, w.f(0), w.f(64), 0, &fb);
      },
      IA, {"cap"});
  add("gcclEncode", "cap one below the bound",
      [](World& w) {
        size_t fb;
        return gcclEncode(w.comp, w.f(0), w.f(64), w.bound - 1, &fb);
      },
      IA, {"cap"});
  add("gcclEncode", "src and frame overlap",
      [](World& w) {
        size_t fb;
        return gcclEncode(w.comp, w.f(0), w.f(8), 1024, &fb);
      },
      IA, {"overlap"});
  add("gcclDecodeAccumulate", "NULL frame",
      [](World& w) { return gcclDecodeAccumulate(nullptr, 100, w.f(0), kCompCount, gcclFloat32); }, IA, {"frame"});
  add("gcclDecodeAccumulate", "NULL dst",
      [](World& w) { return gcclDecodeAccumulate(w.frame, w.frame_bytes, nullptr, kCompCount, gcclFloat32); }, IA,
      {"dst"});
  add("gcclDecodeAccumulate", "misaligned dst",
      [](World& w) { return gcclDecodeAccumulate(w.frame, w.frame_bytes, w.odd(2), kCompCount, gcclFloat32); }, IA,
      {"aligned"});
  add("gcclDecodeAccumulate", "datatype -1",
      [](World& w) { return gcclDecodeAccumulate(w.frame, w.frame_bytes, w.f(0), kCompCount, Dt(-1)); }, IA,
      {"datatype"});
  add("gcclDecodeAccumulate", "count SIZE_MAX",
      [](World& w) { return gcclDecodeAccumulate(w.frame, w.frame_bytes, w.f(0), SIZE_MAX, gcclFloat32); }, IA,
      {"count"});
  add("gcclDecodeAccumulate", "frame and dst overlap",
      [](World& w) {
        alignas(64) unsigned char copy[sizeof w.frame];
        std::memcpy(copy, w.frame, sizeof copy);
        gcclResult_t r = gcclDecodeAccumulate(copy, w.frame_bytes, copy + 8, kCompCount, gcclFloat32);
        return std::memcmp(copy, w.frame, sizeof copy) == 0 ? r : gcclInternalError;  // nothing written
      },
      IA, {"overlap"});
  add("gcclDecodeAccumulate", "frameBytes 0",
      [](World& w) { return gcclDecodeAccumulate(w.frame, 0, w.f(0), kCompCount, gcclFloat32); }, CD, {"frame"});
  add("gcclDecodeAccumulate", "frame cut short by a byte",
      [](World& w) { return gcclDecodeAccumulate(w.frame, w.frame_bytes - 1, w.f(0), kCompCount, gcclFloat32); }, CD,
      {"frame", "bytes"});
  add("gcclDecodeAccumulate", "count other than the frame's",
      [](World& w) { return gcclDecodeAccumulate(w.frame, w.frame_bytes, w.f(0), kCompCount - 1, gcclFloat32); }, CD,
      {"elements"});
  add("gcclDecodeAccumulate", "datatype other than the frame's",
      [](World& w) { return gcclDecodeAccumulate(w.frame, w.frame_bytes, w.f(0), kCompCount, gcclFloat64); }, CD,
      {"float64"});
  return rows;
}

const std::vector<Row>& Rows() {
  static const std::vector<Row> rows = BuildRows();
  return rows;
}

// ---- running a row ---------------------------------------------------------------------

class HostileArgs : public ::testing::TestWithParam<size_t> {
 public:
  static void SetUpTestSuite() {
    g_world = new World();
    BuildWorld(*g_world);
  }
  static void TearDownTestSuite() {
    TearDownWorld(*g_world);
    delete g_world;
    g_world = nullptr;
  }
};

// The live handles still work after a row: a one-rank allreduce and a compressed one.
void ExpectWorldUsable(World& w) {
  float in[kCompCount], out[kCompCount];
  for (size_t i = 0; i < kCompCount; ++i) in[i] = static_cast<float>(i), out[i] = -1;
  ASSERT_EQ(gcclAllReduce(in, out, kCompCount, gcclFloat32, gcclSum, w.live, w.stream), gcclSuccess)
      << gcclGetLastError(w.live);
  ASSERT_EQ(gcclStreamSynchronize(w.stream), gcclSuccess);
  for (size_t i = 0; i < kCompCount; ++i) ASSERT_EQ(out[i], in[i]);
  size_t b = 0;
  ASSERT_EQ(gcclEncodeBound(w.comp, &b), gcclSuccess);
  EXPECT_EQ(b, w.bound);
  float resid[kCompCount];
  ASSERT_EQ(gcclCompressorGetResidual(w.comp, resid), gcclSuccess);
  for (float r : resid) ASSERT_EQ(r, 0.0f) << "a rejected call changed the residual";
  int n = 0;
  ASSERT_EQ(gcclCommCount(w.live, &n), gcclSuccess);
  EXPECT_EQ(n, 1);
}

TEST_P(HostileArgs, ReturnsTheDocumentedErrorAndChangesNothing) {
  ASSERT_NE(g_world, nullptr);
  World& w = *g_world;
  const Row& row = Rows()[GetParam()];
  SCOPED_TRACE(row.fn + " with " + row.cls);
  const std::vector<unsigned char> before(w.mem, w.mem + kMemBytes);
  const std::vector<unsigned char> frame_before(w.frame, w.frame + sizeof w.frame);
  const gcclResult_t got = row.call(w);
  EXPECT_EQ(got, row.want) << "returned " << gcclGetErrorString(got) << " (" << gcclGetLastError(nullptr) << ")";
  if (row.want != gcclSuccess) {
    const std::string text = gcclGetLastError(nullptr);
    EXPECT_TRUE(MentionsAny(text.c_str(), {row.fn})) << "the message does not name the function";
    EXPECT_TRUE(MentionsAny(text.c_str(), row.words)) << "the message does not say what was wrong";
  }
  EXPECT_TRUE(gh::SameBytes(w.mem, before.data(), kMemBytes)) << "a rejected call wrote to a buffer";
  EXPECT_TRUE(gh::SameBytes(w.frame, frame_before.data(), sizeof w.frame)) << "a rejected call changed the frame";
  ExpectWorldUsable(w);
}

std::string RowName(const ::testing::TestParamInfo<size_t>& info) {
  const Row& r = Rows()[info.param];
  std::string name = r.fn + "_" + r.cls;
  for (char& ch : name)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return name + "_" + std::to_string(info.param);
}

std::vector<size_t> RowIndices() {
  std::vector<size_t> v(Rows().size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = i;
  return v;
}

INSTANTIATE_TEST_SUITE_P(Table, HostileArgs, ::testing::ValuesIn(RowIndices()), RowName);

// ---- nothing public is missing ----------------------------------------------------------

// Public functions that need MPI, CUDA or NCCL: their hostile arguments are tested
// where those are set up.
const std::map<std::string, std::string> kTestedElsewhere = {
    {"gcclCommInitMpi", "tests/mpi/test_errors_mpi.c"},
    {"gcclCommInitNccl", "tests/cuda/test_nccl_comm.cc"},
    {"gcclStreamCreateCuda", "tests/cuda/test_device_buffers.cc"},
    {"gcclStreamGetCuda", "tests/cuda/test_device_buffers.cc"},
    {"gcclEncodeCuda", "tests/cuda/test_device_codec.cc"},
    {"gcclDecodeAccumulateCuda", "tests/cuda/test_device_codec.cc"},
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(HostileArgsCoverage, EveryPublicFunctionHasRows) {
  std::set<std::string> in_table;
  for (const Row& r : Rows()) in_table.insert(r.fn);
  std::set<std::string> declared;
  const std::regex api(R"(GCCL_API\s+[A-Za-z_][A-Za-z_0-9\s\*]*?\b(gccl[A-Za-z0-9]+)\s*\()");
  for (const char* h : {"gccl.h", "gccl_sim.h", "gccl_mpi.h", "gccl_cuda.h", "gccl_nccl.h"}) {
    const std::string text = ReadFile(std::string(GCCL_SOURCE_DIR) + "/include/" + h);
    ASSERT_FALSE(text.empty()) << "cannot read include/" << h;
    for (std::sregex_iterator it(text.begin(), text.end(), api), end; it != end; ++it) declared.insert((*it)[1]);
  }
  EXPECT_GE(declared.size(), 38u) << "the header scan found too few functions: the pattern is broken";
  for (const std::string& fn : declared) {
    if (in_table.count(fn)) continue;
    auto other = kTestedElsewhere.find(fn);
    if (other == kTestedElsewhere.end()) {
      ADD_FAILURE() << fn << " is public but has no row in the hostile-arguments table";
      continue;
    }
    const std::string test = ReadFile(std::string(GCCL_SOURCE_DIR) + "/" + other->second);
    EXPECT_NE(test.find(fn), std::string::npos) << other->second << " does not test " << fn;
  }
  for (const std::string& fn : in_table) EXPECT_TRUE(declared.count(fn)) << fn << " has rows but is not public";
}

// ---- stale handles stay stale --------------------------------------------------------------

// Destroyed objects are quarantined: the next communicators, streams and
// compressors never reuse a destroyed one's address, so its stale handle keeps
// failing instead of naming a new object.
TEST(HostileArgsStale, NewObjectsDoNotTakeADestroyedOnesAddress) {
  std::vector<gcclComm_t> dead;
  std::vector<gcclComm_t> alive;
  for (int i = 0; i < 20; ++i) {
    gcclUniqueId id;
    gcclComm_t c = nullptr;
    ASSERT_EQ(gcclGetUniqueId(&id), gcclSuccess);
    ASSERT_EQ(gcclCommInitRank(&c, 1, id, 0), gcclSuccess);
    for (gcclComm_t d : dead) ASSERT_NE(c, d) << "a new communicator took a destroyed one's address";
    if (i % 2) {
      ASSERT_EQ(gcclCommDestroy(c), gcclSuccess);
      dead.push_back(c);
    } else {
      alive.push_back(c);
    }
  }
  for (gcclComm_t d : dead) {
    int n = -1;
    EXPECT_EQ(gcclCommCount(d, &n), gcclInvalidArgument);
    EXPECT_EQ(n, -1);
  }
  for (gcclComm_t c : alive) EXPECT_EQ(gcclCommDestroy(c), gcclSuccess);
  for (gcclComm_t c : alive) EXPECT_EQ(gcclCommDestroy(c), gcclInvalidArgument) << "destroyed twice";

  std::vector<gcclCompressor_t> dead_comps;
  for (int i = 0; i < 20; ++i) {
    gcclCompressor_t c = nullptr;
    ASSERT_EQ(gcclCompressorCreate(&c, "sign", 8, gcclFloat32), gcclSuccess);
    for (gcclCompressor_t d : dead_comps) ASSERT_NE(c, d) << "a new compressor took a destroyed one's address";
    ASSERT_EQ(gcclCompressorDestroy(c), gcclSuccess);
    dead_comps.push_back(c);
    EXPECT_EQ(gcclCompressorDestroy(c), gcclInvalidArgument) << "destroyed twice";
  }
  std::vector<gcclStream_t> dead_streams;
  for (int i = 0; i < 8; ++i) {
    gcclStream_t s = nullptr;
    ASSERT_EQ(gcclStreamCreate(&s), gcclSuccess);
    for (gcclStream_t d : dead_streams) ASSERT_NE(s, d) << "a new stream took a destroyed one's address";
    ASSERT_EQ(gcclStreamDestroy(s), gcclSuccess);
    dead_streams.push_back(s);
    EXPECT_EQ(gcclStreamSynchronize(s), gcclInvalidArgument);
  }
}

}  // namespace
