"""Independent timing of a schedule table for the schedule tests (no SimPy): each pass starts
when its stage is free and its input has been produced (free communication)."""

from sim.schedules import schedule_table, virtual_stage


def reference_end_ns(name: str, p: int, m: int, f: int, b: int, w: int, vpp: int = 1) -> int:
    """End of the last pass of schedule ``name`` (``p`` stages, ``m`` microbatches, ``vpp``
    chunks per stage) with forward, input-gradient and weight-gradient passes of ``f``, ``b``,
    ``w`` ns each; passes are placed on virtual stages by :func:`virtual_stage`."""
    cost = {"F": f, "B": b, "W": w}
    table = schedule_table(name, p, m, vpp) if vpp > 1 else schedule_table(name, p, m)
    last = p * vpp - 1
    end: dict = {}
    free, nxt = [0] * p, [0] * p

    def need(vs, op):
        if op.kind == "W":
            return [("B", vs, op.microbatch)]
        if op.kind == "F":
            return [("F", vs - 1, op.microbatch)] if vs > 0 else []
        return [("B", vs + 1, op.microbatch)] if vs < last else [("F", vs, op.microbatch)]

    while any(nxt[r] < len(table[r]) for r in range(p)):
        for r in range(p):
            while nxt[r] < len(table[r]):
                op = table[r][nxt[r]]
                vs = virtual_stage(name, p, r, op.chunk)
                deps = need(vs, op)
                if any(d not in end for d in deps):
                    break
                free[r] = max([free[r]] + [end[d] for d in deps]) + cost[op.kind]
                end[op.kind, vs, op.microbatch] = free[r]
                nxt[r] += 1
    return max(free)
