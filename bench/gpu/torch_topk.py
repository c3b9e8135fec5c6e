"""torch.topk on the GPU, the peer of gccl's exact top-k kernel (bench/gpu/check.sh).

Times torch.topk(|x|, k) for k = 1% of n random-normal floats with CUDA events:
median of RUNS after WARMUP. Prints one line per n, or why nothing was measured.
"""
import statistics
import sys


def main(argv):
    counts = [int(float(a)) for a in argv[1:]] or [25_600_000, 256_000_000]
    try:
        import torch
    except ImportError:
        print("torch_topk: torch is not installed: nothing measured")
        return 0
    if not torch.cuda.is_available():
        print("torch_topk: torch %s sees no CUDA device: nothing measured" % torch.__version__)
        return 0
    runs, warmup = 20, 3
    print("# torch %s on %s; medians of %d runs" % (torch.__version__, torch.cuda.get_device_name(0), runs))
    for n in counts:
        g = torch.Generator(device="cuda").manual_seed(n)
        x = torch.randn(n, device="cuda", generator=g)
        k = max(1, round(0.01 * n))
        times = []
        for r in range(warmup + runs):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.topk(x.abs(), k, sorted=False)
            end.record()
            end.synchronize()
            if r >= warmup:
                times.append(start.elapsed_time(end))
        print("torch.topk(|x|, k=%d) of %d floats: %.3f ms" % (k, n, statistics.median(times)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
