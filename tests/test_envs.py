import itertools

import numpy as np
import pytest

from pronghorn.config import Config, ConfigError
from pronghorn.envs import make_batched, probe
from pronghorn.envs.batch import GymBatch
from pronghorn.envs.single import make_single
from pronghorn.envs.vector import VectorBatch


def test_probe_reads_spaces_and_rejects_unknown_ids():
    spec = probe("CartPole-v1", Config())
    assert spec.obs_shape == (4,) and spec.num_actions == 2 and spec.frames_per_step == 1 and spec.reward_threshold == 475
    with pytest.raises(ConfigError, match="unknown environment 'NoSuchEnv-v0'"):
        probe("NoSuchEnv-v0", Config())


def test_auto_reset_happens_in_the_same_step_and_truncation_keeps_final_obs():
    env = make_batched("tests.flaky_env:ShortCartPole-v0", [0, 1], Config())
    out = env.reset()
    for _ in range(4):
        out = env.step(np.zeros(2, np.int64))
        assert not out.truncated.any()
    before = out.obs.copy()
    out = env.step(np.zeros(2, np.int64))  # 5th step: time limit
    ended = out.truncated & ~out.terminated
    for j in np.flatnonzero(ended):
        assert not np.allclose(out.final_obs[j], out.obs[j])  # obs is the new episode's first observation
        assert out.episode_end[j] and out.episode_frames[j] == 5 and out.episode_return[j] == 5.0
    assert ended.any() or out.terminated.any()
    assert not np.allclose(before, out.obs)


def test_life_loss_ends_training_episode_but_statistics_cover_the_game():
    env = GymBatch("Lives-v0", lambda level, seed: make_single("tests.flaky_env:Lives-v0", seed, Config()), [0], 1, episodic_life=True)
    env.reset()
    terminated, ends = [], []
    for _ in range(12):
        out = env.step(np.zeros(1, np.int64))
        terminated.append(bool(out.terminated[0]))
        ends.append(bool(out.episode_end[0]))
    assert terminated == [False, False, False, True] * 3  # every lost life ends a training episode
    assert ends == [False] * 11 + [True]  # only the game over is a finished episode
    assert out.episode_return[0] == 12.0 and out.episode_frames[0] == 12


def test_env_failure_is_recovered_and_counted():
    env = GymBatch("Flaky", lambda level, seed: make_single("tests.flaky_env:FlakyCartPole-v0", seed, Config()), [0, 1], 1, True)
    env.reset()
    for _ in range(400):
        out = env.step(np.zeros(2, np.int64))
    assert env.failures >= 2
    assert out.obs.shape == (2, 4)


@pytest.mark.parametrize("backend", ["gymnasium", "envpool", "vector"])
def test_atari_backends_agree_on_shapes_dtypes_and_ranges(backend):
    cfg = Config(env="ALE/Pong-v5", env_backend=backend)
    spec = probe("ALE/Pong-v5", cfg)
    assert spec.obs_shape == (4, 84, 84) and spec.obs_dtype == np.uint8 and spec.num_actions == 6 and spec.frames_per_step == 4
    env = make_batched("ALE/Pong-v5", [0, 1], cfg)
    try:
        out = env.reset()
        rng = np.random.default_rng(0)
        seen_max = 0
        for _ in range(40):
            out = env.step(rng.integers(0, 6, size=2))
            seen_max = max(seen_max, int(out.obs.max()))
        assert out.obs.shape == (2, 4, 84, 84) and out.obs.dtype == np.uint8
        assert out.reward.dtype == np.float32 and set(np.unique(out.reward)) <= {-1.0, 0.0, 1.0}
        assert 50 < seen_max <= 255  # real grayscale frames, not blanks
        assert out.terminated.dtype == np.bool_ and out.truncated.dtype == np.bool_
    finally:
        env.close()


def test_custom_factory_envs_are_validated_at_start_up():
    spec = probe("tests.flaky_env:make_cartpole", Config())
    assert spec.obs_shape == (4,) and spec.num_actions == 2
    with pytest.raises(ConfigError, match=r"observation of dtype float64 from step\(\), but its observation_space says float32"):
        probe("tests.flaky_env:make_wrong_dtype", Config())
    with pytest.raises(ConfigError, match=r"observation of shape \(3,\) from reset\(\), but its observation_space has shape \(4,\)"):
        probe("tests.flaky_env:make_wrong_shape", Config())
    with pytest.raises(ConfigError, match="no callable 'nothing_here'"):
        probe("tests.flaky_env:nothing_here", Config())
    with pytest.raises(ConfigError, match="needs a package that is not installed"):
        probe("no_such_module_xyz:make", Config())


@pytest.mark.parametrize("backend", ["envpool", "vector"])
def test_c_plus_plus_atari_pools_take_no_noops(backend):
    # envpool and ale-py's vector env draw the no-op count from [0, noop_max - 1] (envpool segfaults on 0): both backends pass +1.
    cfg = Config(env="ALE/Pong-v5", env_backend=backend, noop_max=0)
    env = make_batched("ALE/Pong-v5", [0, 1], cfg)
    try:
        first = env.reset().obs.copy()
        assert first.shape == (2, 4, 84, 84)
        # With no no-ops and no sticky randomness in reset, both games start on the same frame.
        assert np.array_equal(first[0], first[1])
    finally:
        env.close()


def test_vector_atari_plays_the_gymnasium_path_s_games_frame_for_frame():
    """ale-py's vector env (the auto backend for Atari) and one AtariEnv + AtariPreprocessing per env are the same
    emulator and preprocessing: with the same seeds and actions, no sticky actions and no no-ops, every field of
    every step agrees, through life losses (episodic life), game overs and the first stacks of the next games."""
    assert Config(env="ALE/Breakout-v5").backend == "vector"
    cfg = dict(env="ALE/Breakout-v5", noop_max=0, sticky_actions=0.0)
    gym_env = make_batched("ALE/Breakout-v5", [3, 4], Config(**cfg, env_backend="gymnasium"))
    vec_env = make_batched("ALE/Breakout-v5", [3, 4], Config(**cfg, env_backend="vector"))
    try:
        a, b = gym_env.reset(), vec_env.reset()
        assert np.array_equal(a.obs, b.obs)
        rng = np.random.default_rng(0)
        games = lives_lost = 0
        for t in range(1200):
            actions = rng.integers(0, 4, size=2)
            a, b = gym_env.step(actions), vec_env.step(actions)
            for field in ("obs", "reward", "terminated", "truncated", "episode_end", "episode_return", "episode_frames"):
                assert np.array_equal(getattr(a, field), getattr(b, field)), (t, field)
            games += int(a.episode_end.sum())
            lives_lost += int((a.terminated & ~a.episode_end).sum())
        assert games >= 4 and lives_lost >= 10, (games, lives_lost)
    finally:
        gym_env.close()
        vec_env.close()


def test_vector_backend_choice_and_refusals():
    assert Config(env="ALE/Pong-v5").backend == "vector"
    suite = Config(levels="ALE/Pong-v5,ALE/Skiing-v5", num_actors=2)
    # Skiing's legal set has 9 actions, not the 18 a multi-game agent shares: its actor steps ale-py's AtariEnv.
    assert suite.backend_for(["ALE/Pong-v5"]) == "vector" and suite.backend_for(["ALE/Skiing-v5"]) == "gymnasium"
    assert Config(levels="ALE/Pong-v5,ALE/Breakout-v5", num_actors=1).backend_for(["ALE/Pong-v5", "ALE/Breakout-v5"]) == "gymnasium"
    with pytest.raises(ConfigError, match="--env-backend vector steps one level per actor, but 2 levels need at least that many actors"):
        Config(levels="ALE/Pong-v5,ALE/Breakout-v5", num_actors=1, env_backend="vector")
    with pytest.raises(ConfigError, match="--env-backend vector cannot give ALE/Skiing-v5"):
        Config(levels="ALE/Pong-v5,ALE/Skiing-v5", num_actors=2, env_backend="vector")
    for level in ("MinAtar/Breakout-v0", "Acrobot-v1"):
        with pytest.raises(
            ConfigError, match=f"--env-backend vector steps Gymnasium's vector CartPole-v0 or CartPole-v1 and Atari ids .*, not {level}: use --env-backend auto"
        ):
            Config(env=level, env_backend="vector")


def test_batched_cartpole_backends_agree_on_same_step_reset_and_time_limits():
    """CartPole through Gymnasium's vector env (the auto backend's choice), envpool and one Gymnasium env each:
    same-step reset, truncation at the time limit with final_obs, the same whole-episode statistics."""
    assert Config(env="CartPole-v1").backend == "vector"
    assert Config(env="Acrobot-v1").backend == "envpool"
    assert Config(env="tests.flaky_env:ShortCartPole-v0").backend == "gymnasium"
    lengths = {}
    for level, limit in (("CartPole-v1", 500), ("CartPole-v0", 200)):
        for backend in ("vector", "envpool", "gymnasium"):
            env = make_batched(level, list(range(4)), Config(env=level, env_backend=backend))
            out, ends = env.reset(), []
            for _ in range(2 * limit + 100):
                balance = (out.obs[:, 2] + 0.5 * out.obs[:, 3] > 0).astype(np.int64)  # keeps the pole up: only the time limit ends it
                before = out.obs.copy()
                out = env.step(balance)
                for j in np.flatnonzero(out.episode_end):
                    assert out.truncated[j] and not out.terminated[j]
                    assert np.abs(out.final_obs[j] - before[j]).max() < 0.5  # the last observation, one step on
                    assert np.abs(out.obs[j]).max() <= 0.05  # already the next episode's first observation
                    ends.append((int(out.episode_frames[j]), float(out.episode_return[j])))
            env.close()
            lengths[level, backend] = ends
        assert all(lengths[level, b] == [(limit, float(limit))] * 8 for b in ("vector", "envpool", "gymnasium")), lengths


def test_vector_cartpole_resets_a_fallen_pole_in_the_same_step_and_moves_on_from_there():
    """A pole that falls ends its episode (terminated, reward 1) and the env continues from the new episode's
    first observation at the next step: that step is paid and moves the cart, unlike Gymnasium's own
    next-step reset, which would spend it on the reset."""
    env = make_batched("CartPole-v1", [0, 1, 2], Config(env="CartPole-v1", env_backend="vector"))
    try:
        out = env.reset()
        falls, frames = 0, 0
        for _ in range(300):
            out = env.step(np.zeros(3, np.int64))  # always push left: every episode ends by falling within ~10 steps
            frames += 3
            assert (out.reward == 1.0).all()  # no step is spent unpaid on a reset
            ended = np.flatnonzero(out.episode_end)
            falls += ended.size
            if not ended.size:
                continue
            j = ended[0]  # the arrays are reused by the next step: check this one now
            assert out.terminated[j] and not out.truncated[j]
            assert abs(out.final_obs[j, 0]) > 2.4 or abs(out.final_obs[j, 2]) > 0.2094  # the state that ended it
            assert np.abs(out.obs[j]).max() <= 0.05
            first = out.obs[j].copy()
            after = env.step(np.zeros(3, np.int64))
            frames += 3
            falls += int(after.episode_end.sum())
            assert not after.episode_end[j] and after.reward[j] == 1.0
            assert after.obs[j, 1] < first[1]  # pushed left from the new episode's first state
        assert falls > 30
        assert falls * 8 < frames  # episodes last more than a handful of steps: none is skipped or doubled
    finally:
        env.close()


def test_vector_cartpole_still_refuses_actions_outside_its_space():
    """The vector env's per-step action check is replaced by a one-reduction one (envs/vector.py): it must
    refuse what Gymnasium's refuses (negative, too large, wrong shape or dtype) and pass the rest."""
    env = make_batched("CartPole-v1", [0, 1, 2], Config(env="CartPole-v1", env_backend="vector"))
    try:
        env.reset()
        env.step(np.array([0, 1, 1], np.int64))
        env.step(np.array([1, 0, 1], np.int32))
        for bad in (np.array([0, 2, 1]), np.array([0, -1, 1]), np.array([0, 1]), np.array([0.0, 1.0, 1.0]), np.array([[0, 1, 1]])):
            with pytest.raises(AssertionError, match="invalid"):
                env.step(bad)
        assert isinstance(env, VectorBatch)
        space = env._env.action_space
        assert space.shape == (3,) and space.contains(space.sample())  # the rest is the space's own
    finally:
        env.close()


def test_envs_per_actor_defaults_by_observation_kind():
    assert Config().for_observations((4,)).envs == 16  # vectors: cheap steps, more envs per actor
    assert Config(replay_fraction=0.5).for_observations((4,)).envs == 8  # a batch of 16 can be half replayed
    assert Config(env="ALE/Pong-v5").for_observations((4, 84, 84)).envs == 8
    assert Config(env="MinAtar/Breakout-v0").for_observations((4, 10, 10)).envs == 32  # small grids: one unroll is the batch
    assert Config(env="MinAtar/Breakout-v0", replay_fraction=0.5).for_observations((4, 10, 10)).envs == 8  # half of 32 replayed
    assert Config(envs_per_actor=4).for_observations((4,)).envs == 4
    with pytest.raises(ValueError, match="unresolved"):
        Config().envs  # noqa: B018  (the property raises before for_observations)


def test_minatar_grid_is_the_game_s_channels_first_then_zeros_in_a_fresh_array():
    from pronghorn.envs.minatar import make_minatar

    env = make_minatar("MinAtar/Breakout-v0", channels=6)  # Breakout has 4 object channels
    obs, _ = env.reset(seed=3)
    game = env.unwrapped.game
    seen = []
    for step in range(30):
        state = game.state()  # [10, 10, 4] bool: rows, columns, channels
        assert obs.shape == (6, 10, 10) and obs.dtype == np.uint8
        for c in range(4):  # channel c of the grid is channel c of the game, cell for cell
            assert np.array_equal(obs[c], state[:, :, c].astype(np.uint8)), (step, c)
        assert not obs[4:].any()  # the padding stays empty
        seen.append(obs)
        obs, _, terminated, _, _ = env.step(step % 3)
        if terminated:
            obs, _ = env.reset()
    assert len({id(o) for o in seen}) == len(seen) and not np.shares_memory(seen[0], seen[1])  # callers may keep them
    assert any(not np.array_equal(a, b) for a, b in itertools.pairwise(seen))  # the ball moved: the grids are not all one
