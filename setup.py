"""Build step that puts the repository's shipped inputs into the wheel.

The top-level ``topologies/`` and ``workloads/`` folders stay where the README, the docs and the
tests name them; a non-editable build (``pip install .``, ``python -m build``) copies them into
the built package as ``sim/data/topologies/`` and ``sim/data/workloads/``, where
:mod:`sim.files.catalog` finds them by name from any directory. Everything else under ``sim/data/``
(e.g. kernel tables) is ordinary package data (pyproject.toml). An editable install copies
nothing: :mod:`sim.files.catalog` then reads the checkout's folders directly.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
SHIPPED = ("topologies", "workloads")  # copied to sim/data/<folder> in the wheel


class BuildPyWithShippedData(build_py):
    """``build_py`` that also copies :data:`SHIPPED` into ``<build_lib>/sim/data/``."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        for folder in SHIPPED:
            dest = Path(self.build_lib, "sim", "data", folder)
            if dest.exists():  # a stale copy from an earlier build
                shutil.rmtree(dest)
            shutil.copytree(ROOT / folder, dest,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".*"))


setup(cmdclass={"build_py": BuildPyWithShippedData})
