"""``toolkit.losses.functional``: pure, differentiable contrastive losses on embeddings.

Every function follows docs/methods.md (paper form by default; authors'-code forms
behind named arguments), reduces by the batch mean, works in float32 and float64, and raises a
``ValueError`` naming the argument for bad input. Each docstring gives the formula.

Submodules, one family each: ``infonce`` (score-level InfoNCE, NT-Xent, MoCo, CMC),
``debiased`` (DCL, HCL), ``geometry`` (alignment/uniformity, spectral, CPCL, ACA),
``polarization`` (LMCL distance polarization), ``wang_liu`` (Wang & Liu Eq. 1/3/9),
``cacr`` (CACR forms), ``ring`` (Ring / CNCE).

Where a loss runs through a fused autograd kernel, its module also holds the formula in plain
torch (``nt_xent_reference``, ``moco_infonce_reference``, ``dcl_reference``,
``debiased_scores_reference``, ``uniform_reference``, ``cacr_reference``,
``distance_polarization_reference``, ``wl_sims_from_bank_reference``): the readable definition
and the tests' reference, not exported here. Every public function runs float16 / bfloat16
inputs in float32 with autocast off (``_precision.full_precision``).
"""

from .cacr import *  # noqa: F401,F403
from .debiased import *  # noqa: F401,F403
from .geometry import *  # noqa: F401,F403
from .infonce import *  # noqa: F401,F403
from .polarization import *  # noqa: F401,F403
from .ring import *  # noqa: F401,F403
from .wang_liu import *  # noqa: F401,F403
