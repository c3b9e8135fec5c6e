"""Numpy arrays and torch tensors as (address, element count, gccl datatype).

Contiguous host memory is accepted everywhere; contiguous CUDA tensors where the
C API takes device memory (collectives, encode, decode) in builds with CUDA.
Anything else is GcclInvalidArgument here, before any rank enters a collective
(a rank that raised would otherwise leave its peers waiting for their timeout)."""

import sys

import numpy as np

from .errors import GcclInvalidArgument, GcclInvalidUsage

# gcclDataType_t values (gccl.h).
INT8, UINT8, INT32, UINT32, INT64, UINT64, FLOAT16, FLOAT32, FLOAT64, BFLOAT16 = range(10)
DTYPE_NAMES = {INT8: "int8", UINT8: "uint8", INT32: "int32", UINT32: "uint32", INT64: "int64", UINT64: "uint64",
               FLOAT16: "float16", FLOAT32: "float32", FLOAT64: "float64", BFLOAT16: "bfloat16"}
_BY_NAME = {v: k for k, v in DTYPE_NAMES.items()}
_SIZES = {INT8: 1, UINT8: 1, INT32: 4, UINT32: 4, INT64: 8, UINT64: 8, FLOAT16: 2, FLOAT32: 4, FLOAT64: 8,
          BFLOAT16: 2}

_NUMPY = {np.dtype(np.int8): INT8, np.dtype(np.uint8): UINT8, np.dtype(np.int32): INT32,
          np.dtype(np.uint32): UINT32, np.dtype(np.int64): INT64, np.dtype(np.uint64): UINT64,
          np.dtype(np.float16): FLOAT16, np.dtype(np.float32): FLOAT32, np.dtype(np.float64): FLOAT64}


def _bad(message):
    return GcclInvalidArgument("invalid argument", message)


def _torch_dtypes():
    import torch
    return {torch.int8: INT8, torch.uint8: UINT8, torch.int32: INT32, torch.int64: INT64, torch.float16: FLOAT16,
            torch.float32: FLOAT32, torch.float64: FLOAT64, torch.bfloat16: BFLOAT16}


def is_torch(x):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def dtype_code(dtype):
    """A gccl datatype from a numpy dtype, a torch dtype, a name ("float32") or a code."""
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        if dtype in _SIZES:
            return dtype
        raise _bad("datatype %d is not a gccl datatype (0..9)" % dtype)
    if isinstance(dtype, str) and dtype in _BY_NAME:
        return _BY_NAME[dtype]
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dtype, torch.dtype):
        code = _torch_dtypes().get(dtype)
        if code is None:
            raise _bad("torch dtype %s has no gccl datatype" % dtype)
        return code
    try:
        code = _NUMPY.get(np.dtype(dtype))
    except TypeError:
        code = None
    if code is None:
        raise _bad("dtype %r has no gccl datatype" % (dtype,))
    return code


def element_size(code):
    return _SIZES[code]


class Buffer:
    """A view of an array's memory: ptr, count (elements), dtype (gccl code), and
    device: None for host memory, the torch.device of a CUDA tensor."""

    __slots__ = ("obj", "ptr", "count", "dtype", "device")

    def __init__(self, obj, ptr, count, dtype, device=None):
        self.obj, self.ptr, self.count, self.dtype, self.device = obj, ptr, count, dtype, device

    @property
    def nbytes(self):
        return self.count * _SIZES[self.dtype]


def as_buffer(x, what="buffer", writable=False, device_ok=False):
    """The Buffer of a numpy array or a contiguous torch tensor: on the CPU, or on a
    CUDA device where device_ok (the C call takes device memory)."""
    if is_torch(x):
        device = None
        if x.device.type == "cuda" and device_ok:
            from ._lib import HAVE_CUDA
            if not HAVE_CUDA:
                raise GcclInvalidUsage("invalid usage", "%s is a CUDA tensor but this libgccl was built without CUDA "
                                       "(GCCL_WITH_CUDA)" % what)
            device = x.device
        elif x.device.type != "cpu":
            raise _bad("%s is a tensor on %s; this call takes %s" % (what, x.device,
                                                                     "CPU or CUDA tensors" if device_ok else "CPU tensors"))
        if not x.is_contiguous():
            raise _bad("%s is not contiguous (call .contiguous())" % what)
        code = _torch_dtypes().get(x.dtype)
        if code is None:
            raise _bad("%s has dtype %s, which gccl has no datatype for" % (what, x.dtype))
        return Buffer(x, x.data_ptr() if x.numel() else None, x.numel(), code, device)
    if isinstance(x, np.ndarray):
        if not x.flags.c_contiguous:
            raise _bad("%s is not C-contiguous (use np.ascontiguousarray)" % what)
        if writable and not x.flags.writeable:
            raise _bad("%s is read-only" % what)
        code = _NUMPY.get(x.dtype)
        if code is None:
            raise _bad("%s has dtype %s, which gccl has no datatype for" % (what, x.dtype))
        return Buffer(x, x.ctypes.data if x.size else None, x.size, code)
    raise _bad("%s must be a numpy array or a torch tensor, not %s" % (what, type(x).__name__))


def cuda_device(*buffers):
    """The CUDA device of the first device buffer among buffers, else None; buffers
    on two different devices are refused."""
    devices = {b.device for b in buffers if b is not None and b.device is not None}
    if len(devices) > 1:
        raise _bad("buffers on different devices: %s" % ", ".join(sorted(str(d) for d in devices)))
    return devices.pop() if devices else None


def empty_like(x, count):
    """A new 1-D array of `count` elements of x's kind (numpy or torch), dtype and device."""
    if is_torch(x):
        import torch
        return torch.empty(count, dtype=x.dtype, device=x.device)
    return np.empty(count, dtype=x.dtype)
