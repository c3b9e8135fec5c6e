"""DDP communication hooks under torch.multiprocessing spawn (gloo, 2-4
processes): replicas identical, values exact where the codec is, residuals
reset on bucket rebuild, state_dict round trip, and a short convergence check."""

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

import ddp_workers as W
import gccl
import gccl.torch as gt


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(fn, world, tmp_path):
    mp.spawn(fn, args=(world, free_port(), str(tmp_path)), nprocs=world, join=True)
    return [torch.load(os.path.join(tmp_path, "rank%d.pt" % r)) for r in range(world)]


@pytest.mark.parametrize("world", [2, 3, 4])
def test_replicas_identical_for_every_codec(world, tmp_path):
    res = spawn(W.replicas, world, tmp_path)
    for key in ["default", "allreduce_hook"] + W.SPECS:
        for r in range(1, world):
            assert torch.equal(res[r][key], res[0][key]), "%s: rank %d differs from rank 0" % (key, r)
    # spec "none" is torch's allreduce_hook bit for bit; DDP without a hook divides
    # elsewhere (by 3: not always the same bits) and lands within rounding
    assert torch.equal(res[0]["none"], res[0]["allreduce_hook"])
    assert torch.allclose(res[0]["none"], res[0]["default"], rtol=1e-5, atol=1e-7)
    # and the codecs did something: lossy results differ from dense
    for spec in ["fp16", "sign", "topk:ratio=0.01", "powersgd:rank=2"]:
        assert not torch.equal(res[0][spec], res[0]["default"]), spec
    # start_iter: powersgd's dense warm-up is the "none" hook's allreduce, bit for bit
    for r in range(world):
        assert torch.equal(res[r]["powersgd warm-up only"], res[0]["none"]), r
    # 6 steps, the first dense (start_iter=1): topk's 5 others send < 1/10 of dense's
    dense_step = res[0][("none", "bytes")] / 6
    assert (res[0][("topk:ratio=0.01", "bytes")] - dense_step) * 10 < 5 * dense_step
    # powersgd rank 2 on the torch transport: two factors per bucket, far below dense
    assert (res[0][("powersgd:rank=2", "bytes")] - dense_step) * 10 < 5 * dense_step


def test_hook_values_and_residual_reset(tmp_path):
    world = 3
    res = spawn(W.hook_values, world, tmp_path)
    for r in range(world):
        for spec in ["fp16", "topk:ratio=1", "none"]:
            for n in [1, 2, 3, 7, 13, 1031]:
                exact = sum((torch.arange(n) % 5 + q * 2).float() * world for q in range(world)) / world
                assert torch.equal(res[r][(spec, n)], exact), (spec, n, r)
            for dtype in (torch.float64, torch.bfloat16)[:1 if spec == "none" else 2]:
                exact = sum((torch.arange(13) % 5 + q * 2).double() * world for q in range(world)) / world
                got = res[r][(spec, str(dtype))]
                assert got.dtype == dtype and torch.equal(got.double(), exact), (spec, dtype, r)
            # buckets of other layouts at index 0 replace its compressor ("none" has none)
            assert res[r][(spec, "resets")] == (7 if spec != "none" else 0)
        before = res[r]["residual_before"]
        assert before.numel() == 100 and float(before.abs().sum()) > 0
        after = res[r]["residual_after_rebuild"]
        assert after.numel() == 50 and res[r]["resets"] == 1
        # the new layout's residual started at zero: only this call's error is in it
        assert float(after.abs().max()) <= 1.0
    for spec in ["sign", "uniform:bits=8,ef=1"]:
        total_in = sum(res[r][(spec, "in")].double() for r in range(world))
        kept = sum(res[r][(spec, "residual")].double() for r in range(world))
        for r in range(world):
            assert res[r][(spec, "sra")], spec
            assert torch.equal(res[r][(spec, "out")], res[0][(spec, "out")])
        assert torch.allclose(world * res[0][(spec, "out")].double() + kept, total_in, atol=1e-4), spec
        assert float(kept.abs().sum()) > 0  # the codecs did lose something, and kept it
    # SRA's bytes: 2 (p-1) chunk slots per rank, about 2 (p-1)/p of one whole frame;
    # a slot is a chunk's frame (64-byte header) plus room for 4 non-finite values
    # (12 bytes each) and the trailer (8), rounded to 8
    frame = 1000 + 8 * 2 + 64  # uniform 8-bit: a byte per element, 2 buckets' (min, max), header
    assert res[0][("uniform:bits=8,ef=1", "bytes")] <= 2 * (world - 1) / world * frame + 2 * (world - 1) * (64 + 64)


@pytest.mark.parametrize("world", [2, 3])
def test_collectives_per_bucket_and_nonfinite_values(world, tmp_path):
    res = spawn(W.nonfinite_and_collectives, world, tmp_path)
    n = 4099
    for spec, want in [("none", ["all_reduce"]), ("fp16", ["all_gather", "all_to_all_single"]),
                       ("uniform:bits=4", ["all_gather", "all_to_all_single"]),
                       ("sign", ["all_gather", "all_to_all_single"]), ("topk:ratio=0.01", ["all_gather"]),
                       ("randk:ratio=0.05", ["all_gather"])]:
        # SRA: two collectives a bucket, all_gather codecs one, dense one; no size exchange
        assert res[0][(spec, "calls")] == want, (spec, res[0][(spec, "calls")])
        for r in range(world):
            for key in ("few", "many", "after"):
                assert torch.equal(res[r][(spec, key)].view(torch.int32), res[0][(spec, key)].view(torch.int32)), \
                    (spec, key, r)
        few, many, after = res[0][(spec, "few")], res[0][(spec, "many")], res[0][(spec, "after")]
        assert not torch.isfinite(few[5]) and not torch.isfinite(few[n - 2]), spec
        assert int(torch.isfinite(few).sum()) == n - 2, (spec, int(torch.isfinite(few).sum()))  # in the exceptions
        assert not torch.isfinite(many[100:1100]).any(), spec
        assert torch.isfinite(after).all(), spec


def test_bucket_rebuild_and_state_dict_round_trip(tmp_path):
    world = 2
    res = spawn(W.rebuild_and_checkpoint, world, tmp_path)
    for r in range(world):
        # DDP's first iteration has one bucket; its rebuild splits it at bucket_cap_mb
        assert len(res[r]["buckets_first"]) == 1 and len(res[r]["buckets_after"]) >= 2
        assert res[r]["layouts_changed"] and res[r]["resets"] >= 1
        assert res[r]["saved_residual_norm"] > 0
        # rollback on the live model: the same 4 steps again, the same bits
        assert torch.equal(res[r]["rolled_back"], res[r]["continued"])
        assert res[r]["rolled_back_iter"] == 8
        # a fresh model: residuals wait through DDP's first iteration, then all come back
        assert res[r]["waiting_after_1"] == res[r]["saved_count"] >= 2
        assert res[r]["restored_count"] == res[r]["saved_count"] and res[r]["unclaimed"] == 0
        assert not torch.equal(res[r]["no_residuals"], res[r]["restored"])
    for key in ["continued", "restored", "no_residuals"]:
        assert torch.equal(res[0][key], res[1][key]), key


def test_state_checks_its_arguments():
    with pytest.raises(gccl.GcclInvalidArgument, match="transport"):
        gt.GcclHookState("fp16", transport="nccl")
    with pytest.raises(gccl.GcclInvalidArgument, match="unknown codec"):
        gt.GcclHookState("fp17")
    with pytest.raises(gccl.GcclInvalidArgument, match="start_iter"):
        gt.GcclHookState("fp16", start_iter=-1)


def test_topk_with_error_feedback_converges_near_dense(tmp_path):
    """examples/train_digits.py, shortened: topk 1% + EF ends within 3 points of dense."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples"))
    import train_digits as td  # by name: spawned processes import it again
    rows = td.main(["--epochs", "12", "--seeds", "1", "--procs", "2", "--batch", "32", "--out", str(tmp_path),
                    "--codecs", "dense (DDP allreduce)", "topk 1%+EF"])
    dense, topk = rows["dense (DDP allreduce)"], rows["topk 1%+EF"]
    assert dense["mean"] > 90
    assert topk["mean"] >= dense["mean"] - 3, (topk["mean"], dense["mean"])
    assert topk["identical"] and dense["identical"]
    assert topk["bytes"] * 10 < dense["bytes"]


def test_powersgd_per_tensor(tmp_path):
    """A matrix per weight: replicas identical, training changed, the bias of a
    bucket exactly dense, the weight approximated, and each bucket's Q's in
    state_dict; bad combinations refused."""
    world = 2
    res = spawn(W.powersgd_tensors, world, tmp_path)
    for r in range(1, world):
        assert torch.equal(res[r]["trained"], res[0]["trained"])
        assert torch.equal(res[r]["bucket_out"], res[0]["bucket_out"])
    exact = sum(res[r]["bucket_in"] for r in range(world)) / world
    out = res[0]["bucket_out"]
    assert torch.equal(out[6000:], exact[6000:])  # the bias went dense: exact for 2 ranks
    assert torch.allclose(out[:6000], exact[:6000], rtol=1e-4, atol=1e-3)  # a rank-1 sum comes back
    assert res[0]["saved_states"] and all(n == 2 for n in res[0]["saved_states"])  # Net's two weights
    # 6 steps, the first dense: each of the 5 others sends P's, Q's and biases,
    # (300 + 10) 2 + (20 + 300) 2 + 310 floats, a sixth of dense's 9310
    dense_step = 2 * (world - 1) / world * 4 * sum(p.numel() for p in W.Net().parameters())
    assert res[0]["bytes"] - dense_step == 5 * 1570 * 4 * 2 * (world - 1) // world
    for bad in [dict(powersgd_per_tensor=1), dict(layer_min_size=10, powersgd_per_tensor=True)]:
        with pytest.raises(gccl.GcclInvalidArgument, match="powersgd_per_tensor"):
            gt.GcclHookState("powersgd", **bad)
    with pytest.raises(gccl.GcclInvalidArgument, match="powersgd_per_tensor"):
        gt.GcclHookState("fp16", powersgd_per_tensor=True)
