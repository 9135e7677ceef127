"""Two node launches on 127.0.0.1 (``ctk run --nnodes 2 --node-rank R``, one process each, gloo)
make one mlflow run whose final weights equal one process trained on the global batch (SimCLR,
and MoCo with shuffle-BN); ranks are refused for domains that run in one process.

The test-only ``points`` domain (a linear encoder, no BatchNorm; ``data.noise=0`` makes the
views deterministic, so the two ranks' slices are exactly the single process's batch) reaches
the relaunched processes as a plug-in: a dist-info folder on PYTHONPATH declares it in the
``ctk.domains`` entry-point group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import cli
from tests.conftest import process_tree
from tests.pipeline.conftest import POINTS_RECIPE, points_domain  # noqa: F401,F811 - a fixture
from toolkit import checkpoint as ckpt
from toolkit.tracking.store import client_for

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def plugin_env(tmp_path, monkeypatch):
    site = tmp_path / "site"
    info = site / "ctk_points_test-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ctk-points-test\nVersion: 0\n")
    (info / "entry_points.txt").write_text("[ctk.domains]\npoints = tests.pipeline.points_domain:PointsDomain\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("CTK_CHECKPOINTS", raising=False)
    recipe = POINTS_RECIPE.replace("data: {n: 64, dim: 4}", "data: {n: 64, dim: 4, noise: 0}")
    (tmp_path / "points.yaml").write_text(recipe)
    return {
        **os.environ,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{site}",
        "OMP_NUM_THREADS": "1",
        "PYTHONFAULTHANDLER": "1",
    }  # a hung node prints its stacks when the test aborts it


def _cli(env, *args, cwd):
    return subprocess.Popen(
        [sys.executable, str(ROOT / "cli.py"), "run", *args, "--quiet"],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _signal_all(pids: list[int], sig: int) -> None:
    for q in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(q, sig)


def _communicate_all(procs: list[subprocess.Popen], timeout: float) -> list[str]:
    """Every process's output. Past ``timeout`` (for all together) every process of every node
    (the ``ctk`` process, torchrun's agent and the ranks) gets SIGABRT, so that Python's fault
    handler prints where each one was, then SIGKILL if it has not ended within 30 s; the test
    fails with all the outputs."""
    deadline = time.monotonic() + timeout
    outs: list[str | None] = [None] * len(procs)
    try:
        for i, p in enumerate(procs):
            outs[i] = p.communicate(timeout=max(deadline - time.monotonic(), 1))[0]
    except subprocess.TimeoutExpired:
        pids = [q for p in procs for q in process_tree(p.pid)]
        _signal_all(pids, signal.SIGABRT)
        stacks_by = time.monotonic() + 30  # each prints its stacks and ends; wait for that, not a fixed time
        while any(_alive(q) for q in pids) and time.monotonic() < stacks_by:
            time.sleep(0.1)
        _signal_all([q for q in pids if _alive(q)], signal.SIGKILL)
        tails = [
            f"--- node {i} ---\n{(o if o is not None else p.communicate()[0])[-6000:]}"
            for i, (p, o) in enumerate(zip(procs, outs))
        ]
        pytest.fail(f"the nodes did not end within {timeout} s\n" + "\n".join(tails))
    return [o or "" for o in outs]


def _final_state(run_id):
    return ckpt.load(ckpt.latest(ckpt.checkpoint_dir(run_id)))["trainer"]


# MoCo with shuffle-BN: the key encoder runs on the permuted global batch, split over the nodes,
# and the keys are un-shuffled; without BatchNorm the keys (and so the queue and the weights)
# must equal one process's exactly, which checks the permutation and its inverse end to end.
MOCO = [
    "objective.loss={name: moco_infonce, temperature: 0.2}",
    "objective.regularizers=[]",
    "objective.negatives={source: queue, size: 40, momentum: 0.9}",
    "distributed.shuffle_bn=true",
]


@pytest.mark.parametrize("sets", [[], MOCO], ids=["nt_xent", "moco-shuffle_bn"])
@pytest.mark.slow
def test_two_nodes_on_loopback_match_one_process(plugin_env, points_domain, tmp_path, sets):  # noqa: F811
    port = str(_free_port())
    flags = [a for s in sets for a in ("--set", s)]
    nodes = [
        _cli(
            plugin_env,
            "points.yaml",
            *flags,
            "--experiment",
            "two-nodes",
            "--nnodes",
            "2",
            "--node-rank",
            str(r),
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            port,
            cwd=tmp_path,
        )
        for r in (0, 1)
    ]
    outs = _communicate_all(nodes, timeout=240)
    assert [p.returncode for p in nodes] == [0, 0], "\n\n".join(o[-3000:] for o in outs)
    # the one process in this process: the same command (one thread, as each rank)
    single = CliRunner().invoke(cli.main, ["run", "points.yaml", *flags, "--experiment", "one-process", "--quiet"])
    assert single.exit_code == 0, single.output[-3000:]

    client = client_for()
    runs = client.search_runs([client.get_experiment_by_name("two-nodes").experiment_id])
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(runs[0].info.run_id, "train/loss")]
    assert sorted(steps) == list(range(4, 25, 4)), "rank 1 logged too, or steps are missing"
    ref_run = client.search_runs([client.get_experiment_by_name("one-process").experiment_id])[0]
    two, one = _final_state(runs[0].info.run_id), _final_state(ref_run.info.run_id)
    assert two["encoder"].keys() == one["encoder"].keys()
    for k in one["encoder"]:
        torch.testing.assert_close(two["encoder"][k], one["encoder"][k], rtol=1e-5, atol=1e-6, msg=k)
    for k, v in one["objective"].items():  # the MoCo queue, its pointer, the key encoder
        torch.testing.assert_close(two["objective"][k], v, rtol=1e-5, atol=1e-6, msg=k)
    assert len(two.get("rng_ranks", [])) == 2  # rank 0's file holds both ranks' random states
    # and the training moved the weights (the comparison is not between two initialisations)
    first = client.get_metric_history(ref_run.info.run_id, "train/loss")
    assert abs(first[0].value - first[-1].value) > 1e-3


@pytest.mark.parametrize(
    "recipe, domain, flags",
    [
        ("recipes/toy/lmcl_three_bars_cl.yaml", "toy", ["--nproc", "2"]),
        ("recipes/toy/ring_mi_mlp.yaml", "toy", ["--nnodes", "2"]),
        ("recipes/rl/cartpole_swingup_cpu.yaml", "rl", ["--nproc", "2"]),
    ],
)
def test_single_process_domains_are_refused_before_launching(plugin_env, tmp_path, monkeypatch, recipe, domain, flags):
    from toolkit.training import distributed

    def no_launch(*args, **kwargs):
        raise AssertionError("torchrun was launched for a domain that runs in one process only")

    monkeypatch.setattr(distributed, "launch", no_launch)
    res = CliRunner().invoke(cli.main, ["run", str(ROOT / recipe), *flags])
    assert res.exit_code == 2, res.output
    assert "runs in one process only" in res.output and f"domain {domain!r}" in res.output, res.output
    assert "torch.distributed" not in res.output and not (tmp_path / "mlflow.db").exists()
