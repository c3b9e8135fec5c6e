"""Worker functions of test_hook_policies.py (per-parameter policies of the DDP
hook), run in spawned gloo processes; each saves what it saw for the test."""

import copy
import io

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import gccl.torch as gt
from ddp_workers import finish, flat, init

# every policy at once: three overrides (SRA with and without EF, all_gather), the
# main spec for fc2.weight, and biases / LayerNorm dense through layer_min_size
POLICIES = dict(spec="uniform:bits=8", layer_min_size=64,
                overrides={"embed.*": "uniform:bits=4", "fc1.weight": "sign", "out.*": "topk:ratio=0.2"})
# deterministic codecs with error feedback: a continuation is bit-identical
CHECKPOINTED = dict(spec="fp16", layer_min_size=64, overrides=[("embed.*", "topk:ratio=0.1"), ("fc1.*", "sign")])
# its Q is the plan's state, checkpointed with the residuals
POWERSGD = dict(spec="fp16", layer_min_size=64, overrides={"fc2.weight": "powersgd:rank=2"})


class PolicyNet(torch.nn.Module):
    """An embedding, Linear layers with biases and a LayerNorm."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(64, 16)  # 1024
        self.fc1 = torch.nn.Linear(16, 32)  # 512 + 32
        self.norm = torch.nn.LayerNorm(32)  # 32 + 32
        self.fc2 = torch.nn.Linear(32, 32)  # 1024 + 32
        self.out = torch.nn.Linear(32, 8)  # 256 + 8

    def forward(self, x):
        h = self.norm(torch.relu(self.fc1(self.embed(x).mean(1))))
        return self.out(torch.relu(self.fc2(h)))


def make(seed, small_buckets=False):
    torch.manual_seed(seed)
    if small_buckets:  # DDP's own knobs: ~500 floats a bucket, the first one too
        dist._DEFAULT_FIRST_BUCKET_BYTES = 2000
        return DDP(PolicyNet(), bucket_cap_mb=0.002)
    dist._DEFAULT_FIRST_BUCKET_BYTES = 1024 * 1024
    return DDP(PolicyNet())


def train(model, opt, rank, steps, first=0):
    for s in range(first, first + steps):
        g = torch.Generator().manual_seed(1000 * s + rank)  # every rank its own data
        x, y = torch.randint(0, 64, (16, 5), generator=g), torch.randint(0, 8, (16,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()


def sgd(model):
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def run(rank, small_buckets=False, steps=5, **kw):
    """Parameters after `steps` steps with a hook state of kw (none: DDP's allreduce),
    and the state's plans (closed). The state gets model= with overrides, or when
    kw says model="ddp"."""
    model = make(0, small_buckets)
    state = None
    if kw:
        if kw.get("overrides") is not None or kw.get("model") == "ddp":
            kw = dict(kw, model=model)
        state = gt.GcclHookState(kw.pop("spec"), min_compress_numel=0, **kw)
        model.register_comm_hook(state, gt.gccl_hook)
    train(model, sgd(model), rank, steps)
    params = flat(model)
    plans = {}
    if state is not None:
        plans = {i: plan for i, (_, plan) in state._plans.items()}
        state.close()
    return params, plans


def groups(plans):
    """[(policy, packed?)] of every PolicyPlan's groups, bucket by bucket."""
    return [[(g[0], g[3] is not None) for g in plan.groups] for _, plan in sorted(plans.items())]


def policy_training(rank, world, port, out):
    init(rank, world, port)
    res = {}
    res["dense"], _ = run(rank)
    res["policies"], plans = run(rank, **POLICIES)
    res["policies_groups"] = groups(plans)
    res["policies_small_buckets"], plans = run(rank, small_buckets=True, **POLICIES)
    res["small_buckets_groups"] = groups(plans)
    # no policy: the arguments absent, model= with layer_min_size=None and
    # overrides=None, or one override for every parameter (one group covering the
    # bucket, run on DDP's tensor itself)
    for spec in ["uniform:bits=4", "topk:ratio=0.1"]:
        res[(spec, "absent")], plans = run(rank, spec=spec)
        res[(spec, "bare")] = all(not isinstance(p, gt.PolicyPlan) for p in plans.values())
        res[(spec, "none")], _ = run(rank, spec=spec, model="ddp", layer_min_size=None, overrides=None)
        res[(spec, "star")], plans = run(rank, spec=spec, overrides={"*": spec})
        res[(spec, "star_groups")] = groups(plans)
    # powersgd (PowerSgdPlan on transport="torch") for one parameter
    res["powersgd"], plans = run(rank, **POWERSGD)
    res["powersgd_run_groups"] = groups(plans)
    res.update(checkpoint(rank, CHECKPOINTED))
    res.update(checkpoint(rank, POWERSGD, "powersgd_"))
    finish(res, rank, out)


def checkpoint(rank, kw, tag=""):
    """Rollback on the live model through torch.save: after 4 steps save model,
    optimizer and hook state, run 3 steps, load the save and run the same 3
    steps again; then again with the saved residuals zeroed, and without the
    plans' saved state (powersgd's Q)."""
    kw = dict(kw)
    spec = kw.pop("spec")
    model = make(1, small_buckets=True)
    state = gt.GcclHookState(spec, min_compress_numel=0, model=model, **kw)
    model.register_comm_hook(state, gt.gccl_hook)
    opt = sgd(model)
    train(model, opt, rank, 4)
    blob = io.BytesIO()
    torch.save(state.state_dict(), blob)
    saved = ({k: v.clone() for k, v in model.state_dict().items()}, copy.deepcopy(opt.state_dict()), blob.getvalue())
    res = {tag + "saved": torch.load(io.BytesIO(saved[2]))["residuals"],
           tag + "groups": {i: [(g[0], g[1]) for g in plan.groups] for i, (_, plan) in state._plans.items()}}
    train(model, opt, rank, 3, first=4)
    res[tag + "continued"] = flat(model)
    for variant in ("rolled_back", "zero_residuals", "no_state"):
        model.load_state_dict(saved[0])
        opt.load_state_dict(saved[1])
        sd = torch.load(io.BytesIO(saved[2]))
        for e in sd["residuals"].values():
            if variant == "zero_residuals" and "residual" in e:
                e["residual"] = torch.zeros_like(e["residual"])
            if variant == "no_state":
                e.pop("state", None)
        restored = state.restored
        state.load_state_dict(sd)
        train(model, opt, rank, 3, first=4)
        res[tag + variant] = flat(model)
        res[tag + variant + "_restored"] = state.restored - restored
    state.close()
    return res


class Probe(torch.nn.Module):
    """Parameters whose gradients are exactly the inputs: loss = sum(p * x)."""

    def __init__(self):
        super().__init__()
        self.big = torch.nn.Parameter(torch.zeros(40, 50))  # 2000
        self.small = torch.nn.Parameter(torch.zeros(8, 8))  # 64
        self.bias = torch.nn.Parameter(torch.zeros(50))
        self.mid = torch.nn.Parameter(torch.zeros(10, 30))  # 300

    def forward(self, xs):
        return sum((p * x).sum() for p, x in zip(self.parameters(), xs))


def probe_inputs(model, rank, step):
    """Integer-valued gradients, each rank its own: their averages over 2 ranks are exact."""
    g = torch.Generator().manual_seed(7919 * step + rank)
    return [torch.randint(-8, 9, p.shape, generator=g).float() for p in model.parameters()]


def probe_grads(rank, world, steps=2, **kw):
    """{step: {name: averaged gradient}} through DDP (a hook state of kw, if any)."""
    torch.manual_seed(0)
    model = DDP(Probe())
    state = None
    if kw:
        if kw.get("model") == "ddp":
            kw["model"] = model
        elif kw.get("model") == "module":
            kw["model"] = model.module
        state = gt.GcclHookState(kw.pop("spec"), min_compress_numel=0, **kw)
        model.register_comm_hook(state, gt.gccl_hook)
    got = {}
    for step in range(steps):
        model.zero_grad()
        model(probe_inputs(model.module, rank, step)).backward()
        got[step] = {n: p.grad.clone() for n, p in model.module.named_parameters()}
    if state is not None:
        state.close()
    return got


def policy_values(rank, world, port, out):
    init(rank, world, port)
    res = {"exact": {}}
    probe = Probe()
    for step in range(2):
        xs = [sum(probe_inputs(probe, r, step)[i] for r in range(world)) / world for i in range(4)]
        res["exact"][step] = {n: x for (n, _), x in zip(probe.named_parameters(), xs)}
    res["plain"] = probe_grads(rank, world)  # DDP's own allreduce
    # layer_min_size: only `big` (2000 elements) is compressed, with a very lossy
    # codec; it comes before overrides: the 1-D `bias` stays dense
    res["layer_min_size"] = probe_grads(rank, world, spec="sign", layer_min_size=1000, model="module",
                                        overrides={"b*": "sign"})
    # overrides on the DDP object's names (its "module." prefix stripped): first match wins
    res["first_match"] = probe_grads(rank, world, spec="none", model="ddp",
                                     overrides=[("b*", "none"), ("big", "sign"), ("*", "sign")])
    # on the inner module: three groups (sign, fp16 exact on these values, dense)
    res["three_groups"] = probe_grads(rank, world, spec="sign", model="module",
                                      overrides={"mid": "fp16", "small": "none"})
    finish(res, rank, out)
