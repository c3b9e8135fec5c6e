"""The MPI mode: tests/mpi_hook.py under mpirun with 1, 2 and 3 processes."""

import os
import shutil
import socket
import subprocess
import sys

import pytest

import gccl

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("np_", [1, 2, 3])
def test_binding_and_gccl_transport_hook_under_mpirun(np_):
    if not gccl.HAVE_MPI:
        pytest.skip("this libgccl was built without MPI")
    mpirun = shutil.which("mpirun")
    assert mpirun, "libgccl has MPI but mpirun is not on PATH"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    exports = [a for v in ("GCCL_LIBRARY", "PYTHONPATH") if v in env for a in ("-x", v)]
    run = subprocess.run([mpirun, "-np", str(np_), "--bind-to", "none"] + exports +
                         [sys.executable, os.path.join(HERE, "mpi_hook.py"), str(port)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert run.stdout.count(": ok") == np_, run.stdout
