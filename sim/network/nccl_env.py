"""NCCL_ALGO and NCCL_PROTO as NCCL parses them (``--nccl-algo``, ``--nccl-proto``).

Syntax (NVIDIA/nccl v2.30.7 src/graph/tuning.cc:36-136, ``parseList``): ``;``-separated
entries ``[function:]list``; a list is comma-separated names, or ``^`` followed by names to
enable everything else; only the first entry may omit the function (it then applies to all).
Names compare without case. Examples: ``ring,tree``; ``^nvls``; ``allreduce:tree;allgather:ring``.

The result restricts what ``auto`` chooses among, per collective. NCCL's algorithms that the
model does not have (CollNetChain, PAT) may be named; enabling only
those for a collective is refused, since nothing modelled would be left to run it.
"""

from __future__ import annotations

from sim.comm import CollKind
from sim.errors import UsageError

# ncclFuncStr (the collectives the model runs; NCCL also names Reduce, SendRecv)
FUNCS = {"broadcast": CollKind.BROADCAST, "allgather": CollKind.ALLGATHER,
         "reducescatter": CollKind.REDUCESCATTER, "allreduce": CollKind.ALLREDUCE}
_NCCL_FUNCS = (*FUNCS, "reduce", "sendrecv")
# ncclAlgoStr → the model's name (None: an NCCL algorithm the model does not have)
ALGOS = {"tree": "tree", "ring": "ring", "collnetdirect": "collnet", "collnetchain": None,
         "nvls": "nvls", "nvlstree": "nvlstree", "pat": None}
PROTOS = {"ll": "LL", "ll128": "LL128", "simple": "Simple"}


def _parse(text: str, names: dict, flag: str) -> dict[str, frozenset[str]]:
    """Per NCCL function name: the enabled element names (NCCL's lower-case spelling)."""
    enabled = {f: set(names) for f in _NCCL_FUNCS}
    entries = [e for e in text.split(";")]
    for i, entry in enumerate(entries):
        prefix, sep, elems = entry.partition(":")
        if not sep:
            if i > 0:
                raise UsageError(f"{text!r}: every entry but the first needs a function prefix "
                                 "(as NCCL requires)", field=flag)
            prefix, elems = "", entry
        prefix = prefix.strip().lower()
        if prefix and prefix not in _NCCL_FUNCS:
            raise UsageError(f"unknown function {prefix!r} (NCCL's: {', '.join(_NCCL_FUNCS)})",
                             field=flag)
        neg = elems.strip().startswith("^")
        listed = {x.strip().lower() for x in elems.strip().lstrip("^").split(",")}
        for x in listed:
            if x not in names:
                raise UsageError(f"unknown name {x!r} (NCCL's: {', '.join(names)})", field=flag)
        for f in ([prefix] if prefix else _NCCL_FUNCS):
            enabled[f] = set(names) - listed if neg else set(listed)
    return {f: frozenset(v) for f, v in enabled.items()}


def parse_nccl_algo(text: str | None) -> dict[CollKind, frozenset[str]] | None:
    """NCCL_ALGO → per collective the model's algorithms ``auto`` may choose (None: all)."""
    if text is None:
        return None
    out = {}
    for f, names in _parse(text, ALGOS, "--nccl-algo").items():
        if f not in FUNCS:
            continue
        modelled = frozenset(ALGOS[x] for x in names if ALGOS[x] is not None)
        if not modelled:
            raise UsageError(f"{text!r} leaves {f} no algorithm the model has (ring, tree, nvls, "
                             "nvlstree, collnetdirect)",
                             field="nccl_algo")
        out[FUNCS[f]] = modelled
    return out


def parse_nccl_proto(text: str | None) -> dict[CollKind, frozenset[str]] | None:
    """NCCL_PROTO → per collective the protocols ``auto`` may choose (None: all)."""
    if text is None:
        return None
    out = {}
    for f, names in _parse(text, PROTOS, "--nccl-proto").items():
        if f not in FUNCS:
            continue
        if not names:
            raise UsageError(f"{text!r} leaves {f} no protocol", field="nccl_proto")
        out[FUNCS[f]] = frozenset(PROTOS[x] for x in names)
    return out
