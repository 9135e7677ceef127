"""Crops and the frames-once replay buffer against naive references."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest

from domains.rl.augment import center_crop, crop_stacks, random_offsets
from domains.rl.replay import FrameReplayBuffer


def test_center_crop_is_the_middle_window():
    x = np.arange(2 * 10 * 10).reshape(2, 10, 10)
    out = center_crop(x, 6)
    assert out.shape == (2, 6, 6)
    assert np.array_equal(out, x[:, 2:8, 2:8])
    with pytest.raises(ValueError, match="crop size"):
        center_crop(x, 11)


def test_crop_stacks_matches_a_loop():
    rng = np.random.default_rng(0)
    frames = rng.integers(0, 256, size=(7, 3, 12, 12), dtype=np.uint8)
    idx = rng.integers(0, 7, size=(5, 3))
    top, left = random_offsets(rng, 5, 12, 9)
    assert top.min() >= 0 and top.max() <= 3 and left.max() <= 3
    out = crop_stacks(frames, idx, top, left, 9)
    assert out.shape == (5, 9, 9, 9)
    for b in range(5):
        for j in range(3):
            ref = frames[idx[b, j], :, top[b] : top[b] + 9, left[b] : left[b] + 9]
            assert np.array_equal(out[b, 3 * j : 3 * j + 3], ref)


def _play(buffer, rng, episode_lengths, k, shape):
    """Feed episodes of random frames to the buffer and keep naive stacks beside it:
    (obs stack, action, reward, terminated, next stack) per transition, as CURL stores them."""
    naive = []
    for length in episode_lengths:
        frame = rng.integers(0, 256, size=shape, dtype=np.uint8)
        stack = deque([frame] * k, maxlen=k)
        buffer.start_episode(frame)
        for t in range(length):
            obs = np.concatenate(stack)
            action = rng.uniform(-1, 1, size=2).astype(np.float32)
            reward, terminated = float(rng.normal()), bool(t == length - 1 and length % 2)
            frame = rng.integers(0, 256, size=shape, dtype=np.uint8)
            stack.append(frame)
            buffer.add(action, reward, terminated, frame)
            naive.append((obs, action, reward, terminated, np.concatenate(stack)))
    return naive


@pytest.mark.parametrize("capacity", [1000, 23])
def test_stacks_equal_naively_stored_stacks(capacity):
    k, shape = 3, (3, 6, 6)
    rng = np.random.default_rng(1)
    buf = FrameReplayBuffer(capacity, shape, action_dim=2, frame_stack=k)
    naive = _play(buf, rng, [1, 2, 5, 9, 4], k, shape)  # 21 transitions, 26 frames
    assert buf.num_transitions == len(naive) and buf.num_frames == len(naive) + 5
    # absolute frame number of each transition's observation
    obs_frames, f = [], 0
    for length in [1, 2, 5, 9, 4]:
        obs_frames += list(range(f, f + length))
        f += length + 1

    def intact(frame):  # the whole stack (back to the episode start) is still in the ring
        start = max(s for s in episode_starts if s <= frame)
        return max(frame - (k - 1), start) >= buf.num_frames - capacity

    episode_starts = [0, 2, 5, 11, 21]
    kept = [f for f in obs_frames if intact(f)]
    checked = 0
    for (obs, action, reward, terminated, nxt), frame in zip(naive, obs_frames):
        if not intact(frame):
            continue  # overwritten by the ring
        fr = np.array([frame])
        assert np.array_equal(buf.stacks(fr)[0], obs)
        assert np.array_equal(buf.stacks(fr + 1)[0], nxt)
        slot = frame % capacity
        assert np.array_equal(buf.action[slot], action)
        assert buf.reward[slot] == np.float32(reward) and buf.terminated[slot] == terminated
        checked += 1
    assert checked == len(kept) == (21 if capacity == 1000 else 18)
    assert len(buf) == checked
    # sampling returns exactly the observations with a successor and an intact stack
    sampled = buf.sample_frames(rng, 2000)
    assert set(sampled.tolist()) == set(kept)


def test_sampled_batch_is_three_crops_of_the_right_stacks():
    k, shape, size = 3, (3, 10, 10), 7
    rng = np.random.default_rng(2)
    buf = FrameReplayBuffer(200, shape, action_dim=2, frame_stack=k)
    naive = _play(buf, rng, [6, 8], k, shape)
    by_obs = {n[0].tobytes(): n for n in naive}
    batch = buf.sample(np.random.default_rng(3), 16, size)
    assert batch["obs"].shape == batch["pos"].shape == batch["next_obs"].shape == (16, 9, size, size)
    assert batch["action"].shape == (16, 2) and batch["reward"].shape == batch["not_done"].shape == (16, 1)
    for b in range(16):
        # find the naive transition whose obs contains this crop (random frames: unique)
        matches = []
        for obs, action, reward, terminated, nxt in naive:
            for y in range(4):
                for x in range(4):
                    if np.array_equal(obs[:, y : y + size, x : x + size], batch["obs"][b].numpy()):
                        matches.append((obs, action, reward, terminated, nxt))
        assert len(matches) == 1
        obs, action, reward, terminated, nxt = matches[0]
        windows = [obs[:, y : y + size, x : x + size] for y in range(4) for x in range(4)]
        assert any(np.array_equal(w, batch["pos"][b].numpy()) for w in windows)
        next_windows = [nxt[:, y : y + size, x : x + size] for y in range(4) for x in range(4)]
        assert any(np.array_equal(w, batch["next_obs"][b].numpy()) for w in next_windows)
        assert np.array_equal(batch["action"][b].numpy(), action)
        assert batch["reward"][b, 0] == np.float32(reward)
        assert batch["not_done"][b, 0] == (0.0 if terminated else 1.0)
    assert len(by_obs) == len(naive)


def test_memory_is_one_frame_per_slot():
    buf = FrameReplayBuffer(1000, (3, 100, 100), action_dim=6, frame_stack=3)
    frame_bytes = 3 * 100 * 100
    assert buf.frames.nbytes == 1000 * frame_bytes
    # everything else is small: actions, rewards, flags, episode starts
    assert buf.nbytes - buf.frames.nbytes <= 1000 * (6 * 4 + 4 + 1 + 1 + 8)
    # CURL's reference buffer: obs and next_obs stacks of 3 frames per transition
    assert buf.nbytes * 5.9 < 1000 * 2 * 3 * frame_bytes


def test_buffer_errors():
    with pytest.raises(ValueError, match="capacity"):
        FrameReplayBuffer(3, (3, 4, 4), 1, frame_stack=3)
    buf = FrameReplayBuffer(10, (3, 4, 4), 1)
    with pytest.raises(ValueError, match="start_episode"):
        buf.add(np.zeros(1), 0.0, False, np.zeros((3, 4, 4), np.uint8))
    buf.start_episode(np.zeros((3, 4, 4), np.uint8))
    with pytest.raises(ValueError, match="no transition"):
        buf.sample(np.random.default_rng(0), 2, 3)


def test_anchor_and_positive_are_independent_crops():
    # CURL's positive is a second random crop of the same stack, not the anchor's crop again
    shape, size = (3, 12, 12), 8
    rng = np.random.default_rng(4)
    buf = FrameReplayBuffer(100, shape, action_dim=2, frame_stack=3)
    _play(buf, rng, [30], 3, shape)
    batch = buf.sample(np.random.default_rng(5), 64, size)
    same = [bool((batch["obs"][b] == batch["pos"][b]).all()) for b in range(64)]
    # 25 crop positions: a shared position has probability 1/25 per sample (~3 of 64)
    assert sum(same) < 16
