"""Run under mpirun (test_mpi.py starts it): the binding's MPI communicator, and
the DDP hook with transport="gccl". Exits non-zero on any failure."""

import faulthandler
import gc
import os
import sys

# A hang (in the hook, gloo or MPI) dumps every thread's stack and ends the run
# before test_mpi.py's 300 s timeout kills it with its output lost: one run of
# 2 processes hung in CI on 2026-12-06 and left nothing to read.
faulthandler.dump_traceback_later(240, exit=True)

from mpi4py import MPI  # initialises MPI (MPI_THREAD_MULTIPLE) before gccl is used

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import ddp_workers as W  # noqa: E402
import gccl  # noqa: E402
import gccl.torch as gt  # noqa: E402

world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("rank %d: FAILED %s" % (rank, what), flush=True)


comm = gccl.Comm.from_mpi()
check(comm.rank == rank and comm.size == size and comm.is_mpi, "rank and size")
for count in [0, 1, 2, 3, 7, 13, 1031]:
    x = (np.arange(count) % 7 + 3 * rank).astype(np.float32)
    ref = sum((np.arange(count) % 7 + 3 * q).astype(np.float32) for q in range(size))
    check(np.array_equal(comm.allreduce(x), ref), "allreduce %d" % count)
    c = gccl.Compressor("fp16", count)
    out = comm.allreduce_compressed(x, c)
    check(np.array_equal(out, ref), "allreduce_compressed fp16 %d" % count)
    gathered = world.allgather(out.tobytes())
    check(all(g == gathered[0] for g in gathered), "compressed result identical on every rank %d" % count)
try:
    comm.allreduce(np.zeros(5 + rank, np.float32))
    check(size == 1, "a count mismatch must fail")
except gccl.GcclInvalidUsage as e:
    check("count" in e.message, "mismatch message names the count: %s" % e.message)

torch.set_num_threads(1)
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%s" % sys.argv[1], rank=rank, world_size=size)
params = {}
for spec in [None, "none", "fp16", "topk:ratio=0.01", "sign", "powersgd:rank=2", "per-tensor:powersgd:rank=2"]:
    model = W.make_ddp(0)
    state = None
    if spec is not None:
        # each spec gets its own gccl communicator, as a trainer would per model
        per_tensor = spec.startswith("per-tensor:")  # powersgd with a matrix per weight
        state = gt.GcclHookState(spec.split(":", 1)[1] if per_tensor else spec, transport="gccl", start_iter=1,
                                 min_compress_numel=64, powersgd_per_tensor=per_tensor)
        model.register_comm_hook(state, gt.gccl_hook)
    W.train(model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), rank, 5)
    p = W.flat(model)
    params[spec] = p
    everyone = world.allgather(p.numpy().tobytes())
    check(all(e == everyone[0] for e in everyone), "replicas identical with %s" % spec)
    if state is not None:
        state.close()
        state.comm.destroy()
check(torch.allclose(params["none"], params[None], rtol=1e-5, atol=1e-6), "gccl dense hook ~ DDP's allreduce")
check(not torch.equal(params["sign"], params[None]), "sign changed the training")
check(not torch.equal(params["powersgd:rank=2"], params[None]), "powersgd changed the training")
check(not torch.equal(params["per-tensor:powersgd:rank=2"], params["powersgd:rank=2"]), "a matrix per weight differs")
comm.destroy()
del model
gc.collect()  # every DDP model must be gone before its process group (torch 1.13 could spin otherwise)
dist.destroy_process_group()
print("rank %d: %s" % (rank, "ok" if not failures else "%d failures" % len(failures)), flush=True)
sys.exit(1 if failures else 0)
