"""PyTorch DDP communication hooks that compress gradients with gccl.

    import gccl.torch as gt
    state = gt.GcclHookState("topk:ratio=0.01", transport="torch", start_iter=10)
    ddp_model.register_comm_hook(state, gt.gccl_hook)
    # or per parameter: small and 1-D ones dense, the embedding at 4 bits
    state = gt.GcclHookState("uniform:bits=8", model=ddp_model, layer_min_size=1024,
                             overrides={"embed.*": "uniform:bits=4", "head.*": "none"})

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
  - powersgd: gccl's three steps on this rank, its factors P and Q summed by two
    all_reduce (PowerSgdPlan: one matrix per bucket, as batched_powerSGD_hook;
    with powersgd_per_tensor=True, PowerSgdTensorsPlan: one per weight, as
    powerSGD_hook, every P and the tensors of at most one dimension in the first
    all_reduce, every Q in the second; also on transport="gccl", where
    gcclAllReduce sums them).
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

Per-parameter policies (CGX's layer_min_size and per-layer settings), off
unless layer_min_size or overrides is given; a parameter's policy is a spec or
dense, decided in this order:
  - layer_min_size=N: parameters of at most one dimension (biases, norm weights)
    or of fewer than N elements are dense, whatever the overrides say.
  - overrides: (pattern, spec) pairs, a dict or a list, in order; pattern is an
    fnmatch glob (case-sensitive) on the parameter's name and the first that
    matches gives the spec ("none": dense). Names are those of the module DDP
    wraps ("fc1.weight", not DDP's "module.fc1.weight"), whether `model` is the
    DDP object or that module; overrides need `model`. Each spec is checked at
    construction, as `spec` is.
  - otherwise `spec`.
  A bucket's parameters come from DDP's bucket API. In torch 1.13
  bucket.parameters() lists them in the order of bucket.gradients(), and each
  gradient is a view of bucket.buffer() at offset
  (g.data_ptr() - buffer.data_ptr()) / element size; the views lie back to back
  in that order, so the offset is also the running sum of the numels before it.
  The hook reads the pointers (and checks each view lies in the buffer). When a
  bucket's plan is made, the parameters of each policy become (offset, count)
  slices (adjacent ones merged); each step packs a group into a tensor of its
  own, averages it with that policy's plan (the plans of whole buckets; dense:
  all_reduce of x / p on the hook's group, the operations of _dense, or
  gcclAllReduce), and copies it back. The cost: one collective sequence per
  distinct policy per bucket (a quantizer's two, a sparse codec's one, one
  all_reduce for the dense parameters) plus the copies, all in the bucket's one
  job on the worker, in the order of the groups' first offsets, the same on
  every rank: replicas stay bit-identical. A bucket all of one policy runs on
  DDP's tensor, unpacked (all dense: as a dense bucket). Without layer_min_size
  and overrides the hook does what it did before, bit for bit.

Error feedback lives in each bucket's plan (its compressors; under policies,
each group's). A bucket whose layout changed (DDP rebuilt its buckets: another
size, dtype or parameter shapes at that index, or other policies for its
parameters) gets a fresh plan, so residuals never land on other parameters.

Checkpoints: state_dict() holds every bucket's residual with its layout (under
policies, a tensor of the bucket's size: each group's residual at its
parameters' offsets, zeros at dense ones), the plan's state where it has one
(powersgd's Q; under policies, a list with one entry per group), and the policy
arguments: a state with other ones refuses the checkpoint (one saved before
policies existed loads anywhere).
load_state_dict() gives each back when a bucket of that index and layout next
comes through the hook. A DDP model made afresh runs its first iteration on its
initial buckets and only then rebuilds them into the layout the residuals were
saved in; a bucket whose saved residual does not fit yet goes dense meanwhile
(for at most RESTORE_WAIT iterations, after which unclaimed residuals are
dropped with a warning), so no residual is lost to that first iteration.
"""

import fnmatch
import re
import warnings
import weakref

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ._hook_plans import GatherPlan, GcclPlan, PowerSgdPlan, PowerSgdTensorsPlan, SraPlan
from ._hook_policies import DensePlan, PolicyPlan, parse_overrides, policy_groups, state_of
from ._hook_worker import HookWorker
from .comm import Comm
from .compressor import Compressor
from .errors import GcclInvalidArgument, GcclInvalidUsage
from .stream import Stream

TRANSPORTS = ("torch", "gccl")
RESTORE_WAIT = 2  # iterations a loaded residual waits for its bucket layout
# Codecs that go through SRA on the torch transport (the others use all_gather).
_QUANTIZERS = ("fp16", "bf16", "uniform", "qsgd", "sign", "terngrad")
# Codecs whose error feedback is on unless the spec says ef=0 (README, "Codecs").
_EF_BY_DEFAULT = ("sign", "topk", "powersgd")
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
    (or let it be collected).

    model, layer_min_size, overrides: per-parameter policies (module docstring).
    The state keeps weak references to the model's parameters only: DDP's reducer
    holds the state, and a state holding the model would make a cycle through C++
    that the garbage collector cannot free."""

    def __init__(self, spec, transport="torch", process_group=None, comm=None, start_iter=0,
                 min_compress_numel=1024, model=None, layer_min_size=None, overrides=None,
                 powersgd_per_tensor=False):
        if transport not in TRANSPORTS:
            raise GcclInvalidArgument("invalid argument", "transport must be one of %s, not %r" % (TRANSPORTS, transport))
        if not isinstance(start_iter, int) or start_iter < 0:
            raise GcclInvalidArgument("invalid argument", "start_iter must be an int >= 0")
        if not isinstance(min_compress_numel, int) or min_compress_numel < 0:
            raise GcclInvalidArgument("invalid argument", "min_compress_numel must be an int >= 0")
        if layer_min_size is not None and (not isinstance(layer_min_size, int) or isinstance(layer_min_size, bool)
                                           or layer_min_size < 0):
            raise GcclInvalidArgument("invalid argument", "layer_min_size must be None or an int >= 0, not %r" %
                                      (layer_min_size,))
        if model is not None and not isinstance(model, torch.nn.Module):
            raise GcclInvalidArgument("invalid argument", "model must be the DDP model (a torch.nn.Module), not %s" %
                                      type(model).__name__)
        Compressor(spec, 1).destroy()  # a bad spec fails here, with gccl's message
        if not isinstance(powersgd_per_tensor, bool):
            raise GcclInvalidArgument("invalid argument", "powersgd_per_tensor must be a bool")
        if powersgd_per_tensor and (_codec(spec) != "powersgd" or layer_min_size is not None or overrides):
            raise GcclInvalidArgument("invalid argument", "powersgd_per_tensor needs a powersgd spec and no "
                                      "layer_min_size or overrides (its tensors of at most one dimension go dense)")
        self.powersgd_per_tensor = powersgd_per_tensor
        self.overrides = parse_overrides(overrides)
        if self.overrides and model is None:
            raise GcclInvalidArgument("invalid argument", "overrides match parameter names: give model= too "
                                      "(the DDP model or the module it wraps)")
        self.spec, self.transport = spec, transport
        self.layer_min_size = layer_min_size
        # the names of the module DDP wraps (no "module." prefix), by parameter;
        # weak references only (class docstring)
        module = model.module if isinstance(model, DistributedDataParallel) else model
        self._names = {} if module is None else {id(q): (weakref.ref(q), name) for name, q in module.named_parameters()}
        self._policy_of = {}  # id(parameter) -> (weak reference, its policy), filled as buckets come
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

    def _stream_spec(self, k, spec=None):
        """The spec (state.spec unless given) of this rank's k-th compressor of a
        plan. Through the codec-only API every process is rank 0, so a stochastic
        codec's compressors get seeds of their own (rank and k), unless the user's
        spec fixed one: otherwise every rank and chunk would round with the same
        random numbers."""
        spec = self.spec if spec is None else spec
        if self.transport != "torch" or _codec(spec) not in _STOCHASTIC or re.search(r"(^|[:,])\s*seed\s*=", spec):
            return spec
        return spec + ("," if ":" in spec else ":") + "seed=%d" % (1 + self.rank * 65536 + k)

    # ---- plans and residuals ------------------------------------------------------------

    def _make_plan(self, spec, n, dtype, device):
        """The plan that averages n elements of dtype over the ranks with spec: a
        whole bucket's, or a policy group's."""
        p = self.world_size
        if self.transport == "gccl":
            return GcclPlan(spec, n, dtype, self.comm)
        if _codec(spec) == "powersgd":
            return PowerSgdPlan(spec, n, dtype, self._group, p, device)
        if _codec(spec) in _QUANTIZERS and p > 1 and dtype == torch.float32:
            spec_of = lambda k: self._stream_spec(k, spec) if k < p else _without_ef(self._stream_spec(k, spec))
            return SraPlan(spec_of, n, self._group, p, self.rank, _ef_on(spec), device)
        return GatherPlan(self._stream_spec(0, spec), n, dtype, self._group, p, device)

    def _policy(self, param):
        """param's policy: its spec, or None for dense. layer_min_size first (small
        and <= 1-dimensional parameters are always dense), then the first override
        whose pattern matches its name, then state.spec."""
        hit = self._policy_of.get(id(param))
        if hit is not None and hit[0]() is param:
            return hit[1]
        if self.layer_min_size is not None and (param.dim() <= 1 or param.numel() < self.layer_min_size):
            spec = None
        else:
            spec = self.spec
            if self.overrides:
                named = self._names.get(id(param))
                if named is None or named[0]() is not param:
                    raise GcclInvalidUsage("invalid usage", "a parameter of shape %s in DDP's bucket is not one of "
                                           "the model given to GcclHookState" % (tuple(param.shape),))
                spec = next((s for pattern, s in self.overrides if fnmatch.fnmatchcase(named[1], pattern)), spec)
            if _codec(spec) == "none":
                spec = None
        self._policy_of[id(param)] = (weakref.ref(param), spec)
        return spec

    def _policies(self, bucket):
        """The policy of each of the bucket's parameters, in bucket order (DDP's
        bucket.parameters()); None when the state has no per-parameter policies."""
        if self.layer_min_size is None and not self.overrides:
            return None
        return tuple(self._policy(q) for q in bucket.parameters())

    def _policy_plan(self, bucket, policies):
        """A PolicyPlan for the bucket (_hook_policies.py)."""
        buf = bucket.buffer()

        def make(policy, count):
            if policy is None:
                return DensePlan(count, buf.element_size(), self.world_size, self._group, self.comm)
            return self._make_plan(policy, count, buf.dtype, buf.device)

        return PolicyPlan(policies, policy_groups(bucket, policies), buf.numel(), buf.dtype, buf.device, make, _ef_on)

    def _tensors_plan(self, bucket):
        """A PowerSgdTensorsPlan for the bucket: its gradients' offsets and shapes
        from DDP's bucket API (module docstring), its sums on the state's transport."""
        buf = bucket.buffer()
        size = buf.element_size()
        layout = [((g.data_ptr() - buf.data_ptr()) // size, tuple(g.shape)) for g in bucket.gradients()]
        if self.transport == "gccl":
            comm = self.comm
            sum_ = lambda x: comm.allreduce(x, x, op="sum")
        elif buf.is_cuda:  # the NCCL backend sums device tensors
            group, device = self._group, buf.device

            def sum_(x):
                wire = x.to(device)
                dist.all_reduce(wire, group=group)
                x.copy_(wire)
        else:
            group = self._group
            sum_ = lambda x: dist.all_reduce(x, group=group)
        return PowerSgdTensorsPlan(self.spec, layout, buf.numel(), buf.dtype, self.world_size, sum_, buf.device)

    def plan(self, bucket):
        """The bucket's plan; a new one (residual zero, or restored from
        load_state_dict) when the bucket's layout (or its parameters' policies) is
        new at its index."""
        fp = _fingerprint(bucket)
        policies = self._policies(bucket)
        idx = bucket.index()
        old = self._plans.get(idx)
        if old is not None and old[0] == fp and getattr(old[1], "policies", None) == policies:
            return old[1]
        if old is not None:
            old[1].destroy()
            self.resets += 1
        buf = bucket.buffer()
        if self.powersgd_per_tensor:
            plan = self._tensors_plan(bucket)
        elif policies is None:
            plan = self._make_plan(self.spec, fp[0], buf.dtype, buf.device)
        else:
            plan = self._policy_plan(bucket, policies)
        pending = self._pending.get(idx)
        if pending is not None and pending[0] == fp:
            _, residual, state = pending
            if residual is not None:
                plan.set_residual(residual)
            if state is not None:
                plan.set_state(state)
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
        """Counters and every bucket's residual and state (powersgd's Q), for torch.save."""
        residuals = {}
        for i, (fp, plan) in self._plans.items():
            entry = {"fingerprint": fp}
            if plan.ef if isinstance(plan, PolicyPlan) else _ef_on(self.spec):  # else there is none
                entry["residual"] = plan.get_residual()
            state = state_of(plan)
            if state is not None:
                entry["state"] = state
            if len(entry) > 1:
                residuals[i] = entry
        return {"spec": self.spec, "transport": self.transport, "start_iter": self.start_iter,
                "min_compress_numel": self.min_compress_numel, "layer_min_size": self.layer_min_size,
                "overrides": [list(o) for o in self.overrides], "iter": self.iter, "residuals": residuals}

    def load_state_dict(self, sd):
        """Restores state_dict(): the iteration counter now, each residual and state
        when its bucket (same index and layout) next comes through the hook.
        Checkpoints from before per-parameter policies (no "layer_min_size",
        "overrides" or "state") load too."""
        if sd.get("spec") != self.spec:
            raise GcclInvalidArgument("invalid argument",
                                      "state was saved with spec %r, this state has %r" % (sd.get("spec"), self.spec))
        saved = (sd.get("layer_min_size"), [tuple(o) for o in sd.get("overrides") or []])
        if "overrides" in sd and saved != (self.layer_min_size, self.overrides):  # older ones predate policies
            raise GcclInvalidArgument("invalid argument", "state was saved with layer_min_size=%r, overrides=%r; this "
                                      "state has %r, %r" % (saved + (self.layer_min_size, self.overrides)))
        self.iter = int(sd["iter"])
        for _, plan in self._plans.values():
            plan.destroy()
        self._plans.clear()
        self._pending = {int(i): (_as_fingerprint(e["fingerprint"]), e.get("residual"), e.get("state"))
                         for i, e in sd["residuals"].items()}
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
    state.spec (or each parameter's policy) after state.start_iter dense iterations."""
    buf = bucket.buffer()
    policies = state._policies(bucket)
    compressed = _codec(state.spec) != "none" if policies is None else any(s is not None for s in policies)
    dense = (state.iter < state.start_iter or buf.numel() < state.min_compress_numel
             or not compressed or state._awaits_layout(bucket))
    if bucket.is_last():
        state.iter += 1
    return state._dense(buf, bucket.index()) if dense else state._compressed(bucket)


__all__ = ["GcclHookState", "gccl_hook", "TRANSPORTS"]
