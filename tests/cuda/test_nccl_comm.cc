// gcclCommInitNccl (gccl_nccl.h): a gccl communicator over an NCCL communicator,
// one thread per GPU. The argument checks run everywhere; the rest needs GPUs and
// skips, saying why, without them (two ranks need two GPUs: NCCL refuses two
// ranks on one device).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/harness.h"
#include "cuda/gpu_test.h"
#include "gccl.h"
#include "gccl_nccl.h"

extern "C" {
#include "cuda/nccl/nccl_api.h"
}

namespace {

const size_t kCounts[] = {0, 1, 7, 1031, 100003};

// Element i of rank r's input: integer-valued, so every summation order is exact
// (also after fp16, whose integers are exact up to 2048).
float Input(int r, size_t i) {
  return static_cast<float>((r + 1) * static_cast<int>(i % 17) - 8);
}

// Not integers, for top-k: a selection with something to choose from.
float TopkInput(int r, size_t i) {
  return static_cast<float>((r + 3) * static_cast<int>(i % 101) - 50 * r) * 0.37f;
}

std::vector<float> DenseSum(int p, size_t n) {
  std::vector<float> want(n, 0.0f);
  for (int r = 0; r < p; r++)
    for (size_t i = 0; i < n; i++) want[i] += Input(r, i);
  return want;
}

// The results of one rank, checked once every thread has joined.
struct RankResults {
  gcclResult_t init = gcclInternalError;
  std::string init_error;
  std::vector<std::vector<float>> topk;  // per count in kCounts from 1031 up
};

// Every rank's thread: dense allreduce on host and device buffers, fp16 (exact
// here) and top-k compressed allreduce.
void RunRank(int r, int p, int device, ncclComm_t nccl, RankResults* out) {
  ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
  gcclComm_t comm = nullptr;
  out->init = gcclCommInitNccl(&comm, nccl);
  if (out->init != gcclSuccess) {
    out->init_error = gcclGetLastError(nullptr);
    return;
  }
  for (size_t n : kCounts) {
    SCOPED_TRACE("rank " + std::to_string(r) + " n=" + std::to_string(n));
    std::vector<float> in(n), got(n), want = DenseSum(p, n);
    for (size_t i = 0; i < n; i++) in[i] = Input(r, i);
    EXPECT_EQ(gcclAllReduce(in.data(), got.data(), n, gcclFloat32, gcclSum, comm, nullptr), gcclSuccess)
        << gcclGetLastError(comm);
    EXPECT_EQ(got, want) << "dense, host buffers";

    float *dsend = nullptr, *drecv = nullptr;
    size_t bytes = std::max<size_t>(n, 1) * sizeof(float);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&dsend), bytes), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&drecv), bytes), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(dsend, in.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    EXPECT_EQ(gcclAllReduce(dsend, drecv, n, gcclFloat32, gcclSum, comm, nullptr), gcclSuccess)
        << gcclGetLastError(comm);
    std::fill(got.begin(), got.end(), -1.0f);
    ASSERT_EQ(cudaMemcpy(got.data(), drecv, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(got, want) << "dense, device buffers";
    cudaFree(dsend);
    cudaFree(drecv);

    gcclCompressor_t c = nullptr;
    ASSERT_EQ(gcclCompressorCreate(&c, "fp16", n, gcclFloat32), gcclSuccess);
    EXPECT_EQ(gcclAllReduceCompressed(in.data(), got.data(), n, gcclFloat32, gcclSum, c, comm, nullptr), gcclSuccess)
        << gcclGetLastError(comm);
    EXPECT_EQ(got, want) << "fp16";
    gcclCompressorDestroy(c);

    if (n < 1000) continue;  // top-k of a handful of elements selects nothing worth checking
    for (size_t i = 0; i < n; i++) in[i] = TopkInput(r, i);
    ASSERT_EQ(gcclCompressorCreate(&c, "topk:ratio=0.01", n, gcclFloat32), gcclSuccess);
    EXPECT_EQ(gcclAllReduceCompressed(in.data(), got.data(), n, gcclFloat32, gcclSum, c, comm, nullptr), gcclSuccess)
        << gcclGetLastError(comm);
    out->topk.push_back(got);
    gcclCompressorDestroy(c);
  }
  EXPECT_EQ(gcclCommDestroy(comm), gcclSuccess);
}

// The top-k results of the same inputs over thread ranks (local transport): the
// same schedule and codec, so the same bits.
std::vector<std::vector<float>> TopkReference(int p) {
  std::vector<std::vector<float>> ref;
  for (size_t n : kCounts) {
    if (n < 1000) continue;
    std::vector<float> rank0(n);
    EXPECT_EQ(gh::RunRanks(p,
                           [&](int r, gcclComm_t comm) {
                             std::vector<float> in(n), got(n);
                             for (size_t i = 0; i < n; i++) in[i] = TopkInput(r, i);
                             gcclCompressor_t c = nullptr;
                             ASSERT_EQ(gcclCompressorCreate(&c, "topk:ratio=0.01", n, gcclFloat32), gcclSuccess);
                             EXPECT_EQ(gcclAllReduceCompressed(in.data(), got.data(), n, gcclFloat32, gcclSum, c, comm,
                                                               nullptr),
                                       gcclSuccess);
                             gcclCompressorDestroy(c);
                             if (r == 0) rank0 = got;
                           }),
              gcclSuccess);
    ref.push_back(rank0);
  }
  return ref;
}

// p ranks on devices 0..p-1: one NCCL communicator each (ncclCommInitAll), then a
// thread per rank creates its gccl communicator (collective) and runs RunRank.
void RunOnGpus(int p) {
  std::vector<ncclComm_t> nccl(static_cast<size_t>(p), nullptr);
  std::vector<int> devs(static_cast<size_t>(p));
  for (int d = 0; d < p; d++) devs[static_cast<size_t>(d)] = d;
  ASSERT_EQ(ncclCommInitAll(nccl.data(), p, devs.data()), ncclSuccess);
  std::vector<RankResults> results(static_cast<size_t>(p));
  std::vector<std::thread> threads;
  for (int r = 0; r < p; r++)
    threads.emplace_back(RunRank, r, p, r, nccl[static_cast<size_t>(r)], &results[static_cast<size_t>(r)]);
  for (auto& t : threads) t.join();
  for (ncclComm_t c : nccl) ncclCommDestroy(c);  // after gccl's: it only split them

  for (int r = 0; r < p; r++)
    ASSERT_EQ(results[static_cast<size_t>(r)].init, gcclSuccess)
        << "rank " << r << ": " << results[static_cast<size_t>(r)].init_error;
  std::vector<std::vector<float>> ref = TopkReference(p);
  for (int r = 0; r < p; r++) {
    const auto& topk = results[static_cast<size_t>(r)].topk;
    ASSERT_EQ(topk.size(), ref.size()) << "rank " << r;
    for (size_t k = 0; k < ref.size(); k++)
      EXPECT_EQ(std::memcmp(topk[k].data(), ref[k].data(), ref[k].size() * sizeof(float)), 0)
          << "top-k, rank " << r << ", case " << k << ": not the bits of the same call over thread ranks";
  }
}

int GpuCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) return 0;
  return n;
}

}  // namespace

// The argument checks come before NCCL or CUDA is touched: they hold without a GPU.
TEST(NcclComm, InitRejectsNullArguments) {
  ncclComm_t fake = reinterpret_cast<ncclComm_t>(static_cast<uintptr_t>(0x1));  // never dereferenced
  EXPECT_EQ(gcclCommInitNccl(nullptr, fake), gcclInvalidArgument);
  EXPECT_NE(std::string(gcclGetLastError(nullptr)).find("comm is NULL"), std::string::npos)
      << gcclGetLastError(nullptr);

  int dummy = 0;
  gcclComm_t c = reinterpret_cast<gcclComm_t>(&dummy);
  EXPECT_EQ(gcclCommInitNccl(&c, nullptr), gcclInvalidArgument);
  EXPECT_EQ(c, nullptr) << "*comm must be NULL after a failure";
  EXPECT_NE(std::string(gcclGetLastError(nullptr)).find("nccl is NULL"), std::string::npos)
      << gcclGetLastError(nullptr);
}

// gccl reaches NCCL through dlopen: every function it uses resolves in the NCCL
// this binary links, and the version is that NCCL's. No GPU needed.
TEST(NcclComm, ResolvesTheLoadedNccl) {
  const nccl_api* api = nullptr;
  ASSERT_EQ(nccl_api_get(&api), gcclSuccess) << gcclGetLastError(nullptr);
  int version = 0;
  ASSERT_EQ(ncclGetVersion(&version), ncclSuccess);
  EXPECT_EQ(api->version, version);
  EXPECT_GE(api->version, 21800);
  for (const void* f : {reinterpret_cast<const void*>(api->comm_split), reinterpret_cast<const void*>(api->comm_abort),
                        reinterpret_cast<const void*>(api->send), reinterpret_cast<const void*>(api->recv),
                        reinterpret_cast<const void*>(api->all_gather)})
    EXPECT_NE(f, nullptr);
  EXPECT_STREQ(api->get_error_string(ncclInvalidUsage), ncclGetErrorString(ncclInvalidUsage));
}

// Non-blocking NCCL calls would break the transport's ordering: refused before
// the NCCL communicator is touched.
TEST(NcclComm, InitRefusesNonBlockingNccl) {
  gh::ScopedEnv env("NCCL_COMM_BLOCKING", "0");
  int dummy = 0;
  gcclComm_t c = reinterpret_cast<gcclComm_t>(&dummy);
  ncclComm_t fake = reinterpret_cast<ncclComm_t>(static_cast<uintptr_t>(0x1));  // never dereferenced
  EXPECT_EQ(gcclCommInitNccl(&c, fake), gcclInvalidUsage);
  EXPECT_EQ(c, nullptr);
  EXPECT_NE(std::string(gcclGetLastError(nullptr)).find("NCCL_COMM_BLOCKING"), std::string::npos)
      << gcclGetLastError(nullptr);
}

// One GPU: a one-rank communicator, whose collectives move no messages.
TEST(NcclComm, OneRankAllReduces) {
  SKIP_WITHOUT_GPU();
  RunOnGpus(1);
}

TEST(NcclComm, MultiRankAllReducesEqualTheExactSum) {
  SKIP_WITHOUT_GPU();
  int p = std::min(GpuCount(), 4);
  if (p < 2)
    GTEST_SKIP() << "the multi-rank NCCL test needs >= 2 GPUs (NCCL refuses two ranks on one GPU); found " << p;
  RunOnGpus(p);
}
