// test_compress_stub.cc — until the codecs land, every compression entry point
// returns gcclInvalidUsage and says "not built". Delete this file when
// compression is implemented.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/harness.h"
#include "gccl.h"

namespace {

using gh::MentionsAny;

class CompressStub : public ::testing::Test {
 protected:
  void SetUp() override {
    gcclUniqueId id;
    ASSERT_EQ(gcclGetUniqueId(&id), gcclSuccess);
    ASSERT_EQ(gcclCommInitRank(&comm_, 1, id, 0), gcclSuccess);
    std::memset(fake_, 0, sizeof fake_);
  }
  void TearDown() override {
    if (comm_ != nullptr) {
      EXPECT_EQ(gcclCommDestroy(comm_), gcclSuccess);
    }
  }
  // A stand-in handle (zeroed memory, never a real compressor).
  gcclCompressor_t fake() { return reinterpret_cast<gcclCompressor_t>(fake_); }

  gcclComm_t comm_ = nullptr;
  alignas(64) unsigned char fake_[4096];
};

TEST_F(CompressStub, CompressorFunctions) {
  std::vector<float> buf(1000, 1.0f), out(1000, 0.0f);
  gcclCompressor_t c = nullptr;
  EXPECT_EQ(gcclCompressorCreate(&c, "topk:ratio=0.01", 1000, gcclFloat32), gcclInvalidUsage);
  EXPECT_TRUE(MentionsAny(gcclGetLastError(nullptr), {"not built"}));
  EXPECT_EQ(gcclCompressorCreate(&c, "none", 1000, gcclFloat32), gcclInvalidUsage);
  EXPECT_TRUE(MentionsAny(gcclGetLastError(nullptr), {"not built"}));
  EXPECT_EQ(gcclCompressorDestroy(fake()), gcclInvalidUsage);
  EXPECT_TRUE(MentionsAny(gcclGetLastError(nullptr), {"not built"}));
  EXPECT_EQ(gcclCompressorGetResidual(fake(), out.data()), gcclInvalidUsage);
  EXPECT_TRUE(MentionsAny(gcclGetLastError(nullptr), {"not built"}));
  EXPECT_EQ(gcclCompressorSetResidual(fake(), buf.data()), gcclInvalidUsage);
  EXPECT_TRUE(MentionsAny(gcclGetLastError(nullptr), {"not built"}));
  size_t bound = 0, bytes = 0;
  EXPECT_EQ(gcclEncodeBound(fake(), &bound), gcclInvalidUsage);
  EXPECT_TRUE(MentionsAny(gcclGetLastError(nullptr), {"not built"}));
  std::vector<unsigned char> frame(8192);
  EXPECT_EQ(gcclEncode(fake(), buf.data(), frame.data(), frame.size(), &bytes), gcclInvalidUsage);
  EXPECT_TRUE(MentionsAny(gcclGetLastError(nullptr), {"not built"}));
  EXPECT_EQ(gcclDecodeAccumulate(frame.data(), 64, out.data(), 1000, gcclFloat32), gcclInvalidUsage);
  EXPECT_TRUE(MentionsAny(gcclGetLastError(nullptr), {"not built"}));
  for (float x : out) ASSERT_EQ(x, 0.0f) << "a stub wrote to its output";
}

TEST_F(CompressStub, CompressedCollectives) {
  std::vector<float> in(1000, 1.0f), out(1000, -1.0f);
  EXPECT_EQ(gcclAllReduceCompressed(in.data(), out.data(), 1000, gcclFloat32, gcclSum, fake(), comm_, nullptr),
            gcclInvalidUsage);
  EXPECT_TRUE(MentionsAny(gcclGetLastError(comm_), {"not built"}));
  EXPECT_EQ(gcclAllGatherCompressed(in.data(), out.data(), 1000, gcclFloat32, fake(), comm_, nullptr),
            gcclInvalidUsage);
  EXPECT_TRUE(MentionsAny(gcclGetLastError(comm_), {"not built"}));
  EXPECT_EQ(gcclReduceScatterCompressed(in.data(), out.data(), 1000, gcclFloat32, gcclSum, fake(), comm_, nullptr),
            gcclInvalidUsage);
  EXPECT_TRUE(MentionsAny(gcclGetLastError(comm_), {"not built"}));
  for (float x : out) ASSERT_EQ(x, -1.0f) << "a stub wrote to recvbuff";
  // The communicator is unaffected.
  ASSERT_EQ(gcclAllReduce(in.data(), out.data(), 1000, gcclFloat32, gcclSum, comm_, nullptr), gcclSuccess);
  for (float x : out) ASSERT_EQ(x, 1.0f);
}

}  // namespace
