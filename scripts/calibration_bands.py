"""Write sim/data/calibration/error_bands.yaml (sim/calibration/ranges.py) from the JSON of
``simrun validate --json PATH``: per source class (GPU family, dense or MoE), the number of
evaluation cases and their smallest and largest signed error in percent.

    python -m sim.cli validate --json /tmp/validate.json
    python scripts/calibration_bands.py /tmp/validate.json [more.json ...]

(several JSON files: one ``simrun validate FILE --json`` per validation file.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim.calibration.ranges import class_of  # noqa: E402
from sim.models.vocab.spec import load_model  # noqa: E402
from sim.validation.cases import load_cases  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "sim" / "data" / "calibration" / "error_bands.yaml"


def main(paths: list[str]) -> None:
    classes: dict[str, list[float]] = {}
    files = []
    for path in paths:
        doc = json.loads(Path(path).read_text())
        files += [Path(f).name for f in doc["files"]]
        moe = {c.name: load_model(c.model_path).moe is not None
               for f in doc["files"] for c in load_cases(f)[1]}
        for r in doc["cases"]:
            if r["role"] == "evaluation":
                classes.setdefault(class_of(r["gpu"], moe[r["name"]]), []).append(
                    r["error_pct"])
    data = {"source": f"simrun validate {' '.join(sorted(files))}, evaluation cases "
                      "(scripts/calibration_bands.py)",
            "classes": {k: {"cases": len(v), "min_error_pct": round(min(v), 2),
                            "max_error_pct": round(max(v), 2)}
                        for k, v in sorted(classes.items())}}
    OUT.write_text("# written by scripts/calibration_bands.py; do not edit by hand\n"
                   + yaml.safe_dump(data, sort_keys=False))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main(sys.argv[1:])
