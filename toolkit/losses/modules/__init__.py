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

from toolkit.losses.base import LOSSES
from toolkit.losses.modules.cacr import CACR, CACRMoCo, CACRMultiview
from toolkit.losses.modules.debiased import DCL, HCL
from toolkit.losses.modules.geometry import ACA, CPCLA, AlignUniform, CPCLFull, Spectral
from toolkit.losses.modules.infonce import CMC, InfoNCE, MoCoInfoNCE, NTXent
from toolkit.losses.modules.ring import IRNCE, IRRing, RingNCE
from toolkit.losses.modules.wang_liu import WLContrastive, WLHard, WLHardSimple, WLSimple

__all__ = [
    "LOSSES",
    "NTXent",
    "InfoNCE",
    "MoCoInfoNCE",
    "CMC",
    "DCL",
    "HCL",
    "AlignUniform",
    "Spectral",
    "CPCLA",
    "CPCLFull",
    "ACA",
    "WLContrastive",
    "WLSimple",
    "WLHard",
    "WLHardSimple",
    "CACR",
    "CACRMultiview",
    "CACRMoCo",
    "RingNCE",
    "IRNCE",
    "IRRing",
]
