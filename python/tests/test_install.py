"""`pip install ./python` builds libgccl with CMake (scikit-build-core) and ships it
in the package: installed into a fresh venv, gccl imports from any directory with
no GCCL_LIBRARY and no source tree, loads its own libgccl.so and runs a collective.
`pip wheel` makes a wheel that holds gccl/libgccl.so. GCCL_LIBRARY still wins, and
a wrong one is an error. pip leaves nothing behind in the source tree.

Two real builds (a couple of minutes on 2 cores, scikit-build-core fetched from
PyPI): the install as CMake decides (MPI and CUDA when found; CUDA for one
architecture only, to keep it short), the wheel without CUDA (faster, and shows
that `--config-settings=cmake.define.*` reaches CMake).
"""

import glob
import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(PYTHON_DIR)
BUILD_TIMEOUT = 1500  # a CUDA build on a slow 2-core machine

# Runs in the venv, from a directory outside the source tree.
PROBE = r"""
import ctypes, json, threading
import numpy as np
import gccl

comms = gccl.Comm.init_all(2)
out = [None, None]
def rank(r):
    out[r] = comms[r].allreduce(np.arange(1000, dtype=np.float32) * (r + 1))
threads = [threading.Thread(target=rank, args=(r,)) for r in range(2)]
for t in threads: t.start()
for t in threads: t.join(60)
exact = all(o is not None and np.array_equal(o, np.arange(1000, dtype=np.float32) * 3) for o in out)
for c in comms: c.destroy()
print(json.dumps({"file": gccl.__file__, "library": gccl.library_path, "version": gccl.version(),
                  "have_mpi": gccl.HAVE_MPI, "allreduce_exact": exact,
                  "have_cuda": hasattr(ctypes.CDLL(gccl.library_path), "gcclStreamCreateCuda")}))
"""


def clean_env(**extra):
    """The environment a user's shell would have: no GCCL_LIBRARY, no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("GCCL_LIBRARY", "PYTHONPATH", "PYTHONHOME")}
    env.update(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1",
               CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2))
    env.update(extra)
    return env


def run(cmd, cwd, env=None, timeout=120):
    return subprocess.run(cmd, cwd=cwd, env=env or clean_env(), capture_output=True, text=True, timeout=timeout)


def ok(proc, what):
    assert proc.returncode == 0, "%s failed (%d):\n%s\n%s" % (what, proc.returncode, proc.stdout[-6000:],
                                                              proc.stderr[-6000:])
    return proc


def source_tree_entries():
    """Every path under python/ (less bytecode caches) and the repository root's entries."""
    found = set("root/" + name for name in os.listdir(ROOT))
    for d, dirs, files in os.walk(PYTHON_DIR):
        dirs[:] = [x for x in dirs if x not in ("__pycache__", ".pytest_cache")]
        found.update(os.path.relpath(os.path.join(d, x), PYTHON_DIR) for x in dirs + files)
    return found


def built(build_dir, pattern):
    """Whether the CMake build in build_dir compiled a source matching pattern."""
    return bool(glob.glob(os.path.join(build_dir, "**", pattern), recursive=True))


@pytest.fixture(scope="module")
def before():
    return source_tree_entries()


@pytest.fixture(scope="module")
def installed(before, tmp_path_factory):
    """A venv (with the system's packages, as a Debian user makes one) into which
    `pip install ./python` built and installed gccl."""
    tmp = tmp_path_factory.mktemp("install")
    venv, build_dir = tmp / "venv", tmp / "build"
    ok(run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], str(tmp)),
       "python3 -m venv (Debian: apt-get install python3-venv)")
    python = str(venv / "bin" / "python")
    # A real build through pip, as CMake decides, but for one CUDA architecture
    # (ignored by CMake when it finds no CUDA). pip 23.0 (Debian 12) has no -C.
    ok(run([python, "-m", "pip", "install", "-v", "--config-settings=build-dir=%s" % build_dir,
            "--config-settings=cmake.define.CMAKE_CUDA_ARCHITECTURES=90", PYTHON_DIR], str(tmp),
           timeout=BUILD_TIMEOUT), "pip install ./python")
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    probe = json.loads(ok(run([python, "-c", PROBE], str(elsewhere)), "import gccl in the venv").stdout)
    return {"python": python, "venv": str(venv), "build": str(build_dir), "elsewhere": str(elsewhere),
            "probe": probe}


@pytest.fixture(scope="module")
def wheel(before, tmp_path_factory):
    """`pip wheel --no-deps ./python` (CUDA off), unpacked."""
    tmp = tmp_path_factory.mktemp("wheel")
    out, build_dir = tmp / "dist", tmp / "build"
    ok(run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out),
            "--config-settings=build-dir=%s" % build_dir, "--config-settings=cmake.define.GCCL_WITH_CUDA=OFF",
            PYTHON_DIR], str(tmp), timeout=BUILD_TIMEOUT), "pip wheel ./python")
    wheels = glob.glob(str(out / "gccl-*.whl"))
    assert len(wheels) == 1, os.listdir(out)
    unpacked = tmp / "unpacked"
    with zipfile.ZipFile(wheels[0]) as z:
        names = z.namelist()
        z.extractall(unpacked)
    return {"path": wheels[0], "names": names, "unpacked": str(unpacked), "build": str(build_dir)}


def test_installed_package_loads_its_own_library_and_runs_a_collective(installed):
    site = installed["venv"] + os.sep
    p = installed["probe"]
    assert p["file"].startswith(site) and p["file"].endswith(os.path.join("gccl", "__init__.py")), p
    assert p["library"] == os.path.join(os.path.dirname(p["file"]), "libgccl.so"), p
    assert p["version"] == 100 and p["allreduce_exact"], p


def test_installed_library_has_what_cmake_found(installed):
    p = installed["probe"]
    assert p["have_mpi"] == built(installed["build"], "comm_mpi.c.o"), p
    assert p["have_cuda"] == built(installed["build"], "*.cu.o"), p
    # the tests and benchmarks are not built for the package
    for skipped in ("tests", "bench"):
        assert not os.path.exists(os.path.join(installed["build"], skipped)), skipped
    readelf = shutil.which("readelf")
    if readelf:  # no RPATH into the build directory: it loads from site-packages alone
        dyn = ok(run([readelf, "-d", p["library"]], installed["elsewhere"]), "readelf").stdout
        assert "RPATH" not in dyn and "RUNPATH" not in dyn, dyn


def test_gccl_library_still_wins(installed, tmp_path):
    other = tmp_path / "libgccl-copy.so"
    shutil.copy(installed["probe"]["library"], other)
    out = ok(run([installed["python"], "-c", PROBE], installed["elsewhere"], clean_env(GCCL_LIBRARY=str(other))),
             "import gccl with GCCL_LIBRARY")
    p = json.loads(out.stdout)
    assert p["library"] == str(other) and p["allreduce_exact"], p
    # a wrong one is an error naming it, not a silent fall back to the package's copy
    wrong = str(tmp_path / "nope" / "libgccl.so")
    out = run([installed["python"], "-c", "import gccl"], installed["elsewhere"], clean_env(GCCL_LIBRARY=wrong))
    assert out.returncode != 0 and wrong in out.stderr and "ImportError" in out.stderr, out.stderr


def test_wheel_holds_the_package_and_libgccl(wheel):
    sources = sorted("gccl/" + f for f in os.listdir(os.path.join(PYTHON_DIR, "gccl")) if f.endswith(".py"))
    files = sorted(n for n in wheel["names"] if not n.startswith("gccl-0.1.0.dist-info/"))
    assert files == sorted(sources + ["gccl/libgccl.so"]), files  # no headers, archive, CMake package
    assert os.path.basename(wheel["path"]).startswith("gccl-0.1.0-py3-none-linux_"), wheel["path"]
    # the wheel's library is what CMake built: no CUDA (switched off), MPI when found
    lib = os.path.join(wheel["unpacked"], "gccl", "libgccl.so")
    probe = "import ctypes, gccl; print(gccl.HAVE_MPI, hasattr(ctypes.CDLL(gccl.library_path), 'gcclStreamCreateCuda'))"
    out = ok(run([sys.executable, "-c", probe], wheel["unpacked"], clean_env(GCCL_LIBRARY=lib)), "the wheel's library")
    assert out.stdout.split() == [str(built(wheel["build"], "comm_mpi.c.o")), "False"], out.stdout


def test_package_without_its_library_says_so(wheel, tmp_path):
    # the wheel's package less libgccl.so, outside any source tree: a clear ImportError
    # (unless this system has a libgccl of its own on the library path)
    shutil.copytree(os.path.join(wheel["unpacked"], "gccl"), tmp_path / "gccl")
    os.remove(tmp_path / "gccl" / "libgccl.so")
    out = run([sys.executable, "-c", "import gccl; print(gccl.library_path)"], str(tmp_path))
    if out.returncode == 0:
        assert not out.stdout.startswith(str(tmp_path)), out.stdout
    else:
        assert "libgccl not found" in out.stderr and "GCCL_LIBRARY" in out.stderr, out.stderr


def test_pip_leaves_nothing_in_the_source_tree(before, installed, wheel):
    assert source_tree_entries() == before, sorted(source_tree_entries() ^ before)
