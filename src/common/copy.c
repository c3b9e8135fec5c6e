/* copy.c — non-temporal bulk copies.
 *
 * Pushing a reduced slice into a peer's cold output buffer with memcpy reads every
 * destination line from memory before writing it (read-for-ownership): a third of
 * the traffic of an out-of-place direct allreduce. Streaming stores skip that read.
 * The same holds for a codec's input built as input + residual over a whole
 * tensor (top-k with error feedback): a quarter of that pass's traffic. */
#include "common/copy.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) || defined(__SSE2__)
#include <emmintrin.h>

void copy_stream(void* dst, const void* src, size_t bytes) {
  char* d = dst;
  const char* s = src;
  /* Head: plain copy up to a 16-byte boundary of dst. */
  size_t head = (16 - ((uintptr_t)d & 15)) & 15;
  if (head > bytes) head = bytes;
  memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  size_t blocks = bytes / 64;
  for (size_t i = 0; i < blocks; i++, d += 64, s += 64) {
    __m128i a = _mm_loadu_si128((const __m128i*)s), b = _mm_loadu_si128((const __m128i*)(s + 16));
    __m128i c = _mm_loadu_si128((const __m128i*)(s + 32)), e = _mm_loadu_si128((const __m128i*)(s + 48));
    _mm_stream_si128((__m128i*)d, a);
    _mm_stream_si128((__m128i*)(d + 16), b);
    _mm_stream_si128((__m128i*)(d + 32), c);
    _mm_stream_si128((__m128i*)(d + 48), e);
  }
  memcpy(d, s, bytes % 64);
}

void copy_stream_fence(void) {
  _mm_sfence();
}

void add_stream_f32(float* dst, const float* a, const float* b, size_t n) {
  size_t i = 0;
  for (; i < n && ((uintptr_t)(dst + i) & 15); i++) dst[i] = a[i] + b[i]; /* head: to a 16-byte boundary */
  for (; i + 16 <= n; i += 16)
    for (size_t j = 0; j < 16; j += 4)
      _mm_stream_ps(dst + i + j, _mm_add_ps(_mm_loadu_ps(a + i + j), _mm_loadu_ps(b + i + j)));
  for (; i < n; i++) dst[i] = a[i] + b[i];
}

#else

void copy_stream(void* dst, const void* src, size_t bytes) {
  memcpy(dst, src, bytes);
}
void copy_stream_fence(void) {}

void add_stream_f32(float* dst, const float* a, const float* b, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] = a[i] + b[i];
}

#endif
