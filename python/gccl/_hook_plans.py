"""How gccl_hook moves one bucket (transport="torch" and "gccl"): a plan per bucket
layout, made once and run on the hook's worker thread (_hook_worker.py).

Frames travel over torch.distributed in slots of a size every rank knows from
(spec, count) alone, so no sizes are exchanged:

    slot = [ frame | padding | trailer: the frame's length, int64 ]

sized for the codec's frame with a few non-finite values (gcclEncodeBoundNonFinite:
four, plus one per 4 KiB of the finite frame, about 0.3% more bytes; quantizers'
frames of finite inputs fill the rest exactly). A frame with more non-finite
values does not fit: its slot carries the trailer OVERFLOW instead, and every
rank sets the elements that frame stood for to NaN. So a NaN or inf on any rank
still comes out non-finite at its index on every rank (and at the other indices
of that chunk: the step is lost either way, and AMP's loss scaler skips it).

Plans:
  SraPlan     quantizers on float32 buckets: gccl's SRA schedule in two
              collectives. Rank r owns chunk r (gccl's coll_chunk split).
              all_to_all_single: each rank's frame of chunk j to owner j (one
              compressor, so one residual, per chunk). The owner sums the p - 1
              frames and its own chunk plus residual exactly, in rank order, and
              re-encodes the sum once (that error joins its residual, as gccl's
              EF_RESTAGE). all_gather: the owners' frames to every rank, which
              decodes them all, its own included: every rank gets the same bits.
              2 (p - 1) chunk slots sent per rank, as a ring.
  GatherPlan  the rest (top-k, random-k, other dtypes): one all_gather of every
              rank's whole frame, decoded in rank order on every rank.
  PowerSgdPlan  powersgd (transport="torch"): gccl's three steps on this rank
              (gcclPowerSgdCompute{P,Q,Output}), the factors P and Q summed
              between them by two all_reduce of (rows + cols) rank floats. gloo's
              allreduce gives every rank the same bits, so every rank's output
              is the same too. No slots: the factors' sizes are the spec's.
  PowerSgdTensorsPlan  powersgd with a matrix per parameter tensor, as PyTorch's
              powerSGD_hook (GcclHookState(powersgd_per_tensor=True)): a compressor
              per weight of at least two dimensions (rows = its first dimension),
              whose P's lie side by side in one tensor and are summed by one
              all_reduce, with the dense parameters (biases, and matrices too
              small to gain) beside them; then the Q's in another. Two
              collectives per bucket, whatever the number of tensors.
  GcclPlan    transport="gccl": gcclAllReduceCompressed on a gccl communicator.
"""

import re

import torch
import torch.distributed as dist

from .compressor import Compressor, decode_accumulate
from .errors import GcclCorruptData

TRAILER_BYTES = 8
OVERFLOW = -1  # trailer of a slot whose frame did not fit


def chunk(n, p, r):
    """Chunk r of n elements over p ranks: gccl's coll_chunk (the first n % p one longer)."""
    base, extra = divmod(n, p)
    return r * base + min(r, extra), base + (1 if r < extra else 0)


def nonfinite_room(comp):
    """Non-finite values a slot's frame may carry in its exceptions list."""
    return 4 + comp.encode_bound_nonfinite(0) // 4096


def slot_bytes(comps):
    """Bytes of a slot that holds any of comps' frames (with nonfinite_room
    non-finite values) and the trailer, rounded up to 8 (the trailer's alignment)."""
    need = max(c.encode_bound_nonfinite(nonfinite_room(c)) for c in comps) + TRAILER_BYTES
    return -(-need // 8) * 8


def seal(frame, slot):
    """Puts an encoded frame (a uint8 tensor) and its trailer into slot."""
    n = frame.numel()
    if n <= slot.numel() - TRAILER_BYTES:
        slot[:n].copy_(frame)
    else:
        n = OVERFLOW
    slot[-TRAILER_BYTES:].view(torch.int64).fill_(n)


def lengths(slots):
    """The trailers of a (p, slot) uint8 tensor, as ints (one copy from a device)."""
    return slots[:, -TRAILER_BYTES:].contiguous().view(torch.int64).flatten().tolist()


def add_frame(slot, length, dst, sender):
    """dst += the frame in slot (length from its trailer); NaN for an OVERFLOW slot."""
    if length == OVERFLOW:
        dst.add_(float("nan"))
    elif 0 < length <= slot.numel() - TRAILER_BYTES:
        decode_accumulate(slot[:length], dst)
    else:
        raise GcclCorruptData("corrupt data", "rank %d's slot says its frame has %d bytes, outside (0, %d]" %
                              (sender, length, slot.numel() - TRAILER_BYTES))


def _bytes(n, device):
    return torch.zeros(n, dtype=torch.uint8, device=device)


class SraPlan:
    """A float32 bucket of n elements, quantized, over the p ranks of group. spec_of(k)
    is the spec of this rank's k-th compressor: chunks 0..p-1, then (k = p) the
    owner's re-encoder, without error feedback. ef: whether the chunks' have it."""

    def __init__(self, spec_of, n, group, p, me, ef, device):
        self.group, self.p, self.me, self.ef = group, p, me, ef
        self.chunks = [chunk(n, p, r) for r in range(p)]
        self.comps = {j: Compressor(spec_of(j), length) for j, (_, length) in enumerate(self.chunks) if j != me}
        own = self.chunks[me][1]
        self.owner = Compressor(spec_of(p), own)  # its error goes to own_residual
        self.own_residual = torch.zeros(own, device=device)
        # every chunk's compressor is here or on its owner: the same slot on every rank
        self.slot = slot_bytes(list(self.comps.values()) + [self.owner])
        self.send, self.recv = _bytes(p * self.slot, device), _bytes(p * self.slot, device)
        self.gsend, self.grecv = _bytes(self.slot, device), _bytes(p * self.slot, device)
        self.scratch = _bytes(max([c.encode_bound for c in self.comps.values()] + [self.owner.encode_bound]), device)
        self.total = torch.empty(own, device=device)
        self.tmp = torch.empty(own, device=device)
        self.wire_bytes = 2 * (p - 1) * self.slot

    def run(self, buf):
        p, me = self.p, self.me
        send, recv, grecv = self.send.view(p, -1), self.recv.view(p, -1), self.grecv.view(p, -1)
        # phase 1: each other owner's chunk encoded once, into its slot
        for j, c in self.comps.items():
            off, n = self.chunks[j]
            seal(c.encode(buf[off:off + n], out=self.scratch), send[j])
        dist.all_to_all_single(self.recv, self.send, group=self.group)
        got = lengths(recv)
        # the owner's sum, in rank order; its own chunk and residual enter exactly
        off, n = self.chunks[me]
        total = self.total
        total.zero_()
        for r in range(p):
            if r == me:
                torch.add(buf[off:off + n], self.own_residual, out=self.tmp)
                total.add_(self.tmp)
            else:
                add_frame(recv[r], got[r], total, r)
        seal(self.owner.encode(total, out=self.scratch), self.gsend)
        if self.ef:  # the re-encode's error stays with the owner, for its next sum
            self.tmp.zero_()
            add_frame(self.gsend, lengths(self.gsend.view(1, -1))[0], self.tmp, me)
            torch.sub(total, self.tmp, out=self.own_residual)
            self.own_residual.nan_to_num_(0.0, 0.0, 0.0)  # none at non-finite sums, as gccl's codecs keep
        # phase 2: every owner's frame to every rank, decoded chunk by chunk
        dist.all_gather(list(grecv), self.gsend, group=self.group)
        got = lengths(grecv)
        buf.zero_()
        for r, (o, m) in enumerate(self.chunks):
            add_frame(grecv[r], got[r], buf[o:o + m], r)
        return buf.div_(p)

    def get_residual(self):
        parts = [self.own_residual.cpu() if j == self.me else torch.from_numpy(self.comps[j].get_residual())
                 for j in range(self.p)]
        return torch.cat(parts)

    def set_residual(self, values):
        values = torch.as_tensor(values)
        for j, (off, n) in enumerate(self.chunks):
            if j == self.me:
                self.own_residual.copy_(values[off:off + n])
            else:
                self.comps[j].set_residual(values[off:off + n])

    def destroy(self):
        for c in list(self.comps.values()) + [self.owner]:
            c.destroy()


class _OneCompressor:
    """A plan whose residual and state are one compressor's."""

    def get_residual(self):
        return torch.as_tensor(self.comp.get_residual())

    def set_residual(self, values):
        self.comp.set_residual(values)

    def get_state(self):
        """What the compressor carries besides its residual (powersgd's Q), or None."""
        state = self.comp.get_state()
        return torch.from_numpy(state) if state.size else None

    def set_state(self, values):
        self.comp.set_state(values)

    def destroy(self):
        self.comp.destroy()


class GatherPlan(_OneCompressor):
    """A bucket of n elements of dtype: every rank's whole frame to every rank."""

    def __init__(self, spec, n, dtype, group, p, device):
        self.group, self.p = group, p
        self.comp = Compressor(spec, n, dtype)
        self.slot = slot_bytes([self.comp])
        self.send, self.recv = _bytes(self.slot, device), _bytes(p * self.slot, device)
        self.scratch = _bytes(self.comp.encode_bound, device)
        self.wire_bytes = (p - 1) * self.slot

    def run(self, buf):
        recv = self.recv.view(self.p, -1)
        seal(self.comp.encode(buf, out=self.scratch), self.send)
        dist.all_gather(list(recv), self.send, group=self.group)
        got = lengths(recv)
        buf.zero_()
        for r in range(self.p):  # rank order: the same bits on every rank
            add_frame(recv[r], got[r], buf, r)
        return buf.div_(self.p)


class PowerSgdPlan(_OneCompressor):
    """A bucket of n elements of dtype, powersgd, over the p ranks of group. The
    steps run on the CPU: a CUDA bucket is copied to the host and back, and its
    factors are summed as CUDA tensors (for the NCCL backend)."""

    def __init__(self, spec, n, dtype, group, p, device):
        self.group, self.p = group, p
        self.comp = Compressor(spec, n, dtype)
        rows, cols, rank = self.comp.powersgd_shape
        self.P, self.Q = torch.zeros(rows * rank), torch.zeros(cols * rank)
        self.host = torch.empty(n, dtype=dtype) if device.type == "cuda" else None
        self.wire = {id(x): torch.empty_like(x, device=device) for x in (self.P, self.Q)} if self.host is not None else {}
        self.wire_bytes = 2 * (p - 1) * (self.P.numel() + self.Q.numel()) * 4 // p

    def _sum(self, x):
        wire = self.wire.get(id(x), x)
        if wire is not x:
            wire.copy_(x)
        dist.all_reduce(wire, group=self.group)
        if wire is not x:
            x.copy_(wire)

    def run(self, buf):
        x = buf if self.host is None else self.host.copy_(buf)
        self.comp.powersgd_compute_p(x, self.P)
        self._sum(self.P)
        self.comp.powersgd_compute_q(self.P, self.Q)
        self._sum(self.Q)
        self.comp.powersgd_compute_output(self.Q, x, self.p, "avg")
        return buf if self.host is None else buf.copy_(x)


def _with_cols(spec, cols):
    """spec with cols=cols (any cols it had replaced)."""
    codec, _, keys = spec.partition(":")
    kept = [k for k in keys.split(",") if k.strip() and not re.match(r"\s*cols\s*=", k)]
    return codec + ":" + ",".join(kept + ["cols=%d" % cols])


class PowerSgdTensorsPlan:
    """A bucket whose gradients lie at `layout` [(offset, shape)] in its buffer of
    n elements of dtype, powersgd with a matrix per tensor, over p ranks; sum(x)
    sums a float32 CPU tensor over the ranks in place (the same bits on every
    rank). A tensor is compressed when it has two dimensions or more and its
    factors are under half its size (powerSGD_hook's min_compression_rate 2),
    else sent dense."""

    def __init__(self, spec, layout, n, dtype, p, sum_, device):
        self.p, self.sum, self.n, self.dtype = p, sum_, n, dtype
        rank = int(re.search(r"rank\s*=\s*(\d+)", spec).group(1)) if re.search(r"rank\s*=", spec) else 4
        self.mats, self.dense = [], []  # (offset, count, compressor, P slice start, Q slice start); (offset, count)
        p_len = q_len = 0
        for off, shape in layout:
            count = 1
            for d in shape:
                count *= d
            rows = shape[0] if len(shape) >= 2 else 0
            cols = count // rows if rows else 0
            r = min(rank, rows, cols)
            if len(shape) >= 2 and (rows + cols) * r * 2 < count:
                comp = Compressor(_with_cols(spec, cols), count, dtype)
                self.mats.append((off, count, comp, p_len, q_len))
                rows, cols, r = comp.powersgd_shape
                p_len += rows * r
                q_len += cols * r
            elif count:
                self.dense.append((off, count))
        self.p_len = p_len
        dense_n = sum(k for _, k in self.dense)
        self.P = torch.zeros(p_len + dense_n)  # the P's, then the dense values / p
        self.Q = torch.zeros(q_len)
        self.host = torch.empty(n, dtype=dtype) if device.type == "cuda" else None
        self.wire_bytes = 2 * (p - 1) * (self.P.numel() + self.Q.numel()) * 4 // p

    def _factor(self, t, start, comp, which):
        rows, cols, r = comp.powersgd_shape
        return t[start:start + (rows if which == "p" else cols) * r]

    def run(self, buf, stream=None):  # stream: a gccl plan's; the steps run on the host
        x = buf if self.host is None else self.host.copy_(buf)
        for off, k, comp, ps, _ in self.mats:
            comp.powersgd_compute_p(x[off:off + k], self._factor(self.P, ps, comp, "p"))
        at = self.p_len
        for off, k in self.dense:  # the dense values ride with the P's: one collective
            torch.div(x[off:off + k], self.p, out=self.P[at:at + k])
            at += k
        self.sum(self.P)
        at = self.p_len
        for off, k in self.dense:
            x[off:off + k].copy_(self.P[at:at + k])
            at += k
        for off, k, comp, ps, qs in self.mats:
            comp.powersgd_compute_q(self._factor(self.P, ps, comp, "p"), self._factor(self.Q, qs, comp, "q"))
        if self.mats:
            self.sum(self.Q)
        for off, k, comp, _, qs in self.mats:
            comp.powersgd_compute_output(self._factor(self.Q, qs, comp, "q"), x[off:off + k], self.p, "avg")
        return buf if self.host is None else buf.copy_(x)

    def get_residual(self):
        out = torch.zeros(self.n, dtype=self.dtype)
        for off, k, comp, _, _ in self.mats:
            out[off:off + k] = torch.as_tensor(comp.get_residual())
        return out

    def set_residual(self, values):
        values = torch.as_tensor(values)
        for off, k, comp, _, _ in self.mats:
            comp.set_residual(values[off:off + k].contiguous())

    def get_state(self):
        return [torch.from_numpy(comp.get_state()) for _, _, comp, _, _ in self.mats] or None

    def set_state(self, states):
        for (_, _, comp, _, _), st in zip(self.mats, states):
            comp.set_state(st)

    def destroy(self):
        for _, _, comp, _, _ in self.mats:
            comp.destroy()


class GcclPlan(_OneCompressor):
    """transport="gccl": gcclAllReduceCompressed over comm. stream_for(bucket
    tensor) gives the gccl stream of a CUDA tensor's current stream, or None."""

    def __init__(self, spec, n, dtype, comm):
        self.comm = comm
        self.comp = Compressor(spec, n, dtype)
        p = comm.size
        # an estimate: a ring's share of the finite frame (gccl picks the algorithm)
        self.wire_bytes = 2 * (p - 1) * self.comp.encode_bound_nonfinite(0) // p

    def run(self, buf, stream=None):
        self.comm.allreduce_compressed(buf, self.comp, buf, op="avg", stream=stream)
        if stream is not None:
            stream.synchronize()
        return buf
