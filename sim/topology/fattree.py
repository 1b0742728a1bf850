"""Geometry and routing arithmetic of a fat tree (folded Clos) between leaf switches.

Switch names follow :mod:`sim.topology.cluster`: ``("sw", level, block, j)`` is switch ``j`` of
the level-``level`` sub-tree ``block`` (level 1 = leaf). The level-``l`` block of a leaf is
``leaf // spans[l]``. Single-path routings number the equal-cost paths between two leaves
and pick path ``value mod paths``, where the route's value is the CRC-32 of a flow key (ECMP
hashing) or the destination's port index D (D-mod-K, OpenSM's fat-tree routing: the up-port
at level l is ``⌊D / ∏ up-ports below l⌋ mod up-ports of l``, the mixed-radix digits of
``D mod paths``); spreading routings (adaptive, spray) use one trunk link per sub-tree and
direction, ``("up", level, block)`` / ``("down", level, block)``. No faults here: the cluster
applies them.
"""

from __future__ import annotations

from sim.topology.spec import FabricSpec


class FatTree:
    """Arithmetic on the switch levels of ``fabric`` (no links, no state but caches)."""

    def __init__(self, fabric: FabricSpec):
        self.fabric = fabric
        self.up = [x.up for x in fabric.levels]  # up-ports per switch of each level
        # level-l block of a leaf = leaf // spans[l] (spans[1] = 1; index 0 unused)
        self.spans = [1, 1]
        for x in fabric.levels[1:]:
            self.spans.append(self.spans[-1] * x.down)
        self._ecmp: dict[tuple[int, int], int] = {}  # equal-cost paths between two leaves

    def joined(self, leaf_a: int, leaf_b: int) -> bool:
        """Whether the two leaves meet below the top level (false across rails of a
        rail-only fabric)."""
        top = len(self.spans) - 1
        return leaf_a // self.spans[top] == leaf_b // self.spans[top]

    def level(self, leaf_a: int, leaf_b: int) -> int:
        """Lowest switch level whose sub-tree holds both leaves (1 = same leaf)."""
        for level in range(1, len(self.spans)):
            if leaf_a // self.spans[level] == leaf_b // self.spans[level]:
                return level
        raise ValueError(f"leaves {leaf_a} and {leaf_b} are not connected")

    def paths_below(self, level: int) -> int:
        """Equal-cost paths from a leaf up to level ``level`` (product of the up-port counts
        of the levels below it); also the number of parallel links in a level's trunk."""
        n = 1
        for x in self.up[: level - 1]:
            n *= x
        return n

    def equal_cost_paths(self, leaf_a: int, leaf_b: int) -> int:
        """Number of equal-cost (shortest) paths between two leaves."""
        return self.paths_below(self.level(leaf_a, leaf_b))

    def switches(self, leaf_a: int, leaf_b: int, choice: int) -> list[tuple]:
        """Switch sequence leaf_a → … → leaf_b for ECMP path number ``choice``."""
        top = self.level(leaf_a, leaf_b)
        up_path = [("sw", 1, leaf_a, 0)]
        j = 0
        for level in range(2, top + 1):
            u_cnt = self.up[level - 2]
            j = j * u_cnt + choice % u_cnt
            choice //= u_cnt
            up_path.append(("sw", level, leaf_a // self.spans[level], j))
        down = []
        for level in range(top - 1, 0, -1):
            j //= self.up[level - 1]
            down.append(("sw", level, leaf_b // self.spans[level], j))
        return up_path + down

    def link_names(self, leaf_a: int, leaf_b: int, value: int | None
                   ) -> list[tuple[tuple, tuple]]:
        """Switch-to-switch links from ``leaf_a`` to ``leaf_b``: the trunks of a spreading
        routing (``value`` None), else path number ``value mod paths``."""
        if leaf_a == leaf_b:
            return []
        if value is None:
            top = self.level(leaf_a, leaf_b)
            out = []
            for level in range(1, top):
                out.append((("up", level, leaf_a // self.spans[level]), ("sw-up", level + 1)))
            for level in range(top - 1, 0, -1):
                out.append((("down", level, leaf_b // self.spans[level]), ("sw-down", level)))
            return out
        meta = self._ecmp.get((leaf_a, leaf_b))
        if meta is None:
            meta = self._ecmp[(leaf_a, leaf_b)] = self.equal_cost_paths(leaf_a, leaf_b)
        choice = value % meta if meta > 1 else 0
        nodes = self.switches(leaf_a, leaf_b, choice)
        return [(nodes[i], nodes[i + 1]) for i in range(len(nodes) - 1)]

    def count_links(self, la, lb, values, wanted: dict[tuple, int]) -> dict[int, int]:
        """For many routes at once (numpy arrays of source and destination leaves, the route
        value of each route as an int64 array, or None for a spreading routing): how many use
        each of the ``wanted`` switch links (name → id). The same choices as
        :meth:`link_names`, vectorised."""
        import numpy as np

        spans, up = self.spans, self.up
        levels = len(spans) - 1
        top = np.zeros(len(la), dtype=np.int64)
        for lv in range(levels, 0, -1):  # lowest common level wins
            top = np.where(la // spans[lv] == lb // spans[lv], lv, top)
        if values is None:
            out: dict[int, int] = {}
            for (u, _v), i in wanted.items():
                if u[0] in ("up", "down"):
                    lv, block = u[1], u[2]
                    ends = la if u[0] == "up" else lb
                    out[i] = int(((top > lv) & (ends // spans[lv] == block)).sum())
            return out
        p = np.asarray([1] + [self.paths_below(lv) for lv in range(1, levels + 1)])
        choice = np.asarray(values, dtype=np.int64) % p[top]
        jup = {1: np.zeros(len(la), dtype=np.int64)}  # switch index on the way up
        rest = choice.copy()
        for lv in range(2, levels + 1):
            jup[lv] = jup[lv - 1] * up[lv - 2] + rest % up[lv - 2]
            rest //= up[lv - 2]
        jtop = np.zeros(len(la), dtype=np.int64)
        for lv in range(1, levels + 1):
            jtop = np.where(top == lv, jup[lv], jtop)
        return {i: self._count_switch_link(u, v, la, lb, top, jup, jtop, p)
                for (u, v), i in wanted.items() if u[0] == "sw" and v[0] == "sw"}

    def _count_switch_link(self, u: tuple, v: tuple, la, lb, top, jup, jtop, p) -> int:
        """Routes (arrays of :meth:`count_links`) that use the switch link ``u → v``."""
        import numpy as np

        spans = self.spans
        lv = min(u[1], v[1])
        if u[1] < v[1]:  # up-link level lv -> lv+1, on the source side
            m = (top > lv) & (la // spans[lv] == u[2]) & (jup[lv] == u[3]) \
                & (la // spans[lv + 1] == v[2]) & (jup[lv + 1] == v[3])
        else:  # down-link level lv+1 -> lv, on the destination side
            jd_hi = jtop // np.maximum(p[top] // p[lv + 1], 1)  # (masked where top <= lv)
            jd_lo = jtop // np.maximum(p[top] // p[lv], 1)
            m = (top > lv) & (lb // spans[lv + 1] == u[2]) & (jd_hi == u[3]) \
                & (lb // spans[lv] == v[2]) & (jd_lo == v[3])
        return int(m.sum())
