"""Per-parameter policies of gccl_hook (torch.py's docstring says what they are):
the overrides argument checked, a bucket's parameters grouped by policy from
DDP's bucket API, and the plan that runs one bucket's groups one after another.
"""

import torch
import torch.distributed as dist

from .compressor import Compressor
from .errors import GcclError, GcclInvalidArgument, GcclInvalidUsage


def parse_overrides(overrides):
    """overrides (None, a dict or a sequence of (pattern, spec) pairs) as a checked
    list of (pattern, spec), in the user's order (the first match wins)."""
    if overrides is None:
        return []
    if isinstance(overrides, dict):
        items = list(overrides.items())
    elif isinstance(overrides, (list, tuple)):
        items = list(overrides)
    else:
        raise GcclInvalidArgument("invalid argument", "overrides must be a dict or a list of (pattern, spec) pairs, "
                                  "not %s" % type(overrides).__name__)
    checked = []
    for item in items:
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise GcclInvalidArgument("invalid argument", "overrides: each entry must be a (pattern, spec) pair, "
                                      "not %r" % (item,))
        pattern, spec = item
        if not isinstance(pattern, str):
            raise GcclInvalidArgument("invalid argument", "overrides: a pattern must be a str (a glob on parameter "
                                      "names), not %s" % type(pattern).__name__)
        if not isinstance(spec, str):
            raise GcclInvalidArgument("invalid argument", "overrides[%r]: the spec must be a str, not %s" %
                                      (pattern, type(spec).__name__))
        try:
            Compressor(spec, 1).destroy()  # a bad spec fails here, with gccl's message
        except GcclError as e:
            raise type(e)(e.name, "overrides[%r]: %s" % (pattern, e.message)) from None
        checked.append((pattern, spec))
    return checked


def _scatter(src, runs, dst):
    """dst's runs [(offset, count)] = src's consecutive elements."""
    at = 0
    for off, k in runs:
        dst[off:off + k].copy_(src[at:at + k])
        at += k


def _gather(src, runs, out=None):
    """src's runs [(offset, count)], one after the other (into out when given)."""
    parts = [src[off:off + k] for off, k in runs]
    return torch.cat(parts) if out is None else torch.cat(parts, out=out)


class DensePlan:
    """A dense group of a PolicyPlan: the average over ranks of a tensor that group
    owns (so the backend never holds a Python tensor it might outlive), in the
    worker's job: gcclAllReduce ("gccl"), or torch's allreduce of buf / p on the
    hook's own group, the same operations as the hook's dense buckets on DDP's group."""

    def __init__(self, n, element_size, p, group=None, comm=None):
        self.p, self.group, self.comm = p, group, comm
        self.wire_bytes = 2 * (p - 1) * n * element_size // p  # a ring allreduce's share

    def run(self, buf, stream=None):
        if self.comm is not None:
            self.comm.allreduce(buf, buf, op="avg", stream=stream)
            if stream is not None:
                stream.synchronize()
            return buf
        buf.div_(self.p)
        dist.all_reduce(buf, group=self.group)
        return buf

    def destroy(self):
        pass


class PolicyPlan:
    """A bucket under per-parameter policies: one plan per distinct policy (a spec,
    or None for dense) over its parameters' elements packed into one tensor, run
    in the order of the groups' first offsets (the same on every rank). A group
    that covers the whole bucket runs on the bucket's tensor, unpacked. Its
    residual is the bucket's: each group's at its parameters' offsets, zeros at
    dense ones; its state is a list, one entry per group (None: nothing)."""

    def __init__(self, policies, groups, n, dtype, device, make, ef_on):
        # groups: [(policy, runs)] (policy_groups); make(policy, count) -> plan;
        # ef_on(spec): whether that spec's codec keeps a residual
        self.policies, self.n, self.dtype = policies, n, dtype
        self.groups = []
        for policy, runs in groups:
            count = sum(k for _, k in runs)
            # a whole bucket of one spec runs unpacked (all dense goes through _dense:
            # the backend must not hold DDP's tensor, _hook_worker.py)
            whole = runs == [(0, n)] and policy is not None
            packed = None if whole else torch.empty(count, dtype=dtype, device=device)
            self.groups.append((policy, runs, make(policy, count), packed))
        self.wire_bytes = sum(plan.wire_bytes for _, _, plan, _ in self.groups)
        self.ef_on = ef_on
        self.ef = any(policy is not None and ef_on(policy) for policy, _ in groups)

    def run(self, buf, stream=None):
        extra = () if stream is None else (stream,)  # gccl's plans take the gccl stream
        for _, runs, plan, packed in self.groups:
            if packed is None:
                out = plan.run(buf, *extra)
                if out is not buf:
                    buf.copy_(out)
            else:
                _gather(buf, runs, out=packed)
                _scatter(plan.run(packed, *extra), runs, buf)
        return buf

    def get_residual(self):
        out = torch.zeros(self.n, dtype=self.dtype)
        for policy, runs, plan, _ in self.groups:
            if policy is not None:
                _scatter(torch.as_tensor(plan.get_residual()).cpu(), runs, out)
        return out

    def set_residual(self, values):
        values = torch.as_tensor(values)
        for policy, runs, plan, _ in self.groups:
            if policy is not None and self.ef_on(policy):  # a codec without error feedback has none to set
                plan.set_residual(_gather(values, runs))

    def get_state(self):
        states = [state_of(plan) for _, _, plan, _ in self.groups]
        return states if any(st is not None for st in states) else None

    def set_state(self, states):
        for (_, _, plan, _), st in zip(self.groups, states):
            if st is not None:
                plan.set_state(st)

    def destroy(self):
        for _, _, plan, _ in self.groups:
            plan.destroy()


def state_of(plan):
    """plan.get_state() (powersgd's Q), or None where the plan has none."""
    st = plan.get_state() if hasattr(plan, "get_state") else None
    return None if st is None or len(st) == 0 else st


def policy_groups(bucket, policies):
    """[(policy, runs)] of a bucket whose parameters (bucket.parameters(), in
    order) have `policies`: runs are the (offset, count) slices of the bucket's
    buffer that policy's parameters occupy, found from their gradient views
    (torch.py's docstring), adjacent ones merged; the groups in the order of
    their first offsets, the same on every rank."""
    buf = bucket.buffer()
    n, base, size = buf.numel(), buf.data_ptr(), buf.element_size()
    runs = {}  # policy -> [(offset, count)]
    for g, policy in zip(bucket.gradients(), policies):
        off = (g.data_ptr() - base) // size
        if g.numel() == 0:
            continue
        if not (g.is_contiguous() and 0 <= off and off + g.numel() <= n):
            raise GcclInvalidUsage("invalid usage", "a gradient of DDP's bucket is not a contiguous view of its buffer")
        runs.setdefault(policy, []).append((off, g.numel()))
    groups = []
    for policy, rs in runs.items():
        merged = []
        for off, k in sorted(rs):  # adjacent parameters: one slice
            if merged and merged[-1][0] + merged[-1][1] == off:
                merged[-1] = (merged[-1][0], merged[-1][1] + k)
            else:
                merged.append((off, k))
        groups.append((policy, merged))
    return sorted(groups, key=lambda g: g[1][0][0])
