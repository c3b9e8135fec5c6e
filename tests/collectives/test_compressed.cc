// test_compressed.cc — compressed allreduce (sra, and ring-requant forced through
// GCCL_ALGO), allgather and reduce-scatter on p = 1..8 thread ranks of
// gcclCommInitAll: every rank's result bit-identical; the error against the exact
// result within a bound derived from each codec's stated error (codec_*.c headers);
// error-feedback telescoping; non-finite inputs; in place; argument and agreement
// errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "core/harness.h"
#include "gccl.h"

extern "C" {
#include "collectives/algorithms.h"
}

namespace {

enum class Kind { Fp16, Bf16, Uniform, Qsgd, Sign, Terngrad };

struct Codec {
  const char* spec;
  Kind kind;
  int bits;      // uniform, qsgd
  bool nearest;  // uniform: round=nearest (else stochastic, the default)
  bool ef;       // error feedback by default (sign)
};

const Codec kCodecs[] = {
    {"fp16", Kind::Fp16, 0, false, false},
    {"bf16", Kind::Bf16, 0, false, false},
    {"uniform:bits=8", Kind::Uniform, 8, false, false},
    {"uniform:bits=4,round=nearest", Kind::Uniform, 4, true, false},
    {"qsgd:bits=4", Kind::Qsgd, 4, false, false},
    {"sign", Kind::Sign, 0, false, true},
    {"terngrad", Kind::Terngrad, 0, false, false},
};
constexpr size_t kBucket = 512;  // the default bucket of the bucketed codecs
constexpr int kMaxRanks = 8;
constexpr int kMaxFailures = 8;  // per test: a broken collective does not flood the log

bool Stochastic(const Codec& c) {
  return (c.kind == Kind::Uniform && !c.nearest) || c.kind == Kind::Qsgd || c.kind == Kind::Terngrad;
}

std::string WithEf(const Codec& c) {
  std::string s = c.spec;
  if (c.ef) return s;
  return s + (s.find(':') == std::string::npos ? ":ef=1" : ",ef=1");
}

// ---- communicators ---------------------------------------------------------------

// p communicators of gcclCommInitAll, made with GCCL_ALGO = algo (nullptr: the
// tuner's choice). Run calls fn(rank, comm) on p threads at once.
class Comms {
 public:
  Comms(int p, const char* algo) : comms_(static_cast<size_t>(p), nullptr) {
    gh::ScopedEnv a("GCCL_ALGO", algo);           // read when the communicator is created
    gh::ScopedEnv t("GCCL_TIMEOUT_MS", "30000");  // a hang becomes a failure
    result_ = gcclCommInitAll(comms_.data(), p);
  }
  ~Comms() {
    for (gcclComm_t c : comms_)
      if (c != nullptr) gcclCommDestroy(c);
  }
  Comms(const Comms&) = delete;
  Comms& operator=(const Comms&) = delete;

  gcclResult_t result() const { return result_; }
  int size() const { return static_cast<int>(comms_.size()); }
  gcclComm_t operator[](int r) const { return comms_[static_cast<size_t>(r)]; }

  void Run(const std::function<void(int, gcclComm_t)>& fn) const {
    std::vector<std::thread> threads;
    for (int r = 0; r < size(); ++r) threads.emplace_back([&, r] { fn(r, comms_[static_cast<size_t>(r)]); });
    for (auto& t : threads) t.join();
  }

 private:
  std::vector<gcclComm_t> comms_;
  gcclResult_t result_ = gcclInternalError;
};

// ---- inputs ----------------------------------------------------------------------

// Rank r's element i: scale_r * (u - 0.25), u uniform in [0, 1), so the inputs have
// a positive mean (a missing or doubled contribution shifts the error's mean) and
// ranks differ in scale. Rounded to dt, so the reference sees the exact input.
double InputValue(gcclDataType_t dt, uint64_t seed, int r, size_t i) {
  uint64_t h = gh::Mix64(seed ^ gh::Mix64((static_cast<uint64_t>(r) << 40) ^ i));
  float v = static_cast<float>((1.0 + 0.25 * r) * (static_cast<double>(h >> 11) * 0x1p-53 - 0.25));
  if (dt == gcclFloat16) return gh::HalfToFloat(gh::FloatToHalf(v));
  if (dt == gcclBfloat16) return gh::Bf16ToFloat(gh::FloatToBf16(v));
  return v;
}

// Writes values (exact in dt) as dt.
void StoreAll(gcclDataType_t dt, void* buf, const std::vector<double>& v) {
  for (size_t i = 0; i < v.size(); ++i) gh::StoreDouble(dt, buf, i, v[i]);
}

std::vector<double> LoadAll(gcclDataType_t dt, const void* buf, size_t n) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = gh::LoadDouble(dt, buf, i);
  return v;
}

// ---- error bounds from the codec headers -------------------------------------------

// What the bound of one quantization needs to know of the vector it encodes:
// bounds on its largest |value| and on its range (max - min), which bound every
// bucket's scale, step or norm whatever the buckets or chunks are.
struct VecStats {
  double max_abs = 0, range = 0;
};

VecStats StatsOf(const std::vector<double>& v, size_t first, size_t n) {
  double lo = 0, hi = 0, m = 0;
  bool any = false;
  for (size_t i = first; i < first + n; ++i) {
    if (!std::isfinite(v[i])) continue;
    lo = any ? std::min(lo, v[i]) : v[i];
    hi = any ? std::max(hi, v[i]) : v[i];
    m = std::max(m, std::fabs(v[i]));
    any = true;
  }
  return {m, hi - lo};
}

// The largest error one encode-decode adds to an element of magnitude abs_v:
//   fp16/bf16: round to nearest: half an ulp, 2^-11 / 2^-8 relative (plus half
//     fp16's subnormal spacing);
//   uniform: dec = min + q * step, step = range / (2^b - 1): below one step
//     (stochastic) or half of one (nearest);
//   qsgd: |x| rounded between levels l * norm / s, norm <= sqrt(bucket) * max|x|:
//     below one level;
//   sign: dec = +-scale, scale = mean |x| <= max|x|: |x| + max|x| at most;
//   terngrad: dec in {0, +-scale} with the sign of x, scale = max |x|: max|x| at most.
// Plus the codecs' own fp32 arithmetic (scale, step, decode), a few ulp.
double StageBound(const Codec& c, double abs_v, const VecStats& s, size_t n) {
  const double fp = 8 * 0x1p-24 * (s.max_abs + abs_v);
  switch (c.kind) {
    case Kind::Fp16:
      return abs_v * 0x1p-11 + 0x1p-25;
    case Kind::Bf16:
      return abs_v * 0x1p-8 + 0x1p-133;
    case Kind::Uniform: {
      double step = s.range / ((1 << c.bits) - 1);
      return (c.nearest ? 0.5 : 1.0) * step * (1 + 1e-5) + fp;
    }
    case Kind::Qsgd: {
      double norm = std::sqrt(static_cast<double>(std::min(n, kBucket))) * s.max_abs;
      return norm / ((1 << c.bits) - 1) * (1 + 1e-5) + fp;
    }
    case Kind::Sign:
      return abs_v + s.max_abs + fp;
    case Kind::Terngrad:
      return s.max_abs + fp;
  }
  return 0;
}

// Rounding of a result stored as dt (relative).
double StoreUlp(gcclDataType_t dt) {
  return dt == gcclFloat16 ? 0x1p-11 : dt == gcclBfloat16 ? 0x1p-8 : 0;
}

// Bound and variance of the error of element j of a compressed sum.
struct ElemBound {
  double bound = 0;     // |out - exact| never exceeds this
  double variance = 0;  // stochastic codecs: a bound on the variance of out - exact
};

// x[r]: the inputs of the ranks whose elements [first, first + n) are summed.
// sra: each contributor's encode (stage 1), then the owner's re-encode of the
// fp32 sum S, whose elements lie within stage 1's error of the exact sums.
// ring-requant: p encodes in a chain, each of a partial sum bounded by
// sum_r |x_r| plus the errors before it. reencode = false: stage 1 only (the sum is
// the result: reduce-scatter).
std::vector<ElemBound> SumBounds(const Codec& c, const std::vector<std::vector<double>>& x, size_t first, size_t n,
                                 bool ring, bool reencode) {
  const int p = static_cast<int>(x.size());
  std::vector<ElemBound> b(n);
  std::vector<double> abs_sum(n, 0), exact(n, 0);
  for (size_t j = 0; j < n; ++j)
    for (int r = 0; r < p; ++r) abs_sum[j] += std::fabs(x[r][first + j]), exact[j] += x[r][first + j];
  double max_abs_sum = 0;
  for (double a : abs_sum) max_abs_sum = std::max(max_abs_sum, a);
  if (ring) {
    double prev_max = 0;
    std::vector<double> err(n, 0);
    for (int k = 0; k < p; ++k) {
      VecStats s{max_abs_sum + prev_max, 2 * (max_abs_sum + prev_max)};
      double next_max = 0;
      for (size_t j = 0; j < n; ++j) {
        double e = StageBound(c, abs_sum[j] + err[j], s, n);
        err[j] += e;
        b[j].variance += e * e / 4;
        next_max = std::max(next_max, err[j]);
      }
      prev_max = next_max;
    }
    for (size_t j = 0; j < n; ++j) b[j].bound = err[j];
  } else {
    std::vector<VecStats> rs(static_cast<size_t>(p));
    for (int r = 0; r < p; ++r) rs[static_cast<size_t>(r)] = StatsOf(x[r], first, n);
    double e1_max = 0;
    for (size_t j = 0; j < n; ++j) {
      for (int r = 0; r < p; ++r) {
        double e = StageBound(c, std::fabs(x[r][first + j]), rs[static_cast<size_t>(r)], n);
        b[j].bound += e;
        b[j].variance += e * e / 4;
      }
      e1_max = std::max(e1_max, b[j].bound);
    }
    if (reencode) {
      VecStats t = StatsOf(exact, 0, n);
      VecStats s{t.max_abs + e1_max, t.range + 2 * e1_max};
      for (size_t j = 0; j < n; ++j) {
        double e = StageBound(c, std::fabs(exact[j]) + b[j].bound, s, n);
        b[j].bound += e;
        b[j].variance += e * e / 4;
      }
    }
  }
  // fp32 sums of p + 2 terms and the decodes into them
  for (size_t j = 0; j < n; ++j) b[j].bound += (p + 4) * 0x1p-23 * (abs_sum[j] + b[j].bound);
  return b;
}

// Checks out (n elements of dt) against exact / divisor within bounds / divisor,
// and for stochastic codecs the mean of the errors: their sum lies within 6
// standard deviations of 0 (a missing or doubled contribution shifts it by about
// 0.4 * n / p per element, the inputs' mean). Returns "" or what failed.
std::string CheckErrors(const Codec& c, gcclDataType_t dt, const std::vector<double>& out,
                        const std::vector<double>& exact, const std::vector<ElemBound>& b, double divisor) {
  double err_sum = 0, var_sum = 0, slack_sum = 0;
  for (size_t j = 0; j < out.size(); ++j) {
    double want = exact[j] / divisor;
    // stored as dt once; avg: the sum stored, then divided and stored again
    const double store = StoreUlp(dt) * (divisor > 1 ? 2 : 1) + 0x1p-23;
    double bound = b[j].bound / divisor + store * (std::fabs(want) + b[j].bound / divisor);
    double err = out[j] - want;
    if (!std::isfinite(out[j]) || std::fabs(err) > bound) {
      std::ostringstream os;
      os << "element " << j << ": got " << out[j] << ", exact " << want << ", error " << err << " above the bound "
         << bound;
      return os.str();
    }
    err_sum += err;
    var_sum += b[j].variance / (divisor * divisor);
    slack_sum += (store + 0x1p-20) * (std::fabs(want) + b[j].bound / divisor);
  }
  if (Stochastic(c) && std::fabs(err_sum) > 6 * std::sqrt(var_sum) + slack_sum) {
    std::ostringstream os;
    os << "the errors sum to " << err_sum << ", beyond 6 standard deviations (" << 6 * std::sqrt(var_sum) << ")";
    return os.str();
  }
  return "";
}

// Residuals of every rank's compressor, as doubles (fp32 compressors: exact).
std::vector<std::vector<double>> Residuals(const std::vector<gcclCompressor_t>& comp, gcclDataType_t dt, size_t n) {
  std::vector<std::vector<double>> res;
  for (gcclCompressor_t c : comp) {
    std::vector<unsigned char> buf(n * gh::TypeSize(dt) + 8);
    EXPECT_EQ(gcclCompressorGetResidual(c, buf.data()), gcclSuccess);
    res.push_back(LoadAll(dt, buf.data(), n));
  }
  return res;
}

struct Compressors {
  Compressors(int p, const std::string& spec, size_t n, gcclDataType_t dt) : c(static_cast<size_t>(p), nullptr) {
    for (auto& x : c) EXPECT_EQ(gcclCompressorCreate(&x, spec.c_str(), n, dt), gcclSuccess) << spec;
  }
  ~Compressors() {
    for (auto x : c)
      if (x != nullptr) gcclCompressorDestroy(x);
  }
  std::vector<gcclCompressor_t> c;
};

std::string Describe(const std::string& spec, const char* algo, int p, size_t n, gcclDataType_t dt, gcclRedOp_t op,
                     bool inplace) {
  std::ostringstream os;
  os << "spec " << spec << ", algo " << (algo ? algo : "auto") << ", p " << p << ", count " << n << ", "
     << gh::TypeName(dt) << ", " << gh::OpName(op) << (inplace ? ", in place" : ", out of place");
  return os.str();
}

// ---- allreduce -------------------------------------------------------------------

struct AllReduceCase {
  const Codec* codec;
  std::string spec;
  const char* algo;  // nullptr (sra) or "ring-requant"
  size_t n;
  gcclDataType_t dt;
  gcclRedOp_t op;
  bool inplace;
  uint64_t seed;
};

// Runs one call on fresh compressors and checks it. True when all is well.
bool RunAllReduce(const Comms& comms, const AllReduceCase& k) {
  const int p = comms.size();
  const size_t n = k.n, sz = gh::TypeSize(k.dt);
  const std::string what = Describe(k.spec, k.algo, p, n, k.dt, k.op, k.inplace);
  std::vector<std::vector<double>> x(static_cast<size_t>(p), std::vector<double>(n));
  std::vector<std::vector<unsigned char>> send(static_cast<size_t>(p)), recv(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    for (size_t i = 0; i < n; ++i) x[r][i] = InputValue(k.dt, k.seed, r, i);
    send[r].resize(n * sz);
    recv[r].assign(n * sz, 0xEE);
    StoreAll(k.dt, k.inplace ? recv[r].data() : send[r].data(), x[r]);
  }
  Compressors comp(p, k.spec, n, k.dt);
  std::vector<gcclResult_t> res(static_cast<size_t>(p), gcclInternalError);
  comms.Run([&](int r, gcclComm_t comm) {
    const void* sb = k.inplace ? recv[r].data() : send[r].data();
    res[r] = gcclAllReduceCompressed(sb, recv[r].data(), n, k.dt, k.op, comp.c[r], comm, nullptr);
  });
  for (int r = 0; r < p; ++r)
    if (res[r] != gcclSuccess) {
      ADD_FAILURE() << what << ": rank " << r << " returned " << res[r] << ": " << gcclGetLastError(comms[r]);
      return false;
    }
  for (int r = 1; r < p; ++r)
    if (recv[r] != recv[0]) {
      ADD_FAILURE() << what << ": rank " << r << "'s output is not bit-identical to rank 0's";
      return false;
    }
  for (int r = 0; r < p && !k.inplace; ++r)
    if (LoadAll(k.dt, send[r].data(), n) != x[r]) {
      ADD_FAILURE() << what << ": rank " << r << "'s sendbuff changed";
      return false;
    }
  std::vector<double> exact(n, 0);
  for (int r = 0; r < p; ++r)
    for (size_t i = 0; i < n; ++i) exact[i] += x[r][i];
  const bool ring = k.algo != nullptr;
  std::vector<ElemBound> b = SumBounds(*k.codec, x, 0, n, ring, true);
  std::vector<double> out = LoadAll(k.dt, recv[0].data(), n);
  std::string why = CheckErrors(*k.codec, k.dt, out, exact, b, k.op == gcclAvg ? p : 1);
  if (!why.empty()) {
    ADD_FAILURE() << what << ": " << why;
    return false;
  }
  // With error feedback, one call from a zero residual: out + sum_r e_r = exact.
  if (k.spec.find("ef=1") != std::string::npos || k.codec->ef) {
    if (k.dt != gcclFloat32 || k.op != gcclSum) return true;  // residuals or output rounded: checked elsewhere
    std::vector<std::vector<double>> e = Residuals(comp.c, k.dt, n);
    for (size_t i = 0; i < n; ++i) {
      double total = out[i], mag = std::fabs(out[i]);
      for (int r = 0; r < p; ++r) total += e[r][i], mag += std::fabs(e[r][i]) + std::fabs(x[r][i]);
      if (std::fabs(total - exact[i]) > (p + 4) * 0x1p-21 * mag) {
        ADD_FAILURE() << what << ": element " << i << ": output + residuals = " << total << ", inputs sum to "
                      << exact[i];
        return false;
      }
    }
  }
  return true;
}

std::vector<size_t> MatrixCounts(int p) {
  std::vector<size_t> v = {0, 1, static_cast<size_t>(p - 1), 7, 1000, 4099};
  return v;
}

void AllReduceMatrix(const char* algo) {
  int failures = 0;
  for (int p = 1; p <= kMaxRanks && failures < kMaxFailures; ++p) {
    Comms comms(p, algo);
    ASSERT_EQ(comms.result(), gcclSuccess);
    for (const Codec& codec : kCodecs) {
      std::vector<size_t> counts = MatrixCounts(p);
      for (size_t ci = 0; ci < counts.size() && failures < kMaxFailures; ++ci) {
        // odd positions add error feedback (telescoping checked on one call)
        std::string spec = ci % 2 ? WithEf(codec) : std::string(codec.spec);
        for (int variant = 0; variant < 2; ++variant) {
          AllReduceCase k{&codec,       spec,
                          algo,         counts[ci],
                          gcclFloat32,  variant ? gcclAvg : gcclSum,
                          variant == 1, gh::Mix64(static_cast<uint64_t>(p * 1000 + ci * 10 + variant) ^ codec.spec[0])};
          if (!RunAllReduce(comms, k)) ++failures;
        }
      }
    }
  }
}

TEST(CompressedAllReduce, SraEveryCodecRankCountOpInPlace) {
  AllReduceMatrix(nullptr);
}

TEST(CompressedAllReduce, RingRequantEveryCodecRankCountOpInPlace) {
  AllReduceMatrix("ring-requant");
}

// Segments of 50 elements: every chunk of the matrix's larger counts goes as up to
// 4 frames, handled as they arrive (empty ones among them for 7 and p - 1).
class SmallRingRequantSegments {
 public:
  SmallRingRequantSegments() : saved_(ring_requant_segment_elems) { ring_requant_segment_elems = 50; }
  ~SmallRingRequantSegments() { ring_requant_segment_elems = saved_; }

 private:
  size_t saved_;
};

TEST(CompressedAllReduce, RingRequantInSegmentsEveryCodecRankCountOpInPlace) {
  SmallRingRequantSegments segments;
  AllReduceMatrix("ring-requant");
}

TEST(CompressedAllReduce, HalfBfloatDoubleDatatypes) {
  int failures = 0;
  for (const char* algo : {static_cast<const char*>(nullptr), "ring-requant"}) {
    Comms comms(3, algo);
    ASSERT_EQ(comms.result(), gcclSuccess);
    for (const Codec& codec : kCodecs)
      for (gcclDataType_t dt : {gcclFloat16, gcclBfloat16, gcclFloat64}) {
        AllReduceCase k{&codec,
                        codec.spec,
                        algo,
                        1000,
                        dt,
                        dt == gcclFloat64 ? gcclAvg : gcclSum,
                        dt == gcclBfloat16,
                        gh::Mix64(static_cast<uint64_t>(dt) * 77 + codec.spec[1])};
        if (failures < kMaxFailures && !RunAllReduce(comms, k)) ++failures;
      }
  }
}

// A stochastic codec's errors average out; a missing or doubled chunk does not.
TEST(CompressedAllReduce, StochasticCodecsUnbiasedOnLargeCounts) {
  Comms comms(4, nullptr);
  ASSERT_EQ(comms.result(), gcclSuccess);
  for (const Codec& codec : kCodecs) {
    if (!Stochastic(codec)) continue;
    AllReduceCase k{&codec, codec.spec, nullptr, 40000, gcclFloat32, gcclSum, false, 99};
    EXPECT_TRUE(RunAllReduce(comms, k));
  }
}

// Over several calls with error feedback: sum_t out_t + sum_r e_r = sum_t sum_r g_t.
TEST(CompressedAllReduce, ErrorFeedbackTelescopesOverCalls) {
  constexpr int kCalls = 5;
  int failures = 0;
  SmallRingRequantSegments segments;  // ring-requant's 1000 elements in segments
  for (const char* algo : {static_cast<const char*>(nullptr), "ring-requant"})
    for (int p : {1, 2, 3, 5, 8}) {
      Comms comms(p, algo);
      ASSERT_EQ(comms.result(), gcclSuccess);
      for (const Codec& codec : kCodecs)
        for (size_t n : {size_t{1}, size_t{7}, size_t{1000}}) {
          if (failures >= kMaxFailures) return;
          const std::string spec = WithEf(codec);
          Compressors comp(p, spec, n, gcclFloat32);
          std::vector<double> lhs(n, 0), rhs(n, 0), mag(n, 0);
          std::vector<std::vector<float>> buf(static_cast<size_t>(p), std::vector<float>(n));
          bool ok = true;
          for (int t = 0; t < kCalls && ok; ++t) {
            for (int r = 0; r < p; ++r)
              for (size_t i = 0; i < n; ++i) {
                buf[r][i] = static_cast<float>(InputValue(gcclFloat32, 1000 + t, r, i));
                rhs[i] += buf[r][i];
                mag[i] += std::fabs(buf[r][i]);
              }
            std::vector<gcclResult_t> res(static_cast<size_t>(p), gcclInternalError);
            comms.Run([&](int r, gcclComm_t comm) {  // in place
              res[r] = gcclAllReduceCompressed(buf[r].data(), buf[r].data(), n, gcclFloat32, gcclSum, comp.c[r], comm,
                                               nullptr);
            });
            for (int r = 0; r < p; ++r) ok = ok && res[r] == gcclSuccess;
            for (size_t i = 0; i < n && ok; ++i) lhs[i] += buf[0][i], mag[i] += std::fabs(buf[0][i]);
          }
          const std::string what = Describe(spec, algo, p, n, gcclFloat32, gcclSum, true);
          if (!ok) {
            ADD_FAILURE() << what << ": a call failed: " << gcclGetLastError(comms[0]);
            ++failures;
            continue;
          }
          std::vector<std::vector<double>> e = Residuals(comp.c, gcclFloat32, n);
          for (size_t i = 0; i < n; ++i) {
            double total = lhs[i], m = mag[i];
            for (int r = 0; r < p; ++r) total += e[r][i], m += std::fabs(e[r][i]);
            // every value passes through O(p) fp32 operations per call
            if (std::fabs(total - rhs[i]) > (p + 4) * kCalls * 0x1p-21 * m) {
              ADD_FAILURE() << what << ": element " << i << " after " << kCalls
                            << " calls: outputs + residuals = " << total << ", inputs sum to " << rhs[i];
              ++failures;
              break;
            }
          }
        }
    }
}

// inf or NaN at index i on one rank: non-finite at i on every rank, finite elsewhere.
TEST(CompressedAllReduce, NonFiniteInputsStayNonFiniteEverywhere) {
  const size_t n = 1000;
  const size_t nan_at = 17, inf_at = 600, ninf_at = n - 1;
  for (const char* algo : {static_cast<const char*>(nullptr), "ring-requant"})
    for (int p : {2, 5}) {
      Comms comms(p, algo);
      ASSERT_EQ(comms.result(), gcclSuccess);
      for (const Codec& codec : kCodecs) {
        Compressors comp(p, codec.spec, n, gcclFloat32);
        std::vector<std::vector<float>> buf(static_cast<size_t>(p), std::vector<float>(n));
        for (int r = 0; r < p; ++r)
          for (size_t i = 0; i < n; ++i) buf[r][i] = static_cast<float>(InputValue(gcclFloat32, 5, r, i));
        buf[p - 1][nan_at] = std::numeric_limits<float>::quiet_NaN();
        buf[p - 1][inf_at] = std::numeric_limits<float>::infinity();
        buf[0][ninf_at] = -std::numeric_limits<float>::infinity();
        std::vector<gcclResult_t> res(static_cast<size_t>(p), gcclInternalError);
        comms.Run([&](int r, gcclComm_t comm) {
          res[r] =
              gcclAllReduceCompressed(buf[r].data(), buf[r].data(), n, gcclFloat32, gcclSum, comp.c[r], comm, nullptr);
        });
        const std::string what = Describe(codec.spec, algo, p, n, gcclFloat32, gcclSum, true);
        for (int r = 0; r < p; ++r) {
          ASSERT_EQ(res[r], gcclSuccess) << what << ": rank " << r << ": " << gcclGetLastError(comms[r]);
          EXPECT_EQ(std::memcmp(buf[r].data(), buf[0].data(), n * sizeof(float)), 0)
              << what << ": rank " << r << " differs from rank 0";
        }
        for (size_t i = 0; i < n; ++i) {
          bool special = i == nan_at || i == inf_at || i == ninf_at;
          EXPECT_EQ(std::isfinite(buf[0][i]), !special) << what << ": element " << i << " is " << buf[0][i];
        }
      }
    }
}

// Ranks whose compressors have different specs: gcclInvalidUsage everywhere, and no
// residual changes.
TEST(CompressedAllReduce, DifferentSpecsAreInvalidUsageAndKeepResiduals) {
  const int p = 3;
  const size_t n = 100;
  Comms comms(p, nullptr);
  ASSERT_EQ(comms.result(), gcclSuccess);
  std::vector<gcclCompressor_t> comp(p, nullptr);
  std::vector<float> init(n);
  for (size_t i = 0; i < n; ++i) init[i] = 0.01f * static_cast<float>(i);
  for (int r = 0; r < p; ++r) {
    ASSERT_EQ(gcclCompressorCreate(&comp[r], r == 1 ? "uniform:bits=8,ef=1" : "uniform:bits=4,ef=1", n, gcclFloat32),
              gcclSuccess);
    ASSERT_EQ(gcclCompressorSetResidual(comp[r], init.data()), gcclSuccess);
  }
  std::vector<std::vector<float>> send(p, std::vector<float>(n, 1.0f)), recv(p, std::vector<float>(n, 0.0f));
  std::vector<gcclResult_t> res(p, gcclSuccess);
  comms.Run([&](int r, gcclComm_t comm) {
    res[r] = gcclAllReduceCompressed(send[r].data(), recv[r].data(), n, gcclFloat32, gcclSum, comp[r], comm, nullptr);
  });
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(res[r], gcclInvalidUsage) << "rank " << r;
    std::vector<float> e(n);
    ASSERT_EQ(gcclCompressorGetResidual(comp[r], e.data()), gcclSuccess);
    EXPECT_EQ(e, init) << "rank " << r << "'s residual changed";
    EXPECT_EQ(recv[r], std::vector<float>(n, 0.0f)) << "rank " << r << "'s recvbuff was written";
    gcclCompressorDestroy(comp[r]);
  }
}

// Codec none: the dense collectives, bit for bit (non-integer inputs, so a
// different summation order would show), for allreduce, allgather and
// reduce-scatter, p = 1..8.
TEST(CompressedCollectives, NoneIsTheDenseCallBitForBit) {
  for (int p = 1; p <= kMaxRanks; ++p) {
    Comms comms(p, nullptr);
    ASSERT_EQ(comms.result(), gcclSuccess);
    for (size_t n : MatrixCounts(p)) {
      std::vector<gcclCompressor_t> comp(p, nullptr);
      std::vector<std::vector<float>> send(p, std::vector<float>(n * p));
      for (int r = 0; r < p; ++r) {
        ASSERT_EQ(gcclCompressorCreate(&comp[r], "none", n, gcclFloat32), gcclSuccess);
        for (size_t i = 0; i < n * p; ++i) send[r][i] = static_cast<float>(InputValue(gcclFloat32, n, r, i));
      }
      using Call = std::function<gcclResult_t(int, gcclComm_t, const float*, float*, gcclCompressor_t)>;
      struct Pair {
        const char* name;
        size_t out;
        Call dense, compressed;
      } pairs[] = {
          {"allreduce", n,
           [&](int, gcclComm_t c, const float* s, float* o, gcclCompressor_t) {
             return gcclAllReduce(s, o, n, gcclFloat32, gcclSum, c, nullptr);
           },
           [&](int, gcclComm_t c, const float* s, float* o, gcclCompressor_t k) {
             return gcclAllReduceCompressed(s, o, n, gcclFloat32, gcclSum, k, c, nullptr);
           }},
          {"allgather", n * p,
           [&](int, gcclComm_t c, const float* s, float* o, gcclCompressor_t) {
             return gcclAllGather(s, o, n, gcclFloat32, c, nullptr);
           },
           [&](int, gcclComm_t c, const float* s, float* o, gcclCompressor_t k) {
             return gcclAllGatherCompressed(s, o, n, gcclFloat32, k, c, nullptr);
           }},
      };
      for (const Pair& pr : pairs) {
        std::vector<std::vector<float>> want(p, std::vector<float>(pr.out)), got(p, std::vector<float>(pr.out));
        std::vector<gcclResult_t> rd(p), rc(p);
        comms.Run([&](int r, gcclComm_t c) {
          rd[r] = pr.dense(r, c, send[r].data(), want[r].data(), comp[r]);
          rc[r] = pr.compressed(r, c, send[r].data(), got[r].data(), comp[r]);
        });
        for (int r = 0; r < p; ++r) {
          ASSERT_EQ(rd[r], gcclSuccess) << pr.name << " p " << p << " n " << n;
          ASSERT_EQ(rc[r], gcclSuccess) << pr.name << " p " << p << " n " << n;
          EXPECT_TRUE(pr.out == 0 || std::memcmp(want[r].data(), got[r].data(), pr.out * sizeof(float)) == 0)
              << pr.name << " p " << p << " n " << n << " rank " << r;
        }
      }
      // reduce-scatter: n elements out of n * p, with a compressor of n * p
      std::vector<std::vector<float>> want(p, std::vector<float>(n)), got(p, std::vector<float>(n));
      std::vector<gcclCompressor_t> big(p, nullptr);
      for (int r = 0; r < p; ++r) ASSERT_EQ(gcclCompressorCreate(&big[r], "none", n * p, gcclFloat32), gcclSuccess);
      std::vector<gcclResult_t> rd(p), rc(p);
      comms.Run([&](int r, gcclComm_t c) {
        rd[r] = gcclReduceScatter(send[r].data(), want[r].data(), n, gcclFloat32, gcclSum, c, nullptr);
        rc[r] = gcclReduceScatterCompressed(send[r].data(), got[r].data(), n, gcclFloat32, gcclSum, big[r], c, nullptr);
      });
      for (int r = 0; r < p; ++r) {
        ASSERT_EQ(rd[r], gcclSuccess);
        ASSERT_EQ(rc[r], gcclSuccess) << gcclGetLastError(comms[r]);
        EXPECT_TRUE(n == 0 || std::memcmp(want[r].data(), got[r].data(), n * sizeof(float)) == 0)
            << "reducescatter p " << p << " n " << n << " rank " << r;
        gcclCompressorDestroy(big[r]);
        gcclCompressorDestroy(comp[r]);
      }
    }
  }
}

// Arguments a compressor does not fit: gcclInvalidArgument with a message.
TEST(CompressedCollectives, WrongCountDatatypeOpAreInvalidArgument) {
  struct Bad {
    const char* name;
    std::function<gcclResult_t(gcclComm_t, gcclCompressor_t, float*)> call;
    std::vector<std::string> words;
  };
  const std::vector<Bad> bad = {
      {"allreduce count",
       [](gcclComm_t cm, gcclCompressor_t c, float* b) {
         return gcclAllReduceCompressed(b, b, 11, gcclFloat32, gcclSum, c, cm, nullptr);
       },
       {"elements", "count"}},
      {"allreduce datatype",
       [](gcclComm_t cm, gcclCompressor_t c, float* b) {
         return gcclAllReduceCompressed(b, b, 10, gcclFloat16, gcclSum, c, cm, nullptr);
       },
       {"float16", "datatype"}},
      {"allreduce op",
       [](gcclComm_t cm, gcclCompressor_t c, float* b) {
         return gcclAllReduceCompressed(b, b, 10, gcclFloat32, gcclMax, c, cm, nullptr);
       },
       {"sum"}},
      {"allgather count",
       [](gcclComm_t cm, gcclCompressor_t c, float* b) {
         return gcclAllGatherCompressed(b, b + 20, 9, gcclFloat32, c, cm, nullptr);
       },
       {"elements", "count"}},
      {"reducescatter count",
       [](gcclComm_t cm, gcclCompressor_t c, float* b) {
         return gcclReduceScatterCompressed(b, b + 20, 10, gcclFloat32, gcclSum, c, cm, nullptr);
       },
       {"elements", "count"}},  // the tensor is nranks * recvcount = 20
      {"null compressor",
       [](gcclComm_t cm, gcclCompressor_t, float* b) {
         return gcclAllReduceCompressed(b, b, 10, gcclFloat32, gcclSum, nullptr, cm, nullptr);
       },
       {"compressor"}},
  };
  for (const Bad& k : bad) {
    Comms comms(2, nullptr);  // fresh: a failed call may mark a communicator
    ASSERT_EQ(comms.result(), gcclSuccess);
    Compressors comp(2, "uniform:bits=8", 10, gcclFloat32);
    std::vector<std::vector<float>> buf(2, std::vector<float>(64, 1.0f));
    std::vector<gcclResult_t> res(2, gcclSuccess);
    std::vector<std::string> msg(2);
    comms.Run([&](int r, gcclComm_t comm) {
      res[r] = k.call(comm, comp.c[r], buf[r].data());
      msg[r] = gcclGetLastError(comm);
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(res[r], gcclInvalidArgument) << k.name << ", rank " << r;
      EXPECT_TRUE(gh::MentionsAny(msg[r].c_str(), k.words)) << k.name;
    }
  }
}

// ---- allgather and reduce-scatter ----------------------------------------------------

// AllGather: slot r of every rank = rank r's decoded frame (own slot included).
bool RunAllGather(const Comms& comms, const Codec& codec, const std::string& spec, size_t n, gcclDataType_t dt,
                  bool inplace, uint64_t seed) {
  const int p = comms.size();
  const size_t sz = gh::TypeSize(dt), total = static_cast<size_t>(p) * n;
  const std::string what = "allgather " + Describe(spec, nullptr, p, n, dt, gcclSum, inplace);
  std::vector<std::vector<double>> x(static_cast<size_t>(p), std::vector<double>(n));
  std::vector<std::vector<unsigned char>> send(static_cast<size_t>(p)), recv(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    for (size_t i = 0; i < n; ++i) x[r][i] = InputValue(dt, seed, r, i);
    send[r].resize(n * sz);
    recv[r].assign(total * sz, 0xEE);
    StoreAll(dt, inplace ? recv[r].data() + static_cast<size_t>(r) * n * sz : send[r].data(), x[r]);
  }
  Compressors comp(p, spec, n, dt);
  std::vector<gcclResult_t> res(static_cast<size_t>(p), gcclInternalError);
  comms.Run([&](int r, gcclComm_t comm) {
    const void* sb = inplace ? recv[r].data() + static_cast<size_t>(r) * n * sz : send[r].data();
    res[r] = gcclAllGatherCompressed(sb, recv[r].data(), n, dt, comp.c[r], comm, nullptr);
  });
  for (int r = 0; r < p; ++r)
    if (res[r] != gcclSuccess) {
      ADD_FAILURE() << what << ": rank " << r << " returned " << res[r] << ": " << gcclGetLastError(comms[r]);
      return false;
    }
  for (int r = 1; r < p; ++r)
    if (recv[r] != recv[0]) {
      ADD_FAILURE() << what << ": rank " << r << "'s output is not bit-identical to rank 0's";
      return false;
    }
  for (int r = 0; r < p && !inplace; ++r)
    if (LoadAll(dt, send[r].data(), n) != x[r]) {
      ADD_FAILURE() << what << ": rank " << r << "'s sendbuff changed";
      return false;
    }
  std::vector<double> out = LoadAll(dt, recv[0].data(), total);
  std::vector<std::vector<double>> e;
  const bool ef = spec.find("ef=1") != std::string::npos || codec.ef;
  if (ef && dt == gcclFloat32) e = Residuals(comp.c, dt, n);
  for (int r = 0; r < p; ++r) {
    std::vector<double> slot(out.begin() + static_cast<long>(r * n), out.begin() + static_cast<long>((r + 1) * n));
    std::vector<ElemBound> b = SumBounds(codec, {x[r]}, 0, n, false, false);
    std::string why = CheckErrors(codec, dt, slot, x[r], b, 1);
    if (!why.empty()) {
      ADD_FAILURE() << what << ": slot " << r << ": " << why;
      return false;
    }
    // the own slot is decoded, not copied: a codec that loses bits for dt changes
    // some of 1000 values (fp16 and bf16 inputs fit fp16 frames; bf16 ones bf16)
    const bool lossy = !(codec.kind == Kind::Fp16 && (dt == gcclFloat16 || dt == gcclBfloat16)) &&
                       !(codec.kind == Kind::Bf16 && dt == gcclBfloat16);
    if (lossy && n >= 1000 && slot == x[r]) {
      ADD_FAILURE() << what << ": slot " << r << " holds the raw input, not its decoded frame";
      return false;
    }
    for (size_t i = 0; i < (e.empty() ? 0 : n); ++i)
      if (std::fabs(slot[i] + e[r][i] - x[r][i]) > 0x1p-22 * (std::fabs(x[r][i]) + std::fabs(e[r][i]))) {
        ADD_FAILURE() << what << ": slot " << r << " element " << i << ": decoded + residual != input";
        return false;
      }
  }
  return true;
}

// ReduceScatter: rank r's recvbuff = sum over ranks of slot r, compressed once.
bool RunReduceScatter(const Comms& comms, const Codec& codec, const std::string& spec, size_t n, gcclDataType_t dt,
                      gcclRedOp_t op, bool inplace, uint64_t seed) {
  const int p = comms.size();
  const size_t sz = gh::TypeSize(dt), total = static_cast<size_t>(p) * n;
  const std::string what = "reducescatter " + Describe(spec, nullptr, p, n, dt, op, inplace);
  std::vector<std::vector<double>> x(static_cast<size_t>(p), std::vector<double>(total));
  std::vector<std::vector<unsigned char>> send(static_cast<size_t>(p)), recv(static_cast<size_t>(p));
  for (int r = 0; r < p; ++r) {
    for (size_t i = 0; i < total; ++i) x[r][i] = InputValue(dt, seed, r, i);
    send[r].resize(total * sz);
    StoreAll(dt, send[r].data(), x[r]);
    recv[r].assign(n * sz, 0xEE);
  }
  Compressors comp(p, spec, total, dt);
  std::vector<gcclResult_t> res(static_cast<size_t>(p), gcclInternalError);
  comms.Run([&](int r, gcclComm_t comm) {
    void* rb = inplace ? send[r].data() + static_cast<size_t>(r) * n * sz : recv[r].data();
    res[r] = gcclReduceScatterCompressed(send[r].data(), rb, n, dt, op, comp.c[r], comm, nullptr);
  });
  const bool ef = spec.find("ef=1") != std::string::npos || codec.ef;
  std::vector<std::vector<double>> e;
  if (ef && dt == gcclFloat32 && op == gcclSum) e = Residuals(comp.c, dt, total);
  for (int r = 0; r < p; ++r) {
    if (res[r] != gcclSuccess) {
      ADD_FAILURE() << what << ": rank " << r << " returned " << res[r] << ": " << gcclGetLastError(comms[r]);
      return false;
    }
    if (!inplace && LoadAll(dt, send[r].data(), total) != x[r]) {
      ADD_FAILURE() << what << ": rank " << r << "'s sendbuff changed";
      return false;
    }
    const unsigned char* o = inplace ? send[r].data() + static_cast<size_t>(r) * n * sz : recv[r].data();
    std::vector<double> out = LoadAll(dt, o, n);
    std::vector<double> exact(n, 0);
    for (int q = 0; q < p; ++q)
      for (size_t i = 0; i < n; ++i) exact[i] += x[q][static_cast<size_t>(r) * n + i];
    std::vector<ElemBound> b = SumBounds(codec, x, static_cast<size_t>(r) * n, n, false, false);
    std::string why = CheckErrors(codec, dt, out, exact, b, op == gcclAvg ? p : 1);
    if (!why.empty()) {
      ADD_FAILURE() << what << ": rank " << r << ": " << why;
      return false;
    }
    for (size_t i = 0; i < (e.empty() ? 0 : n); ++i) {
      double tot = out[i], mag = std::fabs(out[i]);
      for (int q = 0; q < p; ++q) {
        double eq = e[q][static_cast<size_t>(r) * n + i];
        tot += eq, mag += std::fabs(eq) + std::fabs(x[q][static_cast<size_t>(r) * n + i]);
      }
      if (std::fabs(tot - exact[i]) > (p + 4) * 0x1p-21 * mag) {
        ADD_FAILURE() << what << ": rank " << r << " element " << i << ": output + residuals = " << tot
                      << ", inputs sum to " << exact[i];
        return false;
      }
    }
  }
  return true;
}

std::vector<size_t> GatherCounts() {
  return {0, 1, 2, 7, 1000};
}

TEST(CompressedAllGather, EveryCodecRankCountInPlace) {
  int failures = 0;
  for (int p = 1; p <= kMaxRanks; ++p) {
    Comms comms(p, nullptr);
    ASSERT_EQ(comms.result(), gcclSuccess);
    for (const Codec& codec : kCodecs) {
      std::vector<size_t> counts = GatherCounts();
      for (size_t ci = 0; ci < counts.size(); ++ci) {
        std::string spec = ci % 2 ? WithEf(codec) : std::string(codec.spec);
        for (int inplace = 0; inplace < 2; ++inplace) {
          if (failures >= kMaxFailures) return;
          if (!RunAllGather(comms, codec, spec, counts[ci], gcclFloat32, inplace != 0,
                            static_cast<uint64_t>(p * 100 + ci * 2 + inplace)))
            ++failures;
        }
      }
    }
  }
}

TEST(CompressedReduceScatter, EveryCodecRankCountOpInPlace) {
  int failures = 0;
  for (int p = 1; p <= kMaxRanks; ++p) {
    Comms comms(p, nullptr);
    ASSERT_EQ(comms.result(), gcclSuccess);
    for (const Codec& codec : kCodecs) {
      std::vector<size_t> counts = GatherCounts();
      for (size_t ci = 0; ci < counts.size(); ++ci) {
        std::string spec = ci % 2 ? WithEf(codec) : std::string(codec.spec);
        for (int variant = 0; variant < 2; ++variant) {
          if (failures >= kMaxFailures) return;
          if (!RunReduceScatter(comms, codec, spec, counts[ci], gcclFloat32, variant ? gcclAvg : gcclSum, variant == 1,
                                static_cast<uint64_t>(p * 100 + ci * 2 + variant)))
            ++failures;
        }
      }
    }
  }
}

TEST(CompressedCollectives, AllGatherReduceScatterHalfBfloatDouble) {
  Comms comms(3, nullptr);
  ASSERT_EQ(comms.result(), gcclSuccess);
  for (const Codec& codec : kCodecs)
    for (gcclDataType_t dt : {gcclFloat16, gcclBfloat16, gcclFloat64}) {
      EXPECT_TRUE(RunAllGather(comms, codec, codec.spec, 1000, dt, dt == gcclFloat16, 7));
      EXPECT_TRUE(RunReduceScatter(comms, codec, codec.spec, 333, dt, dt == gcclBfloat16 ? gcclAvg : gcclSum,
                                   dt == gcclFloat64, 8));
    }
}

}  // namespace
