"""The text domain: quick-thought sentence encoders on contiguous books and SentEval-style
evaluation (``TextDomain``; see ``domain.py`` for the tour)."""
from domains.text.domain import TextDomain, build_quick_thought_encoder

__all__ = ["TextDomain", "build_quick_thought_encoder"]
