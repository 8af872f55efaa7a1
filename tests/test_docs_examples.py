"""Every Python block of README.md and docs/ runs as a reader types it: saved as a script and run in a
fresh interpreter, in a folder of its own, with the cache root holding the tiny test entry (so
``resolve_entry()`` finds it, as it finds what the worked example's `extract` wrote). Sizes meant for
real data are scaled to the tiny one (`TINY`). A block that cannot run here says why in an HTML comment
on the line before it (``<!-- not run by the tests: ... -->``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
BLOCK = re.compile(r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)\n```", re.S)
# The sizes of the examples, for the tiny entry: 2 layers, a train split of 122 sentences and 3 entity types.
TINY = [("layers=[2, 6]", "layers=[1, 2]"), ("shots=[8, 128]", "shots=[2, 4]"), ("trials=3", "trials=1"),
        ("epochs=10", "epochs=2"), ("epochs=[10]", "epochs=[2]")]
EXPORTED = "models/concat-n8"  # the folder docs/guide/export.md loads
SAVED = "runs/concat-n8-e10-s0.head"  # the head docs/guide/training.md tags with


def blocks() -> list:
    found = []
    for page in PAGES:
        if "results" in page.relative_to(REPO).parts:
            continue
        for m in BLOCK.finditer(page.read_text(encoding="utf-8")):
            line = page.read_text(encoding="utf-8")[: m.start("code")].count("\n") + 1
            skip = m["before"].strip().startswith("<!-- not run")
            found.append(pytest.param(m["code"], id=f"{page.relative_to(REPO)}:{line}",
                                      marks=[pytest.mark.skip(reason=m["before"].strip())] if skip else []))
    return found


@pytest.fixture(scope="module")
def exported_model(tiny_cache, tmp_path_factory) -> Path:
    """A head trained briefly on the tiny entry, exported: what the export guide's block loads."""
    from layerfuse.cache.reader import open_entry
    from layerfuse.hf.export import export_head
    from layerfuse.training import TrainConfig, train_head
    from layerfuse.training.checkpoint import save_checkpoint
    from layerfuse.training.data import load_data

    entry = open_entry(tiny_cache)
    data = load_data(entry)
    result = train_head(TrainConfig(fusion="concat", shots=None, epochs=2, seed=0, lr=1e-2), data)
    folder = tmp_path_factory.mktemp("head")
    save_checkpoint(folder / "concat.head", result.tagger, tagger_kwargs=result.tagger_kwargs, layers=result.layers,
                    label_names=data.label_names, cache_meta=data.meta, cache_path=entry.path)
    return Path(export_head(str(folder / "concat.head"), str(folder / "model")))


def test_every_python_block_is_found():
    ids = [p.id for p in blocks()]
    assert any(i.startswith("README.md:") for i in ids) and any("getting-started" in i for i in ids)


@pytest.mark.slow
@pytest.mark.parametrize("code", blocks())
def test_block_runs_as_typed(code, tiny_cache, exported_model, tmp_path):
    for real, tiny in TINY:
        code = code.replace(real, tiny)
    if EXPORTED in code:
        (tmp_path / EXPORTED).parent.mkdir(parents=True)
        (tmp_path / EXPORTED).symlink_to(exported_model, target_is_directory=True)
    if SAVED in code:  # the head the export was made from, where train-head saves it
        (tmp_path / SAVED).parent.mkdir(parents=True)
        for suffix in (".safetensors", ".json"):
            (tmp_path / (SAVED + suffix)).symlink_to(exported_model.parent / ("concat.head" + suffix))
    (tmp_path / "example.py").write_text(code + "\n", encoding="utf-8")
    env = dict(os.environ, LAYERFUSE_HOME=str(Path(tiny_cache).parent), HF_HUB_OFFLINE="1")
    out = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
