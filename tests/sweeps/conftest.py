"""Sweeps run the real command line in a subprocess (Ray needs a driver process of its own;
Ctrl-C is a real SIGINT) in a fresh folder with its own store and checkpoints. The subprocess
starts with SIGINT and SIGTERM at their defaults whatever the suite inherited (a background job
inherits SIGINT ignored, and the sweep would then ignore the test's Ctrl-C)."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import default_signals_in_child, run_here

ROOT = Path(__file__).resolve().parents[2]
TOY = str(ROOT / "recipes" / "toy" / "lmcl_three_bars_cl.yaml")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Ctk:
    def __init__(self, folder: Path, env: dict[str, str]):
        self.folder, self.env = folder, env

    def popen(self, *args: str, **kwargs) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, str(ROOT / "cli.py"), *args],
            cwd=self.folder,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=default_signals_in_child,
            **kwargs,
        )

    def __call__(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        proc = self.popen(*args)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            raise AssertionError(
                f"ctk {args[0]} still running after {timeout} s; killed it. Its stderr:\n{(err or '')[-3000:]}"
            ) from None
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def here(self, *args: str) -> subprocess.CompletedProcess:
        """The same command in this process (:func:`tests.conftest.run_here`), in the same
        folder and under the same environment: for a rerun that finds nothing to do, say."""
        return run_here(self.folder, {**{k: None for k in os.environ if k not in self.env}, **self.env}, *args)

    def store(self):
        from mlflow.tracking import MlflowClient

        return MlflowClient(self.env.get("MLFLOW_TRACKING_URI") or f"sqlite:///{self.folder / 'mlflow.db'}")


@pytest.fixture
def ctk(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "CTK_CHECKPOINTS", "RAY_ADDRESS")}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONPATH=str(ROOT), RAY_USAGE_STATS_ENABLED="0")
    return Ctk(tmp_path, env)


def runs_of(client, experiment: str):
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id], max_results=1000) if exp else []


def stop(proc: subprocess.Popen, sig=signal.SIGINT, timeout: float = 30) -> tuple[str, str]:
    """Send ``sig`` and wait up to ``timeout`` s for the process to end; its (stdout, stderr).
    A process still running then is killed and the test fails, showing its stderr."""
    proc.send_signal(sig)
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        raise AssertionError(
            f"still running {timeout} s after {signal.Signals(sig).name}; killed it. Its stderr:\n{(err or '')[-3000:]}"
        ) from None


def wait_for(check, timeout: float = 60, every: float = 0.3):
    """Poll ``check`` until it returns something true (returned); past ``timeout`` s the test
    fails naming the check."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {getattr(check, '__name__', check)}")
