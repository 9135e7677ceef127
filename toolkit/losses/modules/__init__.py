"""Registered loss modules: hyper-parameters validated at construction, the math in
``toolkit.losses.functional``; one module here per functional family.

Each module reads the :class:`~toolkit.losses.base.ContrastiveBatch` fields it declares in
``needs`` and returns a :class:`~toolkit.losses.base.LossOutput` whose records are the scalars
the functional core computed anyway. Recipes name them (``loss: {name: cacr, t_neg: 2.0}``);
``ctk list losses`` prints the registry, :data:`LOSSES` (importing this package fills it).

* ``infonce``   nt_xent, info_nce, moco_infonce, cmc
* ``debiased``  dcl, hcl
* ``geometry``  align_uniform, spectral, cpcl_a, cpcl_full, aca
* ``wang_liu``  wl_contrastive, wl_simple, wl_hard, wl_hard_simple
* ``cacr``      cacr, cacr_multiview, cacr_moco
* ``ring``      ring_nce, ir_nce, ir_ring
* ``byol``      byol, simsiam (a predictor against a target network or a stopped gradient)
* ``moco_v3``   moco_v3 (in-batch momentum keys, no queue)
* ``redundancy`` barlow_twins, vicreg (batch statistics, no negatives)
* ``swav``      swav (Sinkhorn codes over prototypes, multi-crop, optional queue)
* ``dino``      dino (centred, sharpened momentum teacher, multi-crop)
* ``supcon``    supcon (labels as positives)
* ``nnclr``     nnclr (nearest neighbour in a support set)
* ``batch_io``  what they all read from the batch (views, domain scores) and the records they return

Which embeddings go where (V views per instance, ``views[:, 0]`` is the query view):

* in-batch pair losses (nt_xent, dcl, hcl, spectral, cpcl_*, align_uniform) use views 0 and 1;
  when the domain supplies ``scores`` + ``positive_mask`` (quick-thought, CURL) the InfoNCE,
  DCL and HCL modules use the score-level forms instead;
* MoCo-form losses (moco_infonce, ring_nce) use ``q = views[:, 0]``, ``k = keys[:, 1]`` and the
  queue in ``negatives``; cacr_moco uses all query and key views;
* memory-bank losses (wl_*, ir_nce, ir_ring) compare ``views[:, 0]`` with the bank rows in
  ``negatives``, the anchor's own slot (``indices``) being the positive.
"""

import importlib
import inspect
import pkgutil

from toolkit.losses.base import LOSSES, ContrastiveLoss

__all__ = ["LOSSES"]

# Every submodule is imported (its classes register themselves where they are defined), and its
# loss classes are exported here: adding a loss is adding a file, no list to keep.
for _info in pkgutil.iter_modules(__path__):
    if _info.name.startswith("_") or _info.name == "batch_io":
        continue
    _module = importlib.import_module(f"{__name__}.{_info.name}")
    for _name, _obj in inspect.getmembers(_module, inspect.isclass):
        if issubclass(_obj, ContrastiveLoss) and _obj.__module__ == _module.__name__:
            globals()[_name] = _obj
            __all__.append(_name)
