"""A process that trained with gccl_hook always exits: the new user's loop (DDP with
the hook, dist.destroy_process_group(), return) 20 times per transport and codec
family, each run under a timeout (exit_loop.py). Before the hook ran its
communication on a thread of its own, about one run in five never exited with
torch 1.13 (gloo's thread waiting for the GIL while DDP's reducer, holding it,
joined that thread)."""

import os
import subprocess
import sys

import pytest

from conftest import child_env, run_mpi

HERE = os.path.dirname(os.path.abspath(__file__))
RUNS = 20
RUN_TIMEOUT = 60  # seconds; a run takes about one
# one spec per family: dense, half precision, quantizer (SRA), sign (SRA with EF), sparse
FAMILIES = ["none", "fp16", "uniform:bits=4", "sign", "topk:ratio=0.01", "randk:ratio=0.05"]


@pytest.mark.parametrize("spec", FAMILIES)
def test_torch_transport_always_exits(spec):
    run = subprocess.run([sys.executable, os.path.join(HERE, "exit_loop.py"), "torch", spec, str(RUNS),
                          str(RUN_TIMEOUT)], env=child_env(), capture_output=True, text=True,
                         timeout=RUNS * RUN_TIMEOUT + 60)
    assert run.returncode == 0 and "ok %d" % RUNS in run.stdout, run.stdout[-2000:] + run.stderr[-3000:]


@pytest.mark.parametrize("spec", FAMILIES)
def test_gccl_transport_always_exits(spec, tmp_path):
    run = run_mpi(2, [os.path.join(HERE, "exit_loop.py"), "gccl", spec, str(RUNS), str(RUN_TIMEOUT), str(tmp_path)],
                  timeout=RUNS * RUN_TIMEOUT + 120)
    assert run.returncode == 0 and run.stdout.count("ok %d" % RUNS) == 2, run.stdout[-2000:] + run.stderr[-3000:]
