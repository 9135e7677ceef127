"""The checkpoint module: data only, atomic, portable random states, refusals that name the file."""

from __future__ import annotations

import os
import random
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from toolkit import checkpoint as ckpt

from .hostile import hostile_file


def test_round_trip_of_plain_state(tmp_path):
    state = {"a": torch.arange(4.0), "b": [1, 2.5, "x", None, (3, 4)], "c": {"d": True, 7: 2**100}}
    path = ckpt.save(tmp_path / "s.pt", state)
    back = ckpt.load(path)
    assert torch.equal(back["a"], state["a"]) and back["b"] == state["b"] and back["c"] == state["c"]


def test_save_refuses_objects_and_names_where(tmp_path):
    with pytest.raises(TypeError, match=r"state\.trainer\.opt\[1\]: numpy.ndarray"):
        ckpt.save(tmp_path / "s.pt", {"trainer": {"opt": [1, np.zeros(2)]}})
    assert not (tmp_path / "s.pt").exists()


def test_hostile_pickle_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    path = hostile_file(tmp_path / "evil.pt", marker)
    with pytest.raises(ckpt.UnsafeCheckpoint) as info:
        ckpt.load(path)
    assert str(path) in str(info.value)
    assert not marker.exists()


def test_truncated_file_is_a_clear_error(tmp_path):
    path = ckpt.save(tmp_path / "s.pt", {"w": torch.randn(100, 100)})
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ckpt.CorruptCheckpoint, match=str(path)):
        ckpt.load(path)


def test_a_failed_write_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    path = ckpt.save(tmp_path / "s.pt", {"v": torch.tensor(1.0)})

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError):
        ckpt.save(path, {"v": torch.tensor(2.0)})
    monkeypatch.undo()
    assert ckpt.load(path)["v"].item() == 1.0
    assert [p.name for p in tmp_path.iterdir()] == ["s.pt"]  # no temporary file left behind


def test_keep_removes_older_checkpoints(tmp_path):
    for step in range(5):
        ckpt.save(tmp_path / f"step-{step:09d}.pt", {"step": step}, keep=2)
        os.utime(tmp_path / f"step-{step:09d}.pt", ns=(step * 10**9, step * 10**9))
    assert sorted(p.name for p in tmp_path.glob("*.pt")) == ["step-000000003.pt", "step-000000004.pt"]
    assert ckpt.latest(tmp_path).name == "step-000000004.pt"


def test_random_states_round_trip_through_a_file(tmp_path):
    gen = torch.Generator().manual_seed(5)
    rng = np.random.default_rng(3)
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    state = ckpt.rng_state({"views": gen})
    state["sampler"] = ckpt.numpy_state(rng.bit_generator.state)
    ckpt.save(tmp_path / "r.pt", state)
    expect = (
        random.random(),
        np.random.rand(),
        torch.rand(1).item(),
        torch.rand(1, generator=gen).item(),
        rng.random(),
    )
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    gen.manual_seed(9)
    rng = np.random.default_rng(9)
    back = ckpt.load(tmp_path / "r.pt")
    ckpt.set_rng_state(back, {"views": gen})
    rng.bit_generator.state = ckpt.set_numpy_state(back["sampler"])
    got = (random.random(), np.random.rand(), torch.rand(1).item(), torch.rand(1, generator=gen).item(), rng.random())
    assert got == expect


def test_a_generator_state_from_another_device_type_reseeds_reproducibly_with_a_warning():
    """A CUDA generator's state is 16 bytes, a CPU one's 5,056: a GPU checkpoint resumed on a CPU
    reseeds the stream from the saved state (the same state -> the same draws) and says so."""
    cuda_like = torch.arange(16, dtype=torch.uint8)
    state = ckpt.rng_state()
    state["generators"] = {"views": cuda_like}
    draws = []
    for _ in range(2):
        gen = torch.Generator().manual_seed(123)
        with pytest.warns(UserWarning, match="'views' random stream was written on another device type"):
            ckpt.set_rng_state(state, {"views": gen})
        draws.append(torch.rand(4, generator=gen))
    assert torch.equal(draws[0], draws[1])
    other = dict(state, generators={"views": cuda_like + 1})
    gen = torch.Generator().manual_seed(123)
    with pytest.warns(UserWarning):
        ckpt.set_rng_state(other, {"views": gen})
    assert not torch.equal(torch.rand(4, generator=gen), draws[0])
    assert not torch.equal(draws[0], torch.rand(4, generator=torch.Generator().manual_seed(123)))


def test_recipe_hash_ignores_key_order():
    assert ckpt.recipe_hash({"a": 1, "b": {"c": 2}}) == ckpt.recipe_hash({"b": {"c": 2}, "a": 1})
    assert ckpt.recipe_hash({"a": 1}) != ckpt.recipe_hash({"a": 2})


RECIPE = {"domain": "points", "seed": 0, "budget": {"steps": 8}, "device": "cpu", "tracking": {"experiment": "a"}}


def test_a_checkpoint_written_before_the_checkpoint_room_still_reads(tmp_path):
    # what Trainer.save_checkpoint wrote before toolkit/checkpoint/envelope.py existed
    old = {
        "format": "ctk-checkpoint/1",
        "recipe": RECIPE,
        "recipe_hash": ckpt.recipe_hash(RECIPE),
        "run_id": "r1",
        "trainer": {"w": torch.ones(2), "loop": {"step": 4}},
    }
    path = ckpt.save(tmp_path / "step-000000004.pt", old)
    moved = {**RECIPE, "device": "cuda", "tracking": {"experiment": "b"}}  # resume-free keys
    back = ckpt.read(path, moved)
    assert back["trainer"]["loop"] == {"step": 4} and torch.equal(back["trainer"]["w"], torch.ones(2))
    assert ckpt.seal(old["trainer"], RECIPE, "r1").keys() == old.keys()
    assert ckpt.seal(old["trainer"], RECIPE, "r1")["format"] == old["format"] == ckpt.FORMAT


def test_read_refuses_another_recipe_another_format_and_a_foreign_file(tmp_path):
    path = ckpt.write(tmp_path / "a.pt", {"w": torch.ones(1)}, RECIPE, "r1")
    with pytest.raises(ckpt.RecipeMismatch, match="budget.steps differ.*--extend"):
        ckpt.read(path, {**RECIPE, "budget": {"steps": 16}})
    assert ckpt.read(path, {**RECIPE, "budget": {"steps": 16}}, extend=True)["run_id"] == "r1"
    future = ckpt.save(tmp_path / "b.pt", {**ckpt.seal({}, RECIPE, None), "format": "ctk-checkpoint/2"})
    with pytest.raises(ckpt.CheckpointError, match=r"format 'ctk-checkpoint/2'; this ctk reads 'ctk-checkpoint/1'"):
        ckpt.read(future, RECIPE)
    foreign = ckpt.save(tmp_path / "c.pt", {"weights": torch.ones(1)})
    with pytest.raises(ckpt.CorruptCheckpoint, match="not a ctk checkpoint"):
        ckpt.read(foreign, RECIPE)


def test_find_looks_where_the_run_recorded_and_in_this_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CTK_CHECKPOINTS", raising=False)
    there = tmp_path / "first" / "checkpoints" / "r1"  # where the run started
    ckpt.write(there / "step-000000004.pt", {}, RECIPE, "r1")
    tags = ckpt.folder_tags(there)
    assert ckpt.find("r1") is None  # this directory alone knows nothing of it
    assert ckpt.find("r1", tags) == there / "step-000000004.pt"
    here = ckpt.checkpoint_dir("r1")  # resumed here: it writes on in this directory's folder
    newer = ckpt.write(here / "step-000000008.pt", {}, RECIPE, "r1")
    os.utime(newer, ns=(there.stat().st_mtime_ns + 10**9,) * 2)
    assert ckpt.find("r1", tags) == newer and ckpt.find("r1") == newer
    assert ckpt.folders("r1", ckpt.folder_tags(here)) == [here.resolve()]  # one folder, once
    stored = SimpleNamespace(info=SimpleNamespace(run_id="r1"), data=SimpleNamespace(tags=tags))
    asked: list[str] = []

    def stored_run(run_id):  # the caller's look-up in its store: once per resume
        asked.append(run_id)
        return stored if run_id == "r1" else None

    point = ckpt.resume_point("r1", stored_run)
    assert (point.run_id, point.path, point.saved["run_id"], point.run, asked) == ("r1", newer, "r1", stored, ["r1"])
    assert point.recipe == RECIPE
    newer.write_bytes(newer.read_bytes()[:100])  # damaged: the previous one, in the other folder
    assert ckpt.resume_point("r1", stored_run).path == there / "step-000000004.pt"
    assert "step-000000008.pt" in capsys.readouterr().err  # named, then skipped
    with pytest.raises(FileNotFoundError, match="no checkpoint in"):
        ckpt.resume_point("r2")


def test_one_rule_for_a_checkpoint_that_does_not_read(tmp_path, capsys):
    """Damaged, refused (it would run code) or of another format: each is named in a warning and
    the next newest taken; the last one's own error stops."""
    good = ckpt.write(tmp_path / "r1" / "step-000000002.pt", {}, RECIPE, "r1")
    future = ckpt.save(
        tmp_path / "r1" / "step-000000004.pt", {**ckpt.seal({}, RECIPE, "r1"), "format": "ctk-checkpoint/2"}
    )
    unsafe = tmp_path / "r1" / "step-000000006.pt"
    hostile_file(unsafe, tmp_path / "pwned")
    damaged = ckpt.write(tmp_path / "r1" / "step-000000008.pt", {}, RECIPE, "r1")
    damaged.write_bytes(damaged.read_bytes()[:100])
    for i, path in enumerate((good, future, unsafe, damaged)):
        os.utime(path, ns=(10**18 + i * 10**9,) * 2)
    found = ckpt.candidates("r1", ckpt.folder_tags(tmp_path / "r1"))
    assert found == [damaged, unsafe, future, good]
    assert ckpt.newest_readable(found)[0] == good
    err = capsys.readouterr().err
    assert all(p.name in err for p in (damaged, unsafe, future)) and good.name not in err
    assert not (tmp_path / "pwned").exists()
    with pytest.raises(ckpt.UnsafeCheckpoint):
        ckpt.newest_readable([damaged, unsafe])
