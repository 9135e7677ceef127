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
    from toolkit.recipe import Negatives

    sources = len(Negatives.model_fields["source"].annotation.__args__)  # in_batch, queue, memory_bank, support_set
    assert len(rows) == len(LOSSES) + len(REGULARIZERS) + len(SELECTORS) + len(SELECTOR_SCHEDULES) + sources
    by_key = {key.strip("`"): rest for key, *rest in rows}
    assert by_key["objective.loss.name: nt_xent"] == [
        "`toolkit.losses.modules.infonce.NTXent`",
        "`toolkit.losses.functional.infonce.info_nce_scores`, `toolkit.losses.functional.infonce.nt_xent`",
        "`toolkit.losses.functional._kernel._InBatchLoss`",
    ]
    assert by_key["objective.negatives.source: queue"][0] == "`toolkit.samplers.sources.MoCoQueue`"


# -- bare file names: resolved where the text stands -------------------------------------------
BARE = re.compile(r"``?([A-Za-z_][\w.-]*(?:\.py|/))``?")
ROOM_ROW = re.compile(r"^\|\s*`([\w.-]+(?:/|\.py))`\s*\|")
LISTING = re.compile(r"^``(\w+)``\s{2,}")  # a package map: ``module``  what it holds
NAMED_MODULE = re.compile(r"``(\w+)`` \(")  # "Modules, one idea each: ``augment`` (batched views), ..."


def missing_bare_names_in_map(text: str, root: Path = ROOT) -> list[str]:
    """Bare names (`files.py`, `functional/`) in a map such as docs/architecture.md that name no
    file: in a table row whose first cell is a room (`recipe/`), relative to that room under the
    folder the section's heading names (``## toolkit/, room by room``); elsewhere, relative to
    the repository's root or, failing that, to toolkit/."""
    missing = []
    parent = root
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("#"):
            heading = re.search(r"\b([\w-]+)/", line)
            parent = root / heading.group(1) if heading and (root / heading.group(1)).is_dir() else root
            continue
        row = ROOM_ROW.match(line)
        bases = [root, root / "toolkit"]
        if row:
            room = parent / row.group(1)
            bases = [room if room.is_dir() else room.parent]
            line = line[row.end() :]
        for name in BARE.findall(line):
            if "/" in name.rstrip("/") or "*" in name:
                continue  # a path: the path checks see it
            if not any((base / name.rstrip("/")).exists() for base in bases):
                missing.append(f"{number}: {name} (looked in {', '.join(str(b.relative_to(root)) for b in bases)})")
    return missing


def test_the_bare_name_check_resolves_names_where_they_stand():
    table = "## toolkit/, room by room\n\n| `recipe/` | `files.py` reads YAML; `sections.py` the schema |\n"
    assert missing_bare_names_in_map(table) == ["3: files.py (looked in toolkit/recipe)"]
    assert missing_bare_names_in_map(table.replace("files.py", "reading.py")) == []
    assert missing_bare_names_in_map("`commands.py` and `objective.py`, not `nowhere.py`") == [
        "1: nowhere.py (looked in ., toolkit)"
    ]


def test_the_architecture_map_names_bare_files_that_exist():
    missing = missing_bare_names_in_map((ROOT / "docs" / "architecture.md").read_text(encoding="utf-8"))
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def missing_names_in_package_docstring(init: Path) -> list[str]:
    """What a package's docstring names that its folder does not hold: ``name.py`` / ``name/``,
    the modules of a map (lines ``module``  what it holds) and of a "Modules, ...: ``x`` (...)"
    list."""
    import ast

    doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
    folder = init.parent
    missing = []
    for name in BARE.findall(doc):
        if "/" not in name.rstrip("/") and not (folder / name.rstrip("/")).exists() and not (ROOT / name).exists():
            missing.append(name)
    modules = [m for line in doc.splitlines() if (m := LISTING.match(line))]
    modules = [m.group(1) for m in modules]
    if "Modules" in doc:
        modules += NAMED_MODULE.findall(doc.split("Modules", 1)[1])
    for name in modules:
        if not ((folder / f"{name}.py").exists() or (folder / name / "__init__.py").exists()):
            missing.append(name)
    return missing


def test_every_package_docstring_names_modules_that_exist():
    found = []
    for package in ("toolkit", "domains", "command_line"):
        for init in sorted((ROOT / package).rglob("__init__.py")):
            found += [f"{init.relative_to(ROOT)}: {name}" for name in missing_names_in_package_docstring(init)]
    assert not found, "package docstrings name what their folder does not hold: " + ", ".join(found)
