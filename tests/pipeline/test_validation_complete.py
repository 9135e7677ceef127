"""One validation, at load, complete (issue 30, item 2): what ``ctk run`` can check without data is
checked by ``ctk show`` too, every problem of a recipe is listed in one pass with its path, and a
run whose data cannot be read is refused before anything is written to the store."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import cli

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
CARTPOLE = str(RECIPES / "rl" / "cartpole_swingup.yaml")
QUICKSTART = str(RECIPES / "vision" / "quickstart.yaml")
TEXT = str(RECIPES / "text" / "cpu" / "qt_austen.yaml")


def _problems(output: str) -> dict[str, str]:
    """``{path: message}`` of the problem lines of a RecipeError as the CLI prints it."""
    lines = [ln.strip() for ln in output.splitlines()[1:] if ln.startswith("  ") and ": " in ln]
    return dict(ln.split(": ", 1) for ln in lines)


def _invoke(*args: str):
    result = CliRunner().invoke(cli.main, list(args))
    assert "Traceback" not in result.output
    return result


def _nothing_written(folder: Path) -> None:
    assert not (folder / "mlflow.db").exists()
    assert not (folder / "mlartifacts").exists()
    assert not (folder / "checkpoints").exists()


@pytest.mark.parametrize(
    "task,expect",
    [
        ("cartpole-nope", "balance, balance_sparse, swingup"),  # the domain's own tasks
        ("nodomain-swingup", "acrobot, ball_in_cup, cartpole"),  # the suite's domains
    ],
)
def test_show_and_run_refuse_an_unknown_dmcontrol_task(workdir, task, expect):
    for command in ("show", "run"):
        result = _invoke(command, CARTPOLE, "--set", f"data.task={task}")
        assert result.exit_code == 2, result.output
        problems = _problems(result.output)
        assert list(problems) == ["data.task"], result.output
        assert repr(task) in problems["data.task"] and expect in problems["data.task"]
    _nothing_written(workdir)


def test_a_task_of_the_suite_outside_curls_six_is_accepted():
    assert _invoke("show", CARTPOLE, "--set", "data.task=point_mass-easy").exit_code == 0


def test_schema_and_objective_problems_are_listed_together():
    result = _invoke(
        "show",
        QUICKSTART,
        "--set",
        "objective.loss.temperature=-1",
        "--set",
        "budget.batch_size=0",
        "--set",
        "optimizer.lr=-3",
    )
    assert result.exit_code == 2
    problems = _problems(result.output)
    assert set(problems) == {"objective.loss.temperature", "budget.batch_size", "optimizer.lr"}, result.output
    assert "> 0" in problems["objective.loss.temperature"] and "-1" in problems["objective.loss.temperature"]
    assert "3 problems" in result.output.splitlines()[0]


def test_objective_schema_problems_do_not_hide_its_component_checks():
    """views and negatives fail the schema; the loss's own arguments are still checked, and
    the checks that depend on the rejected keys are not reported twice."""
    result = _invoke(
        "show",
        QUICKSTART,
        "--set",
        "objective.views=0",
        "--set",
        "objective.negatives.source=bank",
        "--set",
        "objective.loss.temperature=-1",
        "--set",
        "objective.loss.tau=1",
    )
    assert result.exit_code == 2
    assert set(_problems(result.output)) == {
        "objective.views",
        "objective.negatives.source",
        "objective.loss.temperature",
        "objective.loss.tau",
    }, result.output


def test_every_bad_argument_of_a_loss_is_listed():
    result = _invoke(
        "show",
        str(RECIPES / "vision" / "cacr_cpu.yaml"),
        "--set",
        "objective.loss.t_pos=-1",
        "--set",
        "objective.loss.t_neg=-2",
    )
    assert result.exit_code == 2
    problems = _problems(result.output)
    assert set(problems) == {"objective.loss.t_pos", "objective.loss.t_neg"}, result.output
    assert "-2" in problems["objective.loss.t_neg"]


@pytest.mark.parametrize(
    "key,value",
    [
        ("budget.epochs", ".inf"),
        ("optimizer.betas", "[.nan, 0.9]"),
        ("objective.regularizers", "[{name: distance_polarization, weight: .inf}]"),
        ("evaluation.knn.temperature", "-.inf"),
    ],
)
def test_nan_and_infinity_are_refused(key, value):
    result = _invoke("show", QUICKSTART, "--set", f"{key}={value}")
    assert result.exit_code == 2
    assert any(path.startswith(key) for path in _problems(result.output)), result.output


def test_run_refuses_a_dataset_that_is_not_there_before_the_store(workdir):
    empty = workdir / "no-data"
    empty.mkdir()
    result = _invoke(
        "run",
        QUICKSTART,
        "--set",
        "data.dataset=cifar10",
        "--set",
        f"data.root={empty}",
        "--set",
        "data.augment.preset=grey",
    )
    assert result.exit_code == 2, result.output
    problems = _problems(result.output)
    assert list(problems) == ["data.dataset"], result.output
    assert "'cifar10'" in problems["data.dataset"] and "cifar-10-batches-py" in problems["data.dataset"]
    _nothing_written(workdir)
    assert _invoke("show", QUICKSTART, "--set", "data.dataset=cifar10").exit_code == 0  # the recipe is fine


def test_a_sweep_refuses_missing_data_before_its_parent_run(workdir):
    empty = workdir / "no-data"
    empty.mkdir()
    result = _invoke(
        "sweep",
        QUICKSTART,
        "--grid",
        "seed=0,1",
        "--set",
        "data.dataset=cifar10",
        "--set",
        f"data.root={empty}",
        "--quiet",
    )
    assert result.exit_code == 2, result.output
    assert "nothing was run" in result.output and "data.dataset: dataset 'cifar10'" in result.output
    assert result.output.count("cifar-10-batches-py") == 2  # one problem (two mentions), not one per point
    _nothing_written(workdir)


def test_run_refuses_text_files_that_are_not_there_before_the_store(workdir):
    result = _invoke(
        "run",
        TEXT,
        "--set",
        f"evaluation.senteval_path={workdir / 'nope'}",
        "--set",
        f"data.tokenizer.path={workdir / 'tok.json'}",
    )
    assert result.exit_code == 2, result.output
    assert set(_problems(result.output)) == {"evaluation.senteval_path", "data.tokenizer.path"}, result.output
    _nothing_written(workdir)


LMCL = str(RECIPES / "toy" / "lmcl_three_bars_cl.yaml")


@pytest.mark.parametrize(
    "sets,path,expect",
    [
        (["data.lmcl_clusters.params.bogus=1"], "data.lmcl_clusters.params.bogus", "length, gap, width, offset"),
        (["data.lmcl_clusters.params.gap=-1"], "data.lmcl_clusters.params.gap", "> 0"),
        (
            ["data.dataset=sector_blobs", "data.lmcl_clusters.params.classes=1.5"],
            "data.lmcl_clusters.params.classes",
            "integer >= 2",
        ),
        (["budget.batch_size=601"], "budget.batch_size", "600 training points"),
        (["tracking.uri=mlflow.db"], "tracking.uri", "sqlite:///PATH"),
    ],
)
def test_what_failed_only_once_the_run_had_started_is_refused_at_load(sets, path, expect):
    """The cluster generator's parameters (unknown ones were a TypeError after the run was
    created, an integer one arrived as a float), the batch against the cluster set's size and
    the tracking URI's form are checked by ``ctk show``."""
    result = _invoke("show", LMCL, *sum((["--set", s] for s in sets), []))
    assert result.exit_code == 2, result.output
    problems = _problems(result.output)
    assert list(problems) == [path] and expect in problems[path], result.output


def test_an_integer_cluster_parameter_stays_an_integer():
    result = _invoke("show", LMCL, "--set", "data.dataset=sector_blobs", "--set", "data.lmcl_clusters.params.classes=4")
    assert result.exit_code == 0, result.output
    assert "      classes: 4\n" in result.output


def test_a_misspelt_required_key_is_named_with_what_it_should_be(workdir):
    path = workdir / "r.yaml"
    path.write_text(Path(LMCL).read_text().replace("domain: toy", "dmain: toy"))
    problems = _problems(_invoke("show", str(path)).output)
    assert problems == {"domain": "required key is missing", "dmain": "unknown key; did you mean 'domain'?"}
    path.write_text(Path(LMCL).read_text().replace("{name: nt_xent", "{nme: nt_xent"))
    problems = _problems(_invoke("show", str(path)).output)
    assert problems["objective.loss.nme"] == "unknown key; did you mean 'name'?", problems


def test_the_resolved_rl_recipe_is_a_valid_recipe(workdir):
    """rl trains with a constant learning rate: its resolved recipe says so (it said 'cosine',
    the toolkit's default, which the rl checks refuse, so ``ctk show``'s output did not load)."""
    result = _invoke("show", CARTPOLE)
    shown = result.output.split("\n", 1)[1]
    assert "schedule:\n  name: constant\n" in shown
    path = workdir / "resolved.yaml"
    path.write_text(shown)
    assert _invoke("show", str(path)).exit_code == 0


@pytest.mark.parametrize(
    "content,expect",
    [
        (b"domain: toy\nname: caf\xe9\n", "not UTF-8 text: byte 0xe9 at line 2"),
        (b"domain: toy\nseed: 1\nseed: 2\n", "written twice in one mapping (lines 2 and 3)"),
        (b"domain: toy\nname: a\x05b\n", "unacceptable character #x0005"),
        (b"domain: toy\ndescription: " + b"[" * 5000 + b"]" * 5000 + b"\n", "brackets nested more than 64"),
        (
            b"domain: toy\ndescription: &a [&b [x, x, x, x, x, x, x, x, x, x], [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b],"
            b" &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b], [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]]\n"
            b"name: [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n",
            "more than 10000 values once YAML aliases are expanded",
        ),
    ],
)
def test_hostile_files_are_one_clear_problem(workdir, content, expect):
    """What the generated hostile recipes found (tests/pipeline/test_hostile_recipes.py): a
    traceback (non-UTF-8 bytes, control characters, deep brackets), a silent override
    (duplicated keys) and a validation that ran for hours (an alias bomb)."""
    path = workdir / "r.yaml"
    path.write_bytes(content)
    result = _invoke("show", str(path))
    assert result.exit_code == 2 and expect in result.output, result.output
