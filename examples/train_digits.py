#!/usr/bin/env python3
"""Does a model trained through gccl's compressed DDP hooks reach dense accuracy?

An MLP on scikit-learn's digits (8x8 images, 10 classes), data-parallel over 4 CPU
processes (torch.distributed, gloo), trained once per codec and seed with the same
data order, initial weights, epochs and optimizer; only the gradient allreduce
differs: DDP's own (dense), or gccl.torch.gccl_hook with each codec
(transport="torch": gccl encodes, gloo moves the frames). Prints one table: final
test accuracy (mean +- std over the seeds), bytes each rank sent per step, step
time; writes it to OUT/results.md and OUT/results.json and plots test accuracy per
epoch to OUT/accuracy.png.

    PYENV_VERSION=system python3 examples/train_digits.py [--epochs 40] [--seeds 3] [--out DIR]

Run from the repository after building libgccl (GCCL_LIBRARY points elsewhere).
"""

import argparse
import gc
import json
import os
import socket
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

# (row name, spec; None = DDP's built-in allreduce)
CODECS = [
    ("dense (DDP allreduce)", None),
    ("none (gccl hook)", "none"),
    ("fp16", "fp16"),
    ("uniform 8-bit", "uniform:bits=8"),
    ("uniform 4-bit", "uniform:bits=4"),
    ("sign+EF", "sign"),
    ("topk 1%+EF", "topk:ratio=0.01"),
    ("topk 1% no EF", "topk:ratio=0.01,ef=0"),
    ("randk 1%", "randk:ratio=0.01"),
    ("powersgd r4 (gccl)", "powersgd:rank=4"),
    ("powersgd r4 per tensor (gccl)", "per-tensor:powersgd:rank=4"),
    ("powerSGD_hook r4 (torch)", "torch:powersgd:4"),
]
# PowerSGD rows start compressing after this many dense steps (at least 2: torch's
# hook needs two dense iterations before its error feedback and warm start)
POWERSGD_START = 2


def torch_powersgd_bytes(model, rank, world):
    """Bytes a rank sends per step under torch's powerSGD_hook (ring share of its
    allreduces): P and Q of every matrix it compresses, the rest dense (its
    min_compression_rate 2; tensors of at most one dimension stay dense)."""
    floats = 0
    for p in model.parameters():
        rows, cols = p.shape[0], p.numel() // p.shape[0]
        r = min(rank, rows, cols)
        floats += (rows + cols) * r if p.dim() > 1 and (rows + cols) * r * 2 < rows * cols else p.numel()
    return 2 * (world - 1) * floats * 4 / world


def load_data():
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    x, y = load_digits(return_X_y=True)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    mean, std = xtr.mean(0), xtr.std(0) + 1e-6
    return ((xtr - mean) / std).astype(np.float32), ytr, ((xte - mean) / std).astype(np.float32), yte


def make_model(seed, hidden):
    import torch
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, hidden),
                               torch.nn.ReLU(), torch.nn.Linear(hidden, 10))


def train_one(rank, world, spec, seed, args, data):
    """One run; returns (accuracy per epoch, bytes per step, step seconds, replica checksums) on rank 0."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import gccl.torch as gt
    xtr, ytr, xte, yte = data
    model = DDP(make_model(seed, args.hidden))
    state = torch_state = None
    start = max(args.warmup, POWERSGD_START) if spec and "powersgd" in spec else args.warmup
    if spec is not None and spec.startswith("torch:powersgd:"):
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
        torch_state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=int(spec.split(":")[2]),
                                         start_powerSGD_iter=start, random_seed=seed)
        model.register_comm_hook(torch_state, psgd.powerSGD_hook)
    elif spec is not None:
        per_tensor = spec.startswith("per-tensor:")  # powersgd with a matrix per parameter tensor
        state = gt.GcclHookState(spec.split(":", 1)[1] if per_tensor else spec, transport="torch", start_iter=start,
                                 powersgd_per_tensor=per_tensor)
        model.register_comm_hook(state, gt.gccl_hook)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    xtr_t, ytr_t = torch.from_numpy(xtr), torch.from_numpy(ytr)
    xte_t, yte_t = torch.from_numpy(xte), torch.from_numpy(yte)
    per_rank = args.batch // world
    accs, step_times, steps = [], [], 0
    for epoch in range(args.epochs):
        g = torch.Generator().manual_seed(seed * 1000 + epoch)  # the same order on every rank
        order = torch.randperm(len(xtr_t), generator=g)
        nsteps = len(order) // args.batch
        for s in range(nsteps):
            idx = order[s * args.batch + rank * per_rank: s * args.batch + (rank + 1) * per_rank]
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss_fn(model(xtr_t[idx]), ytr_t[idx]).backward()
            opt.step()
            step_times.append(time.perf_counter() - t0)
            steps += 1
        with torch.no_grad():
            accs.append(float((model.module(xte_t).argmax(1) == yte_t).float().mean()) * 100)
    # every replica must hold the same weights: integer checksums of their bits
    # (NaN-safe: a diverged run still compares bit patterns)
    bits = torch.cat([p.detach().flatten() for p in model.parameters()]).view(torch.int32).long()
    mine = torch.stack([bits.sum(), (bits * (torch.arange(len(bits)) % 65521 + 1)).sum()])
    sums = [torch.zeros(2, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(sums, mine)
    if state is not None:
        bytes_per_step = state.bytes_sent / steps
        state.close()
    elif torch_state is not None:
        bytes_per_step = torch_powersgd_bytes(model.module, torch_state.matrix_approximation_rank, world)
    else:
        nbytes = sum(p.numel() * p.element_size() for p in model.parameters())
        bytes_per_step = 2 * (world - 1) * nbytes / world  # a ring allreduce's share
    skip = len(step_times) // 10  # the first steps pay for warm-up and DDP's bucket rebuild
    return accs, bytes_per_step, statistics.median(step_times[skip:]), all(
        torch.equal(sums[0], s) for s in sums)


def worker(rank, world, port, args, result_path):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    data = load_data()
    results = []
    for name, spec in [c for c in CODECS if args.codecs is None or c[0] in args.codecs]:
        for seed in range(args.seeds):
            accs, bps, step_s, same = train_one(rank, world, spec, seed, args, data)
            results.append({"codec": name, "spec": spec, "seed": seed, "acc": accs, "bytes_per_step": bps,
                            "step_s": step_s, "replicas_identical": same})
            if rank == 0:
                print("  %-22s seed %d: %.2f%% (%s)" % (name, seed, accs[-1], "replicas identical" if same
                                                        else "REPLICAS DIFFER"), flush=True)
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump(results, f)
    gc.collect()  # every DDP model must be gone before its process group (torch 1.13 could spin otherwise)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def summarize(results, out_dir, args):
    names = list(dict.fromkeys(r["codec"] for r in results))
    rows = {}
    for n in names:
        rs = [r for r in results if r["codec"] == n]
        finals = [r["acc"][-1] for r in rs]
        rows[n] = {"spec": rs[0]["spec"], "mean": statistics.mean(finals),
                   "std": statistics.stdev(finals) if len(finals) > 1 else 0.0,
                   "bytes": statistics.mean(r["bytes_per_step"] for r in rs),
                   "step_ms": statistics.median(r["step_s"] for r in rs) * 1e3,
                   "identical": all(r["replicas_identical"] for r in rs),
                   "curve": [statistics.mean(r["acc"][e] for r in rs) for e in range(args.epochs)]}
    dense = rows.get(names[0])
    lines = ["# digits MLP (hidden %d), %d processes (gloo), %d epochs, global batch %d, SGD lr %g momentum 0.9, "
             "warm-up %d dense iterations, seeds 0..%d" % (args.hidden, args.procs, args.epochs, args.batch, args.lr,
                                                           args.warmup, args.seeds - 1),
             "| codec | spec | test acc % (mean +- std) | vs dense (points) | bytes/step/rank | vs dense bytes "
             "| step ms (median) | vs dense step | replicas identical |",
             "|---|---|---|---|---|---|---|---|---|"]
    for n in names:
        r = rows[n]
        lines.append("| %s | %s | %.2f +- %.2f | %+.2f | %d | %.1fx smaller | %.3f | %.2fx | %s |" % (
            n, r["spec"] or "-", r["mean"], r["std"], r["mean"] - dense["mean"], r["bytes"],
            dense["bytes"] / r["bytes"] if r["bytes"] else float("inf"), r["step_ms"], r["step_ms"] / dense["step_ms"],
            "yes" if r["identical"] else "NO"))
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump({"args": vars(args), "rows": rows, "runs": results}, f, indent=1)
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return rows
    fig, ax = plt.subplots(figsize=(8, 5))
    for n in names:
        ax.plot(range(1, args.epochs + 1), rows[n]["curve"], label=n, linestyle="--" if rows[n]["spec"] is None else "-")
    ax.set_xlabel("epoch")
    ax.set_ylabel("test accuracy %% (mean over %d seeds)" % args.seeds)
    ax.set_title("digits MLP, DDP over %d processes: gradients through gccl codecs" % args.procs)
    lowest = min(rows[n]["curve"][-1] for n in names)
    ax.set_ylim(max(0, 10 * int((lowest - 5) // 10)), 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "accuracy.png"), dpi=110)
    print("plot: %s" % os.path.join(out_dir, "accuracy.png"))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=40)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64, help="global batch (split over the processes)")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=0, help="dense iterations before compressing (start_iter)")
    ap.add_argument("--codecs", nargs="*", help="row names of CODECS to run (default all)")
    ap.add_argument("--out", default=None, help="output directory (default a fresh one under /tmp)")
    args = ap.parse_args(argv)
    if args.batch % args.procs:
        ap.error("--batch must be a multiple of --procs")
    import tempfile
    import torch.multiprocessing as mp
    out_dir = args.out or tempfile.mkdtemp(prefix="gccl-digits-")
    os.makedirs(out_dir, exist_ok=True)
    result_path = os.path.join(out_dir, "runs.json")
    t0 = time.time()
    mp.spawn(worker, args=(args.procs, free_port(), args, result_path), nprocs=args.procs, join=True)
    with open(result_path) as f:
        results = json.load(f)
    rows = summarize(results, out_dir, args)
    print("# %.0f s; outputs in %s" % (time.time() - t0, out_dir))
    return rows


if __name__ == "__main__":
    main()
