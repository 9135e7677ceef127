"""Twenty malformed recipes: each exits with code 2, prints no traceback, and names the key."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

import cli
from tests.pipeline.conftest import POINTS_RECIPE


def _with(path: str, value):
    data = yaml.safe_load(POINTS_RECIPE)
    node = data
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node.setdefault(k, {})
    if value is _DELETE:
        del node[keys[-1]]
    else:
        node[keys[-1]] = value
    return yaml.safe_dump(data)


_DELETE = object()

CASES = [
    # (description, recipe text, the key the message must name, a word of the expectation)
    ("unknown top-level key", _with("optimiser", {"lr": 1}), "optimiser", "unknown key"),
    ("unknown loss", _with("objective.loss.name", "ntxent"), "objective.loss.name", "nt_xent"),
    ("negative temperature", _with("objective.loss.temperature", -0.5), "objective.loss.temperature", "> 0"),
    ("temperature as text", _with("objective.loss.temperature", "warm"), "objective.loss.temperature", "number"),
    ("unknown loss argument", _with("objective.loss.tau", 0.1), "objective.loss.tau", "temperature"),
    ("unknown domain", _with("domain", "audio"), "domain", "vision"),
    ("missing domain", _with("domain", _DELETE), "domain", "missing"),
    ("wrong type for batch size", _with("budget.batch_size", "big"), "budget.batch_size", "integer"),
    ("zero batch size", _with("budget.batch_size", 0), "budget.batch_size", "greater than or equal to 1"),
    ("no budget length", _with("budget.steps", _DELETE), "budget", "epochs or steps"),
    ("unknown optimizer", _with("optimizer.name", "adagrad"), "optimizer.name", "sgd"),
    ("negative learning rate", _with("optimizer.lr", -1), "optimizer.lr", "greater than 0"),
    ("unknown schedule", _with("schedule.name", "poly"), "schedule.name", "cosine"),
    (
        "unknown regularizer",
        _with("objective.regularizers.0.name", "lmcl"),
        "objective.regularizers.0.name",
        "distance_polarization",
    ),
    ("DP margin reversed", _with("objective.regularizers.0.d_plus", 0.7), "objective.regularizers.0.d_plus", "d_minus"),
    (
        "unknown negative source",
        _with("objective.negatives", {"source": "bank"}),
        "objective.negatives.source",
        "memory_bank",
    ),
    (
        "queue loss with in-batch negatives",
        _with("objective.loss", {"name": "moco_infonce"}),
        "objective.negatives.source",
        "queue",
    ),
    ("unknown domain data key", _with("data.size", 10), "data.size", "unknown key"),
    (
        "ring with lower >= upper",
        _with("objective.selector", {"name": "ring", "lower": 80, "upper": 20}),
        "objective.selector.lower",
        "lower",
    ),
    (
        "selector on a loss that takes none",
        _with("objective", {"loss": {"name": "spectral"}, "selector": {"name": "hard", "num_hard": 4}}),
        "objective.selector.name",
        "selector",
    ),
]


@pytest.mark.parametrize("description,text,key,expect", CASES, ids=[c[0] for c in CASES])
def test_malformed_recipe_exits_2_naming_the_key(points_domain, workdir, description, text, key, expect):
    path = workdir / "bad.yaml"
    path.write_text(text)
    result = CliRunner().invoke(cli.main, ["run", str(path)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip().startswith(key + ":")]
    assert lines, f"no line names {key!r}:\n{result.output}"
    assert any(expect.lower() in ln.lower() for ln in lines), result.output


def test_unreadable_and_invalid_files(points_domain, workdir):
    runner = CliRunner()
    missing = runner.invoke(cli.main, ["run", str(workdir / "nope.yaml")])
    assert missing.exit_code == 2 and "cannot read" in missing.output
    bad = workdir / "bad.yaml"
    bad.write_text("domain: points\nobjective: [unclosed\n")
    result = runner.invoke(cli.main, ["show", str(bad)])
    assert result.exit_code == 2 and "not valid YAML at line" in result.output
    bad.write_text("- just\n- a list\n")
    assert runner.invoke(cli.main, ["show", str(bad)]).exit_code == 2


def test_set_overrides_are_validated(points_domain, points_recipe):
    runner = CliRunner()
    result = runner.invoke(cli.main, ["show", str(points_recipe), "--set", "objective.loss.temperature=0"])
    assert result.exit_code == 2
    assert "objective.loss.temperature:" in result.output
    result = runner.invoke(cli.main, ["show", str(points_recipe), "--set", "budget.batch_size"])
    assert result.exit_code == 2 and "key.path=value" in result.output
    ok = runner.invoke(cli.main, ["show", str(points_recipe), "--set", "objective.loss.temperature=0.2"])
    assert ok.exit_code == 0, ok.output
    shown = yaml.safe_load(ok.output.split("\n", 1)[1])
    assert shown["objective"]["loss"]["temperature"] == 0.2
    assert shown["optimizer"]["weight_decay"] == 0.0  # defaults are filled in
