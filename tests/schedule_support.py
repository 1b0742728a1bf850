"""Independent timing of a schedule table for the schedule tests (no SimPy): each pass starts
when its stage is free and its input has been produced (free communication)."""

from sim.pipeline.schedules import schedule_table, virtual_stage


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


def reference_interleaved(p: int, v: int, m: int, f: int, b: int, transfer: int = 0,
                          extra=None) -> tuple[int, list[int]]:
    """``(iteration end, per-stage waiting time)`` of the interleaved schedule timed by list
    scheduling: a pass starts when its stage is free and its input has arrived, ``transfer`` ns
    after the producing pass ended on another stage (sends never block the sender, as in the
    engine). Passes cost ``f`` (forward) and ``b`` (whole backward) ns per chunk, plus
    ``extra(kind, virtual_stage, microbatch)`` ns. A stage's waiting time is the iteration
    minus its own pass time."""
    table = schedule_table("interleaved", p, m, v)
    last = p * v - 1
    cost = {"F": f, "B": b}
    end: dict = {}
    free, nxt, work = [0] * p, [0] * p, [0] * p
    while any(nxt[r] < len(table[r]) for r in range(p)):
        for r in range(p):
            while nxt[r] < len(table[r]):
                op = table[r][nxt[r]]
                vs = virtual_stage("interleaved", p, r, op.chunk)
                if op.kind == "F":
                    dep = ("F", vs - 1, op.microbatch) if vs > 0 else None
                else:
                    dep = ("B", vs + 1, op.microbatch) if vs < last else ("F", vs, op.microbatch)
                if dep is not None and dep not in end:
                    break
                ready = 0 if dep is None else end[dep] + (transfer if dep[1] % p != r else 0)
                d = cost[op.kind] + (extra(op.kind, vs, op.microbatch) if extra else 0)
                free[r] = max(free[r], ready) + d
                work[r] += d
                end[op.kind, vs, op.microbatch] = free[r]
                nxt[r] += 1
    t = max(free)
    return t, [t - w for w in work]
