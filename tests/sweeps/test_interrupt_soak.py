"""Soak (issue 48, item 5): Ctrl-C never fails a point. A two-point local Ray sweep (--jobs 2)
is interrupted (SIGINT to the sweep, as a terminal's Ctrl-C reaches it) at a random moment of its
life: Ray starting, a point's run being created, training, checkpointing, evaluating, finishing.
After each interrupt no point run is FAILED, and a plain rerun (no --retry-failed) finishes every
point. Each round is a new experiment, so every round has points to interrupt. The moments are drawn
over the life of one uninterrupted sweep timed first on the same machine.

``CTK_SOAK_ROUNDS`` (default 20) and ``CTK_SOAK_FIRST`` (default 0) choose the rounds, so the
soak can be run in parts of a few minutes each (the moments come from the round's number)."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest

from tests.sweeps.conftest import TOY, runs_of

pytest.importorskip("ray")

ARGS = [
    "--grid",
    "seed=0,1",
    "--set",
    "budget.steps=200",
    "--set",
    "budget.checkpoint_every=20",
    "--set",
    "budget.log_every=20",
    "--quiet",
    "--jobs",
    "2",
]


def _points(client, experiment):
    return [r for r in runs_of(client, experiment) if "ctk.point" in r.data.tags]


@pytest.mark.soak
def test_ctrl_c_at_random_moments_never_fails_a_point(ctk):
    first = int(os.environ.get("CTK_SOAK_FIRST", "0"))
    rounds = range(first, first + int(os.environ.get("CTK_SOAK_ROUNDS", "20")))
    client, outcomes, bad = ctk.store(), [], []
    # the moments span the life of an uninterrupted sweep on this machine (a few past its end),
    # so that a slower machine is interrupted while it trains and finishes, not only as Ray starts
    started = time.monotonic()
    whole = ctk("sweep", TOY, *ARGS, "--experiment", "uninterrupted", timeout=300)
    latest = 1.05 * (time.monotonic() - started)
    assert whole.returncode == 0, whole.stderr[-3000:]
    print(f"an uninterrupted sweep took {latest / 1.05:.1f} s: moments drawn in [0.5, {latest:.1f}] s", flush=True)
    for i in rounds:
        moment = random.Random(4800 + i).uniform(0.5, latest)
        experiment = f"int{i}"
        proc = ctk.popen("sweep", TOY, *ARGS, "--experiment", experiment)
        deadline = time.monotonic() + moment
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        interrupted = proc.poll() is None
        if interrupted:
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=300)
        after = sorted(r.info.status for r in _points(client, experiment))
        rerun = ctk.here("sweep", TOY, *ARGS, "--experiment", experiment)
        final = sorted(r.info.status for r in _points(client, experiment))
        line = (
            f"round {i:2d}: SIGINT at {moment:5.1f} s{'' if interrupted else ' (sweep had ended)'}, "
            f"exit {proc.returncode}, points then {after or '-'}; rerun exit {rerun.returncode}, points {final}"
        )
        outcomes.append(line)
        print(line, flush=True)
        if "FAILED" in after or rerun.returncode != 0 or final != ["FINISHED", "FINISHED"]:
            failed = [r for r in _points(client, experiment) if r.info.status == "FAILED"]
            errors = [r.data.tags.get("error", "")[:300] for r in failed]
            bad.append(f"{line}\n  errors: {errors}\n  sweep stderr: {err[-1500:]}\n  rerun: {rerun.stderr[-1500:]}")
    assert not bad, "\n".join(bad)
