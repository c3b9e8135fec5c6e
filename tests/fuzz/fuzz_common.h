/* fuzz_common.h — helpers the frame fuzz targets share. */
#ifndef GCCL_FUZZ_COMMON_H
#define GCCL_FUZZ_COMMON_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "compress/frame.h"

static inline uint64_t fuzz_load_u64le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
  return v;
}

/* A malloc'd copy of a frame (len >= FRAME_HEADER_BYTES) with its CRC field made
 * right, so the checks behind the CRC see the hostile bytes. */
static inline uint8_t* fuzz_sealed_copy(const uint8_t* frame, size_t len) {
  uint8_t* sealed = malloc(len);
  if (sealed == NULL) abort();
  memcpy(sealed, frame, len);
  uint32_t crc = frame_crc(sealed, len);
  for (int i = 0; i < 4; i++) sealed[FRAME_CRC_OFFSET + i] = (uint8_t)(crc >> (8 * i));
  return sealed;
}

#endif
