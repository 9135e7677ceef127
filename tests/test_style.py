"""The house style is the formatter's and the linter's (ruff, configured in pyproject.toml).

The README's test command runs these, so CI fails on code that is not formatted or that the
linter flags; `ruff format .` and `ruff check --fix .` put most of it right.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> list[str]:
    here = Path(sys.executable).parent / "ruff"
    if here.exists():
        return [str(here)]
    found = shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed: it is in the test extras (pip install -e '.[test]')")
    return [found]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*_ruff(), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_code_is_formatted():
    done = _run("format", "--check", ".")
    assert done.returncode == 0, "ruff format --check:\n" + done.stdout + done.stderr


def test_the_linter_finds_nothing():
    done = _run("check", ".")
    assert done.returncode == 0, "ruff check:\n" + done.stdout + done.stderr


def test_the_configured_line_length_is_kept_by_the_command_line():
    """cli.py and the commands' wiring (command_line/): no line over the configured length."""
    limit = 120
    assert f"line-length = {limit}" in (ROOT / "pyproject.toml").read_text()
    long = [
        f"{path.relative_to(ROOT)}:{i}"
        for path in [ROOT / "cli.py", *sorted((ROOT / "command_line").glob("*.py"))]
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if len(line) > limit
    ]
    assert not long, f"lines over {limit} characters: {long}"
