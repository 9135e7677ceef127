"""Suite-wide settings: one compute thread per process (CI machines have 2 cores and the
suite spawns subprocesses; oversubscribed OpenMP threads were measured 3x slower), no hub.

Tests that send signals set the dispositions they rely on: a suite started as a background job
of a non-interactive shell inherits SIGINT ignored, and so would every process it starts
(``exec`` keeps an ignored signal ignored; Python then installs no KeyboardInterrupt handler).
In-process tests take the ``default_signals`` fixture; subprocesses that a test signals are
started with ``preexec_fn=default_signals_in_child``."""

import contextlib
import os
import signal
import subprocess
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MUJOCO_GL", "egl")

import torch  # noqa: E402

torch.set_num_threads(1)


import pytest  # noqa: E402

_SIGNALLED = (signal.SIGINT, signal.SIGTERM)


def default_signals_in_child() -> None:
    """``preexec_fn`` for a subprocess that a test signals: SIGINT and SIGTERM at their defaults
    and unblocked, whatever the test process inherited. The child's Python then installs its
    KeyboardInterrupt handler for SIGINT, as it does when started from a terminal."""
    for sig in _SIGNALLED:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALLED)


@pytest.fixture
def default_signals():
    """Python's own handlers in this process for the test (SIGINT raises KeyboardInterrupt,
    SIGTERM terminates), whatever the suite inherited; the previous ones come back afterwards."""
    previous = {sig: signal.getsignal(sig) for sig in _SIGNALLED}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if handler is not None:  # None: set outside Python, cannot be put back
                signal.signal(sig, handler)


@pytest.fixture
def data_workdir(tmp_path, monkeypatch):
    """A fresh working folder (its own mlflow store and checkpoints) that still finds the
    offline data already fetched for the suite."""
    from domains.vision.catalogue import locate

    monkeypatch.setenv("CTK_DATA", str(__import__("pathlib").Path(locate("fashion-mnist")).parent))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("CTK_CHECKPOINTS", raising=False)
    return tmp_path


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it (read from /proc)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        out.append(todo.pop())
        todo += parents.get(out[-1], [])
    return out


def run_here(folder: Path, env: dict[str, str | None], *args: str) -> subprocess.CompletedProcess:
    """``ctk ARGS`` in this process (click's test runner) in ``folder``, with ``env`` over this
    process's environment (None removes a variable); its exit status, stdout and stderr as a
    subprocess would give them. For the calls of a test whose separate process is not what it
    checks: a process spends about 10 CPU-seconds importing torch, mlflow and scikit-learn
    before it does anything. An exception the command did not turn into an exit status is
    raised here."""
    from click.testing import CliRunner

    import cli

    with contextlib.chdir(folder):
        res = CliRunner(env=env).invoke(cli.main, list(args))
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return subprocess.CompletedProcess(["ctk", *args], res.exit_code, res.stdout, res.stderr)


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist, put the slow tests at the head of every worker's queue, dealt out in
    turn: the work-stealing scheduler gives each worker one contiguous block of the collection
    and a worker that runs dry steals from the tail of another's, so quick tests end the run on
    every worker instead of one worker ending it alone on a sweep or a DDP run. Every worker
    collects the same items and sorts them the same way (the scheduler checks that)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers < 2:
        return
    slow = [item for item in items if item.get_closest_marker("slow")]
    if not slow:
        return
    quick = [item for item in items if not item.get_closest_marker("slow")]
    block = len(items) // workers  # the scheduler's first share for each worker
    ordered = []
    for w in range(workers):
        mine = slow[w::workers]
        take = (block if w < workers - 1 else len(items)) - len(mine)
        ordered += mine + quick[: max(take, 0)]
        quick = quick[max(take, 0) :]
    ordered += quick
    items[:] = ordered
