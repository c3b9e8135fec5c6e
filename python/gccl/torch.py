"""PyTorch DDP communication hooks that compress gradients with gccl.

    import gccl.torch as gt
    state = gt.GcclHookState("topk:ratio=0.01", transport="torch", start_iter=10)
    ddp_model.register_comm_hook(state, gt.gccl_hook)

The hook has the built-in hooks' signature, hook(state, bucket) -> Future[Tensor],
and returns the bucket's average over ranks, bit-identical on every rank. It
never blocks: each bucket's communication runs on the state's worker thread, in
bucket order, and completes the future the hook returned (_hook_worker.py says
why: no Python on the backend's threads, so the process always exits).

transport="torch": gccl only encodes and decodes; torch.distributed moves the
frames over a process group of the state's own (made from `process_group`, so
DDP's collectives never interleave with the hook's), in slots whose size every
rank knows from (spec, count), so no sizes are exchanged (_hook_plans.py):
  - Quantizers (fp16, bf16, uniform, qsgd, sign, terngrad) on float32 buckets:
    gccl's SRA schedule in two collectives (all_to_all_single of chunk frames to
    their owners, all_gather of the owners' re-encoded sums).
  - Sparse codecs (topk, randk) and other dtypes: one all_gather of every rank's
    whole frame, decoded in rank order on every rank.
  Stochastic codecs (uniform, qsgd, terngrad) get a seed per rank and chunk
  unless the spec fixes one (through the codec-only API every process would
  otherwise round alike).

transport="gccl": gcclAllReduceCompressed over a gccl communicator of MPI
processes (Comm.from_mpi(), under mpirun, unless `comm` is given).

CUDA tensors (libgccl built with CUDA) use gccl's GPU codecs on the stream that
was current when DDP called the hook; with transport="torch" frames travel as
CUDA uint8 tensors (use the NCCL backend), with "gccl" the device buffers go to
gcclAllReduceCompressed on a gccl stream tied to that CUDA stream. Either way
the frames are the CPU's, so replicas get the same bits as on the CPU.

Dense instead of compressed: the first start_iter iterations (a warm-up, like
PowerSGD's start_powerSGD_iter: DDP rebuilds its buckets after the first one),
buckets of fewer than min_compress_numel elements, and spec "none". Dense is
DDP's own allreduce on `process_group` (torch: torch's allreduce_hook bit for
bit) or gcclAllReduce (gccl).

Error feedback lives in each bucket's plan (its compressors). A bucket whose
layout changed (DDP rebuilt its buckets: another size, dtype or parameter shapes
at that index) gets a fresh plan, so residuals never land on other parameters.

Checkpoints: state_dict() holds every bucket's residual with its layout.
load_state_dict() gives each back when a bucket of that index and layout next
comes through the hook. A DDP model made afresh runs its first iteration on its
initial buckets and only then rebuilds them into the layout the residuals were
saved in; a bucket whose saved residual does not fit yet goes dense meanwhile
(for at most RESTORE_WAIT iterations, after which unclaimed residuals are
dropped with a warning), so no residual is lost to that first iteration.
"""

import re
import warnings
import weakref

import torch
import torch.distributed as dist

from ._hook_plans import GatherPlan, GcclPlan, SraPlan
from ._hook_worker import HookWorker
from .comm import Comm
from .compressor import Compressor
from .errors import GcclInvalidArgument
from .stream import Stream

TRANSPORTS = ("torch", "gccl")
RESTORE_WAIT = 2  # iterations a loaded residual waits for its bucket layout
# Codecs that go through SRA on the torch transport (the others use all_gather).
_QUANTIZERS = ("fp16", "bf16", "uniform", "qsgd", "sign", "terngrad")
# Codecs whose error feedback is on unless the spec says ef=0 (README, "Codecs").
_EF_BY_DEFAULT = ("sign", "topk")
# Codecs whose rounding is random: through the codec-only API every process is
# rank 0, so each rank's spec gets its own seed unless the user gave one.
_STOCHASTIC = ("uniform", "qsgd", "terngrad")


def _codec(spec):
    return spec.split(":", 1)[0].strip().lower()


def _ef_on(spec):
    m = re.search(r"(?:^|[:,])\s*ef\s*=\s*(\w+)", spec)
    return m.group(1) not in ("0", "false", "no", "off") if m else _codec(spec) in _EF_BY_DEFAULT


def _without_ef(spec):
    codec, _, keys = spec.partition(":")
    kept = [k for k in keys.split(",") if k.strip() and not re.match(r"\s*ef\s*=", k)]
    return codec + ":" + ",".join(kept + ["ef=0"])


def _fingerprint(bucket):
    buf = bucket.buffer()
    return (buf.numel(), str(buf.dtype), tuple(tuple(g.shape) for g in bucket.gradients()))


def _as_fingerprint(fp):
    """A fingerprint back from a checkpoint (lists where tuples were, after some
    serializers) in _fingerprint's form."""
    numel, dtype, shapes = fp
    return (int(numel), str(dtype), tuple(tuple(int(d) for d in s) for s in shapes))


def _on_stream(stream, job):
    """job, run with `stream` (a torch.cuda.Stream, or None on the CPU) current and
    waited for, so that the future's tensor is ready when DDP reads it."""
    if stream is None:
        return job

    def run():
        with torch.cuda.device(stream.device), torch.cuda.stream(stream):
            value = job()
            stream.synchronize()
            return value

    return run


class GcclHookState:
    """What gccl_hook keeps between calls. Construct it on every rank with the same
    arguments, after torch.distributed is initialised. Collective: every process
    of the default group must construct it (transport="torch" makes the hook's
    own process group over the ranks of `process_group`; "gccl" makes the gccl
    communicator from MPI_COMM_WORLD unless `comm` is given). close() it when done
    (or let it be collected)."""

    def __init__(self, spec, transport="torch", process_group=None, comm=None, start_iter=0,
                 min_compress_numel=1024):
        if transport not in TRANSPORTS:
            raise GcclInvalidArgument("invalid argument", "transport must be one of %s, not %r" % (TRANSPORTS, transport))
        if not isinstance(start_iter, int) or start_iter < 0:
            raise GcclInvalidArgument("invalid argument", "start_iter must be an int >= 0")
        if not isinstance(min_compress_numel, int) or min_compress_numel < 0:
            raise GcclInvalidArgument("invalid argument", "min_compress_numel must be an int >= 0")
        Compressor(spec, 1).destroy()  # a bad spec fails here, with gccl's message
        self.spec, self.transport = spec, transport
        self.start_iter, self.min_compress_numel = start_iter, min_compress_numel
        self.process_group = process_group
        self.iter = 0
        self.resets = 0  # plans replaced because a bucket's layout changed
        self.restored = 0  # residuals given back from load_state_dict
        self.bytes_sent = 0  # bytes this rank put on the wire, all buckets, since the start
        self._plans = {}  # bucket index -> (fingerprint, plan)
        self._pending = {}  # bucket index -> (fingerprint, residual) from load_state_dict
        self._pending_until = 0  # iteration after which unclaimed residuals are dropped
        self._streams = {}  # cudaStream_t -> gccl.Stream (transport="gccl", CUDA tensors)
        self._dense_bufs = {}  # bucket index -> the tensor its dense allreduce reads and writes
        self.comm = self._group = None
        if transport == "gccl":
            self.comm = comm if comm is not None else Comm.from_mpi()
            self.rank, self.world_size = self.comm.rank, self.comm.size
        else:
            self.rank = dist.get_rank(process_group)
            self.world_size = dist.get_world_size(process_group)
            ranks = None if process_group is None else dist.get_process_group_ranks(process_group)
            self._group = dist.new_group(ranks=ranks, backend=dist.get_backend(process_group))
        self._worker = HookWorker()
        self._stop_worker = weakref.finalize(self, self._worker.stop)

    def _stream_spec(self, k):
        """The spec of this rank's k-th compressor of a bucket. Through the codec-only
        API every process is rank 0, so a stochastic codec's compressors get seeds of
        their own (rank and k), unless the user's spec fixed one: otherwise every rank
        and chunk would round with the same random numbers."""
        spec = self.spec
        if self.transport != "torch" or _codec(spec) not in _STOCHASTIC or re.search(r"(^|[:,])\s*seed\s*=", spec):
            return spec
        return spec + ("," if ":" in spec else ":") + "seed=%d" % (1 + self.rank * 65536 + k)

    # ---- plans and residuals ------------------------------------------------------------

    def plan(self, bucket):
        """The bucket's plan; a new one (residual zero, or restored from
        load_state_dict) when the bucket's layout is new at its index."""
        fp = _fingerprint(bucket)
        idx = bucket.index()
        old = self._plans.get(idx)
        if old is not None and old[0] == fp:
            return old[1]
        if old is not None:
            old[1].destroy()
            self.resets += 1
        buf = bucket.buffer()
        p, n = self.world_size, fp[0]
        if self.transport == "gccl":
            plan = GcclPlan(self.spec, n, buf.dtype, self.comm)
        elif _codec(self.spec) in _QUANTIZERS and p > 1 and buf.dtype == torch.float32:
            spec_of = lambda k: self._stream_spec(k) if k < p else _without_ef(self._stream_spec(k))
            plan = SraPlan(spec_of, n, self._group, p, self.rank, _ef_on(self.spec), buf.device)
        else:
            plan = GatherPlan(self._stream_spec(0), n, buf.dtype, self._group, p, buf.device)
        pending = self._pending.get(idx)
        if pending is not None and pending[0] == fp:
            plan.set_residual(pending[1])
            del self._pending[idx]
            self.restored += 1
        self._plans[idx] = (fp, plan)
        return plan

    def _awaits_layout(self, bucket):
        """Whether a loaded residual waits for this bucket's index in another layout
        (the bucket then goes dense). Drops what is still unclaimed after RESTORE_WAIT."""
        if not self._pending:
            return False
        if self.iter >= self._pending_until:
            warnings.warn("gccl: %d saved residual(s) matched no bucket layout; dropped" % len(self._pending))
            self._pending.clear()
            return False
        pending = self._pending.get(bucket.index())
        return pending is not None and pending[0] != _fingerprint(bucket)

    def residual(self, index):
        """A copy of bucket `index`'s residual (a CPU torch tensor), or None."""
        entry = self._plans.get(index)
        return None if entry is None else entry[1].get_residual()

    def state_dict(self):
        """Counters and every bucket's residual, for torch.save."""
        residuals = {}
        if _ef_on(self.spec):  # without error feedback there is nothing to keep
            residuals = {i: {"fingerprint": fp, "residual": plan.get_residual()} for i, (fp, plan) in self._plans.items()}
        return {"spec": self.spec, "transport": self.transport, "start_iter": self.start_iter,
                "min_compress_numel": self.min_compress_numel, "iter": self.iter, "residuals": residuals}

    def load_state_dict(self, sd):
        """Restores state_dict(): the iteration counter now, each residual when its
        bucket (same index and layout) next comes through the hook."""
        if sd.get("spec") != self.spec:
            raise GcclInvalidArgument("invalid argument",
                                      "state was saved with spec %r, this state has %r" % (sd.get("spec"), self.spec))
        self.iter = int(sd["iter"])
        for _, plan in self._plans.values():
            plan.destroy()
        self._plans.clear()
        self._pending = {int(i): (_as_fingerprint(e["fingerprint"]), e["residual"]) for i, e in sd["residuals"].items()}
        self._pending_until = self.iter + RESTORE_WAIT

    def close(self):
        """Lets queued buckets finish, then frees the worker thread, the plans, the
        gccl streams and the hook's process group (not a communicator it was given).
        Idempotent."""
        self._stop_worker()
        for _, plan in self._plans.values():
            plan.destroy()
        self._plans.clear()
        for s in self._streams.values():
            s.destroy()
        self._streams.clear()
        self._dense_bufs.clear()
        if self._group is not None and dist.is_initialized():
            try:
                dist.destroy_process_group(self._group)
            except RuntimeError:  # already gone with dist.destroy_process_group()
                pass
        self._group = None

    # ---- the two paths ------------------------------------------------------------------

    def _submit(self, job, buf):
        stream = torch.cuda.current_stream(buf.device) if buf.is_cuda else None
        return self._worker.submit(_on_stream(stream, job))

    def _gccl_stream(self, buf):
        """The gccl stream ordered on buf's current CUDA stream (None on the CPU)."""
        if not buf.is_cuda:
            return None
        cuda = torch.cuda.current_stream(buf.device)
        if cuda.cuda_stream not in self._streams:
            self._streams[cuda.cuda_stream] = Stream(cuda=cuda)
        return self._streams[cuda.cuda_stream]

    def _dense(self, buf, index):
        p = self.world_size
        self.bytes_sent += 2 * (p - 1) * buf.numel() * buf.element_size() // p  # a ring allreduce's share
        if self.transport == "gccl":
            comm, stream = self.comm, self._gccl_stream(buf)

            def job():
                comm.allreduce(buf, buf, op="avg", stream=stream)
                if stream is not None:
                    stream.synchronize()
                return buf

            return self._submit(job, buf)
        # issued here, in DDP's order on its group, as torch's allreduce_hook does,
        # but on a copy the state keeps (see _hook_worker.py)
        own = self._dense_bufs.get(index)
        if own is None or own.shape != buf.shape or own.dtype != buf.dtype or own.device != buf.device:
            own = self._dense_bufs[index] = torch.empty_like(buf)
        torch.div(buf, p, out=own)
        work = dist.all_reduce(own, group=self.process_group, async_op=True)

        def wait():
            work.wait()
            return buf.copy_(own)

        return self._submit(wait, buf)

    def _compressed(self, bucket):
        buf = bucket.buffer()
        plan = self.plan(bucket)
        self.bytes_sent += plan.wire_bytes
        if self.transport == "gccl":
            stream = self._gccl_stream(buf)
            return self._submit(lambda: plan.run(buf, stream), buf)
        return self._submit(lambda: plan.run(buf), buf)


def gccl_hook(state, bucket):
    """DDP communication hook: the bucket's average over ranks, compressed with
    state.spec after state.start_iter dense iterations."""
    buf = bucket.buffer()
    dense = (state.iter < state.start_iter or buf.numel() < state.min_compress_numel
             or _codec(state.spec) == "none" or state._awaits_layout(bucket))
    if bucket.is_last():
        state.iter += 1
    return state._dense(buf, bucket.index()) if dense else state._compressed(bucket)


__all__ = ["GcclHookState", "gccl_hook", "TRANSPORTS"]
