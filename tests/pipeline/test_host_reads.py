"""A whole training step takes nothing back from the device on CUDA: the batch, the objective with
every registered loss (and every selector, negative source and regularizer), the backward pass,
the optimizer step and the objective's after-step work, run by the trainer's own ``_train_step``
on the CPU with every CUDA branch forced (``toolkit.training.syncs.cuda_branches``) and counted by
``SyncCounter`` (tensor methods and the operators that read back: ``_local_scalar_dense``,
``nonzero``, bool-mask indexing, ...). The losses are read from the registry, so a loss added later
is checked too; its objective comes from a recipe in ``recipes/`` that uses it where one does (its
predictor, target, negative source), else from what the loss ``needs``. The losses that take a
domain's own score matrix (quick-thought, CURL) are stepped a second time on a domain that
scores its candidates. On a CUDA host the same steps run on the GPU, untouched, under
``torch.cuda.set_sync_debug_mode("error")`` (any synchronising call raises)."""

from __future__ import annotations

import contextlib
import copy
import inspect
from pathlib import Path

import pytest
import torch
import yaml

from domains import installed
from tests.pipeline.points_domain import PointsDomain
from toolkit.losses.base import LOSSES
from toolkit.regularizers import REGULARIZERS
from toolkit.runs import load_recipe
from toolkit.samplers import SELECTORS
from toolkit.tracking.runlog import RunLog
from toolkit.training.pretrainer import Pretrainer
from toolkit.training.syncs import SyncCounter, cuda_branches
from toolkit.training.trainer import RunOptions

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
QUEUE = 48  # small sources: the step's reads do not depend on their size
SELECTOR_ARGS = {"hard": {"alpha": 0.5}, "ring": {"lower": 25.0, "upper": 75.0}}  # others: their defaults
# Losses the points domain cannot give a step to, each with the reason (none today: every
# registered loss is checked).
CANNOT_STEP: dict[str, str] = {}


class NoTracker(RunLog):
    """Keeps nothing (the declared face's defaults)."""


class ScoredPointsDomain(PointsDomain):
    """The points domain scoring its candidates itself, as quick-thought and CURL do: view 0
    against view 1 of every instance, the same instance positive, one candidate per row left
    out of the partition (never the positive)."""

    name = "scored_points"

    def contrastive_batch(self, batch, encoder, key_encoder, needs, num_views, step, generator=None):
        cb = super().contrastive_batch(batch, encoder, key_encoder, needs, num_views, step, generator)
        n = cb.views.shape[0]
        cb.scores = cb.views[:, 0] @ cb.views[:, 1].T
        cb.positive_mask = torch.eye(n, dtype=torch.bool, device=cb.scores.device)
        cb.valid_mask = torch.ones_like(cb.positive_mask)
        cb.valid_mask[torch.arange(n), (torch.arange(n) + 1) % n] = False
        return cb


@pytest.fixture
def scored_domain(monkeypatch):
    monkeypatch.setitem(installed.BUILTIN, "scored_points", "tests.pipeline.test_host_reads:ScoredPointsDomain")
    return installed.get


def _recipe_objectives() -> dict[str, dict]:
    """loss name -> the objective section of the first recipe (sorted by path) that uses it."""
    found: dict[str, dict] = {}
    for path in sorted(RECIPES.rglob("*.yaml")):
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError:
            continue
        objective = data.get("objective") if isinstance(data, dict) else None
        loss = objective.get("loss") if isinstance(objective, dict) else None
        if isinstance(loss, dict) and isinstance(loss.get("name"), str):
            found.setdefault(loss["name"], objective)
    return found


FROM_RECIPES = _recipe_objectives()


def _objective(loss: str, selector: str = "all", regularizers: bool = False) -> dict:
    """An objective section for ``loss``: a recipe's where one uses it, its sources made small."""
    objective = copy.deepcopy(FROM_RECIPES.get(loss, {"loss": {"name": loss}}))
    objective.pop("selector", None)
    needs = set(LOSSES.get(loss).needs)
    negatives = objective.setdefault("negatives", {})
    if "negatives" in needs and negatives.get("source", "in_batch") == "in_batch":
        negatives["source"] = "queue" if "keys" in needs else "memory_bank" if "indices" in needs else "support_set"
    if negatives.get("source", "in_batch") != "in_batch":
        negatives["size"] = QUEUE
    if "num_negatives" in objective["loss"]:
        objective["loss"]["num_negatives"] = 32
    objective["views"] = max(2, min(int(objective.get("views", 2)), 4))
    if selector != "all":
        objective["selector"] = {"name": selector, **SELECTOR_ARGS.get(selector, {})}
    objective["regularizers"] = (
        [{"name": name, "weight": 0.01} for name in REGULARIZERS.names()] if regularizers else []
    )
    return objective


def _recipe(workdir: Path, lookup, objective: dict, optimizer: str, domain: str = "points", device: str = "cpu"):
    recipe = {
        "name": "host-reads",
        "domain": domain,
        "seed": 0,
        "device": device,
        "precision": "fp32",
        "compile": "off",
        "data": {"n": 64, "dim": 4},
        "encoder": {"out_dim": 8},
        "objective": objective,
        "optimizer": {"name": optimizer, "lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4},
        "budget": {"steps": 4, "batch_size": 16, "log_every": 4, "checkpoint_every": 0},
        "tracking": {"experiment": "host-reads", "log_model": False},
    }
    path = workdir / "host-reads.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return load_recipe(path, [], lookup)


def _reads_of_a_step(
    workdir: Path, lookup, objective: dict, optimizer: str = "lars", domain: str = "points", device: str = "cpu"
) -> SyncCounter:
    """The host reads of the trainer's second step (the first makes the optimizer's buffers and
    reads a restored queue's pointer once): on the CPU with CUDA's branches taken, on CUDA as
    is, where any synchronisation also raises (``set_sync_debug_mode("error")``)."""
    recipe = _recipe(workdir, lookup, objective, optimizer, domain, device)
    trainer = Pretrainer(recipe, lookup(recipe.domain)(recipe), NoTracker(), RunOptions(progress=False))
    trainer.encoder.train()
    batches = iter(trainer.data.train)
    reads = SyncCounter()
    with cuda_branches() if device == "cpu" else contextlib.nullcontext():
        trainer._train_step(next(batches), 0)
        batch = next(batches)
        with reads, _sync_errors(device):
            trainer._train_step(batch, 1)
    assert trainer.state.step == 2
    return reads


@contextlib.contextmanager
def _sync_errors(device: str):
    if device != "cuda":
        yield
        return
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode("default")


def _valid(objective: dict) -> bool:
    from toolkit import objective as objective_mod
    from toolkit import recipe as rc

    return not objective_mod.check(rc.ObjectiveSection.model_validate(objective))


LOSS_NAMES = [name for name in LOSSES.names() if name not in CANNOT_STEP]
SELECTED = [
    (loss, selector)
    for loss in LOSSES.names()
    if LOSSES.get(loss).accepts_selector and loss not in CANNOT_STEP
    for selector in SELECTORS.names()
    if selector != "all" and _valid(_objective(loss, selector))
]


def _takes_scores(cls: type) -> bool:
    """Whether a loss module (or a module it derives from) reads the domain's score matrix."""
    return any("has_scores" in inspect.getsource(c) for c in cls.__mro__ if c.__module__.startswith("toolkit.losses"))


SCORED = [name for name in LOSS_NAMES if _takes_scores(LOSSES.get(name))]


def test_every_loss_and_selector_is_checked():
    """The lists below come from the registries: guard against their being empty or losing the
    twenty losses of before, and against a selector that no loss accepts."""
    before = {
        "nt_xent", "info_nce", "moco_infonce", "cmc", "dcl", "hcl", "align_uniform", "spectral", "cpcl_a",
        "cpcl_full", "aca", "wl_contrastive", "wl_simple", "wl_hard", "wl_hard_simple", "cacr", "cacr_multiview",
        "cacr_moco", "ring_nce", "ir_nce", "ir_ring",
    }  # fmt: skip
    assert before <= set(LOSS_NAMES), sorted(before - set(LOSS_NAMES))
    assert {s for _, s in SELECTED} == set(SELECTORS.names()) - {"all"}
    assert {"nt_xent", "moco_infonce", "wl_contrastive", "ir_ring"} <= {loss for loss, _ in SELECTED}
    assert {"nt_xent", "info_nce", "dcl", "hcl"} <= set(SCORED)


@pytest.mark.parametrize("loss", LOSS_NAMES)
def test_a_step_reads_nothing_back(points_domain, workdir, loss):
    reads = _reads_of_a_step(workdir, points_domain, _objective(loss))
    assert reads.total == 0, f"{loss}: {dict(reads.calls)}\n{reads.report()}"


@pytest.mark.parametrize("loss", SCORED)
def test_a_scored_step_reads_nothing_back(scored_domain, workdir, loss):
    """The score forms (info_nce_scores, dcl_scores, hcl_scores) on the domain's own scores."""
    reads = _reads_of_a_step(workdir, scored_domain, _objective(loss), domain="scored_points")
    assert reads.total == 0, f"{loss} on scores: {dict(reads.calls)}\n{reads.report()}"


@pytest.mark.parametrize("loss, selector", SELECTED)
def test_a_selected_step_reads_nothing_back(points_domain, workdir, loss, selector):
    reads = _reads_of_a_step(workdir, points_domain, _objective(loss, selector))
    assert reads.total == 0, f"{loss} + {selector}: {dict(reads.calls)}\n{reads.report()}"


@pytest.mark.parametrize("optimizer", ["lars", "sgd", "adam", "adamw"])
def test_every_regularizer_and_optimizer_reads_nothing_back(points_domain, workdir, optimizer):
    reads = _reads_of_a_step(workdir, points_domain, _objective("nt_xent", regularizers=True), optimizer)
    assert reads.total == 0, f"{optimizer}: {dict(reads.calls)}\n{reads.report()}"


def test_the_counter_sees_the_cpu_branches(points_domain, workdir):
    """Without the CUDA branches the CPU path's reads are counted: the checks above can fail."""
    recipe = _recipe(workdir, points_domain, _objective("nt_xent", "ring"), "lars")
    trainer = Pretrainer(recipe, points_domain(recipe.domain)(recipe), NoTracker(), RunOptions(progress=False))
    batches = iter(trainer.data.train)
    trainer._train_step(next(batches), 0)
    with SyncCounter() as reads:
        trainer._train_step(next(batches), 1)
    assert reads.total > 0
    assert torch.is_tensor(trainer.state.sums["loss"])  # records stay on the device between log steps


CUDA_CASES = (
    [(loss, "all", "points") for loss in LOSS_NAMES]
    + [(loss, selector, "points") for loss, selector in SELECTED]
    + [(loss, "all", "scored_points") for loss in SCORED]
)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("loss, selector, domain", CUDA_CASES)
def test_a_cuda_step_never_synchronises(points_domain, scored_domain, workdir, loss, selector, domain):
    reads = _reads_of_a_step(workdir, installed.get, _objective(loss, selector), domain=domain, device="cuda")
    assert reads.total == 0, f"{loss} + {selector} on {domain}: {dict(reads.calls)}\n{reads.report()}"
