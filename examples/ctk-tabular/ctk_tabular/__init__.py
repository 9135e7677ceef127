"""ctk-tabular: a worked example of a ctk domain living in its own package.

Installing this package declares the entry point ``tabular = "ctk_tabular:TabularDomain"`` in
the ``ctk.domains`` group; ctk then finds the domain by name (``domain: tabular`` in a recipe,
``ctk list domains``) without any edit to ctk itself. See ``docs/adding-a-domain.md`` in ctk.
"""

from .corruption import corrupted_count, corruption_mask, scarf_views
from .domain import RECIPES, TabularData, TabularDomain, TabularEncoder, TabularEvaluation
from .encoder import MLPEncoder

__version__ = "0.1.0"
__all__ = [
    "TabularDomain",
    "TabularData",
    "TabularEncoder",
    "TabularEvaluation",
    "MLPEncoder",
    "scarf_views",
    "corruption_mask",
    "corrupted_count",
    "RECIPES",
    "__version__",
]
