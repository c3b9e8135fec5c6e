// test_sra_model.cc — sra's allreduce, bit for bit, against a model built from the
// public codec API, for the deterministic codecs: the frames of small ratio
// (sign) are summed a block at a time once all are in, the others term by term
// as they arrive (sra.c), and both must give the model's bits on every rank:
//   frame F_rj = encode(x_r[chunk j])                 every rank r != j
//   S_j        = ((0 + t_0) + t_1) + ...             rank order, t_r = decode(F_rj),
//                                                     the owner's own term (acc + x_j) + 0
//   out[chunk j] = decode(encode(S_j))                on every rank
// First call on fresh compressors (residual 0), inputs without -0.0.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/harness.h"
#include "gccl.h"

namespace {

using Vec = std::vector<float>;

// chunk r of count over p ranks, as coll_chunk cuts it (the first count % p get one more)
void Chunk(size_t count, int p, int r, size_t* off, size_t* len) {
  size_t base = count / static_cast<size_t>(p), extra = count % static_cast<size_t>(p), ur = static_cast<size_t>(r);
  *off = ur * base + (ur < extra ? ur : extra);
  *len = base + (ur < extra ? 1 : 0);
}

// decode(encode(x)) through a fresh compressor without error feedback: the
// frame a collective's encode of x with a zero residual sends.
Vec RoundTrip(const std::string& spec, const Vec& x) {
  Vec out(x.size(), 0.0f);
  if (x.empty()) return out;
  gcclCompressor_t c = nullptr;
  EXPECT_EQ(gcclCompressorCreate(&c, (spec + (spec.find(':') == std::string::npos ? ":ef=0" : ",ef=0")).c_str(),
                                 x.size(), gcclFloat32),
            gcclSuccess)
      << gcclGetLastError(nullptr);
  size_t bound = 0, bytes = 0;
  EXPECT_EQ(gcclEncodeBound(c, &bound), gcclSuccess);
  std::vector<unsigned char> frame(bound);
  EXPECT_EQ(gcclEncode(c, x.data(), frame.data(), bound, &bytes), gcclSuccess) << gcclGetLastError(nullptr);
  EXPECT_EQ(gcclDecodeAccumulate(frame.data(), bytes, out.data(), x.size(), gcclFloat32), gcclSuccess)
      << gcclGetLastError(nullptr);
  gcclCompressorDestroy(c);
  return out;
}

Vec Model(const std::string& spec, const std::vector<Vec>& x, size_t n) {
  int p = static_cast<int>(x.size());
  Vec out(n);
  for (int j = 0; j < p; j++) {
    size_t off, len;
    Chunk(n, p, j, &off, &len);
    Vec sum(len, 0.0f);
    for (int r = 0; r < p; r++) {
      Vec part(x[static_cast<size_t>(r)].begin() + static_cast<long>(off),
               x[static_cast<size_t>(r)].begin() + static_cast<long>(off + len));
      if (r == j) {
        for (size_t i = 0; i < len; i++) sum[i] = (sum[i] + part[i]) + 0.0f;
      } else {
        Vec t = RoundTrip(spec, part);
        for (size_t i = 0; i < len; i++) sum[i] += t[i];
      }
    }
    Vec s = RoundTrip(spec, sum);
    std::copy(s.begin(), s.end(), out.begin() + static_cast<long>(off));
  }
  return out;
}

Vec Input(int r, size_t n) {
  Vec x(n);
  for (size_t i = 0; i < n; i++) {
    uint64_t h = gh::Mix64((static_cast<uint64_t>(r) << 40) ^ i ^ 0x5A5A);
    x[i] = static_cast<float>((static_cast<double>(h >> 11) * 0x1p-53 - 0.4) * (1 + r));
    if (x[i] == 0.0f) x[i] = 1.0f;  // no -0.0 (nor +0.0): the model's encodes skip the + 0 residual
  }
  return x;
}

TEST(SraModel, DeterministicCodecsMatchTheModelBitForBit) {
  // sign and sign:bucket=7 take the block path (4096- and 4095-element blocks);
  // fp16 and uniform nearest the term-by-term one. At p = 3, 1800007 elements
  // make parts of 600002-600003: frames decoded in three slices of 2^18 elements
  // (rounded up to whole buckets), as sra.c does between progress calls.
  const char* const specs[] = {"sign", "sign:bucket=7", "fp16", "uniform:bits=4,round=nearest"};
  for (int p : {1, 2, 3, 4, 5, 8}) {
    std::vector<size_t> counts = {0, 1, 13, 1031, 3 * 4096 + 517, 40009};
    if (p == 3) counts.push_back(1800007);
    std::vector<gcclComm_t> comms(static_cast<size_t>(p), nullptr);
    {
      gh::ScopedEnv a("GCCL_ALGO", "sra");
      gh::ScopedEnv t("GCCL_TIMEOUT_MS", "30000");
      ASSERT_EQ(gcclCommInitAll(comms.data(), p), gcclSuccess) << gcclGetLastError(nullptr);
    }
    for (const char* spec : specs)
      for (size_t n : counts) {
        SCOPED_TRACE(std::string(spec) + " p=" + std::to_string(p) + " n=" + std::to_string(n));
        std::vector<Vec> x, out(static_cast<size_t>(p), Vec(n, -7.0f));
        for (int r = 0; r < p; r++) x.push_back(Input(r, n));
        std::vector<gcclResult_t> res(static_cast<size_t>(p), gcclInternalError);
        std::vector<std::thread> threads;
        for (int r = 0; r < p; r++)
          threads.emplace_back([&, r] {
            size_t ur = static_cast<size_t>(r);
            gcclCompressor_t c = nullptr;
            res[ur] = gcclCompressorCreate(&c, spec, n, gcclFloat32);
            if (res[ur] == gcclSuccess)
              res[ur] =
                  gcclAllReduceCompressed(x[ur].data(), out[ur].data(), n, gcclFloat32, gcclSum, c, comms[ur], nullptr);
            gcclCompressorDestroy(c);
          });
        for (auto& t : threads) t.join();
        Vec want = Model(spec, x, n);
        for (int r = 0; r < p; r++) {
          ASSERT_EQ(res[static_cast<size_t>(r)], gcclSuccess) << "rank " << r;
          ASSERT_TRUE(n == 0 || std::memcmp(out[static_cast<size_t>(r)].data(), want.data(), n * sizeof(float)) == 0)
              << "rank " << r << " differs from the model";
        }
      }
    for (gcclComm_t c : comms) gcclCommDestroy(c);
  }
}

}  // namespace
