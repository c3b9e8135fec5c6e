"""The package installs with pip from the repository and finds libgccl: the
package directory first, GCCL_LIBRARY over everything, a clear ImportError when
the library is nowhere."""

import os
import shutil
import subprocess
import sys

import gccl

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def run_python(code, env, cwd):
    return subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=120)


def test_pip_install_and_library_lookup(tmp_path):
    target = tmp_path / "site"
    build = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
                            "--target", str(target), PYTHON_DIR], capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    shutil.rmtree(os.path.join(PYTHON_DIR, "build"), ignore_errors=True)  # pip's leftovers in the tree
    for leftover in os.listdir(PYTHON_DIR):
        if leftover.endswith(".egg-info"):
            shutil.rmtree(os.path.join(PYTHON_DIR, leftover), ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if k not in ("GCCL_LIBRARY", "PYTHONPATH")}
    env["PYTHONPATH"] = str(target)
    probe = "import gccl; print(gccl.__file__); print(gccl.library_path); print(gccl.version())"
    # outside the source tree, without the library beside it: a clear ImportError
    # (unless the system has one installed)
    out = run_python(probe, env, str(tmp_path))
    if out.returncode != 0:
        assert "libgccl not found" in out.stderr and "GCCL_LIBRARY" in out.stderr
    # beside the package: found there
    shutil.copy(gccl.library_path, target / "gccl" / "libgccl.so")
    out = run_python(probe, env, str(tmp_path))
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split()
    assert lines[0].startswith(str(target)) and lines[1] == str(target / "gccl" / "libgccl.so") and lines[2] == "100"
    # GCCL_LIBRARY wins, and a wrong one is an error, not a silent fallback
    out = run_python(probe, dict(env, GCCL_LIBRARY=gccl.library_path), str(tmp_path))
    assert out.returncode == 0 and out.stdout.split()[1] == gccl.library_path
    out = run_python(probe, dict(env, GCCL_LIBRARY=str(tmp_path / "nope.so")), str(tmp_path))
    assert out.returncode != 0 and "nope.so" in out.stderr
