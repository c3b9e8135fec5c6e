"""PyTorch DDP communication hooks that compress gradients with gccl.

    import gccl.torch as gt
    state = gt.GcclHookState("topk:ratio=0.01", transport="torch", start_iter=10)
    ddp_model.register_comm_hook(state, gt.gccl_hook)

The hook has the built-in hooks' signature, hook(state, bucket) -> Future[Tensor],
and returns the bucket's average over ranks, bit-identical on every rank.

transport="torch": gccl only encodes and decodes; torch.distributed moves the
frames (any backend, any launcher), and every rank decodes the same frames in the
same order, so every replica gets the same bits.
  - Sparse codecs (topk, randk), and buckets that are not float32: each rank
    encodes its bucket (error feedback in the bucket's compressor), all_gather
    hands every frame to every rank, and each decode-accumulates them in rank order.
  - Quantizers (fp16, bf16, uniform, qsgd, sign, terngrad) on float32 buckets: the
    SRA schedule of gcclAllReduceCompressed. Rank r owns chunk r of the bucket
    (gccl's split); all_to_all sends each owner the other ranks' frames of its chunk
    (one compressor, so one residual, per chunk); the owner sums them in rank order
    with its own chunk (plus residual) exactly, re-encodes the sum once (that
    error joins its residual, as gccl's EF_RESTAGE), and all_gather hands the
    owners' frames to every rank. A rank sends 2 (p-1) chunk frames, as a ring:
    half of what all_gather of whole frames would at p = 4.

transport="gccl": gcclAllReduceCompressed over a gccl communicator of MPI
processes (Comm.from_mpi(), under mpirun), run on one worker thread per state so
that the backward pass goes on meanwhile; one thread keeps every rank's calls in
DDP's bucket order.

Dense instead of compressed: the first start_iter iterations (a warm-up, like
PowerSGD's start_powerSGD_iter: DDP rebuilds its buckets after the first one),
buckets of fewer than min_compress_numel elements, and spec "none". Dense is
DDP's own allreduce (torch) or gcclAllReduce (gccl).

Error feedback lives in one gccl.Compressor per bucket. A bucket whose layout
changed (DDP rebuilt its buckets: another size, dtype or parameter shapes at that
index) gets a fresh compressor, so residuals never land on other parameters.

Checkpoints: state_dict() holds every bucket's residual with its layout.
load_state_dict() gives each back when a bucket of that index and layout next
comes through the hook. A DDP model made afresh runs its first iteration on its
initial buckets and only then rebuilds them into the layout the residuals were
saved in; a bucket whose saved residual does not fit yet goes dense meanwhile
(for at most RESTORE_WAIT iterations, after which unclaimed residuals are
dropped with a warning), so no residual is lost to that first iteration.
"""

import concurrent.futures
import re
import warnings

import numpy as np
import numpy as np
import torch
import torch.distributed as dist

from .comm import Comm
from .compressor import Compressor, decode_accumulate
from .errors import GcclInvalidArgument

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


def _chunk(n, p, r):
    """Chunk r of n elements over p ranks: gccl's coll_chunk (first n % p one longer)."""
    base, extra = divmod(n, p)
    return r * base + min(r, extra), base + (1 if r < extra else 0)


class _SraBucket:
    """One bucket's compressors for the SRA schedule: one per chunk (each holds its
    chunk's residual; this rank's own chunk is never encoded by it, it stores the
    owner's residual), and the owner's re-encoder without error feedback. Looks like
    a Compressor to the state: residual of the whole bucket, destroy."""

    def __init__(self, spec_of, n, p, me):
        """spec_of(k): the spec of compressor k (chunks 0..p-1, then the owner's)."""
        self.chunks = [_chunk(n, p, r) for r in range(p)]
        self.comps = [Compressor(spec_of(j), length) for j, (_, length) in enumerate(self.chunks)]
        self.owner = Compressor(_without_ef(spec_of(p)), self.chunks[me][1])
        self.ef = _ef_on(spec_of(p))

    def get_residual(self):
        return np.concatenate([c.get_residual() for c in self.comps])

    def set_residual(self, values):
        values = torch.as_tensor(values)
        for (off, length), c in zip(self.chunks, self.comps):
            c.set_residual(values[off:off + length])

    def destroy(self):
        for c in self.comps + [self.owner]:
            c.destroy()


def _fingerprint(bucket):
    buf = bucket.buffer()
    return (buf.numel(), str(buf.dtype), tuple(tuple(g.shape) for g in bucket.gradients()))


def _as_fingerprint(fp):
    """A fingerprint back from a checkpoint (lists where tuples were, after some
    serializers) in _fingerprint's form."""
    numel, dtype, shapes = fp
    return (int(numel), str(dtype), tuple(tuple(int(d) for d in s) for s in shapes))


class GcclHookState:
    """What gccl_hook keeps between calls. Construct it on every rank with the same
    arguments (after torch.distributed is initialised; transport="gccl" also makes
    the gccl communicator from MPI_COMM_WORLD unless `comm` is given)."""

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
        self.resets = 0  # compressors replaced because a bucket's layout changed
        self.restored = 0  # residuals given back from load_state_dict
        self.bytes_sent = 0  # bytes this rank put on the wire, all buckets, since the start
        self._comps = {}  # bucket index -> (fingerprint, Compressor)
        self._pending = {}  # bucket index -> (fingerprint, residual) from load_state_dict
        self._pending_until = 0  # iteration after which unclaimed residuals are dropped
        self._executor = None
        self.comm = None
        if transport == "gccl":
            self.comm = comm if comm is not None else Comm.from_mpi()
            self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="gccl-hook")
            self.rank, self.world_size = self.comm.rank, self.comm.size
        else:
            self.rank = dist.get_rank(process_group)
            self.world_size = dist.get_world_size(process_group)

    def _stream_spec(self, k):
        """The spec of this rank's k-th compressor of a bucket. Through the codec-only
        API every process is rank 0, so a stochastic codec's compressors get seeds of
        their own (rank and k), unless the user's spec fixed one: otherwise every rank
        and chunk would round with the same random numbers."""
        spec = self.spec
        if self.transport != "torch" or _codec(spec) not in _STOCHASTIC or re.search(r"(^|[:,])\s*seed\s*=", spec):
            return spec
        return spec + ("," if ":" in spec else ":") + "seed=%d" % (1 + self.rank * 65536 + k)

    # ---- compressors and residuals ------------------------------------------------------

    def compressor(self, bucket):
        """The bucket's compressor; a new one (residual zero, or restored from
        load_state_dict) when the bucket's layout is new at its index."""
        fp = _fingerprint(bucket)
        idx = bucket.index()
        old = self._comps.get(idx)
        if old is not None and old[0] == fp:
            return old[1]
        if old is not None:
            old[1].destroy()
            self.resets += 1
        if self._uses_sra(bucket):
            c = _SraBucket(self._stream_spec, fp[0], self.world_size, self.rank)
        else:
            c = Compressor(self._stream_spec(0), fp[0], bucket.buffer().dtype)
        pending = self._pending.get(idx)
        if pending is not None and pending[0] == fp:
            c.set_residual(pending[1])
            del self._pending[idx]
            self.restored += 1
        self._comps[idx] = (fp, c)
        return c

    def _uses_sra(self, bucket):
        return (self.transport == "torch" and _codec(self.spec) in _QUANTIZERS and self.world_size > 1
                and bucket.buffer().dtype == torch.float32)

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
        """A copy of bucket `index`'s residual (a torch tensor), or None."""
        entry = self._comps.get(index)
        return None if entry is None else torch.as_tensor(entry[1].get_residual())

    def state_dict(self):
        """Counters and every bucket's residual, for torch.save."""
        residuals = {}
        if _ef_on(self.spec):  # without error feedback there is nothing to keep
            residuals = {i: {"fingerprint": fp, "residual": torch.as_tensor(c.get_residual())}
                         for i, (fp, c) in self._comps.items()}
        return {"spec": self.spec, "transport": self.transport, "start_iter": self.start_iter,
                "min_compress_numel": self.min_compress_numel, "iter": self.iter, "residuals": residuals}

    def load_state_dict(self, sd):
        """Restores state_dict(): the iteration counter now, each residual when its
        bucket (same index and layout) next comes through the hook."""
        if sd.get("spec") != self.spec:
            raise GcclInvalidArgument("invalid argument",
                                      "state was saved with spec %r, this state has %r" % (sd.get("spec"), self.spec))
        self.iter = int(sd["iter"])
        for i, (fp, c) in list(self._comps.items()):
            c.destroy()
            del self._comps[i]
        self._pending = {int(i): (_as_fingerprint(e["fingerprint"]), e["residual"]) for i, e in sd["residuals"].items()}
        self._pending_until = self.iter + RESTORE_WAIT

    def close(self):
        """Frees the compressors and the worker thread (not the communicator it was given)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        for _, c in self._comps.values():
            c.destroy()
        self._comps.clear()

    # ---- the two paths ------------------------------------------------------------------

    def _dense(self, buf):
        p = self.world_size
        self.bytes_sent += 2 * (p - 1) * buf.numel() * buf.element_size() // p  # a ring allreduce's share
        if self.transport == "gccl":
            return self._on_worker(lambda: self.comm.allreduce(buf, buf, op="avg"))
        fut = dist.all_reduce(buf.div_(p), group=self.process_group, async_op=True).get_future()
        return fut.then(lambda f: f.value()[0])

    def _compressed(self, bucket):
        buf = bucket.buffer()
        comp = self.compressor(bucket)
        if self.transport == "gccl":
            self.bytes_sent += 2 * (self.world_size - 1) * comp.encode_bound // self.world_size  # at most
            return self._on_worker(lambda: self.comm.allreduce_compressed(buf, comp, buf, op="avg"))
        if isinstance(comp, _SraBucket):
            return self._sra(buf, comp)
        frame = torch.from_numpy(comp.encode(buf))
        p = self.world_size
        frames, work = self._gather_frames(frame)

        def decode(_):
            total = torch.zeros_like(buf)
            for r in range(p):  # rank order: the same bits on every rank
                decode_accumulate(frames[r].numpy(), total)
            return total.div_(p)

        return work.get_future().then(decode)

    def _gather_frames(self, frame):
        """all_gather of one frame per rank, padded to the longest; returns every
        rank's frame (a view trimmed to its length, filled when the work completes)
        and the async work."""
        p = self.world_size
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(p)]
        dist.all_gather(sizes, torch.tensor([frame.numel()], dtype=torch.int64), group=self.process_group)
        sizes = [int(s) for s in sizes]
        longest = max(sizes)
        send = torch.zeros(longest, dtype=torch.uint8)
        send[:frame.numel()] = frame
        frames = [torch.empty(longest, dtype=torch.uint8) for _ in range(p)]
        self.bytes_sent += (p - 1) * longest  # a ring allgather's share
        work = dist.all_gather(frames, send, group=self.process_group, async_op=True)
        return [f[:n] for f, n in zip(frames, sizes)], work

    def _sra(self, buf, sb):
        p, me = self.world_size, self.rank
        # phase 1: every other owner's chunk encoded once and sent to it
        frames = [torch.from_numpy(sb.comps[j].encode(buf[off:off + n])) if j != me else torch.empty(0, dtype=torch.uint8)
                  for j, (off, n) in enumerate(sb.chunks)]
        sizes = [torch.zeros(p, dtype=torch.int64) for _ in range(p)]
        dist.all_gather(sizes, torch.tensor([f.numel() for f in frames], dtype=torch.int64), group=self.process_group)
        longest = max(int(s.max()) for s in sizes)
        send = torch.zeros(p * longest, dtype=torch.uint8)
        for j, f in enumerate(frames):
            send[j * longest:j * longest + f.numel()] = f
        recv = torch.empty(p * longest, dtype=torch.uint8)
        dist.all_to_all_single(recv, send, group=self.process_group)
        self.bytes_sent += (p - 1) * longest
        # the owner's sum, in rank order; its own chunk (and residual) enters exactly
        off, n = sb.chunks[me]
        total = torch.zeros(n, dtype=torch.float32)
        for r in range(p):
            if r == me:
                own = buf[off:off + n].clone()
                if sb.ef:
                    own += torch.from_numpy(sb.comps[me].get_residual())
                total += own
            else:
                decode_accumulate(recv[r * longest:r * longest + int(sizes[r][me])].numpy(), total)
        owner_frame = sb.owner.encode(total)
        if sb.ef:  # the re-encode's error stays with the owner, for its next sum
            dec = torch.zeros(n, dtype=torch.float32)
            decode_accumulate(owner_frame, dec)
            sb.comps[me].set_residual(total - dec)
        # phase 2: every owner's frame to every rank, decoded chunk by chunk
        gathered, work = self._gather_frames(torch.from_numpy(owner_frame))

        def decode(_):
            out = torch.zeros_like(buf)
            for r, (o, m) in enumerate(sb.chunks):
                decode_accumulate(gathered[r].numpy(), out[o:o + m])
            return out.div_(p)

        return work.get_future().then(decode)

    def _on_worker(self, fn):
        fut = torch.futures.Future()

        def run():
            try:
                fut.set_result(fn())
            except Exception as e:  # the training loop sees it when it waits on the future
                fut.set_exception(e)

        self._executor.submit(run)
        return fut


def gccl_hook(state, bucket):
    """DDP communication hook: the bucket's average over ranks, compressed with
    state.spec after state.start_iter dense iterations."""
    buf = bucket.buffer()
    dense = (state.iter < state.start_iter or buf.numel() < state.min_compress_numel
             or _codec(state.spec) == "none" or state._awaits_layout(bucket))
    if bucket.is_last():
        state.iter += 1
    return state._dense(buf) if dense else state._compressed(bucket)


__all__ = ["GcclHookState", "gccl_hook", "TRANSPORTS"]
