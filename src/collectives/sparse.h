/* sparse.h — pieces of the sparse allreduces (sparse.c) that randk's allreduce and tests use. */
#ifndef GCCL_COLLECTIVES_SPARSE_H
#define GCCL_COLLECTIVES_SPARSE_H

#include <stddef.h>

#include "collectives/coll.h"
#include "compress/codec_util.h"
#include "compress/index_code.h"

/* Every rank sends its frame of a->count fp32 elements (at workspace offset
 * own_at, own_bytes long) to every peer, and sums all p frames, its own
 * included, in rank order into zeroed fp32: *sum is a->recvbuff when a->dt is
 * fp32, else workspace that the caller rounds into recvbuff. Every rank adds the
 * same frames in the same order, so all hold the same bits. Frames are checked
 * (gcclCorruptData) before they are added. Sizes vary: they are exchanged first,
 * so the workspace holds the frames that exist rather than p bounds; it grows
 * keeping bytes [0, own_at + own_bytes). */
gcclResult_t sparse_frames_sum(struct coll_ctx* ctx, const struct coll_args* a, size_t own_at, size_t own_bytes,
                               float** sum);

/* sparse-sr's range message: the values of one range of the index space,
 * sparse while that is smaller than the dense range. Little-endian:
 *
 *   u32 tag  u32 0  u64 entries | sparse ("GSPS"): entries f32 values, then their
 *                               |   offsets in the range as an Elias-Fano section
 *                               |   (index_code.h); 4 entries + section < 4 len
 *                               | dense ("GSPD"): entries = len f32 values */
#define RANGE_HEADER 16

/* Builds one range message: sparse_range_begin with the number of entries to come,
 * sparse_range_put for each (offsets increasing), sparse_range_end. Sparse when smaller than
 * the dense range. */
struct sparse_range_out {
  unsigned char* m;
  size_t len, entries, section;
  unsigned char* v; /* sparse: next value */
  struct index_writer w;
  float* dense;
};

void sparse_range_begin(struct sparse_range_out* o, unsigned char* m, size_t len, size_t entries);
static inline void sparse_range_put(struct sparse_range_out* o, size_t off, float x) {
  if (o->dense) {
    o->dense[off] += x; /* 0 + x, as a decode into zeros adds it */
  } else {
    put_f32(o->v, x);
    o->v += 4;
    index_writer_put(&o->w, off);
  }
}
/* The message's size. */
size_t sparse_range_end(struct sparse_range_out* o);

/* Writes x[0, len) as a range message at m (room: RANGE_HEADER + 4 len bytes)
 * and returns its size. Its entries are the nonzeros: any bit set, so -0 travels. */
size_t sparse_range_write(unsigned char* m, const float* x, size_t len);

/* Applies the range message m (bytes long, from rank `from`, for messages) to
 * dst[0, len): adds its entries (add), or writes them with zeros between. Checks
 * every field first: gcclCorruptData otherwise, dst untouched. */
gcclResult_t sparse_range_apply(const unsigned char* m, size_t bytes, float* dst, size_t len, int add, int from);

#endif
