"""Helpers shared by the plug-in tests."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "ctk-tabular"


def fake_distribution(
    folder: Path, dist: str, entry_points: dict[str, str], module: str | None = None, module_source: str = ""
) -> Path:
    """Write a minimal installed distribution into ``folder``: ``<dist>-0.0.1.dist-info`` with
    METADATA and an ``entry_points.txt`` in the ``ctk.domains`` group, and optionally a module
    ``<module>.py``. With ``folder`` on ``sys.path``, ``importlib.metadata`` sees it as one more
    installed package."""
    info = folder / f"{dist.replace('-', '_')}-0.0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.0.1\n")
    lines = "".join(f"{name} = {target}\n" for name, target in entry_points.items())
    (info / "entry_points.txt").write_text(f"[ctk.domains]\n{lines}")
    if module:
        (folder / f"{module}.py").write_text(module_source)
    return folder
