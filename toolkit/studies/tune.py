"""Hyper-parameter search on Ray Tune: Optuna's sampler proposes, ASHA stops weak trials early.

``ctk tune RECIPE --space objective.loss.temperature=loguniform(0.05,1) --samples 16
--metric online_knn_top1 --mode max`` runs ``samples`` trials of the recipe, each with the
sampled values as ``--set`` overrides, through the same ``toolkit.runs.execute`` as ``ctk run``.
Every value the run logs under ``metric`` (the periodic evaluation: the online kNN monitor for
vision, ``budget.eval_every`` evaluations, the evaluation return for RL) is reported to Tune, so
ASHA compares trials at the same training step and stops the weak ones. Each trial is an mlflow
child run of one parent run (``tune-<recipe>``); the best trial's recipe is written as YAML.

A recipe with ``budget.minutes`` has its step count fixed once, before the first trial, by one
calibration of the recipe (``--set`` values included, sampled keys at the recipe's values) on a
Ray worker with a trial's cores; every trial trains that many steps (ASHA may stop it earlier at
a rung), and the count is printed and recorded on the parent run (tag ``ctk.budget_steps``,
metric ``sweep/budget_steps_fixed``).

A trial starts in the Ray worker process of an ended trial where one is free (``reuse_actors``),
so it does not import torch, mlflow and the domain again (about 10 CPU-seconds a process).

Spaces: ``uniform(a,b)``, ``loguniform(a,b)``, ``randint(a,b)`` (a <= k < b), ``choice(x,y,...)``
(values parsed as YAML).
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from toolkit import recipe as rc

__all__ = ["parse_space", "tune"]

_DIST = re.compile(r"^\s*(uniform|loguniform|randint|choice)\s*\((.*)\)\s*$")


def parse_space(items: list[str]) -> dict[str, tuple[str, list[Any]]]:
    """``["a.b=loguniform(0.01,1)", ...]`` -> ``{"a.b": ("loguniform", [0.01, 1.0])}``; every bad
    item is reported at once (RecipeError naming the key, the value and what was expected)."""
    space, problems = {}, []
    for item in items:
        key, sep, dist = item.partition("=")
        m = _DIST.match(dist) if sep else None
        if not key.strip() or m is None:
            problems.append(
                (
                    key.strip() or item,
                    f"--space: expected KEY=uniform(a,b) | loguniform(a,b) | "
                    f"randint(a,b) | choice(x,y,...), got {item!r}",
                )
            )
            continue
        kind, args = m.group(1), [yaml.safe_load(a) for a in m.group(2).split(",") if a.strip()]
        numeric = all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args)
        if kind == "choice" and args:
            space[key.strip()] = (kind, args)
        elif (
            kind != "choice"
            and len(args) == 2
            and numeric
            and args[0] < args[1]
            and (kind != "loguniform" or args[0] > 0)
        ):
            space[key.strip()] = (kind, [float(a) if kind != "randint" else int(a) for a in args])
        else:
            problems.append(
                (
                    key.strip(),
                    f"--space: {kind} needs {'values' if kind == 'choice' else 'low < high'}"
                    f"{' > 0' if kind == 'loguniform' else ''}, got {dist.strip()!r}",
                )
            )
    if problems:
        raise rc.RecipeError(problems, "ctk tune")
    return space


def _ray_space(space: dict[str, tuple[str, list[Any]]]) -> dict[str, Any]:
    from ray import tune as rt

    make = {
        "uniform": lambda a: rt.uniform(*a),
        "loguniform": lambda a: rt.loguniform(*a),
        "randint": lambda a: rt.randint(*a),
        "choice": lambda a: rt.choice(a),
    }
    return {key: make[kind](args) for key, (kind, args) in space.items()}


def _trial(
    config: dict[str, Any],
    *,
    recipe: str,
    sets: list[str],
    experiment: str,
    parent: str,
    metric: str,
    lookup: Callable[[str], Any],
    fixed_steps: int | None = None,
) -> None:
    """One trial: the recipe with the sampled overrides, every logged ``metric`` reported."""
    from ray import tune as rt

    from toolkit.runs import execute, load_recipe

    name = "-".join(f"{k.rsplit('.', 1)[-1]}{_short(v)}" for k, v in config.items())
    overrides = [
        *sets,
        *(f"{k}={v}" for k, v in config.items()),
        f"tracking.experiment={experiment}",
        f"tracking.run_name={name}",
    ]
    r = load_recipe(recipe, overrides, lookup)

    def report(metrics: dict[str, float], step: int) -> None:
        if metric in metrics:
            rt.report({metric: float(metrics[metric]), "step": int(step)})

    _, final = execute(
        r,
        progress=False,
        on_metrics=report,
        fixed_steps=fixed_steps,
        extra_tags={"mlflow.parentRunId": parent, "ctk.tune": experiment},
    )
    if metric not in final:
        raise ValueError(f"--metric {metric!r} was never logged by this recipe; it logged: {', '.join(sorted(final))}")


def _calibrate(recipe: str, sets: list[str], lookup: Callable[[str], Any], cpus: float) -> dict[str, Any] | None:
    """The body of the Ray task that fixes ``budget.minutes``' steps for every trial."""
    import torch

    from toolkit.runs import calibrate, load_recipe

    torch.set_num_threads(max(1, int(cpus)))
    return calibrate(load_recipe(recipe, sets, lookup))


def _fix_steps(
    ray: Any, client: Any, parent: str, recipe: str, sets: list[str], lookup: Callable[[str], Any], cpus: float
) -> int | None:
    """One calibration before the trials (None when the recipe has no budget.minutes)."""
    import json
    import sys

    from toolkit.studies.budget_steps import METRIC, TAG

    found = ray.get(ray.remote(_calibrate).options(num_cpus=cpus).remote(recipe, sets, lookup, cpus))
    if not found:
        return None
    client.set_tag(parent, TAG, json.dumps({"|tune": {**found, "on": "the recipe"}}, sort_keys=True))
    client.log_metric(parent, METRIC, found["steps"])
    print(
        f"tune: budget.minutes -> {found['steps']:,} steps for every trial ({found['ms_per_step']:.1f} ms/step, "
        f"{found['precision']}, timed alone before the trials start)",
        file=sys.stderr,
        flush=True,
    )
    return int(found["steps"])


def _short(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def tune(
    recipe: str,
    sets: list[str],
    space_items: list[str],
    *,
    samples: int,
    metric: str,
    mode: str,
    lookup: Callable[[str], Any],
    jobs: int = 2,
    address: str | None = None,
    experiment: str | None = None,
    out: str | None = None,
    grace: int = 1,
) -> tuple[dict[str, Any], Path]:
    """Run the search; returns (best config, path of the best recipe YAML)."""
    from ray import tune as rt
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.optuna import OptunaSearch

    from toolkit.studies.point_run import point_env
    from toolkit.studies.ray_points import check_answers, start_ray
    from toolkit.tracking.health import check_store
    from toolkit.tracking.store import client_for, experiment_id, tracking_uri

    if mode not in ("max", "min"):
        raise rc.RecipeError([("--mode", f"expected max or min, got {mode!r}")], "ctk tune")
    space = parse_space(space_items)
    from toolkit.runs import load_recipe

    base = load_recipe(recipe, list(sets), lookup)
    experiment = experiment or f"tune-{Path(recipe).stem}"
    uri = tracking_uri(base.tracking.uri)
    check_store(uri, say=lambda line: print(line, file=sys.stderr, flush=True))  # before Ray or any run starts
    address = address or os.environ.get("RAY_ADDRESS") or None
    if address and address != "auto":
        check_answers(address)  # a head that does not answer: said within seconds, nothing written
    client = client_for(uri)
    cpus = max(1.0, (os.cpu_count() or 2) / max(1, jobs))
    ray, started = start_ray(jobs, address, cpus, point_env(uri, cpus))  # a cluster that refuses us: no parent
    try:
        parent = client.create_run(
            experiment_id(client, experiment), run_name=f"tune-{Path(recipe).stem}", tags={"ctk.tune": experiment}
        ).info.run_id
        client.log_text(
            parent,
            yaml.safe_dump({"space": space_items, "samples": samples, "metric": metric, "mode": mode}, sort_keys=False),
            "tune/space.yaml",
        )
    except BaseException:
        if started:
            ray.shutdown()
        raise
    try:
        fixed = (
            _fix_steps(ray, client, parent, str(Path(recipe).resolve()), list(sets), lookup, cpus)
            if base.budget is not None and base.budget.minutes
            else None
        )
        trainable = rt.with_parameters(
            _trial,
            recipe=str(Path(recipe).resolve()),
            sets=list(sets),
            experiment=experiment,
            parent=parent,
            metric=metric,
            lookup=lookup,
            fixed_steps=fixed,
        )
        trainable = rt.with_resources(trainable, {"cpu": cpus})
        tuner = rt.Tuner(
            trainable,
            param_space=_ray_space(space),
            tune_config=rt.TuneConfig(
                metric=metric,
                mode=mode,
                num_samples=samples,
                search_alg=OptunaSearch(),
                max_concurrent_trials=jobs,
                scheduler=ASHAScheduler(time_attr="training_iteration", grace_period=grace),
                reuse_actors=True,
            ),  # a trial starts in a warm process
            run_config=rt.RunConfig(storage_path=tempfile.mkdtemp(prefix="ctk-tune-"), verbose=0),
        )
        results = tuner.fit()
        best = results.get_best_result(metric=metric, mode=mode)
        from toolkit.tracking.health import mark_dead_runs

        mark_dead_runs(client, [experiment_id(client, experiment)])  # trials ASHA stopped: KILLED
    except BaseException:
        client.set_terminated(parent, "KILLED")
        raise
    finally:
        if started:
            ray.shutdown()
    config = dict(best.config)
    raw = rc.apply_overrides(rc.load_yaml(recipe), [*sets, *(f"{k}={v}" for k, v in config.items())])
    path = Path(out or f"{Path(recipe).stem}-best.yaml")
    path.write_text(
        f"# ctk tune: best of {samples} trials by {metric} ({mode}) = {best.metrics.get(metric)}\n"
        + yaml.safe_dump(raw, sort_keys=False)
    )
    client.log_artifact(parent, str(path), "tune")
    client.log_metric(parent, f"best/{metric}", float(best.metrics.get(metric)))
    client.set_terminated(parent, "FINISHED")
    return config, path
