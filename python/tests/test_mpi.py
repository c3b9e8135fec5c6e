"""The MPI mode: tests/mpi_hook.py under mpirun with 1, 2 and 3 processes."""

import os
import socket

import pytest

from conftest import run_mpi

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_binding_and_gccl_transport_hook_under_mpirun(np_):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = run_mpi(np_, [os.path.join(HERE, "mpi_hook.py"), str(port)], timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stdout.count(": ok") == np_, run.stdout
