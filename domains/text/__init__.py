"""The text domain: quick-thought sentence encoders on contiguous books and SentEval-style
evaluation (``TextDomain``; see ``domain.py`` for the tour). Both names are imported when first
asked for, so the catalogue (``packaged``) loads without torch."""

__all__ = ["TextDomain", "build_quick_thought_encoder"]


def __getattr__(name: str):
    if name in __all__:
        from domains.text import domain

        return getattr(domain, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
