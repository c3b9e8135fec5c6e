// GPU codecs against the CPU compressor: frames byte for byte, residuals bit for
// bit, decoding on the GPU equal to decoding on the CPU, corrupt frames refused.
// Every test skips, saying why, when no CUDA device is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda/gpu_test.h"
#include "gccl.h"

extern "C" {
#include "common/dtype.h"
#include "compress/compressor.h"
#include "cuda/gpu_compressor.h"
}

namespace {

// A device buffer freed with its scope.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { EXPECT_EQ(cudaMalloc(&p_, bytes ? bytes : 1), cudaSuccess); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return p_; }
  void Upload(const void* h, size_t bytes) { ASSERT_EQ(cudaMemcpy(p_, h, bytes, cudaMemcpyHostToDevice), cudaSuccess); }
  void Download(void* h, size_t bytes) const {
    ASSERT_EQ(cudaMemcpy(h, p_, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  }

 private:
  void* p_ = nullptr;
};

// n elements of dt with values drawn around `scale`; specials placed by the test.
std::vector<unsigned char> RandomTensor(size_t n, gcclDataType_t dt, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<unsigned char> t(n * dtype_size(dt) + 1);
  for (size_t i = 0; i < n; i++) {
    float v = dist(gen);
    f32_store(t.data() + i * dtype_size(dt), dt, &v, 1);
  }
  return t;
}

void Put(std::vector<unsigned char>& t, gcclDataType_t dt, size_t i, float v) {
  f32_store(t.data() + i * dtype_size(dt), dt, &v, 1);
}

struct Case {
  const char* spec;
  gcclDataType_t dt;
  size_t n;
};

std::string Name(const Case& c) {
  return std::string(c.spec) + " " + dtype_name(c.dt) + " n=" + std::to_string(c.n);
}

// Three calls in a row (the residual and call number evolve): the GPU frame and
// residual equal the CPU compressor's.
void ExpectSameFrames(const Case& c, uint32_t seed, bool specials) {
  SCOPED_TRACE(Name(c));
  gcclCompressor_t cpu = nullptr;
  ASSERT_EQ(gcclCompressorCreate(&cpu, c.spec, c.n, c.dt), gcclSuccess) << gcclGetLastError(nullptr);
  struct gpu_compressor* gpu = nullptr;
  ASSERT_EQ(gpu_compressor_create(&gpu, c.spec, c.n, c.dt), gcclSuccess) << gcclGetLastError(nullptr);
  size_t bound = 0;
  ASSERT_EQ(gcclEncodeBound(cpu, &bound), gcclSuccess);
  ASSERT_EQ(gpu_compressor_bound(gpu), bound);
  DeviceBuffer d_src(c.n * dtype_size(c.dt));
  std::vector<unsigned char> f_cpu(bound), f_gpu(bound);
  for (int call = 0; call < 3; call++) {
    std::vector<unsigned char> t = RandomTensor(c.n, c.dt, seed + call, call == 2 ? 1e-3f : 1.0f);
    if (specials && c.n > 40) {
      Put(t, c.dt, 3, std::numeric_limits<float>::quiet_NaN());
      Put(t, c.dt, c.n - 1, std::numeric_limits<float>::infinity());
      Put(t, c.dt, c.n / 2, -std::numeric_limits<float>::infinity());
      if (c.dt == gcclFloat32 || c.dt == gcclFloat64) {  // a bucket whose range or sum overflows fp32
        Put(t, c.dt, 20, 3.0e38f);
        Put(t, c.dt, 21, -3.0e38f);
        Put(t, c.dt, 22, 3.0e38f);
      }
    }
    d_src.Upload(t.data(), c.n * dtype_size(c.dt));
    size_t b_cpu = 0, b_gpu = 0;
    ASSERT_EQ(gcclEncode(cpu, t.data(), f_cpu.data(), bound, &b_cpu), gcclSuccess) << gcclGetLastError(nullptr);
    ASSERT_EQ(gpu_compressor_encode(gpu, d_src.get(), f_gpu.data(), bound, &b_gpu, nullptr), gcclSuccess)
        << gcclGetLastError(nullptr);
    ASSERT_EQ(b_gpu, b_cpu) << "call " << call;
    for (size_t i = 0; i < b_cpu; i++)
      ASSERT_EQ(f_gpu[i], f_cpu[i]) << "call " << call << ": frames differ first at byte " << i << " of " << b_cpu;
    if (cpu->spec.ef) {
      std::vector<float> r(c.n + 1);
      ASSERT_EQ(gpu_compressor_get_residual(gpu, r.data()), gcclSuccess);
      ASSERT_EQ(std::memcmp(r.data(), cpu->residual, c.n * sizeof(float)), 0)
          << "call " << call << ": residuals differ";
    }
  }
  gpu_compressor_destroy(gpu);
  gcclCompressorDestroy(cpu);
}

const char* const kSpecs[] = {
    "none",
    "fp16",
    "bf16",
    "fp16:ef=1",
    "bf16:ef=1",
    "sign",
    "sign:bucket=33,ef=0",
    "sign:bucket=1",
    "uniform:bits=8",
    "uniform:bits=4,bucket=512,ef=1",
    "uniform:bits=1,bucket=7",
    "uniform:bits=2,bucket=100,round=stochastic,seed=9",
    "uniform:bits=3,bucket=64,round=stochastic,ef=1",
    "uniform:bits=5,bucket=1000,round=nearest",
    "uniform:bits=6,bucket=13",
    "uniform:bits=7,bucket=4096,round=stochastic",
    "qsgd:bits=4",
    "qsgd:bits=4,ef=1",
    "qsgd:bits=1,bucket=7",
    "qsgd:bits=2,bucket=100,seed=9",
    "qsgd:bits=3,bucket=64,ef=1",
    "qsgd:bits=5,bucket=1000",
    "qsgd:bits=6,bucket=13,ef=1",
    "qsgd:bits=7,bucket=33",
    "qsgd:bits=8,bucket=33,ef=1",
    "qsgd:bits=8,bucket=4096,seed=3",
    "terngrad",
    "terngrad:ef=1",
    "terngrad:bucket=7",
    "terngrad:bucket=33,ef=1,seed=5",
    "terngrad:bucket=1",
    "topk:ratio=0.01",
    "topk:ratio=0.1,ef=0",
    "topk:ratio=1",
    "topk:ratio=0.5,values=fp16",
    "topk:ratio=0.05,values=bf16,ef=0",
    "topk:ratio=0.001,values=fp16,ef=1",
    "topk:ratio=0.01,approx=1",
    "topk:ratio=0.002,approx=1,values=bf16,ef=0",
    "randk:ratio=0.01",
    "randk:ratio=0.3,values=fp16,seed=4",
    "randk:ratio=1,ef=1",
    "randk:ratio=0.1,values=bf16,ef=0",
};

const gcclDataType_t kFloatTypes[] = {gcclFloat32, gcclFloat64, gcclFloat16, gcclBfloat16};
const size_t kCounts[] = {0, 1, 7, 13, 31, 1031, 100003};

TEST(GpuCodec, FramesEqualTheCpuCompressors) {
  SKIP_WITHOUT_GPU();
  for (const char* spec : kSpecs)
    for (gcclDataType_t dt : kFloatTypes)
      for (size_t n : kCounts) ExpectSameFrames({spec, dt, n}, 17, false);
}

TEST(GpuCodec, NonFiniteInputsAndOverflowingBucketsGiveTheSameExceptions) {
  SKIP_WITHOUT_GPU();
  for (const char* spec : kSpecs)
    for (gcclDataType_t dt : kFloatTypes)
      for (size_t n : {size_t{41}, size_t{1031}, size_t{100003}}) ExpectSameFrames({spec, dt, n}, 5, true);
}

TEST(GpuCodec, MostlyNonFiniteInputFallsBackToTheSameRawFrame) {
  SKIP_WITHOUT_GPU();
  for (const char* spec : {"sign", "uniform:bits=2,ef=1", "fp16:ef=1", "qsgd:bits=3,ef=1", "terngrad"}) {
    SCOPED_TRACE(spec);
    const size_t n = 999;
    gcclCompressor_t cpu = nullptr;
    struct gpu_compressor* gpu = nullptr;
    ASSERT_EQ(gcclCompressorCreate(&cpu, spec, n, gcclFloat32), gcclSuccess);
    ASSERT_EQ(gpu_compressor_create(&gpu, spec, n, gcclFloat32), gcclSuccess);
    std::vector<float> x(n);
    for (size_t i = 0; i < n; i++) x[i] = i % 3 ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(i);
    DeviceBuffer d(n * sizeof(float));
    d.Upload(x.data(), n * sizeof(float));
    size_t bound = gpu_compressor_bound(gpu), b1 = 0, b2 = 0;
    std::vector<unsigned char> f1(bound), f2(bound);
    ASSERT_EQ(gcclEncode(cpu, x.data(), f1.data(), bound, &b1), gcclSuccess);
    ASSERT_EQ(gpu_compressor_encode(gpu, d.get(), f2.data(), bound, &b2, nullptr), gcclSuccess);
    ASSERT_EQ(b1, b2);
    EXPECT_EQ(std::memcmp(f1.data(), f2.data(), b1), 0);
    gpu_compressor_destroy(gpu);
    gcclCompressorDestroy(cpu);
  }
}

// GPU decoding of CPU frames (with exceptions) equals CPU decoding, for every dtype.
TEST(GpuCodec, DecodeAccumulateEqualsTheCpuDecoder) {
  SKIP_WITHOUT_GPU();
  for (const char* spec : kSpecs)
    for (gcclDataType_t dt : kFloatTypes)
      for (size_t n : {size_t{0}, size_t{1}, size_t{13}, size_t{1031}, size_t{100003}}) {
        Case c{spec, dt, n};
        SCOPED_TRACE(Name(c));
        gcclCompressor_t cpu = nullptr;
        ASSERT_EQ(gcclCompressorCreate(&cpu, spec, n, dt), gcclSuccess);
        struct gpu_compressor* gpu = nullptr;
        ASSERT_EQ(gpu_compressor_create(&gpu, spec, n, dt), gcclSuccess);
        std::vector<unsigned char> t = RandomTensor(n, dt, 3, 2.0f);
        if (n > 40) {
          Put(t, dt, 5, std::numeric_limits<float>::infinity());
          Put(t, dt, 9, std::numeric_limits<float>::quiet_NaN());
        }
        size_t bound = 0, bytes = 0;
        ASSERT_EQ(gcclEncodeBound(cpu, &bound), gcclSuccess);
        std::vector<unsigned char> frame(bound);
        ASSERT_EQ(gcclEncode(cpu, t.data(), frame.data(), bound, &bytes), gcclSuccess);
        std::vector<unsigned char> acc = RandomTensor(n, dt, 4, 1.0f), want = acc, got(acc.size());
        DeviceBuffer d(n * dtype_size(dt));
        d.Upload(acc.data(), n * dtype_size(dt));
        ASSERT_EQ(gcclDecodeAccumulate(frame.data(), bytes, want.data(), n, dt), gcclSuccess);
        ASSERT_EQ(gpu_compressor_decode(gpu, frame.data(), bytes, d.get(), n, dt, nullptr), gcclSuccess)
            << gcclGetLastError(nullptr);
        d.Download(got.data(), n * dtype_size(dt));
        EXPECT_EQ(std::memcmp(got.data(), want.data(), n * dtype_size(dt)), 0);
        gpu_compressor_destroy(gpu);
        gcclCompressorDestroy(cpu);
      }
}

TEST(GpuCodec, CorruptFramesLeaveTheDeviceTensorUnchanged) {
  SKIP_WITHOUT_GPU();
  const size_t n = 1000;
  gcclCompressor_t cpu = nullptr;
  struct gpu_compressor* gpu = nullptr;
  ASSERT_EQ(gcclCompressorCreate(&cpu, "uniform:bits=4", n, gcclFloat32), gcclSuccess);
  ASSERT_EQ(gpu_compressor_create(&gpu, "uniform:bits=4", n, gcclFloat32), gcclSuccess);
  std::vector<float> x(n, 1.5f), acc(n, 2.0f), got(n);
  size_t bound = gpu_compressor_bound(gpu), bytes = 0;
  std::vector<unsigned char> frame(bound);
  ASSERT_EQ(gcclEncode(cpu, x.data(), frame.data(), bound, &bytes), gcclSuccess);
  DeviceBuffer d(n * sizeof(float));
  d.Upload(acc.data(), n * sizeof(float));
  frame[100] ^= 0x10;  // a payload bit: the CRC no longer matches
  EXPECT_EQ(gpu_compressor_decode(gpu, frame.data(), bytes, d.get(), n, gcclFloat32, nullptr), gcclCorruptData);
  EXPECT_NE(std::string(gcclGetLastError(nullptr)).find("CRC"), std::string::npos) << gcclGetLastError(nullptr);
  frame[100] ^= 0x10;
  EXPECT_EQ(gpu_compressor_decode(gpu, frame.data(), bytes, d.get(), n + 1, gcclFloat32, nullptr), gcclCorruptData);
  d.Download(got.data(), n * sizeof(float));
  EXPECT_EQ(std::memcmp(got.data(), acc.data(), n * sizeof(float)), 0);
  gpu_compressor_destroy(gpu);
  gcclCompressorDestroy(cpu);
}

TEST(GpuCodec, CodecsWithoutKernelsAreRefusedByName) {
  SKIP_WITHOUT_GPU();
  struct gpu_compressor* gpu = nullptr;
  // Without libzstd the spec itself is refused, by the parser, as on the CPU.
  gcclCompressor_t cpu = nullptr;
  const gcclResult_t on_cpu = gcclCompressorCreate(&cpu, "topk:ratio=0.01,zstd=1", 100, gcclFloat32);
  if (cpu != nullptr) gcclCompressorDestroy(cpu);
  EXPECT_EQ(gpu_compressor_create(&gpu, "topk:ratio=0.01,zstd=1", 100, gcclFloat32),
            on_cpu == gcclSuccess ? gcclInvalidUsage : on_cpu);
  EXPECT_NE(std::string(gcclGetLastError(nullptr)).find("zstd=1"), std::string::npos);
  EXPECT_EQ(gpu, nullptr);
}

// Top-k's ties: integer-valued data has many equal |x|; the kept ones must be the
// lowest indices among the ties at the threshold, as on the CPU, and values of
// fp16's range limit (65520 and above) must travel as exceptions.
TEST(GpuCodec, TopkTiesAndValuesBeyondTheCarriedTypeMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  for (const char* spec : {"topk:ratio=0.1", "topk:ratio=0.37,ef=0", "topk:ratio=0.01,values=fp16"}) {
    for (size_t n : {size_t{1}, size_t{97}, size_t{100003}}) {
      SCOPED_TRACE(std::string(spec) + " n=" + std::to_string(n));
      gcclCompressor_t cpu = nullptr;
      struct gpu_compressor* gpu = nullptr;
      ASSERT_EQ(gcclCompressorCreate(&cpu, spec, n, gcclFloat32), gcclSuccess);
      ASSERT_EQ(gpu_compressor_create(&gpu, spec, n, gcclFloat32), gcclSuccess);
      std::vector<float> x(n);
      for (size_t i = 0; i < n; i++) x[i] = static_cast<float>(static_cast<int>(i * 7919 % 11) - 5);
      if (n > 50) x[50] = 70000.0f, x[n - 1] = -65520.0f, x[n / 3] = -0.0f;
      DeviceBuffer d(n * sizeof(float));
      d.Upload(x.data(), n * sizeof(float));
      size_t bound = gpu_compressor_bound(gpu), b1 = 0, b2 = 0;
      std::vector<unsigned char> f1(bound), f2(bound);
      for (int call = 0; call < 2; call++) {
        ASSERT_EQ(gcclEncode(cpu, x.data(), f1.data(), bound, &b1), gcclSuccess);
        ASSERT_EQ(gpu_compressor_encode(gpu, d.get(), f2.data(), bound, &b2, nullptr), gcclSuccess);
        ASSERT_EQ(b1, b2) << "call " << call;
        EXPECT_EQ(std::memcmp(f1.data(), f2.data(), b1), 0) << "call " << call;
      }
      gpu_compressor_destroy(gpu);
      gcclCompressorDestroy(cpu);
    }
  }
}

// Without a device, creation fails with a message instead of crashing.
TEST(GpuCodec, WithoutADeviceCreationSaysWhy) {
  const char* why = nullptr;
  if (gpu_available(&why)) GTEST_SKIP() << "a CUDA device is present";
  struct gpu_compressor* gpu = nullptr;
  EXPECT_EQ(gpu_compressor_create(&gpu, "fp16", 100, gcclFloat32), gcclInvalidUsage);
  EXPECT_NE(std::string(gcclGetLastError(nullptr)).find("CUDA device"), std::string::npos);
  EXPECT_EQ(gpu, nullptr);
}

}  // namespace
