"""Fixtures for the plug-in tests: the example package ``examples/ctk-tabular`` installed the
way a user would install it, but into a temporary folder, so nothing else sees it.

``pip install --no-deps --no-build-isolation --no-index --target DIR`` builds the package with
the setuptools already in the environment (no network) from a copy of the source (no build
litter in the shared tree). ``DIR`` then holds ``ctk_tabular/`` and its ``*.dist-info`` with
the ``ctk.domains`` entry point; a process that has ``DIR`` on ``sys.path`` finds the domain,
every other process does not.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.plugin.helpers import EXAMPLE


def _forget_plugin_modules() -> None:
    for name in [
        m for m in sys.modules if m == "ctk_tabular" or m.startswith("ctk_tabular.") or m.startswith("ctk_fake_")
    ]:
        del sys.modules[name]
    importlib.invalidate_caches()


@pytest.fixture(scope="session")
def installed_plugin(tmp_path_factory) -> Path:
    """A folder holding the installed example package (built once per test session)."""
    base = tmp_path_factory.mktemp("plugin")
    source, target = base / "src", base / "site"
    shutil.copytree(
        EXAMPLE,
        source,
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "mlflow.db", "mlartifacts", "checkpoints"),
    )
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    env.pop("PIP_CONSTRAINT", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--quiet",
            "--target",
            str(target),
            str(source),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, f"pip install of the example failed:\n{proc.stdout}\n{proc.stderr}"
    return target


@pytest.fixture
def plugin_on_path(installed_plugin, monkeypatch) -> Path:
    """The installed example importable in this process for one test, then forgotten."""
    monkeypatch.syspath_prepend(str(installed_plugin))
    yield installed_plugin
    _forget_plugin_modules()


@pytest.fixture
def source_on_path(monkeypatch) -> None:
    """The example's source importable (unit tests of the package need no install)."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    yield
    _forget_plugin_modules()
