// test_reduce.cc — datatypes (dtype.c) and reduction kernels (reduce.c) against scalar references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

extern "C" {
#include "common/dtype.h"
#include "common/reduce.h"
}

namespace {

const gcclDataType_t kAllTypes[] = {gcclInt8,   gcclUint8,   gcclInt32,   gcclUint32,  gcclInt64,
                                    gcclUint64, gcclFloat16, gcclFloat32, gcclFloat64, gcclBfloat16};
const gcclRedOp_t kAllOps[] = {gcclSum, gcclProd, gcclMax, gcclMin, gcclAvg};

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

bool HalfIsNan(uint16_t h) {
  return (h & 0x7fffu) > 0x7c00u;
}
bool Bf16IsNan(uint16_t b) {
  return (b & 0x7fffu) > 0x7f80u;
}

// ---- scalar reference ------------------------------------------------------------

// Integers combine in the unsigned type of the same width (wrap-around).
template <typename T>
T RefIntOp(T a, T b, gcclRedOp_t op) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case gcclProd:
      return static_cast<T>(static_cast<U>(static_cast<uint64_t>(static_cast<U>(a)) * static_cast<U>(b)));
    case gcclMax:
      return a > b ? a : b;
    case gcclMin:
      return a < b ? a : b;
    default:
      return static_cast<T>(static_cast<U>(static_cast<uint64_t>(static_cast<U>(a)) + static_cast<U>(b)));
  }
}

// Floats: IEEE ops; max/min return a NaN operand, else the larger/smaller, else b on ties.
template <typename F>
F RefFloatOp(F a, F b, gcclRedOp_t op) {
  switch (op) {
    case gcclProd:
      return a * b;
    case gcclMax:
      if (std::isnan(a)) return a;
      if (std::isnan(b)) return b;
      return a > b ? a : b;
    case gcclMin:
      if (std::isnan(a)) return a;
      if (std::isnan(b)) return b;
      return a < b ? a : b;
    default:
      return a + b;
  }
}

template <typename T>
void RefNative(void* dst, const std::vector<const void*>& srcs, size_t count, gcclRedOp_t op) {
  for (size_t i = 0; i < count; i++) {
    T acc;
    std::memcpy(&acc, static_cast<const char*>(srcs[0]) + i * sizeof(T), sizeof(T));
    for (size_t k = 1; k < srcs.size(); k++) {
      T v;
      std::memcpy(&v, static_cast<const char*>(srcs[k]) + i * sizeof(T), sizeof(T));
      if constexpr (std::is_integral_v<T>)
        acc = RefIntOp<T>(acc, v, op);
      else
        acc = RefFloatOp<T>(acc, v, op);
    }
    std::memcpy(static_cast<char*>(dst) + i * sizeof(T), &acc, sizeof(T));
  }
}

// fp16/bf16: accumulate in fp32, round once, with dtype.c's conversions.
void RefHalf(void* dst, const std::vector<const void*>& srcs, size_t count, gcclRedOp_t op, bool bf16) {
  auto widen = bf16 ? bf16_to_float : half_to_float;
  auto narrow = bf16 ? float_to_bf16 : float_to_half;
  for (size_t i = 0; i < count; i++) {
    float acc = widen(static_cast<const uint16_t*>(srcs[0])[i]);
    for (size_t k = 1; k < srcs.size(); k++)
      acc = RefFloatOp<float>(acc, widen(static_cast<const uint16_t*>(srcs[k])[i]), op);
    static_cast<uint16_t*>(dst)[i] = narrow(acc);
  }
}

void Reference(void* dst, const std::vector<const void*>& srcs, size_t count, gcclDataType_t dt, gcclRedOp_t op) {
  switch (dt) {
    case gcclInt8:
      return RefNative<int8_t>(dst, srcs, count, op);
    case gcclUint8:
      return RefNative<uint8_t>(dst, srcs, count, op);
    case gcclInt32:
      return RefNative<int32_t>(dst, srcs, count, op);
    case gcclUint32:
      return RefNative<uint32_t>(dst, srcs, count, op);
    case gcclInt64:
      return RefNative<int64_t>(dst, srcs, count, op);
    case gcclUint64:
      return RefNative<uint64_t>(dst, srcs, count, op);
    case gcclFloat32:
      return RefNative<float>(dst, srcs, count, op);
    case gcclFloat64:
      return RefNative<double>(dst, srcs, count, op);
    case gcclFloat16:
      return RefHalf(dst, srcs, count, op, false);
    case gcclBfloat16:
      return RefHalf(dst, srcs, count, op, true);
    default:
      FAIL() << "bad dtype";
  }
}

// Element i of two buffers are equal: same bits, or both NaN for floating types.
bool SameElement(const void* a, const void* b, size_t i, gcclDataType_t dt) {
  size_t sz = dtype_size(dt);
  const char* pa = static_cast<const char*>(a) + i * sz;
  const char* pb = static_cast<const char*>(b) + i * sz;
  if (std::memcmp(pa, pb, sz) == 0) return true;
  if (dt == gcclFloat32) {
    float x, y;
    std::memcpy(&x, pa, 4), std::memcpy(&y, pb, 4);
    return std::isnan(x) && std::isnan(y);
  }
  if (dt == gcclFloat64) {
    double x, y;
    std::memcpy(&x, pa, 8), std::memcpy(&y, pb, 8);
    return std::isnan(x) && std::isnan(y);
  }
  if (dt == gcclFloat16 || dt == gcclBfloat16) {
    uint16_t x, y;
    std::memcpy(&x, pa, 2), std::memcpy(&y, pb, 2);
    return dt == gcclFloat16 ? HalfIsNan(x) && HalfIsNan(y) : Bf16IsNan(x) && Bf16IsNan(y);
  }
  return false;
}

std::string Hex(const void* p, size_t i, size_t sz) {
  std::string s = "0x";
  char buf[3];
  for (size_t b = sz; b-- > 0;) {  // little-endian: print most significant byte first
    std::snprintf(buf, sizeof buf, "%02x", static_cast<const unsigned char*>(p)[i * sz + b]);
    s += buf;
  }
  return s;
}

// ---- test data -----------------------------------------------------------------

// Random elements of dt: integers over their full range (so sums and products
// wrap); floats mostly small values, plus random bit patterns (huge, tiny,
// subnormal, NaN) and a few specials.
void FillRandom(void* buf, size_t count, gcclDataType_t dt, std::mt19937_64& rng) {
  size_t sz = dtype_size(dt);
  std::uniform_real_distribution<double> small(-4.0, 4.0);
  std::uniform_int_distribution<int> pick(0, 99);
  const double specials[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e-40, -1e-300, 65504.0, 1e38};
  for (size_t i = 0; i < count; i++) {
    char* p = static_cast<char*>(buf) + i * sz;
    uint64_t bits = rng();
    if (!dtype_is_float(dt)) {
      std::memcpy(p, &bits, sz);  // little-endian: low bytes
      continue;
    }
    int r = pick(rng);
    bool use_bits = r < 25;
    double v = r < 30 ? specials[bits % (sizeof specials / sizeof specials[0])] : small(rng);
    switch (dt) {
      case gcclFloat32: {
        float f = static_cast<float>(v);
        if (use_bits) std::memcpy(&f, &bits, 4);
        std::memcpy(p, &f, 4);
        break;
      }
      case gcclFloat64: {
        if (use_bits) std::memcpy(&v, &bits, 8);
        std::memcpy(p, &v, 8);
        break;
      }
      case gcclFloat16:
      case gcclBfloat16: {
        uint16_t h = static_cast<uint16_t>(bits);
        if (!use_bits) {
          float f = static_cast<float>(v);
          h = dt == gcclFloat16 ? float_to_half(f) : float_to_bf16(f);
        }
        std::memcpy(p, &h, 2);
        break;
      }
      default:
        break;
    }
  }
}

enum Alias { kNoAlias, kDstIsFirst, kDstIsLast, kDstIsMiddle };

// One reduce_n call against the reference. Sources start one element past an
// aligned allocation (so vector loops see misaligned pointers), and dst has a
// guard element on each side that must survive.
testing::AssertionResult CheckReduce(gcclDataType_t dt, gcclRedOp_t op, int nsrc, size_t count, Alias alias,
                                     uint64_t seed) {
  std::mt19937_64 rng(seed);
  size_t sz = dtype_size(dt);
  std::vector<std::vector<char>> bufs(nsrc, std::vector<char>((count + 2) * sz));
  for (auto& b : bufs) FillRandom(b.data() + sz, count, dt, rng);
  std::vector<const void*> srcs;
  for (auto& b : bufs) srcs.push_back(b.data() + sz);

  std::vector<char> expect(count * sz + 1);
  Reference(expect.data(), srcs, count, dt, op);

  std::vector<char> own(((count + 2) * sz));
  char* dst_buf = alias == kNoAlias      ? own.data()
                  : alias == kDstIsFirst ? bufs[0].data()
                  : alias == kDstIsLast  ? bufs[nsrc - 1].data()
                                         : bufs[nsrc / 2].data();
  std::vector<char> guard(sz);
  FillRandom(guard.data(), 1, dt, rng);
  std::memcpy(dst_buf, guard.data(), sz);
  std::memcpy(dst_buf + (count + 1) * sz, guard.data(), sz);
  void* dst = dst_buf + sz;

  reduce_n(dst, srcs.data(), nsrc, count, dt, op);

  std::string where = std::string(dtype_name(dt)) + " " + op_name(op) + " nsrc=" + std::to_string(nsrc) +
                      " count=" + std::to_string(count) + " alias=" + std::to_string(alias);
  for (size_t i = 0; i < count; i++) {
    if (!SameElement(dst, expect.data(), i, dt))
      return testing::AssertionFailure() << where << ": element " << i << " is " << Hex(dst, i, sz) << ", expected "
                                         << Hex(expect.data(), i, sz);
  }
  if (std::memcmp(dst_buf, guard.data(), sz) != 0 || std::memcmp(dst_buf + (count + 1) * sz, guard.data(), sz) != 0)
    return testing::AssertionFailure() << where << ": wrote outside [0, count)";
  return testing::AssertionSuccess();
}

// ---- dtype.c: sizes and names ------------------------------------------------------

TEST(Dtype, SizesNamesAndKinds) {
  const size_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
  const char* names[] = {"int8",   "uint8",   "int32",   "uint32",  "int64",
                         "uint64", "float16", "float32", "float64", "bfloat16"};
  for (int t = 0; t < gcclNumTypes; t++) {
    auto dt = static_cast<gcclDataType_t>(t);
    EXPECT_EQ(dtype_size(dt), sizes[t]) << t;
    EXPECT_STREQ(dtype_name(dt), names[t]) << t;
    EXPECT_EQ(dtype_is_float(dt), t >= gcclFloat16 ? 1 : 0) << t;
  }
  EXPECT_EQ(dtype_size(gcclNumTypes), 0u);
  EXPECT_EQ(dtype_size(static_cast<gcclDataType_t>(-1)), 0u);
  EXPECT_STREQ(dtype_name(gcclNumTypes), "invalid");
  EXPECT_EQ(dtype_is_float(gcclNumTypes), 0);
  EXPECT_EQ(dtype_is_float(gcclInt32), 0);
  const char* ops[] = {"sum", "prod", "max", "min", "avg"};
  for (int o = 0; o < gcclNumOps; o++) EXPECT_STREQ(op_name(static_cast<gcclRedOp_t>(o)), ops[o]);
  EXPECT_STREQ(op_name(gcclNumOps), "invalid");
}

// ---- dtype.c: fp16 / bf16 conversions ------------------------------------------------

TEST(Dtype, HalfToFloatKnownValues) {
  EXPECT_EQ(FloatBits(half_to_float(0x0000)), 0x00000000u);
  EXPECT_EQ(FloatBits(half_to_float(0x8000)), 0x80000000u);  // -0 keeps its sign
  EXPECT_EQ(half_to_float(0x3c00), 1.0f);
  EXPECT_EQ(half_to_float(0xc000), -2.0f);
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(half_to_float(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(half_to_float(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(half_to_float(0x8201), -std::ldexp(513.0f, -24));
  EXPECT_EQ(half_to_float(0x7c00), INFINITY);
  EXPECT_EQ(half_to_float(0xfc00), -INFINITY);
  EXPECT_TRUE(std::isnan(half_to_float(0x7e00)));
  EXPECT_TRUE(std::isnan(half_to_float(0x7c01)));  // signalling NaN with the lowest payload bit
  EXPECT_TRUE(std::isnan(half_to_float(0xfc01)));
  // NaNs come out quiet with the payload kept, as x86 F16C does.
  EXPECT_EQ(FloatBits(half_to_float(0x7c01)), 0x7fc02000u);
  EXPECT_EQ(FloatBits(half_to_float(0xfe00)), 0xffc00000u);
}

TEST(Dtype, FloatToHalfRoundsToNearestEven) {
  const float one = 1.0f, u = std::ldexp(1.0f, -11);                // u: half an fp16 ulp at 1
  EXPECT_EQ(float_to_half(one + u), 0x3c00);                        // tie, 1.0 is even
  EXPECT_EQ(float_to_half(one + 3 * u), 0x3c02);                    // tie, 1+2^-9 is even: rounds up
  EXPECT_EQ(float_to_half(std::nextafter(one + u, 2.0f)), 0x3c01);  // just above the tie
  EXPECT_EQ(float_to_half(std::nextafter(one + 3 * u, 0.0f)), 0x3c01);
  EXPECT_EQ(float_to_half(-(one + 3 * u)), 0xbc02);
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_half(65519.99f), 0x7bff);  // below max + half ulp
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);   // the tie above max goes to inf
  EXPECT_EQ(float_to_half(1e10f), 0x7c00);
  EXPECT_EQ(float_to_half(-1e10f), 0xfc00);
  // Subnormals: units of 2^-24, ties to even.
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);  // tie to 0
  EXPECT_EQ(float_to_half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(3.0f, -25)), 0x0002);     // 1.5 units: to 2
  EXPECT_EQ(float_to_half(std::ldexp(5.0f, -25)), 0x0002);     // 2.5 units: to 2
  EXPECT_EQ(float_to_half(std::ldexp(1023.5f, -24)), 0x0400);  // rounds up into the normals
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(float_to_half(-std::ldexp(1.0f, -30)), 0x8000);
  EXPECT_EQ(float_to_half(1e-45f), 0x0000);  // fp32 subnormal
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
}

TEST(Dtype, FloatToHalfInfAndNan) {
  EXPECT_EQ(float_to_half(INFINITY), 0x7c00);
  EXPECT_EQ(float_to_half(-INFINITY), 0xfc00);
  EXPECT_TRUE(HalfIsNan(float_to_half(NAN)));
  EXPECT_TRUE(HalfIsNan(float_to_half(-NAN)));
  // Payload only in the low 13 bits: truncation would give inf.
  EXPECT_TRUE(HalfIsNan(float_to_half(BitsFloat(0x7f800001u))));
  EXPECT_TRUE(HalfIsNan(float_to_half(BitsFloat(0xff800001u))));
  EXPECT_EQ(float_to_half(BitsFloat(0xff800001u)) & 0x8000, 0x8000);
  EXPECT_EQ(float_to_half(BitsFloat(0x7f802000u)), 0x7e01);  // quiet, top payload bits kept
  EXPECT_EQ(float_to_half(BitsFloat(0xffc00000u)), 0xfe00);
}

TEST(Dtype, HalfRoundTripsEveryValue) {
  for (uint32_t h = 0; h < 65536; h++) {
    uint16_t back = float_to_half(half_to_float(static_cast<uint16_t>(h)));
    if (HalfIsNan(static_cast<uint16_t>(h)))
      ASSERT_TRUE(HalfIsNan(back)) << std::hex << h;
    else
      ASSERT_EQ(back, h) << std::hex << h;
  }
}

// An independent reference for float -> fp16: scale in double (exact) and let
// nearbyint round to nearest even.
uint16_t RefFloatToHalf(float f) {
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  double a = std::fabs(static_cast<double>(f));
  if (std::isinf(a) || a >= 65520.0) return sign | 0x7c00;
  if (a < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 24)));
  int e;
  std::frexp(a, &e);  // a in [2^(e-1), 2^e)
  int E = e - 1;
  double q = std::nearbyint(std::ldexp(a, 10 - E));  // in [1024, 2048]
  if (q == 2048) q = 1024, E++;
  if (E > 15) return sign | 0x7c00;
  return sign | static_cast<uint16_t>(((E + 15) << 10) | (static_cast<int>(q) - 1024));
}

TEST(Dtype, FloatToHalfMatchesIndependentReference) {
  // Every tie between neighbouring halves and the floats just beside it, then
  // a stride through all 2^32 float bit patterns.
  for (uint32_t h = 0; h < 0x7bff; h++) {
    float lo = half_to_float(static_cast<uint16_t>(h)), hi = half_to_float(static_cast<uint16_t>(h + 1));
    float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);  // exact: 12 significant bits
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f), -mid}) {
      ASSERT_EQ(float_to_half(f), RefFloatToHalf(f)) << std::hex << FloatBits(f);
    }
    ASSERT_EQ(float_to_half(mid), (h & 1) ? h + 1 : h) << std::hex << h;
  }
  for (uint64_t x = 0; x < (1ull << 32); x += 4099) {
    float f = BitsFloat(static_cast<uint32_t>(x));
    if (std::isnan(f))
      ASSERT_TRUE(HalfIsNan(float_to_half(f)));
    else
      ASSERT_EQ(float_to_half(f), RefFloatToHalf(f)) << std::hex << x;
  }
}

TEST(Dtype, Bfloat16Conversions) {
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xc040), -3.0f);
  EXPECT_EQ(bf16_to_float(0x7f80), INFINITY);
  EXPECT_EQ(bf16_to_float(0x0001), std::ldexp(1.0f, -133));  // subnormal
  EXPECT_TRUE(std::isnan(bf16_to_float(0x7f81)));
  EXPECT_EQ(FloatBits(bf16_to_float(0x7f81)), 0x7fc10000u);  // made quiet
  EXPECT_EQ(float_to_bf16(BitsFloat(0x7f810000u)), 0x7fc1);
  const float one = 1.0f, u = std::ldexp(1.0f, -8);  // half a bf16 ulp at 1
  EXPECT_EQ(float_to_bf16(one), 0x3f80);
  EXPECT_EQ(float_to_bf16(one + u), 0x3f80);      // tie to even
  EXPECT_EQ(float_to_bf16(one + 3 * u), 0x3f82);  // tie to even, up
  EXPECT_EQ(float_to_bf16(std::nextafter(one + u, 2.0f)), 0x3f81);
  EXPECT_EQ(float_to_bf16(-(one + 3 * u)), 0xbf82);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
  EXPECT_EQ(float_to_bf16(BitsFloat(0x7f7f7fffu)), 0x7f7f);             // just below the tie
  EXPECT_EQ(float_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(float_to_bf16(-INFINITY), 0xff80);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(BitsFloat(0x00008000u)), 0x0000);  // subnormal tie to even
  EXPECT_EQ(float_to_bf16(BitsFloat(0x00018000u)), 0x0002);
  EXPECT_TRUE(Bf16IsNan(float_to_bf16(NAN)));
  EXPECT_TRUE(Bf16IsNan(float_to_bf16(BitsFloat(0x7f800001u))));  // truncation would give inf
  EXPECT_TRUE(Bf16IsNan(float_to_bf16(BitsFloat(0xffff0000u))));
  for (uint32_t b = 0; b < 65536; b++) {
    uint16_t back = float_to_bf16(bf16_to_float(static_cast<uint16_t>(b)));
    if (Bf16IsNan(static_cast<uint16_t>(b)))
      ASSERT_TRUE(Bf16IsNan(back)) << std::hex << b;
    else
      ASSERT_EQ(back, b) << std::hex << b;
  }
}

// ---- reduce_n / reduce_2 -----------------------------------------------------------

TEST(Reduce, EveryTypeOpAndSourceCountMatchesReference) {
  // Up to 8 sources: the kernels combine up to 4 streams per pass, so 5..8
  // take two or three passes. Two sources of up to 16 elements take a plain
  // loop of their own (16 and 17 straddle it).
  const size_t counts[] = {0, 1, 7, 16, 17, 1000, 4099};
  uint64_t seed = 1;
  for (gcclDataType_t dt : kAllTypes)
    for (gcclRedOp_t op : kAllOps)
      for (int nsrc = 1; nsrc <= 8; nsrc++)
        for (size_t count : counts)
          for (Alias alias : {kNoAlias, kDstIsFirst, kDstIsLast, kDstIsMiddle})
            ASSERT_TRUE(CheckReduce(dt, op, nsrc, count, alias, seed++));
}

TEST(Reduce, RepeatedSources) {
  // The same buffer may appear as several sources, dst among them.
  for (gcclDataType_t dt : {gcclFloat32, gcclInt32, gcclFloat16, gcclFloat64}) {
    size_t sz = dtype_size(dt), count = 3000;
    std::mt19937_64 rng(dt);
    std::vector<char> x(count * sz), y(count * sz), expect(count * sz);
    FillRandom(x.data(), count, dt, rng);
    FillRandom(y.data(), count, dt, rng);
    std::vector<const void*> ref = {x.data(), y.data(), x.data(), y.data(), x.data()};
    Reference(expect.data(), ref, count, dt, gcclSum);
    const void* srcs[5] = {x.data(), y.data(), x.data(), y.data(), x.data()};
    reduce_n(x.data(), srcs, 5, count, dt, gcclSum);  // dst is srcs[0], [2] and [4]
    for (size_t i = 0; i < count; i++)
      ASSERT_TRUE(SameElement(x.data(), expect.data(), i, dt)) << dtype_name(dt) << " element " << i;
  }
}

TEST(Reduce, LargeCountsInPlace) {
  // Several blocks plus a tail, and a count that is a multiple of the block.
  for (gcclDataType_t dt : {gcclFloat32, gcclFloat16, gcclBfloat16, gcclInt64, gcclFloat64})
    for (size_t count : {size_t{8192}, size_t{100003}}) {
      ASSERT_TRUE(CheckReduce(dt, gcclSum, 4, count, kDstIsLast, count));
      ASSERT_TRUE(CheckReduce(dt, gcclMax, 2, count, kDstIsFirst, count + 1));
    }
}

TEST(Reduce, Reduce2IsReduceNWithTwoSources) {
  std::vector<float> a = {1.5f, -2.0f, 3.0f, NAN}, b = {0.25f, 8.0f, -7.0f, 1.0f}, d(4);
  reduce_2(d.data(), a.data(), b.data(), 4, gcclFloat32, gcclSum);
  EXPECT_EQ(d[0], 1.75f);
  EXPECT_EQ(d[1], 6.0f);
  EXPECT_EQ(d[2], -4.0f);
  EXPECT_TRUE(std::isnan(d[3]));
  reduce_2(b.data(), a.data(), b.data(), 3, gcclFloat32, gcclProd);  // in place, second source
  EXPECT_EQ(b[0], 0.375f);
  EXPECT_EQ(b[1], -16.0f);
  EXPECT_EQ(b[2], -21.0f);
  EXPECT_EQ(b[3], 1.0f);  // beyond count: untouched
}

template <typename T>
std::vector<T> Reduce2(std::vector<T> a, std::vector<T> b, gcclDataType_t dt, gcclRedOp_t op) {
  std::vector<T> d(a.size());
  reduce_2(d.data(), a.data(), b.data(), a.size(), dt, op);
  return d;
}

TEST(Reduce, IntegerSumAndProductWrap) {
  EXPECT_EQ(Reduce2<int8_t>({127, -128, 100}, {1, -1, 100}, gcclInt8, gcclSum), (std::vector<int8_t>{-128, 127, -56}));
  EXPECT_EQ(Reduce2<int8_t>({16, -128, -1}, {16, -1, -128}, gcclInt8, gcclProd), (std::vector<int8_t>{0, -128, -128}));
  EXPECT_EQ(Reduce2<uint8_t>({255, 200}, {1, 100}, gcclUint8, gcclSum), (std::vector<uint8_t>{0, 44}));
  EXPECT_EQ(Reduce2<uint8_t>({255, 16}, {255, 16}, gcclUint8, gcclProd), (std::vector<uint8_t>{1, 0}));
  const int32_t imax = std::numeric_limits<int32_t>::max(), imin = std::numeric_limits<int32_t>::min();
  EXPECT_EQ(Reduce2<int32_t>({imax, imin}, {1, -1}, gcclInt32, gcclSum), (std::vector<int32_t>{imin, imax}));
  EXPECT_EQ(Reduce2<int32_t>({65536, imin, 46341}, {65536, -1, 46341}, gcclInt32, gcclProd),
            (std::vector<int32_t>{0, imin, static_cast<int32_t>(46341u * 46341u)}));
  EXPECT_EQ(Reduce2<uint32_t>({0xffffffffu}, {0xffffffffu}, gcclUint32, gcclProd), (std::vector<uint32_t>{1u}));
  const int64_t lmax = std::numeric_limits<int64_t>::max(), lmin = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(Reduce2<int64_t>({lmax, lmin}, {1, -1}, gcclInt64, gcclSum), (std::vector<int64_t>{lmin, lmax}));
  EXPECT_EQ(Reduce2<int64_t>({lmin, int64_t{1} << 32}, {-1, int64_t{1} << 32}, gcclInt64, gcclProd),
            (std::vector<int64_t>{lmin, 0}));
  const uint64_t umax = std::numeric_limits<uint64_t>::max();
  EXPECT_EQ(Reduce2<uint64_t>({umax, umax}, {2, umax}, gcclUint64, gcclProd), (std::vector<uint64_t>{umax - 1, 1}));
  EXPECT_EQ(Reduce2<uint64_t>({umax}, {umax}, gcclUint64, gcclSum), (std::vector<uint64_t>{umax - 1}));
  // Max and min compare as signed or unsigned, as the type says.
  EXPECT_EQ(Reduce2<int8_t>({-1, 5}, {1, -5}, gcclInt8, gcclMax), (std::vector<int8_t>{1, 5}));
  EXPECT_EQ(Reduce2<uint8_t>({255, 5}, {1, 6}, gcclUint8, gcclMin), (std::vector<uint8_t>{1, 5}));
  EXPECT_EQ(Reduce2<int64_t>({lmin, 0}, {lmax, -1}, gcclInt64, gcclMin), (std::vector<int64_t>{lmin, -1}));
}

// NaN anywhere among the sources makes max/min NaN, for every floating type.
template <typename T>
void ExpectNanPropagates(gcclDataType_t dt, T nan, T one, T big, bool (*isnan_fn)(T)) {
  for (gcclRedOp_t op : {gcclMax, gcclMin, gcclSum, gcclProd})
    for (int pos = 0; pos < 3; pos++) {
      std::vector<std::vector<T>> s(3, std::vector<T>(5, one));
      s[1][2] = big;
      s[pos][2] = nan;  // element 2: NaN at source pos, a big value elsewhere
      s[pos][4] = nan;
      const void* srcs[3] = {s[0].data(), s[1].data(), s[2].data()};
      std::vector<T> d(5);
      reduce_n(d.data(), srcs, 3, 5, dt, op);
      EXPECT_TRUE(isnan_fn(d[2])) << dtype_name(dt) << " " << op_name(op) << " NaN at source " << pos;
      EXPECT_TRUE(isnan_fn(d[4])) << dtype_name(dt) << " " << op_name(op) << " NaN at source " << pos;
      EXPECT_FALSE(isnan_fn(d[0])) << dtype_name(dt) << " " << op_name(op);
    }
}

TEST(Reduce, FloatMaxMinPropagateNan) {
  ExpectNanPropagates<float>(gcclFloat32, NAN, 1.0f, 1e30f, [](float x) { return std::isnan(x); });
  ExpectNanPropagates<double>(gcclFloat64, NAN, 1.0, 1e300, [](double x) { return std::isnan(x); });
  ExpectNanPropagates<uint16_t>(gcclFloat16, 0x7e00, 0x3c00, 0x7bff, HalfIsNan);
  ExpectNanPropagates<uint16_t>(gcclFloat16, 0x7c01, 0x3c00, 0x7bff, HalfIsNan);  // signalling
  ExpectNanPropagates<uint16_t>(gcclBfloat16, 0x7fc0, 0x3f80, 0x7f7f, Bf16IsNan);
  // And -inf / +inf do not win over NaN either.
  EXPECT_TRUE(std::isnan(Reduce2<float>({INFINITY}, {NAN}, gcclFloat32, gcclMax)[0]));
  EXPECT_TRUE(std::isnan(Reduce2<float>({NAN}, {-INFINITY}, gcclFloat32, gcclMin)[0]));
}

TEST(Reduce, InfinitiesFollowIeee) {
  auto s =
      Reduce2<float>({INFINITY, INFINITY, -INFINITY, 0.0f}, {-INFINITY, 1.0f, -1e38f, INFINITY}, gcclFloat32, gcclSum);
  EXPECT_TRUE(std::isnan(s[0]));
  EXPECT_EQ(s[1], INFINITY);
  EXPECT_EQ(s[2], -INFINITY);
  EXPECT_EQ(s[3], INFINITY);
  auto p = Reduce2<double>({0.0, INFINITY}, {INFINITY, -2.0}, gcclFloat64, gcclProd);
  EXPECT_TRUE(std::isnan(p[0]));
  EXPECT_EQ(p[1], -INFINITY);
  auto h = Reduce2<uint16_t>({0x7c00, 0x7bff}, {0xfc00, 0x7bff}, gcclFloat16, gcclSum);
  EXPECT_TRUE(HalfIsNan(h[0]));
  EXPECT_EQ(h[1], 0x7c00);  // 65504 + 65504 overflows fp16 on the way out
  EXPECT_EQ(Reduce2<float>({1e38f}, {1e38f}, gcclFloat32, gcclMax)[0], 1e38f);
  EXPECT_EQ(Reduce2<float>({3e38f}, {3e38f}, gcclFloat32, gcclSum)[0], INFINITY);
}

TEST(Reduce, HalvesAccumulateInFloatAndRoundOnce) {
  // 1 + 2^-11 + 2^-11: rounding after each add would give 1 twice (ties to
  // even); in fp32 the sum is 1 + 2^-10, exactly representable.
  const uint16_t one = 0x3c00, tiny = 0x1000;  // tiny = 2^-11
  std::vector<uint16_t> a(9, one), b(9, tiny), c(9, tiny), d(9);
  const void* srcs[3] = {a.data(), b.data(), c.data()};
  reduce_n(d.data(), srcs, 3, 9, gcclFloat16, gcclSum);
  for (uint16_t x : d) EXPECT_EQ(x, 0x3c01);
  // bf16: 1 + 2^-8 + 2^-8 = 1 + 2^-7.
  std::fill(a.begin(), a.end(), 0x3f80);
  std::fill(b.begin(), b.end(), 0x3b80);  // 2^-8
  std::fill(c.begin(), c.end(), 0x3b80);
  reduce_n(d.data(), srcs, 3, 9, gcclBfloat16, gcclSum);
  for (uint16_t x : d) EXPECT_EQ(x, 0x3f81);
  // Overflow inside the sum is not an overflow of the result: 65504 + 65504 - 65504.
  std::fill(a.begin(), a.end(), 0x7bff);
  std::fill(b.begin(), b.end(), 0x7bff);
  std::fill(c.begin(), c.end(), 0xfbff);
  reduce_n(d.data(), srcs, 3, 9, gcclFloat16, gcclSum);
  for (uint16_t x : d) EXPECT_EQ(x, 0x7bff);
}

TEST(Reduce, HalfKernelsAgreeWithDtypeOnEveryInput) {
  // reduce.c has its own (vectorised, or F16C) conversions. Max of x with itself
  // is x: widening and narrowing every one of the 65536 patterns; then sums
  // whose results sit exactly on rounding ties (x + half an ulp of x).
  for (gcclDataType_t dt : {gcclFloat16, gcclBfloat16}) {
    bool bf = dt == gcclBfloat16;
    auto widen = bf ? bf16_to_float : half_to_float;
    auto narrow = bf ? float_to_bf16 : float_to_half;
    std::vector<uint16_t> x(65536), y(65536), d(65536);
    for (uint32_t i = 0; i < 65536; i++) x[i] = static_cast<uint16_t>(i);
    reduce_2(d.data(), x.data(), x.data(), 65536, dt, gcclMax);
    for (uint32_t i = 0; i < 65536; i++) {
      uint16_t want = narrow(widen(x[i]));
      ASSERT_TRUE(d[i] == want || (bf ? Bf16IsNan(d[i]) && Bf16IsNan(want) : HalfIsNan(d[i]) && HalfIsNan(want)))
          << dtype_name(dt) << std::hex << " x=" << i << " got " << d[i] << " want " << want;
    }
    std::mt19937 rng(7);
    size_t ties = 0;
    for (uint32_t i = 0; i < 65536; i++) {
      float f = widen(x[i]);
      int e = 0;
      std::frexp(f, &e);  // |f| in [2^(e-1), 2^e)
      float half_ulp = std::ldexp(1.0f, e - 1 - (bf ? 8 : 11));
      uint16_t t = narrow(half_ulp);
      bool tie = std::isfinite(f) && f != 0 && widen(t) == half_ulp;
      y[i] = tie ? t : static_cast<uint16_t>(rng());
      ties += tie;
    }
    EXPECT_GT(ties, 20000u) << dtype_name(dt);
    reduce_2(d.data(), x.data(), y.data(), 65536, dt, gcclSum);
    for (uint32_t i = 0; i < 65536; i++) {
      uint16_t want = narrow(widen(x[i]) + widen(y[i]));
      ASSERT_TRUE(d[i] == want || (bf ? Bf16IsNan(d[i]) && Bf16IsNan(want) : HalfIsNan(d[i]) && HalfIsNan(want)))
          << dtype_name(dt) << std::hex << " x=" << x[i] << " y=" << y[i] << " got " << d[i] << " want " << want;
    }
  }
}

TEST(Reduce, AvgReducesAsSum) {
  std::vector<float> a = {1.0f, 2.0f}, b = {3.0f, 5.0f};
  EXPECT_EQ(Reduce2(a, b, gcclFloat32, gcclAvg), (std::vector<float>{4.0f, 7.0f}));
  EXPECT_EQ(Reduce2<int32_t>({7, -7}, {8, -8}, gcclInt32, gcclAvg), (std::vector<int32_t>{15, -15}));
}

TEST(Reduce, SourcesCombineInOrder) {
  // Sources combine in order: (1e8 + -1e8) + 1 = 1, not 1e8 + (-1e8 + 1) = 0.
  std::vector<float> a(3000, 1e8f), b(3000, -1e8f), c(3000, 1.0f), d(3000);
  const void* srcs[3] = {a.data(), b.data(), c.data()};
  reduce_n(d.data(), srcs, 3, 3000, gcclFloat32, gcclSum);
  for (float x : d) ASSERT_EQ(x, 1.0f);
  const void* swapped[3] = {a.data(), c.data(), b.data()};
  reduce_n(d.data(), swapped, 3, 3000, gcclFloat32, gcclSum);
  for (float x : d) ASSERT_EQ(x, 0.0f);
}

// ---- reduce_divide -----------------------------------------------------------

TEST(ReduceDivide, IntegersTruncateTowardZero) {
  std::vector<int8_t> i8 = {-7, 7, -128, 127, -1, 0};
  reduce_divide(i8.data(), i8.size(), gcclInt8, 2);
  EXPECT_EQ(i8, (std::vector<int8_t>{-3, 3, -64, 63, 0, 0}));
  std::vector<int8_t> i8b = {-128, 100};
  reduce_divide(i8b.data(), 2, gcclInt8, 200);  // a divisor wider than the type
  EXPECT_EQ(i8b, (std::vector<int8_t>{0, 0}));
  std::vector<uint8_t> u8 = {255, 3};
  reduce_divide(u8.data(), 2, gcclUint8, 2);
  EXPECT_EQ(u8, (std::vector<uint8_t>{127, 1}));
  std::vector<int32_t> i32 = {-7, 7, std::numeric_limits<int32_t>::min(), -5};
  reduce_divide(i32.data(), 3, gcclInt32, 3);  // the last element is beyond count
  EXPECT_EQ(i32, (std::vector<int32_t>{-2, 2, std::numeric_limits<int32_t>::min() / 3, -5}));
  std::vector<int32_t> neg = {std::numeric_limits<int32_t>::min(), 5};
  reduce_divide(neg.data(), 2, gcclInt32, -1);  // no overflow trap: wraps
  EXPECT_EQ(neg, (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), -5}));
  std::vector<uint32_t> u32 = {0xffffffffu};
  reduce_divide(u32.data(), 1, gcclUint32, 16);
  EXPECT_EQ(u32[0], 0x0fffffffu);
  std::vector<int64_t> i64 = {-9, std::numeric_limits<int64_t>::max()};
  reduce_divide(i64.data(), 2, gcclInt64, 4);
  EXPECT_EQ(i64, (std::vector<int64_t>{-2, std::numeric_limits<int64_t>::max() / 4}));
  std::vector<uint64_t> u64 = {std::numeric_limits<uint64_t>::max()};
  reduce_divide(u64.data(), 1, gcclUint64, 3);
  EXPECT_EQ(u64[0], 0x5555555555555555ull);
}

TEST(ReduceDivide, FloatsDivideRatherThanMultiplyByReciprocal) {
  std::vector<float> f(4099);
  for (size_t i = 0; i < f.size(); i++) f[i] = static_cast<float>(i) * 1.37f + 0.11f;
  std::vector<float> orig = f;
  reduce_divide(f.data(), f.size(), gcclFloat32, 3);
  size_t differs_from_reciprocal = 0;
  for (size_t i = 0; i < f.size(); i++) {
    ASSERT_EQ(f[i], orig[i] / 3.0f) << i;
    differs_from_reciprocal += orig[i] * (1.0f / 3.0f) != orig[i] / 3.0f;
  }
  EXPECT_GT(differs_from_reciprocal, 0u);  // the data can tell the two apart
  std::vector<double> d = {1.0, -7.5, INFINITY, NAN, 0.0};
  reduce_divide(d.data(), d.size(), gcclFloat64, 3);
  EXPECT_EQ(d[0], 1.0 / 3.0);
  EXPECT_EQ(d[1], -2.5);
  EXPECT_EQ(d[2], INFINITY);
  EXPECT_TRUE(std::isnan(d[3]));
  EXPECT_EQ(d[4], 0.0);
}

TEST(ReduceDivide, HalvesDivideInFloatAndRoundOnce) {
  for (gcclDataType_t dt : {gcclFloat16, gcclBfloat16}) {
    bool bf = dt == gcclBfloat16;
    auto widen = bf ? bf16_to_float : half_to_float;
    auto narrow = bf ? float_to_bf16 : float_to_half;
    for (int divisor : {1, 3, 8, 7}) {
      std::vector<uint16_t> x(65536);
      for (uint32_t i = 0; i < 65536; i++) x[i] = static_cast<uint16_t>(i);
      reduce_divide(x.data(), x.size(), dt, divisor);
      for (uint32_t i = 0; i < 65536; i++) {
        uint16_t want = narrow(widen(static_cast<uint16_t>(i)) / static_cast<float>(divisor));
        bool nan = bf ? Bf16IsNan(want) : HalfIsNan(want);
        ASSERT_TRUE(x[i] == want || (nan && (bf ? Bf16IsNan(x[i]) : HalfIsNan(x[i]))))
            << dtype_name(dt) << " /" << divisor << std::hex << " x=" << i << " got " << x[i] << " want " << want;
      }
    }
  }
  std::vector<uint16_t> h = {0x4200, 0x3c00};  // 3 / 2 = 1.5; 1 / 2 = 0.5
  reduce_divide(h.data(), 2, gcclFloat16, 2);
  EXPECT_EQ(h, (std::vector<uint16_t>{0x3e00, 0x3800}));
}

TEST(ReduceDivide, CountZeroTouchesNothing) {
  float x = 6.0f, y = 1.0f;
  reduce_divide(&x, 0, gcclFloat32, 2);
  EXPECT_EQ(x, 6.0f);
  const void* srcs[2] = {&y, &y};
  reduce_n(&x, srcs, 2, 0, gcclFloat32, gcclSum);
  reduce_n(&x, srcs, 1, 0, gcclFloat32, gcclSum);
  EXPECT_EQ(x, 6.0f);
}

}  // namespace
