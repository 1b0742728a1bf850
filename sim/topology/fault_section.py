"""The optional ``faults`` section of a topology file (docs/topology.md): slow GPUs or nodes,
failed NICs, degraded links, in the command-line syntax of :mod:`sim.faults`."""

from __future__ import annotations

from sim.errors import InputError, UsageError
from sim.faults import Faults, parse_link, parse_nic, parse_slow
from sim.files.inputs import show
from sim.topology.sections import Section
from sim.topology.spec import Topology


def read_faults(s: Section, topo: Topology) -> Faults:
    """The optional ``faults`` section (docs/topology.md): slow GPUs or nodes, failed NICs,
    degraded links, in the command-line syntax of :mod:`sim.faults`."""
    slow: dict[int, float] = {}
    for key, per_node in (("slow_gpus", False), ("slow_nodes", True)):
        v = s.raw(key, False, None)
        if v is None:
            continue
        if not isinstance(v, dict):
            s.r.fail(s.path + (key,), f"expected a mapping INDEX: FACTOR, got {show(v)}")
        for idx, fac in v.items():
            try:
                g, f = parse_slow(f"{idx}:{fac}", key)
            except UsageError as e:
                s.r.fail(s.path + (key, idx), e.message)
            gpus = range(g * topo.gpus_per_node, (g + 1) * topo.gpus_per_node) if per_node \
                else (g,)
            slow.update(dict.fromkeys(gpus, f))
    failed = set()
    v = s.raw("failed_nics", False, None)
    if v is not None:
        if not isinstance(v, list):
            s.r.fail(s.path + ("failed_nics",), f"expected a list of NODE.K strings, got {show(v)}")
        for i, item in enumerate(v):
            try:
                failed.add(parse_nic(str(item), "failed_nics"))
            except UsageError as e:
                s.r.fail(s.path + ("failed_nics", i), e.message)
    degraded = {}
    v = s.raw("degraded_links", False, None)
    if v is not None:
        if not isinstance(v, dict):
            s.r.fail(s.path + ("degraded_links",),
                     f"expected a mapping SPEC: FACTOR, got {show(v)}")
        for spec, fac in v.items():
            try:
                link, f = parse_link(f"{spec}:{fac}", "degraded_links")
            except UsageError as e:
                s.r.fail(s.path + ("degraded_links", spec), e.message)
            degraded[link] = f
    s.done()
    faults = Faults(slow, frozenset(failed), degraded)
    try:
        faults.check(topo)
    except InputError as e:
        s.r.fail(s.path, e.message)
    return faults
