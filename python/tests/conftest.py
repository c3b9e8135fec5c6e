"""Makes the package in ../ importable without installing it, and offers helpers:
one function per thread rank, and child processes (plain or under mpirun) that
import the same package."""

import os
import shutil
import subprocess
import sys
import threading

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)


def run_ranks(n, fn, timeout=60):
    """fn(rank) on n threads; returns their results, re-raising the first exception."""
    results, errors = [None] * n, [None] * n

    def body(r):
        try:
            results[r] = fn(r)
        except BaseException as e:  # reported below, on the test's thread
            errors[r] = e

    threads = [threading.Thread(target=body, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), "a rank thread did not finish in %d s" % timeout
    for e in errors:
        if e is not None:
            raise e
    return results


def child_env():
    """The environment for a test's child processes: this package first on
    PYTHONPATH, Open MPI allowed to run as root and to oversubscribe the cores."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(HERE)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def run_mpi(np_, script_args, timeout):
    """mpirun -np np_ python3 script_args... with child_env() (GCCL_LIBRARY and
    PYTHONPATH exported); skips when libgccl has no MPI."""
    import gccl
    if not gccl.HAVE_MPI:
        pytest.skip("this libgccl was built without MPI")
    mpirun = shutil.which("mpirun")
    assert mpirun, "libgccl has MPI but mpirun is not on PATH"
    env = child_env()
    exports = [a for v in ("GCCL_LIBRARY", "PYTHONPATH") if v in env for a in ("-x", v)]
    return subprocess.run([mpirun, "-np", str(np_), "--bind-to", "none"] + exports + [sys.executable] + script_args,
                          env=env, capture_output=True, text=True, timeout=timeout)
