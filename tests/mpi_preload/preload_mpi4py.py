"""preload_mpi4py.py — comm.Allreduce on numpy arrays through the interposer.

An mpi4py program that knows nothing of gccl: float32 and float64 sums of integer
values (exact in any order), in place and out of place, for sizes around
GCCL_COMPRESS_MIN_BYTES (argv[1], default 65536) and of 1M elements, on
COMM_WORLD and on a duplicate; int32 sums and float32 maxima, which the
interposer passes to MPI. Ends with the line run_checked.sh compares against
gccl's log:  preload-check: pid P eligible E compressed 0 comms K
"""
import os
import sys

import numpy as np
from mpi4py import MPI

min_bytes = int(sys.argv[1]) if len(sys.argv) > 1 else 65536
world = MPI.COMM_WORLD
eligible = 0
failures = 0


def inputs(rank, n, dtype, salt):
    """Integers in [-100, 100]: their sums are exact in float32 and float64."""
    i = np.arange(n, dtype=np.int64)
    return ((i * 7 + rank * 13 + salt * 31) % 201 - 100).astype(dtype)


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print(f"preload_mpi4py rank {world.Get_rank()}: FAIL {what}", file=sys.stderr, flush=True)


def sums_on(comm, name):
    global eligible
    rank, size = comm.Get_rank(), comm.Get_size()
    salt = 0
    for dtype in (np.float32, np.float64):
        item = np.dtype(dtype).itemsize
        first = -(-min_bytes // item)  # the first count the interposer takes
        for n in (first - 1, first, 1 << 20):
            if n <= 0:
                continue
            salt += 1
            x = inputs(rank, n, dtype, salt)
            want = sum(inputs(r, n, np.float64, salt) for r in range(size)).astype(dtype)
            out = np.empty_like(x)
            comm.Allreduce(x, out, op=MPI.SUM)
            check(np.array_equal(out, want), f"{name} {n} {np.dtype(dtype).name} out of place")
            y = x.copy()
            comm.Allreduce(MPI.IN_PLACE, y, op=MPI.SUM)
            check(np.array_equal(y, want), f"{name} {n} {np.dtype(dtype).name} in place")
            if n * item >= min_bytes:
                eligible += 2


def passthrough_on(comm):
    rank, size = comm.Get_rank(), comm.Get_size()
    n = 1 << 20
    xi = inputs(rank, n, np.int32, 3)
    oi = np.empty_like(xi)
    comm.Allreduce(xi, oi, op=MPI.SUM)
    check(np.array_equal(oi, sum(inputs(r, n, np.int32, 3) for r in range(size))), "int32 sum")
    xf = inputs(rank, n, np.float32, 4)
    of = np.empty_like(xf)
    comm.Allreduce(xf, of, op=MPI.MAX)
    check(np.array_equal(of, np.maximum.reduce([inputs(r, n, np.float32, 4) for r in range(size)])), "float32 max")


sums_on(world, "COMM_WORLD")
dup = world.Dup()
sums_on(dup, "dup")
passthrough_on(dup)
dup.Free()
passthrough_on(world)

all_failures = world.allreduce(failures, op=MPI.SUM)
sys.stdout.flush()
os.write(1, f"preload-check: pid {os.getpid()} eligible {eligible} compressed 0 comms 2\n".encode())  # one write
if world.Get_rank() == 0:
    print(f"preload_mpi4py: {'FAIL' if all_failures else 'OK'} ({all_failures} failed checks on all ranks)", flush=True)
sys.exit(1 if all_failures else 0)
