"""The repository's own docs cover what the code registers, and nothing in the repository points
at files outside it."""

import re
import subprocess
from pathlib import Path

import pytest

from domains import installed
from toolkit.losses.base import LOSSES
from toolkit.regularizers import REGULARIZERS
from toolkit.samplers import SELECTORS
from toolkit.samplers.schedules import SELECTOR_SCHEDULES

ROOT = Path(__file__).resolve().parents[1]
# Written as pieces so that this file does not match its own pattern.
FORBIDDEN = re.compile("|".join([r"METHODS\.md", r"DATA\.md", r"\.\./shared"]))


def _heading_names(path: Path) -> set[str]:
    """Every `backticked` name in a Markdown heading of ``path``."""
    names: set[str] = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            names.update(re.findall(r"`([^`]+)`", line))
    return names


@pytest.mark.parametrize(
    "registry",
    [LOSSES, SELECTORS, REGULARIZERS, SELECTOR_SCHEDULES],
    ids=["losses", "selectors", "regularizers", "selector-schedules"],
)
def test_every_registered_name_has_a_section_in_methods(registry):
    missing = sorted(set(registry.names()) - _heading_names(ROOT / "docs" / "methods.md"))
    assert not missing, f"docs/methods.md has no heading for {missing}"


def test_every_negative_source_has_a_section_in_methods():
    from toolkit.recipe import Negatives

    sources = set(Negatives.model_fields["source"].annotation.__args__)
    missing = sorted(sources - _heading_names(ROOT / "docs" / "methods.md"))
    assert not missing, f"docs/methods.md has no heading for the sources {missing}"


def test_every_catalogued_dataset_has_a_section_in_data():
    text = (ROOT / "docs" / "data.md").read_text(encoding="utf-8")
    catalogue = installed.catalogue()  # every installed domain's datasets
    assert len(catalogue.datasets) >= 11, catalogue.names()
    missing = sorted(set(catalogue.names()) - _heading_names(ROOT / "docs" / "data.md"))
    assert not missing, f"docs/data.md has no heading for {missing}"
    # The pinned digests it prints are the catalogue's.
    for entry in catalogue.datasets:
        for source in entry.sources:
            assert source.tree_sha256 in text, entry.name
            for artifact in source.artifacts:
                assert artifact.sha256 in text, (entry.name, artifact.filename)


def _tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [ROOT / p for p in out.stdout.decode().split("\0") if p]


def test_no_file_refers_to_material_outside_the_repository():
    try:
        files = _tracked_files()
    except (OSError, subprocess.CalledProcessError):
        files = [p for p in ROOT.rglob("*") if p.is_file() and ".git" not in p.parts]
    hits = []
    for path in files:
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if FORBIDDEN.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}")
    assert not hits, "references to files outside the repository:\n" + "\n".join(hits)


def test_doc_links_to_repository_files_exist():
    """Paths such as `toolkit/data/catalogue.py` or `recipes/vision/lmcl_cpu.yaml` named in the
    docs and the README exist (globs and placeholders excepted)."""
    pattern = re.compile(
        r"`((?:toolkit|domains|recipes|docs|scripts|tests|examples|bench)"
        r"/[A-Za-z0-9_./-]+)`"
    )
    missing = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for ref in pattern.findall(doc.read_text(encoding="utf-8")):
            if "*" in ref or "{" in ref:
                continue
            if not (ROOT / ref.rstrip("/")).exists():
                missing.append(f"{doc.name}: {ref}")
    assert not missing, missing


def test_the_methods_index_is_what_the_registries_generate():
    """docs/methods.md's index (recipe key -> class -> function -> fused kernel) is regenerated
    from the registries and compared: run ``python scripts/methods_index.py`` after a change."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("methods_index", ROOT / "scripts" / "methods_index.py")
    methods_index = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(methods_index)
    text = (ROOT / "docs" / "methods.md").read_text(encoding="utf-8")
    assert methods_index.rewritten(text) == text, (
        "docs/methods.md's index is stale: run python scripts/methods_index.py"
    )
    rows = methods_index.rows()
    keys = {key.strip("`").split(": ")[0] for key, *_ in rows}
    assert keys == {
        "objective.loss.name",
        "objective.regularizers[].name",
        "objective.negatives.source",
        "objective.selector.name",
        "objective.selector.schedule.name",
    }
    assert len(rows) == len(LOSSES) + len(REGULARIZERS) + len(SELECTORS) + len(SELECTOR_SCHEDULES) + 3
    by_key = {key.strip("`"): rest for key, *rest in rows}
    assert by_key["objective.loss.name: nt_xent"] == [
        "`toolkit.losses.modules.infonce.NTXent`",
        "`toolkit.losses.functional.infonce.info_nce_scores`, `toolkit.losses.functional.infonce.nt_xent`",
        "`toolkit.losses.functional._kernel._InBatchLoss`",
    ]
    assert by_key["objective.negatives.source: queue"][0] == "`toolkit.samplers.sources.MoCoQueue`"
