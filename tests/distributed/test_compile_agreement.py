"""``compile: auto`` under torchrun: two gloo processes time, or fail, differently
(``tests/distributed/compile_worker.py``: injected figures and failures, a device called CUDA)
and take one choice, at the same point: the slowest rank's time and any rank's failure decide,
and a rank whose trial failed never leaves the other waiting in a pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.distributed import compile_worker, torchrun_two

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    return torchrun_two("tests.distributed.compile_worker", tmp_path_factory.mktemp("compile"))


@pytest.mark.parametrize("name", [*compile_worker.SCENARIOS, "ddp"])
def test_both_ranks_take_the_same_choice(two_ranks, name):
    zero, one = two_ranks[0][name], two_ranks[1][name]
    assert (zero["mode"], zero["reason"]) == (one["mode"], one["reason"])


def test_the_slowest_rank_decides(two_ranks):
    margin = two_ranks[0]["margin"]
    assert margin["mode"] == "off" and not margin["kept"]  # rank 0 alone would have compiled
    assert margin["reason"].startswith("auto: eager; reduce-overhead 9.5 ms/step against 10.0 ms eager, 5% faster")
    assert margin["reason"].endswith("on the slowest of 2 ranks")
    bound = two_ranks[0]["compute-bound"]
    assert bound["mode"] == "off" and bound["reason"].startswith("auto: the step takes 30 ms on the slowest of 2 ranks")
    assert two_ranks[0]["compute-bound"]["seen"] == two_ranks[1]["compute-bound"]["seen"] == ["time off"]
    for r in range(2):  # both keep the model they compiled
        assert two_ranks[r]["kept"]["mode"] == "reduce-overhead" and two_ranks[r]["kept"]["kept"]
    assert two_ranks[0]["kept"]["reason"].startswith("auto: 5.0 ms/step against 11.0 ms eager, 55% faster")


def test_one_rank_failing_leaves_both_eager_and_names_it(two_ranks):
    compiled = two_ranks[0]["compiled failure"]
    assert compiled["mode"] == "off" and compiled["reason"] == (
        "auto: reduce-overhead failed (rank 1: RuntimeError: injected: the compiler failed on this rank), eager"
    )
    # rank 0's compiled pass went well, yet neither rank timed the compiled model: they stopped together
    for r in range(2):
        assert two_ranks[r]["compiled failure"]["seen"] == ["time off", "compile"]
    eager = two_ranks[1]["eager failure"]
    assert eager["mode"] == "off" and eager["reason"] == (
        "auto: eager; the trial's eager pass failed (rank 0: OutOfMemoryError: injected: CUDA out of memory on this rank)"
    )
    for r in range(2):
        assert two_ranks[r]["eager failure"]["seen"] == ["time off"]  # nothing compiled on either


def test_a_ddp_trial_with_its_all_reduce_agrees_and_puts_the_model_back(two_ranks):
    for r in range(2):
        ddp = two_ranks[r]["ddp"]
        assert ddp["mode"] == "off"  # rank 0 alone (4 ms against 9) would have compiled
        assert ddp["reason"].startswith("auto: eager; reduce-overhead 9.5 ms/step against 10.0 ms eager, 5% faster")
        assert ddp["restored"] and all(ddp["grads"])
