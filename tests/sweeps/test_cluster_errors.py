"""Issue 48: the parts a sweep depends on, each reported in one line before anything starts (a
tracking server that is not up, a Ray head that does not answer); a local Ray instance on
127.0.0.1 only; an interrupt never recorded as a failure."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from tests.conftest import process_tree
from tests.sweeps.conftest import TOY, free_port, runs_of

FAST = ["--set", "budget.steps=20", "--quiet"]


def _one_line(res, *needles: str) -> str:
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == 2, res.stderr[-3000:]
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr[-3000:]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(
    "command",
    [
        ["sweep", TOY, "--grid", "seed=0,1", *FAST, "--jobs", "2"],
        [
            "tune",
            TOY,
            "--space",
            "optimizer.lr=loguniform(0.0001,0.01)",
            "--samples",
            "2",
            "--metric",
            "kmeans_accuracy",
        ],
        ["study", "studies/lmcl-dp.yaml", "--jobs", "2"],
    ],
    ids=["sweep", "tune", "study"],
)
def test_an_unreachable_tracking_server_is_one_line_before_anything_starts(ctk, command):
    from tests.sweeps.conftest import ROOT

    uri = f"http://127.0.0.1:{free_port()}"
    ctk.env["MLFLOW_TRACKING_URI"] = uri
    if command[0] == "study":
        command = ["study", str(ROOT / command[1]), *command[2:]]
    res = ctk.here(*command)
    _one_line(res, uri, "ctk server")
    assert "ray:" not in res.stdout + res.stderr  # nothing started


@pytest.mark.parametrize("command", ["sweep", "tune"])
def test_a_ray_address_that_does_not_answer_is_named_in_one_line(ctk, command):
    address = f"127.0.0.1:{free_port()}"
    args = (
        ["sweep", TOY, "--grid", "seed=0", *FAST]
        if command == "sweep"
        else ["tune", TOY, "--space", "optimizer.lr=loguniform(0.0001,0.01)", "--samples", "1", "--metric", "x"]
    )
    res = ctk.here(*args, "--address", address, "--experiment", "nowhere")
    _one_line(res, address, "did not answer within", "ray start --head")
    assert runs_of(ctk.store(), "nowhere") == []  # nothing was written


def test_a_local_ray_instance_binds_and_connects_on_loopback_only(tmp_path, monkeypatch):
    """The addresses Ray itself reports (its nodes, its GCS, the task's own) and the sockets its
    processes listen on are all 127.0.0.1."""
    ray = pytest.importorskip("ray")
    from toolkit.studies.ray_points import start_ray

    # HOME stays the worker's own: Ray keeps the token it loaded for the life of the process, so a
    # token made here under a temporary HOME would be sent by this worker's later ray.init (the
    # sweeps' in-process reruns) to heads that hold ~/.ray/auth_token, and refused.
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    ray, started = start_ray(2, None, 1.0, {})
    try:
        assert started
        nodes = [n["NodeManagerAddress"] for n in ray.nodes()]
        gcs = ray.get_runtime_context().gcs_address
        task_sees = ray.get(ray.remote(lambda: ray.util.get_node_ip_address()).remote())
        listening = _listening(process_tree(os.getpid())[1:])
    finally:
        ray.shutdown()
    assert nodes == ["127.0.0.1"] and gcs.startswith("127.0.0.1:") and task_sees == "127.0.0.1", (nodes, gcs)
    assert listening and listening <= {"127.0.0.1"}, listening
    assert os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER") is None  # put back: `ray start` may join later


def _listening(pids: list[int]) -> set[str]:
    """The IPv4 addresses (IPv6-mapped ones read as IPv4) that these processes listen on (/proc)."""
    import ipaddress
    from pathlib import Path

    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").glob("*"):
            try:
                link = os.readlink(fd)
            except OSError:
                continue
            if link.startswith("socket:["):
                inodes.add(link[8:-1])
    found = set()
    for table, size in (("tcp", 4), ("tcp6", 16)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                continue
            raw = bytes.fromhex(fields[1].split(":")[0])
            words = b"".join(raw[i : i + 4][::-1] for i in range(0, size, 4))  # each 32-bit word little-endian
            addr = ipaddress.ip_address(words)
            found.add(str(getattr(addr, "ipv4_mapped", None) or addr))
    return found


def test_an_error_raised_while_a_run_is_interrupted_ends_it_killed(tmp_path):
    """A second Ctrl-C that cuts a checkpoint write short surfaces as the writer's own error, its
    context the KeyboardInterrupt: the run was stopped, not failed."""
    from mlflow.tracking import MlflowClient

    from toolkit.tracking.tracker import Tracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(RuntimeError):
        with Tracker("t", "cut", uri) as tracker:
            try:
                raise KeyboardInterrupt("stopped at once (second Ctrl-C)")
            except KeyboardInterrupt:
                raise RuntimeError("[enforce fail at inline_container.cc] unexpected pos") from None
    run = MlflowClient(uri).get_run(tracker.run_id)
    assert run.info.status == "KILLED"
    with pytest.raises(RuntimeError):
        with Tracker("t", "plain", uri) as tracker:
            raise RuntimeError("a real failure")
    assert MlflowClient(uri).get_run(tracker.run_id).info.status == "FAILED"


def test_a_point_whose_error_came_from_an_interrupt_is_killed_not_failed(tmp_path, monkeypatch):
    import commands
    from toolkit import runs
    from toolkit.recipe import load_yaml
    from toolkit.studies.point_run import PointSpec, run_point

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)

    def cut_short(*args, **kwargs):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise OSError("write interrupted") from None

    monkeypatch.setattr(runs, "execute", cut_short)
    raw = {**load_yaml(TOY), "tracking": {"experiment": "cut", "uri": uri}}
    spec = PointSpec("p", "k" * 20, TOY, raw, env={"MLFLOW_TRACKING_URI": uri})
    got = run_point(spec, commands.lookup)
    assert got.outcome == "killed", got
    from mlflow.tracking import MlflowClient

    assert runs_of(MlflowClient(uri), "cut") == []  # no FAILED run made for it


def test_differs_and_runs_show_the_ray_node():
    from toolkit.studies.differs import differs_line
    from toolkit.studies.listing import ran_on

    def run(node, gpu="none"):
        params = {"env.ray_node": node, "env.gpu": gpu, "env.torch": "2"}
        return SimpleNamespace(data=SimpleNamespace(params=params, tags={"ctk.ray_node": node}, metrics={}))

    line = differs_line([("a", [run("127.0.0.2/aaaa1111")]), ("b", [run("127.0.0.3/bbbb2222")])])
    assert "Ray node 127.0.0.2/aaaa1111 / 127.0.0.3/bbbb2222" in line, line
    assert ran_on(run("10.0.0.5/cccc3333", "NVIDIA H200")) == "10.0.0.5/cccc3333, NVIDIA H200"
