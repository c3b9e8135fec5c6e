#!/usr/bin/python3
"""Does wall-clock timing see the link model? (README, "Link model")

8 thread ranks as 8 nodes at a simulated 1 Gbit/s, 100 MiB float32 sums, dense and
fp16, each call timed with the wall clock (median of the last 3 of 4), with WORK
passes of elementwise compute over the tensor before each call (compute that the
ranks' shared cores stretch on the wall clock, while each virtual clock counts only
its thread's CPU time). With pacing the wall clock shows the modelled link: dense
about 1.5 s, fp16 about 2x faster, as the virtual clock says.

    GCCL_LIBRARY=build/libgccl.so PYTHONPATH=python WORK=40 /usr/bin/python3 bench/sim_wallclock.py
"""
import os
import threading
import time

os.environ.update(GCCL_RANKS_PER_NODE="1", GCCL_SIM_LINK_GBPS="1", GCCL_SIM_LINK_US="20")

import numpy as np  # noqa: E402

import gccl  # noqa: E402

P, N = 8, 25 << 20
WORK = int(os.environ.get("WORK", "0"))


def time_calls(comms, xs, ys, spec):
    comps = [gccl.Compressor(spec, N) for _ in range(P)] if spec else None
    medians = [0.0] * P

    def rank(r):
        walls = []
        for _ in range(4):
            for _ in range(WORK):
                np.multiply(xs[r], 1.0, out=ys[r])
            t0 = time.perf_counter()
            if comps:
                comms[r].allreduce_compressed(xs[r], comps[r], ys[r])
            else:
                comms[r].allreduce(xs[r], ys[r])
            walls.append(time.perf_counter() - t0)
        medians[r] = sorted(walls[1:])[1]

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(P)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return max(medians)


def main():
    comms = gccl.Comm.init_all(P)
    xs = [np.ones(N, np.float32) for _ in range(P)]
    ys = [np.zeros(N, np.float32) for _ in range(P)]
    dense, fp16 = time_calls(comms, xs, ys, None), time_calls(comms, xs, ys, "fp16")
    print("WORK=%d: wall-clock medians: dense %.3f s, fp16 %.3f s, dense/fp16 %.2f" % (WORK, dense, fp16, dense / fp16))


if __name__ == "__main__":
    main()
