"""The text domain: quick-thought sentence encoders on contiguous books and SentEval-style
evaluation (``TextDomain``; see ``domain.py`` for the tour). ``CATALOGUE`` is the domain's
datasets on its face (``domains.base``, "A domain's datasets", from ``catalogue.py``). Every name
is imported when first asked for, so the catalogue loads without torch."""

__all__ = ["TextDomain", "build_quick_thought_encoder", "CATALOGUE"]


def __getattr__(name: str):
    if name == "CATALOGUE":
        from domains.text.catalogue import CATALOGUE

        return CATALOGUE
    if name in __all__:
        from domains.text import domain

        return getattr(domain, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
