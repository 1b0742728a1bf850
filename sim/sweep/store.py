"""Sweep results on disk: a manifest and an append-only JSON-lines file.

``DIR/sweep-settings.json`` records what the sweep is (model, topology, GPUs, batch, training
and network options, the layout list's parameters). ``DIR/results.jsonl`` gets one JSON object
per finished layout, appended, flushed and fsync'ed as soon as the layout finishes, in
completion order. An interrupted sweep therefore loses at most the layouts that were running.

Resuming reads the JSON lines back (a torn last line from a kill mid-write is dropped and the
file rewritten without it), refuses if the settings differ, and skips every layout whose key
is already there — including layouts recorded as infeasible or failed (their outcome is
deterministic; rerun without ``--resume`` to retry them).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from sim.errors import UsageError
from sim.files.outputs import atomic_write, write_json

SETTINGS = "sweep-settings.json"
RESULTS = "results.jsonl"
IGNORED = ("files",)  # settings keys that may differ on resume (paths to the same content)


class ResultStore:
    """The results directory of one sweep."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)
        self.settings_path = self.dir / SETTINGS
        self.results_path = self.dir / RESULTS
        self._fh = None

    def open(self, settings: dict[str, Any], *, resume: bool, overwrite: bool = False
             ) -> dict[str, dict[str, Any]]:
        """Prepare the directory; returns the rows already done (by layout key) when resuming.

        Without ``resume`` an existing results file is an error (``--resume`` or
        ``--overwrite``); with ``resume`` the stored settings must equal ``settings`` (except
        the ``files`` entry: the same model and topology may be given by another path).
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        done: dict[str, dict[str, Any]] = {}
        exists = self.results_path.exists()
        if resume and exists:
            stored = self._read_settings()
            keys = (set(stored) | set(settings)) - set(IGNORED)
            diff = sorted(k for k in keys if stored.get(k) != settings.get(k))
            if diff:
                raise UsageError(f"{self.dir} holds a sweep with other settings (differs in: "
                                 f"{', '.join(diff)}); use another --out or drop --resume",
                                 field="resume")
            done = self._read_rows()
        elif exists and not overwrite:
            raise UsageError(f"{self.results_path} exists; pass --resume to continue that sweep "
                             "or --overwrite to start again", field="out")
        else:
            if exists:
                self.results_path.unlink()
            write_json(self.settings_path, settings, flag="--out")
        self._fh = open(self.results_path, "a", encoding="utf-8")  # noqa: SIM115
        return done

    def _read_settings(self) -> dict[str, Any]:
        try:
            return json.loads(self.settings_path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise UsageError(f"cannot read {self.settings_path}: {exc}", field="resume") from None

    def _read_rows(self) -> dict[str, dict[str, Any]]:
        text = self.results_path.read_text(encoding="utf-8")
        done: dict[str, dict[str, Any]] = {}
        good: list[str] = []
        lines = text.split("\n")
        for i, line in enumerate(lines):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                key = row["layout"]
            except (ValueError, KeyError, TypeError):
                if i >= len(lines) - 2:  # torn last line (killed mid-write): drop it
                    continue
                raise UsageError(f"line {i + 1} is not a result row", file=str(
                    self.results_path), field="resume") from None
            if key not in done:  # a duplicate (should not happen) keeps the first result
                good.append(line)
                done[key] = row
        clean = "".join(line + "\n" for line in good)
        if clean != text:
            atomic_write(self.results_path, lambda f: f.write(clean), flag="--out")
        return done

    def append(self, row: dict[str, Any]) -> None:
        """Append one row and make it durable (flush + fsync)."""
        assert self._fh is not None, "open() first"
        self._fh.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None
