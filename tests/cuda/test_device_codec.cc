// The public codec API on device memory: gcclEncode of a device tensor (host or
// device frame), gcclDecodeAccumulate into device memory, and a residual that
// follows the compressor between host and device calls; gcclEncodeCuda and
// gcclDecodeAccumulateCuda on a stream of the caller's. The tests of device
// memory skip without a GPU; the stream variants' checks on host memory run.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "cuda/gpu_test.h"
#include "gccl.h"
#include "gccl_cuda.h"

namespace {

// A device buffer of `bytes`, holding host[0, bytes) unless host is NULL.
void* DeviceCopy(const void* host, size_t bytes) {
  void* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, bytes ? bytes : 1), cudaSuccess);
  if (host != nullptr && bytes > 0) {
    EXPECT_EQ(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
  return d;
}

std::vector<float> Tensor(size_t n, int call) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; i++)
    x[i] = static_cast<float>((i * 2654435761u + static_cast<size_t>(call) * 97) % 1000) / 250.0f - 2.0f;
  return x;
}

// Calls alternate device, host, device on one compressor; a host-only compressor
// makes the same three calls. Frames and residuals must agree at every step.
TEST(DeviceCodec, EncodeOfADeviceTensorEqualsTheHostsAcrossAlternatingCalls) {
  SKIP_WITHOUT_GPU();
  const size_t n = 10007;
  for (const char* spec : {"fp16:ef=1", "uniform:bits=4,ef=1", "sign", "topk:ratio=0.01", "randk:ratio=0.05,ef=1",
                           "qsgd:bits=4,ef=1", "terngrad"}) {
    SCOPED_TRACE(spec);
    gcclCompressor_t mixed = nullptr, host = nullptr;
    ASSERT_EQ(gcclCompressorCreate(&mixed, spec, n, gcclFloat32), gcclSuccess);
    ASSERT_EQ(gcclCompressorCreate(&host, spec, n, gcclFloat32), gcclSuccess);
    size_t bound = 0;
    ASSERT_EQ(gcclEncodeBound(host, &bound), gcclSuccess);
    std::vector<unsigned char> f_mixed(bound), f_host(bound);
    for (int call = 0; call < 3; call++) {
      std::vector<float> x = Tensor(n, call);
      size_t b_mixed = 0, b_host = 0;
      ASSERT_EQ(gcclEncode(host, x.data(), f_host.data(), bound, &b_host), gcclSuccess);
      if (call % 2 == 0) {
        void* d = DeviceCopy(x.data(), n * sizeof(float));
        ASSERT_EQ(gcclEncode(mixed, d, f_mixed.data(), bound, &b_mixed), gcclSuccess) << gcclGetLastError(nullptr);
        cudaFree(d);
      } else {
        ASSERT_EQ(gcclEncode(mixed, x.data(), f_mixed.data(), bound, &b_mixed), gcclSuccess);
      }
      ASSERT_EQ(b_mixed, b_host) << "call " << call;
      EXPECT_EQ(std::memcmp(f_mixed.data(), f_host.data(), b_host), 0) << "call " << call;
      std::vector<float> r_mixed(n), r_host(n);
      ASSERT_EQ(gcclCompressorGetResidual(mixed, r_mixed.data()), gcclSuccess);
      ASSERT_EQ(gcclCompressorGetResidual(host, r_host.data()), gcclSuccess);
      EXPECT_EQ(std::memcmp(r_mixed.data(), r_host.data(), n * sizeof(float)), 0) << "call " << call;
    }
    gcclCompressorDestroy(mixed);
    gcclCompressorDestroy(host);
  }
}

TEST(DeviceCodec, DeviceFramesAndDeviceDestinations) {
  SKIP_WITHOUT_GPU();
  const size_t n = 4099;
  gcclCompressor_t c = nullptr, ref = nullptr;
  ASSERT_EQ(gcclCompressorCreate(&c, "uniform:bits=8", n, gcclFloat32), gcclSuccess);
  ASSERT_EQ(gcclCompressorCreate(&ref, "uniform:bits=8", n, gcclFloat32), gcclSuccess);
  size_t bound = 0, bytes = 0, ref_bytes = 0;
  ASSERT_EQ(gcclEncodeBound(c, &bound), gcclSuccess);
  std::vector<float> x = Tensor(n, 0);
  std::vector<unsigned char> want(bound), got(bound);
  ASSERT_EQ(gcclEncode(ref, x.data(), want.data(), bound, &ref_bytes), gcclSuccess);
  void* d_x = DeviceCopy(x.data(), n * sizeof(float));
  void* d_frame = DeviceCopy(nullptr, bound);
  ASSERT_EQ(gcclEncode(c, d_x, d_frame, bound, &bytes), gcclSuccess) << gcclGetLastError(nullptr);
  ASSERT_EQ(bytes, ref_bytes);
  ASSERT_EQ(cudaMemcpy(got.data(), d_frame, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0);
  // Decode: device frame into host memory, host frame into device memory.
  std::vector<float> acc(n, 1.0f), expect(n, 1.0f), back(n);
  ASSERT_EQ(gcclDecodeAccumulate(want.data(), bytes, expect.data(), n, gcclFloat32), gcclSuccess);
  ASSERT_EQ(gcclDecodeAccumulate(d_frame, bytes, acc.data(), n, gcclFloat32), gcclSuccess);
  EXPECT_EQ(acc, expect);
  std::vector<float> ones(n, 1.0f);
  void* d_acc = DeviceCopy(ones.data(), n * sizeof(float));
  ASSERT_EQ(gcclDecodeAccumulate(want.data(), bytes, d_acc, n, gcclFloat32), gcclSuccess);
  ASSERT_EQ(cudaMemcpy(back.data(), d_acc, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(back, expect);
  // A device frame needs a device tensor.
  EXPECT_EQ(gcclEncode(c, x.data(), d_frame, bound, &bytes), gcclInvalidUsage);
  cudaFree(d_x);
  cudaFree(d_frame);
  cudaFree(d_acc);
  gcclCompressorDestroy(c);
  gcclCompressorDestroy(ref);
}

// The stream variants check their arguments as the plain calls do, naming
// themselves, and on host memory give the plain calls' frames and sums.
TEST(DeviceCodecStream, HostBuffersAndArgumentChecks) {
  const size_t n = 1031;
  gcclCompressor_t c = nullptr, ref = nullptr;
  ASSERT_EQ(gcclCompressorCreate(&c, "uniform:bits=4,ef=1", n, gcclFloat32), gcclSuccess);
  ASSERT_EQ(gcclCompressorCreate(&ref, "uniform:bits=4,ef=1", n, gcclFloat32), gcclSuccess);
  size_t bound = 0, bytes = 0, ref_bytes = 0;
  ASSERT_EQ(gcclEncodeBound(c, &bound), gcclSuccess);
  std::vector<float> x = Tensor(n, 3);
  std::vector<unsigned char> frame(bound), want(bound);
  ASSERT_EQ(gcclEncodeCuda(c, x.data(), frame.data(), bound, &bytes, nullptr), gcclSuccess)
      << gcclGetLastError(nullptr);
  ASSERT_EQ(gcclEncode(ref, x.data(), want.data(), bound, &ref_bytes), gcclSuccess);
  ASSERT_EQ(bytes, ref_bytes);
  EXPECT_EQ(std::memcmp(frame.data(), want.data(), bytes), 0);
  std::vector<float> a(n, 0.5f), b(n, 0.5f);
  ASSERT_EQ(gcclDecodeAccumulateCuda(frame.data(), bytes, a.data(), n, gcclFloat32, nullptr), gcclSuccess);
  ASSERT_EQ(gcclDecodeAccumulate(want.data(), bytes, b.data(), n, gcclFloat32), gcclSuccess);
  EXPECT_EQ(a, b);
  EXPECT_EQ(gcclEncodeCuda(nullptr, x.data(), frame.data(), bound, &bytes, nullptr), gcclInvalidArgument);
  EXPECT_NE(std::string(gcclGetLastError(nullptr)).find("gcclEncodeCuda"), std::string::npos);
  EXPECT_EQ(gcclEncodeCuda(c, x.data(), frame.data(), bound - 1, &bytes, nullptr), gcclInvalidArgument);
  EXPECT_NE(std::string(gcclGetLastError(nullptr)).find("cap"), std::string::npos);
  EXPECT_EQ(gcclDecodeAccumulateCuda(nullptr, bytes, a.data(), n, gcclFloat32, nullptr), gcclInvalidArgument);
  EXPECT_NE(std::string(gcclGetLastError(nullptr)).find("gcclDecodeAccumulateCuda"), std::string::npos);
  frame[70] ^= 1;
  std::vector<float> before = a;
  EXPECT_EQ(gcclDecodeAccumulateCuda(frame.data(), bytes, a.data(), n, gcclFloat32, nullptr), gcclCorruptData);
  EXPECT_EQ(a, before);
  gcclCompressorDestroy(c);
  gcclCompressorDestroy(ref);
}

// On a non-blocking stream of the caller's: the encode reads the tensor only
// after the work queued before it on that stream (here, the kernel-free copy
// that fills it), and the decode adds into what that stream's earlier work
// left; frames and sums equal the host's.
TEST(DeviceCodecStream, OrderedOnTheCallersStream) {
  SKIP_WITHOUT_GPU();
  const size_t n = 1 << 20;
  cudaStream_t st = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
  for (const char* spec : {"fp16:ef=1", "uniform:bits=4,ef=1", "sign", "topk:ratio=0.01"}) {
    SCOPED_TRACE(spec);
    gcclCompressor_t c = nullptr, ref = nullptr;
    ASSERT_EQ(gcclCompressorCreate(&c, spec, n, gcclFloat32), gcclSuccess);
    ASSERT_EQ(gcclCompressorCreate(&ref, spec, n, gcclFloat32), gcclSuccess);
    size_t bound = 0, bytes = 0, ref_bytes = 0;
    ASSERT_EQ(gcclEncodeBound(c, &bound), gcclSuccess);
    std::vector<float> x = Tensor(n, 1);
    float* d_x = static_cast<float*>(DeviceCopy(nullptr, n * sizeof(float)));
    unsigned char* d_frame = static_cast<unsigned char*>(DeviceCopy(nullptr, bound));
    float* d_acc = static_cast<float*>(DeviceCopy(nullptr, n * sizeof(float)));
    std::vector<float> ones(n, 1.0f);
    ASSERT_EQ(cudaMemcpyAsync(d_x, x.data(), n * sizeof(float), cudaMemcpyHostToDevice, st), cudaSuccess);
    ASSERT_EQ(gcclEncodeCuda(c, d_x, d_frame, bound, &bytes, st), gcclSuccess) << gcclGetLastError(nullptr);
    std::vector<unsigned char> want(bound), got(bound);
    ASSERT_EQ(gcclEncode(ref, x.data(), want.data(), bound, &ref_bytes), gcclSuccess);
    ASSERT_EQ(bytes, ref_bytes);
    ASSERT_EQ(cudaMemcpy(got.data(), d_frame, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(std::memcmp(got.data(), want.data(), bytes), 0);
    ASSERT_EQ(cudaMemcpyAsync(d_acc, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice, st), cudaSuccess);
    ASSERT_EQ(gcclDecodeAccumulateCuda(d_frame, bytes, d_acc, n, gcclFloat32, st), gcclSuccess)
        << gcclGetLastError(nullptr);
    std::vector<float> back(n), expect(n, 1.0f);
    ASSERT_EQ(gcclDecodeAccumulate(want.data(), bytes, expect.data(), n, gcclFloat32), gcclSuccess);
    ASSERT_EQ(cudaMemcpy(back.data(), d_acc, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(back, expect);
    cudaFree(d_x);
    cudaFree(d_frame);
    cudaFree(d_acc);
    gcclCompressorDestroy(c);
    gcclCompressorDestroy(ref);
  }
  cudaStreamDestroy(st);
}

}  // namespace
