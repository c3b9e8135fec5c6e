"""The ctypes binding: round trips of every collective on thread ranks against
exact references, error mapping, argument checks, the codec-only API."""

import threading
import time

import numpy as np
import pytest
import torch

import gccl
from conftest import run_ranks

RANKS = [1, 2, 3, 4, 5, 8]
COUNTS = [0, 1, 2, 3, 7, 13, 100, 1031]  # 0, 1, < p, primes, not divisible by p


def inputs(rank, count, dtype, lib="numpy"):
    """Integer-valued data: every summation order gives the same exact result."""
    x = (np.arange(count) % 7 + 3 * rank - 5).astype(np.float64)
    if lib == "torch":
        return torch.from_numpy(x).to(dtype)
    return x.astype(dtype)


@pytest.fixture(scope="module")
def comms():
    made = {p: gccl.Comm.init_all(p) for p in RANKS}
    yield made
    for cs in made.values():
        for c in cs:
            c.destroy()


def test_version_and_library():
    assert gccl.version() == 100
    assert gccl.library_path.endswith(".so") or ".so." in gccl.library_path


@pytest.mark.parametrize("p", RANKS)
def test_allreduce_numpy_every_op_and_count(comms, p):
    for dtype in (np.float32, np.float64, np.int32, np.int64, np.float16):
        for count in COUNTS:
            xs = [inputs(r, count, dtype) for r in range(p)]
            for op, ref in (("sum", sum(xs)), ("max", np.maximum.reduce(xs)), ("min", np.minimum.reduce(xs))):
                outs = run_ranks(p, lambda r: comms[p][r].allreduce(xs[r], op=op))
                for r in range(p):
                    assert outs[r].dtype == np.dtype(dtype)
                    np.testing.assert_array_equal(outs[r], ref, err_msg="rank %d op %s count %d" % (r, op, count))


@pytest.mark.parametrize("p", [1, 3, 4])
def test_allreduce_torch_in_place_and_avg(comms, p):
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.int64):
        for count in COUNTS:
            xs = [inputs(r, count, dtype, "torch") for r in range(p)]
            ref = sum(x.double() for x in xs)
            bufs = [x.clone() for x in xs]
            outs = run_ranks(p, lambda r: comms[p][r].allreduce(bufs[r], bufs[r]))
            for r in range(p):
                assert outs[r] is bufs[r]  # in place
                assert torch.equal(bufs[r].double(), ref), (dtype, count, r)
            if dtype == torch.float64:
                outs = run_ranks(p, lambda r: comms[p][r].allreduce(xs[r], op="avg"))
                for r in range(p):
                    assert torch.equal(outs[r], ref / p)


@pytest.mark.parametrize("p", RANKS)
def test_allgather_reducescatter_broadcast_reduce(comms, p):
    for count in COUNTS:
        xs = [inputs(r, count, np.float32) for r in range(p)]
        outs = run_ranks(p, lambda r: comms[p][r].allgather(xs[r]))
        for r in range(p):
            np.testing.assert_array_equal(outs[r], np.concatenate(xs))
        big = [inputs(r, count * p, np.float32) for r in range(p)]
        outs = run_ranks(p, lambda r: comms[p][r].reducescatter(big[r]))
        total = sum(big)
        for r in range(p):
            np.testing.assert_array_equal(outs[r], total[r * count:(r + 1) * count])
        root = p - 1
        bufs = [xs[r].copy() for r in range(p)]
        run_ranks(p, lambda r: comms[p][r].broadcast(bufs[r], root=root))
        for r in range(p):
            np.testing.assert_array_equal(bufs[r], xs[root])
        outs = run_ranks(p, lambda r: comms[p][r].reduce(xs[r], root=0))
        np.testing.assert_array_equal(outs[0], sum(xs))
        assert all(o is None for o in outs[1:])


@pytest.mark.parametrize("p", [1, 2, 3, 4, 8])
@pytest.mark.parametrize("spec", ["fp16", "uniform:bits=8", "sign", "topk:ratio=0.01", "topk:ratio=1", "randk"])
def test_compressed_allreduce_bit_identical(comms, p, spec):
    for count in COUNTS:
        xs = [inputs(r, count, np.float32) for r in range(p)]
        cs = [gccl.Compressor(spec, count, np.float32) for _ in range(p)]
        outs = run_ranks(p, lambda r: comms[p][r].allreduce_compressed(xs[r], cs[r]))
        for r in range(p):
            assert outs[r].tobytes() == outs[0].tobytes(), "rank %d differs (%s, %d)" % (r, spec, count)
        if spec in ("fp16", "topk:ratio=1"):  # exact for these small integers
            np.testing.assert_array_equal(outs[0], sum(xs))
        for c in cs:
            c.destroy()


@pytest.mark.parametrize("p", [1, 3, 4])
def test_compressed_allgather_reducescatter(comms, p):
    for count in COUNTS:
        xs = [inputs(r, count, np.float32) for r in range(p)]
        cs = [gccl.Compressor("fp16", count, np.float32) for _ in range(p)]
        outs = run_ranks(p, lambda r: comms[p][r].allgather_compressed(xs[r], cs[r]))
        for r in range(p):
            np.testing.assert_array_equal(outs[r], np.concatenate(xs))
        big = [inputs(r, count * p, np.float32) for r in range(p)]
        cs = [gccl.Compressor("fp16", count * p, np.float32) for _ in range(p)]
        outs = run_ranks(p, lambda r: comms[p][r].reducescatter_compressed(big[r], cs[r]))
        for r in range(p):
            np.testing.assert_array_equal(outs[r], sum(big)[r * count:(r + 1) * count])


def test_codec_only_round_trip_and_residual():
    x = np.linspace(-3, 3, 1000).astype(np.float32)
    c = gccl.Compressor("fp16", x.size)
    frame = c.encode(x)
    assert frame.dtype == np.uint8 and 0 < frame.size <= c.encode_bound
    dst = np.ones_like(x)
    gccl.decode_accumulate(frame, dst)
    np.testing.assert_array_equal(dst, 1 + x.astype(np.float16).astype(np.float32))
    # error feedback: residual = x - decoded, and it comes back with the next encode
    e = gccl.Compressor("topk:ratio=0.1", x.size)
    frame = e.encode(x)
    dec = np.zeros_like(x)
    gccl.decode_accumulate(frame, dec)
    np.testing.assert_array_equal(e.get_residual(), x - dec)
    assert np.count_nonzero(dec) == 100
    e.set_residual(np.zeros_like(x))
    np.testing.assert_array_equal(e.get_residual(), np.zeros_like(x))
    t = torch.zeros(1000)
    e.get_residual(t)
    assert torch.equal(t, torch.zeros(1000))
    # torch tensors encode too; a bfloat16 compressor's residual comes as a tensor
    b = gccl.Compressor("topk:ratio=0.5", 10, torch.bfloat16)
    b.encode(torch.arange(10, dtype=torch.bfloat16))
    assert b.get_residual().dtype == torch.bfloat16


def test_powersgd_allreduce_and_its_state(comms):
    """A rank-1 sum comes back on every rank, identically; Q checkpoints through
    get_state/set_state; the codec-only API refuses the spec."""
    p, rows, cols = 3, 6, 5
    x = [np.outer(np.arange(rows) % 3 + r, np.arange(cols) % 4 + 1).astype(np.float32).ravel() for r in range(p)]
    comps = [gccl.Compressor("powersgd:rank=2,cols=%d" % cols, rows * cols) for _ in range(p)]
    outs = [np.zeros(rows * cols, np.float32) for _ in range(p)]
    threads = [threading.Thread(target=lambda r=r: comms[p][r].allreduce_compressed(x[r], comps[r], outs[r]))
               for r in range(p)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    np.testing.assert_allclose(outs[0], sum(x), rtol=1e-5, atol=1e-4)
    for r in range(1, p):
        np.testing.assert_array_equal(outs[r], outs[0])
    q = comps[0].get_state()
    assert q.shape == (cols * 2,) and np.all(np.isfinite(q))
    comps[1].set_state(q)
    np.testing.assert_array_equal(comps[1].get_state(), q)
    with pytest.raises(gccl.GcclInvalidArgument, match="carries"):
        comps[1].set_state(q[:3])
    assert gccl.Compressor("uniform:bits=4", 10).get_state().size == 0
    with pytest.raises(gccl.GcclInvalidUsage, match="powersgd"):
        comps[2].encode(x[2])


def test_powersgd_steps_with_the_caller_summing():
    """The three steps with the factors summed here (as torch.distributed would):
    a rank-1 sum comes back on every rank, identically; sizes and order are checked."""
    p, rows, cols = 3, 6, 5
    x = [np.outer(np.arange(rows) % 3 + r, np.arange(cols) % 4 + 1).astype(np.float32).ravel() for r in range(p)]
    comps = [gccl.Compressor("powersgd:rank=2,cols=%d" % cols, rows * cols) for _ in range(p)]
    assert comps[0].powersgd_shape == (rows, cols, 2)
    ps = [c.powersgd_compute_p(x[r], np.zeros(rows * 2, np.float32)) for r, c in enumerate(comps)]
    p_sum = sum(ps)
    qs = [c.powersgd_compute_q(p_sum, np.zeros(cols * 2, np.float32)) for c in comps]
    q_sum = sum(qs)
    outs = [c.powersgd_compute_output(q_sum, np.zeros(rows * cols, np.float32), p, "sum") for c in comps]
    np.testing.assert_allclose(outs[0], sum(x), rtol=1e-5, atol=1e-4)
    for r in range(1, p):
        np.testing.assert_array_equal(outs[r], outs[0])
    c = comps[0]
    with pytest.raises(gccl.GcclInvalidArgument, match="p must hold 12 float32"):
        c.powersgd_compute_p(x[0], np.zeros(rows * 2 + 1, np.float32))
    with pytest.raises(gccl.GcclInvalidUsage, match="after gcclPowerSgdComputeP"):
        c.powersgd_compute_q(p_sum, np.zeros(cols * 2, np.float32))
    with pytest.raises(gccl.GcclInvalidArgument, match="not powersgd"):
        gccl.Compressor("fp16", 10).powersgd_shape


def test_errors_map_to_subclasses_with_the_message():
    with pytest.raises(gccl.GcclInvalidArgument, match="unknown codec"):
        gccl.Compressor("bogus", 10)
    with pytest.raises(gccl.GcclInvalidArgument, match="floating-point tensors only"):
        gccl.Compressor("fp16", 10, np.int32)
    uid = gccl.get_unique_id()
    with pytest.raises(gccl.GcclInvalidArgument) as e:
        gccl.Comm.init_rank(2, uid, 5)
    assert e.value.code == 3 and "rank" in e.value.message
    with pytest.raises(gccl.GcclInvalidArgument):
        gccl.Comm.init_rank(0, uid, 0)
    with pytest.raises(gccl.GcclInvalidArgument, match="128 bytes"):
        gccl.UniqueId(b"short")
    assert bytes(gccl.UniqueId(bytes(uid))) == bytes(uid)
    # a corrupt frame: CorruptData and dst untouched
    x = np.arange(100, dtype=np.float32)
    frame = gccl.Compressor("uniform:bits=4", 100).encode(x).copy()
    frame[frame.size // 2] ^= 0x40
    dst = np.full(100, 7, np.float32)
    with pytest.raises(gccl.GcclCorruptData):
        gccl.decode_accumulate(frame, dst)
    np.testing.assert_array_equal(dst, 7)
    with pytest.raises(gccl.GcclInvalidArgument, match="uint8"):
        gccl.decode_accumulate(np.zeros(4, np.float32), dst)
    # every code has its class, and they are GcclErrors
    from gccl.errors import BY_CODE, raise_for
    for code in range(1, 9):
        with pytest.raises(BY_CODE[code]) as e:
            raise_for(code, "name", "text")
        assert isinstance(e.value, gccl.GcclError) and e.value.message == "text"


def test_argument_checks_before_any_rank_blocks(comms):
    c = comms[1][0]
    with pytest.raises(gccl.GcclInvalidArgument, match="contiguous"):
        c.allreduce(np.zeros((4, 4), np.float32)[:, 0])
    with pytest.raises(gccl.GcclInvalidArgument, match="recv is float64"):
        c.allreduce(np.zeros(4, np.float32), np.zeros(4, np.float64))
    with pytest.raises(gccl.GcclInvalidArgument, match="holds 3 elements"):
        c.allreduce(np.zeros(4, np.float32), np.zeros(3, np.float32))
    with pytest.raises(gccl.GcclInvalidArgument, match="op"):
        c.allreduce(np.zeros(4, np.float32), op="mean")
    with pytest.raises(gccl.GcclInvalidArgument, match="numpy array or a torch tensor"):
        c.allreduce([1.0, 2.0])
    with pytest.raises(gccl.GcclInvalidArgument, match="read-only"):
        ro = np.zeros(4, np.float32)
        ro.flags.writeable = False
        c.allreduce(ro, ro)
    with pytest.raises(gccl.GcclInvalidArgument, match="made for"):
        c.allreduce_compressed(np.zeros(4, np.float32), gccl.Compressor("fp16", 5))
    with pytest.raises(gccl.GcclInvalidArgument, match="compressor"):
        c.allreduce_compressed(np.zeros(4, np.float32), None)
    # what the library itself refuses comes back with its message too
    with pytest.raises(gccl.GcclInvalidArgument, match="overlap"):
        buf = np.zeros(8, np.float32)
        c.allreduce(buf[:4], buf[2:6])


def test_mismatch_is_invalid_usage_on_every_rank():
    comms = gccl.Comm.init_all(3)

    def call(r):
        try:
            comms[r].allreduce(np.zeros(10 + (r == 1), np.float32))
        except gccl.GcclInvalidUsage as e:
            return e.message
        return None

    msgs = run_ranks(3, call)
    assert all(m and "count" in m for m in msgs), msgs
    for c in comms:
        c.destroy()
    with pytest.raises(gccl.GcclInvalidUsage, match="destroyed"):
        comms[0].allreduce(np.zeros(1, np.float32))
    comms[0].destroy()  # idempotent


def test_collectives_release_the_gil():
    """Rank 1 joins 0.3 s late; while rank 0 waits inside the library, a Python
    thread keeps counting (it could not if the call held the GIL)."""
    comms = gccl.Comm.init_all(2)
    ticks, stop = [0], threading.Event()

    def count():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0.001)

    counter = threading.Thread(target=count)
    counter.start()
    x = [np.ones(5, np.float32), np.ones(5, np.float32)]
    seen = {}

    def rank(r):
        if r == 1:
            time.sleep(0.3)
        start = ticks[0]
        comms[r].allreduce(x[r], x[r])
        seen[r] = ticks[0] - start

    run_ranks(2, rank)
    stop.set()
    counter.join()
    assert seen[0] >= 50, seen  # ~300 ticks of 1 ms while rank 0 was blocked
    np.testing.assert_array_equal(x[0], 2)
    for c in comms:
        c.destroy()


def test_init_rank_from_threads_and_abort():
    uid = gccl.get_unique_id()
    comms = run_ranks(3, lambda r: gccl.Comm.init_rank(3, uid, r))
    assert [c.rank for c in comms] == [0, 1, 2] and all(c.size == 3 for c in comms)
    err = {}

    def blocked():
        try:
            comms[0].allreduce(np.ones(4, np.float32))
        except gccl.GcclError as e:
            err["e"] = e

    t = threading.Thread(target=blocked)
    t.start()
    time.sleep(0.2)
    comms[1].abort()  # rank 0 waits for ranks 1 and 2, which never come
    t.join(10)
    assert not t.is_alive() and isinstance(err.get("e"), gccl.GcclRemoteError)
    comms[0].destroy()
    comms[2].destroy()
