"""The run path: a recipe read, overridden, named and validated, its device, precision and
resume point decided, once, in one place (:func:`plan`, a frozen :class:`Plan`:
``planning.py``); then executed (:func:`execute`: ``execution.py``, one named step a function),
which changes nothing in the plan::

    p = plan(path, overrides, lookup, device=None, resume=None)  # the one pass: everything decided
    execute(p)                                                   # marks dead runs, store, trainer, fit

The domain lookup is passed in (``commands.py`` passes ``domains.installed.get``, so the toolkit
stays free of any domain) and called once. :func:`load_recipe` is the validation alone (``ctk
show``, sweeps); :func:`decide` decides a recipe it validated (what :func:`execute` does when it
is given a recipe rather than a plan).
"""

from toolkit.runs.execution import calibrate, execute, record_metrics, retire_dead_runs
from toolkit.runs.planning import (
    DomainLookup,
    Plan,
    RunFinished,
    decide,
    load_recipe,
    plan,
    precision_choice,
    with_run_name,
)

__all__ = [
    "DomainLookup",
    "Plan",
    "plan",
    "decide",
    "load_recipe",
    "with_run_name",
    "precision_choice",
    "RunFinished",
    "record_metrics",
    "retire_dead_runs",
    "execute",
    "calibrate",
]
