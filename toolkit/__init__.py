"""ctk core: domain-agnostic contrastive losses, samplers, regularizers, metrics, training, tracking.

Layering: ``toolkit`` never imports ``domains`` or ``cli``.
"""

__version__ = "0.1.0"
