"""``ctk show`` prints every default it applies: the loss's, each regularizer's and the
selector's, read here from the constructors' signatures (the plain reference), and none
where the recipe wrote its own value."""

from __future__ import annotations

import inspect
from pathlib import Path

import yaml
from click.testing import CliRunner

import cli
from toolkit.losses.base import LOSSES
from toolkit.regularizers import REGULARIZERS

ROOT = Path(cli.__file__).resolve().parent
MOCO = str(ROOT / "recipes/vision/moco_ring_cpu.yaml")


def _objective(*args: str) -> dict:
    result = CliRunner().invoke(cli.main, ["show", *args])
    assert result.exit_code == 0, result.output
    text = "\n".join(line for line in result.output.splitlines() if not line.startswith("#"))
    return yaml.safe_load(text)["objective"]


def _defaults(cls) -> dict:
    return {
        name: p.default
        for name, p in inspect.signature(cls.__init__).parameters.items()
        if name != "self" and p.default is not p.empty
    }


def test_show_prints_the_loss_defaults():
    obj = _objective(MOCO, "--set", "objective.loss.name=ring_nce", "--set", "objective.selector={name: all}")
    expected = {"name": "ring_nce", **_defaults(LOSSES.get("ring_nce"))}
    assert obj["loss"] == expected
    assert (obj["loss"]["lower"], obj["loss"]["upper"]) == (90.0, 99.0)


def test_show_keeps_written_values_and_fills_regularizer_and_selector_defaults():
    obj = _objective(str(ROOT / "recipes/toy/lmcl_three_bars_dp.yaml"), "--set", "objective.loss.temperature=0.5")
    assert obj["loss"] == {"name": "nt_xent", **_defaults(LOSSES.get("nt_xent")), "temperature": 0.5}
    (reg,) = obj["regularizers"]
    assert reg == {
        **_defaults(REGULARIZERS.get("distance_polarization")),
        "name": "distance_polarization",
        "weight": 0.1,
        "d_plus": 0.1,
        "d_minus": 0.5,
    }
    sel = _objective(MOCO, "--set", "objective.selector={name: ring}")["selector"]
    assert (sel["theta_outer"], sel["theta_inner"]) == (0.1, 0.1)
    scheduled = _objective(MOCO)["selector"]  # theta_outer is driven by the schedule: not filled
    assert "theta_outer" not in scheduled and scheduled["theta_inner"] == 0.1
