"""The run path through one face: resume checks, hostile files refused at the CLI, the logged
encoder as data (export round trip), and registries open to code outside the toolkit."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import cli
from toolkit import checkpoint as ckpt
from toolkit import objective as objective_mod
from toolkit import recipe as rc
from toolkit.runs import execute, load_recipe
from toolkit.tracking.runlog import RunLog
from toolkit.tracking.store import client_for

from .hostile import hostile_file

ROOT = Path(__file__).resolve().parents[2]


def test_resume_of_a_hostile_checkpoint_exits_2_and_runs_nothing(points_domain, points_recipe, workdir):
    marker = workdir / "pwned"
    (workdir / "checkpoints" / "someone").mkdir(parents=True)
    evil = hostile_file(workdir / "checkpoints" / "someone" / "step-000000008.pt", marker)
    result = CliRunner().invoke(cli.main, ["run", str(points_recipe), "--resume", str(evil), "--quiet"])
    assert result.exit_code == 2, result.output
    assert str(evil) in result.output and "Traceback" not in result.output
    assert not marker.exists()


def test_one_handshake_the_domain_is_looked_up_and_checked_once(points_domain, points_recipe, monkeypatch):
    """load_recipe finds the domain and runs its check once; execute builds the domain from the
    recipe without looking it up or checking it again, and the trainer builds its objective."""
    from tests.pipeline.points_domain import PointsDomain

    calls = {"lookup": 0, "check": 0}
    check = PointsDomain.check.__func__

    def counted_check(cls, raw, sections):
        calls["check"] += 1
        return check(cls, raw, sections)

    def lookup(name):
        calls["lookup"] += 1
        return points_domain(name)

    monkeypatch.setattr(PointsDomain, "check", classmethod(counted_check))
    r = load_recipe(points_recipe, ["budget.steps=4"], lookup)
    assert r.domain_class is PointsDomain and not hasattr(r, "built")
    execute(r, progress=False)
    assert calls == {"lookup": 1, "check": 1}
    bare = rc.validate(dict(r.raw), PointsDomain.sections())  # validated without its domain
    with pytest.raises(ValueError, match="load it with toolkit.runs.load_recipe"):
        execute(bare, progress=False)


def test_resume_with_another_recipe_is_refused_naming_the_keys(points_domain, points_recipe):
    r = load_recipe(points_recipe, [], points_domain)
    run_id, _ = execute(r, progress=False)
    result = CliRunner().invoke(
        cli.main,
        [
            "run",
            str(points_recipe),
            "--resume",
            run_id,
            "--quiet",
            "--set",
            "objective.loss.temperature=0.2",
            "--set",
            "seed=3",
        ],
    )
    assert result.exit_code == 2, result.output
    assert "objective.loss.temperature" in result.output and "seed" in result.output


def test_each_trainer_state_round_trips_through_the_checkpoint_module(points_domain, points_recipe):
    r = load_recipe(points_recipe, ["budget.steps=5"], points_domain)
    trainer = points_domain("points")(r).trainer(r, _NullTracker())
    trainer.fit()
    path = ckpt.save(points_recipe.parent / "t.pt", trainer.state_dict())
    fresh = points_domain("points")(r).trainer(r, _NullTracker())
    fresh.load_state_dict(ckpt.load(path))
    for k, v in trainer.encoder.state_dict().items():
        assert torch.equal(v, fresh.encoder.state_dict()[k]), k
    assert fresh.state.step == trainer.state.step == 5
    assert fresh.optimizer.state_dict()["state"].keys() == trainer.optimizer.state_dict()["state"].keys()


class _NullTracker(RunLog):
    """Keeps nothing (the declared face's defaults)."""


def test_logged_encoder_loads_back_as_data_and_gives_the_same_embeddings(points_domain, points_recipe, recwarn):
    from domains.export import load_encoder

    r = load_recipe(points_recipe, ["tracking.log_model=true", "budget.steps=6"], points_domain)
    run_id, _ = execute(r, progress=False)
    assert not [w for w in recwarn if "pickle" in str(w.message).lower()]
    trained = ckpt.load(ckpt.latest(ckpt.checkpoint_dir(run_id)))["trainer"]["encoder"]
    x = torch.randn(10, 4)
    reference = torch.nn.functional.normalize(x @ trained["lin.weight"].T + trained["lin.bias"], dim=-1)
    encoder = load_encoder(run_id)
    assert torch.allclose(encoder(x), reference, atol=1e-6)
    out = points_recipe.parent / "enc.pt"
    result = CliRunner().invoke(cli.main, ["export", run_id, "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert torch.allclose(load_encoder(out)(x), reference, atol=1e-6)
    assert all(v.device.type == "cpu" for v in ckpt.load(out)["state_dict"].values())


def test_a_replaced_model_file_is_refused(points_domain, points_recipe):
    from domains.export import load_encoder

    r = load_recipe(points_recipe, ["tracking.log_model=true", "budget.steps=2"], points_domain)
    run_id, _ = execute(r, progress=False)
    client = client_for()
    local = Path(client.download_artifacts(run_id, "model/encoder.pt", str(points_recipe.parent / "dl")))
    stored = Path(client.get_run(run_id).info.artifact_uri.replace("file://", "")) / "model" / "encoder.pt"
    assert stored.is_file() and local.is_file()
    marker = points_recipe.parent / "pwned"
    hostile_file(stored, marker)
    with pytest.raises(ckpt.UnsafeCheckpoint):
        load_encoder(run_id)
    result = CliRunner().invoke(cli.main, ["export", run_id, "--out", str(points_recipe.parent / "x.pt")])
    assert result.exit_code == 2 and "refused" in result.output
    assert not marker.exists()


def test_a_selector_registered_outside_the_toolkit_is_usable_from_a_recipe(points_domain, points_recipe):
    from toolkit.samplers import SELECTORS, NegativeSelector

    class KeepFirstHalf(NegativeSelector):
        """keep the less similar half of each row's negatives"""

        arguments = ("fraction",)

        def mask(self, sims, fraction=0.5):
            k = max(1, int(sims.shape[1] * fraction))
            order = sims.argsort(dim=1)
            keep = torch.zeros_like(sims, dtype=torch.bool)
            return keep.scatter_(1, order[:, :k], True)

    SELECTORS.add("test_half", KeepFirstHalf)
    try:
        r = load_recipe(
            points_recipe,
            ["objective.selector={name: test_half, fraction: 0.25}", "objective.regularizers=[]", "budget.steps=3"],
            points_domain,
        )
        obj = objective_mod.from_recipe(r)
        sims = torch.arange(12.0).view(2, 6)
        assert obj.selector(sims, 0).sum(1).tolist() == [1, 1]
        execute(r, progress=False)
        with pytest.raises(Exception, match="objective.selector"):
            load_recipe(points_recipe, ["objective.selector={name: test_half, nope: 1}"], points_domain)
    finally:
        SELECTORS._entries.pop("test_half")


def test_toolkit_never_imports_domains_or_cli():
    offenders = []
    for path in (ROOT / "toolkit").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            if any(n.split(".")[0] in ("domains", "cli") for n in names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders


def test_no_pickle_loading_in_the_package():
    hits = []
    for folder in ("toolkit", "domains"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            if "weights_only=False" in text or "allow_pickle=True" in text or "pickle.load" in text:
                hits.append(str(path.relative_to(ROOT)))
    assert not hits


def test_time_to_accuracy_is_logged_against_training_wall_time(points_domain, points_recipe):
    r = load_recipe(points_recipe, ["budget.eval_every=8"], points_domain)
    run_id, metrics = execute(r, progress=False)
    client = client_for()
    figures = [a.path for a in client.list_artifacts(run_id, "figures")]
    assert "figures/time_to_accuracy.png" in figures
    state = ckpt.load(ckpt.latest(ckpt.checkpoint_dir(run_id)))["trainer"]["loop"]
    acc = [(s, step, v) for s, step, name, v in state["progress"] if name == "centroid_acc"]
    assert [step for _, step, _ in acc] == [8, 16, 24]  # the periodic evaluations and the end
    assert all(a[0] <= b[0] for a, b in zip(acc, acc[1:])) and acc[-1][0] <= state["train_seconds"]
    assert acc[-1][2] == metrics["centroid_acc"]
    wall = [m.value for m in client.get_metric_history(run_id, "train/wall_seconds")]
    assert len(wall) == 6 and wall == sorted(wall)


def test_the_online_monitor_starts_at_the_untrained_encoder(points_domain, points_recipe, monkeypatch):
    """With budget.monitor_every, the monitor also runs before the first step (training time
    0), so the time-to-accuracy curve starts where the untrained encoder stands."""
    from tests.pipeline.points_domain import PointsDomain

    seen: list[int] = []

    def monitor(self, encoder, data):
        seen.append(len(seen))
        return {"calls": float(len(seen))}

    monkeypatch.setattr(PointsDomain, "monitor", monitor, raising=False)
    r = load_recipe(points_recipe, ["budget.monitor_every=8"], points_domain)
    run_id, _ = execute(r, progress=False)
    state = ckpt.load(ckpt.latest(ckpt.checkpoint_dir(run_id)))["trainer"]["loop"]
    online = [(s, step, v) for s, step, name, v in state["progress"] if name == "online_calls"]
    assert [step for _, step, _ in online] == [0, 8, 16, 24]
    assert online[0][0] == 0.0 and [v for _, _, v in online] == [1.0, 2.0, 3.0, 4.0]
    history = client_for().get_metric_history(run_id, "online_calls")
    assert sorted(m.step for m in history) == [0, 8, 16, 24]


def test_time_to_accuracy_gives_each_metric_its_own_axis():
    from toolkit.evaluation.plots import time_to_accuracy_figure

    one = time_to_accuracy_figure({"return": [(0.0, 10.0), (5.0, 300.0)]}, baselines={"random": 100.0})
    assert len(one.axes) == 1
    ys = [list(line.get_ydata()) for line in one.axes[0].lines]
    assert [10.0, 300.0] in ys and [100.0, 100.0] in ys
    two = time_to_accuracy_figure({"mr": [(3.0, 70.0), (0.0, 67.0)], "top1": [(0.0, 2.0), (3.0, 2.5)]})
    assert len(two.axes) == 2
    assert [list(a.lines[0].get_xdata()) for a in two.axes] == [[0.0, 3.0], [0.0, 3.0]]  # sorted by time
    assert [list(a.lines[0].get_ydata()) for a in two.axes] == [[67.0, 70.0], [2.0, 2.5]]
    assert [a.get_ylabel() for a in two.axes] == ["mr", "top1"]
