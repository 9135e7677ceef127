"""``toolkit.losses.functional``: pure, differentiable losses on embeddings.

Every function follows docs/methods.md (paper form by default; authors'-code forms
behind named arguments), reduces by the batch mean, works in float32 and float64, and raises a
``ValueError`` naming the argument for bad input. Each docstring gives the formula.

Submodules, one family each: ``infonce`` (score-level InfoNCE, NT-Xent, MoCo, CMC),
``debiased`` (DCL, HCL), ``geometry`` (alignment/uniformity, spectral, CPCL, ACA),
``polarization`` (LMCL distance polarization), ``wang_liu`` (Wang & Liu Eq. 1/3/9),
``cacr`` (CACR forms), ``ring`` (Ring / CNCE), ``byol`` (BYOL, SimSiam), ``moco_v3``,
``redundancy`` (Barlow Twins, VICReg), ``swav`` (SwAV and its Sinkhorn-Knopp codes),
``dino``, ``supcon`` (supervised contrastive), ``nnclr``.

Every submodule whose name does not start with ``_`` is imported when the package is, and the
names in its ``__all__`` are re-exported here (``functional.nt_xent``, ``functional.byol``):
adding a loss is adding a file, no list to edit. A submodule must declare ``__all__``, and two
submodules may not export the same name (both are import errors, raised at once). The private
ones, whose names start with ``_`` (``_kernel``, ``_precision``, ``_validation``,
``_repulsion``), are shared machinery, imported by the families that use them.

Where a loss runs through a fused autograd kernel, its module also holds the formula in plain
torch (``nt_xent_reference``, ``moco_infonce_reference``, ``dcl_reference``,
``debiased_scores_reference``, ``uniform_reference``, ``cacr_reference``,
``distance_polarization_reference``, ``wl_sims_from_bank_reference``): the readable definition
and the tests' reference, not exported here. Every public function runs float16 / bfloat16
inputs in float32 with autocast off (``_precision.full_precision``).
"""

from __future__ import annotations

import importlib
import pkgutil


def _export_submodules() -> list[str]:
    """Import every public submodule (sorted by name) and bind its ``__all__`` here."""
    exporter: dict[str, str] = {}
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        names = getattr(module, "__all__", None)
        if names is None:
            raise ImportError(f"{module.__name__} must declare __all__ (the names the package re-exports)")
        for name in names:
            if name in exporter:
                raise ImportError(f"{name!r} is exported by both {exporter[name]} and {module.__name__}")
            exporter[name] = module.__name__
            globals()[name] = getattr(module, name)
    return sorted(exporter)


__all__ = _export_submodules()
