"""What a run was *set* to do and what it *found*: two kinds of mlflow params, told apart by name.

* **settings**: the resolved recipe (defaults filled in, ``--set`` overrides included), one param
  per flattened key (``objective.loss.temperature``, ``budget.minutes``, ``precision``: what the
  recipe asked for, ``auto`` included). Comparisons group runs by these, ``seed`` aside.
* **measurements** (``measured.*``): what the run found or chose while running: the step count
  ``budget.minutes`` fixed (``measured.budget_steps_fixed``, ``measured.budget_ms_per_step``,
  ``measured.budget_steps_by``: ``run`` when the run calibrated it, ``sweep`` when its sweep
  did), the environment steps an RL run reached (``measured.budget_steps_reached``), the
  precision and device ``auto`` resolved to (``measured.precision``, ``measured.device``), the
  compile mode the training step ran in (``measured.compile``: what ``compile: auto`` chose), the
  probe's chosen regularisation (``measured.evaluation.chosen.linear_c...``).
* **environment** (``env.*``): the machine and code the run ran on: ``env.cpu_capability``
  (``torch.backends.cpu.get_cpu_capability()``), ``env.cpu_bf16`` (``native`` / ``not native``),
  ``env.cpu_model``, ``env.gpu`` (``none`` without CUDA), ``env.torch``, ``env.threads`` (torch's
  CPU threads), ``env.ctk``, ``env.git_commit``.

Runs logged before this split keep their old names; :func:`split_params` reads them as
measurements: ``budget_steps_fixed``, ``budget_ms_per_step``, ``budget_steps_reached``,
``evaluation.chosen.*``, and ``precision`` where the run also logged ``precision_requested`` (then
``precision`` was the resolved value and ``precision_requested`` the setting). Their ctk version
and commit come from the tags ``ctk.version`` and ``mlflow.source.git.commit``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["MEASURED", "ENV", "split_params", "settings", "measurements", "is_setting", "earlier_steps"]

MEASURED = "measured."
ENV = "env."
_LEGACY = ("budget_steps_fixed", "budget_ms_per_step", "budget_steps_reached")
_LEGACY_PREFIXES = ("evaluation.chosen.",)
_ENV_TAGS = {"ctk.version": "env.ctk", "mlflow.source.git.commit": "env.git_commit"}


def split_params(
    params: Mapping[str, str], tags: Mapping[str, str] | None = None
) -> tuple[dict[str, str], dict[str, str]]:
    """(settings, measurements) of a run's params (and tags, for the environment of old runs);
    measurement keys carry their namespace (``measured.precision``, ``env.git_commit``), old
    names mapped onto it."""
    legacy_precision = "precision_requested" in params and f"{MEASURED}precision" not in params
    settings_: dict[str, str] = {}
    found: dict[str, str] = {}
    for key, value in params.items():
        if key.startswith((MEASURED, ENV)):
            found[key] = value
        elif key in _LEGACY or key.startswith(_LEGACY_PREFIXES):
            found.setdefault(MEASURED + key, value)
        elif legacy_precision and key == "precision":
            found.setdefault(f"{MEASURED}precision", value)
        elif legacy_precision and key == "precision_requested":
            settings_["precision"] = value
        else:
            settings_[key] = value
    for tag, key in _ENV_TAGS.items():
        if tags and tag in tags and key not in found:
            found[key] = tags[tag]
    return settings_, found


def settings(run: Any) -> dict[str, str]:
    """What the user set for ``run`` (an mlflow run): its settings params."""
    return split_params(run.data.params, run.data.tags)[0]


def measurements(run: Any) -> dict[str, str]:
    """What ``run`` found, chose or ran on: its ``measured.*`` and ``env.*`` values."""
    return split_params(run.data.params, run.data.tags)[1]


def is_setting(key: str) -> bool:
    """Whether a param named ``key`` (new names) is a setting."""
    return not key.startswith((MEASURED, ENV))


# what must match for an earlier run's budget.minutes count to be this run's: the machine and
# how the run used it
_SAME_MACHINE = (
    "env.cpu_model",
    "env.cpu_capability",
    "env.cpu_bf16",
    "env.gpu",
    "env.torch",
    "env.threads",
    f"{MEASURED}precision",
    f"{MEASURED}device",
)


def _comparable(params: Mapping[str, str], tags: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str | None]]:
    settings_, found = split_params(params, tags)
    same = {k: v for k, v in settings_.items() if k != "seed" and not k.startswith("tracking.")}
    return same, {k: found.get(k) for k in _SAME_MACHINE}


def earlier_steps(client: Any, run_id: str) -> tuple[int, str] | None:
    """(steps, run id): the ``budget.minutes`` step count that the earliest other run of
    ``run_id``'s experiment calibrated with the same settings (seed and ``tracking.*`` aside) on
    the same machine (CPU model and capability, bf16, GPU, torch and its threads, precision and
    device used), or None. Only runs that calibrated themselves count; the run's own params must
    be logged already."""
    this = client.get_run(run_id)
    want = _comparable(this.data.params, this.data.tags)
    if None in want[1].values():
        return None
    for run in client.search_runs(
        [this.info.experiment_id],
        f"params.`{MEASURED}budget_steps_by` = 'run'",
        order_by=["attributes.start_time ASC"],
        max_results=1000,
    ):
        if (
            run.info.run_id != run_id
            and run.info.status in ("FINISHED", "RUNNING")
            and _comparable(run.data.params, run.data.tags) == want
        ):
            return int(run.data.params[f"{MEASURED}budget_steps_fixed"]), run.info.run_id
    return None
