"""Environment wrapper: pixels, frame stacking, action repeat and step accounting."""

from __future__ import annotations

import numpy as np
import pytest

from domains.rl.config import DataConfig
from domains.rl.envs import DMCPixelEnv, make_env, select_renderer


def test_renderer_choice_is_validated():
    with pytest.raises(ValueError, match="renderer"):
        select_renderer("vulkan")
    assert select_renderer("auto") in ("egl", "osmesa")


def test_real_pixels_and_frame_stack():
    env = make_env("cartpole-swingup", action_repeat=8, frame_stack=3, image_size=32, seed=0)
    obs, info = env.reset()
    assert obs.shape == (9, 32, 32) and obs.dtype == np.uint8
    assert env.observation_space.shape == (9, 32, 32)
    # on reset the first frame fills every slot
    assert np.array_equal(obs[0:3], obs[3:6]) and np.array_equal(obs[3:6], obs[6:9])
    assert np.array_equal(obs[6:9], info["frame"])
    assert obs.std() > 0  # a real picture, not a blank buffer
    # the same task and seed in raw dm_control, rendered by camera 0 and moved channels-first,
    # after the same 8 physics steps per agent step
    from dm_control import suite  # after make_env chose the renderer

    raw = suite.load("cartpole", "swingup", task_kwargs={"random": 0})
    raw.reset()

    def raw_frame():
        return raw.physics.render(32, 32, camera_id=0).transpose(2, 0, 1)

    assert np.array_equal(info["frame"], raw_frame())
    frames = [info["frame"]] * 3  # the reset frame fills the stack
    for _ in range(3):
        obs, _, _, _, info = env.step(np.array([0.5], dtype=np.float32))
        for _ in range(8):
            raw.step(np.array([0.5]))
        assert np.array_equal(info["frame"], raw_frame())
        frames.append(info["frame"])
        # the stack is the last three frames, oldest first
        assert np.array_equal(obs, np.concatenate(frames[-3:], axis=0))
    assert not np.array_equal(frames[0], frames[-1])  # the cart moved
    env.close()


def test_curl_action_repeats():
    expected = {
        "cartpole-swingup": 8,
        "finger-spin": 2,
        "walker-walk": 2,
        "cheetah-run": 4,
        "reacher-easy": 4,
        "ball_in_cup-catch": 4,
    }
    for task, repeat in expected.items():
        assert DataConfig(task=task).repeat == repeat
    assert DataConfig(task="cartpole-swingup", action_repeat=2).repeat == 2


@pytest.mark.parametrize("repeat", [1, 8])
def test_action_repeat_accounting_matches_raw_dm_control(cheap_render, repeat):
    env = DMCPixelEnv("cartpole-swingup", action_repeat=repeat, image_size=16, seed=3)
    from dm_control import suite  # after the wrapper chose the renderer

    raw = suite.load("cartpole", "swingup", task_kwargs={"random": 3})
    env.reset()
    raw.reset()
    rng = np.random.default_rng(0)
    agent_steps = env_steps = 0
    done = False
    while not done:
        action = rng.uniform(-1, 1, size=1).astype(np.float32)
        _, reward, terminated, truncated, info = env.step(action)
        expected = 0.0
        for _ in range(repeat):  # the reward of an agent step sums its environment steps
            expected += raw.step(action.astype(np.float64)).reward
        assert reward == pytest.approx(expected, rel=1e-12, abs=1e-12)
        assert info["env_steps"] == repeat
        agent_steps += 1
        env_steps += info["env_steps"]
        done = terminated or truncated
        assert not terminated  # DMC episodes end on the time limit: a truncation
    assert env_steps == 1000 and agent_steps == 1000 // repeat
    assert np.allclose(env.physics.data.qpos, raw.physics.data.qpos)


def test_reset_seed_fixes_the_episode(cheap_render):
    env = DMCPixelEnv("cartpole-swingup", action_repeat=2, image_size=16, seed=0)
    a, _ = env.reset(seed=11)
    b, _ = env.reset(seed=11)
    c, _ = env.reset(seed=12)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_bad_inputs_raise_value_errors(cheap_render):
    with pytest.raises(ValueError, match="unknown DMControl task"):
        DMCPixelEnv("cartpole-fly", image_size=16)
    with pytest.raises(ValueError, match="action_repeat"):
        DMCPixelEnv("cartpole-swingup", action_repeat=0, image_size=16)
    env = DMCPixelEnv("cartpole-swingup", image_size=16)
    env.reset()
    with pytest.raises(ValueError, match="action must be finite with shape"):
        env.step(np.array([0.1, 0.2]))
    with pytest.raises(ValueError, match="crop_size"):
        DataConfig(image_size=64, crop_size=84)


def test_action_repeat_that_does_not_divide_the_episode_stops_at_its_end(cheap_render):
    # 1000 environment steps at action repeat 3: 333 full agent steps, then one of 1 step
    env = DMCPixelEnv("cartpole-swingup", action_repeat=3, image_size=16, seed=4)
    from dm_control import suite

    raw = suite.load("cartpole", "swingup", task_kwargs={"random": 4})
    env.reset()
    raw.reset()
    counts, done = [], False
    while not done:
        action = np.array([0.3], dtype=np.float32)
        _, reward, terminated, truncated, info = env.step(action)
        expected, steps = 0.0, 0
        for _ in range(3):  # the raw environment, stopped at the end of its episode
            ts = raw.step(action.astype(np.float64))
            expected += ts.reward
            steps += 1
            if ts.last():
                break
        assert info["env_steps"] == steps
        assert reward == pytest.approx(expected, rel=1e-12, abs=1e-12)
        counts.append(info["env_steps"])
        done = terminated or truncated
    assert truncated and not terminated
    assert sum(counts) == 1000 and len(counts) == 334 and counts[-1] == 1 and set(counts[:-1]) == {3}


def test_seeded_episode_is_raw_dm_control_rendered():
    """reset(seed=s) then actions: the pixels and rewards of dm_control itself, loaded with
    random=s and rendered from the same camera (the shimmy bridge adds nothing to them)."""
    env = DMCPixelEnv("cartpole-swingup", action_repeat=2, image_size=16, seed=0)
    obs, _ = env.reset(seed=11)
    from dm_control import suite

    raw = suite.load("cartpole", "swingup", task_kwargs={"random": 11})
    raw.reset()
    assert np.array_equal(obs, raw.physics.render(16, 16, camera_id=0).transpose(2, 0, 1))
    rng = np.random.default_rng(1)
    for _ in range(10):
        action = rng.uniform(-1, 1, size=1).astype(np.float32)
        obs, reward, _, _, _ = env.step(action)
        expected = sum(raw.step(action.astype(np.float64)).reward for _ in range(2))
        assert reward == expected
        assert np.array_equal(obs, raw.physics.render(16, 16, camera_id=0).transpose(2, 0, 1))
    env.close()


def test_a_smaller_shadow_map_is_in_force_and_renders_nearly_the_same_frames():
    """data.shadow_size reaches the rendering context; at 64x64 a 512 map gives the default
    (2048) frame but for a few shadow-edge pixels, and 0 drops the shadows."""
    frames = {}
    for size in (None, 512, 0):
        env = make_env("cartpole-swingup", action_repeat=8, image_size=64, seed=0, shadow_size=size)
        _, info = env.reset(seed=1)
        seq = [info["frame"]]
        for _ in range(5):
            seq.append(env.step(np.array([0.8], dtype=np.float32))[4]["frame"])
        frames[size] = np.stack(seq).astype(int)
        context = env.unwrapped.physics.contexts.mujoco.ptr
        assert context.shadowSize == (2048 if size is None else size)
        env.close()
    assert np.abs(frames[512] - frames[None]).mean() < 0.05
    assert np.abs(frames[0] - frames[None]).mean() > 0.2
    with pytest.raises(ValueError, match="shadow_size"):
        DMCPixelEnv("cartpole-swingup", shadow_size=-1)
