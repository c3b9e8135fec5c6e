"""Loading libgccl and declaring its C functions for ctypes.

The library is looked for, in order: the file named by GCCL_LIBRARY (final: a
wrong path is an ImportError, not a fall back); libgccl.so in this package's
directory (`pip install ./python` and its wheels build it with CMake and put it
there); the build directories of the source tree this package sits in
(build-release, build); the system's library path. ctypes.CDLL releases the GIL
around every foreign call, so collectives called from a hook's worker thread let
Python run on.
"""

import ctypes
import ctypes.util
import os

from .errors import raise_for

_c_int_p = ctypes.POINTER(ctypes.c_int)
_c_size_p = ctypes.POINTER(ctypes.c_size_t)

GCCL_UNIQUE_ID_BYTES = 128


class UniqueIdStruct(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * GCCL_UNIQUE_ID_BYTES)]


def _candidates():
    env = os.environ.get("GCCL_LIBRARY")
    if env:
        # An explicit choice is final: a wrong path must not silently load another library.
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    found = [os.path.join(here, "libgccl.so")]
    root = os.path.dirname(os.path.dirname(here))  # python/gccl -> repository root
    for build in ("build-release", "build"):
        found.append(os.path.join(root, build, "libgccl.so"))
    system = ctypes.util.find_library("gccl")
    if system:
        found.append(system)
    return found


def _load():
    tried = []
    for path in _candidates():
        if os.environ.get("GCCL_LIBRARY") or os.path.exists(path) or not os.path.dirname(path):
            try:
                return ctypes.CDLL(path), path
            except OSError as e:
                tried.append("%s (%s)" % (path, e))
        else:
            tried.append("%s (no such file)" % path)
    raise ImportError(
        "gccl: libgccl not found; build it (cmake) or set GCCL_LIBRARY to its path. Tried: " + "; ".join(tried)
    )


lib, path = _load()

# (name, restype, argtypes). Pointers to user buffers are c_void_p; handles are c_void_p.
_vp = ctypes.c_void_p
_sz = ctypes.c_size_t
_int = ctypes.c_int
_PROTOTYPES = [
    ("gcclGetErrorString", ctypes.c_char_p, [_int]),
    ("gcclGetLastError", ctypes.c_char_p, [_vp]),
    ("gcclGetVersion", _int, [_c_int_p]),
    ("gcclGetUniqueId", _int, [ctypes.POINTER(UniqueIdStruct)]),
    ("gcclCommInitRank", _int, [ctypes.POINTER(_vp), _int, UniqueIdStruct, _int]),
    ("gcclCommInitAll", _int, [ctypes.POINTER(_vp), _int]),
    ("gcclCommDestroy", _int, [_vp]),
    ("gcclCommAbort", _int, [_vp]),
    ("gcclCommCount", _int, [_vp, _c_int_p]),
    ("gcclCommUserRank", _int, [_vp, _c_int_p]),
    ("gcclCommGetAsyncError", _int, [_vp, _c_int_p]),
    ("gcclAllReduce", _int, [_vp, _vp, _sz, _int, _int, _vp, _vp]),
    ("gcclAllGather", _int, [_vp, _vp, _sz, _int, _vp, _vp]),
    ("gcclReduceScatter", _int, [_vp, _vp, _sz, _int, _int, _vp, _vp]),
    ("gcclBroadcast", _int, [_vp, _vp, _sz, _int, _int, _vp, _vp]),
    ("gcclReduce", _int, [_vp, _vp, _sz, _int, _int, _int, _vp, _vp]),
    ("gcclCompressorCreate", _int, [ctypes.POINTER(_vp), ctypes.c_char_p, _sz, _int]),
    ("gcclCompressorDestroy", _int, [_vp]),
    ("gcclCompressorGetResidual", _int, [_vp, _vp]),
    ("gcclCompressorSetResidual", _int, [_vp, _vp]),
    ("gcclCompressorGetState", _int, [_vp, _vp, _sz, _c_size_p]),
    ("gcclCompressorSetState", _int, [_vp, _vp, _sz]),
    ("gcclPowerSgdShape", _int, [_vp, _c_size_p, _c_size_p, _c_size_p]),
    ("gcclPowerSgdComputeP", _int, [_vp, _vp, _vp]),
    ("gcclPowerSgdComputeQ", _int, [_vp, _vp, _vp]),
    ("gcclPowerSgdComputeOutput", _int, [_vp, _vp, _vp, _int, _int]),
    ("gcclAllReduceCompressed", _int, [_vp, _vp, _sz, _int, _int, _vp, _vp, _vp]),
    ("gcclAllGatherCompressed", _int, [_vp, _vp, _sz, _int, _vp, _vp, _vp]),
    ("gcclReduceScatterCompressed", _int, [_vp, _vp, _sz, _int, _int, _vp, _vp, _vp]),
    ("gcclEncodeBound", _int, [_vp, _c_size_p]),
    ("gcclEncodeBoundNonFinite", _int, [_vp, _sz, _c_size_p]),
    ("gcclStreamCreate", _int, [ctypes.POINTER(_vp)]),
    ("gcclStreamSynchronize", _int, [_vp]),
    ("gcclStreamDestroy", _int, [_vp]),
    ("gcclEncode", _int, [_vp, _vp, _vp, _sz, _c_size_p]),
    ("gcclDecodeAccumulate", _int, [_vp, _sz, _vp, _sz, _int]),
]
for _name, _res, _args in _PROTOTYPES:
    _f = getattr(lib, _name)
    _f.restype = _res
    _f.argtypes = _args

# In builds with MPI only.
HAVE_MPI = hasattr(lib, "gcclCommInitMpi")
if HAVE_MPI:
    lib.gcclCommInitMpi.restype = _int
    lib.gcclCommInitMpi.argtypes = [ctypes.POINTER(_vp), _vp]

# In builds with CUDA only (gccl_cuda.h): device buffers, and the codec and
# streams on a CUDA stream of the caller's (cudaStream_t as a pointer).
HAVE_CUDA = hasattr(lib, "gcclEncodeCuda")
if HAVE_CUDA:
    for _name, _args in [("gcclEncodeCuda", [_vp, _vp, _vp, _sz, _c_size_p, _vp]),
                         ("gcclDecodeAccumulateCuda", [_vp, _sz, _vp, _sz, _int, _vp]),
                         ("gcclStreamCreateCuda", [ctypes.POINTER(_vp), _vp])]:
        getattr(lib, _name).restype = _int
        getattr(lib, _name).argtypes = _args


def last_error(comm_handle=None):
    """gcclGetLastError's text for a communicator, or for the calling thread."""
    text = lib.gcclGetLastError(comm_handle)
    return text.decode("utf-8", "replace") if text else ""


def check(code, comm_handle=None):
    """Raises the GcclError subclass of a failed result, with gcclGetLastError's text
    (the communicator's when there is one and it has a text, else the thread's)."""
    if code == 0:
        return
    text = last_error(comm_handle) if comm_handle else ""
    if not text:
        text = last_error(None)
    name = lib.gcclGetErrorString(code)
    raise_for(code, name.decode() if name else "unknown result", text)
