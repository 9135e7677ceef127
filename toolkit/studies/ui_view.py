"""What the mlflow UI shows for a ctk experiment.

mlflow 3 opens an experiment in its GenAI (traces) view unless the experiment's
``mlflow.experimentKind`` tag says ``custom_model_development`` (the machine-learning view with
the runs table); :func:`toolkit.tracking.store.experiment_id` sets it when ctk creates an experiment
and :func:`prepare` sets it on older ones.

The runs table starts with no metric or param columns; the UI loads a saved view from the
experiment tag ``mlflow.sharedViewState.<key>`` (JSON of the page's state) when the page is
opened as ``#/experiments/<id>?viewStateShareKey=<key>``. :func:`publish_view` writes that
view with the evaluation metrics, the swept settings (what the user set that differs between
runs; never what a run measured: :mod:`toolkit.tracking.measured`) and the seed as columns;
``ctk ui`` prints the link and the experiment's description carries it too.
"""

from __future__ import annotations

import json
from typing import Any

from toolkit.studies.runsets import eval_metrics, run_seed, split_parents, varying_params
from toolkit.tracking.servers import ui_route

KIND_TAG = "mlflow.experimentKind"
ML_KIND = "custom_model_development"
VIEW_KEY = "ctk-columns"
VIEW_TAG = f"mlflow.sharedViewState.{VIEW_KEY}"
NOTE_TAG = "mlflow.note.content"
_NOTE_MARK = "<!-- written by ctk -->"


def view_path(experiment_id: str) -> str:
    """The UI route that opens the experiment with ctk's columns (the one form of ctk's links:
    :func:`toolkit.tracking.servers.ui_route`)."""
    return ui_route(experiment_id, view=VIEW_KEY)


def view_state(metrics: list[str], params: list[str]) -> dict[str, Any]:
    """The page state mlflow's runs table restores: column ids are ``metrics.`name``` and
    ``params.`key``` (the UI's own naming), newest runs first, every run visible.

    ``selectedColumns`` only says which columns show: the table draws them in its own order
    (metrics sorted by name). ``columnOrder`` is the order the grid applies after loading (the
    one a user's drag would save), so the metrics come in the order given, metrics of record
    first, then the params, then the run attributes; ``columnWidths`` fits each header's name."""
    columns = [f"metrics.`{m}`" for m in metrics] + [f"params.`{p}`" for p in params]
    widths = {c: min(260, max(100, 8 * len(name) + 36)) for c, name in zip(columns, [*metrics, *params])}
    return {
        "selectedColumns": columns,
        "columnOrder": columns,
        "columnWidths": widths,
        "orderByKey": "attributes.start_time",
        "orderByAsc": False,
        "runsHiddenMode": "SHOW_ALL",
    }


def publish_view(client: Any, experiment: str) -> str | None:
    """Write the columns view of the experiment named ``experiment`` (from its runs) and the
    description that links to it; returns the view's route, or None when it has no runs."""
    exp = client.get_experiment_by_name(experiment)
    runs = split_parents(client.search_runs([exp.experiment_id], max_results=5000))[0] if exp else []
    if not runs:
        return None
    experiment_id = exp.experiment_id
    if exp.tags.get(KIND_TAG) is None:
        client.set_experiment_tag(experiment_id, KIND_TAG, ML_KIND)
    swept = varying_params(runs)  # settings only: never what a run measured or ran on
    seeds = sorted({s for s in map(run_seed, runs) if s is not None})
    state = view_state(eval_metrics(runs), swept + (["seed"] if len(seeds) > 1 else []))
    client.set_experiment_tag(experiment_id, VIEW_TAG, json.dumps(state))
    note = exp.tags.get(NOTE_TAG)
    if note is None or note.startswith(_NOTE_MARK):  # never overwrite a user's description
        text = (
            f"{_NOTE_MARK}\n{len(runs)} runs; swept: {', '.join(swept) or 'nothing'}"
            f"{f' ({len(seeds)} seeds)' if len(seeds) > 1 else ''}.\n\n"
            f"[Open the runs with their metrics and swept params as columns]"
            f"({view_path(experiment_id)})"
        )
        client.set_experiment_tag(experiment_id, NOTE_TAG, text)
    return view_path(experiment_id)


def prepare(client: Any) -> list[tuple[str, str]]:
    """Publish the view of every experiment with ctk runs; (name, route) of each."""
    out = []
    for exp in client.search_experiments():
        ctk_runs = client.search_runs([exp.experiment_id], "tags.`ctk.domain` != ''", max_results=1)
        if not ctk_runs:
            continue
        path = publish_view(client, exp.name)
        if path:
            out.append((exp.name, path))
    return out


def run_note(what: str, overrides: list[str]) -> str:
    """A run description saying what differs: the sweep point's or table row's settings."""
    return f"{what}: " + (", ".join(overrides) if overrides else "the recipe as written")
