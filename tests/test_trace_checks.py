"""Independent checks of a Chrome trace-event document (used by the trace tests), and tests
showing the checks reject broken traces.

These re-implement the format's rules and simrun's accounting from the trace alone, so they
can catch a trace that disagrees with the report.
"""

from __future__ import annotations

from collections import defaultdict

import pytest

META_NAMES = {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}
COMPUTE_CATS = {"forward", "input_grad", "weight_grad", "compute"}


def ns(us: float) -> int:
    """Trace microseconds back to integer ns (they must be exact ns / 1000)."""
    v = us * 1000
    r = round(v)
    assert abs(v - r) < 1e-3, (us, v)
    return r


def validate(doc: dict, iteration_ns: int) -> dict[tuple[int, int], list[tuple[int, int, dict]]]:
    """Assert the trace-event rules; return X events by (pid, tid) as (start_ns, end_ns, ev)."""
    assert isinstance(doc["traceEvents"], list) and doc["traceEvents"]
    procs, threads = set(), set()
    tracks: dict[tuple[int, int], list[tuple[int, int, dict]]] = defaultdict(list)
    for ev in doc["traceEvents"]:
        assert isinstance(ev["name"], str) and ev["name"]
        assert isinstance(ev["pid"], int) and isinstance(ev["tid"], int)
        if ev["ph"] == "M":
            assert ev["name"] in META_NAMES
            assert isinstance(ev["args"], dict) and ev["args"]
            if ev["name"] == "process_name":
                procs.add(ev["pid"])
            elif ev["name"] == "thread_name":
                threads.add((ev["pid"], ev["tid"]))
            continue
        assert ev["ph"] == "X", ev
        assert isinstance(ev["ts"], (int, float)) and isinstance(ev["dur"], (int, float))
        assert isinstance(ev.get("cat", ""), str) and isinstance(ev.get("args", {}), dict)
        t0, d = ns(ev["ts"]), ns(ev["dur"])
        assert d >= 0 and 0 <= t0 and t0 + d <= iteration_ns, ev
        tracks[(ev["pid"], ev["tid"])].append((t0, t0 + d, ev))
    for key, evs in tracks.items():
        assert key[0] in procs and key in threads, f"unnamed process/thread {key}"
        evs.sort(key=lambda e: (e[0], e[1]))
        for (_a0, a1, ea), (b0, _b1, eb) in zip(evs, evs[1:], strict=False):
            assert a1 <= b0, f"overlap on track {key}: {ea['name']} and {eb['name']}"
    return tracks


def breakdown(doc: dict) -> dict[int, dict[str, object]]:
    """Per process: compute / optimizer / bubble ns and exposed comm ns by group."""
    out: dict[int, dict[str, object]] = {}
    for ev in doc["traceEvents"]:
        if ev["ph"] != "X":
            continue
        b = out.setdefault(ev["pid"], {"compute": 0, "optimizer": 0, "bubble": 0,
                                       "exposed": defaultdict(int)})
        d, cat = ns(ev["dur"]), ev["cat"]
        if cat in COMPUTE_CATS:
            b["compute"] += d
        elif cat in ("optimizer", "bubble"):
            b[cat] += d
        elif cat == "exposed_comm" or (cat == "comm_blocking" and ev["args"]["exposed"]):
            b["exposed"][ev["args"]["group"]] += d
    return out


def process_names(doc: dict) -> dict[int, str]:
    return {e["pid"]: e["args"]["name"] for e in doc["traceEvents"]
            if e["ph"] == "M" and e["name"] == "process_name"}


def thread_names(doc: dict) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"] for e in doc["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name"}


def _doc(*events):
    meta = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "p"}},
            {"name": "thread_name", "ph": "M", "pid": 1, "tid": 2, "args": {"name": "t"}}]
    return {"traceEvents": meta + [dict({"ph": "X", "pid": 1, "tid": 2, "cat": "forward",
                                         "args": {}}, **e) for e in events]}


def test_checker_accepts_a_valid_trace_and_sums_it():
    doc = _doc({"name": "a", "ts": 0.0, "dur": 0.01}, {"name": "b", "ts": 0.01, "dur": 0.005,
                                                        "cat": "bubble"})
    tracks = validate(doc, 15)
    assert [(a, b) for a, b, _ in tracks[(1, 2)]] == [(0, 10), (10, 15)]
    assert breakdown(doc)[1]["compute"] == 10 and breakdown(doc)[1]["bubble"] == 5


@pytest.mark.parametrize("events,iteration", [
    (({"name": "a", "ts": 0.0, "dur": 0.01}, {"name": "b", "ts": 0.009, "dur": 0.002}), 20),
    (({"name": "a", "ts": 0.0, "dur": 0.021},), 20),  # beyond the iteration
    (({"name": "a", "ts": -0.001, "dur": 0.002},), 20),  # before 0
    (({"name": "a", "ts": 0.0, "dur": 0.0105},), 20),  # not a whole ns
    (({"name": "a", "ts": 0.0, "dur": 0.01, "ph": "B"},), 20),  # not a complete event
    (({"name": "a", "ts": 0.0, "dur": 0.01, "tid": 9},), 20),  # thread without a name
])
def test_checker_rejects_broken_traces(events, iteration):
    with pytest.raises(AssertionError):
        validate(_doc(*events), iteration)
