"""Running sweep tasks: in-process, on local worker processes, or on a Dask cluster.

:func:`run_tasks` calls :func:`sim.sweep.evaluate.evaluate` for every layout and hands each
row to ``on_result`` as soon as it finishes (completion order), so the caller can append it to
disk and advance a progress bar. Back ends:

- ``workers == 1``: in this process, in layout order (simplest to debug);
- default: a :class:`concurrent.futures.ProcessPoolExecutor` with ``workers`` processes
  (all local cores by default; ``forkserver`` start method where available);
- ``scheduler="tcp://host:port"``: a Dask distributed cluster (``distributed.Client``); the
  shared :class:`SweepContext` is scattered to the workers once, each layout is one task.

Tasks never raise (errors come back as rows); if the back end itself loses a task (a worker
process dies), the layout is recorded as an error row and the sweep goes on. Local workers end
with the main process, however it ends (:func:`_worker_init`).
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import select
import signal
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Any

from sim.errors import UsageError
from sim.sweep.evaluate import (
    SweepContext,
    aperiodic_flags,
    base_row,
    evaluate,
    share_aperiodic,
)
from sim.sweep.space import SweepPoint

Row = dict[str, Any]


def default_workers() -> int:
    """All local cores (``os.sched_getaffinity`` where available)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _lost(layout: SweepPoint, exc: BaseException, ctx: SweepContext | None = None) -> list[Row]:
    """The error rows of a lost task: ``layout``'s and its twins' (``ctx.twins``)."""
    rows = []
    for lay in ctx.with_twins(layout) if ctx else (layout,):
        row = base_row(lay)
        row.update(status="error", reason=f"task lost: {type(exc).__name__}: "
                                          f"{' '.join(str(exc).split())}")
        rows.append(row)
    return rows


def _deliver(got: Row | list[Row], on_result: Callable[[Row], None]) -> None:
    """Hand a task's row, or each of its rows (:func:`~sim.sweep.evaluate.evaluate_twins`),
    to ``on_result``."""
    for row in got if isinstance(got, list) else (got,):
        on_result(row)


Task = Callable[[SweepContext, SweepPoint], Row | list[Row]]
Stop = Callable[[int], bool]


def run_tasks(ctx: SweepContext, layouts: Sequence[SweepPoint], on_result: Callable[[Row], None],
              *, workers: int | None = None, scheduler: str | None = None,
              connect_timeout_s: float = 10.0, task: Task = evaluate,
              stop: Stop | None = None) -> str:
    """Run ``task`` (a module-level function; default :func:`evaluate`; a task may return a
    list of rows, :func:`~sim.sweep.evaluate.evaluate_twins`) on ``layouts``;
    returns a description of the back end used (for the output). ``connect_timeout_s``: how
    long to try to reach the Dask scheduler. ``stop``: layouts are started in order, at most
    one per worker at a time, only while ``stop(n)`` is false, ``n`` the layouts started so
    far (checked before each; the running ones finish); ``None``: all of them, queued at
    once."""
    if not layouts:
        return "nothing to run"
    if scheduler:
        return _run_dask(ctx, layouts, on_result, scheduler, connect_timeout_s, task, stop)
    n = min(workers or default_workers(), len(layouts))
    if n <= 1:
        for i, lay in enumerate(layouts):
            if stop is not None and stop(i):
                break
            _deliver(task(ctx, lay), on_result)
        return "in-process (1 worker)"
    return _run_pool(ctx, layouts, on_result, n, task, stop)


_SHARED: list[SweepContext] = []
"""A local worker's :class:`SweepContext`, received once when the worker starts (not with
every task): what the tasks of one sweep share stays built between them (the kernel table's
fitted attention model, :class:`~sim.kernels.lookup.TableLookup`'s caches)."""


def _shared_task(task: Task, layout: SweepPoint) -> Row:
    return task(_SHARED[0], layout)


def _mp_context():
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


def worker_pool(n: int, ctx: SweepContext | None = None):
    """A pool of ``n`` local worker processes that ignore Ctrl-C and end with this process
    (:func:`_worker_init`); on an interrupt, end it with :func:`stop_pool`. ``ctx``: the
    context each worker keeps for :func:`_shared_task`, with the flags by which a sweep's
    workers tell each other which schedules' periodic shortcut fails
    (:func:`~sim.sweep.evaluate.share_aperiodic`)."""
    mp = _mp_context()
    flags = aperiodic_flags(mp) if ctx is not None else None
    return ProcessPoolExecutor(max_workers=n, mp_context=mp, initializer=_worker_init,
                               initargs=(os.getpid(), ctx, flags))


def _run_pool(ctx: SweepContext, layouts: Sequence[SweepPoint], on_result: Callable[[Row], None],
              n: int, task: Task = evaluate, stop: Stop | None = None) -> str:
    pool = worker_pool(n, ctx)
    try:
        queue = iter(layouts)
        futures: dict = {}

        def submit(count: int) -> None:
            for lay in itertools.islice(queue, count):
                futures[pool.submit(_shared_task, task, lay)] = lay

        submit(len(layouts) if stop is None else n)
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: futures[f].key):
                try:
                    row = fut.result()
                except Exception as exc:  # noqa: BLE001 - e.g. BrokenProcessPool
                    row = _lost(futures[fut], exc, ctx)
                _deliver(row, on_result)
            if stop is not None:
                before = set(futures)
                for _ in done:
                    if stop(len(futures)):
                        break
                    submit(1)
                pending |= set(futures) - before
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown(wait=True)
    return f"local process pool ({n} workers)"


def _worker_init(parent_pid: int, ctx: SweepContext | None = None, flags=None) -> None:
    """Worker initializer. Ctrl-C reaches the whole process group; only the parent handles it
    (and then ends the workers), so the workers ignore it and print no tracebacks. And a worker
    ends as soon as the sweep's main process does, however it ended (even ``kill -9``): else
    the workers, the forkserver (kept alive by the workers) and the resource tracker would
    outlive it, holding the caller's stdout and stderr open. ``ctx``: the sweep's context
    (:func:`_shared_task`); ``flags``: the flags its workers share
    (:func:`~sim.sweep.evaluate.share_aperiodic`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if ctx is not None:
        _SHARED[:] = [ctx]
    if flags is not None:
        share_aperiodic(flags)
    threading.Thread(target=_exit_with, args=(parent_pid,), name="simrun-parent-watch",
                     daemon=True).start()


def _exit_with(pid: int) -> None:
    """Block until process ``pid`` has ended, then end this process at once (exit code 1).
    Linux ≥ 5.3: a pidfd becomes readable when the process ends; elsewhere poll every 0.2 s."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:  # already gone
        os._exit(1)
    except (AttributeError, OSError):  # no pidfd here: poll
        fd = None
    if fd is not None:
        select.select([fd], [], [])
    else:
        while True:
            time.sleep(0.2)
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            except PermissionError:  # pid reused by another user's process: ours is gone
                break
    os._exit(1)


def stop_pool(pool) -> None:
    """Interrupted: drop queued tasks and end the worker processes now. Layouts that were
    running are lost (not on disk) and run again on ``--resume``."""
    procs = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=5)


DASK_MISSING = ("a Dask cluster needs the optional 'dask' extra, which is not installed: pip "
                "install 'simrun[dask]' (sweeps on local cores need nothing extra: leave out "
                "--scheduler)")


def _run_dask(ctx: SweepContext, layouts: Sequence[SweepPoint], on_result: Callable[[Row], None],
              address: str, timeout_s: float, task: Task = evaluate,
              stop: Stop | None = None) -> str:
    try:
        # dask is a heavy import, needed only for sweeps on a cluster
        from distributed import Client, as_completed
    except ImportError:  # the optional extra (simrun sweep checks it before any work)
        raise UsageError(DASK_MISSING, field="scheduler") from None
    try:
        client = Client(address, timeout=f"{timeout_s}s", set_as_default=False)
    except (OSError, TimeoutError) as exc:
        raise UsageError(f"cannot connect to the Dask scheduler at {address}: {exc}",
                         field="scheduler") from None
    futures: dict = {}
    try:
        nworkers = len(client.scheduler_info().get("workers", {}))
        shared = client.scatter(ctx, broadcast=True)
        token = uuid.uuid4().hex[:12]  # unique task keys: a long-lived cluster caches by key
        # simulations are simrun-sweep-…; the early pass's tasks are named after their function
        kind = "simrun-sweep" if task is evaluate else f"simrun-{task.__name__}"
        queue = iter(layouts)

        def submit(count: int) -> list:
            out = []
            for lay in itertools.islice(queue, count):
                fut = client.submit(task, shared, lay, key=f"{kind}-{token}-{lay.key}",
                                    pure=False)
                futures[fut.key] = (fut, lay)
                out.append(fut)
            return out

        running = as_completed(submit(len(layouts) if stop is None else max(nworkers, 1)),
                               loop=client.loop)
        for fut in running:
            lay = futures[fut.key][1]
            try:
                row = fut.result()
            except Exception as exc:  # noqa: BLE001 - worker died, task lost
                row = _lost(lay, exc, ctx)
            _deliver(row, on_result)
            fut.release()
            if stop is not None and not stop(len(futures)):
                for more in submit(1):
                    running.add(more)
    except BaseException:
        client.cancel([f for f, _ in futures.values()])
        raise
    finally:
        client.close()
    return f"Dask cluster at {address} ({nworkers} workers)"
