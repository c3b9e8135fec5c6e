/* copy.c — non-temporal bulk copies.
 *
 * Pushing a reduced slice into a peer's cold output buffer with memcpy reads every
 * destination line from memory before writing it (read-for-ownership): a third of
 * the traffic of an out-of-place direct allreduce. Streaming stores skip that read. */
#include "copy.h"

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

void copy_stream_fence(void) { _mm_sfence(); }

#else

void copy_stream(void* dst, const void* src, size_t bytes) { memcpy(dst, src, bytes); }
void copy_stream_fence(void) {}

#endif
