"""A replay buffer that stores every rendered frame once and rebuilds stacks by index.

CURL's reference buffer stores the stacked ``obs`` and ``next_obs`` of every transition:
2 x k frames per transition (18 GB at 100k transitions of 3 x 100x100 RGB frames). Here a
transition adds one frame (its next observation's newest frame) and an episode one more (its
first frame): about 1/(2k) of that memory. A stack is rebuilt from the frame ring by index,
repeating the episode's first frame where the episode is younger than k frames, exactly as
:class:`~domains.rl.envs.FrameStack` does on reset.

Layout: a ring of ``capacity`` frame slots. Slot ``f % capacity`` holds absolute frame ``f``,
the first frame of its episode (``start``) and, when frame ``f`` has a successor, the action
taken from it with its reward and termination flag: frame ``f`` is then the observation of a
transition whose next observation ends with frame ``f + 1``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from domains.rl.augment import crop_stacks, random_offsets

__all__ = ["FrameReplayBuffer", "Batch"]


class Batch(dict):
    """One sampled batch: ``obs``, ``pos`` (a second crop of ``obs``), ``next_obs`` as uint8
    tensors ``[B, 3k, s, s]``; ``action`` ``[B, A]``, ``reward`` and ``not_done`` ``[B, 1]``."""


class FrameReplayBuffer:
    """Frames stored once (uint8); stacks of ``frame_stack`` rebuilt at sampling time."""

    def __init__(self, capacity: int, frame_shape: tuple[int, int, int], action_dim: int, frame_stack: int = 3) -> None:
        if capacity < frame_stack + 1:
            raise ValueError(f"capacity must be at least frame_stack + 1 = {frame_stack + 1} frames, got {capacity!r}")
        if len(frame_shape) != 3:
            raise ValueError(f"frame_shape must be (C, H, W), got {frame_shape!r}")
        self.capacity, self.k = int(capacity), int(frame_stack)
        self.frames = np.zeros((capacity, *frame_shape), dtype=np.uint8)
        self.start = np.zeros(capacity, dtype=np.int64)
        self.action = np.zeros((capacity, action_dim), dtype=np.float32)
        self.reward = np.zeros(capacity, dtype=np.float32)
        self.terminated = np.zeros(capacity, dtype=bool)
        self.has_next = np.zeros(capacity, dtype=bool)
        self.num_frames = 0  # absolute count of frames ever added
        self.num_transitions = 0  # absolute count of transitions ever added
        self._episode_start = -1

    # -- writing -------------------------------------------------------------------------
    def _put(self, frame: np.ndarray) -> None:
        slot = self.num_frames % self.capacity
        self.frames[slot] = frame
        self.start[slot] = self._episode_start
        self.has_next[slot] = False
        self.num_frames += 1

    def start_episode(self, frame: np.ndarray) -> None:
        """Store the first frame ``[C, H, W]`` of a new episode."""
        self._episode_start = self.num_frames
        self._put(frame)

    def add(self, action: np.ndarray, reward: float, terminated: bool, next_frame: np.ndarray) -> None:
        """Store the transition from the newest frame: the action, its reward, whether the
        episode terminated (a time limit is not a termination), and the next frame."""
        if self._episode_start < 0:
            raise ValueError("call start_episode(first_frame) before add()")
        prev = (self.num_frames - 1) % self.capacity
        self.action[prev] = action
        self.reward[prev] = reward
        self.terminated[prev] = terminated
        self.has_next[prev] = True
        self.num_transitions += 1
        self._put(next_frame)

    # -- reading -------------------------------------------------------------------------
    @property
    def oldest(self) -> int:
        """The oldest absolute frame still in the ring."""
        return max(0, self.num_frames - self.capacity)

    def sampleable(self, frames: np.ndarray) -> np.ndarray:
        """Which absolute frames (all ``>= oldest``) are observations of a stored transition
        with their whole stack still in the ring."""
        slots = frames % self.capacity
        first_needed = np.maximum(frames - (self.k - 1), self.start[slots])
        return self.has_next[slots] & (first_needed >= self.oldest) & (frames < self.num_frames - 1)

    def __len__(self) -> int:
        """Transitions currently sampleable."""
        return int(self.sampleable(np.arange(self.oldest, self.num_frames)).sum())

    def stack_index(self, frames: np.ndarray) -> np.ndarray:
        """``[B, k]`` absolute frame numbers of the stacks ending at ``frames`` (oldest
        first), the episode's first frame repeated where the episode is younger than k."""
        back = np.arange(self.k - 1, -1, -1)
        first = self.start[frames % self.capacity]
        return np.maximum(frames[:, None] - back[None, :], first[:, None])

    def stacks(self, frames: np.ndarray) -> np.ndarray:
        """Full-size stacks ``[B, k*C, H, W]`` ending at absolute frames ``frames``."""
        idx = self.stack_index(frames) % self.capacity
        return self.frames[idx].reshape(len(frames), -1, *self.frames.shape[2:])

    def sample_frames(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` absolute frame numbers of sampleable observations, uniformly."""
        lo, hi = self.oldest, self.num_frames - 1
        if hi <= lo or not self.sampleable(np.arange(lo, hi)).any():
            raise ValueError(f"the buffer holds no transition to sample yet ({self.num_transitions} added)")
        out = rng.integers(lo, hi, size=n)
        bad = ~self.sampleable(out)
        while bad.any():  # an episode's last frame, or a stack cut by the ring: draw again
            out[bad] = rng.integers(lo, hi, size=int(bad.sum()))
            bad = ~self.sampleable(out)
        return out

    def sample(self, rng: np.random.Generator, batch_size: int, crop_size: int) -> Batch:
        """A batch with three independent random crops: ``obs`` (the critic's input and the
        contrastive anchor), ``pos`` (the positive) and ``next_obs`` (CURL's ``sample_cpc``)."""
        f = self.sample_frames(rng, batch_size)
        slots = f % self.capacity
        size = self.frames.shape[-1]
        obs_idx = self.stack_index(f) % self.capacity
        next_idx = self.stack_index(f + 1) % self.capacity
        crops = []
        for idx in (obs_idx, obs_idx, next_idx):
            top, left = random_offsets(rng, batch_size, size, crop_size)
            crops.append(torch.from_numpy(crop_stacks(self.frames, idx, top, left, crop_size)))
        return Batch(
            obs=crops[0],
            pos=crops[1],
            next_obs=crops[2],
            action=torch.from_numpy(self.action[slots]),
            reward=torch.from_numpy(self.reward[slots]).unsqueeze(1),
            not_done=torch.from_numpy(1.0 - self.terminated[slots].astype(np.float32)).unsqueeze(1),
        )

    # -- size and snapshots --------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        """Bytes held by the buffer's arrays."""
        return sum(
            a.nbytes for a in (self.frames, self.start, self.action, self.reward, self.terminated, self.has_next)
        )

    _ARRAYS = ("frames", "start", "action", "reward", "terminated", "has_next")

    def save(self, folder: str | Path) -> None:
        """Write the filled part of the buffer to ``folder`` (one .npy per array)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        filled = min(self.num_frames, self.capacity)
        for name in self._ARRAYS:
            np.save(folder / f"{name}.npy", getattr(self, name)[:filled])
        np.save(
            folder / "counters.npy",
            np.array([self.num_frames, self.num_transitions, self._episode_start, self.capacity, self.k]),
        )

    def load(self, folder: str | Path) -> None:
        """Restore what :meth:`save` wrote (the buffer must have the same shape)."""
        folder = Path(folder)
        counters = np.load(folder / "counters.npy")
        if int(counters[3]) != self.capacity or int(counters[4]) != self.k:
            raise ValueError(
                f"snapshot buffer has capacity {int(counters[3])}, frame_stack {int(counters[4])}; "
                f"this buffer has {self.capacity}, {self.k}"
            )
        for name in self._ARRAYS:
            saved = np.load(folder / f"{name}.npy")
            getattr(self, name)[: len(saved)] = saved
        self.num_frames, self.num_transitions, self._episode_start = (int(c) for c in counters[:3])
