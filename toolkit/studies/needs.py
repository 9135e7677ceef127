"""What a paper table of ``ctk reproduce`` needs before it can run here: the datasets its rows
read (installed in the data root, fetchable offline with ``ctk data fetch``, a folder the user
places (ImageNet and its subsets: the catalogue's ``placed``), or not in the offline catalogue at
all, the catalogue being the installed domains' that the command hands in),
whether it needs a GPU (the table's ``gpu: true``, or a row with ``device: cuda`` or
``resources.gpus``), the wall time measured for it on a 2-core CPU machine (the table's
``cpu_minutes``) and, for a GPU table, the GPU-hours measured for it (``gpu_hours``, with the
card in ``gpu_hours_on``; "not measured" until then). Read from the YAML alone: nothing is
imported that needs torch, and nothing is fetched."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from toolkit import recipe as rc
from toolkit.data.catalogue import Catalogue

# recipe keys that name data the data provider serves
_DATA_KEYS = ("dataset", "corpus")


@dataclass
class Needs:
    installed: list[str] = field(default_factory=list)  # present in the data root
    fetchable: list[str] = field(default_factory=list)  # in the offline catalogue, not fetched yet
    unavailable: list[str] = field(default_factory=list)  # no offline copy (CIFAR, STL-10, BookCorpus...)
    to_place: list[str] = field(default_factory=list)  # "name at folder": a placed dataset not there yet
    gpu: bool = False
    cpu_minutes: float | None = None
    gpu_hours: float | None = None  # measured, all rows and seeds
    gpu_hours_on: str = ""  # the card they were measured on

    def line(self) -> str:
        parts = []
        if self.installed:
            parts.append("data here: " + ", ".join(self.installed))
        if self.fetchable:
            parts.append("ctk data fetch " + " ".join(self.fetchable))
        if self.unavailable:
            parts.append("no offline copy: " + ", ".join(self.unavailable))
        if self.to_place:
            parts.append("place " + ", ".join(self.to_place) + " (docs/data.md)")
        parts.append("GPU" if self.gpu else "CPU")
        if self.cpu_minutes is not None:
            parts.append(f"~{self.cpu_minutes:g} min on 2 CPU cores")
        elif not self.gpu:
            parts.append("time on 2 CPU cores not measured")
        if self.gpu:
            on = f" on {self.gpu_hours_on}" if self.gpu_hours_on else ""
            parts.append(
                f"~{self.gpu_hours:g} GPU-hours{on}" if self.gpu_hours is not None else "GPU-hours not measured"
            )
        return "; ".join(parts)


def _names(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, str)]
    return []


def placed_folder(catalogue: Catalogue, name: str, data: dict[str, Any], root: str | None = None) -> Path:
    """Where a dataset the user places (``catalogue.placed``) is read: the recipe's ``data.path``,
    else the first of its folder names found under the data root (``data.root``, ``root``, else
    the provider's)."""
    from toolkit.data import root as data_folder

    if data.get("path"):
        return Path(str(data["path"])).expanduser()
    base = data_folder.data_root(data.get("root") or root)
    names = catalogue.placed[name]
    return next((base / n for n in names if (base / n).is_dir()), base / names[0])


def table_needs(table: Any, catalogue: Catalogue, root: str | None = None) -> Needs:
    """The needs of ``table`` (a :class:`toolkit.studies.reproduce.PaperTable`), read from the
    recipes of its rows with their overrides, against ``catalogue`` (the installed domains':
    ``domains.installed.catalogue``)."""
    from toolkit.data import root as data_folder

    needs = Needs()
    raw_table = yaml.safe_load(table.path.read_text()) or {}
    minutes = raw_table.get("cpu_minutes")
    needs.cpu_minutes = float(minutes) if isinstance(minutes, (int, float)) else None
    needs.gpu = bool(raw_table.get("gpu"))  # paper scale: hours on a GPU, days on 2 CPU cores
    hours = raw_table.get("gpu_hours")
    needs.gpu_hours = float(hours) if isinstance(hours, (int, float)) else None
    needs.gpu_hours_on = str(raw_table.get("gpu_hours_on") or "")
    wanted: list[str] = []
    placed: list[str] = []
    for row in table.rows:
        try:
            raw = rc.apply_overrides(rc.load_yaml(row.recipe), list(row.overrides), str(row.recipe))
        except (rc.RecipeError, OSError):
            continue  # ctk reproduce NAME reports it with its path
        data = raw.get("data") or {}
        if data.get("experiment"):  # generated in the run (the toy sets): nothing to fetch
            continue
        for key in _DATA_KEYS:
            for n in _names(data.get(key)):
                if n in catalogue.placed:
                    folder = placed_folder(catalogue, n, data, root)
                    here = (folder / "train").is_dir() and (folder / "val").is_dir()
                    folders = (
                        [folder] if here or data.get("path") else [folder.parent / name for name in catalogue.placed[n]]
                    )  # imagenet100: or a full imagenet
                    where = f"{n} at {' or '.join(str(f) for f in folders)}"
                    if where not in placed + needs.installed:
                        (needs.installed if here else placed).append(where)
                elif n not in wanted:
                    wanted.append(n)
        resources = raw.get("resources") or {}
        needs.gpu = needs.gpu or raw.get("device") == "cuda" or bool(resources.get("gpus"))
    for name in wanted:
        key = name.replace("_", "-")
        if key not in catalogue.names():
            needs.unavailable.append(name)
        elif data_folder.is_installed(catalogue, key, root):
            needs.installed.append(key)
        else:
            needs.fetchable.append(key)
    needs.to_place = placed
    return needs
