// harness.h — helpers for multi-rank tests of the public API: run code on p thread
// ranks, keep a team of communicators alive across many cases, and compute exact
// reference results for every collective, datatype and op.
//
// The first part (ScopedEnv, RunRanks, RankTeam) depends only on gccl.h and the C++
// standard library: copy it to drive gccl from threads in your own program.
// The second part (Case, CasePlan) builds inputs whose reductions are exact in every
// datatype, so that results can be compared bit for bit; it reports with GoogleTest.
#ifndef GCCL_TESTS_CORE_HARNESS_H
#define GCCL_TESTS_CORE_HARNESS_H

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "gccl.h"

namespace gh {

// ===================================================================== //
// Part 1: running ranks                                                   //
// ===================================================================== //

// Sets (value != NULL) or unsets an environment variable for the lifetime of the
// object, then restores what was there. gccl reads GCCL_* when a communicator is
// created, so hold one of these around the creation only.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* old = std::getenv(name);
    if (old != nullptr) {
      had_old_ = true;
      old_ = old;
    }
    if (value != nullptr)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_old_)
      setenv(name_.c_str(), old_.c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::string old_;
  bool had_old_ = false;
};

// Runs body(rank, comm) on p threads, one per rank: gcclGetUniqueId once, then each
// thread gcclCommInitRank(&comm, p, id, rank), body, gcclCommDestroy. Returns the
// first failure of init or destroy (the body reports its own results).
template <class Body>
gcclResult_t RunRanks(int p, Body&& body) {
  gcclUniqueId id;
  gcclResult_t res = gcclGetUniqueId(&id);
  if (res != gcclSuccess) return res;
  std::vector<gcclResult_t> results(static_cast<size_t>(p), gcclSuccess);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < p; ++rank) {
    threads.emplace_back([&, rank] {
      gcclComm_t comm = nullptr;
      gcclResult_t r = gcclCommInitRank(&comm, p, id, rank);
      if (r == gcclSuccess) {
        body(rank, comm);
        r = gcclCommDestroy(comm);
      }
      results[static_cast<size_t>(rank)] = r;
    });
  }
  for (auto& t : threads) t.join();
  for (gcclResult_t r : results)
    if (r != gcclSuccess) return r;
  return gcclSuccess;
}

// p communicators, each owned by its own long-lived worker thread, created once
// and reused for many collectives (creating a communicator is not free).
// Run(fn) calls fn(rank, comm) on every worker at once and returns when all are
// done, so each communicator is only ever used by its own thread.
class RankTeam {
 public:
  explicit RankTeam(int p) : p_(p), comms_(static_cast<size_t>(p), nullptr) {
    for (int r = 0; r < p; ++r) threads_.emplace_back([this, r] { WorkerLoop(r); });
    gcclUniqueId id;
    init_result_ = gcclGetUniqueId(&id);
    if (init_result_ != gcclSuccess) return;
    std::vector<gcclResult_t> res(static_cast<size_t>(p), gcclSuccess);
    RunWithRef([&](int r, gcclComm_t& comm) { res[static_cast<size_t>(r)] = gcclCommInitRank(&comm, p_, id, r); });
    for (gcclResult_t r : res)
      if (r != gcclSuccess && init_result_ == gcclSuccess) init_result_ = r;
  }

  ~RankTeam() {
    RunWithRef([](int, gcclComm_t& comm) {
      if (comm != nullptr) gcclCommDestroy(comm);
      comm = nullptr;
    });
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  RankTeam(const RankTeam&) = delete;
  RankTeam& operator=(const RankTeam&) = delete;

  int size() const { return p_; }
  gcclResult_t init_result() const { return init_result_; }
  gcclComm_t comm(int rank) const { return comms_[static_cast<size_t>(rank)]; }

  // Calls fn(rank, comm) on every rank's thread concurrently; waits for all.
  void Run(const std::function<void(int, gcclComm_t)>& fn) {
    RunWithRef([&](int r, gcclComm_t& c) { fn(r, c); });
  }

  // True when every communicator exists and reports no asynchronous error.
  bool Healthy() const {
    if (init_result_ != gcclSuccess) return false;
    for (gcclComm_t c : comms_) {
      gcclResult_t e = gcclInternalError;
      if (c == nullptr || gcclCommGetAsyncError(c, &e) != gcclSuccess || e != gcclSuccess) return false;
    }
    return true;
  }

 private:
  void RunWithRef(const std::function<void(int, gcclComm_t&)>& fn) {
    std::unique_lock<std::mutex> lk(mu_);
    task_ = &fn;
    done_ = 0;
    ++generation_;
    cv_.notify_all();
    done_cv_.wait(lk, [&] { return done_ == p_; });
    task_ = nullptr;
  }

  void WorkerLoop(int rank) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lk(mu_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      const std::function<void(int, gcclComm_t&)>* task = task_;
      lk.unlock();
      (*task)(rank, comms_[static_cast<size_t>(rank)]);
      lk.lock();
      if (++done_ == p_) done_cv_.notify_all();
    }
  }

  int p_;
  std::vector<gcclComm_t> comms_;
  std::vector<std::thread> threads_;
  gcclResult_t init_result_ = gcclSuccess;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(int, gcclComm_t&)>* task_ = nullptr;
  uint64_t generation_ = 0;
  int done_ = 0;
  bool stop_ = false;
};

// One team per p for the whole test binary, created on first use and rebuilt if
// a communicator went into an error state. Unless the environment already sets
// GCCL_TIMEOUT_MS, its communicators time out after 60 s instead of 300 s, so a
// hang in the library fails a test instead of stalling the suite.
inline RankTeam& SharedTeam(int p) {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<RankTeam>> teams;
  std::lock_guard<std::mutex> lk(mu);
  std::unique_ptr<RankTeam>& team = teams[p];
  if (team && !team->Healthy()) team.reset();
  if (!team) {
    const char* user = std::getenv("GCCL_TIMEOUT_MS");
    ScopedEnv timeout("GCCL_TIMEOUT_MS", user != nullptr ? std::string(user).c_str() : "60000");
    team.reset(new RankTeam(p));
  }
  return *team;
}

// ===================================================================== //
// Part 2: datatypes, exact inputs and references                         //
// ===================================================================== //

inline const gcclDataType_t kAllTypes[] = {gcclInt8,   gcclUint8,   gcclInt32,   gcclUint32,  gcclInt64,
                                           gcclUint64, gcclFloat16, gcclFloat32, gcclFloat64, gcclBfloat16};
inline const gcclRedOp_t kAllOps[] = {gcclSum, gcclProd, gcclMax, gcclMin, gcclAvg};

inline size_t TypeSize(gcclDataType_t dt) {
  switch (dt) {
    case gcclInt8:
    case gcclUint8:
      return 1;
    case gcclFloat16:
    case gcclBfloat16:
      return 2;
    case gcclInt32:
    case gcclUint32:
    case gcclFloat32:
      return 4;
    case gcclInt64:
    case gcclUint64:
    case gcclFloat64:
      return 8;
    default:
      return 0;
  }
}

inline bool IsFloatType(gcclDataType_t dt) {
  return dt == gcclFloat16 || dt == gcclFloat32 || dt == gcclFloat64 || dt == gcclBfloat16;
}

inline const char* TypeName(gcclDataType_t dt) {
  switch (dt) {
    case gcclInt8:
      return "int8";
    case gcclUint8:
      return "uint8";
    case gcclInt32:
      return "int32";
    case gcclUint32:
      return "uint32";
    case gcclInt64:
      return "int64";
    case gcclUint64:
      return "uint64";
    case gcclFloat16:
      return "float16";
    case gcclFloat32:
      return "float32";
    case gcclFloat64:
      return "float64";
    case gcclBfloat16:
      return "bfloat16";
    default:
      return "badtype";
  }
}

inline const char* OpName(gcclRedOp_t op) {
  switch (op) {
    case gcclSum:
      return "sum";
    case gcclProd:
      return "prod";
    case gcclMax:
      return "max";
    case gcclMin:
      return "min";
    case gcclAvg:
      return "avg";
    default:
      return "badop";
  }
}

// IEEE binary16 <-> float, round to nearest even (written here, independent of the
// library's own conversions).
inline uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return static_cast<uint16_t>(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (ax >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (ax < 0x38800000u) {                                               // below 2^-14: subnormal
    float a;
    std::memcpy(&a, &ax, 4);
    const auto m = static_cast<uint32_t>(std::nearbyint(a * 16777216.0f));  // exact scaling by 2^24
    return static_cast<uint16_t>(sign | m);
  }
  const uint32_t mant = ax & 0x7fffffu;
  const uint32_t exp = (ax >> 23) - 127 + 15;
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

inline float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    float f = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -f : f;
  }
  if (exp == 31)
    bits = sign | 0x7f800000u | (mant << 13);
  else
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t FloatToBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

inline float Bf16ToFloat(uint16_t b) {
  const uint32_t x = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

// Element access by datatype. Floating values travel as double (exact for every
// value these tests use), integer values as their two's-complement bits.
inline void StoreDouble(gcclDataType_t dt, void* buf, size_t i, double v) {
  switch (dt) {
    case gcclFloat16: {
      uint16_t h = FloatToHalf(static_cast<float>(v));
      std::memcpy(static_cast<char*>(buf) + 2 * i, &h, 2);
      break;
    }
    case gcclBfloat16: {
      uint16_t h = FloatToBf16(static_cast<float>(v));
      std::memcpy(static_cast<char*>(buf) + 2 * i, &h, 2);
      break;
    }
    case gcclFloat32: {
      float f = static_cast<float>(v);
      std::memcpy(static_cast<char*>(buf) + 4 * i, &f, 4);
      break;
    }
    case gcclFloat64:
      std::memcpy(static_cast<char*>(buf) + 8 * i, &v, 8);
      break;
    default:
      break;
  }
}

inline void StoreBits(gcclDataType_t dt, void* buf, size_t i, uint64_t v) {
  const size_t sz = TypeSize(dt);
  std::memcpy(static_cast<char*>(buf) + sz * i, &v, sz);  // little-endian: the low bytes
}

// The value of element i as a double (integers converted; for messages and
// tolerances).
inline double LoadDouble(gcclDataType_t dt, const void* buf, size_t i) {
  const char* p = static_cast<const char*>(buf) + TypeSize(dt) * i;
  switch (dt) {
    case gcclInt8: {
      int8_t v;
      std::memcpy(&v, p, 1);
      return v;
    }
    case gcclUint8: {
      uint8_t v;
      std::memcpy(&v, p, 1);
      return v;
    }
    case gcclInt32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case gcclUint32: {
      uint32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case gcclInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case gcclUint64: {
      uint64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case gcclFloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return HalfToFloat(v);
    }
    case gcclBfloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return Bf16ToFloat(v);
    }
    case gcclFloat32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case gcclFloat64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
    default:
      return 0;
  }
}

inline std::string FormatElem(gcclDataType_t dt, const void* buf, size_t i) {
  std::ostringstream os;
  const char* p = static_cast<const char*>(buf) + TypeSize(dt) * i;
  switch (dt) {
    case gcclInt64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      os << v;
      break;
    }
    case gcclUint64: {
      uint64_t v;
      std::memcpy(&v, p, 8);
      os << v;
      break;
    }
    default:
      os.precision(17);
      os << LoadDouble(dt, buf, i);
      break;
  }
  uint64_t bits = 0;
  std::memcpy(&bits, p, TypeSize(dt));
  os << " (0x" << std::hex << bits << ")";
  return os.str();
}

// --- deterministic inputs -------------------------------------------------------

inline uint64_t Mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline uint64_t ElemHash(uint64_t seed, int rank, size_t index, gcclDataType_t dt, gcclRedOp_t op) {
  uint64_t k = Mix64(seed) ^ Mix64(static_cast<uint64_t>(index) * 0x100000001b3ull);
  k ^= (static_cast<uint64_t>(rank) << 48) ^ (static_cast<uint64_t>(dt) << 40) ^ (static_cast<uint64_t>(op) << 36);
  return Mix64(k);
}

// Resolution of the fractional part of float inputs: fine enough that a
// reduction carried out in a narrower type loses it (float64 via float32, float32
// via float16), coarse enough that every partial sum of p <= 8 inputs stays exact.
inline double FracUnit(gcclDataType_t dt) {
  switch (dt) {
    case gcclFloat64:
      return std::ldexp(1.0, -30);
    case gcclFloat32:
      return std::ldexp(1.0, -12);
    case gcclFloat16:
      return 0.25;
    default:
      return 0.5;  // bfloat16: |sums| <= 76 with one fractional bit fits its 8 bits
  }
}

// Floating input of `rank` at `index`, before the avg fix-up: a + b*FracUnit with
// a in [-8, 8], b in [-3, 3]; for prod, one of {2, -1, 1} (few 2s) so products are
// small powers of two.
inline double RawFloatInput(gcclDataType_t dt, gcclRedOp_t op, int rank, size_t index, uint64_t seed) {
  const uint64_t h = ElemHash(seed, rank, index, dt, op);
  if (op == gcclProd) {
    const unsigned k = static_cast<unsigned>(h % 8);
    return k == 0 ? 2.0 : (k < 4 ? -1.0 : 1.0);
  }
  const double a = static_cast<double>(static_cast<int>(h % 17) - 8);
  const double b = static_cast<double>(static_cast<int>((h >> 8) % 7) - 3);
  return a + b * FracUnit(dt);
}

// Floating input. For avg, the last rank's value makes the sum over ranks an exact
// multiple of p, so the average is an exact integer in every type.
inline double FloatInput(gcclDataType_t dt, gcclRedOp_t op, int p, int rank, size_t index, uint64_t seed) {
  if (op != gcclAvg || p == 1 || rank != p - 1) return RawFloatInput(dt, op, rank, index, seed);
  double s = 0;
  for (int q = 0; q < p - 1; ++q) s += RawFloatInput(dt, op, q, index, seed);
  const double k = std::nearbyint(s / p);
  return k * p - s;
}

// Integer input bits: mostly full-range (sums and products wrap; max/min see both
// signs and the top bit of unsigned types), sometimes small. For prod, odd values
// (and some 2s) so that products do not collapse to 0.
inline uint64_t IntInput(gcclDataType_t dt, gcclRedOp_t op, int rank, size_t index, uint64_t seed) {
  const uint64_t h = ElemHash(seed, rank, index, dt, op);
  const uint64_t v = Mix64(h);
  if (op == gcclProd) return (h % 8 == 0) ? 2 : (v | 1);
  if (h % 4 == 0) return static_cast<uint64_t>(static_cast<int64_t>(v % 7) - 3);
  return v;
}

// Writes `count` inputs of `rank` for logical indices first .. first+count-1.
inline void FillInput(gcclDataType_t dt, gcclRedOp_t op, int p, int rank, uint64_t seed, size_t first, size_t count,
                      void* out) {
  if (IsFloatType(dt)) {
    for (size_t i = 0; i < count; ++i) StoreDouble(dt, out, i, FloatInput(dt, op, p, rank, first + i, seed));
  } else {
    for (size_t i = 0; i < count; ++i) StoreBits(dt, out, i, IntInput(dt, op, rank, first + i, seed));
  }
}

template <class T>
inline void RefReduceInt(gcclDataType_t dt, gcclRedOp_t op, int p, uint64_t seed, size_t first, size_t count,
                         void* out) {
  using U = std::make_unsigned_t<T>;
  for (size_t i = 0; i < count; ++i) {
    T acc = static_cast<T>(IntInput(dt, op, 0, first + i, seed));
    for (int r = 1; r < p; ++r) {
      const T v = static_cast<T>(IntInput(dt, op, r, first + i, seed));
      switch (op) {
        case gcclSum:
        case gcclAvg:
          acc = static_cast<T>(static_cast<U>(static_cast<uint64_t>(static_cast<U>(acc)) + static_cast<U>(v)));
          break;
        case gcclProd:
          acc = static_cast<T>(
              static_cast<U>(static_cast<uint64_t>(static_cast<U>(acc)) * static_cast<uint64_t>(static_cast<U>(v))));
          break;
        case gcclMax:
          acc = std::max(acc, v);
          break;
        case gcclMin:
          acc = std::min(acc, v);
          break;
        default:
          break;
      }
    }
    if (op == gcclAvg) acc = static_cast<T>(acc / static_cast<T>(p));  // wrapped sum, truncating division
    std::memcpy(static_cast<char*>(out) + sizeof(T) * i, &acc, sizeof(T));
  }
}

// out[i] = op over ranks of FillInput(rank)[first + i]: the exact result.
inline void RefReduce(gcclDataType_t dt, gcclRedOp_t op, int p, uint64_t seed, size_t first, size_t count, void* out) {
  switch (dt) {
    case gcclInt8:
      RefReduceInt<int8_t>(dt, op, p, seed, first, count, out);
      return;
    case gcclUint8:
      RefReduceInt<uint8_t>(dt, op, p, seed, first, count, out);
      return;
    case gcclInt32:
      RefReduceInt<int32_t>(dt, op, p, seed, first, count, out);
      return;
    case gcclUint32:
      RefReduceInt<uint32_t>(dt, op, p, seed, first, count, out);
      return;
    case gcclInt64:
      RefReduceInt<int64_t>(dt, op, p, seed, first, count, out);
      return;
    case gcclUint64:
      RefReduceInt<uint64_t>(dt, op, p, seed, first, count, out);
      return;
    default:
      break;
  }
  for (size_t i = 0; i < count; ++i) {
    double acc = FloatInput(dt, op, p, 0, first + i, seed);
    for (int r = 1; r < p; ++r) {
      const double v = FloatInput(dt, op, p, r, first + i, seed);
      switch (op) {
        case gcclSum:
        case gcclAvg:
          acc += v;
          break;
        case gcclProd:
          acc *= v;
          break;
        case gcclMax:
          acc = std::max(acc, v);
          break;
        case gcclMin:
          acc = std::min(acc, v);
          break;
        default:
          break;
      }
    }
    if (op == gcclAvg) acc /= p;  // exact: the sum is a multiple of p
    StoreDouble(dt, out, i, acc);
  }
}

// ===================================================================== //
// Part 3: one collective call on every rank, checked exactly             //
// ===================================================================== //

enum class Coll { AllReduce, AllGather, ReduceScatter, Broadcast, Reduce };

inline const char* CollName(Coll c) {
  switch (c) {
    case Coll::AllReduce:
      return "AllReduce";
    case Coll::AllGather:
      return "AllGather";
    case Coll::ReduceScatter:
      return "ReduceScatter";
    case Coll::Broadcast:
      return "Broadcast";
    case Coll::Reduce:
      return "Reduce";
  }
  return "?";
}
inline bool CollHasOp(Coll c) {
  return c == Coll::AllReduce || c == Coll::ReduceScatter || c == Coll::Reduce;
}
inline bool CollHasRoot(Coll c) {
  return c == Coll::Broadcast || c == Coll::Reduce;
}

// Calls collective c with the public API's argument order (op / root ignored where
// the collective has none).
inline gcclResult_t CallColl(Coll c, const void* send, void* recv, size_t count, gcclDataType_t dt, gcclRedOp_t op,
                             int root, gcclComm_t comm, gcclStream_t stream) {
  switch (c) {
    case Coll::AllReduce:
      return gcclAllReduce(send, recv, count, dt, op, comm, stream);
    case Coll::AllGather:
      return gcclAllGather(send, recv, count, dt, comm, stream);
    case Coll::ReduceScatter:
      return gcclReduceScatter(send, recv, count, dt, op, comm, stream);
    case Coll::Broadcast:
      return gcclBroadcast(send, recv, count, dt, root, comm, stream);
    case Coll::Reduce:
      return gcclReduce(send, recv, count, dt, op, root, comm, stream);
  }
  return gcclInternalError;
}

// count: AllReduce/Broadcast/Reduce count, AllGather sendcount, ReduceScatter recvcount.
struct Case {
  Coll coll = Coll::AllReduce;
  gcclDataType_t dt = gcclFloat32;
  gcclRedOp_t op = gcclSum;
  int p = 1;
  size_t count = 0;
  bool inplace = false;
  int root = 0;
  uint64_t seed = 1;
  // Misaligned buffers: rank r's buffers start (r + 1) * misalign elements past a
  // 64-byte boundary (its send and receive buffers by different amounts).
  size_t misalign = 0;
};

inline std::string Describe(const Case& c) {
  std::ostringstream os;
  os << CollName(c.coll) << " p=" << c.p << " " << TypeName(c.dt);
  if (CollHasOp(c.coll)) os << " " << OpName(c.op);
  os << " count=" << c.count;
  if (CollHasRoot(c.coll)) os << " root=" << c.root;
  os << (c.inplace ? " in-place" : " out-of-place") << " seed=" << c.seed;
  if (c.misalign) os << " misalign=" << c.misalign;
  return os.str();
}

// Bytes with a guard zone on both sides, to catch writes out of bounds. The data
// starts `shift` bytes past a 64-byte boundary (0 = aligned), to exercise
// buffers that are element-aligned but not vector-aligned.
class GuardedBuf {
 public:
  static constexpr size_t kGuard = 64;
  static constexpr unsigned char kGuardByte = 0xEF;
  static constexpr unsigned char kSentinel = 0xCD;
  GuardedBuf() = default;
  explicit GuardedBuf(size_t bytes, size_t shift = 0)
      : bytes_(bytes), head_(kGuard + shift % kGuard), mem_(bytes + head_ + kGuard + kGuard, kGuardByte) {
    std::memset(data(), kSentinel, bytes);
  }
  // Moves keep the bytes where they are; a copy could land on another alignment.
  GuardedBuf(GuardedBuf&&) = default;
  GuardedBuf& operator=(GuardedBuf&&) = default;
  GuardedBuf(const GuardedBuf&) = delete;
  GuardedBuf& operator=(const GuardedBuf&) = delete;
  unsigned char* data() { return mem_.empty() ? nullptr : Aligned() + head_; }
  const unsigned char* data() const { return mem_.empty() ? nullptr : Aligned() + head_; }
  size_t bytes() const { return bytes_; }
  bool allocated() const { return !mem_.empty(); }
  bool GuardsIntact() const {
    if (mem_.empty()) return true;
    const unsigned char* base = Aligned();
    for (size_t i = 0; i < head_; ++i)
      if (base[i] != kGuardByte) return false;
    for (size_t i = 0; i < kGuard; ++i)
      if (base[head_ + bytes_ + i] != kGuardByte) return false;
    return true;
  }

 private:
  // The first 64-byte boundary inside mem_ (mem_ has kGuard spare bytes for it).
  const unsigned char* Aligned() const {
    const auto a = reinterpret_cast<uintptr_t>(mem_.data());
    return mem_.data() + ((kGuard - a % kGuard) % kGuard);
  }
  unsigned char* Aligned() { return const_cast<unsigned char*>(static_cast<const GuardedBuf*>(this)->Aligned()); }

  size_t bytes_ = 0;
  size_t head_ = kGuard;
  std::vector<unsigned char> mem_;
};

// memcmp(a, b, n) == 0, where n == 0 allows NULL pointers.
inline bool SameBytes(const void* a, const void* b, size_t n) {
  return n == 0 || std::memcmp(a, b, n) == 0;
}

// The first index where two arrays of `count` elements differ, or count.
inline size_t FirstDiff(gcclDataType_t dt, const void* a, const void* b, size_t count) {
  if (count == 0 || std::memcmp(a, b, count * TypeSize(dt)) == 0) return count;
  const size_t sz = TypeSize(dt);
  for (size_t i = 0; i < count; ++i)
    if (std::memcmp(static_cast<const char*>(a) + i * sz, static_cast<const char*>(b) + i * sz, sz) != 0) return i;
  return count;
}

// Buffers, inputs and expected outputs of one case on every rank. Issue() makes
// one rank's call; Check() compares every rank's output exactly with the
// reference and with rank 0's, and checks guards and (out of place) that send
// buffers are unchanged.
class CasePlan {
 public:
  explicit CasePlan(const Case& c) : c_(c), ranks_(static_cast<size_t>(c.p)) {
    const size_t sz = TypeSize(c.dt), n = c.count, p = static_cast<size_t>(c.p);
    const gcclRedOp_t op = CollHasOp(c.coll) ? c.op : gcclSum;
    // Reference (shared by the ranks that expect the same output).
    switch (c.coll) {
      case Coll::AllReduce:
      case Coll::Reduce:
        ref_.resize(n * sz);
        RefReduce(c.dt, op, c.p, c.seed, 0, n, ref_.data());
        break;
      case Coll::ReduceScatter:
        ref_.resize(p * n * sz);
        RefReduce(c.dt, op, c.p, c.seed, 0, p * n, ref_.data());
        break;
      case Coll::AllGather:
        ref_.resize(p * n * sz);
        for (int r = 0; r < c.p; ++r) FillInput(c.dt, op, c.p, r, c.seed, 0, n, ref_.data() + r * n * sz);
        break;
      case Coll::Broadcast:
        ref_.resize(n * sz);
        FillInput(c.dt, op, c.p, c.root, c.seed, 0, n, ref_.data());
        break;
    }
    for (int r = 0; r < c.p; ++r) Setup(r, op);
  }

  gcclResult_t Issue(int rank, gcclComm_t comm, gcclStream_t stream) {
    Rank& k = ranks_[static_cast<size_t>(rank)];
    return CallColl(c_.coll, k.send, k.recv, c_.count, c_.dt, c_.op, c_.root, comm, stream);
  }

  // Runs the case on a team (NULL streams) and checks it. True when all is well.
  bool RunOn(RankTeam& team) {
    std::vector<gcclResult_t> res(static_cast<size_t>(c_.p), gcclInternalError);
    team.Run([&](int r, gcclComm_t comm) { res[static_cast<size_t>(r)] = Issue(r, comm, nullptr); });
    std::vector<std::string> errs(static_cast<size_t>(c_.p));
    for (int r = 0; r < c_.p; ++r)
      if (res[static_cast<size_t>(r)] != gcclSuccess) errs[static_cast<size_t>(r)] = gcclGetLastError(team.comm(r));
    return Check(res, errs);
  }

  // results[r]: what rank r's call (or its stream) returned; errors[r]: its
  // gcclGetLastError text, if any.
  bool Check(const std::vector<gcclResult_t>& results, const std::vector<std::string>& errors = {}) {
    bool ok = true;
    const size_t sz = TypeSize(c_.dt);
    for (int r = 0; r < c_.p; ++r) {
      Rank& k = ranks_[static_cast<size_t>(r)];
      const gcclResult_t res = results[static_cast<size_t>(r)];
      if (res != gcclSuccess) {
        ADD_FAILURE() << Describe(c_) << ": rank " << r << " returned " << res << " (" << gcclGetErrorString(res)
                      << "): " << (static_cast<size_t>(r) < errors.size() ? errors[static_cast<size_t>(r)] : "");
        ok = false;
        continue;
      }
      if (k.expect != nullptr) {
        const size_t n = k.expect_bytes / sz;
        const size_t d = FirstDiff(c_.dt, k.check, k.expect, n);
        if (d != n) {
          size_t wrong = 0;
          for (size_t i = d; i < n; ++i) wrong += std::memcmp(k.check + i * sz, k.expect + i * sz, sz) != 0;
          ADD_FAILURE() << Describe(c_) << ": rank " << r << " output differs from the exact reference at " << wrong
                        << " of " << n << " elements; first at [" << d << "]: got " << FormatElem(c_.dt, k.check, d)
                        << ", want " << FormatElem(c_.dt, k.expect, d);
          ok = false;
        }
      }
      if (!k.recv_buf.GuardsIntact() || !k.send_buf.GuardsIntact()) {
        ADD_FAILURE() << Describe(c_) << ": rank " << r << " wrote outside its buffers (guard bytes changed)";
        ok = false;
      }
      if (!k.send_copy.empty() && std::memcmp(k.send_copy.data(), k.send_buf.data(), k.send_copy.size()) != 0) {
        ADD_FAILURE() << Describe(c_) << ": rank " << r << " sendbuff changed by an out-of-place call";
        ok = false;
      }
    }
    // Bit-identical across ranks where every rank holds the same result.
    if (ok && (c_.coll == Coll::AllReduce || c_.coll == Coll::AllGather || c_.coll == Coll::Broadcast)) {
      const Rank& k0 = ranks_[0];
      for (int r = 1; r < c_.p; ++r) {
        const Rank& k = ranks_[static_cast<size_t>(r)];
        if (k.expect_bytes != k0.expect_bytes || !SameBytes(k.check, k0.check, k.expect_bytes)) {
          ADD_FAILURE() << Describe(c_) << ": rank " << r << " output is not bit-identical to rank 0's";
          ok = false;
        }
      }
    }
    return ok;
  }

  // True when no rank's receive buffer (nor, out of place, send buffer) changed:
  // what a failed call must leave behind.
  bool Untouched(std::string* why) const {
    for (int r = 0; r < c_.p; ++r) {
      const Rank& k = ranks_[static_cast<size_t>(r)];
      if (k.recv_buf.allocated() && !SameBytes(k.recv_buf.data(), k.recv_init.data(), k.recv_init.size())) {
        *why = "rank " + std::to_string(r) + "'s receive buffer was written";
        return false;
      }
      if (!k.send_copy.empty() && std::memcmp(k.send_copy.data(), k.send_buf.data(), k.send_copy.size()) != 0) {
        *why = "rank " + std::to_string(r) + "'s send buffer was changed";
        return false;
      }
      if (!k.recv_buf.GuardsIntact() || !k.send_buf.GuardsIntact()) {
        *why = "rank " + std::to_string(r) + " wrote outside its buffers";
        return false;
      }
    }
    return true;
  }

  const Case& c() const { return c_; }

 private:
  struct Rank {
    GuardedBuf send_buf, recv_buf;         // recv_buf doubles as the in-place buffer
    const void* send = nullptr;            // what is passed as sendbuff
    void* recv = nullptr;                  // what is passed as recvbuff
    std::vector<unsigned char> send_copy;  // out of place: the input, to check it is unchanged
    std::vector<unsigned char> recv_init;  // recv_buf's contents before the call
    std::vector<unsigned char> own;        // a rank-specific expected output
    const unsigned char* check = nullptr;  // the output region to compare
    const unsigned char* expect = nullptr;
    size_t expect_bytes = 0;
  };

  void Setup(int r, gcclRedOp_t op) {
    const size_t sz = TypeSize(c_.dt), n = c_.count, p = static_cast<size_t>(c_.p);
    const size_t ur = static_cast<size_t>(r);
    Rank& k = ranks_[ur];
    const bool is_root = r == c_.root;
    // Count 0 out of place: NULL buffers are allowed.
    const bool null_bufs = n == 0 && !c_.inplace;
    // Where the root-only collectives do not read (Broadcast send) or write
    // (Reduce recv) a non-root's buffer: alternate NULL and a real buffer.
    const bool null_unused = (c_.seed & 1) != 0;
    const size_t rshift = c_.misalign * (ur + 1) * sz, sshift = c_.misalign * (ur + 2) * sz;
    switch (c_.coll) {
      case Coll::AllReduce:
        if (c_.inplace) {
          k.recv_buf = GuardedBuf(n * sz, rshift);
          FillInput(c_.dt, op, c_.p, r, c_.seed, 0, n, k.recv_buf.data());
          k.send = k.recv = k.recv_buf.data();
        } else {
          k.send_buf = GuardedBuf(n * sz, sshift);
          FillInput(c_.dt, op, c_.p, r, c_.seed, 0, n, k.send_buf.data());
          k.recv_buf = GuardedBuf(n * sz, rshift);
          k.send = null_bufs ? nullptr : k.send_buf.data();
          k.recv = null_bufs ? nullptr : k.recv_buf.data();
        }
        Expect(k, k.recv_buf.data(), ref_.data(), n * sz);
        break;
      case Coll::AllGather:
        k.recv_buf = GuardedBuf(p * n * sz, rshift);
        if (c_.inplace) {
          FillInput(c_.dt, op, c_.p, r, c_.seed, 0, n, k.recv_buf.data() + ur * n * sz);
          k.recv = k.recv_buf.data();
          k.send = k.recv_buf.data() + ur * n * sz;
        } else {
          k.send_buf = GuardedBuf(n * sz, sshift);
          FillInput(c_.dt, op, c_.p, r, c_.seed, 0, n, k.send_buf.data());
          k.send = null_bufs ? nullptr : k.send_buf.data();
          k.recv = null_bufs ? nullptr : k.recv_buf.data();
        }
        Expect(k, k.recv_buf.data(), ref_.data(), p * n * sz);
        break;
      case Coll::ReduceScatter:
        if (c_.inplace) {
          k.recv_buf = GuardedBuf(p * n * sz, rshift);
          FillInput(c_.dt, op, c_.p, r, c_.seed, 0, p * n, k.recv_buf.data());
          k.send = k.recv_buf.data();
          k.recv = k.recv_buf.data() + ur * n * sz;
        } else {
          k.send_buf = GuardedBuf(p * n * sz, sshift);
          FillInput(c_.dt, op, c_.p, r, c_.seed, 0, p * n, k.send_buf.data());
          k.recv_buf = GuardedBuf(n * sz, rshift);
          k.send = null_bufs ? nullptr : k.send_buf.data();
          k.recv = null_bufs ? nullptr : k.recv_buf.data();
        }
        Expect(k, static_cast<unsigned char*>(k.recv), ref_.data() + ur * n * sz, n * sz);
        if (null_bufs) Expect(k, nullptr, nullptr, 0);
        break;
      case Coll::Broadcast:
        k.recv_buf = GuardedBuf(n * sz, rshift);
        if (c_.inplace) {
          if (is_root) FillInput(c_.dt, op, c_.p, r, c_.seed, 0, n, k.recv_buf.data());
          k.send = k.recv = k.recv_buf.data();
        } else {
          if (is_root || !null_unused) {
            k.send_buf = GuardedBuf(n * sz, sshift);  // a non-root's holds sentinels that must not spread
            if (is_root) FillInput(c_.dt, op, c_.p, r, c_.seed, 0, n, k.send_buf.data());
          }
          k.send = (null_bufs || !k.send_buf.allocated()) ? nullptr : k.send_buf.data();
          k.recv = null_bufs ? nullptr : k.recv_buf.data();
        }
        Expect(k, k.recv_buf.data(), ref_.data(), n * sz);
        break;
      case Coll::Reduce:
        if (c_.inplace) {
          k.recv_buf = GuardedBuf(n * sz, rshift);
          FillInput(c_.dt, op, c_.p, r, c_.seed, 0, n, k.recv_buf.data());
          k.send = k.recv = k.recv_buf.data();
          if (is_root) {
            Expect(k, k.recv_buf.data(), ref_.data(), n * sz);
          } else {  // recvbuff is written on the root only: a non-root's input stays
            k.own.assign(k.recv_buf.data(), k.recv_buf.data() + n * sz);
            Expect(k, k.recv_buf.data(), k.own.data(), n * sz);
          }
        } else {
          k.send_buf = GuardedBuf(n * sz, sshift);
          FillInput(c_.dt, op, c_.p, r, c_.seed, 0, n, k.send_buf.data());
          if (is_root || !null_unused) k.recv_buf = GuardedBuf(n * sz, rshift);
          k.send = null_bufs ? nullptr : k.send_buf.data();
          k.recv = (null_bufs || !k.recv_buf.allocated()) ? nullptr : k.recv_buf.data();
          if (is_root) {
            Expect(k, k.recv_buf.data(), ref_.data(), n * sz);
          } else if (k.recv_buf.allocated()) {  // must keep its sentinels
            k.own.assign(n * sz, GuardedBuf::kSentinel);
            Expect(k, k.recv_buf.data(), k.own.data(), n * sz);
          }
        }
        break;
    }
    if (!c_.inplace && k.send_buf.allocated())
      k.send_copy.assign(k.send_buf.data(), k.send_buf.data() + k.send_buf.bytes());
    if (k.recv_buf.allocated()) k.recv_init.assign(k.recv_buf.data(), k.recv_buf.data() + k.recv_buf.bytes());
  }

  static void Expect(Rank& k, const unsigned char* check, const unsigned char* expect, size_t bytes) {
    k.check = check;
    k.expect = expect;
    k.expect_bytes = bytes;
  }

  Case c_;
  std::vector<unsigned char> ref_;
  std::vector<Rank> ranks_;
};

// Case-insensitive: does `text` contain any of `words`?
inline ::testing::AssertionResult MentionsAny(const char* text, const std::vector<std::string>& words) {
  if (text == nullptr) return ::testing::AssertionFailure() << "error text is NULL";
  std::string t(text);
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char ch) { return std::tolower(ch); });
  for (const std::string& w : words) {
    std::string lw(w);
    std::transform(lw.begin(), lw.end(), lw.begin(), [](unsigned char ch) { return std::tolower(ch); });
    if (t.find(lw) != std::string::npos) return ::testing::AssertionSuccess();
  }
  std::ostringstream os;
  os << "error text \"" << text << "\" mentions none of {";
  for (const std::string& w : words) os << " \"" << w << "\"";
  os << " }";
  return ::testing::AssertionFailure() << os.str();
}

// Milliseconds since `start`.
inline double MsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace gh

#endif  // GCCL_TESTS_CORE_HARNESS_H
