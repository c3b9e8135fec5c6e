// test_spec.cc — compressor spec parsing and canonical printing (compress/spec.c).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

extern "C" {
#include "common/result.h"
#include "compress/spec.h"
}

namespace {

void ExpectSameSpec(const codec_spec& a, const codec_spec& b) {
  EXPECT_EQ(a.codec, b.codec);
  EXPECT_EQ(a.bits, b.bits);
  EXPECT_EQ(a.bucket, b.bucket);
  EXPECT_EQ(a.round, b.round);
  EXPECT_EQ(a.ratio, b.ratio);
  EXPECT_EQ(a.approx, b.approx);
  EXPECT_EQ(a.values, b.values);
  EXPECT_EQ(a.ef, b.ef);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.zstd, b.zstd);
}

codec_spec Parse(const char* text) {
  codec_spec s{};
  EXPECT_EQ(spec_parse(text, &s), gcclSuccess) << text << ": " << err_last();
  return s;
}

std::string Format(const codec_spec& s) {
  char buf[SPEC_FORMAT_MAX];
  EXPECT_EQ(spec_format(&s, buf, sizeof buf), gcclSuccess) << err_last();
  return buf;
}

// Parsing fails with gcclInvalidArgument, leaves *out alone, and the message holds every `needles`.
void ExpectError(const char* text, std::vector<std::string> needles) {
  codec_spec s{};
  s.bits = 77;
  err_clear();
  EXPECT_EQ(spec_parse(text, &s), gcclInvalidArgument) << text;
  EXPECT_EQ(s.bits, 77u) << text;
  std::string msg = err_last();
  for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << text << " -> " << msg << " lacks " << n;
}

TEST(SpecDefaults, EveryCodec) {
  struct Case {
    const char* text;
    const char* canonical;
  } cases[] = {
      {"none", "none"},
      {"fp16", "fp16:ef=0"},
      {"bf16", "bf16:ef=0"},
      {"uniform", "uniform:bits=4,bucket=512,round=stochastic,ef=0,seed=0"},
      {"qsgd", "qsgd:bits=4,bucket=512,ef=0,seed=0"},
      {"sign", "sign:bucket=512,ef=1"},
      {"terngrad", "terngrad:bucket=512,ef=0,seed=0"},
      {"topk", "topk:ratio=0.01,approx=0,values=fp32,ef=1,seed=0,zstd=0"},
      {"randk", "randk:ratio=0.01,values=fp32,ef=0,seed=0"},
  };
  for (const auto& c : cases) EXPECT_EQ(Format(Parse(c.text)), c.canonical);

  codec_spec s = Parse("topk");
  EXPECT_EQ(s.codec, CODEC_TOPK);
  EXPECT_EQ(s.ratio, 0.01);
  EXPECT_EQ(s.bits, 0u);
  EXPECT_EQ(s.bucket, 0u);
  EXPECT_EQ(s.ef, 1);
  s = Parse("uniform");
  EXPECT_EQ(s.bits, 4u);
  EXPECT_EQ(s.bucket, 512u);
  EXPECT_EQ(s.round, SPEC_ROUND_STOCHASTIC);
  EXPECT_EQ(s.ratio, 0.0);
  EXPECT_EQ(Parse("sign").ef, 1);
  EXPECT_EQ(Parse("qsgd").ef, 0);
  EXPECT_EQ(Parse("none").ef, 0);
}

TEST(SpecKeys, EveryKey) {
  codec_spec s = Parse("uniform:bits=8,bucket=16777216,round=nearest,ef=1,seed=18446744073709551615");
  EXPECT_EQ(s.bits, 8u);
  EXPECT_EQ(s.bucket, 1u << 24);
  EXPECT_EQ(s.round, SPEC_ROUND_NEAREST);
  EXPECT_EQ(s.ef, 1);
  EXPECT_EQ(s.seed, UINT64_MAX);
  EXPECT_EQ(Parse("uniform:bits=1,bucket=1").bits, 1u);
  EXPECT_EQ(Parse("uniform:round=stochastic").round, SPEC_ROUND_STOCHASTIC);
  EXPECT_EQ(Parse("qsgd:bits=2").bits, 2u);

  s = Parse("topk:ratio=0.25,approx=1,values=bf16,ef=0,seed=7,zstd=1");
  EXPECT_EQ(s.ratio, 0.25);
  EXPECT_EQ(s.approx, 1);
  EXPECT_EQ(s.values, SPEC_VALUES_BF16);
  EXPECT_EQ(s.ef, 0);
  EXPECT_EQ(s.seed, 7u);
  EXPECT_EQ(s.zstd, 1);
  EXPECT_EQ(Parse("topk:values=fp16").values, SPEC_VALUES_FP16);
  EXPECT_EQ(Parse("topk:values=fp32").values, SPEC_VALUES_FP32);
  EXPECT_EQ(Parse("randk:ratio=1").ratio, 1.0);
  EXPECT_EQ(Parse("randk:ratio=1e-3").ratio, 1e-3);
  EXPECT_EQ(Parse("randk:ratio=.5").ratio, 0.5);
  EXPECT_EQ(Parse("sign:ef=0").ef, 0);
  EXPECT_EQ(Parse("terngrad:bucket=64,seed=3").bucket, 64u);
  EXPECT_EQ(Parse("fp16:ef=1").ef, 1);
  EXPECT_EQ(Parse("bf16:ef=1").ef, 1);
  // Key order does not matter.
  ExpectSameSpec(Parse("uniform:bucket=8,bits=2"), Parse("uniform:bits=2,bucket=8"));
}

TEST(SpecErrors, UnknownCodec) {
  ExpectError("", {"unknown codec"});
  ExpectError("topkk", {"unknown codec", "\"topkk\""});
  ExpectError("TOPK", {"unknown codec", "TOPK"});
  ExpectError(":bits=4", {"unknown codec"});
  ExpectError("top", {"unknown codec", "\"top\""});
  ExpectError(" topk", {"unknown codec"});
  codec_spec s;
  EXPECT_EQ(spec_parse(nullptr, &s), gcclInvalidArgument);
  EXPECT_EQ(spec_parse("topk", nullptr), gcclInvalidArgument);
}

TEST(SpecErrors, UnknownOrInapplicableKey) {
  ExpectError("topk:foo=1", {"unknown key", "\"foo\"", "topk"});
  ExpectError("topk:Ratio=0.1", {"unknown key", "Ratio"});
  ExpectError("topk:bits=4", {"bits", "does not apply", "topk"});
  ExpectError("none:ef=1", {"ef", "does not apply", "none"});
  ExpectError("sign:bits=1", {"bits", "does not apply", "sign"});
  ExpectError("qsgd:round=nearest", {"round", "does not apply", "qsgd"});
  ExpectError("uniform:ratio=0.5", {"ratio", "does not apply", "uniform"});
  ExpectError("randk:approx=1", {"approx", "does not apply", "randk"});
  ExpectError("randk:zstd=1", {"zstd", "does not apply", "randk"});
  ExpectError("fp16:seed=1", {"seed", "does not apply", "fp16"});
  ExpectError("sign:values=fp16", {"values", "does not apply", "sign"});
}

TEST(SpecErrors, Malformed) {
  ExpectError("topk:", {"empty key list"});
  ExpectError("topk:ratio", {"malformed item", "ratio"});
  ExpectError("topk:=0.1", {"malformed item"});
  ExpectError("topk:ratio=0.1,", {"malformed item"});
  ExpectError("topk:,ratio=0.1", {"malformed item"});
  ExpectError("topk:ratio=", {"invalid value", "ratio"});
  ExpectError("topk:ratio=0.1x", {"invalid value", "0.1x", "ratio"});
  ExpectError("topk:ratio= 0.1", {"invalid value", "ratio"});
  ExpectError("topk:ratio=nan", {"invalid value", "nan"});
  ExpectError("topk:ratio=inf", {"invalid value", "inf"});
  ExpectError("topk:ratio=-0.1", {"invalid value", "-0.1"});
  ExpectError("uniform:bits=4x", {"invalid value", "4x", "bits"});
  ExpectError("uniform:bits=-1", {"invalid value", "-1", "bits"});
  ExpectError("uniform:bits=0x4", {"invalid value", "0x4"});
  ExpectError("uniform:bits=+4", {"invalid value", "+4"});
  ExpectError("uniform:seed=18446744073709551616", {"invalid value", "seed"});
  ExpectError("uniform:round=up", {"invalid value", "up", "round"});
  ExpectError("topk:values=fp64", {"invalid value", "fp64", "values"});
  ExpectError("topk:ef=2", {"invalid value", "ef"});
  ExpectError("topk:approx=true", {"invalid value", "approx"});
  ExpectError("topk:zstd=01", {"invalid value", "zstd"});
  ExpectError("topk:ratio=0.1,ratio=0.2", {"ratio", "given twice"});
  ExpectError("uniform:bits=4,bucket=8,bits=4", {"bits", "given twice"});
  ExpectError("topk:ratio=0.1:ef=1", {"invalid value", "ratio"});
}

TEST(SpecErrors, OutOfRange) {
  ExpectError("uniform:bits=0", {"bits=0", "out of range", "uniform", "1..8"});
  ExpectError("uniform:bits=9", {"bits=9", "out of range", "uniform"});
  ExpectError("qsgd:bits=0", {"bits=0", "out of range", "qsgd"});
  ExpectError("qsgd:bits=99999999999999999999", {"invalid value", "bits"});
  ExpectError("uniform:bucket=0", {"bucket=0", "out of range"});
  ExpectError("sign:bucket=16777217", {"bucket=16777217", "out of range"});
  ExpectError("topk:ratio=0", {"ratio=0", "out of range"});
  ExpectError("topk:ratio=1.0000001", {"ratio=1.0000001", "out of range"});
  ExpectError("randk:ratio=1e-400", {"ratio"});
  ExpectError("randk:ratio=2", {"ratio=2", "out of range"});
}

TEST(SpecFormat, CanonicalRoundTrip) {
  const char* texts[] = {
      "none",
      "fp16:ef=1",
      "bf16",
      "uniform:bits=3,bucket=1000,round=nearest,seed=123456789012345",
      "uniform:bits=8,ef=1",
      "qsgd:bits=1,bucket=1",
      "sign:bucket=16777216,ef=0",
      "terngrad:seed=5,ef=1",
      "topk:ratio=0.1,approx=1,values=fp16,zstd=1,seed=9",
      "topk:ratio=0.333333333333333314829616256247390992939472198486328125",
      "randk:ratio=1e-7,values=bf16,ef=1",
  };
  for (const char* t : texts) {
    codec_spec a = Parse(t);
    std::string canon = Format(a);
    codec_spec b = Parse(canon.c_str());
    ExpectSameSpec(a, b);
    EXPECT_EQ(Format(b), canon) << t;  // canonical form is a fixed point
  }
  // Two spellings of the same spec print the same.
  EXPECT_EQ(Format(Parse("topk:ef=1,ratio=0.01")), Format(Parse("topk")));
}

TEST(SpecFormat, Errors) {
  codec_spec s = Parse("topk:ratio=0.123456789");
  char small[10];
  EXPECT_EQ(spec_format(&s, small, sizeof small), gcclInvalidArgument);
  EXPECT_EQ(spec_format(nullptr, small, sizeof small), gcclInvalidArgument);
  EXPECT_EQ(spec_format(&s, nullptr, 10), gcclInvalidArgument);
  s.codec = CODEC_COUNT;
  char buf[SPEC_FORMAT_MAX];
  EXPECT_EQ(spec_format(&s, buf, sizeof buf), gcclInvalidArgument);
  // The longest canonical spec fits in SPEC_FORMAT_MAX.
  s = Parse("topk:ratio=0.33333333333333331,approx=1,values=fp16,ef=1,seed=18446744073709551615,zstd=1");
  EXPECT_EQ(spec_format(&s, buf, sizeof buf), gcclSuccess);
  EXPECT_LT(std::string(buf).size(), 120u);
}

}  // namespace
