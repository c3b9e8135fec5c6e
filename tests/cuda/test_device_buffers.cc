// Collectives on CUDA device buffers (gccl_cuda.h): staged through pinned host
// memory, the same results as host buffers. Thread ranks share one GPU. Every test
// skips, saying why, when no CUDA device is present.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

extern "C" {
#include "compress/compressor.h"
}
#include "core/harness.h"
#include "cuda/gpu_test.h"
#include "gccl.h"
#include "gccl_cuda.h"

namespace {

// Element i of rank r's input: integer-valued, so every summation order is exact.
float Input(int r, size_t i) {
  return static_cast<float>((r + 1) * static_cast<int>(i % 17) - 8);
}

struct DeviceFloats {
  explicit DeviceFloats(size_t count) : n(count) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), (n ? n : 1) * sizeof(float)), cudaSuccess);
  }
  ~DeviceFloats() { cudaFree(p); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  void Put(const std::vector<float>& v) {
    ASSERT_EQ(cudaMemcpy(p, v.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<float> Get() const {
    std::vector<float> v(n);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
  float* p = nullptr;
  size_t n;
};

// Dense and fp16-compressed allreduce (exact on these inputs), in and out of place,
// on a CUDA stream and on the default stream, for p = 1..4 and awkward counts.
TEST(DeviceBuffers, AllReduceDenseAndCompressedEqualTheExactSum) {
  SKIP_WITHOUT_GPU();
  for (int p : {1, 2, 3, 4}) {
    for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1031}, size_t{100003}}) {
      SCOPED_TRACE("p=" + std::to_string(p) + " n=" + std::to_string(n));
      std::vector<float> want(n, 0.0f);
      for (int r = 0; r < p; r++)
        for (size_t i = 0; i < n; i++) want[i] += Input(r, i);
      ASSERT_EQ(gh::RunRanks(p,
                             [&](int r, gcclComm_t comm) {
                               std::vector<float> in(n);
                               for (size_t i = 0; i < n; i++) in[i] = Input(r, i);
                               cudaStream_t cs;
                               ASSERT_EQ(cudaStreamCreate(&cs), cudaSuccess);
                               gcclStream_t s = nullptr;
                               ASSERT_EQ(gcclStreamCreateCuda(&s, cs), gcclSuccess);
                               DeviceFloats send(n), recv(n);
                               send.Put(in);
                               EXPECT_EQ(gcclAllReduce(send.p, recv.p, n, gcclFloat32, gcclSum, comm, s), gcclSuccess);
                               EXPECT_EQ(gcclStreamSynchronize(s), gcclSuccess);
                               EXPECT_EQ(recv.Get(), want) << "dense, out of place, rank " << r;
                               EXPECT_EQ(send.Get(), in) << "the send buffer changed";
                               gcclCompressor_t c = nullptr;
                               ASSERT_EQ(gcclCompressorCreate(&c, "fp16", n, gcclFloat32), gcclSuccess);
                               EXPECT_EQ(
                                   gcclAllReduceCompressed(send.p, send.p, n, gcclFloat32, gcclSum, c, comm, nullptr),
                                   gcclSuccess)
                                   << gcclGetLastError(comm);
                               EXPECT_EQ(send.Get(), want) << "fp16, in place, rank " << r;
                               gcclCompressorDestroy(c);
                               gcclStreamDestroy(s);
                               cudaStreamDestroy(cs);
                             }),
                gcclSuccess);
    }
  }
}

// The compressed allgather and reduce-scatter with device buffers give the host
// buffers' bits, on every rank.
TEST(DeviceBuffers, CompressedAllGatherAndReduceScatterEqualTheHostPath) {
  SKIP_WITHOUT_GPU();
  const int p = 3;
  const size_t n = 1031;
  std::vector<std::vector<float>> host_ag(p), dev_ag(p), host_rs(p), dev_rs(p);
  ASSERT_EQ(
      gh::RunRanks(
          p,
          [&](int r, gcclComm_t comm) {
            std::vector<float> in(n * p);
            for (size_t i = 0; i < n * p; i++) in[i] = Input(r, i) * 0.37f;
            size_t ru = static_cast<size_t>(r);
            for (int pass = 0; pass < 2; pass++) {  // 0: host buffers, 1: device buffers
              gcclCompressor_t ag = nullptr, rs = nullptr;
              ASSERT_EQ(gcclCompressorCreate(&ag, "uniform:bits=4", n, gcclFloat32), gcclSuccess);
              ASSERT_EQ(gcclCompressorCreate(&rs, "sign", n * p, gcclFloat32), gcclSuccess);
              std::vector<float> out_ag(n * p), out_rs(n);
              if (pass == 0) {
                EXPECT_EQ(gcclAllGatherCompressed(in.data(), out_ag.data(), n, gcclFloat32, ag, comm, nullptr),
                          gcclSuccess);
                EXPECT_EQ(
                    gcclReduceScatterCompressed(in.data(), out_rs.data(), n, gcclFloat32, gcclSum, rs, comm, nullptr),
                    gcclSuccess);
                host_ag[ru] = out_ag;
                host_rs[ru] = out_rs;
              } else {
                DeviceFloats send(n * p), ag_out(n * p), rs_out(n);
                send.Put(in);
                EXPECT_EQ(gcclAllGatherCompressed(send.p, ag_out.p, n, gcclFloat32, ag, comm, nullptr), gcclSuccess);
                EXPECT_EQ(gcclReduceScatterCompressed(send.p, rs_out.p, n, gcclFloat32, gcclSum, rs, comm, nullptr),
                          gcclSuccess);
                dev_ag[ru] = ag_out.Get();
                dev_rs[ru] = rs_out.Get();
              }
              gcclCompressorDestroy(ag);
              gcclCompressorDestroy(rs);
            }
          }),
      gcclSuccess);
  for (int r = 0; r < p; r++) {
    EXPECT_EQ(std::memcmp(dev_ag[r].data(), host_ag[r].data(), n * p * sizeof(float)), 0) << "allgather, rank " << r;
    EXPECT_EQ(std::memcmp(dev_rs[r].data(), host_rs[r].data(), n * sizeof(float)), 0) << "reducescatter, rank " << r;
    EXPECT_EQ(std::memcmp(dev_ag[r].data(), dev_ag[0].data(), n * p * sizeof(float)), 0) << "rank " << r;
  }
}

// The one-frame schedules (sparse-ag, sparse-sr, randk, the compressed allgather)
// encode a device input on the GPU — the residual then stays on the device —,
// decode into a device output there (or into a host one on the host), and give
// the host path's bits: every rank's result, and the residual, after three calls
// with error feedback.
TEST(DeviceBuffers, OneFrameSchedulesEncodeOnTheGpuAndGiveTheHostPathsBits) {
  SKIP_WITHOUT_GPU();
  struct Case {
    const char* algo;
    const char* spec;
    bool allgather;
    bool host_out;  // the receive buffer in host memory
  };
  const Case cases[] = {
      {"sparse-ag", "topk:ratio=0.01", false, false}, {"sparse-ag", "topk:ratio=0.01", false, true},
      {"sparse-sr", "topk:ratio=0.05", false, false}, {"sparse-ag", "topk:ratio=0.01,approx=1", false, false},
      {"randk", "randk:ratio=0.02", false, false},    {"randk", "randk:ratio=0.02,ef=1", false, false},
      {"sra", "uniform:bits=4,ef=1", true, false},    {"sra", "uniform:bits=4,ef=1", true, true},
      {"sra", "topk:ratio=0.1", true, false}};
  for (const Case& k : cases) {
    for (int p : {2, 3}) {
      for (size_t n : {size_t{1}, size_t{1031}, size_t{100003}}) {
        SCOPED_TRACE(std::string(k.algo) + " " + k.spec + (k.host_out ? " host output" : "") +
                     " p=" + std::to_string(p) + " n=" + std::to_string(n));
        gh::ScopedEnv algo("GCCL_ALGO", k.algo);  // read when the communicators are made
        const size_t out_n = k.allgather ? n * static_cast<size_t>(p) : n;
        std::vector<std::vector<float>> host(p), dev(p), host_res(p), dev_res(p);
        std::vector<int> on_device(p, 0);
        ASSERT_EQ(
            gh::RunRanks(
                p,
                [&](int r, gcclComm_t comm) {
                  gcclCompressor_t hc = nullptr, dc = nullptr;
                  ASSERT_EQ(gcclCompressorCreate(&hc, k.spec, n, gcclFloat32), gcclSuccess);
                  ASSERT_EQ(gcclCompressorCreate(&dc, k.spec, n, gcclFloat32), gcclSuccess);
                  std::vector<float> in(n), out(out_n), host_recv(out_n);
                  DeviceFloats send(n), recv(out_n);
                  float* dev_out = k.host_out ? host_recv.data() : recv.p;
                  for (int call = 0; call < 3; call++) {
                    for (size_t i = 0; i < n; i++) in[i] = Input(r, i * 7 + static_cast<size_t>(call)) * 0.37f;
                    send.Put(in);
                    if (k.allgather) {
                      EXPECT_EQ(gcclAllGatherCompressed(in.data(), out.data(), n, gcclFloat32, hc, comm, nullptr),
                                gcclSuccess);
                      EXPECT_EQ(gcclAllGatherCompressed(send.p, dev_out, n, gcclFloat32, dc, comm, nullptr),
                                gcclSuccess)
                          << gcclGetLastError(comm);
                    } else {
                      EXPECT_EQ(
                          gcclAllReduceCompressed(in.data(), out.data(), n, gcclFloat32, gcclSum, hc, comm, nullptr),
                          gcclSuccess);
                      EXPECT_EQ(gcclAllReduceCompressed(send.p, dev_out, n, gcclFloat32, gcclSum, dc, comm, nullptr),
                                gcclSuccess)
                          << gcclGetLastError(comm);
                    }
                  }
                  size_t ru = static_cast<size_t>(r);
                  // Only the GPU encode makes the twin; with error feedback the residual
                  // must have stayed with it (randk's default is ef=0: no residual).
                  on_device[ru] = dc->device != nullptr && (!dc->spec.ef || dc->residual_on_device);
                  host[ru] = out;
                  dev[ru] = k.host_out ? host_recv : recv.Get();
                  host_res[ru].resize(n);
                  dev_res[ru].resize(n);
                  EXPECT_EQ(gcclCompressorGetResidual(hc, host_res[ru].data()), gcclSuccess);
                  EXPECT_EQ(gcclCompressorGetResidual(dc, dev_res[ru].data()), gcclSuccess);
                  gcclCompressorDestroy(hc);
                  gcclCompressorDestroy(dc);
                }),
            gcclSuccess);
        for (int r = 0; r < p; r++) {
          EXPECT_EQ(on_device[r], 1) << "rank " << r << ": the encode did not run on the GPU";
          EXPECT_EQ(std::memcmp(dev[r].data(), host[r].data(), out_n * sizeof(float)), 0) << "result, rank " << r;
          EXPECT_EQ(std::memcmp(dev_res[r].data(), host_res[r].data(), n * sizeof(float)), 0) << "residual, rank " << r;
          EXPECT_EQ(std::memcmp(dev[r].data(), dev[0].data(), out_n * sizeof(float)), 0) << "rank " << r;
        }
      }
    }
  }
}

// Rank r's buffers on GPU r, its calls on a gccl stream: the stream's worker
// thread runs each call with the buffers' device current (the default one would
// be wrong for rank 1). Dense and top-k (the GPU codec path) allreduces.
TEST(DeviceBuffers, StreamWorkersRunOnTheBuffersDevice) {
  SKIP_WITHOUT_GPU();
  int gpus = 0;
  ASSERT_EQ(cudaGetDeviceCount(&gpus), cudaSuccess);
  if (gpus < 2) GTEST_SKIP() << "needs two GPUs, found " << gpus;
  const int p = 2;
  const size_t n = 100003;
  std::vector<float> want(n, 0.0f);
  for (int r = 0; r < p; r++)
    for (size_t i = 0; i < n; i++) want[i] += Input(r, i);
  ASSERT_EQ(gh::RunRanks(p,
                         [&](int r, gcclComm_t comm) {
                           ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
                           std::vector<float> in(n);
                           for (size_t i = 0; i < n; i++) in[i] = Input(r, i);
                           DeviceFloats send(n), recv(n);
                           send.Put(in);
                           cudaStream_t cs;
                           ASSERT_EQ(cudaStreamCreate(&cs), cudaSuccess);
                           gcclStream_t s = nullptr;
                           ASSERT_EQ(gcclStreamCreateCuda(&s, cs), gcclSuccess);
                           EXPECT_EQ(gcclAllReduce(send.p, recv.p, n, gcclFloat32, gcclSum, comm, s), gcclSuccess);
                           EXPECT_EQ(gcclStreamSynchronize(s), gcclSuccess) << gcclGetLastError(comm);
                           EXPECT_EQ(recv.Get(), want) << "dense, rank " << r;
                           gcclCompressor_t c = nullptr;
                           ASSERT_EQ(gcclCompressorCreate(&c, "topk:ratio=1", n, gcclFloat32), gcclSuccess);
                           EXPECT_EQ(gcclAllReduceCompressed(send.p, recv.p, n, gcclFloat32, gcclSum, c, comm, s),
                                     gcclSuccess);
                           EXPECT_EQ(gcclStreamSynchronize(s), gcclSuccess) << gcclGetLastError(comm);
                           EXPECT_EQ(recv.Get(), want) << "top-k of every element, rank " << r;
                           gcclCompressorDestroy(c);
                           gcclStreamDestroy(s);
                           cudaStreamDestroy(cs);
                         }),
            gcclSuccess);
}

// A reduce leaves the receive buffers of non-root ranks as they were.
TEST(DeviceBuffers, ReduceLeavesNonRootReceiveBuffersAlone) {
  SKIP_WITHOUT_GPU();
  const int p = 3;
  const size_t n = 13;
  ASSERT_EQ(gh::RunRanks(p,
                         [&](int r, gcclComm_t comm) {
                           std::vector<float> in(n, 1.0f), sentinel(n, -7.0f);
                           DeviceFloats send(n), recv(n);
                           send.Put(in);
                           recv.Put(sentinel);
                           EXPECT_EQ(gcclReduce(send.p, recv.p, n, gcclFloat32, gcclSum, 1, comm, nullptr),
                                     gcclSuccess);
                           EXPECT_EQ(recv.Get(), r == 1 ? std::vector<float>(n, 3.0f) : sentinel) << "rank " << r;
                         }),
            gcclSuccess);
}

TEST(DeviceBuffers, StreamGetCudaReturnsTheWrappedStream) {
  SKIP_WITHOUT_GPU();
  cudaStream_t cs, back = nullptr;
  ASSERT_EQ(cudaStreamCreate(&cs), cudaSuccess);
  gcclStream_t s = nullptr;
  ASSERT_EQ(gcclStreamCreateCuda(&s, cs), gcclSuccess);
  EXPECT_EQ(gcclStreamGetCuda(s, &back), gcclSuccess);
  EXPECT_EQ(back, cs);
  EXPECT_EQ(gcclStreamGetCuda(s, nullptr), gcclInvalidArgument);
  EXPECT_EQ(gcclStreamDestroy(s), gcclSuccess);
  EXPECT_EQ(gcclStreamGetCuda(nullptr, &back), gcclInvalidArgument);
  cudaStreamDestroy(cs);
}

// Argument checks touch no GPU: they hold, and run, without one.
TEST(DeviceBuffers, StreamCudaHostileArguments) {
  cudaStream_t back = reinterpret_cast<cudaStream_t>(uintptr_t{1});
  EXPECT_EQ(gcclStreamCreateCuda(nullptr, nullptr), gcclInvalidArgument);
  EXPECT_NE(std::string(gcclGetLastError(nullptr)).find("gcclStreamCreate"), std::string::npos);
  gcclStream_t dead = nullptr;
  ASSERT_EQ(gcclStreamCreate(&dead), gcclSuccess);
  EXPECT_EQ(gcclStreamGetCuda(dead, &back), gcclSuccess);
  EXPECT_EQ(back, nullptr) << "a stream not made by gcclStreamCreateCuda wraps no CUDA stream";
  ASSERT_EQ(gcclStreamDestroy(dead), gcclSuccess);
  int made_up = 0;
  for (gcclStream_t bad : {static_cast<gcclStream_t>(nullptr), dead, reinterpret_cast<gcclStream_t>(&made_up)}) {
    back = reinterpret_cast<cudaStream_t>(uintptr_t{1});
    EXPECT_EQ(gcclStreamGetCuda(bad, &back), gcclInvalidArgument);
    EXPECT_NE(std::string(gcclGetLastError(nullptr)).find("gcclStreamGetCuda"), std::string::npos);
    EXPECT_EQ(back, reinterpret_cast<cudaStream_t>(uintptr_t{1})) << "written on error";
  }
}

}  // namespace
