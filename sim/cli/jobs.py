"""``simrun --megatron-args FILE`` and ``simrun megatron [simrun flags] -- <Megatron-LM
arguments>``: a Megatron-LM job run as simrun's ``--model`` run (:mod:`sim.jobs`).

The Megatron arguments become simrun flags (:mod:`sim.jobs.megatron_args`), parsed with the
rest of the command line by the run's own parser, and a model spec; a flag given both on the
command line and by the job is refused (which one would win?). The report's assumptions say
which Megatron arguments were applied and which are irrelevant to timing.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from sim.assumption import Assumption
from sim.errors import InputError, UsageError
from sim.files.inputs import read_text

if TYPE_CHECKING:  # the readers load only when a job file is given (a workload run skips them)
    from sim.jobs.megatron_args import MegatronJob
    from sim.jobs.shell import Word
    from sim.models.vocab.spec import ModelSpec

FLAG = "--megatron-args"
CONFIG_FLAG = "--job-config"
#: the source named in messages about ``simrun megatron -- ARGS`` (the "line" is the word's
#: position after ``--``)
COMMAND_LINE = "megatron-arguments"


def add_job_arguments(g: argparse._ActionsContainer) -> None:
    """``--megatron-args FILE`` (in the run's inputs group)."""
    g.add_argument(FLAG, metavar="FILE",
                   help="a Megatron-LM job instead of --model: a launch script (torchrun ... "
                        "pretrain_gpt.py $ARGS, bash arrays and variables), a file of "
                        "arguments, or a training log's printed 'arguments' block; the model, "
                        "layout, batch, precision, recompute, overlaps and schedule come from "
                        "it, the GPUs from --nodes/--gpus, the cluster from --topo; every "
                        "argument is applied, stated irrelevant or refused "
                        "(docs/job-formats.md)")


def add_job_config_argument(g: argparse._ActionsContainer) -> None:
    """``--job-config FILE`` (in the run's inputs group)."""
    g.add_argument(CONFIG_FLAG, metavar="FILE",
                   help="a framework's job config instead of --model, detected by content: a "
                        "torchtitan TOML (its 2024-25 releases: [model] flavor, [parallelism], "
                        "[training], [compile], [activation_checkpoint], float8), a NeMo 1 "
                        "launcher training YAML (run/trainer/model; trainer.num_nodes x "
                        "devices GPUs unless --nodes/--gpus) or a Megatron-Bridge / NeMo 2 "
                        "ConfigContainer dump (run_config.yaml); every key is applied, "
                        "stated irrelevant or refused (docs/job-formats.md)")


def config_of(path: str) -> tuple[MegatronJob, ModelSpec]:
    """The translation of the job config ``path`` (detected by content: TOML → torchtitan;
    YAML with ``run``, ``trainer`` and ``model`` → NeMo 1 launcher; YAML with ``model``,
    ``train`` and ``optimizer`` → Megatron-Bridge ConfigContainer)."""
    import tomllib

    text = read_text(path, what="job config", flag=CONFIG_FLAG)
    try:
        tomllib.loads(text)
    except RecursionError:  # arrays or tables nested thousands deep
        raise InputError("nested too deeply to be a job config", file=path,
                         field=CONFIG_FLAG) from None
    except tomllib.TOMLDecodeError as toml_error:
        try:
            return _yaml_config(text, path)
        except InputError as e:
            if not e.message.startswith("not valid YAML"):
                raise
            raise InputError(f"not a torchtitan TOML job config ({toml_error}), nor a NeMo or "
                             f"Megatron-Bridge YAML one (line {e.line}: {e.message})",
                             file=path, field=CONFIG_FLAG) from None
    from sim.jobs.torchtitan import read_torchtitan

    return read_torchtitan(text, path)


def _yaml_config(text: str, path: str) -> tuple[MegatronJob, ModelSpec]:
    from sim.files.yaml_load import load_yaml
    from sim.jobs import bridge, nemo_launcher
    from sim.models.vocab.spec import model_from_dict

    data = load_yaml(text, path)
    if nemo_launcher.is_launcher_config(data):
        job = nemo_launcher.read_launcher(text, path)
    elif bridge.is_bridge_config(data):
        job = bridge.read_bridge(text, path)
    else:
        raise InputError("not a job config simrun reads: a torchtitan TOML, a NeMo launcher "
                         "training YAML (run, trainer, model sections) or a Megatron-Bridge "
                         "ConfigContainer dump (model, train, optimizer sections)", file=path,
                         field=CONFIG_FLAG)
    return job, model_from_dict(job.model, file=path)


def megatron_words(path: str) -> list[Word]:
    """The Megatron-LM arguments of the file ``path`` (script, argument file or log)."""
    from sim.jobs.megatron_log import arguments_block_of
    from sim.jobs.script import launch_arguments

    text = read_text(path, what="Megatron-LM arguments", flag=FLAG)
    block = arguments_block_of(text, path)
    if block is None:
        return launch_arguments(text, path)
    return _log_words(*block)


def _log_words(values: dict[str, str], lines: dict[str, int]) -> list[Word]:
    """A log's printed arguments as ``--flag value`` words: ``None`` and ``False`` are not
    set, ``True`` is a switch, a list ``[a, b]`` its items; an argument the Megatron reader
    does not declare is left out when it is at Megatron-LM's default or is one of the values
    Megatron-LM computes (:func:`log_defaulted` names them)."""
    from sim.jobs.defaults import LOG_TABLES, default_of
    from sim.jobs.megatron_table import ARGS
    from sim.jobs.shell import Word

    out: list[Word] = []
    skipped = set(log_defaulted(values))
    for dest, text in values.items():
        unset = text in ("None", "False")
        if dest in skipped or unset and ("--" + dest.replace("_", "-") in ARGS
                                         or not default_of(dest, LOG_TABLES)[0]):
            continue  # declared and not set, at Megatron-LM's default, or computed
        line = lines[dest]
        out.append(Word("--" + dest.replace("_", "-"), line))
        if text == "True":
            continue
        items = text[1:-1].replace(",", " ").split() if text.startswith("[") else [text]
        out += [Word(x.strip("'\""), line) for x in items]
    return out


def log_defaulted(values: dict[str, str]) -> list[str]:
    """The printed arguments of a log the Megatron reader does not declare that are at
    Megatron-LM's default or are values it computes (:mod:`sim.jobs.defaults`): accepted,
    irrelevant to timing."""
    from sim.jobs.defaults import BOOKKEEPING, printed_at_default
    from sim.jobs.megatron_table import ARGS

    return [d for d, text in values.items()
            if "--" + d.replace("_", "-") not in ARGS
            and (d in BOOKKEEPING or printed_at_default(d, text))]


def job_of(path: str) -> tuple[MegatronJob, ModelSpec]:
    """The translation of the Megatron file ``path`` and its model spec."""
    from sim.jobs.megatron_args import translate
    from sim.models.vocab.spec import model_from_dict

    words = megatron_words(path)
    try:
        job = translate(words, path, Path(path).stem)
    except InputError as e:  # an argument written in a sourced file: name that file
        w = next((w for w in words if w.text.split("=")[0] == e.field and w.line == e.line
                  and w.file not in (None, path)), None)
        if w is None:
            raise
        raise InputError(e.message, file=w.file, line=w.line, field=e.field) from None
    from sim.jobs.megatron_log import arguments_block_of

    block = arguments_block_of(read_text(path, what="Megatron-LM arguments", flag=FLAG), path)
    if block is not None:  # a log: its arguments at their defaults
        job.irrelevant += [f"{d}(default)" for d in log_defaulted(block[0])
                           if block[0][d] not in ("None", "False")]
    return job, model_from_dict(job.model, file=path)


def expand(argv: list[str], parser: argparse.ArgumentParser,
           megatron: list[str] | None = None
           ) -> tuple[list[str], MegatronJob | None, ModelSpec | None]:
    """``argv`` with the job's simrun flags (and ``--model SOURCE``) added when it has
    ``--megatron-args FILE`` or ``megatron`` (the words after ``simrun megatron ... --``);
    ``parser``: the run's. Unchanged without either."""
    args = parser.parse_args(argv)
    path = getattr(args, "megatron_args", None)
    config = getattr(args, "job_config", None)
    if path is None and megatron is None and config is None:
        return argv, None, None
    given = [f for f, v in ((FLAG, path), (CONFIG_FLAG, config), ("megatron", megatron))
             if v is not None]
    if args.model or args.workload or len(given) > 1:
        raise UsageError(f"the model comes from {given[0]}; give one of --model, --workload, "
                         "--megatron-args, --job-config", field=given[-1])
    from sim.jobs.megatron_args import translate
    from sim.jobs.shell import Word
    from sim.models.vocab.spec import model_from_dict

    if config is not None:
        path = config
        job, spec = config_of(config)
    elif path is None:
        path = COMMAND_LINE
        words = [Word(t, k) for k, t in enumerate(megatron or [], 1)]
        job = translate(words, path, "megatron")
        spec = model_from_dict(job.model, file=path)
    else:
        job, spec = job_of(path)
    mine = {a for a in argv if a.startswith("--")}
    for word in job.argv:
        if word.startswith("--") and _same(word, mine, parser):
            raise UsageError(f"given both here and by {path}; give it once", field=word)
    out = [*argv, "--model", path, *job.argv]
    if job.gpus is not None:
        if {"--gpus", "--nodes"} & {a.split("=")[0] for a in mine}:  # the command line's
            moved = [k for k in job.applied if k.startswith("trainer.")
                     and k.endswith(("num_nodes", "devices"))]
            job.applied = [k for k in job.applied if k not in moved]
            job.stated += [f"{k}(the GPU count given by --nodes/--gpus instead)"
                           for k in moved]
        else:
            out += ["--gpus", str(job.gpus)]
    try:  # a value simrun's option refuses (e.g. --attention-backend local): name the source
        parser.parse_args(out)
    except UsageError as e:
        raise UsageError(f"{e.message} (from {path})", field=e.field) from None
    return out, job, spec


def _same(flag: str, given: set[str], parser: argparse.ArgumentParser) -> bool:
    """Whether ``flag`` (from the job) names the same option as one of the ``given`` flags."""
    actions = parser._option_string_actions  # noqa: SLF001 - argparse has no lookup
    dest = actions[flag].dest
    return any(g.split("=")[0] in actions and actions[g.split("=")[0]].dest == dest
               for g in given)


def assumption_lines(job: MegatronJob) -> list[Assumption]:
    """The report's lines: the arguments applied and those irrelevant to timing."""
    what = ("torchtitan job config" if job.file.endswith(".toml") else
            "job config" if job.file.endswith((".yaml", ".yml")) else "Megatron-LM arguments")
    stated = [Assumption(f"{what}: read, not modelled (docs/job-formats.md says how simrun "
                         f"runs instead): {' '.join(job.stated)}", "job-input", departs=True)
              ] if job.stated else []
    return [Assumption(f"{what} from {job.file}: applied "
                       f"{' '.join(job.applied)} (as {' '.join(job.argv) or 'no flags'} and "
                       "the model spec)", "job-input", departs=True),
            Assumption(f"{what}: irrelevant to one iteration's time "
                       f"(docs/job-formats.md says why): {' '.join(job.irrelevant) or 'none'}",
                       "job-input"), *stated]
