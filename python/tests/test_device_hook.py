"""gccl_hook on CUDA tensors against the CPU path, bit for bit (device_hook.py):
one-process DDP through both transports, and two MPI processes sharing one GPU
with transport="gccl". The same runs on CPU tensors check the harness itself
here; the CUDA runs skip, saying why, without a GPU (bench/gpu/check.sh runs
them on a GPU machine)."""

import os
import socket
import subprocess
import sys

import pytest
import torch

import gccl
from conftest import child_env, run_mpi

HERE = os.path.dirname(os.path.abspath(__file__))
GPU = torch.cuda.is_available() and gccl.HAVE_CUDA
WHY_NOT = ("no CUDA device (torch.cuda.is_available() is False)" if not torch.cuda.is_available()
           else "this libgccl was built without CUDA")
DEVICES = ["cpu", pytest.param("cuda:0", marks=pytest.mark.skipif(not GPU, reason=WHY_NOT))]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("transport", ["torch", "gccl"])
@pytest.mark.parametrize("device", DEVICES)
def test_one_process_ddp_equals_the_cpu_path(transport, device):
    run = subprocess.run([sys.executable, os.path.join(HERE, "device_hook.py"), transport, device, str(free_port())],
                         env=child_env(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "rank 0: ok" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]


@pytest.mark.parametrize("device", DEVICES)
def test_two_mpi_processes_gccl_transport_equal_the_cpu_path(device):
    run = run_mpi(2, [os.path.join(HERE, "device_hook.py"), "gccl-mpi", device, str(free_port())], timeout=300)
    assert run.returncode == 0 and run.stdout.count(": ok") == 2, run.stdout[-3000:] + run.stderr[-3000:]
