/* index_code.h — Elias-Fano coding of a strictly increasing index set (top-k's index section). */
#ifndef GCCL_COMPRESS_INDEX_CODE_H
#define GCCL_COMPRESS_INDEX_CODE_H

#include <stddef.h>
#include <stdint.h>

#include "gccl.h"

/* The section for k strictly increasing indices below n (format in index_code.c).
 * Its size depends on n and k only, so a receiver knows it before reading. */

/* Exact bytes of the section for (n, k): 0 when k == 0; SIZE_MAX when k > n or the
 * size does not fit size_t. */
size_t index_code_bytes(uint64_t n, uint64_t k);

/* The section's layout for (n, k), 1 <= k <= n: L low bits per index, and the
 * low part's bytes (the high part follows it). For encoders that write the parts
 * in parallel (the GPU). */
void index_code_layout(uint64_t n, uint64_t k, unsigned* L, size_t* low_bytes);

/* An upper bound of index_code_bytes(n, j) over every j <= k, for buffers sized
 * before the encoder knows how many indices it keeps. SIZE_MAX on overflow. */
size_t index_code_bound(uint64_t n, uint64_t k);

/* Streams indices into a section. Use: init, exactly k puts of strictly
 * increasing indices below n, finish. The writer trusts its caller (the encoder);
 * nothing is checked. */
struct index_writer {
  unsigned char* low;  /* next byte of the low-bits part */
  unsigned char* high; /* start of the high-bits part */
  size_t high_bytes;
  uint64_t acc; /* pending low bits, fewer than 32 */
  unsigned acc_bits;
  unsigned L;          /* low bits per element */
  uint64_t i;          /* indices written so far */
  uint64_t word;       /* the high part's 64-bit word being filled */
  uint64_t word_index; /* which one */
};

/* out must hold index_code_bytes(n, k) bytes (k <= n). */
void index_writer_init(struct index_writer* w, unsigned char* out, uint64_t n, uint64_t k);
void index_writer_put(struct index_writer* w, uint64_t idx);
/* The same for idx[0, count), faster than one at a time. */
void index_writer_put_many(struct index_writer* w, const uint64_t* idx, size_t count);
void index_writer_finish(struct index_writer* w);

/* Checks that in[0, bytes) is exactly the section of k strictly increasing
 * indices below n (size, padding bits zero, k entries, increasing, in range).
 * gcclCorruptData with an err_set message otherwise. Reads only in[0, bytes). */
gcclResult_t index_code_validate(const unsigned char* in, size_t bytes, uint64_t n, uint64_t k);

/* Streams indices out of a section that index_code_validate accepted. Never reads
 * outside in[0, bytes), even on a section it did not check. */
struct index_reader {
  const unsigned char* in;
  size_t bytes;
  size_t low_bytes; /* the high part starts at in + low_bytes */
  unsigned L;
  uint64_t k, i;
  size_t word_pos; /* byte offset (in the high part) of the word below */
  uint64_t word;   /* the unread one-bits of the current high word */
};

void index_reader_init(struct index_reader* r, const unsigned char* in, size_t bytes, uint64_t n, uint64_t k);
/* Writes the next (up to max) indices to out; returns how many (0 when done). */
size_t index_reader_next(struct index_reader* r, uint64_t* out, size_t max);

#endif
