"""Per-parameter policies of the DDP hook (GcclHookState's model, layer_min_size
and overrides): replicas identical, dense parameters exactly dense, overrides'
first match, the no-policy path unchanged, checkpoints of composite plans,
argument checks; transport="gccl" on thread ranks."""

import os
import socket

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

import gccl
import gccl.torch as gt
import policy_workers as PW
from conftest import run_ranks

PROBE = ["big", "small", "bias", "mid"]


def spawn(fn, world, out):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(fn, args=(world, port, str(out)), nprocs=world, join=True)
    return [torch.load(os.path.join(out, "rank%d.pt" % r)) for r in range(world)]


@pytest.fixture(scope="module")
def training(tmp_path_factory):
    """policy_training's results by world size, each spawned once."""
    done = {}

    def get(world):
        if world not in done:
            done[world] = spawn(PW.policy_training, world, tmp_path_factory.mktemp("training%d" % world))
        return done[world]

    return get


@pytest.mark.parametrize("world", [2, 3])
def test_policies_keep_replicas_identical(world, training):
    res = training(world)
    keys = ["dense", "policies", "policies_small_buckets", "continued", "rolled_back"]
    keys += [(spec, v) for spec in ["uniform:bits=4", "topk:ratio=0.1"] for v in ["absent", "none", "star"]]
    keys += ["powersgd", "powersgd_continued", "powersgd_rolled_back"]
    for key in keys:
        for r in range(1, world):
            assert torch.equal(res[r][key], res[0][key]), "%s: rank %d differs from rank 0" % (key, r)
    r0 = res[0]
    # the codecs did something
    assert not torch.equal(r0["policies"], r0["dense"])
    assert not torch.equal(r0["policies_small_buckets"], r0["dense"])
    # one bucket: a group per policy (None: dense), each packed
    [one] = r0["policies_groups"]
    want = [None, "uniform:bits=4", "sign", "topk:ratio=0.2", "uniform:bits=8"]
    assert sorted((p for p, _ in one), key=str) == sorted(want, key=str), one
    assert all(packed for _, packed in one)
    # small buckets: the embedding's bucket is all one policy and runs unpacked
    small = r0["small_buckets_groups"]
    assert len(small) >= 3 and [("uniform:bits=4", False)] in small, small
    assert any(len(g) > 1 for g in small), small


def test_no_policy_path_and_checkpoints(training):
    r0 = training(2)[0]
    for spec in ["uniform:bits=4", "topk:ratio=0.1"]:
        # arguments absent, model= with layer_min_size=None and overrides=None, or
        # one override for every parameter (one unpacked group): the same bits
        assert r0[(spec, "bare")], spec
        assert torch.equal(r0[(spec, "absent")], r0[(spec, "none")]), spec
        assert torch.equal(r0[(spec, "absent")], r0[(spec, "star")]), spec
        assert r0[(spec, "star_groups")] == [[(spec, False)]], r0[(spec, "star_groups")]
    # a composite plan's residual: the bucket's size, zeros at dense offsets,
    # the compressed groups' error elsewhere
    for i, entry in r0["saved"].items():
        res = entry["residual"]
        groups = r0["groups"][i]
        assert res.numel() == sum(k for _, runs in groups for _, k in runs)
        for policy, runs in groups:
            part = torch.cat([res[o:o + k] for o, k in runs])
            if policy is None or policy == "fp16":  # fp16: no error feedback
                assert float(part.abs().sum()) == 0, (i, policy)
            else:
                assert float(part.abs().sum()) > 0, (i, policy)
    assert any(p is None for g in r0["groups"].values() for p, _ in g)
    # the continuation is bit-identical; the residuals mattered
    assert r0["rolled_back_restored"] == len(r0["saved"]) >= 2
    assert torch.equal(r0["rolled_back"], r0["continued"])
    assert not torch.equal(r0["zero_residuals"], r0["continued"])
    # powersgd's Q (the plan's state) travels too, and mattered
    groups = r0["powersgd_run_groups"]
    assert any(p == "powersgd:rank=2" for g in groups for p, _ in g), groups
    assert not torch.equal(r0["powersgd"], r0["dense"])
    assert any("state" in e for e in r0["powersgd_saved"].values())
    assert torch.equal(r0["powersgd_rolled_back"], r0["powersgd_continued"])
    assert not torch.equal(r0["powersgd_no_state"], r0["powersgd_continued"])


def test_dense_parameters_are_dense_and_overrides_first_match(tmp_path):
    world = 2
    res = spawn(PW.policy_values, world, tmp_path)
    for r in range(world):
        exact, plain = res[r]["exact"], res[r]["plain"]
        for step in range(2):
            for n in PROBE:
                assert torch.equal(plain[step][n], exact[step][n]), (n, step)  # integer inputs: exact sums

            def check(run, dense):
                got = res[r][run][step]
                for n in PROBE:
                    assert torch.equal(got[n], res[0][run][step][n]), (run, n, "rank %d" % r)
                    assert torch.equal(got[n], exact[step][n]) == (n in dense), (run, n, step)

            # only `big` is >= 1000 elements and 2-D; "b*" -> sign does not reach the 1-D `bias`
            check("layer_min_size", ["small", "bias", "mid"])
            check("first_match", ["big", "bias"])  # "b*" -> none came first; "mid", "small" -> "*" -> sign
            check("three_groups", ["small", "mid"])  # none; fp16 is exact on these values; the rest sign


def test_state_checks_policy_arguments():
    model = torch.nn.Linear(4, 4)
    for bad in [-1, 2.5, True, "8"]:
        with pytest.raises(gccl.GcclInvalidArgument, match="layer_min_size"):
            gt.GcclHookState("fp16", layer_min_size=bad)
    with pytest.raises(gccl.GcclInvalidArgument, match=r"overrides\['weight'\].*fp17"):
        gt.GcclHookState("fp16", model=model, overrides={"weight": "fp17"})
    with pytest.raises(gccl.GcclInvalidArgument, match="bits=99"):
        gt.GcclHookState("fp16", model=model, overrides=[("*", "fp16"), ("weight", "uniform:bits=99")])
    with pytest.raises(gccl.GcclInvalidArgument, match="model="):
        gt.GcclHookState("fp16", overrides={"*": "sign"})
    with pytest.raises(gccl.GcclInvalidArgument, match="pattern must be a str"):
        gt.GcclHookState("fp16", model=model, overrides={3: "sign"})
    with pytest.raises(gccl.GcclInvalidArgument, match="spec must be a str"):
        gt.GcclHookState("fp16", model=model, overrides={"*": 8})
    with pytest.raises(gccl.GcclInvalidArgument, match="pair"):
        gt.GcclHookState("fp16", model=model, overrides=[("*",)])
    with pytest.raises(gccl.GcclInvalidArgument, match="overrides must be"):
        gt.GcclHookState("fp16", model=model, overrides="*")
    with pytest.raises(gccl.GcclInvalidArgument, match="model must be"):
        gt.GcclHookState("fp16", model="net", layer_min_size=10)


class ParamBucket:
    """A stand-in for DDP's GradBucket over a module's parameters, laid out in
    reverse order (as DDP's rebuilt buckets are) in one flat tensor."""

    def __init__(self, module, grads):
        self.params = list(module.parameters())[::-1]
        self.buf = torch.cat([g.flatten() for g in grads[::-1]])
        self.views, off = [], 0
        for p in self.params:
            self.views.append(self.buf[off:off + p.numel()].view(p.shape))
            off += p.numel()

    def buffer(self):
        return self.buf

    def index(self):
        return 0

    def is_last(self):
        return True

    def parameters(self):
        return self.params

    def gradients(self):
        return self.views


def test_gccl_transport_policy_groups():
    """transport="gccl" on thread ranks: dense and fp16 groups exact, sign and
    powersgd ones lossy, every rank the same bits."""
    p = 2
    comms = gccl.Comm.init_all(p)
    model = PW.Probe()
    exact = [sum(PW.probe_inputs(model, r, step)[i] for r in range(p)) / p for step in range(2) for i in range(4)]

    def rank(r):
        m = PW.Probe()
        state = gt.GcclHookState("sign", transport="gccl", comm=comms[r], min_compress_numel=0, model=m,
                                 overrides={"mid": "fp16", "small": "none", "big": "powersgd:rank=2"})
        got = []
        for step in range(2):
            bucket = ParamBucket(m, PW.probe_inputs(m, r, step))
            out = gt.gccl_hook(state, bucket).wait()
            got += [v.clone() for v in bucket.views[::-1]]  # registration order
            assert out is bucket.buf
        # offset order (parameters reversed): mid, bias, small, big; "none" is dense
        assert [g[0] for g in state._plans[0][1].groups] == ["fp16", "sign", None, "powersgd:rank=2"]
        state.close()
        return got

    try:
        got = run_ranks(p, rank)
    finally:
        for c in comms:
            c.destroy()
    for step in range(2):
        for i, n in enumerate(PROBE):
            k = 4 * step + i
            assert torch.equal(got[1][k], got[0][k]), (n, step)
            assert torch.equal(got[0][k], exact[k]) == (n in ("small", "mid")), (n, step)


class _WithState:
    """A plan with a state of its own (as powersgd's Q), to see it checkpointed."""

    def __init__(self, plan, tag):
        self.plan, self.wire_bytes, self.q = plan, plan.wire_bytes, np.full(3, tag, np.float32)

    def __getattr__(self, name):
        return getattr(self.plan, name)

    def get_state(self):
        return self.q.copy()

    def set_state(self, values):
        self.q = np.asarray(values, np.float32).copy()


def test_plan_state_in_checkpoints():
    """state_dict saves each plan's get_state() (a list per policy group) and
    load_state_dict gives it back with set_state; older checkpoints load."""
    [comm] = gccl.Comm.init_all(1)
    m = PW.Probe()
    grads = [torch.ones(q.shape) for q in m.parameters()]

    def state(tags, **kw):
        st = gt.GcclHookState("topk:ratio=0.5", transport="gccl", comm=comm, min_compress_numel=0, **kw)
        make = st._make_plan
        st._make_plan = lambda spec, *a: _WithState(make(spec, *a), tags.pop(0))
        return st

    try:
        policies = dict(model=m, overrides={"mid": "sign"}, layer_min_size=100)
        a = state([1.0, 2.0], **policies)
        gt.gccl_hook(a, ParamBucket(m, grads)).wait()
        sd = a.state_dict()
        # groups in offset order (reversed parameters): mid (sign), small+bias dense, big (topk)
        assert [g[0] for g in a._plans[0][1].groups] == ["sign", None, "topk:ratio=0.5"]
        st = sd["residuals"][0]["state"]
        assert [None if s is None else s.tolist() for s in st] == [[1, 1, 1], None, [2, 2, 2]]
        assert sd["layer_min_size"] == 100 and sd["overrides"] == [["mid", "sign"]]
        b = state([5.0, 6.0], **policies)
        b.load_state_dict(sd)
        gt.gccl_hook(b, ParamBucket(m, grads)).wait()
        plans = [g[2] for g in b._plans[0][1].groups]
        assert plans[0].q.tolist() == [1, 1, 1] and plans[2].q.tolist() == [2, 2, 2] and b.restored == 1
        # other policies than the checkpoint's are refused; a checkpoint from before policies loads
        other = state([7.0], model=m, overrides={"mid": "sign"})
        with pytest.raises(gccl.GcclInvalidArgument, match="layer_min_size"):
            other.load_state_dict(sd)
        other.close()
        old = dict(sd)
        del old["layer_min_size"], old["overrides"]
        for e in old["residuals"].values():
            e.pop("state")
        c = state([8.0, 9.0], **policies)
        c.load_state_dict(old)
        gt.gccl_hook(c, ParamBucket(m, grads)).wait()
        assert c.restored == 1 and [g[2].q.tolist() for g in c._plans[0][1].groups if g[0]] == [[8] * 3, [9] * 3]
        # a bucket without policies: the plan's own state, not a list
        d = state([4.0])
        gt.gccl_hook(d, ParamBucket(m, grads)).wait()
        assert d.state_dict()["residuals"][0]["state"].tolist() == [4, 4, 4]
        for s in (a, b, c, d):
            s.close()
    finally:
        comm.destroy()
