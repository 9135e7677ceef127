"""``ctk list`` reads the registrations from the source (toolkit.registry.declared, no torch):
what it reads must be what importing the components registers, names and descriptions."""

from __future__ import annotations

import pytest

import toolkit.objective  # noqa: F401 - registers every built-in component
from toolkit.losses.base import LOSSES
from toolkit.registry import LISTED, Registry, declared, summary_line
from toolkit.regularizers import REGULARIZERS
from toolkit.samplers import SELECTOR_SCHEDULES, SELECTORS

IMPORTED = {
    "LOSSES": LOSSES,
    "SELECTORS": SELECTORS,
    "REGULARIZERS": REGULARIZERS,
    "SELECTOR_SCHEDULES": SELECTOR_SCHEDULES,
}


@pytest.mark.parametrize("what", sorted(LISTED))
def test_declared_registrations_equal_the_imported_registry(what):
    registry = IMPORTED[LISTED[what]]
    assert declared(LISTED[what]) == {e.name: e.description for e in registry}
    assert len(registry) > 0


def test_a_default_description_is_the_docstrings_first_paragraph():
    reg: Registry[type] = Registry("thing")

    @reg.register("wrapped")
    class Wrapped:
        """First line
        goes on here.

        Details."""

    assert reg.entry("wrapped").description == "First line goes on here."
    assert summary_line(None) == ""
