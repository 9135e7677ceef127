"""The vision domain: image datasets with batched views, vision encoders, probes and geometry.

``domains.vision:VisionDomain`` is the entry the domain registry loads. Modules, one idea each:
``dataset_table`` (every dataset, one entry: storage, layout, normalisation, default views, how
to get it), ``datasets`` (in-memory datasets through torchvision's loaders, class-imbalanced
subsets), ``image_folders`` (datasets of one file per image: layouts, file lists, checks),
``streaming`` and ``decode`` (the workers reading and cropping files), ``memory_storage`` and
``stream_storage`` (the domain's data calls for each storage), ``views`` (the recipe's view
family, split between workers and device), ``fixtures`` (CIFAR-format files and photo folders
from packaged real images), ``augment`` (batched view families of the papers' appendices),
``encoders`` (ResNet, small AlexNet, conv net, projection head), ``probes`` (linear probe,
weighted kNN), ``evaluation`` (metrics, baselines, online monitor), ``diagnostics`` (alignment,
uniformity, tolerance, H(X-|X), LMCL margin, figures), ``config`` (recipe sections), ``domain``
(the ``VisionDomain`` adapter).

``catalogue`` (the offline datasets and the ones a user places). ``CATALOGUE`` is the domain's
datasets on its face (``domains.base``, "A domain's datasets"); it and ``VisionDomain`` are imported
when first asked for, so the catalogue loads without torch.
"""

__all__ = ["VisionDomain", "CATALOGUE"]


def __getattr__(name: str):
    if name == "CATALOGUE":
        from domains.vision.catalogue import CATALOGUE

        return CATALOGUE
    if name == "VisionDomain":
        from domains.vision.domain import VisionDomain

        return VisionDomain
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
