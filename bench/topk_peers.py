#!/usr/bin/env python3
"""topk_peers.py — times the top-k selections gccl's topk codec is measured against.

    PYENV_VERSION=system python3 bench/topk_peers.py [-n N] [--ratio R] [--runs N] [--write FILE]

The data is N float32 values from numpy.random.default_rng(0).standard_normal;
--write FILE stores them as raw little-endian float32 so that
`codec-bench --input FILE` encodes the very same tensor. On one thread
(torch.set_num_threads(1)), with k = round(ratio * N) as gccl's topk computes it,
each peer selects the k largest magnitudes, abs() included in the time:

    numpy.argpartition(abs(x), N - k)[N - k:]
    torch.topk(torch.abs(t), k)

It prints one row per peer: the median, min and max milliseconds over --runs runs
(3 by default: torch.topk takes ~1.8 s on 25.6 M floats here, argpartition ~0.6 s).
"""
import argparse
import math
import statistics
import sys
import time

import numpy as np
import torch

RESNET50_PARAMS = 25557032  # ResNet-50's gradient, as codec-bench's default size


def sparse_k(ratio, n):
    """k as gccl's sparse_k computes it (src/compress/codec_util.c): round half up, 1..n."""
    if n == 0:
        return 0
    return int(min(n, max(1, math.floor(ratio * n + 0.5))))


def time_runs(fn, runs):
    """Milliseconds of each of `runs` calls of fn, after one untimed call."""
    fn()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=RESNET50_PARAMS, help="elements (default %(default)s)")
    ap.add_argument("--ratio", type=float, default=0.01, help="k / n (default %(default)s)")
    ap.add_argument("--runs", type=int, default=3, help="timed runs per peer (default %(default)s)")
    ap.add_argument("--write", metavar="FILE", help="write the data as raw float32 to FILE")
    a = ap.parse_args()
    if a.n < 1 or not 0 < a.ratio <= 1 or a.runs < 1:
        ap.error("need n >= 1, 0 < ratio <= 1, runs >= 1")

    torch.set_num_threads(1)
    x = np.random.default_rng(0).standard_normal(a.n, dtype=np.float32)
    if a.write:
        x.astype("<f4", copy=False).tofile(a.write)
    t = torch.from_numpy(x)
    n, k = a.n, sparse_k(a.ratio, a.n)

    peers = [
        ("numpy.argpartition", lambda: np.argpartition(np.abs(x), n - k)[n - k:]),
        ("torch.topk", lambda: torch.topk(torch.abs(t), k)),
    ]
    print(f"# topk_peers: n {n}, k {k}, one thread, numpy {np.__version__}, torch {torch.__version__}, "
          f"median of {a.runs} runs after one warm-up")
    print(f"#{'peer':<21} {'n':>10} {'k':>8} {'median_ms':>10} {'min_ms':>10} {'max_ms':>10}")
    for name, fn in peers:
        ms = time_runs(fn, a.runs)
        print(f"{name:<22} {n:>10} {k:>8} {statistics.median(ms):>10.1f} {min(ms):>10.1f} {max(ms):>10.1f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
