/* gpu-codec-bench.c — the GPU codecs against the CPU codecs and against the GPU's
 * own copy bandwidth.
 *
 *   gpu-codec-bench [-s SPEC]... [-n COUNT[,COUNT...]] [-c MAX] [-r RUNS] [-w WARMUP]
 *
 * For each spec and count n (fp32 tensors; defaults below, 25.6 M and 256 M):
 *  1. check: fresh random-normal input (a new seed per row, with a NaN and an inf
 *     planted), two calls in a row (so error feedback carries a residual): the GPU
 *     frame must equal the CPU compressor's byte for byte, and the GPU's decode of
 *     it must equal the CPU's bit for bit;
 *  2. time, with CUDA events, WARMUP then RUNS rounds of: a device-to-device copy
 *     of the 4n input bytes, the encode kernels (input to payload, and residual in
 *     and out with error feedback), the decode kernels (payload added into an fp32
 *     tensor). Medians; GB/s counts bytes read plus bytes written, as the copy's
 *     2 x 4n, and the ratio columns divide by the copy's GB/s of the same round.
 * -c MAX checks only counts up to MAX; larger counts are timed on one random input
 * (the host's random numbers and CPU codecs take about 35 s a row at 256 M).
 * Exit code nonzero if any frame or decode differs or any spec fails. */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compress/compressor.h"
#include "compress/spec.h"
#include "cuda/gpu_compressor.h"
#include "gccl.h"

static const char* const default_specs[] = {
    "none",
    "fp16:ef=0",
    "bf16:ef=0",
    "fp16:ef=1",
    "uniform:bits=8,round=nearest,ef=0",
    "uniform:bits=4,round=nearest,ef=0",
    "uniform:bits=8,ef=0",
    "uniform:bits=4,ef=1",
    "uniform:bits=2,ef=1",
    "sign:ef=0",
    "sign",
    "qsgd:bits=4",
    "qsgd:bits=4,ef=1",
    "qsgd:bits=8",
    "terngrad",
    "terngrad:ef=1",
    "topk:ratio=0.01,ef=0",
    "topk:ratio=0.01",
    "topk:ratio=0.01,values=fp16,ef=0",
    "topk:ratio=0.01,approx=1,ef=0",
    "randk:ratio=0.01,ef=0",
    "randk:ratio=0.01",
};
#define N_DEFAULT_SPECS (sizeof default_specs / sizeof default_specs[0])
#define MAX_SPECS 32
#define MAX_COUNTS 8

#define CUDA_OR_DIE(call)                                                                    \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(2);                                                                               \
    }                                                                                        \
  } while (0)

static int cmp_float(const void* a, const void* b) {
  float x = *(const float*)a, y = *(const float*)b;
  return (x > y) - (x < y);
}

static float median(float* v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_float);
  return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

/* n random-normal floats (Box-Muller over a 64-bit LCG with this seed). */
static void random_normal(float* x, size_t n, uint64_t seed) {
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (size_t i = 0; i < n; i += 2) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double u1 = ((double)(s >> 11) + 1.0) * 0x1p-53;
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double u2 = (double)(s >> 11) * 0x1p-53;
    double r = sqrt(-2.0 * log(u1));
    x[i] = (float)(r * cos(6.283185307179586 * u2));
    if (i + 1 < n) x[i + 1] = (float)(r * sin(6.283185307179586 * u2));
  }
}

/* Byte-for-byte frames and bit-for-bit decodes of two calls; returns 0 when equal. */
static int check_row(const char* spec, size_t n, uint64_t seed, float* h_x, float* d_x, float* d_acc) {
  gcclCompressor_t cpu = NULL;
  struct gpu_compressor* gpu = NULL;
  if (gcclCompressorCreate(&cpu, spec, n, gcclFloat32) != gcclSuccess ||
      gpu_compressor_create(&gpu, spec, n, gcclFloat32) != gcclSuccess) {
    fprintf(stderr, "%s: %s\n", spec, gcclGetLastError(NULL));
    return 1;
  }
  size_t bound = gpu_compressor_bound(gpu);
  unsigned char* f_cpu = malloc(bound);
  unsigned char* f_gpu = malloc(bound);
  float* want = malloc(n * sizeof(float));
  float* got = malloc(n * sizeof(float));
  int bad = f_cpu == NULL || f_gpu == NULL || want == NULL || got == NULL;
  for (int call = 0; call < 2 && !bad; call++) {
    random_normal(h_x, n, seed + (uint64_t)call);
    if (n > 100) {
      h_x[17] = NAN;
      h_x[n - 2] = INFINITY;
    }
    CUDA_OR_DIE(cudaMemcpy(d_x, h_x, n * sizeof(float), cudaMemcpyHostToDevice));
    size_t b1 = 0, b2 = 0;
    if (gcclEncode(cpu, h_x, f_cpu, bound, &b1) != gcclSuccess ||
        gpu_compressor_encode(gpu, d_x, f_gpu, bound, &b2, NULL) != gcclSuccess) {
      fprintf(stderr, "%s: encode failed: %s\n", spec, gcclGetLastError(NULL));
      bad = 1;
      break;
    }
    if (b1 != b2 || memcmp(f_cpu, f_gpu, b1) != 0) {
      size_t at = 0;
      while (at < b1 && at < b2 && f_cpu[at] == f_gpu[at]) at++;
      fprintf(stderr, "%s n=%zu call %d: GPU frame (%zu bytes) differs from the CPU's (%zu) at byte %zu\n", spec, n,
              call, b2, b1, at);
      bad = 1;
      break;
    }
    random_normal(want, n, seed + 100);
    CUDA_OR_DIE(cudaMemcpy(d_acc, want, n * sizeof(float), cudaMemcpyHostToDevice));
    if (gcclDecodeAccumulate(f_cpu, b1, want, n, gcclFloat32) != gcclSuccess ||
        gpu_compressor_decode(gpu, f_cpu, b1, d_acc, n, gcclFloat32, NULL) != gcclSuccess) {
      fprintf(stderr, "%s: decode failed: %s\n", spec, gcclGetLastError(NULL));
      bad = 1;
      break;
    }
    CUDA_OR_DIE(cudaMemcpy(got, d_acc, n * sizeof(float), cudaMemcpyDeviceToHost));
    if (memcmp(got, want, n * sizeof(float)) != 0) {
      fprintf(stderr, "%s n=%zu call %d: GPU decode differs from the CPU's\n", spec, n, call);
      bad = 1;
    }
  }
  free(f_cpu);
  free(f_gpu);
  free(want);
  free(got);
  gpu_compressor_destroy(gpu);
  gcclCompressorDestroy(cpu);
  return bad;
}

/* Bytes the encode kernels read and write for n fp32 elements: input, payload,
 * and with error feedback the residual in and out. */
static double encode_bytes(const struct codec_spec* s, size_t n, size_t payload) {
  return 4.0 * (double)n + (double)payload + (s->ef ? 8.0 * (double)n : 0.0);
}

static int time_row(const char* spec, size_t n, int runs, int warmup, float* d_x, float* d_acc, float* d_copy) {
  struct gpu_compressor* gpu = NULL;
  struct codec_spec s;
  if (spec_parse(spec, &s) != gcclSuccess || gpu_compressor_create(&gpu, spec, n, gcclFloat32) != gcclSuccess) {
    fprintf(stderr, "%s: %s\n", spec, gcclGetLastError(NULL));
    return 1;
  }
  cudaStream_t st;
  cudaEvent_t ev[4];
  CUDA_OR_DIE(cudaStreamCreate(&st));
  for (int i = 0; i < 4; i++) CUDA_OR_DIE(cudaEventCreate(&ev[i]));
  float* t_copy = calloc((size_t)runs, sizeof(float));
  float* t_enc = calloc((size_t)runs, sizeof(float));
  float* t_dec = calloc((size_t)runs, sizeof(float));
  float* r_enc = calloc((size_t)runs, sizeof(float));
  float* r_dec = calloc((size_t)runs, sizeof(float));
  size_t frame_bytes = 0;
  {
    /* the payload size: one full encode on the host side */
    size_t bound = gpu_compressor_bound(gpu);
    unsigned char* f = malloc(bound);
    if (f == NULL || gpu_compressor_encode(gpu, d_x, f, bound, &frame_bytes, st) != gcclSuccess) {
      fprintf(stderr, "%s: %s\n", spec, gcclGetLastError(NULL));
      return 1;
    }
    free(f);
  }
  double payload = (double)frame_bytes - 64.0;
  double copy_bytes = 8.0 * (double)n, enc_bytes = encode_bytes(&s, n, (size_t)payload);
  double dec_bytes = payload + 8.0 * (double)n; /* payload read, fp32 tensor read and written */
  for (int r = -warmup; r < runs; r++) {
    CUDA_OR_DIE(cudaEventRecord(ev[0], st));
    CUDA_OR_DIE(cudaMemcpyAsync(d_copy, d_x, n * sizeof(float), cudaMemcpyDeviceToDevice, st));
    CUDA_OR_DIE(cudaEventRecord(ev[1], st));
    if (gpu_compressor_encode_payload(gpu, d_x, st) != gcclSuccess) return 1;
    CUDA_OR_DIE(cudaEventRecord(ev[2], st));
    if (gpu_compressor_decode_payload(gpu, d_acc, st) != gcclSuccess) return 1;
    CUDA_OR_DIE(cudaEventRecord(ev[3], st));
    CUDA_OR_DIE(cudaEventSynchronize(ev[3]));
    if (r < 0) continue;
    CUDA_OR_DIE(cudaEventElapsedTime(&t_copy[r], ev[0], ev[1]));
    CUDA_OR_DIE(cudaEventElapsedTime(&t_enc[r], ev[1], ev[2]));
    CUDA_OR_DIE(cudaEventElapsedTime(&t_dec[r], ev[2], ev[3]));
    double copy_bw = copy_bytes / t_copy[r];
    r_enc[r] = (float)((enc_bytes / t_enc[r]) / copy_bw);
    r_dec[r] = (float)((dec_bytes / t_dec[r]) / copy_bw);
  }
  float mc = median(t_copy, runs), me = median(t_enc, runs), md = median(t_dec, runs);
  printf("%-34s %11zu %9.3f %8.1f %9.3f %8.1f %6.2f %9.3f %8.1f %6.2f %7.2f\n", spec, n, mc, copy_bytes / mc / 1e6, me,
         enc_bytes / me / 1e6, median(r_enc, runs), md, dec_bytes / md / 1e6, median(r_dec, runs),
         4.0 * (double)n / (double)frame_bytes);
  fflush(stdout);
  free(t_copy);
  free(t_enc);
  free(t_dec);
  free(r_enc);
  free(r_dec);
  for (int i = 0; i < 4; i++) cudaEventDestroy(ev[i]);
  cudaStreamDestroy(st);
  gpu_compressor_destroy(gpu);
  return 0;
}

int main(int argc, char** argv) {
  const char* specs[MAX_SPECS];
  int nspecs = 0, runs = 20, warmup = 3, ncounts = 0;
  size_t max_check = SIZE_MAX;
  size_t counts[MAX_COUNTS];
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-s") && i + 1 < argc && nspecs < MAX_SPECS) {
      specs[nspecs++] = argv[++i];
    } else if (!strcmp(argv[i], "-n") && i + 1 < argc) {
      for (char* t = strtok(argv[++i], ","); t && ncounts < MAX_COUNTS; t = strtok(NULL, ","))
        counts[ncounts++] = (size_t)strtod(t, NULL);
    } else if (!strcmp(argv[i], "-c") && i + 1 < argc) {
      max_check = (size_t)strtod(argv[++i], NULL);
    } else if (!strcmp(argv[i], "-r") && i + 1 < argc) {
      runs = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "-w") && i + 1 < argc) {
      warmup = atoi(argv[++i]);
    } else {
      fprintf(stderr, "usage: %s [-s SPEC]... [-n COUNT[,COUNT...]] [-c MAX] [-r RUNS] [-w WARMUP]\n", argv[0]);
      return 2;
    }
  }
  if (runs < 1 || warmup < 0) {
    fprintf(stderr, "runs must be >= 1 and warmup >= 0\n");
    return 2;
  }
  if (nspecs == 0)
    for (size_t i = 0; i < N_DEFAULT_SPECS; i++) specs[nspecs++] = default_specs[i];
  if (ncounts == 0) {
    counts[ncounts++] = 25600000;
    counts[ncounts++] = 256000000;
  }
  const char* why = NULL;
  if (!gpu_available(&why)) {
    printf("gpu-codec-bench: no CUDA device (%s): nothing measured\n", why);
    return 77;
  }
  struct cudaDeviceProp prop;
  CUDA_OR_DIE(cudaGetDeviceProperties(&prop, 0));
  printf("# device: %s, %d SMs; medians of %d runs after %d warm-up\n", prop.name, prop.multiProcessorCount, runs,
         warmup);
  printf("%-34s %11s %9s %8s %9s %8s %6s %9s %8s %6s %7s\n", "spec", "count", "copy_ms", "copyGB/s", "enc_ms",
         "encGB/s", "enc/cp", "dec_ms", "decGB/s", "dec/cp", "ratio");
  int failed = 0;
  for (int c = 0; c < ncounts; c++) {
    size_t n = counts[c];
    float *h_x = malloc(n * sizeof(float)), *d_x, *d_acc, *d_copy;
    if (h_x == NULL) {
      fprintf(stderr, "out of host memory for %zu floats\n", n);
      return 2;
    }
    CUDA_OR_DIE(cudaMalloc((void**)&d_x, n * sizeof(float)));
    CUDA_OR_DIE(cudaMalloc((void**)&d_acc, n * sizeof(float)));
    CUDA_OR_DIE(cudaMalloc((void**)&d_copy, n * sizeof(float)));
    const int check = n <= max_check;
    if (!check) {
      random_normal(h_x, n, 1000u * (uint64_t)c);
      CUDA_OR_DIE(cudaMemcpy(d_x, h_x, n * sizeof(float), cudaMemcpyHostToDevice));
    }
    for (int i = 0; i < nspecs; i++) {
      int bad = check ? check_row(specs[i], n, 1000u * (uint64_t)c + (uint64_t)i, h_x, d_x, d_acc) : 0;
      CUDA_OR_DIE(cudaMemset(d_acc, 0, n * sizeof(float)));
      if (!bad) bad = time_row(specs[i], n, runs, warmup, d_x, d_acc, d_copy);
      if (bad) printf("%-34s %11zu FAILED (see stderr)\n", specs[i], n);
      failed |= bad;
    }
    cudaFree(d_x);
    cudaFree(d_acc);
    cudaFree(d_copy);
    free(h_x);
  }
  printf("# frames and decodes %s", failed ? "DIFFER from the CPU's (or a spec failed)" : "identical to the CPU's");
  if (max_check != SIZE_MAX) printf(" (compared at counts up to %zu)", max_check);
  printf("\n");
  return failed;
}
