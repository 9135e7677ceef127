"""What a paper table of ``ctk reproduce`` needs before it can run here: the datasets its rows
read (installed in the data root, fetchable offline with ``ctk data fetch``, or not in the offline
catalogue at all), whether it needs a GPU (the table's ``gpu: true``, or a row with ``device:
cuda`` or ``resources.gpus``), and the wall time measured for it on a 2-core
CPU machine (the table's ``cpu_minutes``). Read from the YAML alone: nothing is imported that
needs torch, and nothing is fetched."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from toolkit import recipe as rc

# recipe keys that name data the data provider serves
_DATA_KEYS = ("dataset", "corpus")


@dataclass
class Needs:
    installed: list[str] = field(default_factory=list)   # present in the data root
    fetchable: list[str] = field(default_factory=list)   # in the offline catalogue, not fetched yet
    unavailable: list[str] = field(default_factory=list)  # no offline copy (CIFAR, STL-10, BookCorpus...)
    gpu: bool = False
    cpu_minutes: float | None = None

    def line(self) -> str:
        parts = []
        if self.installed:
            parts.append("data here: " + ", ".join(self.installed))
        if self.fetchable:
            parts.append("ctk data fetch " + " ".join(self.fetchable))
        if self.unavailable:
            parts.append("no offline copy: " + ", ".join(self.unavailable))
        parts.append("GPU" if self.gpu else "CPU")
        parts.append(f"~{self.cpu_minutes:g} min on 2 CPU cores" if self.cpu_minutes is not None
                     else "time on 2 CPU cores not measured")
        return "; ".join(parts)


def _names(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, str)]
    return []


def table_needs(table: Any, root: str | None = None) -> Needs:
    """The needs of ``table`` (a :class:`toolkit.studies.reproduce.PaperTable`), read from the
    recipes of its rows with their overrides."""
    from toolkit.data import store
    needs = Needs()
    raw_table = yaml.safe_load(table.path.read_text()) or {}
    minutes = raw_table.get("cpu_minutes")
    needs.cpu_minutes = float(minutes) if isinstance(minutes, (int, float)) else None
    needs.gpu = bool(raw_table.get("gpu"))  # paper scale: hours on a GPU, days on 2 CPU cores
    wanted: list[str] = []
    for row in table.rows:
        try:
            raw = rc.apply_overrides(rc.load_yaml(row.recipe), list(row.overrides), str(row.recipe))
        except (rc.RecipeError, OSError):
            continue  # ctk reproduce NAME reports it with its path
        data = raw.get("data") or {}
        if data.get("experiment"):  # generated in the run (the toy sets): nothing to fetch
            continue
        for key in _DATA_KEYS:
            wanted += [n for n in _names(data.get(key)) if n not in wanted]
        resources = raw.get("resources") or {}
        needs.gpu = needs.gpu or raw.get("device") == "cuda" or bool(resources.get("gpus"))
    catalogue = store.catalog()
    for name in wanted:
        key = name.replace("_", "-")
        if key not in catalogue:
            needs.unavailable.append(name)
        elif store.is_installed(key, root):
            needs.installed.append(key)
        else:
            needs.fetchable.append(key)
    return needs
