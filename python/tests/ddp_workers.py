"""Worker functions that the hook tests run in spawned processes (importable by
module name, as torch.multiprocessing.spawn needs). Each writes what it saw to
files under `out`, and the test process checks them."""

import copy
import gc
import io
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import gccl.torch as gt
from gccl._hook_plans import SraPlan
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

SPECS = ["none", "fp16", "uniform:bits=4", "sign", "topk:ratio=0.01", "topk:ratio=0.01,ef=0", "randk:ratio=0.05",
         "powersgd:rank=2"]


def init(rank, world, port):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)


def finish(results, rank, out):
    """Saves this rank's results and leaves the process group. Every DDP model must
    be gone first: a DDP destroyed after its process group (at the caller's return,
    or by the garbage collector) spun forever in about one run in ten (torch 1.13)."""
    torch.save(results, os.path.join(out, "rank%d.pt" % rank))
    gc.collect()
    dist.destroy_process_group()


class Net(torch.nn.Module):
    """Two layers used in the opposite order of their registration, so that
    DDP's rebuilt buckets (gradient-ready order) differ from its first ones."""

    def __init__(self):
        super().__init__()
        self.late = torch.nn.Linear(300, 10)
        self.early = torch.nn.Linear(20, 300)

    def forward(self, x):
        return self.late(torch.relu(self.early(x)))


def make_ddp(seed, bucket_cap_mb=25):
    torch.manual_seed(seed)
    return DDP(Net(), bucket_cap_mb=bucket_cap_mb)


def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)  # every rank its own data
    return torch.randn(16, 20, generator=g), torch.randint(0, 10, (16,), generator=g)


def train(model, opt, rank, steps, first=0):
    for s in range(first, first + steps):
        x, y = batch(rank, s)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def flat(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def replicas(rank, world, port, out):
    """Per spec: 6 steps with the hook; saves this rank's parameters. Also DDP
    without a hook ("default") and with torch's allreduce_hook, which the "none"
    hook must match bit for bit."""
    init(rank, world, port)
    results = {}
    for spec in [None, "allreduce_hook"] + SPECS:
        model = make_ddp(0)
        state = None
        if spec == "allreduce_hook":
            model.register_comm_hook(None, default_hooks.allreduce_hook)
        elif spec is not None:
            state = gt.GcclHookState(spec, start_iter=1, min_compress_numel=64)
            model.register_comm_hook(state, gt.gccl_hook)
        train(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), rank, 6)
        results[spec or "default"] = flat(model)
        if state is not None:
            results[(spec, "bytes")] = state.bytes_sent
            state.close()
    # start_iter covering every step: powersgd never compresses, dense bit for bit
    model = make_ddp(0)
    state = gt.GcclHookState("powersgd:rank=2", start_iter=6, min_compress_numel=64)
    model.register_comm_hook(state, gt.gccl_hook)
    train(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), rank, 6)
    results["powersgd warm-up only"] = flat(model)
    state.close()
    del model
    finish(results, rank, out)


class Bucket:
    """A stand-in for DDP's GradBucket: one tensor, and the shapes of the parameters
    it holds (one parameter, the tensor's, unless given)."""

    def __init__(self, index, t, last=True, shapes=None):
        self.t, self.i, self.last = t, index, last
        self.shapes = shapes

    def buffer(self):
        return self.t

    def index(self):
        return self.i

    def is_last(self):
        return self.last

    def gradients(self):
        return [self.t] if self.shapes is None else [torch.empty(s) for s in self.shapes]


def hook_values(rank, world, port, out):
    """The hook's returned tensor against the exact average, on integer-valued
    buckets (exact through fp16 and topk ratio=1), through a stand-in bucket."""
    init(rank, world, port)
    got = {}
    for spec in ["fp16", "topk:ratio=1", "none"]:
        state = gt.GcclHookState(spec, min_compress_numel=0)
        for n in [1, 2, 3, 7, 13, 1031]:
            t = (torch.arange(n) % 5 + rank * 2).float() * world  # averages stay integers
            got[(spec, n)] = gt.gccl_hook(state, Bucket(0, t.clone())).wait()
        # buckets of other dtypes take the all_gather path, accumulating in their dtype
        for dtype in (torch.float64, torch.bfloat16)[:1 if spec == "none" else 2]:  # gloo has no bf16 sum
            t = (torch.arange(13) % 5 + rank * 2).to(dtype) * world
            got[(spec, str(dtype))] = gt.gccl_hook(state, Bucket(0, t.clone())).wait()
        # a new layout at the same index replaces the compressor (residual reset)
        got[(spec, "resets")] = state.resets
        state.close()
    # residuals: topk with EF keeps what it did not send; a rebuilt bucket starts at zero
    state = gt.GcclHookState("topk:ratio=0.1", min_compress_numel=0)
    t = torch.arange(100, dtype=torch.float32) + rank
    gt.gccl_hook(state, Bucket(0, t.clone())).wait()
    got["residual_before"] = state.residual(0)
    gt.gccl_hook(state, Bucket(0, torch.ones(50))).wait()
    got["residual_after_rebuild"] = state.residual(0)
    got["resets"] = state.resets
    state.close()
    # quantizers take the SRA schedule; with error feedback nothing is lost:
    # sum of inputs = p * average + sum of every rank's residual
    for spec in ["sign", "uniform:bits=8,ef=1"]:
        state = gt.GcclHookState(spec, min_compress_numel=0)
        t = ((torch.arange(1000) * 7919 % 1013) / 101.0 - 5.0 + rank).float()
        got[(spec, "in")] = t.clone()
        got[(spec, "out")] = gt.gccl_hook(state, Bucket(0, t.clone())).wait()
        got[(spec, "residual")] = state.residual(0)
        got[(spec, "sra")] = isinstance(state._plans[0][1], SraPlan)
        got[(spec, "bytes")] = state.bytes_sent
        state.close()
    finish(got, rank, out)


def rebuild_and_checkpoint(rank, world, port, out):
    """(a) DDP rebuilds its buckets after the first iteration: the state replaces
    the compressors of changed buckets. (b) Rollback on the live model: after 4
    steps save model, optimizer and hook state (through torch.save), run 4 steps,
    load the save, run the same 4 steps again: bit-identical. (c) A fresh model
    and state loaded from the save get every residual back once DDP has rebuilt
    its buckets."""
    init(rank, world, port)
    res = {}
    # DDP's own knob: a rebuild keeps the first bucket up to 1 MB otherwise
    dist._DEFAULT_FIRST_BUCKET_BYTES = 4000
    model = make_ddp(1, bucket_cap_mb=0.004)  # ~1000 floats: the rebuild makes several buckets
    state = gt.GcclHookState("topk:ratio=0.05", min_compress_numel=0)
    model.register_comm_hook(state, gt.gccl_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    train(model, opt, rank, 1)
    res["buckets_first"] = sorted(state._plans)
    layouts_first = {i: fp for i, (fp, _) in state._plans.items()}
    train(model, opt, rank, 3, first=1)
    res["layouts_changed"] = {i: fp for i, (fp, _) in state._plans.items()} != layouts_first
    res["buckets_after"] = sorted(state._plans)
    res["resets"] = state.resets
    blob = io.BytesIO()
    torch.save(state.state_dict(), blob)  # what a checkpoint file holds
    saved = ({k: v.clone() for k, v in model.state_dict().items()}, copy.deepcopy(opt.state_dict()), blob.getvalue())
    res["saved_residual_norm"] = sum(float(e["residual"].abs().sum()) for e in state.state_dict()["residuals"].values())
    train(model, opt, rank, 4, first=4)
    res["continued"] = flat(model)

    model.load_state_dict(saved[0])
    opt.load_state_dict(saved[1])
    state.load_state_dict(torch.load(io.BytesIO(saved[2])))
    train(model, opt, rank, 4, first=4)
    res["rolled_back"] = flat(model)
    res["rolled_back_iter"] = state.iter
    state.close()

    def fresh(restore):
        m = make_ddp(2, bucket_cap_mb=0.004)
        m.load_state_dict(saved[0])
        o = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        o.load_state_dict(saved[1])
        st = gt.GcclHookState("topk:ratio=0.05", min_compress_numel=0)
        if restore:
            st.load_state_dict(torch.load(io.BytesIO(saved[2])))
        m.register_comm_hook(st, gt.gccl_hook)
        train(m, o, rank, 1, first=4)
        waiting = len(st._pending)
        train(m, o, rank, 3, first=5)
        p = flat(m)
        st.close()
        return p, waiting, st.restored, len(st._pending)

    res["restored"], res["waiting_after_1"], res["restored_count"], res["unclaimed"] = fresh(True)
    res["no_residuals"] = fresh(False)[0]
    res["saved_count"] = len(torch.load(io.BytesIO(saved[2]))["residuals"])
    del model
    finish(res, rank, out)


def nonfinite_and_collectives(rank, world, port, out):
    """(a) How many collectives each bucket costs (counted on torch.distributed's
    functions): none of them blocks the hook. (b) A NaN and an inf on one rank
    come out non-finite at their indices on every rank, for a few (in the frame's
    exceptions) and for many (the slot overflows: the chunk is NaN everywhere);
    the next, finite step is finite again."""
    init(rank, world, port)
    got = {}
    calls = []
    for name in ("all_reduce", "all_gather", "all_to_all_single", "broadcast", "all_gather_object"):
        real = getattr(dist, name)

        def counted(*a, _real=real, _name=name, **k):
            calls.append(_name)
            return _real(*a, **k)

        setattr(dist, name, counted)
    n = 4099
    for spec in ["none", "fp16", "uniform:bits=4", "sign", "topk:ratio=0.01", "randk:ratio=0.05"]:
        state = gt.GcclHookState(spec, min_compress_numel=0)
        gt.gccl_hook(state, Bucket(0, torch.ones(n))).wait()  # the plan is made (buffers, compressors)
        del calls[:]
        fut = gt.gccl_hook(state, Bucket(0, torch.ones(n)))
        fut.wait()
        got[(spec, "calls")] = sorted(calls)
        base = ((torch.arange(n) % 7) - 3.0 + rank).float()
        few = base.clone()
        if rank == world - 1:
            few[5], few[n - 2] = float("nan"), float("-inf")
        got[(spec, "few")] = gt.gccl_hook(state, Bucket(0, few)).wait().clone()
        many = base.clone()
        if rank == 0:
            many[100:1100] = float("inf")
        got[(spec, "many")] = gt.gccl_hook(state, Bucket(0, many)).wait().clone()
        got[(spec, "after")] = gt.gccl_hook(state, Bucket(0, base.clone())).wait().clone()
        state.close()
    finish(got, rank, out)


class ViewBucket:
    """A stand-in for DDP's GradBucket whose gradients are views of its buffer, as
    DDP's are, for the given shapes laid back to back."""

    def __init__(self, t, shapes):
        self.t, self.views, at = t, [], 0
        for shape in shapes:
            n = 1
            for d in shape:
                n *= d
            self.views.append(t[at:at + n].view(shape))
            at += n

    def buffer(self):
        return self.t

    def index(self):
        return 0

    def is_last(self):
        return True

    def gradients(self):
        return self.views


def powersgd_tensors(rank, world, port, out):
    """powersgd with a matrix per tensor (powersgd_per_tensor=True): 6 training
    steps (the first dense), and one bucket of a weight and a bias through the hook."""
    init(rank, world, port)
    results = {}
    model = make_ddp(0)
    state = gt.GcclHookState("powersgd:rank=2", start_iter=1, min_compress_numel=64, powersgd_per_tensor=True)
    model.register_comm_hook(state, gt.gccl_hook)
    train(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), rank, 6)
    results["trained"] = flat(model)
    results["bytes"] = state.bytes_sent
    sd = state.state_dict()
    results["saved_states"] = [len(e.get("state") or []) for e in sd["residuals"].values()]
    state.close()
    del model
    # a weight (300 x 20, compressed; the ranks' sum has rank 1, which rank 2 holds)
    # and a bias (300, dense) of integers
    st = gt.GcclHookState("powersgd:rank=2", min_compress_numel=0, powersgd_per_tensor=True)
    u, v = (torch.arange(300) % 5 + 1 + rank).float(), (torch.arange(20) % 4 + 1).float()
    t = torch.cat([torch.outer(u, v).flatten(), (torch.arange(300) % 7 + 3 * rank).float()])
    got = gt.gccl_hook(st, ViewBucket(t.clone(), [(300, 20), (300,)])).wait()
    results["bucket_in"], results["bucket_out"] = t, got.clone()
    st.close()
    finish(results, rank, out)
