/* device_stage.c — device.h with CUDA: which pointers are device memory, the
 * device made current for a call (device_current.h), and device buffers staged
 * through pinned host memory. */
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/dtype.h"
#include "common/result.h"
#include "cuda/gpu_compressor.h"
#include "device/device.h"
#include "device/device_current.h"

struct device_stage {
  unsigned char* host; /* pinned: send part, then receive part */
  size_t cap;
};

/* Asking CUDA about a pointer creates a CUDA context (hundreds of MB of device
 * memory) in a process that had none, which a CPU-only user of a CUDA build on a
 * GPU machine must not pay. So pointers are looked at only once some device's
 * primary context (the one the runtime API uses) is active: a process holding
 * device buffers has one. The driver is asked through dlopen, so that libgccl
 * keeps loading on machines without it. */
typedef int (*device_get_fn)(int* dev, int ordinal);                    /* cuDeviceGet */
typedef int (*primary_state_fn)(int dev, unsigned* flags, int* active); /* cuDevicePrimaryCtxGetState */
typedef int (*ctx_get_current_fn)(void** ctx);                          /* cuCtxGetCurrent */
static struct {
  int devices;
  device_get_fn device_get;
  primary_state_fn primary_state;
  ctx_get_current_fn ctx_get_current;
} cuda;
static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;

static void probe_cuda(void) {
  if (!gpu_available(NULL) || cudaGetDeviceCount(&cuda.devices) != cudaSuccess) return;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD); /* loaded by the runtime's probe */
  if (lib == NULL) lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (lib == NULL) return;
  cuda.device_get = (device_get_fn)dlsym(lib, "cuDeviceGet");
  cuda.primary_state = (primary_state_fn)dlsym(lib, "cuDevicePrimaryCtxGetState");
  cuda.ctx_get_current = (ctx_get_current_fn)dlsym(lib, "cuCtxGetCurrent");
}

/* 1 once the process uses CUDA (a primary context is active on some device). */
static int cuda_in_use(void) {
  pthread_once(&cuda_once, probe_cuda);
  if (cuda.primary_state == NULL || cuda.device_get == NULL) return 0;
  for (int d = 0; d < cuda.devices; d++) {
    int dev = 0, active = 0;
    unsigned flags = 0;
    if (cuda.device_get(&dev, d) == 0 && cuda.primary_state(dev, &flags, &active) == 0 && active) return 1;
  }
  return 0;
}

/* The device whose memory p is, or -1 (host memory, or CUDA unused). */
static int pointer_device(const void* p) {
  if (p == NULL || !cuda_in_use()) return -1;
  struct cudaPointerAttributes attr;
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError(); /* not a pointer CUDA knows: host memory */
    return -1;
  }
  return attr.type == cudaMemoryTypeDevice ? attr.device : -1;
}

int device_is_pointer(const void* p) {
  return pointer_device(p) >= 0;
}

int device_enter(int dev) {
  int cur = -1;
  if (dev < 0 || cudaGetDevice(&cur) != cudaSuccess || cur == dev) return -1;
  pthread_once(&cuda_once, probe_cuda);
  void* ctx = NULL;
  int had_context = cuda.ctx_get_current && cuda.ctx_get_current(&ctx) == 0 && ctx != NULL;
  cudaSetDevice(dev);
  return had_context ? cur : -1;
}

void device_leave(int prev) {
  if (prev >= 0) cudaSetDevice(prev);
}

unsigned device_buffers(const struct coll_args* a, int nranks) {
  (void)nranks;
  return (device_is_pointer(a->sendbuff) ? DEVICE_SEND : 0u) | (device_is_pointer(a->recvbuff) ? DEVICE_RECV : 0u);
}

static gcclResult_t cuda_fail(cudaError_t e, const char* what) {
  return err_set(gcclSystemError, "CUDA: %s failed: %s", what, cudaGetErrorString(e));
}

/* device_execute on the buffers' device; *ran once run was called. */
static gcclResult_t stage_and_run(struct device_stage** stage, const struct coll_ctx* ctx, const struct coll_args* a,
                                  enum coll_algo algo, gcclComm_t comm,
                                  gcclResult_t (*run)(gcclComm_t, const struct coll_args*), int* ran) {
  struct coll_extent ext = coll_extent_of(a, dtype_size(a->dt), ctx->rank, ctx->nranks);
  size_t send = ext.send_bytes, recv = ext.recv_bytes;
  struct device_stage* st = *stage;
  if (st == NULL) {
    st = calloc(1, sizeof *st);
    if (st == NULL) return err_set(gcclSystemError, "out of memory for device staging");
    *stage = st;
  }
  if (send + recv > st->cap) { /* grow: the old buffer is too small for this call */
    cudaFreeHost(st->host);
    st->host = NULL;
    st->cap = 0;
    cudaError_t e = cudaHostAlloc((void**)&st->host, send + recv, cudaHostAllocDefault);
    if (e != cudaSuccess) return cuda_fail(e, "allocating pinned staging memory");
    st->cap = send + recv;
  }
  cudaStream_t cs = (cudaStream_t)a->cuda_stream;
  cudaError_t e = cudaStreamSynchronize(cs); /* what came before on the stream is done */
  if (e != cudaSuccess) return cuda_fail(e, "waiting for the work queued before the call");
  struct coll_args h = *a;
  h.device = 0;
  /* Codec work on the GPU: the schedule reads (writes) the device buffer itself,
   * and only frames cross to the host. */
  unsigned on_gpu = a->comp ? device_codec_path(a, algo) : 0u;
  if (on_gpu & DEVICE_SEND) h.device_send = a->sendbuff;
  if (on_gpu & DEVICE_RECV) h.device_recv = a->recvbuff;
  if (a->device & DEVICE_SEND) {
    h.sendbuff = st->host;
    if (send && ext.reads_send && !(on_gpu & DEVICE_SEND)) {
      e = cudaMemcpyAsync(st->host, a->sendbuff, send, cudaMemcpyDeviceToHost, cs);
      if (e == cudaSuccess) e = cudaStreamSynchronize(cs);
      if (e != cudaSuccess) return cuda_fail(e, "copying the send buffer from the device");
    }
  }
  if (a->device & DEVICE_RECV) h.recvbuff = st->host + send; /* out of place on the host, also for in-place calls */
  *ran = 1;
  GCCL_CHECK(run(comm, &h));
  /* A reduce leaves non-root receive buffers alone. */
  if ((a->device & DEVICE_RECV) && ext.writes_recv && recv && !(on_gpu & DEVICE_RECV)) {
    e = cudaMemcpyAsync(a->recvbuff, h.recvbuff, recv, cudaMemcpyHostToDevice, cs);
    if (e == cudaSuccess) e = cudaStreamSynchronize(cs);
    if (e != cudaSuccess) return cuda_fail(e, "copying the result to the device");
  }
  return gcclSuccess;
}

gcclResult_t device_execute(struct device_stage** stage, const struct coll_ctx* ctx, const struct coll_args* a,
                            enum coll_algo algo, gcclComm_t comm,
                            gcclResult_t (*run)(gcclComm_t, const struct coll_args*)) {
  int prev = device_enter(pointer_device((a->device & DEVICE_SEND) ? a->sendbuff : a->recvbuff));
  int ran = 0;
  gcclResult_t res = stage_and_run(stage, ctx, a, algo, comm, run, &ran);
  /* Failed before the collective began: the peers are on their way into it. */
  if (res != gcclSuccess && !ran) tp_abort(ctx->tp, res);
  device_leave(prev);
  return res;
}

void device_stage_free(struct device_stage* stage) {
  if (stage == NULL) return;
  cudaFreeHost(stage->host);
  free(stage);
}
