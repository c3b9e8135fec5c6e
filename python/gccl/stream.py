"""gccl streams: a worker thread per stream that runs the collectives queued on it
in order (gcclStreamCreate), optionally ordered on a CUDA stream for device
buffers (gcclStreamCreateCuda)."""

import ctypes
import threading

from ._lib import HAVE_CUDA, check, lib
from .errors import GcclInvalidArgument, GcclInvalidUsage


class Stream:
    """A gccl stream. Pass it as `stream=` to a Comm's collectives: the call then
    returns once queued, and its buffers must stay alive and untouched until
    synchronize() returns (the stream keeps a reference to them until then).

    cuda: a torch.cuda.Stream, or a cudaStream_t as an int (builds with CUDA):
    device-buffer calls on this stream wait for the work queued before them on
    that CUDA stream, as a kernel would."""

    def __init__(self, cuda=None):
        h = ctypes.c_void_p()
        if cuda is None:
            check(lib.gcclStreamCreate(ctypes.byref(h)))
        else:
            if not HAVE_CUDA:
                raise GcclInvalidUsage("invalid usage", "this libgccl was built without CUDA (GCCL_WITH_CUDA)")
            handle = getattr(cuda, "cuda_stream", cuda)
            if not isinstance(handle, int) or isinstance(handle, bool):
                raise GcclInvalidArgument("invalid argument", "cuda must be a torch.cuda.Stream or a cudaStream_t int")
            check(lib.gcclStreamCreateCuda(ctypes.byref(h), ctypes.c_void_p(handle)))
        self._h = h
        self._lock = threading.Lock()
        self._queued = []  # the buffers of calls not yet synchronized

    def _handle(self):
        if self._h.value is None:
            raise GcclInvalidUsage("invalid usage", "the stream was destroyed")
        return self._h

    def keep(self, *objs):
        """Holds objs until the next synchronize() (the buffers of a queued call)."""
        with self._lock:
            self._queued.append(objs)

    def synchronize(self):
        """Waits for every call queued so far; raises the first one's error."""
        try:
            check(lib.gcclStreamSynchronize(self._handle()))
        finally:
            with self._lock:
                self._queued.clear()

    def destroy(self):
        """Waits for the queued calls, then frees the stream. Idempotent."""
        with self._lock:
            h, self._h = self._h, ctypes.c_void_p()
        if h.value is not None:
            check(lib.gcclStreamDestroy(h))
            self._queued.clear()

    def __del__(self):
        try:
            self.destroy()
        except Exception:  # interpreter shutdown: the library may be gone
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()
