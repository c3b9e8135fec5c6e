// topk_kernels.cu — exact top-k on the GPU (topk_select.c's selection, codec_topk.c's format and
// error feedback), built from a radix select and CUB's stable compaction.
//
// key(i) = the fp32 bits of x[i] with the sign cleared (orders |x| as integers).
// Elements with key >= exc_key are exceptions, never kept; the others are
// eligible, ranked by key descending, then index ascending; the first
// K = min(k, #{eligible, key >= floor}) are kept, written in index order
// (floor = 0 for exact top-k; approx=1's sampled threshold, which the host reads
// off the keys TopkSample gathers, as topk_select.c does).
//  1. Three histogram passes over x (digits of 11, 10 and 10 bits, most
//     significant first) narrow the K-th largest eligible key T; a one-warp step
//     after each pass picks the digit, so T and the ties at T still needed (K
//     minus the G keys above T) stay on the device: no host round trip.
//     The first pass also writes the residual (x, or 0 at exceptions) and counts
//     the exceptions.
//  2. The ties (key == T) in index order: the (K - G)-th one gives a cut-off
//     index; kept = key > T, or key == T below the cut-off (CUB DeviceSelect,
//     stable, so indices come out increasing).
//  3. Values (values_put of x) in index order; with error feedback the residual
//     at a kept index becomes x - decoded; the Elias-Fano index section
//     (index_code.c's format) is written with atomic ORs into a zeroed buffer.
#include <cooperative_groups.h>
#include <thrust/iterator/counting_iterator.h>

#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>

#include "cuda/device_math.cuh"
#include "cuda/sparse_kernels.h"

namespace {

namespace cg = cooperative_groups;

constexpr int kPasses = 3;
constexpr int kMaxBins = GK_TOPK_BINS;
// Enough blocks to fill an H200 several times over; more would only multiply the
// histogram flushes.
constexpr unsigned kHistogramBlocks = 1024;

// The digit of each pass: bits [30, 20), [19, 10), [9, 0] of the 31-bit key.
__host__ __device__ constexpr int DigitShift(int pass) {
  return pass == 0 ? 20 : pass == 1 ? 10 : 0;
}
__host__ __device__ constexpr int DigitWidth(int pass) {
  return pass == 0 ? 11 : 10;
}

__device__ __forceinline__ uint32_t Key(float x) {
  return fb_bits(x) & 0x7FFFFFFFu;
}

// One pass of the radix select: counts, among eligible keys whose digits above
// this pass equal the prefix found so far, each value of this pass's digit.
// Keys below the floor are never counted: the K kept all lie at or above it.
template <gcclDataType_t DT>
__global__ void Histogram(const void* src, const float* resid_in, float* resid_out, size_t n, uint32_t exc_key,
                          uint32_t floor, int pass, const gk_topk_state* st, unsigned* hist, unsigned long long* nexc) {
  __shared__ unsigned local[kMaxBins];
  const int shift = DigitShift(pass), width = DigitWidth(pass);
  const unsigned bins = 1u << width;
  for (unsigned b = threadIdx.x; b < bins; b += blockDim.x) local[b] = 0;
  __syncthreads();
  const uint32_t prefix = st->prefix;
  unsigned long long exceptions = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float x = gk::InputX<DT>(src, resid_in, i);
    const uint32_t key = Key(x);
    if (pass == 0) {
      if (resid_out) resid_out[i] = key >= exc_key ? 0.0f : x;
      exceptions += key >= exc_key;
    }
    if (key >= exc_key || key < floor || (key >> (shift + width)) != prefix) continue;
    // Lanes with the same bin add once (|x| of a gradient shares few top digits).
    const unsigned bin = (key >> shift) & (bins - 1);
    const auto peers = cg::labeled_partition(cg::coalesced_threads(), bin);
    if (peers.thread_rank() == 0) atomicAdd(&local[bin], peers.size());
  }
  if (pass == 0 && exceptions) atomicAdd(nexc, exceptions);
  __syncthreads();
  for (unsigned b = threadIdx.x; b < bins; b += blockDim.x)
    if (local[b]) atomicAdd(&hist[b], local[b]);
}

// One warp: picks the digit bin holding the `remaining`-th largest key, from the
// top; extends the prefix, takes the keys in higher bins off `remaining`, and
// clears the histogram for the next pass. Pass 0 first sets remaining = K.
__global__ void PickDigit(int pass, unsigned long long k, gk_topk_state* st, unsigned* hist) {
  const unsigned lane = threadIdx.x;
  const unsigned bins = 1u << DigitWidth(pass), per_lane = bins / 32;
  // Lane l owns bins [bins - (l + 1) * per_lane, bins - l * per_lane): lane 0 the top ones.
  const unsigned hi = bins - lane * per_lane;
  unsigned long long mine = 0;
  for (unsigned b = hi - per_lane; b < hi; b++) mine += hist[b];
  unsigned long long above = mine;  // inclusive prefix over lanes 0..lane
  for (int w = 1; w < 32; w *= 2) {
    unsigned long long o = __shfl_up_sync(gk::kFullMask, above, w);
    if (lane >= static_cast<unsigned>(w)) above += o;
  }
  const unsigned long long total = __shfl_sync(gk::kFullMask, above, 31);
  if (pass == 0 && lane == 0) {
    st->kept = k < total ? k : total;
    st->remaining = st->kept;
  }
  __syncwarp();
  const unsigned long long r = st->remaining;
  __syncwarp();                                    // every lane has read r before the crossing lane changes it
  const unsigned long long before = above - mine;  // keys in the bins of lanes before this one
  if (r > 0 && before < r && r <= above) {         // exactly one lane holds the r-th largest
    unsigned long long cum = before;
    for (unsigned b = hi; b-- > hi - per_lane;) {
      if (cum + hist[b] >= r) {
        st->prefix = (st->prefix << DigitWidth(pass)) | b;
        st->remaining = r - cum;
        break;
      }
      cum += hist[b];
    }
  }
  __syncwarp();
  for (unsigned b = lane; b < bins; b += 32) hist[b] = 0;
}

// After the passes: ties_needed = remaining; the cut-off index below which ties are kept.
__global__ void TieCutoff(gk_topk_state* st, const unsigned long long* tie_idx) {
  const unsigned long long need = st->remaining;  // 0 when nothing is kept
  st->cutoff = need == 0 ? 0 : tie_idx[need - 1] + 1;
}

// Step 2's two selections: the ties at T (kTies), or the kept elements.
template <gcclDataType_t DT, bool kTies>
struct TopkPick {
  const void* src;
  const float* resid_in;
  const gk_topk_state* st;
  uint32_t exc_key;
  __device__ bool operator()(unsigned long long i) const {
    const uint32_t key = Key(gk::InputX<DT>(src, resid_in, i));
    if (st->kept == 0 || key >= exc_key) return false;
    if (kTies) return key == st->prefix;
    return key > st->prefix || (key == st->prefix && i < st->cutoff);
  }
};

// Sets `nb` bits of v at bit offset `bit` of the 32-bit-word stream `words` (zeroed first).
__device__ __forceinline__ void OrBits(unsigned* words, unsigned long long bit, uint64_t v, unsigned nb) {
  while (nb > 0) {
    const unsigned off = static_cast<unsigned>(bit % 32), take = 32 - off < nb ? 32 - off : nb;
    const unsigned piece = static_cast<unsigned>(v & ((take == 32) ? 0xFFFFFFFFull : ((1ull << take) - 1)));
    if (piece) atomicOr(&words[bit / 32], piece << off);
    v >>= take;
    bit += take;
    nb -= take;
  }
}

// Kept element j: its value, its residual, and its Elias-Fano bits.
template <gcclDataType_t DT>
__global__ void WriteKept(const void* src, const float* resid_in, float* resid_out, const unsigned long long* kept,
                          size_t count, int vt, size_t vs, unsigned L, size_t low_bytes, unsigned char* values,
                          unsigned* section) {
  for (size_t j = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; j < count;
       j += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const size_t i = kept[j];
    const float x = gk::InputX<DT>(src, resid_in, i);
    const float dec = gk::ValuesPut(values + j * vs, vt, x);
    if (resid_out) resid_out[i] = __fsub_rn(x, dec);
    const uint64_t v = i - j;
    if (L > 0) OrBits(section, static_cast<unsigned long long>(j) * L, v, L);
    OrBits(section, 8ull * low_bytes + (v >> L) + j, 1, 1);
  }
}

// Decode: popcounts of the high part's 32-bit words (bytes read one at a time:
// the section may start at any address).
__global__ void HighPopcounts(const unsigned char* high, size_t high_bytes, unsigned* counts, size_t words) {
  for (size_t w = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; w < words;
       w += static_cast<size_t>(gridDim.x) * blockDim.x) {
    unsigned word = 0;
    for (int b = 0; b < 4 && 4 * w + b < high_bytes; b++) word |= static_cast<unsigned>(high[4 * w + b]) << (8 * b);
    counts[w] = static_cast<unsigned>(__popc(word));
  }
}

__device__ __forceinline__ uint64_t ReadBits(const unsigned char* p, unsigned long long bit, unsigned nb) {
  uint64_t v = 0;
  for (unsigned t = 0; t < nb; t++) {
    const unsigned long long b = bit + t;
    v |= static_cast<uint64_t>((p[b / 8] >> (b % 8)) & 1u) << t;
  }
  return v;
}

// Decode: each high word's one-bits are entries first[w], first[w] + 1, ...
template <gcclDataType_t DT>
__global__ void TopkDecode(const unsigned char* values, int vt, size_t vs, const unsigned char* section, unsigned L,
                           size_t low_bytes, size_t high_bytes, const unsigned* first, size_t words, void* dst) {
  const unsigned char* high = section + low_bytes;
  for (size_t w = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; w < words;
       w += static_cast<size_t>(gridDim.x) * blockDim.x) {
    unsigned word = 0;
    for (int b = 0; b < 4 && 4 * w + b < high_bytes; b++) word |= static_cast<unsigned>(high[4 * w + b]) << (8 * b);
    size_t j = first[w];
    while (word) {
      const unsigned bit = static_cast<unsigned>(__ffs(word) - 1);
      word &= word - 1;
      const uint64_t vhigh = 32 * w + bit - j;
      const uint64_t v = (vhigh << L) | (L ? ReadBits(section, static_cast<unsigned long long>(j) * L, L) : 0);
      gk::Accumulate<DT>(dst, v + j, gk::ValuesGet(values + j * vs, vt));
      j++;
    }
  }
}

// A stable selection (CUB) of the indices TopkPick<DT, kTies> accepts; with
// scratch NULL, *bytes = the scratch it needs.
template <gcclDataType_t DT, bool kTies>
cudaError_t Pick(const void* src, const float* resid_in, size_t n, uint32_t exc_key, const gk_topk_state* st,
                 unsigned long long* out, unsigned long long* count, void* scratch, size_t* bytes, cudaStream_t s) {
  thrust::counting_iterator<unsigned long long> index(0);
  return cub::DeviceSelect::If(scratch, *bytes, index, out, count, static_cast<long long>(n),
                               TopkPick<DT, kTies>{src, resid_in, st, exc_key}, s);
}

// approx=1's sample: block s gathers the keys of chunk s (every key: the host
// drops the exceptions, as topk_select.c's take_sample does).
template <gcclDataType_t DT>
__global__ void TopkSample(const void* src, const float* resid_in, gk_topk_sample_starts starts, uint32_t* keys) {
  const size_t i = starts.start[blockIdx.x] + threadIdx.x;
  keys[blockIdx.x * static_cast<size_t>(TOPK_SAMPLE_LEN) + threadIdx.x] = Key(gk::InputX<DT>(src, resid_in, i));
}

}  // namespace

extern "C" cudaError_t gk_topk_sample(const void* src, gcclDataType_t dt, const float* resid_in,
                                      const gk_topk_sample_starts* starts, uint32_t* keys, cudaStream_t s) {
  return gk::LaunchFloat(dt, [&](auto tag) {
    constexpr gcclDataType_t DT = decltype(tag)::value;
    TopkSample<DT><<<TOPK_SAMPLE_CHUNKS, TOPK_SAMPLE_LEN, 0, s>>>(src, resid_in, *starts, keys);
  });
}

extern "C" size_t gk_topk_scratch(size_t n, size_t high_words) {
  size_t a = 0, b = 0, c = 0;
  Pick<gcclFloat32, true>(nullptr, nullptr, n, 0, nullptr, nullptr, nullptr, nullptr, &a, 0);
  Pick<gcclFloat32, false>(nullptr, nullptr, n, 0, nullptr, nullptr, nullptr, nullptr, &b, 0);
  cub::DeviceScan::ExclusiveSum(nullptr, c, static_cast<unsigned*>(nullptr), static_cast<unsigned*>(nullptr),
                                static_cast<long long>(high_words ? high_words : 1));
  size_t m = a > b ? a : b;
  return m > c ? m : c;
}

extern "C" cudaError_t gk_topk_select(const void* src, gcclDataType_t dt, const float* resid_in, float* resid_out,
                                      size_t n, size_t k, uint32_t exc_key, uint32_t floor, gk_topk_state* st,
                                      unsigned* hist, unsigned long long* ties, unsigned long long* kept,
                                      unsigned long long* counts, void* scratch, size_t scratch_bytes, cudaStream_t s) {
  cudaError_t e = cudaMemsetAsync(st, 0, sizeof *st, s);
  if (e == cudaSuccess) e = cudaMemsetAsync(hist, 0, kMaxBins * sizeof(unsigned), s);
  if (e == cudaSuccess) e = cudaMemsetAsync(counts, 0, 3 * sizeof(unsigned long long), s);
  if (e != cudaSuccess || n == 0) return e;
  return gk::DispatchFloat(dt, [&](auto tag) {
    constexpr gcclDataType_t DT = decltype(tag)::value;
    for (int pass = 0; pass < kPasses; pass++) {
      const unsigned blocks = gk::Blocks(n) < kHistogramBlocks ? gk::Blocks(n) : kHistogramBlocks;
      Histogram<DT>
          <<<blocks, gk::kThreads, 0, s>>>(src, resid_in, resid_out, n, exc_key, floor, pass, st, hist, &counts[0]);
      PickDigit<<<1, 32, 0, s>>>(pass, k, st, hist);
    }
    size_t bytes = scratch_bytes;
    cudaError_t r = Pick<DT, true>(src, resid_in, n, exc_key, st, ties, &counts[1], scratch, &bytes, s);
    if (r != cudaSuccess) return r;
    TieCutoff<<<1, 1, 0, s>>>(st, ties);
    bytes = scratch_bytes;
    return Pick<DT, false>(src, resid_in, n, exc_key, st, kept, &counts[2], scratch, &bytes, s);
  });
}

extern "C" cudaError_t gk_topk_write(const void* src, gcclDataType_t dt, const float* resid_in, float* resid_out,
                                     const unsigned long long* kept, size_t count, int vt, unsigned L, size_t low_bytes,
                                     size_t section_bytes, unsigned char* values, unsigned* section, cudaStream_t s) {
  cudaError_t e = cudaMemsetAsync(section, 0, (section_bytes + 3) / 4 * 4, s);
  if (e != cudaSuccess || count == 0) return e;
  const size_t vs = vt == 0 ? 4 : 2;
  return gk::LaunchFloat(dt, [&](auto tag) {
    constexpr gcclDataType_t DT = decltype(tag)::value;
    WriteKept<DT><<<gk::Blocks(count), gk::kThreads, 0, s>>>(src, resid_in, resid_out, kept, count, vt, vs, L,
                                                             low_bytes, values, section);
  });
}

extern "C" cudaError_t gk_topk_decode(const unsigned char* payload, size_t k, int vt, unsigned L, size_t low_bytes,
                                      size_t high_bytes, unsigned* counts, void* scratch, size_t scratch_bytes,
                                      void* dst, gcclDataType_t dt, cudaStream_t s) {
  if (k == 0) return cudaSuccess;
  const size_t vs = vt == 0 ? 4 : 2, words = (high_bytes + 3) / 4;
  const unsigned char* section = payload + k * vs;
  HighPopcounts<<<gk::Blocks(words), gk::kThreads, 0, s>>>(section + low_bytes, high_bytes, counts, words);
  size_t bytes = scratch_bytes;
  cudaError_t e =
      cub::DeviceScan::ExclusiveSum(scratch, bytes, counts, counts, static_cast<long long>(words), s);  // in place
  if (e != cudaSuccess) return e;
  return gk::LaunchFloat(dt, [&](auto tag) {
    constexpr gcclDataType_t DT = decltype(tag)::value;
    TopkDecode<DT><<<gk::Blocks(words), gk::kThreads, 0, s>>>(payload, vt, vs, section, L, low_bytes, high_bytes,
                                                              counts, words, dst);
  });
}
