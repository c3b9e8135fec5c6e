"""The torch-transport hook under torchrun (python -m torch.distributed.run),
the launcher DDP users have: replicas identical on every rank."""

import os
import socket
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))


def test_hook_under_torchrun(tmp_path):
    # --redirects/--tee 2: Debian's torch 1.13 on Python 3.11 cannot parse their
    # default "0" (Std.NONE is not among a Flag's members there); 2 = stderr
    # The static rendezvous on 127.0.0.1 and a free port: --standalone would use
    # "localhost":29400, which a minimal machine may not resolve (or another run holds).
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", "3",
                          "--master_addr", "127.0.0.1", "--master_port", str(port), "--redirects", "2", "--tee", "2",
                          os.path.join(HERE, "torchrun_hook.py"), str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    res = [torch.load(os.path.join(tmp_path, "rank%d.pt" % r)) for r in range(3)]
    for spec in ["uniform:bits=8", "topk:ratio=0.01"]:
        assert all(torch.equal(res[r][spec], res[0][spec]) for r in range(3)), spec
