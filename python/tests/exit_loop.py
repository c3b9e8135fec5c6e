"""The loop a new user writes, run many times, each run under a timeout: DDP with
gccl_hook, a few steps, dist.destroy_process_group(), return (the model and the
hook's state still alive, so DDP's reducer and the process group are torn down
when the function returns). test_exit.py runs it.

    exit_loop.py torch SPEC RUNS TIMEOUT   two gloo processes per run (forked from
                                           this one: a fresh pair each run)
    mpirun -np 2 exit_loop.py gccl SPEC RUNS TIMEOUT STOREDIR
                                           transport="gccl": RUNS loops in each MPI
                                           process (gloo's group made afresh each time)

Prints "ok RUNS" when every run ended in time; else names the run that hung
and exits non-zero.
"""

import os
import socket
import sys
import threading
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 8


def train_and_leave(rank, spec, transport):
    """What the user's worker function does; returns with model and state alive."""
    import gccl.torch as gt
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)))
    state = gt.GcclHookState(spec, transport=transport, min_compress_numel=64)
    model.register_comm_hook(state, gt.gccl_hook)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for _ in range(STEPS):
        x, y = torch.randn(32, 64, generator=g), torch.randint(0, 10, (32,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    dist.destroy_process_group()


def torch_worker(rank, port, spec):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=2)
    train_and_leave(rank, spec, "torch")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_torch(spec, runs, timeout):
    for i in range(runs):
        ctx = mp.start_processes(torch_worker, args=(free_port(), spec), nprocs=2, join=False, start_method="fork")
        deadline = time.monotonic() + timeout
        while not ctx.join(timeout=max(0.0, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                for p in ctx.processes:
                    p.kill()
                print("run %d of %s did not exit within %d s" % (i, spec, timeout), flush=True)
                return 1
    print("ok %d" % runs, flush=True)
    return 0


def run_gccl(spec, runs, timeout, store_dir):
    from mpi4py import MPI  # MPI first, then gccl's communicators
    rank = MPI.COMM_WORLD.Get_rank()
    torch.set_num_threads(1)
    current = [0, time.monotonic()]

    def watchdog():  # one run that overstays ends the process, saying which
        while True:
            time.sleep(0.5)
            if time.monotonic() - current[1] > timeout:
                print("rank %d: run %d of %s did not end within %d s" % (rank, current[0], spec, timeout), flush=True)
                os._exit(3)

    threading.Thread(target=watchdog, daemon=True).start()
    for i in range(runs):
        current[:] = [i, time.monotonic()]
        dist.init_process_group("gloo", init_method="file://%s/store%d" % (store_dir, i), rank=rank, world_size=2)
        train_and_leave(rank, spec, "gccl")
        MPI.COMM_WORLD.Barrier()  # the next run's store file is fresh on both ranks
    current[1] = time.monotonic()
    print("ok %d" % runs, flush=True)
    return 0


if __name__ == "__main__":
    transport, spec, runs, timeout = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if transport == "torch":
        sys.exit(run_torch(spec, runs, timeout))
    sys.exit(run_gccl(spec, runs, timeout, sys.argv[5]))
