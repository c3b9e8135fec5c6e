"""DDP with gccl_hook on one device (cuda or cpu), checked bit for bit against the
CPU path on the same bucket contents (test_device_hook.py runs it).

    device_hook.py torch DEVICE PORT          one process; transport="torch" (NCCL on
                                              cuda, gloo on cpu): every step's hook
                                              output against the CPU codec on that
                                              step's bucket, the residual carried over
    device_hook.py gccl DEVICE PORT           one process; transport="gccl" on a
                                              1-rank gccl communicator, against the
                                              same calls on CPU tensors
    mpirun -np 2 device_hook.py gccl-mpi DEVICE PORT
                                              two MPI processes (sharing one GPU):
                                              transport="gccl", against a CPU state
                                              fed the same buckets in the same order

The model's gradients differ between devices (other kernels), so the check
replays each step's bucket through the CPU path rather than training twice.
Prints "ok" per process, or what differed, and exits non-zero then.
"""

import sys
import types

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_workers import Bucket

SPECS = ["fp16", "uniform:bits=4", "sign", "topk:ratio=0.01", "none"]
STEPS = 4


def train(spec, transport, device, comm, rank):
    """STEPS steps of DDP with the hook; returns [(index, is_last, shapes, input, output)] on the CPU."""
    import gccl.torch as gt
    torch.manual_seed(0)
    dist._DEFAULT_FIRST_BUCKET_BYTES = 4000  # several buckets once DDP rebuilds them
    module = torch.nn.Sequential(torch.nn.Linear(32, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(device)
    model = DDP(module, device_ids=[device] if device.type == "cuda" else None, bucket_cap_mb=0.02)
    state = gt.GcclHookState(spec, transport=transport, comm=comm, min_compress_numel=0)
    seen = []

    def recording_hook(st, bucket):
        before = bucket.buffer().detach().cpu().clone()
        fut = gt.gccl_hook(st, bucket)
        after = fut.wait().detach().cpu().clone()  # blocks the hook: a test, not a trainer
        seen.append((bucket.index(), bucket.is_last(), [tuple(g.shape) for g in bucket.gradients()], before, after))
        return fut

    model.register_comm_hook(state, recording_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)
    for _ in range(STEPS):
        x, y = torch.randn(16, 32, generator=g).to(device), torch.randint(0, 10, (16,), generator=g).to(device)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    state.close()
    return seen


def codec_reference(spec, seen):
    """The torch transport on one rank: each bucket's frame decoded once (divided
    by 1), with one compressor (one residual) per bucket index."""
    import gccl
    import gccl.torch as gt
    if spec == "none":
        return [b.clone() for _, _, _, b, _ in seen]
    spec0 = gt.GcclHookState._stream_spec(types.SimpleNamespace(spec=spec, transport="torch", rank=0), 0)
    comps, out = {}, []
    for index, _, shapes, before, _ in seen:  # a rebuilt bucket (new layout) starts afresh, as in the hook
        key = (index, before.numel(), tuple(shapes))
        c = comps.setdefault(key, gccl.Compressor(spec0, before.numel(), before.dtype))
        r = torch.zeros_like(before)
        gccl.decode_accumulate(torch.from_numpy(c.encode(before)), r)
        out.append(r.div_(1))
    return out


def gccl_reference(spec, seen, comm):
    """transport="gccl": the same allreduces on CPU tensors (or gcclAllReduce for "none")."""
    import gccl
    comps, out = {}, []
    for index, _, shapes, before, _ in seen:
        x = before.clone()
        if spec == "none":
            comm.allreduce(x, x, op="avg")
        else:
            c = comps.setdefault((index, x.numel(), tuple(shapes)), gccl.Compressor(spec, x.numel(), x.dtype))
            comm.allreduce_compressed(x, c, x, op="avg")
        out.append(x)
    return out


def replay_reference(spec, seen, comm):
    """A CPU state fed the recorded buckets in the recorded order (every rank does)."""
    import gccl.torch as gt
    state = gt.GcclHookState(spec, transport="gccl", comm=comm, min_compress_numel=0)
    out = [gt.gccl_hook(state, Bucket(i, b.clone(), last, shapes)).wait() for i, last, shapes, b, _ in seen]
    state.close()
    return out


def main():
    mode, device, port = sys.argv[1], torch.device(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    import gccl
    rank, world, comm = 0, 1, None
    if mode == "gccl-mpi":
        from mpi4py import MPI
        rank, world = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
        comm = gccl.Comm.from_mpi()
    elif mode == "gccl":
        comm = gccl.Comm.init_all(1)[0]
    backend = "nccl" if mode == "torch" and device.type == "cuda" else "gloo"
    dist.init_process_group(backend, init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world)
    failures = []
    for spec in SPECS:
        seen = train(spec, "torch" if mode == "torch" else "gccl", device, comm, rank)
        if mode == "torch":
            want = codec_reference(spec, seen)
        elif mode == "gccl":
            want = gccl_reference(spec, seen, comm)
        else:
            want = replay_reference(spec, seen, comm)
        for k, ((index, _, _, _, got), w) in enumerate(zip(seen, want)):
            if not torch.equal(got.view(torch.int32) if got.dtype == torch.float32 else got,
                               w.view(torch.int32) if w.dtype == torch.float32 else w):
                failures.append("%s: call %d (bucket %d) differs from the CPU path: %d of %d elements" % (
                    spec, k, index, int((got != w).sum()), got.numel()))
                break
        if not seen:
            failures.append("%s: the hook never ran" % spec)
    dist.destroy_process_group()
    print("rank %d: %s" % (rank, "ok" if not failures else "; ".join(failures)), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
