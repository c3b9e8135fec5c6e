/* crc32c.h — CRC32C (Castagnoli), the checksum of gccl frames. */
#ifndef GCCL_COMPRESS_CRC32C_H
#define GCCL_COMPRESS_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends crc (0 to start) over n bytes at p and returns the new value; chaining
 * calls over consecutive pieces equals one call over the whole, and
 * crc32c(0, "123456789", 9) == 0xE3069283. Uses SSE4.2 (and PCLMULQDQ on long buffers) when the CPU has it, a
 * table otherwise; both give the same result. Thread-safe; p may be NULL if n is 0. */
uint32_t crc32c(uint32_t crc, const void* p, size_t n);

/* The table-driven (slicing-by-8) version, always available. */
uint32_t crc32c_sw(uint32_t crc, const void* p, size_t n);

/* 1 when crc32c_hw may be called on this CPU. */
int crc32c_hw_available(void);

/* The SSE4.2 version (folding with PCLMULQDQ from 256 bytes on, where the CPU has it); call only
 * when crc32c_hw_available(). Exposed for tests. */
uint32_t crc32c_hw(uint32_t crc, const void* p, size_t n);

#endif
