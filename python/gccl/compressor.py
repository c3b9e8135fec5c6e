"""Compressors (a codec plus the error-feedback residual of one tensor) and the
codec-only API: encode a tensor into a frame, decode-accumulate a frame.

CUDA tensors (builds with CUDA) are encoded and decoded by gccl's GPU codecs on
torch's current stream of their device (gcclEncodeCuda, gcclDecodeAccumulateCuda):
the call waits for the work queued before it there and returns when its own is
done. Frames are byte-identical to the CPU's."""

import contextlib
import ctypes
import threading

import numpy as np

from . import _buffers as B
from ._lib import check, lib
from .errors import GcclInvalidArgument, GcclInvalidUsage


class Compressor:
    """Compresses one tensor of `count` elements of `dtype` with codec `spec`
    ("topk:ratio=0.01", "uniform:bits=4", "sign", "fp16", "none", ...; README,
    "Codecs"). Holds the tensor's error-feedback residual between calls."""

    def __init__(self, spec, count, dtype="float32"):
        if not isinstance(spec, str):
            raise GcclInvalidArgument("invalid argument", "spec must be a str, not %s" % type(spec).__name__)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise GcclInvalidArgument("invalid argument", "count must be an int >= 0, not %r" % (count,))
        self.spec, self.count, self.dtype = spec, count, B.dtype_code(dtype)
        self._lock = threading.Lock()
        h = ctypes.c_void_p()
        check(lib.gcclCompressorCreate(ctypes.byref(h), spec.encode(), count, self.dtype))
        self._h = h

    def _handle(self):
        if self._h.value is None:
            raise GcclInvalidUsage("invalid usage", "the compressor was destroyed")
        return self._h

    def destroy(self):
        with self._lock:
            if self._h.value is not None:
                h, self._h = self._h, ctypes.c_void_p()
                check(lib.gcclCompressorDestroy(h))

    def __del__(self):
        try:
            self.destroy()
        except Exception:  # interpreter shutdown: the library may be gone
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def _check_tensor(self, b, what):
        if b.dtype != self.dtype or b.count != self.count:
            raise GcclInvalidArgument("invalid argument", "%s is %d x %s; the compressor was made for %d x %s" % (
                what, b.count, B.DTYPE_NAMES[b.dtype], self.count, B.DTYPE_NAMES[self.dtype]))

    @property
    def encode_bound(self):
        """The largest frame encode() writes, in bytes."""
        n = ctypes.c_size_t()
        check(lib.gcclEncodeBound(self._handle(), ctypes.byref(n)))
        return n.value

    def encode_bound_nonfinite(self, max_nonfinite=0):
        """The largest frame encode() writes when the input (plus residual) has at
        most max_nonfinite inf or NaN values: with 0, for quantizers, the size of
        every frame of a finite input (gcclEncodeBoundNonFinite)."""
        if not isinstance(max_nonfinite, int) or max_nonfinite < 0:
            raise GcclInvalidArgument("invalid argument", "max_nonfinite must be an int >= 0")
        n = ctypes.c_size_t()
        check(lib.gcclEncodeBoundNonFinite(self._handle(), max_nonfinite, ctypes.byref(n)))
        return n.value

    def encode(self, src, out=None):
        """Encodes src (the compressor's tensor), updating the residual. Returns the
        frame, a uint8 numpy array, or a view of `out` when given (>= encode_bound
        bytes; a uint8 CUDA tensor for a frame in device memory, which needs a CUDA src)."""
        s = B.as_buffer(src, "src", device_ok=True)
        self._check_tensor(s, "src")
        if out is None:
            out = np.empty(self.encode_bound, dtype=np.uint8)
        o = B.as_buffer(out, "out", writable=True, device_ok=True)
        if o.dtype not in (B.UINT8, B.INT8):
            raise GcclInvalidArgument("invalid argument", "out must hold bytes (uint8)")
        size = ctypes.c_size_t()
        device = B.cuda_device(s, o)
        with self._lock:
            if device is None:
                check(lib.gcclEncode(self._handle(), s.ptr, o.ptr, o.count, ctypes.byref(size)))
            else:
                with _on_stream(device) as stream:
                    check(lib.gcclEncodeCuda(self._handle(), s.ptr, o.ptr, o.count, ctypes.byref(size), stream))
        return out[:size.value]

    def get_residual(self, out=None):
        """Copies the error-feedback residual (zeros without error feedback) into out
        (an array or tensor of the compressor's count and dtype; a new numpy array
        when None, a torch tensor for bfloat16) and returns it."""
        if out is None:
            if self.dtype == B.BFLOAT16:
                import torch
                out = torch.zeros(self.count, dtype=torch.bfloat16)
            else:
                out = np.zeros(self.count, dtype=np.dtype(B.DTYPE_NAMES[self.dtype]))
        o = B.as_buffer(out, "out", writable=True)
        self._check_tensor(o, "out")
        with self._lock:
            check(lib.gcclCompressorGetResidual(self._handle(), o.ptr))
        return out

    def set_residual(self, values):
        """Replaces the residual (checkpoint restore); GcclInvalidUsage without error feedback."""
        if B.is_torch(values):
            values = values.detach().cpu().contiguous()
        b = B.as_buffer(values, "residual")
        self._check_tensor(b, "residual")
        with self._lock:
            check(lib.gcclCompressorSetResidual(self._handle(), b.ptr))

    def get_state(self):
        """The state the compressor carries between calls besides its residual
        (powersgd's Q; empty for the other codecs), as float32 numpy values, for
        checkpoints."""
        n = ctypes.c_size_t(0)
        with self._lock:
            check(lib.gcclCompressorGetState(self._handle(), None, 0, ctypes.byref(n)))
            out = np.zeros(n.value // 4, dtype=np.float32)
            check(lib.gcclCompressorGetState(self._handle(), out.ctypes.data_as(ctypes.c_void_p), n.value,
                                             ctypes.byref(n)))
        return out

    def set_state(self, values):
        """Restores what get_state returned (same spec and count)."""
        if B.is_torch(values):
            values = values.detach().cpu().contiguous().numpy()
        v = np.ascontiguousarray(values, dtype=np.float32)
        with self._lock:
            check(lib.gcclCompressorSetState(self._handle(), v.ctypes.data_as(ctypes.c_void_p), v.nbytes))

    # ---- powersgd's steps, with the sums over ranks done by the caller --------------

    @property
    def powersgd_shape(self):
        """(rows, cols, rank) of a powersgd compressor's matrix: P is rows x rank,
        Q cols x rank (float32, row-major)."""
        r, c, k = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
        check(lib.gcclPowerSgdShape(self._handle(), ctypes.byref(r), ctypes.byref(c), ctypes.byref(k)))
        return r.value, c.value, k.value

    def _factor(self, x, elements, what, writable=False):
        b = B.as_buffer(x, what, writable=writable)
        if b.dtype != B.FLOAT32 or b.count != elements:
            raise GcclInvalidArgument("invalid argument", "%s must hold %d float32 values, not %d x %s" % (
                what, elements, b.count, B.DTYPE_NAMES[b.dtype]))
        return b

    def powersgd_compute_p(self, src, p):
        """PowerSGD's first step (gcclPowerSgdComputeP): p = (src + residual) Q.
        Sum p over the ranks in place (the same bits on every rank), then call
        powersgd_compute_q. CPU buffers only. Returns p."""
        rows, _, rank = self.powersgd_shape
        s = B.as_buffer(src, "src")
        self._check_tensor(s, "src")
        pb = self._factor(p, rows * rank, "p", writable=True)
        with self._lock:
            check(lib.gcclPowerSgdComputeP(self._handle(), s.ptr, pb.ptr))
        return p

    def powersgd_compute_q(self, p, q):
        """The second step: p (summed) orthonormalised, q = M^T p. Sum q over the
        ranks, then call powersgd_compute_output. Returns q."""
        rows, cols, rank = self.powersgd_shape
        pb = self._factor(p, rows * rank, "p")
        qb = self._factor(q, cols * rank, "q", writable=True)
        with self._lock:
            check(lib.gcclPowerSgdComputeQ(self._handle(), pb.ptr, qb.ptr))
        return q

    def powersgd_compute_output(self, q, out, nranks, op="avg"):
        """The last step: out = the ranks' sum ("sum") or average ("avg") from q
        (summed); commits the residual and Q. Returns out."""
        from .comm import _op_code
        _, cols, rank = self.powersgd_shape
        qb = self._factor(q, cols * rank, "q")
        o = B.as_buffer(out, "out", writable=True)
        self._check_tensor(o, "out")
        if not isinstance(nranks, int) or isinstance(nranks, bool):
            raise GcclInvalidArgument("invalid argument", "nranks must be an int")
        with self._lock:
            check(lib.gcclPowerSgdComputeOutput(self._handle(), qb.ptr, o.ptr, nranks, _op_code(op)))
        return out


def decode_accumulate(frame, dst):
    """Validates frame completely, then dst += its decoded tensor (dst: the frame's
    count and datatype). GcclCorruptData, dst untouched, for a bad frame. Either
    may be a CUDA tensor (then on torch's current stream of its device)."""
    f = B.as_buffer(frame, "frame", device_ok=True)
    if f.dtype not in (B.UINT8, B.INT8):
        raise GcclInvalidArgument("invalid argument", "frame must hold bytes (uint8)")
    d = B.as_buffer(dst, "dst", writable=True, device_ok=True)
    device = B.cuda_device(f, d)
    if device is None:
        check(lib.gcclDecodeAccumulate(f.ptr, f.count, d.ptr, d.count, d.dtype))
    else:
        with _on_stream(device) as stream:
            check(lib.gcclDecodeAccumulateCuda(f.ptr, f.count, d.ptr, d.count, d.dtype, stream))
    return dst


@contextlib.contextmanager
def _on_stream(device):
    """device made current; yields torch's current stream there as a cudaStream_t."""
    import torch
    with torch.cuda.device(device):
        yield ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)
