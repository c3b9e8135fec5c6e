"""gccl: gradient-compressed collective communication, from Python.

A ctypes binding of libgccl (numpy arrays, CPU torch tensors, and CUDA tensors in
builds with CUDA):

    import gccl
    uid = gccl.get_unique_id()
    comm = gccl.Comm.init_rank(4, uid, rank)          # thread ranks, or
    comm = gccl.Comm.from_mpi()                       # under mpirun
    comm.allreduce(x)                                 # in place
    c = gccl.Compressor("topk:ratio=0.01", x.size, x.dtype)
    comm.allreduce_compressed(x, c, op="avg")

gccl.torch holds the DDP communication hooks.
"""

from ._lib import HAVE_CUDA, HAVE_MPI, path as library_path
from ._lib import lib as _lib
from .comm import Comm, UniqueId, get_unique_id
from .compressor import Compressor, decode_accumulate
from .stream import Stream
from .errors import (GcclCorruptData, GcclError, GcclInProgress, GcclInternalError, GcclInvalidArgument,
                     GcclInvalidUsage, GcclRemoteError, GcclSystemError, GcclTimeout)


def version():
    """libgccl's GCCL_VERSION_CODE (major*10000 + minor*100 + patch)."""
    import ctypes
    from ._lib import check
    v = ctypes.c_int()
    check(_lib.gcclGetVersion(ctypes.byref(v)))
    return v.value


__all__ = ["Comm", "UniqueId", "get_unique_id", "Compressor", "decode_accumulate", "Stream", "version", "HAVE_MPI",
           "HAVE_CUDA",
           "library_path", "GcclError", "GcclSystemError", "GcclInternalError", "GcclInvalidArgument",
           "GcclInvalidUsage", "GcclRemoteError", "GcclInProgress", "GcclTimeout", "GcclCorruptData"]
