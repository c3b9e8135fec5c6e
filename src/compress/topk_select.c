/* topk_select.c — which elements top-k keeps: the exact k largest |x|, or DGC's
 * sampled threshold (approx=1), and the candidate filter behind both. How the
 * frame carries them: codec_topk.c.
 *
 * Which elements. key(i) = fp32 bits of x[i] with the sign cleared, which orders
 * finite |x| exactly as integers. Elements with key >= E (E = topk_exc_key(vt):
 * inf/NaN, and values the carried type would turn into inf — above 65504 for
 * fp16) are exceptions (sent raw by the compressor, residual 0) and are never
 * kept. Let F be the other ("eligible") elements and rank them by key
 * descending, then index ascending. top(j) = the first j of that order.
 *  - exact (approx=0): K = min(k, |F|), kept = top(K), with k = sparse_k(ratio, n).
 *  - approx=1 (Lin et al., "Deep Gradient Compression", ICLR 2018): a threshold
 *    t is read off a sample; K = min(k, c) with c = #{i in F : key(i) >= t},
 *    kept = top(K) — all of {key >= t} when c <= k, else the exact top k.
 *    The sample: when n <= 65536 it is all of F and t = the k-th largest key of
 *    F (0 when |F| <= k), which makes approx exact. Otherwise it is the
 *    eligible keys of 256 chunks of 256 elements, chunk s starting at
 *    floor(s * (n - 256) / 255); with m sample keys, ks = floor(k * m / n) and
 *    sd = floor(sqrt(ks)), t = the r-th largest sample key with
 *    r = max(1, ks - sd) (one standard deviation below the expected share, so
 *    usually c < k and no exact selection is needed), or 0 when r > m.
 *    When k > n / 8 and n > 65536 approx is exact (a threshold saves nothing).
 *
 * How (exact): the same sample gives a threshold t a few standard deviations
 * *above* the expected share (r = ks + 4 sd + 8) and a key h as far below it
 * (r = ks - 4 sd - 8). One pass over x (AVX2, four streams) collects the
 * candidates key >= t in index order — recording at most k elements whose key
 * equals t, which is all ties can ever need, so all-equal or mostly-zero data
 * stays one pass. Candidates >= h are kept for sure when fewer than k; a radix
 * select over the rest (the band [t, h), ~1/4 of ~1.2 k candidates) finds the
 * k-th key T. Kept = key > T plus the first (k - #{key > T}) with key == T,
 * taken in index order, so indices come out sorted. If the sample misled us
 * (too few candidates: retry once with a lower threshold; too many for the
 * buffer), a histogram radix select over all of x (three passes) is always
 * right. Everything is O(n).
 */
#include "compress/topk_select.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/float_bits.h"
#include "common/result.h"
#include "compress/codec.h"
#include "compress/codec_util.h"
#include "compress/topk.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "common/cpu.h"
#define TOPK_X86 1
#endif

__extension__ typedef unsigned __int128 u128;

#define SAMPLE_CHUNKS TOPK_SAMPLE_CHUNKS
#define SAMPLE_LEN TOPK_SAMPLE_LEN
#define SAMPLE_MAX (SAMPLE_CHUNKS * SAMPLE_LEN)
#define FULL_BINS 65536

uint32_t topk_exc_key(enum spec_values vt) {
  switch (vt) {
    case SPEC_VALUES_FP16:
      return 0x477FF000u; /* 65520 = 65504 + half an ulp rounds to inf */
    case SPEC_VALUES_BF16:
      return 0x7F7F8000u; /* ties to even at the largest bf16 rounds up to inf */
    default:
      return 0x7F800000u;
  }
}

/* ---- the candidate filter -------------------------------------------------------- */

struct filter {
  uint32_t thr, exc_key;
  size_t quota; /* ties at thr still to record */
  uint64_t* idx;
  uint32_t* bits;
  size_t cap, c;
  struct exc_list* exc;
};

/* Classifies element i (raw bits b). 0: go on, 1: candidates overflow, -1: out of memory. */
static inline int filter_take(struct filter* f, size_t i, uint32_t b) {
  uint32_t key = b & TOPK_KEY_MASK;
  if (key >= f->exc_key) return exc_push(f->exc, i) == gcclSuccess ? 0 : -1;
  if (key < f->thr) return 0;
  if (key == f->thr) {
    if (f->quota == 0) return 0;
    f->quota--;
  }
  if (f->c == f->cap) return 1;
  f->idx[f->c] = i;
  f->bits[f->c] = b;
  f->c++;
  return 0;
}

/* filter_take over x[from, n). The state is copied into a local: through f,
 * every store to idx/bits could alias f->c and force a reload per element. */
static int filter_scalar(struct filter* f, const float* x, size_t from, size_t n) {
  struct filter l = *f;
  int r = 0;
  for (size_t i = from; i < n && r == 0; i++) r = filter_take(&l, i, fb_bits(x[i]));
  *f = l;
  return r;
}

/* The smallest key the vector compare must flag: ties stop mattering once the
 * quota is spent, but exceptions always do. */
static uint32_t filter_low(const struct filter* f) {
  uint32_t lo = f->quota ? f->thr : f->thr + 1;
  return lo < f->exc_key ? lo : f->exc_key;
}

#ifdef TOPK_X86
/* Flags for filter_take every lane of x[i, i+32) with key >= lo + 1 (lo as a
 * vector of lo_key - 1: key > -1 when lo_key == 0); returns the 32-bit mask. */
__attribute__((target("avx2"))) static inline uint32_t flag32(const float* x, __m256i lo) {
  const __m256i mask = _mm256_set1_epi32((int)TOPK_KEY_MASK);
  const __m256i* p = (const __m256i*)(const void*)x;
  __m256i h0 = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_loadu_si256(p + 0), mask), lo);
  __m256i h1 = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_loadu_si256(p + 1), mask), lo);
  __m256i h2 = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_loadu_si256(p + 2), mask), lo);
  __m256i h3 = _mm256_cmpgt_epi32(_mm256_and_si256(_mm256_loadu_si256(p + 3), mask), lo);
  __m256i any = _mm256_or_si256(_mm256_or_si256(h0, h1), _mm256_or_si256(h2, h3));
  if (_mm256_testz_si256(any, any)) return 0; /* ~73% of steps at 1% density */
  return (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(h0)) |
         (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(h1)) << 8 |
         (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(h2)) << 16 |
         (uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(h3)) << 24;
}

static __m256i low_vector(const struct filter* f) __attribute__((target("avx2")));
static __m256i low_vector(const struct filter* f) {
  return _mm256_set1_epi32((int)(filter_low(f) - 1));
}

/* filter_take over base + off[j], j < cnt (state in a local, as above). */
static int filter_merge(struct filter* f, const float* x, size_t base, const uint16_t* off, size_t cnt) {
  struct filter l = *f;
  int r = 0;
  for (size_t j = 0; j < cnt && r == 0; j++) r = filter_take(&l, base + off[j], fb_bits(x[base + off[j]]));
  *f = l;
  return r;
}

/* x goes in steps of FILTER_STREAMS blocks of FILTER_BLOCK elements read side
 * by side: one core of this machine gets ~30% more bandwidth from four streams
 * 16 KiB apart than from one (a plain 102 MB read: ~7.6 ms with one stream,
 * ~5.3 ms with four; software prefetch did not close the gap). Each block's
 * flagged offsets are packed without branches — the lane offsets of an 8-lane
 * compare mask come from a table — because a branch per flagged group
 * mispredicts about once per candidate (measured at 1% density: ~8.0 ms with
 * branches, ~6.9 ms without). Then they go through filter_take block by block,
 * in index order, so the result is the scalar path's exactly. Flagging uses
 * the threshold as of the step's start: a superset of what filter_take keeps. */
#define FILTER_STREAMS 4
#define FILTER_BLOCK 4096

#define FLAG8(s, cnt)                                                                            \
  do {                                                                                           \
    __m256i v = _mm256_loadu_si256((const __m256i*)(const void*)(x + i + (s)*FILTER_BLOCK + g)); \
    __m256i h = _mm256_cmpgt_epi32(_mm256_and_si256(v, mask), lo);                               \
    unsigned m = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(h));                           \
    __m128i o = _mm_add_epi16(_mm_loadu_si128((const __m128i*)(const void*)lanes[m]), gv);       \
    _mm_storeu_si128((__m128i*)(void*)(hit[s] + (cnt)), o);                                      \
    (cnt) += (size_t)__builtin_popcount(m);                                                      \
  } while (0)

__attribute__((target("avx2,bmi,popcnt"))) static int filter_avx2(struct filter* f, const float* x, size_t n) {
  uint16_t lanes[256][8];                     /* lanes[m] = the set bits of m in order; 4 KiB, built per call (~1 us) */
  uint16_t hit[FILTER_STREAMS][FILTER_BLOCK]; /* 32 KiB */
  for (unsigned m = 0; m < 256 && f->cap > 0; m++) {
    unsigned o = 0;
    for (unsigned l = 0; l < 8; l++)
      if (m >> l & 1) lanes[m][o++] = (uint16_t)l;
    while (o < 8) lanes[m][o++] = 0;
  }
  const __m256i mask = _mm256_set1_epi32((int)TOPK_KEY_MASK);
  size_t i = 0;
  for (; i + FILTER_STREAMS * FILTER_BLOCK <= n; i += FILTER_STREAMS * FILTER_BLOCK) {
    const __m256i lo = low_vector(f);
    size_t c0 = 0, c1 = 0, c2 = 0, c3 = 0; /* registers, not an array: no store-forwarding chain */
    if (f->cap == 0) {                     /* exceptions only (randk's scan): rare, so skip empty groups instead */
      for (size_t g = 0; g < FILTER_BLOCK; g += 32) {
        size_t* c[FILTER_STREAMS] = {&c0, &c1, &c2, &c3};
        for (int s = 0; s < FILTER_STREAMS; s++)
          for (uint32_t m = flag32(x + i + (size_t)s * FILTER_BLOCK + g, lo); m; m &= m - 1)
            hit[s][(*c[s])++] = (uint16_t)(g + _tzcnt_u32(m));
      }
    } else {
      for (size_t g = 0; g < FILTER_BLOCK; g += 8) {
        const __m128i gv = _mm_set1_epi16((short)g);
        FLAG8(0, c0);
        FLAG8(1, c1);
        FLAG8(2, c2);
        FLAG8(3, c3);
      }
    }
    const size_t cnt[FILTER_STREAMS] = {c0, c1, c2, c3};
    for (int s = 0; s < FILTER_STREAMS; s++) {
      int r = filter_merge(f, x, i + (size_t)s * FILTER_BLOCK, hit[s], cnt[s]);
      if (r) return r;
    }
  }
  for (; i + 32 <= n; i += 32) { /* the tail, one stream */
    for (uint32_t m = flag32(x + i, low_vector(f)); m; m &= m - 1) {
      size_t j = i + _tzcnt_u32(m);
      int r = filter_take(f, j, fb_bits(x[j]));
      if (r) return r;
    }
  }
  return filter_scalar(f, x, i, n);
}
#undef FLAG8
#endif

gcclResult_t topk_filter(const float* x, size_t n, uint32_t thr, uint32_t exc_key, size_t tie_quota, uint64_t* idx,
                         uint32_t* bits, size_t cap, struct exc_list* exc, int simd, size_t* count) {
  struct filter f = {thr, exc_key, tie_quota, idx, bits, cap, 0, exc};
  int r;
#ifdef TOPK_X86
  if (simd && __builtin_cpu_supports("avx2") && cpu_has_bmi1() && __builtin_cpu_supports("popcnt"))
    r = filter_avx2(&f, x, n);
  else
#endif
    r = filter_scalar(&f, x, 0, n);
  (void)simd;
  if (r < 0) return gcclSystemError; /* exc_push set the message */
  *count = r > 0 ? cap + 1 : f.c;
  return gcclSuccess;
}

/* ---- selection -------------------------------------------------------------------- */

/* The rank-th largest (1-based, rank <= m) of keys[i] & TOPK_KEY_MASK, i < m, all of
 * them within [lo, hi]; *greater = how many exceed it. A radix select of
 * 11-bit digits starting below the bits lo and hi share (so a narrow range
 * still spreads over the histogram), compacting each digit's survivors into tmp
 * (m entries). hist: 2048 counters. */
static uint32_t select_key(const uint32_t* keys, size_t m, size_t rank, uint32_t lo, uint32_t hi, uint32_t* tmp,
                           size_t* hist, size_t* greater) {
  unsigned top = lo == hi ? 0 : 32u - (unsigned)__builtin_clz(lo ^ hi); /* bits [0, top) vary */
  uint32_t prefix = top >= 32 ? 0 : lo & ~((UINT32_C(1) << top) - 1);
  const uint32_t* cur = keys;
  size_t gt = 0;
  while (top > 0) {
    unsigned sh = top > 11 ? top - 11 : 0;
    uint32_t nb = UINT32_C(1) << (top - sh);
    memset(hist, 0, nb * sizeof *hist);
    for (size_t i = 0; i < m; i++) hist[((cur[i] & TOPK_KEY_MASK) >> sh) & (nb - 1)]++;
    uint32_t b = nb - 1;
    size_t above = 0;
    while (above + hist[b] < rank) above += hist[b--];
    rank -= above;
    gt += above;
    prefix |= b << sh;
    if (sh > 0 && hist[b] != m) { /* keep only this digit's keys (in place once cur is tmp) */
      size_t o = 0;
      for (size_t i = 0; i < m; i++) {
        uint32_t key = cur[i] & TOPK_KEY_MASK;
        tmp[o] = key;
        o += ((key >> sh) & (nb - 1)) == b;
      }
      cur = tmp;
      m = o;
    }
    top = sh;
  }
  *greater = gt;
  return prefix;
}

size_t topk_sample_start(size_t s, size_t n) {
  return (size_t)((u128)s * (n - TOPK_SAMPLE_LEN) / (TOPK_SAMPLE_CHUNKS - 1));
}

/* Eligible keys of the sample (module comment); returns how many. */
static size_t take_sample(const float* x, size_t n, uint32_t exc_key, uint32_t* out) {
  size_t m = 0;
  if (n <= SAMPLE_MAX) {
    for (size_t i = 0; i < n; i++) {
      uint32_t key = fb_bits(x[i]) & TOPK_KEY_MASK;
      if (key < exc_key) out[m++] = key;
    }
    return m;
  }
  for (size_t s = 0; s < SAMPLE_CHUNKS; s++) {
    size_t start = topk_sample_start(s, n);
    for (size_t i = start; i < start + SAMPLE_LEN; i++) {
      uint32_t key = fb_bits(x[i]) & TOPK_KEY_MASK;
      if (key < exc_key) out[m++] = key;
    }
  }
  return m;
}

static uint64_t isqrt64(uint64_t v) {
  uint64_t s = (uint64_t)sqrt((double)v);
  while (s > 0 && s * s > v) s--;
  while ((s + 1) * (s + 1) <= v) s++;
  return s;
}

/* The sample threshold at rank r (0: keep every eligible element). */
static uint32_t sample_threshold(const uint32_t* keys, size_t m, uint64_t r, uint32_t* tmp, size_t* hist) {
  if (r == 0 || r > m) return 0;
  size_t gt;
  return select_key(keys, m, (size_t)r, 0, TOPK_KEY_MASK, tmp, hist, &gt);
}

/* approx=1's rank in the sample: one standard deviation below the expected share. */
static uint64_t approx_rank(size_t m, size_t n, size_t k) {
  uint64_t ks = (uint64_t)((u128)k * m / n), sd = isqrt64(ks);
  return ks > sd + 1 ? ks - sd : 1;
}

int topk_approx_samples(size_t n, size_t k) {
  return n > SAMPLE_MAX && k <= n / 8;
}

uint32_t topk_approx_threshold(const uint32_t* keys, size_t m, size_t n, size_t k, uint32_t* tmp, size_t* hist) {
  return sample_threshold(keys, m, approx_rank(m, n, k), tmp, hist);
}

/* Exact selection of k among the c candidates found with threshold thr (c >= k
 * means the top k all lie among them; else thr == 0 means they are all there
 * is). hi > thr: a key the sample says fewer than k candidates reach; those at
 * or above it are kept for sure, so only the band [thr, hi) needs selecting
 * (~1/4 of the candidates at 1% density). */
static void select_from_candidates(struct topk_scratch* st, size_t c, size_t k, uint32_t thr, uint32_t hi,
                                   uint32_t exc_key, struct topk_selection* out) {
  out->from_candidates = 1;
  out->c = c;
  if (c <= k) { /* keep them all: every candidate has key >= 0 */
    out->kept = c;
    out->T = 0;
    out->need_eq = c;
    return;
  }
  out->kept = k;
  size_t gt;
  if (hi > thr) {
    size_t sure = 0, band = 0;
    for (size_t j = 0; j < c; j++) { /* no branches: which side is a coin flip */
      uint32_t key = st->cand_bits[j] & TOPK_KEY_MASK;
      st->tmp[band] = key;
      band += key < hi;
      sure += key >= hi;
    }
    if (sure < k) {
      out->T = select_key(st->tmp, band, k - sure, thr, hi - 1, st->tmp, st->hist, &gt);
      out->need_eq = k - sure - gt;
      return;
    }
  }
  out->T = select_key(st->cand_bits, c, k, thr, exc_key - 1, st->tmp, st->hist, &gt);
  out->need_eq = k - gt;
}

/* Radix select over all of x: histogram of the top 16 key bits, then of the low
 * 16 within the chosen bin. Always right; pushes the exceptions. */
static gcclResult_t select_full(struct topk_scratch* st, const float* x, size_t n, size_t k, uint32_t exc_key,
                                struct exc_list* exc, struct topk_selection* out) {
  size_t* hist = st->hist;
  size_t eligible = 0;
  memset(hist, 0, FULL_BINS * sizeof *hist);
  for (size_t i = 0; i < n; i++) {
    uint32_t key = fb_bits(x[i]) & TOPK_KEY_MASK;
    if (key >= exc_key) {
      GCCL_CHECK(exc_push(exc, i));
    } else {
      hist[key >> 16]++;
      eligible++;
    }
  }
  memset(out, 0, sizeof *out);
  out->kept = k < eligible ? k : eligible;
  if (out->kept == 0) return gcclSuccess;
  size_t above = 0, b = FULL_BINS - 1;
  while (above + hist[b] < out->kept) above += hist[b--];
  size_t rank = out->kept - above, gt = above;
  memset(hist, 0, FULL_BINS * sizeof *hist);
  for (size_t i = 0; i < n; i++) {
    uint32_t key = fb_bits(x[i]) & TOPK_KEY_MASK;
    if (key < exc_key && (key >> 16) == b) hist[key & 0xFFFFu]++;
  }
  size_t lb = FULL_BINS - 1;
  above = 0;
  while (above + hist[lb] < rank) above += hist[lb--];
  out->T = (uint32_t)(b << 16 | lb);
  out->need_eq = out->kept - (gt + above);
  return gcclSuccess;
}

static int candidate_path(const struct topk_scratch* st, size_t n, size_t k) {
  return st->cap > 0 && (n <= SAMPLE_MAX || k <= n / 8);
}

gcclResult_t topk_select(struct topk_scratch* st, const struct codec_spec* s, const float* x, size_t n, size_t k,
                         uint32_t exc_key, struct exc_list* exc, struct topk_selection* out) {
  size_t exc0 = exc->n;
  if (candidate_path(st, n, k)) {
    size_t m = take_sample(x, n, exc_key, st->sample);
    uint64_t ks = (uint64_t)((u128)k * m / n), sd = isqrt64(ks);
    uint64_t r, r_hi = 0;
    if (n <= SAMPLE_MAX) {
      r = k;
    } else if (s->approx) {
      r = approx_rank(m, n, k);
    } else {
      r = ks + 4 * sd + 8;
      r_hi = ks > 4 * sd + 8 ? ks - 4 * sd - 8 : 0; /* as far below the expected share */
    }
    uint32_t hi = r_hi ? sample_threshold(st->sample, m, r_hi, st->tmp, st->hist) : 0;
    for (int attempt = 0; attempt < 2; attempt++) {
      uint32_t thr = sample_threshold(st->sample, m, r, st->tmp, st->hist);
      size_t c;
      exc->n = exc0;
      GCCL_CHECK(topk_filter(x, n, thr, exc_key, k, st->cand_idx, st->cand_bits, st->cap, exc, 1, &c));
      if (c > st->cap) break; /* threshold too low for the buffer */
      if (c >= k || thr == 0 || s->approx) {
        select_from_candidates(st, c, k, thr, hi, exc_key, out);
        return gcclSuccess;
      }
      r = 4 * r + 64; /* the sample misled us: a threshold well below */
    }
  }
  exc->n = exc0;
  return select_full(st, x, n, k, exc_key, exc, out);
}

/* ---- scratch ---------------------------------------------------------------------- */

int topk_scratch_init(struct topk_scratch* s, size_t n, size_t k) {
  memset(s, 0, sizeof *s);
  s->n = n;
  /* Room for the exact path's ~1.2 k candidates (sample rank 4 sd above the
   * expected share) with margin, plus the k ties a threshold can record. */
  if (n <= SAMPLE_MAX)
    s->cap = n;
  else if (k <= n / 8)
    s->cap = 3 * k + 4096 < n ? 3 * k + 4096 : n;
  size_t tmp = s->cap > SAMPLE_MAX ? s->cap : SAMPLE_MAX;
  s->cand_idx = malloc((s->cap ? s->cap : 1) * sizeof *s->cand_idx);
  s->cand_bits = malloc((s->cap ? s->cap : 1) * sizeof *s->cand_bits);
  s->tmp = malloc(tmp * sizeof *s->tmp);
  s->sample = malloc(SAMPLE_MAX * sizeof *s->sample);
  s->hist = malloc(FULL_BINS * sizeof *s->hist);
  return s->cand_idx && s->cand_bits && s->tmp && s->sample && s->hist;
}

void topk_scratch_free(struct topk_scratch* s) {
  free(s->cand_idx);
  free(s->cand_bits);
  free(s->tmp);
  free(s->sample);
  free(s->hist);
}
