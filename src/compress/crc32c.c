/* crc32c.c — CRC32C with the SSE4.2 crc32 instruction and a slicing-by-8 fallback. */
#include "compress/crc32c.h"

#include <pthread.h>
#include <string.h>

#define CRC32C_POLY 0x82F63B78u /* reflected Castagnoli polynomial */

/* Built once on first use; pthread_once publishes the tables to every thread. */
static uint32_t g_table[8][256];
static pthread_once_t g_table_once = PTHREAD_ONCE_INIT;

static void table_build(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c >> 1) ^ (CRC32C_POLY & (0u - (c & 1u)));
    g_table[0][i] = c;
  }
  /* g_table[s][i]: the CRC of byte i followed by s zero bytes. */
  for (uint32_t i = 0; i < 256; i++)
    for (int s = 1; s < 8; s++) g_table[s][i] = (g_table[s - 1][i] >> 8) ^ g_table[0][g_table[s - 1][i] & 0xFF];
}

uint32_t crc32c_sw(uint32_t crc, const void* p, size_t n) {
  const unsigned char* b = p;
  uint32_t c = ~crc;
  pthread_once(&g_table_once, table_build);
  /* Slicing-by-8: eight table lookups per 8 bytes instead of one per byte. */
  while (n >= 8) {
    uint32_t lo = c ^ ((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
    c = g_table[7][lo & 0xFF] ^ g_table[6][(lo >> 8) & 0xFF] ^ g_table[5][(lo >> 16) & 0xFF] ^ g_table[4][lo >> 24] ^
        g_table[3][b[4]] ^ g_table[2][b[5]] ^ g_table[1][b[6]] ^ g_table[0][b[7]];
    b += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ g_table[0][(c ^ *b++) & 0xFF];
  return ~c;
}

#if defined(__x86_64__)
#include <nmmintrin.h>

/* The crc32 instruction has a latency of 3 cycles but a throughput of 1 per
 * cycle, so one dependent chain runs at a third of its speed. Long buffers are
 * cut into three interleaved streams of CRC_STREAM bytes whose CRCs are joined
 * with a precomputed "append CRC_STREAM zero bytes" operator (the CRC register
 * is linear over GF(2)): about 3x faster, which matters because every frame is
 * checksummed once when sent and once when received. */
#define CRC_STREAM 1024

/* g_shift[k][b]: the raw CRC register b << 8k advanced over CRC_STREAM zeros. */
static uint32_t g_shift[4][256];
static pthread_once_t g_shift_once = PTHREAD_ONCE_INIT;

__attribute__((target("sse4.2"))) static uint32_t zeros_advance(uint32_t reg) {
  uint64_t c = reg;
  for (int i = 0; i < CRC_STREAM / 8; i++) c = _mm_crc32_u64(c, 0);
  return (uint32_t)c;
}

static void shift_build(void) {
  uint32_t bit[32];
  for (int i = 0; i < 32; i++) bit[i] = zeros_advance(1u << i);
  for (int k = 0; k < 4; k++)
    for (int b = 0; b < 256; b++) {
      uint32_t v = 0;
      for (int i = 0; i < 8; i++)
        if (b & (1 << i)) v ^= bit[8 * k + i];
      g_shift[k][b] = v;
    }
}

static inline uint32_t shift_stream(uint32_t r) {
  return g_shift[0][r & 0xFF] ^ g_shift[1][(r >> 8) & 0xFF] ^ g_shift[2][(r >> 16) & 0xFF] ^ g_shift[3][r >> 24];
}

/* A plain target attribute plus a runtime check, not ifunc/target_clones: those
 * resolve at load time and crash under ThreadSanitizer. */
__attribute__((target("sse4.2"))) uint32_t crc32c_hw(uint32_t crc, const void* p, size_t n) {
  const unsigned char* b = p;
  uint64_t c = ~crc;
  while (n > 0 && ((uintptr_t)b & 7) != 0) {
    c = _mm_crc32_u8((uint32_t)c, *b++);
    n--;
  }
  if (n >= 3 * CRC_STREAM) pthread_once(&g_shift_once, shift_build);
  while (n >= 3 * CRC_STREAM) {
    uint64_t c1 = 0, c2 = 0;
    for (size_t i = 0; i < CRC_STREAM; i += 8) {
      uint64_t w0, w1, w2;
      memcpy(&w0, b + i, 8);
      memcpy(&w1, b + CRC_STREAM + i, 8);
      memcpy(&w2, b + 2 * CRC_STREAM + i, 8);
      c = _mm_crc32_u64(c, w0);
      c1 = _mm_crc32_u64(c1, w1);
      c2 = _mm_crc32_u64(c2, w2);
    }
    c = shift_stream(shift_stream((uint32_t)c) ^ (uint32_t)c1) ^ (uint32_t)c2;
    b += 3 * CRC_STREAM;
    n -= 3 * CRC_STREAM;
  }
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, b, 8); /* aligned by now; memcpy keeps it strict-aliasing clean */
    c = _mm_crc32_u64(c, w);
    b += 8;
    n -= 8;
  }
  while (n--) c = _mm_crc32_u8((uint32_t)c, *b++);
  return ~(uint32_t)c;
}

int crc32c_hw_available(void) {
  return __builtin_cpu_supports("sse4.2");
}
#else
uint32_t crc32c_hw(uint32_t crc, const void* p, size_t n) {
  return crc32c_sw(crc, p, n);
}
int crc32c_hw_available(void) {
  return 0;
}
#endif

uint32_t crc32c(uint32_t crc, const void* p, size_t n) {
  return crc32c_hw_available() ? crc32c_hw(crc, p, n) : crc32c_sw(crc, p, n);
}
