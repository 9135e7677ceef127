"""The toy domain: the papers' synthetic experiments, each seconds on a CPU.

``domains.toy:ToyDomain`` is the entry the domain registry loads. Modules, one idea each:
``ring_mi`` (Ring App. B: true MI, optimal and MLP critics, NCE / CNCE estimates),
``ring_experiment`` (the ring_mi run: metrics and figure), ``mixture`` (CPCL Sec. 5: Gaussian
mixture, augmentation matrix), ``clusters`` (LMCL Sec. 5.1 cluster sets, defined in
``docs/toy-datasets.md``), ``encoders`` (linear map / MLP with L2-normalised output),
``evaluation`` (linear probe, k-means accuracy), ``figures``, ``config`` (recipe sections),
``domain`` (the ``ToyDomain`` adapter).
"""

__all__ = ["ToyDomain"]


def __getattr__(name: str):
    if name == "ToyDomain":  # imported when first asked for: the domain's face answers without torch
        from domains.toy.domain import ToyDomain

        return ToyDomain
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
