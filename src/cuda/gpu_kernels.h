/* gpu_kernels.h — launchers of the codec kernels (the .cu files here), called from C.
 *
 * Every encode kernel reads the codec's input as x[i] = float(src[i]) (+ resid_in[i]
 * when resid_in is not NULL: error feedback), exactly as the CPU compressor builds
 * it, writes the payload in the CPU codec's format, and, when resid_out is not
 * NULL, x[i] - decoded[i] there (0 at exception indices). Bucket codecs report
 * buckets that need exceptions in bucket_bad[b] (EXC_BUCKET_*) and count them in
 * *nbad; gk_exceptions_select then lists the exception indices. Launchers only
 * enqueue on the stream; they return the launch's error. Pointers are device
 * pointers unless named h_. */
#ifndef GCCL_CUDA_GPU_KERNELS_H
#define GCCL_CUDA_GPU_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "gccl.h"

#ifdef __cplusplus
extern "C" {
#endif

/* bucket_bad[b]: no exceptions; some elements are not finite (they are the
 * exceptions); the bucket's range overflows fp32 (all its elements are). */
enum { EXC_BUCKET_NONE = 0, EXC_BUCKET_NONFINITE = 1, EXC_BUCKET_ALL = 2 };

/* fp16 (bf16 = 0) or bf16 (bf16 = 1): payload = n 16-bit values. */
cudaError_t gk_half_encode(int bf16, const void* src, gcclDataType_t dt, const float* resid_in, float* resid_out,
                           size_t n, unsigned char* payload, cudaStream_t s);
/* dst[i] += decoded[i], dst of dt (a float type). */
cudaError_t gk_half_decode(int bf16, const unsigned char* payload, size_t n, void* dst, gcclDataType_t dt,
                           cudaStream_t s);

/* uniform: key is the stochastic-rounding key (ignored when !stochastic). */
cudaError_t gk_uniform_encode(const void* src, gcclDataType_t dt, const float* resid_in, float* resid_out, size_t n,
                              unsigned bucket, unsigned bits, int stochastic, uint64_t key, unsigned char* payload,
                              unsigned char* bucket_bad, unsigned long long* nbad, cudaStream_t s);
cudaError_t gk_uniform_decode(const unsigned char* payload, size_t n, unsigned bucket, unsigned bits, void* dst,
                              gcclDataType_t dt, cudaStream_t s);

/* sign */
cudaError_t gk_sign_encode(const void* src, gcclDataType_t dt, const float* resid_in, float* resid_out, size_t n,
                           unsigned bucket, unsigned char* payload, unsigned char* bucket_bad, unsigned long long* nbad,
                           cudaStream_t s);
cudaError_t gk_sign_decode(const unsigned char* payload, size_t n, unsigned bucket, void* dst, gcclDataType_t dt,
                           cudaStream_t s);

/* qsgd (always stochastic: key is the rounding key). */
cudaError_t gk_qsgd_encode(const void* src, gcclDataType_t dt, const float* resid_in, float* resid_out, size_t n,
                           unsigned bucket, unsigned bits, uint64_t key, unsigned char* payload,
                           unsigned char* bucket_bad, unsigned long long* nbad, cudaStream_t s);
cudaError_t gk_qsgd_decode(const unsigned char* payload, size_t n, unsigned bucket, unsigned bits, void* dst,
                           gcclDataType_t dt, cudaStream_t s);

/* terngrad (always stochastic: key is the rounding key). */
cudaError_t gk_terngrad_encode(const void* src, gcclDataType_t dt, const float* resid_in, float* resid_out, size_t n,
                               unsigned bucket, uint64_t key, unsigned char* payload, unsigned char* bucket_bad,
                               unsigned long long* nbad, cudaStream_t s);
cudaError_t gk_terngrad_decode(const unsigned char* payload, size_t n, unsigned bucket, void* dst, gcclDataType_t dt,
                               cudaStream_t s);

/* ---- exceptions and raw frames (exceptions.cu) ---------------------------------- */

/* Device scratch gk_exceptions_select needs for n elements (bytes). */
size_t gk_exceptions_scratch(size_t n);
/* exc[0, *nexc) = the increasing indices i < n where |x[i]|'s bits reach exc_key
 * (0x7F800000: not finite; sparse codecs: topk_exc_key) or bucket_bad[i / bucket]
 * == EXC_BUCKET_ALL (bucket 0: no buckets). scratch: gk_exceptions_scratch(n) bytes. */
cudaError_t gk_exceptions_select(const void* src, gcclDataType_t dt, const float* resid_in, size_t n, uint32_t exc_key,
                                 unsigned bucket, const unsigned char* bucket_bad, uint64_t* exc,
                                 unsigned long long* nexc, void* scratch, size_t scratch_bytes, cudaStream_t s);
/* The frame's exceptions list at out: entry j = (exc[j] as u64 LE, src[exc[j]] raw). */
cudaError_t gk_exceptions_write(const void* src, gcclDataType_t dt, const uint64_t* exc, size_t nexc,
                                unsigned char* out, cudaStream_t s);
/* Error feedback when a frame falls back to raw: resid_out[i] = resid_in[i] where
 * x[i] is finite, else 0 (nothing of the residual was sent). */
cudaError_t gk_raw_residual(const void* src, gcclDataType_t dt, const float* resid_in, float* resid_out, size_t n,
                            cudaStream_t s);

/* Decoding around a frame's exceptions list (entries: nexc of (index u64 LE, raw
 * value of dt), checked on the host): saved[j] = dst[index j] before the codec's
 * kernel; afterwards dst[index j] = saved[j] + the raw value (dtype arithmetic,
 * halves through fp32), so the codec's contribution at those indices is dropped,
 * as the CPU decoder skips them. saved: nexc doubles. */
cudaError_t gk_exceptions_save(const void* dst, gcclDataType_t dt, const unsigned char* entries, size_t nexc,
                               double* saved, cudaStream_t s);
cudaError_t gk_exceptions_apply(void* dst, gcclDataType_t dt, const unsigned char* entries, size_t nexc,
                                const double* saved, cudaStream_t s);
/* dst[i] += payload[i], both n elements of dt (a float type): a raw frame. */
cudaError_t gk_raw_decode(const unsigned char* payload, size_t n, void* dst, gcclDataType_t dt, cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
