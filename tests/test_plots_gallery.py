"""The gallery in plots/: every figure exists, is listed in the manifest written by
scripts/make_gallery.py, is shown in the README, and is up to date with its command."""

from __future__ import annotations

import hashlib
import json

import pytest
from conftest import ROOT
from PIL import Image

from sim.cli import main

MANIFEST = ROOT / "plots" / "manifest.json"
REGENERATE = "regenerate with: python scripts/make_gallery.py"


def figures():
    assert MANIFEST.exists(), f"plots/manifest.json is missing; {REGENERATE}"
    return json.loads(MANIFEST.read_text())["figures"]


def test_every_manifest_figure_exists_and_every_image_is_in_the_manifest():
    listed = [f["file"] for f in figures()]
    assert len(listed) == len(set(listed)) >= 4
    for name in listed:
        path = ROOT / name
        assert path.exists(), f"{name} missing; {REGENERATE}"
        with Image.open(path) as img:
            assert img.size[0] >= 800 and img.size[1] >= 200
    images = sorted(f"plots/{p.name}" for p in (ROOT / "plots").iterdir()
                    if p.suffix in (".png", ".svg", ".pdf"))
    assert images == sorted(listed), "images in plots/ not made by the gallery script"


def test_readme_shows_every_gallery_figure():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [f["file"] for f in figures() if f["file"] not in readme]
    assert not missing, f"README.md does not show {missing}"
    assert "scripts/make_gallery.py" in readme


@pytest.mark.slow
def test_gallery_is_up_to_date_with_its_commands(tmp_path, monkeypatch):
    """Re-run every recorded command; its report must be the one the figure was drawn from."""
    monkeypatch.chdir(ROOT)  # the manifest's paths are relative to the repository root
    seen: dict[tuple, str] = {}
    for fig in figures():
        for run in fig["runs"]:
            key = tuple(run["args"])
            if key not in seen:
                out = tmp_path / f"r{len(seen)}.json"
                assert main([*run["args"], "--quiet", "--json", str(out)]) == 0
                seen[key] = hashlib.sha256(out.read_bytes()).hexdigest()
            assert seen[key] == run["report_sha256"], (
                f"{fig['file']} is stale (simrun {' '.join(run['args'])} now reports "
                f"different numbers); {REGENERATE}")
