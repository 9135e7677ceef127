"""A file that runs code when unpickled (it creates ``marker``): what a hostile checkpoint or
model file would be. Loading it through ctk must refuse it and leave no marker."""

from __future__ import annotations

from pathlib import Path

import torch


class Marker:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def hostile_file(path: Path, marker: Path) -> Path:
    torch.save({"format": "ctk-checkpoint/1", "trainer": Marker(str(marker))}, path)
    return path
