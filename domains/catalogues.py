"""The offline datasets of the built-in domains: importing this module registers every built-in
domain's catalogue with :mod:`toolkit.data` (``domains/vision/packaged.py``, ``domains/text/packaged.py``)
and re-exports the provider's functions, for the data command line (``ctk data``) and for code
that wants every dataset known.
"""

from __future__ import annotations

import importlib

from toolkit.data import catalog, default_names, fetch, locate, verify

__all__ = ["CATALOGUES", "load_catalogues", "catalog", "default_names", "fetch", "locate", "verify"]

# The built-in domains that ship datasets (rl renders its own observations; toy draws its own).
CATALOGUES = ("domains.vision.packaged", "domains.text.packaged")


def load_catalogues() -> None:
    """Import every built-in catalogue module (each registers itself; a second call is free)."""
    for module in CATALOGUES:
        importlib.import_module(module)


load_catalogues()
