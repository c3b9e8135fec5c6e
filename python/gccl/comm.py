"""Communicators and their collectives on numpy arrays and torch tensors.

A Comm is one rank of a gccl communicator: thread ranks of this process
(Comm.init_rank from one thread per rank, Comm.init_all from one thread), or MPI
processes (Comm.from_mpi, under mpirun). Collectives block the calling thread
(not the interpreter: the GIL is released) and write into `recv`, allocated when
not given; passing the same array as send and recv runs in place. With
`stream=` (a gccl.Stream) a call is queued instead and done at the stream's
synchronize(). Buffers may be CUDA tensors in builds with CUDA (gccl_cuda.h:
ordered on the gccl stream's CUDA stream, else the legacy default stream).
"""

import atexit
import ctypes
import threading
import weakref

from . import _buffers as B
from ._lib import HAVE_MPI, UniqueIdStruct, check, lib
from .errors import GcclInvalidArgument, GcclInvalidUsage

OPS = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}


def _op_code(op):
    if isinstance(op, str) and op in OPS:
        return OPS[op]
    if isinstance(op, int) and not isinstance(op, bool) and 0 <= op < len(OPS):
        return op
    raise GcclInvalidArgument("invalid argument", "op %r is not one of %s" % (op, ", ".join(OPS)))


class UniqueId:
    """The identifier that ranks of one thread communicator share (128 bytes)."""

    def __init__(self, raw=None):
        self._s = UniqueIdStruct()
        if raw is None:
            check(lib.gcclGetUniqueId(ctypes.byref(self._s)))
        else:
            raw = bytes(raw)
            if len(raw) != ctypes.sizeof(self._s):
                raise GcclInvalidArgument("invalid argument",
                                          "a unique id is %d bytes, not %d" % (ctypes.sizeof(self._s), len(raw)))
            ctypes.memmove(ctypes.byref(self._s), raw, len(raw))

    def __bytes__(self):
        return ctypes.string_at(ctypes.byref(self._s), ctypes.sizeof(self._s))


def get_unique_id():
    return UniqueId()


# MPI communicators must be destroyed before MPI_Finalize, which mpi4py calls at
# exit; registered on the first Comm.from_mpi (after mpi4py is loaded), atexit
# runs it first.
_live_mpi = weakref.WeakSet()
_exit_hook = []  # [True] once _destroy_live_mpi is registered


def _destroy_live_mpi():
    for c in list(_live_mpi):
        c.destroy()


class Comm:
    """One rank of a gccl communicator. Destroy it (destroy(), or `with`) when done."""

    def __init__(self, handle, mpi=False):
        self._h = ctypes.c_void_p(handle)
        self._lock = threading.Lock()
        n, r = ctypes.c_int(), ctypes.c_int()
        check(lib.gcclCommCount(self._h, ctypes.byref(n)), self._h)
        check(lib.gcclCommUserRank(self._h, ctypes.byref(r)), self._h)
        self.size, self.rank, self.is_mpi = n.value, r.value, mpi

    # ---- creation --------------------------------------------------------------------

    @classmethod
    def init_rank(cls, nranks, uid, rank):
        """Rank `rank` of `nranks` thread ranks that all pass the same UniqueId."""
        if not isinstance(uid, UniqueId):
            raise GcclInvalidArgument("invalid argument", "uid must be a gccl.UniqueId (gccl.get_unique_id())")
        h = ctypes.c_void_p()
        check(lib.gcclCommInitRank(ctypes.byref(h), int(nranks), uid._s, int(rank)))
        return cls(h.value)

    @classmethod
    def init_all(cls, nranks):
        """All nranks thread ranks at once, from one thread (drive them with threads)."""
        if not isinstance(nranks, int) or nranks < 1:
            raise GcclInvalidArgument("invalid argument", "nranks must be an int >= 1, not %r" % (nranks,))
        hs = (ctypes.c_void_p * nranks)()
        check(lib.gcclCommInitAll(hs, nranks))
        return [cls(h) for h in hs]

    @classmethod
    def from_mpi(cls, mpi_comm=None):
        """Every rank of an mpi4py communicator (default COMM_WORLD); collective."""
        if not HAVE_MPI:
            raise GcclInvalidUsage("invalid usage", "this libgccl was built without MPI (GCCL_WITH_MPI)")
        from mpi4py import MPI
        if mpi_comm is None:
            mpi_comm = MPI.COMM_WORLD
        if not isinstance(mpi_comm, MPI.Comm):
            raise GcclInvalidArgument("invalid argument", "mpi_comm must be an mpi4py communicator")
        h = ctypes.c_void_p()
        check(lib.gcclCommInitMpi(ctypes.byref(h), ctypes.c_void_p(MPI._handleof(mpi_comm))))
        c = cls(h.value, mpi=True)
        if not _exit_hook:
            atexit.register(_destroy_live_mpi)
            _exit_hook.append(True)
        _live_mpi.add(c)
        return c

    # ---- lifetime --------------------------------------------------------------------

    def _handle(self):
        if self._h.value is None:
            raise GcclInvalidUsage("invalid usage", "the communicator was destroyed")
        return self._h

    def _take_handle(self):
        """The handle, once: later calls get None (destroy and abort are idempotent)."""
        with self._lock:
            h, self._h = self._h, ctypes.c_void_p()
        return h if h.value is not None else None

    def destroy(self):
        """Frees this rank's communicator (not collective). Idempotent."""
        h = self._take_handle()
        if h is not None:
            check(lib.gcclCommDestroy(h))

    def abort(self):
        """Stops every rank of the communicator (blocked calls raise GcclRemoteError) and frees it."""
        h = self._take_handle()
        if h is not None:
            check(lib.gcclCommAbort(h))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()

    def async_error(self):
        """The error that put the communicator in an error state, or None."""
        e = ctypes.c_int()
        check(lib.gcclCommGetAsyncError(self._handle(), ctypes.byref(e)), self._h)
        return e.value or None

    def _run(self, fn, *args, stream=None, keep=()):
        """fn(*args, comm, stream); a queued call's buffers (keep) are held by the stream."""
        h = self._handle()
        if stream is None:
            check(fn(*args, h, None), h)
            return
        from .stream import Stream
        if not isinstance(stream, Stream):
            raise GcclInvalidArgument("invalid argument", "stream must be a gccl.Stream")
        stream.keep(*keep)
        check(fn(*args, h, stream._handle()), h)

    # ---- dense -------------------------------------------------------------------------

    def allreduce(self, send, recv=None, op="sum", stream=None):
        """recv[i] = op over ranks of send[i]; returns recv."""
        s, recv, r = _pair(send, recv, lambda b: b.count)
        _same(s, r, s.count)
        self._run(lib.gcclAllReduce, s.ptr, r.ptr, s.count, s.dtype, _op_code(op), stream=stream, keep=(send, recv))
        return recv

    def allgather(self, send, recv=None, stream=None):
        """recv[r*n:(r+1)*n] = rank r's send (n = send's length); returns recv."""
        s, recv, r = _pair(send, recv, lambda b: b.count * self.size)
        _same(s, r, s.count * self.size)
        self._run(lib.gcclAllGather, s.ptr, r.ptr, s.count, s.dtype, stream=stream, keep=(send, recv))
        return recv

    def reducescatter(self, send, recv=None, op="sum", stream=None):
        """recv = op over ranks of send[rank*n:(rank+1)*n], n = len(send) / size."""
        n = _share(send, self.size)
        s, recv, r = _pair(send, recv, lambda b: n)
        _same(s, r, n)
        self._run(lib.gcclReduceScatter, s.ptr, r.ptr, n, s.dtype, _op_code(op), stream=stream, keep=(send, recv))
        return recv

    def broadcast(self, buf, root=0, stream=None):
        """Root's buf is copied into every rank's buf, in place; returns buf."""
        b = B.as_buffer(buf, "buf", writable=True, device_ok=True)
        self._run(lib.gcclBroadcast, b.ptr, b.ptr, b.count, b.dtype, int(root), stream=stream, keep=(buf,))
        return buf

    def reduce(self, send, recv=None, op="sum", root=0, stream=None):
        """On root, recv = op over ranks of send (recv is allocated on root only)."""
        s = B.as_buffer(send, "send", device_ok=True)
        if recv is None and self.rank == root:
            recv = B.empty_like(send, s.count)
        r = B.as_buffer(recv, "recv", writable=True, device_ok=True) if recv is not None else None
        if r is not None:
            _same(s, r, s.count)
        self._run(lib.gcclReduce, s.ptr, r.ptr if r else None, s.count, s.dtype, _op_code(op), int(root),
                  stream=stream, keep=(send, recv))
        return recv

    # ---- compressed ----------------------------------------------------------------------

    def allreduce_compressed(self, send, compressor, recv=None, op="sum", stream=None):
        """The compressed allreduce (sum or avg) with this rank's compressor; returns recv."""
        s, recv, r = _pair(send, recv, lambda b: b.count)
        _same(s, r, s.count)
        self._run(lib.gcclAllReduceCompressed, s.ptr, r.ptr, s.count, s.dtype, _op_code(op), _comp(compressor),
                  stream=stream, keep=(send, recv, compressor))
        return recv

    def allgather_compressed(self, send, compressor, recv=None, stream=None):
        s, recv, r = _pair(send, recv, lambda b: b.count * self.size)
        _same(s, r, s.count * self.size)
        self._run(lib.gcclAllGatherCompressed, s.ptr, r.ptr, s.count, s.dtype, _comp(compressor), stream=stream,
                  keep=(send, recv, compressor))
        return recv

    def reducescatter_compressed(self, send, compressor, recv=None, op="sum", stream=None):
        n = _share(send, self.size)
        s, recv, r = _pair(send, recv, lambda b: n)
        _same(s, r, n)
        self._run(lib.gcclReduceScatterCompressed, s.ptr, r.ptr, n, s.dtype, _op_code(op), _comp(compressor),
                  stream=stream, keep=(send, recv, compressor))
        return recv


def _comp(compressor):
    from .compressor import Compressor
    if not isinstance(compressor, Compressor):
        raise GcclInvalidArgument("invalid argument", "compressor must be a gccl.Compressor")
    return compressor._handle()


def _pair(send, recv, recv_count):
    s = B.as_buffer(send, "send", device_ok=True)
    if recv is None:
        recv = B.empty_like(send, recv_count(s))
    return s, recv, B.as_buffer(recv, "recv", writable=True, device_ok=True)


def _same(s, r, count):
    """recv must have send's datatype and `count` elements (gccl cannot see lengths)."""
    if r.dtype != s.dtype:
        raise GcclInvalidArgument("invalid argument", "recv is %s but send is %s" %
                                  (B.DTYPE_NAMES[r.dtype], B.DTYPE_NAMES[s.dtype]))
    if r.count != count:
        raise GcclInvalidArgument("invalid argument", "recv holds %d elements, the call writes %d" % (r.count, count))


def _share(send, size):
    n = B.as_buffer(send, "send", device_ok=True).count
    if n % size:
        raise GcclInvalidArgument("invalid argument",
                                  "send holds %d elements, not a multiple of the %d ranks" % (n, size))
    return n // size
