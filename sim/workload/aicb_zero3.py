"""AICB's ZeRO-3 collective log (:mod:`sim.workload.aicb_csv`) placed around timed compute.

The log says which collectives run and in which order, not when: :func:`weave` puts them
between the layers (rows) of a generated chunk, whose compute a model spec times, with
DeepSpeed ZeRO-3's semantics:

- **Matching.** The forward all-gathers are matched to the rows holding parameters in forward
  order, the backward all-gathers to the same rows in backward order: each row takes tensors
  until their parameters (``msg_size`` / 2) add up to its own, exactly — else the file and the
  model spec disagree, and the error names the line. (The sizes say which row a tensor is part
  of; tensors of one size inside a row, e.g. a SwiGLU's gate and up projections, cannot be
  told apart and need not be.)
- **Forward.** Each all-gather blocks the compute stream just before its row's forward (the
  file's tensors are fetched one by one, as DeepSpeed does when it has no prefetch trace: the
  file records no coalesced prefetch), in file order.
- **Backward.** Each all-gather blocks just before the first backward computation that needs
  its row's parameters — the row's backward, or with full recomputation the row's re-run
  forward (``first_use``) — and never after a later all-gather of the file (file order kept).
- **Reduce-scatters.** A bucket of ``msg_size`` / 2 gradients, filled in backward row order, is
  reduce-scattered (asynchronously, on the DP gradient stream, as DeepSpeed's
  ``overlap_comm``) once the row completing it has run its weight gradient, and not before the
  file's previous collective; the ``step.reduce_scatter_fn`` bucket (the rest) and the step's
  all-reduces run before the optimizer step, the persistent parameters' all-gathers after it
  (:func:`step_tasks`).
"""

from __future__ import annotations

from collections import defaultdict

from sim.comm import CollKind, Comm, GroupKind
from sim.errors import InputError
from sim.program.pipeline import Task, TaskKind
from sim.program.workload import Layer, Phase
from sim.workload.aicb_csv import PARAM_BYTES, CollectiveLog, LogRow, Role


def _params_of(r: LogRow, path: str) -> int:
    if r.size_bytes % PARAM_BYTES:
        raise InputError(f"{r.size_bytes} bytes is not a whole number of 16-bit parameters",
                         file=path, line=r.line, field="msg_size")
    return r.size_bytes // PARAM_BYTES


def _owners(rows: list[LogRow], order: list[int], layers: list[Layer], params: list[int],
            path: str) -> list[int]:
    """The layer index each gathered tensor of ``rows`` belongs to (see the module
    docstring); ``order``: the layers with parameters, in the order the tensors come."""
    owners: list[int] = []
    it = iter(order)
    cur, left = -1, 0
    for r in rows:
        n = _params_of(r, path)
        if left == 0 and n:
            cur = next(it, -1)
            if cur < 0:
                raise InputError(f"{r.stage}: a tensor of {n} parameters beyond the model's "
                                 "last: the file gathers more parameters than the model spec "
                                 "has", file=path, line=r.line, field="msg_size")
            left = params[cur]
        if n > left:
            raise InputError(f"{r.stage}: a tensor of {n} parameters, but row "
                             f"{layers[cur].name} of the model spec has {left} of its "
                             f"{params[cur]} left: the file's tensors do not match the model "
                             "spec", file=path, line=r.line, field="msg_size")
        left -= n
        owners.append(cur)
    rest = [layers[i].name for i in it]
    if left or rest:
        name = layers[cur].name if left else rest[0]
        raise InputError(f"{rows[-1].stage if rows else 'the file'}: the gathers end before "
                         f"the model spec's parameters do (row {name} not gathered): the file "
                         "does not match the model spec", file=path,
                         line=rows[-1].line if rows else 0, field="msg_size")
    return owners


def _backward_slots(log: CollectiveLog, layers: list[Layer], params: list[int],
                    first_use: list[int]) -> list[tuple[int, LogRow]]:
    """(slot, row) of every backward collective: slot ``j`` = before the backward visits
    ``layers[n-1-j]`` (``n``: after the last)."""
    n, path = len(layers), log.path
    items = log.of(Role.BWD_GATHER, Role.BWD_RS)
    gathers = [r for r in items if r.role is Role.BWD_GATHER]
    with_params = [i for i in range(n) if params[i]]
    owners = _owners(gathers, with_params[::-1], layers, params, path)
    pos: dict[int, int] = {}
    nxt = n
    for r, i in zip(reversed(gathers), reversed(owners), strict=True):
        nxt = min(n - 1 - first_use[i], nxt)
        pos[r.line] = nxt
    ready, cum, filled = [], 0, 0  # (cumulative gradients, slot after the row's backward)
    for i in reversed(with_params):
        cum += params[i]
        ready.append((cum, n - i))
    out, prev = [], 0
    for r in items:
        if r.role is Role.BWD_GATHER:
            prev = pos[r.line]
        else:
            filled += _params_of(r, path)
            slot = next((s for c, s in ready if c >= filled), None)
            if slot is None:
                raise InputError(f"the reduce-scatters reach {filled} gradients; the model "
                                 f"spec has {cum}", file=path, line=r.line, field="msg_size")
            prev = max(slot, prev)
        out.append((prev, r))
    return out


def _gather(r: LogRow) -> Comm:
    return Comm(CollKind.ALLGATHER, GroupKind.DP, r.size_bytes, blocking=True)


def _name(r: LogRow) -> str:
    return f"aicb_line{r.line}_{r.stage}"


def weave(log: CollectiveLog, layers: list[Layer], params: list[int],
          first_use: list[int] | None = None) -> list[Layer]:
    """``layers`` (one chunk's timed rows, forward order; ``params[i]``: the parameters of
    row ``i``) with the log's forward and backward collectives placed as the module docstring
    says. ``first_use[i]``: the index of the layer whose backward first needs row ``i``'s
    parameters (its recompute row under full recomputation; default ``i``)."""
    n = len(layers)
    first_use = first_use or list(range(n))
    fwd = log.of(Role.FWD_GATHER)
    owners = _owners(fwd, [i for i in range(n) if params[i]], layers, params, log.path)
    before: dict[int, list[Layer]] = defaultdict(list)
    for r, i in zip(fwd, owners, strict=True):
        before[i].append(Layer(_name(r), forward=Phase(0, _gather(r)), line=r.line))
    after: dict[int, list[Layer]] = defaultdict(list)  # backward slot -> comm-only layers
    for slot, r in sorted(_backward_slots(log, layers, params, first_use),
                          key=lambda x: (x[0], x[1].line)):
        if r.role is Role.BWD_GATHER:
            lay = Layer(_name(r), input_grad=Phase(0, _gather(r)), line=r.line)
        else:
            lay = Layer(_name(r), weight_grad=Phase(0, Comm(
                CollKind.REDUCESCATTER, GroupKind.DP, r.size_bytes, blocking=False,
                per_microbatch=True)), line=r.line)
        after[slot].append(lay)
    out = list(reversed(after[n]))
    for i in range(n):
        out += before[i]
        out.append(layers[i])
        out += reversed(after[n - 1 - i])
    return out


def check_reduced(log: CollectiveLog, params: int) -> None:
    """Every gradient reduce-scattered once: the log's reduce-scatters add up to ``params``."""
    rs = log.of(Role.BWD_RS, Role.STEP_RS)
    total = sum(_params_of(r, log.path) for r in rs)
    if total != params:
        raise InputError(f"the reduce-scatters add up to {total} gradients; the model spec has "
                         f"{params} parameters", file=log.path,
                         line=rs[-1].line if rs else 0, field="msg_size")


def step_tasks(log: CollectiveLog, optimizer: tuple[Task, ...]) -> tuple[Task, ...]:
    """The epilogue: the step's reduce-scatter and all-reduces (blocking; the first waits for
    the backward's reduce-scatters), ``optimizer``, then the step's all-gathers."""
    kinds = {Role.STEP_RS: CollKind.REDUCESCATTER, Role.STEP_ALLREDUCE: CollKind.ALLREDUCE,
             Role.STEP_GATHER: CollKind.ALLGATHER}
    pre = [Task(_name(r), TaskKind.GRAD_SYNC, wait_async=k == 0,
                comm=Comm(kinds[r.role], GroupKind.DP, r.size_bytes, blocking=True))
           for k, r in enumerate(log.of(Role.STEP_RS, Role.STEP_ALLREDUCE))]
    post = [Task(_name(r), TaskKind.GRAD_SYNC,
                 comm=Comm(CollKind.ALLGATHER, GroupKind.DP, r.size_bytes, blocking=True))
            for r in log.of(Role.STEP_GATHER)]
    return (*pre, *optimizer, *post)
