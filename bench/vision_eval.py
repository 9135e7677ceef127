"""Wall time of the vision evaluation after training, as it was and as it is, on one trained
encoder, in one process: the probes' accuracies beside each time, so that what it measures can be
compared too.

* ``before``: the evaluation as it was before issue 27, written out from the same library
  functions: the trained encoder's features, its linear probe (every C of ``c_grid`` fitted on
  the held-out split in worker processes, then the final fit in this process), its kNN; then the
  random-init twin's features and probe; then the pixels' probe and kNN; then the geometry;
  features extracted in batches of 512.
* ``after``: ``domains.vision.evaluation.evaluate`` with the recipe as it is (the quickstart:
  ``c_search: ascend``, extraction batches of 256, every feature set extracted first, the three
  probes at once).

Each phase is timed (feature extraction, linear probes, kNN, geometry); the worker processes
are started once before both, so neither pays for that. Usage::

    python bench/vision_eval.py ENCODER [--recipe recipes/vision/quickstart.yaml] [--set k=v ...]
                                [--only before|after] [--threads N]

``ENCODER``: a run id of the store ``$MLFLOW_TRACKING_URI`` (every run logs its encoder) or a
file written by ``ctk export``.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import domains.vision.diagnostics as diagnostics  # noqa: E402
import domains.vision.evaluation as evaluation  # noqa: E402
from domains import installed  # noqa: E402
from domains.export import load_encoder  # noqa: E402
from domains.vision.probes import extract  # noqa: E402
from toolkit.evaluation.knn import knn_score_sets, topk_accuracy  # noqa: E402
from toolkit.evaluation.probes import linear_probe  # noqa: E402
from toolkit.runs import load_recipe  # noqa: E402
from toolkit.training.precision import machine_line  # noqa: E402

BEFORE_BATCH = 512  # the extraction batch of every vision recipe before issue 27

SHOWN = (
    "linear_top1",
    "linear_top1_random_init",
    "linear_top1_raw_pixels",
    "knn_top1",
    "knn5_top1",
    "knn_top1_raw_pixels",
    "knn5_top1_raw_pixels",
)


class Clock:
    """Seconds spent in each wrapped function, by phase name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def wrap(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[phase] += time.perf_counter() - start

        return timed


def before(domain: Any, encoder: torch.nn.Module, data: Any, recipe: Any, clock: Clock) -> dict[str, float]:
    """The evaluation as it was: each feature set probed on its own, one after another."""
    cfg, lin, nat, bs = recipe.evaluation, recipe.evaluation.linear, data.augment.natural, BEFORE_BATCH
    ext, probe = clock.wrap("features", extract), clock.wrap("linear probes", linear_probe)
    knn = clock.wrap("knn", knn_score_sets)
    ytr, yte, out = data.probe_train.labels, data.test.labels, {}

    def probes(tr: torch.Tensor, te: torch.Tensor, suffix: str, with_knn: bool) -> None:
        c = 1.0 / (lin.weight_decay * len(ytr)) if lin.weight_decay > 0 else 1.0
        res = probe(
            tr,
            ytr,
            te,
            yte,
            c=c,
            standardize=lin.standardize,
            select=lin.select_c,
            c_grid=lin.c_grid,
            holdout=lin.holdout,
            max_iter=lin.epochs,
            seed=data.seed,
        )
        out[f"linear_top1{suffix}"], out[f"linear_c{suffix}"] = res["top1"], res["c"]
        if with_knn:
            scores = knn(
                tr, ytr, te, data.num_classes, [(cfg.knn.k, True), (5, False)], temperature=cfg.knn.temperature
            )
            out[f"knn_top1{suffix}"] = topk_accuracy(scores[0], yte, 1)
            out[f"knn5_top1{suffix}"] = topk_accuracy(scores[1], yte, 1)

    with torch.no_grad():
        probes(
            ext(encoder.features, data.probe_train.images, nat, bs),
            ext(encoder.features, data.test.images, nat, bs),
            "",
            True,
        )
        torch.manual_seed(data.seed + 7919)
        fresh = domain.build_encoder(recipe).eval()
        probes(
            ext(fresh.features, data.probe_train.images, nat, bs),
            ext(fresh.features, data.test.images, nat, bs),
            "_random_init",
            False,
        )

        def pixels(x: torch.Tensor) -> torch.Tensor:
            return x.flatten(1)

        probes(
            ext(pixels, data.probe_train.images, nat, bs), ext(pixels, data.test.images, nat, bs), "_raw_pixels", True
        )
    clock.wrap("geometry", diagnostics.geometry)(encoder, data, recipe)
    return out


def after(domain: Any, encoder: torch.nn.Module, data: Any, recipe: Any, clock: Clock) -> dict[str, float]:
    """``domains.vision.evaluation.evaluate`` as it is, its phases timed."""
    saved = {
        name: getattr(evaluation, name)
        for name in ("extract", "extract_features", "linear_probes", "knn_score_sets")
        if hasattr(evaluation, name)
    }
    geometry = diagnostics.geometry
    try:
        for name, fn in saved.items():
            phase = {"linear_probes": "linear probes", "knn_score_sets": "knn"}.get(name, "features")
            setattr(evaluation, name, clock.wrap(phase, fn))
        diagnostics.geometry = clock.wrap("geometry", geometry)
        with torch.no_grad():
            result = evaluation.evaluate(domain, encoder, data, recipe)
    finally:
        for name, fn in saved.items():
            setattr(evaluation, name, fn)
        diagnostics.geometry = geometry
    return {**result.metrics, **result.settings}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("encoder", help="a run id of $MLFLOW_TRACKING_URI or a file from `ctk export`")
    ap.add_argument("--recipe", default=str(ROOT / "recipes/vision/quickstart.yaml"))
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--only", choices=("before", "after"))
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(machine_line(), flush=True)
    print(
        f"torch threads {torch.get_num_threads()}; encoder {args.encoder}; recipe {args.recipe} "
        f"{' '.join(args.overrides)}",
        flush=True,
    )
    recipe = load_recipe(args.recipe, args.overrides, installed.get)
    domain = recipe.domain_class(recipe)
    data = domain.load_eval(recipe)
    encoder = load_encoder(args.encoder).eval()
    from joblib import Parallel, delayed  # start the worker processes once, for both

    Parallel(n_jobs=2)(delayed(abs)(i) for i in range(2))
    walls: dict[str, float] = {}
    for mode, fn in (("before", before), ("after", after)):
        if args.only and mode != args.only:
            continue
        clock, start = Clock(), time.perf_counter()
        metrics = fn(domain, encoder, data, recipe, clock)
        walls[mode] = time.perf_counter() - start
        phases = ", ".join(f"{k} {v:.1f} s" for k, v in clock.seconds.items())
        print(f"{mode}: {walls[mode]:.1f} s ({phases})", flush=True)
        print("  " + ", ".join(f"{k} {metrics[k]:.2f}" for k in SHOWN if k in metrics), flush=True)
        print(
            "  C chosen: " + ", ".join(f"{k} {v:g}" for k, v in metrics.items() if k.startswith("linear_c")), flush=True
        )
    if len(walls) == 2:
        print(f"before / after: {walls['before'] / walls['after']:.2f}x")


if __name__ == "__main__":
    main()
