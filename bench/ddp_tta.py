#!/usr/bin/python3
"""Time to accuracy of DDP training through gccl's hooks, PyTorch's own hooks and
DDP's allreduce: one rank of it, or the table, plot and JSON of a finished run.

    ddp_tta.py rows [--quick]                  the rows a full (or -q) run trains, one a line
    ddp_tta.py train --row ROW --rank R --world W --out DIR [options]
    ddp_tta.py summarize --out DIR             results.md, results.json, accuracy.png

bench/ddp-testbed.sh runs `train` once per rank and row, one rank per network
namespace (MASTER_ADDR, MASTER_PORT and GLOO_SOCKET_IFNAME come from it), and then
`summarize`. Run with Debian's interpreter (/usr/bin/python3: its torch 1.13, numpy
and matplotlib) and PYTHONPATH=python, GCCL_LIBRARY=build-release/libgccl.so.

The model: a LeNet-style CNN with a wide fully connected head (conv 3x3 16, pool,
conv 3x3 32, pool, dropout, fc 1568->3200, dropout, fc 3200->10; 5.06 M
parameters, almost all in the head, so that a step moves 20 MB of gradient for
little compute: on the 4 x 1 Gbit/s bed, at global batch 64, 66% of DDP's 0.31 s step
is the shaped link's cost and 87% is communication of any kind; see the split),
trained on Fashion-MNIST from Debian's dataset-fashion-mnist with SGD (momentum
0.9) and a cosine learning rate that decays to zero over the run, so accuracy
levels off in the last epoch (DDP: 91.47% after 5 epochs of batch 64, about
92.4% after 10 of batch 128). Every row starts from the same weights (seed) and
sees the same batches in the same order (a permutation per epoch from the seed);
each rank takes its slice of every global batch. Test accuracy over the 10 000
test images (each rank scores a quarter, the counts are summed) is taken
--evals-per-epoch times an epoch; the clock that the curves use is training time
only (the evaluations are left out of it).

Each rank writes DIR/ROW/rank<R>.json when training is over (rank 0 also
DIR/ROW/progress.json after every evaluation, so a row that crashes keeps its
curve): step times, the bytes its interface sent during training steps
(/sys/class/net/IF/statistics/tx_bytes: headers included, evaluations left out),
the hook's own count (gccl's state.bytes_sent) and a SHA-256 of its parameters,
which must be the same on every rank.
"""

import argparse
import datetime
import gc
import gzip
import hashlib
import json
import math
import os
import signal
import statistics
import sys
import threading
import time
import traceback

# One thread per rank: 4 ranks share 2 cores, and every row must compete alike.
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

DATA_DIR = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist

# Row name -> (kind, argument). kind: "ddp" (DDP's allreduce), "torch-fp16"
# (fp16_compress_hook), "powersgd" (powerSGD_hook with one bucket, see
# make_ddp), "powersgd-buckets" (the same with DDP's own buckets: crashes or
# deadlocks gloo, kept to show it), "gccl" (gccl_hook on the torch transport, the spec),
# "gccl-tensors" (the same with powersgd_per_tensor=True: a matrix per parameter tensor).
ROWS = {
    "ddp": ("ddp", None),
    "torch-fp16": ("torch-fp16", None),
    "torch-powersgd-r4": ("powersgd", 4),
    "torch-powersgd-r4-buckets": ("powersgd-buckets", 4),
    "gccl-fp16": ("gccl", "fp16"),
    "gccl-uniform8": ("gccl", "uniform:bits=8"),
    "gccl-uniform4": ("gccl", "uniform:bits=4"),
    "gccl-sign": ("gccl", "sign"),
    "gccl-topk1%": ("gccl", "topk:ratio=0.01"),
    "gccl-powersgd-r4": ("gccl", "powersgd:rank=4"),
    "gccl-powersgd-r4-tensors": ("gccl-tensors", "powersgd:rank=4"),
}
FULL_ROWS = ["ddp", "torch-fp16", "torch-powersgd-r4", "gccl-fp16", "gccl-uniform8", "gccl-uniform4", "gccl-sign",
             "gccl-topk1%", "gccl-powersgd-r4", "gccl-powersgd-r4-tensors"]
QUICK_ROWS = ["ddp", "gccl-uniform4"]
DENSE_ROW = "ddp"  # the reference: its final accuracy sets the target


# ---- data and model ----------------------------------------------------------------------

def _idx(path):
    """An idx file (gzip): a big-endian header of dims, then uint8 data."""
    import numpy as np
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load_data():
    """Fashion-MNIST as float tensors, normalised with the training set's mean and std."""
    import torch
    missing = [f for f in ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", "t10k-images-idx3-ubyte.gz",
                           "t10k-labels-idx1-ubyte.gz") if not os.path.exists(os.path.join(DATA_DIR, f))]
    if missing:
        sys.exit("ddp_tta: %s missing in %s (apt-get install dataset-fashion-mnist)" % (", ".join(missing), DATA_DIR))
    xtr = torch.from_numpy(_idx(os.path.join(DATA_DIR, "train-images-idx3-ubyte.gz")).copy()).float().div_(255)
    ytr = torch.from_numpy(_idx(os.path.join(DATA_DIR, "train-labels-idx1-ubyte.gz")).astype("int64"))
    xte = torch.from_numpy(_idx(os.path.join(DATA_DIR, "t10k-images-idx3-ubyte.gz")).copy()).float().div_(255)
    yte = torch.from_numpy(_idx(os.path.join(DATA_DIR, "t10k-labels-idx1-ubyte.gz")).astype("int64"))
    mean, std = xtr.mean(), xtr.std()
    return (xtr.sub_(mean).div_(std).unsqueeze(1), ytr, xte.sub_(mean).div_(std).unsqueeze(1), yte)


def make_model(channels, hidden):
    import torch.nn as nn
    c1, c2 = channels
    return nn.Sequential(
        nn.Conv2d(1, c1, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(c1, c2, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.25),
        nn.Linear(c2 * 7 * 7, hidden), nn.ReLU(), nn.Dropout(0.5),
        nn.Linear(hidden, 10))


def param_hash(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def tx_bytes(net_if):
    """What this namespace's interface has sent so far (None where it has no such interface)."""
    try:
        with open("/sys/class/net/%s/statistics/tx_bytes" % net_if) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


# ---- the hooks -----------------------------------------------------------------------------

def make_ddp(kind, arg, module, args):
    """DDP around `module` with the row's hook; returns (ddp, state to close or None,
    what was set up in words, dense warm-up steps or None)."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook as psgd

    if kind == "powersgd":
        # One bucket for the whole model. Torch 1.13's powerSGD_hook issues its P and
        # Q allreduces from callbacks of the previous allreduce's future, which run
        # on gloo's worker threads when that allreduce completes, and blocks there
        # (.wait()) until they are done. With several buckets in flight, that breaks
        # gloo two ways (both seen here, bench/ddp-testbed.sh row
        # torch-powersgd-r4-buckets): (1) gloo numbers a group's collectives in the
        # order they are called, and a callback's P of bucket 0 races the main
        # thread's first allreduce of bucket 1, so ranks that called them in
        # different orders pair different tensors: EnforceNotMet
        # "op.preamble.length <= op.nbytes"; (2) gloo has 2 worker threads, and two
        # buckets' callbacks can block both in .wait() on allreduces that only a
        # worker thread can run: a deadlock. With one bucket a step is one chain of
        # collectives, called in the same order everywhere, and at most one callback
        # waits at a time. Both limits must be raised: DDP's bucket cap, and the
        # first bucket's (1 MiB) that its rebuild after the first iteration applies.
        dist._DEFAULT_FIRST_BUCKET_BYTES = 1 << 40
        ddp = DDP(module, bucket_cap_mb=1 << 20)
    else:
        ddp = DDP(module)
    state, how, warmup = None, "DDP allreduce (gloo ring), default buckets (25 MB cap, 1 MB first)", None
    if kind == "torch-fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
        how = "torch fp16_compress_hook, default buckets"
    elif kind in ("powersgd", "powersgd-buckets"):
        kw = {} if args.psgd_start is None else {"start_powerSGD_iter": args.psgd_start}
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=arg, **kw)
        ddp.register_comm_hook(state, psgd.powerSGD_hook)
        how = "torch powerSGD_hook rank %d, start_powerSGD_iter %d, %s" % (
            arg, state.start_powerSGD_iter, "one bucket" if kind == "powersgd" else "default buckets")
        warmup = state.start_powerSGD_iter
        state = None  # nothing to close
    elif kind in ("gccl", "gccl-tensors"):
        import gccl.torch as gt
        # powersgd warms up densely for as many steps as powerSGD_hook's row
        start = (1000 if args.psgd_start is None else args.psgd_start) if arg.startswith("powersgd") else 0
        per_tensor = kind == "gccl-tensors"
        state = gt.GcclHookState(arg, transport="torch", start_iter=start, powersgd_per_tensor=per_tensor)
        ddp.register_comm_hook(state, gt.gccl_hook)
        how = "gccl_hook %r%s, transport torch, default buckets" % (arg, ", a matrix per tensor" if per_tensor else "")
        if start:
            how += ", start_iter %d" % start
            warmup = start
    return ddp, state, how, warmup


# ---- one rank ------------------------------------------------------------------------------

class Watchdog:
    """Ends the process (exit 3) when no step or evaluation has finished for
    `limit` seconds, after printing every thread's Python stack: a collective that
    never completes (a deadlock inside a hook) shows where each thread waits,
    instead of holding the row until the launcher's time limit."""

    def __init__(self, limit):
        self.limit, self.last, self.on = limit, time.monotonic(), limit > 0
        if self.on:
            threading.Thread(target=self._watch, daemon=True, name="tta-watchdog").start()

    def tick(self):
        self.last = time.monotonic()

    def stop(self):
        self.on = False

    def _watch(self):
        import faulthandler
        while self.on:
            time.sleep(1)
            if self.on and time.monotonic() - self.last > self.limit:
                print("ddp_tta: stalled: no step finished in %d s; every thread's stack:" % self.limit,
                      file=sys.stderr, flush=True)
                faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
                sys.stderr.flush()
                os._exit(3)


def _cpu_seconds():
    """This process's CPU time so far, all threads (gloo's included), user + system."""
    import resource
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)  # the launcher waits for the file: it must never see half of it


def train(args):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    kind, arg = ROWS[args.row]
    watchdog = Watchdog(args.stall_s)
    # The launcher stops ranks with SIGKILL; a SIGTERM comes from elsewhere: say so in the log.
    signal.signal(signal.SIGTERM, lambda *_: (print("ddp_tta: stopped by SIGTERM from outside the benchmark",
                                                    file=sys.stderr, flush=True), os._exit(143)))
    rank, world = args.rank, args.world
    out = os.path.join(args.out, args.name or args.row)
    os.makedirs(out, exist_ok=True)
    # gloo's own timeout is far beyond any step; the watchdog catches a hang sooner.
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=args.pg_timeout))
    xtr, ytr, xte, yte = load_data()
    if args.train_subset:
        xtr, ytr = xtr[:args.train_subset], ytr[:args.train_subset]
    if args.test_subset:
        xte, yte = xte[:args.test_subset], yte[:args.test_subset]

    torch.manual_seed(args.seed)  # the same initial weights in every row and on every rank
    module = make_model([int(c) for c in args.channels.split(",")], args.hidden)
    nparams = sum(p.numel() for p in module.parameters())
    ddp, state, how, warmup = make_ddp(kind, arg, module, args)
    torch.manual_seed(args.seed * 1000 + 1 + rank)  # dropout: each rank its own, every row alike
    opt = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9, weight_decay=args.wd)
    loss_fn = torch.nn.CrossEntropyLoss()

    per_rank = args.batch // world
    steps_per_epoch = len(xtr) // args.batch
    total = steps_per_epoch * args.epochs if args.max_steps is None else args.max_steps
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    evals = set()
    if args.evals_per_epoch > 0:
        for e in range(args.epochs):
            for k in range(1, args.evals_per_epoch + 1):
                evals.add(min(total, e * steps_per_epoch + round(k * steps_per_epoch / args.evals_per_epoch)))
    shard = slice(rank * len(xte) // world, (rank + 1) * len(xte) // world)

    def evaluate():
        ddp.eval()
        with torch.no_grad():
            correct = sum(int((ddp.module(xte[shard][i:i + 1000]).argmax(1) == yte[shard][i:i + 1000]).sum())
                          for i in range(0, len(xte[shard]), 1000))
        ddp.train()
        c = torch.tensor([correct], dtype=torch.int64)
        dist.all_reduce(c)
        return 100.0 * int(c) / len(xte)

    curve = []  # (step, epoch, train seconds, test accuracy %, mean train loss since the last point)
    step_s, losses = [], []
    tx0 = tx_bytes(args.net_if)
    tx_train = 0 if tx0 is not None else None
    order, epoch = None, -1
    t_start = time.perf_counter()
    t_eval = 0.0  # evaluation time, left out of the clock
    tx_mark = tx0
    for step in range(total):
        e = step // steps_per_epoch
        if e != epoch:
            epoch = e
            g = torch.Generator().manual_seed(args.seed * 100003 + epoch)  # the same order in every row
            order = torch.randperm(len(xtr), generator=g)
        s = step % steps_per_epoch
        idx = order[s * args.batch + rank * per_rank: s * args.batch + (rank + 1) * per_rank]
        x, y = xtr[idx], ytr[idx]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        loss.backward()  # returns once every bucket's hook future is done
        opt.step()
        step_s.append(time.perf_counter() - t0)
        watchdog.tick()
        sched.step()
        losses.append(float(loss))
        if step + 1 in evals:
            t_train = time.perf_counter() - t_start - t_eval
            te = time.perf_counter()
            if tx_mark is not None:
                tx_train += tx_bytes(args.net_if) - tx_mark
            acc = evaluate()
            curve.append((step + 1, (step + 1) / steps_per_epoch, t_train, acc, statistics.mean(losses)))
            losses = []
            if rank == 0:
                print("  %-24s step %6d  epoch %5.2f  %8.1f s  acc %6.2f%%  loss %.4f  step %.3f s" % (
                    args.name or args.row, step + 1, curve[-1][1], t_train, acc, curve[-1][4],
                    statistics.median(step_s[-50:])), flush=True)
                write_json(os.path.join(out, "progress.json"), {"row": args.row, "curve": curve})
            tx_mark = tx_bytes(args.net_if)
            t_eval += time.perf_counter() - te
            watchdog.tick()
    t_train = time.perf_counter() - t_start - t_eval
    if tx_mark is not None:
        tx_train += tx_bytes(args.net_if) - tx_mark

    # The compute alone (--compute-steps): steps with DDP's synchronisation off, no
    # communication at all, for the split of a step into compute and communication.
    compute_s = []
    if args.compute_steps:
        with ddp.no_sync():
            for step in range(args.compute_steps):
                s = step % steps_per_epoch
                idx = order[s * args.batch + rank * per_rank: s * args.batch + (rank + 1) * per_rank]
                t0 = time.perf_counter()
                opt.zero_grad(set_to_none=True)
                loss_fn(ddp(xtr[idx]), ytr[idx]).backward()
                opt.step()
                compute_s.append(time.perf_counter() - t0)
                watchdog.tick()

    result = {
        "row": args.row, "name": args.name or args.row, "kind": kind, "arg": arg, "setup": how, "warmup_steps": warmup, "rank": rank,
        "world": world, "params": nparams, "steps": total, "steps_per_epoch": steps_per_epoch,
        "batch": args.batch, "epochs": args.epochs, "lr": args.lr, "seed": args.seed,
        "train_seconds": t_train, "step_s": step_s, "compute_s": compute_s,
        "tx_bytes_train": tx_train, "hook_bytes": getattr(state, "bytes_sent", None), "curve": curve,
        "param_sha256": param_hash(ddp.module) if not args.compute_steps else None,
        "net_if": args.net_if, "torch": torch.__version__, "cpu_s": _cpu_seconds(),
    }
    # Results first: whatever happens at teardown, the launcher has them, and kills a
    # rank that has not exited some seconds after this file appeared.
    write_json(os.path.join(out, "rank%d.json" % rank), result)
    watchdog.stop()
    # Teardown in the order that avoids torch 1.13's hangs: the hook's state, then
    # DDP (its Reducer holds the process group), then the group.
    if state is not None:
        state.close()
    del ddp, opt, sched, module, state
    gc.collect()
    dist.destroy_process_group()


# ---- the summary ---------------------------------------------------------------------------

def _load_row(out, name):
    d = os.path.join(out, name)
    if not os.path.isdir(d):
        return [], None, None
    ranks = []
    for f in sorted(os.listdir(d)):
        if f.startswith("rank") and f.endswith(".json"):
            with open(os.path.join(d, f)) as fh:
                ranks.append(json.load(fh))
    progress = None
    if os.path.exists(os.path.join(d, "progress.json")):
        with open(os.path.join(d, "progress.json")) as fh:
            progress = json.load(fh)
    status = None
    if os.path.exists(os.path.join(d, "status")):
        with open(os.path.join(d, "status")) as fh:
            status = fh.read().strip()
    return ranks, progress, status


def _other_cpu(d, ranks):
    """Cores' worth of CPU that other processes used while the row ran: /proc/stat's
    user, nice and system time, less the ranks' own (interrupt and softirq time,
    where much of the network's kernel work goes, is left out of both); and of it
    what ran at a positive nice (other people's builds here, at nice 10, which
    yield to the ranks). Rows compete for 2 cores: other work slows a row."""
    try:
        with open(os.path.join(d, "cpu_start")) as f:
            a = f.read().split()
        with open(os.path.join(d, "cpu_end")) as f:
            b = f.read().split()
    except OSError:
        return None, None
    # "<time> cpu user nice system idle iowait irq softirq steal ..."
    wall = float(b[0]) - float(a[0])
    if wall <= 0:
        return None, None
    hz = os.sysconf("SC_CLK_TCK")
    busy = sum(int(b[i]) - int(a[i]) for i in (2, 3, 4)) / hz
    ours = sum(r.get("cpu_s") or 0 for r in ranks)
    return max(0.0, busy - ours) / wall, (int(b[3]) - int(a[3])) / hz / wall


def _median(xs):
    return statistics.median(xs) if xs else None


def summarize(args):
    out = args.out
    with open(os.path.join(out, "run.json")) as f:
        run = json.load(f)
    rows, names = {}, run["rows"]
    for name in names:
        ranks, progress, status = _load_row(out, name)
        r0 = next((r for r in ranks if r["rank"] == 0), None)
        row = {"name": name, "status": status or "missing", "ranks_reported": len(ranks)}
        if r0 is not None:
            kind = r0["kind"]
            row.update({k: r0[k] for k in ("kind", "arg", "setup", "params", "steps", "batch", "epochs",
                                            "train_seconds", "curve")})
            row["median_step_s"] = _median(r0["step_s"])
            if r0.get("warmup_steps"):  # powerSGD: after its dense warm-up too
                row["median_step_s_after_warmup"] = _median(r0["step_s"][r0["warmup_steps"]:])
            row["other_cpu_cores"], row["niced_cpu_cores"] = _other_cpu(os.path.join(out, name), ranks)
            txs = [r["tx_bytes_train"] for r in ranks if r["tx_bytes_train"] is not None]
            row["tx_bytes_per_step"] = statistics.mean(txs) / r0["steps"] if txs else None
            row["tx_bytes_per_step_max"] = max(txs) / r0["steps"] if txs else None
            hb = [r["hook_bytes"] for r in ranks if r["hook_bytes"] is not None]
            row["hook_bytes_per_step"] = statistics.mean(hb) / r0["steps"] if hb else None
            hashes = {r["param_sha256"] for r in ranks}
            row["replicas_identical"] = (len(ranks) == run["world"] and len(hashes) == 1) if None not in hashes else None
            row["final_acc"] = r0["curve"][-1][3] if r0["curve"] else None
            row["best_acc"] = max(c[3] for c in r0["curve"]) if r0["curve"] else None
        elif progress is not None:  # crashed: keep what it reached
            row["curve"] = progress["curve"]
        rows[name] = row

    dense = rows.get(DENSE_ROW)
    target = dense["final_acc"] - 1.0 if dense and dense.get("final_acc") is not None else None
    for row in rows.values():
        row["time_to_target_s"] = None
        if target is not None:
            for step, ep, t, acc, _ in row.get("curve") or []:
                if acc >= target:
                    row["time_to_target_s"] = t
                    row["target_step"] = step
                    break
    d_step = dense.get("median_step_s") if dense else None
    d_tta = dense.get("time_to_target_s") if dense else None

    def f(v, fmt, none="-"):
        return none if v is None else fmt % v

    r_any = next((r for r in rows.values() if r.get("params")), {})
    lines = ["# Time to accuracy: CNN (%s parameters) on Fashion-MNIST, DDP over %d ranks (one per network namespace, "
             "gloo over TCP), links %s; global batch %s, %s epochs, SGD momentum 0.9, cosine lr from %s; "
             "target = %s's final accuracy - 1 = %s%%" % (
                 f(r_any.get("params"), "%d"), run["world"], run["link"], run["batch"], run["epochs"], run["lr"],
                 DENSE_ROW, f(target, "%.2f")),
             "",
             "| row | median s/step | vs DDP | tx MB/step/rank (iface) | hook MB/step/rank | time to target (s) "
             "| vs DDP | final acc % | best acc % | replicas identical | others' CPU (cores) | status |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in names:
        r = rows[name]
        step = r.get("median_step_s")
        step_txt = f(step, "%.3f")
        if r.get("median_step_s_after_warmup") is not None:
            step_txt += " (%.3f after warm-up)" % r["median_step_s_after_warmup"]
        tta = r.get("time_to_target_s")
        ident = r.get("replicas_identical")
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            name, step_txt, f(d_step / step if step and d_step else None, "%.2fx"),
            f(r.get("tx_bytes_per_step") and r["tx_bytes_per_step"] / 1e6, "%.2f"),
            f(r.get("hook_bytes_per_step") and r["hook_bytes_per_step"] / 1e6, "%.2f"),
            f(tta, "%.0f", "not reached"), f(d_tta / tta if tta and d_tta else None, "%.2fx"),
            f(r.get("final_acc"), "%.2f"), f(r.get("best_acc"), "%.2f"),
            "-" if ident is None else ("yes" if ident else "NO"), f(r.get("other_cpu_cores"), "%.2f"), r["status"]))
    lines.append("")
    lines.append("Setups: " + "; ".join("%s: %s" % (n, rows[n]["setup"]) for n in names if rows[n].get("setup")))
    bars = _bars(rows, names, dense)
    if bars:
        lines += ["", bars["text"]]
    split = _split(out, run)
    if split:
        lines += ["", split["text"]]
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(out, "results.md"), "w") as fh:
        fh.write(text + "\n")
    with open(os.path.join(out, "results.json"), "w") as fh:
        json.dump({"run": run, "target_acc": target, "rows": rows, "bars": bars, "split": split}, fh, indent=1)
    _plot(out, names, rows, target, run)
    return rows


def _bars(rows, names, dense):
    """Issue 27's bars: gccl's best codec reaches the target at least 2x sooner than
    DDP's allreduce and sooner than powerSGD_hook; every codec with error feedback
    (sign and topk have it on by default) ends within 1 point of dense."""
    if not dense or dense.get("time_to_target_s") is None:
        return None
    gccl = [n for n in names if ROWS.get(n, ("",))[0] in ("gccl", "gccl-tensors")
            and rows[n].get("time_to_target_s") is not None]
    psgd = [rows[n]["time_to_target_s"] for n in names if ROWS.get(n, ("",))[0] == "powersgd"
            and rows[n].get("time_to_target_s") is not None]
    res = {"best_gccl": None}
    parts = []
    if gccl:
        best = min(gccl, key=lambda n: rows[n]["time_to_target_s"])
        t = rows[best]["time_to_target_s"]
        res.update(best_gccl=best, vs_ddp=dense["time_to_target_s"] / t, vs_powersgd=min(psgd) / t if psgd else None)
        parts.append("gccl's best, %s, reaches the target %.2fx sooner than DDP (bar 2x: %s)" % (
            best, res["vs_ddp"], "met" if res["vs_ddp"] >= 2 else "MISSED"))
        parts.append("%s than powerSGD_hook (bar: sooner: %s)" % (
            "%.2fx sooner" % res["vs_powersgd"] if psgd else "-",
            "-" if not psgd else "met" if res["vs_powersgd"] > 1 else "MISSED"))
    else:
        parts.append("no gccl row reached the target (bar: MISSED)")
    ef = [n for n in names if ROWS.get(n, ("",))[0] in ("gccl", "gccl-tensors") and _codec_of(ROWS[n][1]) in ("sign", "topk")]
    gaps = {n: rows[n]["final_acc"] - dense["final_acc"] for n in ef if rows[n].get("final_acc") is not None}
    res["ef_gaps"] = gaps
    if gaps:
        parts.append("codecs with error feedback end %s of dense (bar: within 1 point: %s)" % (
            ", ".join("%s %+.2f points" % kv for kv in gaps.items()),
            "met" if all(g >= -1 for g in gaps.values()) and len(gaps) == len(ef) else "MISSED"))
    res["text"] = "Bars: " + "; ".join(parts) + "."
    return res


def _codec_of(spec):
    return (spec or "").split(":", 1)[0]


def _split(out, run):
    """The DDP step with the link shaped, unshaped, and compute alone (no_sync)."""
    parts = {}
    for key in ("split-shaped", "split-unshaped"):
        if os.path.isdir(os.path.join(out, key)):
            ranks, _, _ = _load_row(out, key)
            r0 = next((r for r in ranks if r["rank"] == 0), None)
            if r0:
                skip = min(20, len(r0["step_s"]) // 5)  # DDP's bucket rebuild and first touches
                parts[key] = {"step_s": _median(r0["step_s"][skip:]), "compute_s": _median(r0["compute_s"][skip:])}
    if "split-shaped" not in parts:
        return None
    sh = parts["split-shaped"]["step_s"]
    un = parts.get("split-unshaped", {}).get("step_s")
    # Compute alone is measured twice (after each run); other work on the machine can
    # only slow it, so the faster of the two is the better estimate.
    comps = {k: v["compute_s"] for k, v in parts.items() if v["compute_s"] is not None}
    comp = min(comps.values()) if comps else None
    res = {"shaped_step_s": sh, "unshaped_step_s": un, "compute_step_s": comp, "compute_step_s_each": comps,
           "comm_share_vs_unshaped": 1 - un / sh if un else None,
           "comm_share_vs_compute": 1 - comp / sh if comp else None}
    res["text"] = ("Split of DDP's step (medians over %s steps, the same run on the same namespaces): link shaped %s "
                   "%.3f s; unshaped %s; compute alone (DDP no_sync, no communication) %s. Communication is "
                   "%s of the shaped step against the unshaped one, %s against compute alone." % (
                       run.get("split_steps"), run["link"], sh, "-" if un is None else "%.3f s" % un,
                       "-" if comp is None else "%.3f s (%s)" % (comp, ", ".join(
                           "%.3f s after the %s run" % (v, k.split("-")[1]) for k, v in sorted(comps.items()))),
                       "-" if un is None else "%.0f%%" % (100 * res["comm_share_vs_unshaped"]),
                       "-" if comp is None else "%.0f%%" % (100 * res["comm_share_vs_compute"])))
    return res


def _plot(out, names, rows, target, run):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for n in names:
        c = rows[n].get("curve") or []
        if not c:
            continue
        label = n if rows[n]["status"].startswith("ok") else n + " (failed)"
        ax.plot([p[2] for p in c], [p[3] for p in c], label=label, marker=".", markersize=3,
                linestyle="--" if not n.startswith("gccl") else "-", linewidth=1.2)
    if target is not None:
        ax.axhline(target, color="grey", linewidth=0.8, linestyle=":")
        ax.text(ax.get_xlim()[1], target, " target %.2f%%" % target, va="bottom", ha="right", fontsize=8, color="grey")
    finals = [rows[n]["final_acc"] for n in names if rows[n].get("final_acc") is not None]
    if finals:
        ax.set_ylim(max(0, min(finals) - 8), min(100, max(r.get("best_acc") or 0 for r in rows.values()) + 1))
    ax.set_xlabel("training wall time, s (evaluations left out)")
    ax.set_ylabel("test accuracy %")
    ax.set_title("Fashion-MNIST CNN, DDP over %d namespaces at %s each (gloo)" % (run["world"], run["link"]))
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "accuracy.png"), dpi=110)
    print("plot: %s" % os.path.join(out, "accuracy.png"))


# ---- command line ---------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("rows", help="the rows of a full run (or --quick)")
    r.add_argument("--quick", action="store_true")
    t = sub.add_parser("train", help="one rank of one row")
    t.add_argument("--row", required=True, choices=sorted(ROWS))
    t.add_argument("--name", help="output subdirectory (default the row)")
    t.add_argument("--rank", type=int, required=True)
    t.add_argument("--world", type=int, required=True)
    t.add_argument("--out", required=True)
    t.add_argument("--epochs", type=int, default=10)
    t.add_argument("--max-steps", type=int, help="stop after this many steps (the lr schedule spans them)")
    t.add_argument("--batch", type=int, default=128, help="global batch (split over the ranks)")
    t.add_argument("--hidden", type=int, default=3200, help="the fully connected head's width")
    t.add_argument("--channels", default="16,32", help="the two convolutions' output channels")
    t.add_argument("--lr", type=float, default=0.05)
    t.add_argument("--wd", type=float, default=0.0)
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--evals-per-epoch", type=int, default=4)
    t.add_argument("--train-subset", type=int, default=0, help="the first N training images only (smoke runs)")
    t.add_argument("--test-subset", type=int, default=0, help="the first N test images only (smoke runs)")
    t.add_argument("--compute-steps", type=int, default=0, help="then this many steps without communication")
    t.add_argument("--psgd-start", type=int, help="powerSGD's start_powerSGD_iter (default: its own, 1000)")
    t.add_argument("--net-if", default="gtb0", help="the interface whose tx_bytes count the traffic")
    t.add_argument("--pg-timeout", type=int, default=600, help="gloo's timeout, s")
    t.add_argument("--stall-s", type=int, default=180, help="exit 3 with every thread's stack when no step "
                   "finished for this long (0: never)")
    s = sub.add_parser("summarize", help="table, JSON and plot of a run directory")
    s.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    if args.cmd == "rows":
        print("\n".join(QUICK_ROWS if args.quick else FULL_ROWS))
    elif args.cmd == "train":
        if args.batch % args.world:
            ap.error("--batch must be a multiple of --world")
        try:
            train(args)
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(1)  # no teardown: a peer gone mid-collective would hang it
    else:
        summarize(args)


if __name__ == "__main__":
    main()
