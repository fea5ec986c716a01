"""Multi-level training: suites, the actor-to-level rule, per-level rows and tags, suite figures."""

import json
import math
import os

import pytest
import torch

from pronghorn import suites
from pronghorn.actor import env_levels
from pronghorn.config import Config, ConfigError
from pronghorn.envs import probe_levels
from pronghorn.logs import Episode, TensorBoardSink
from pronghorn.models import build_agent
from pronghorn.runtime import LocalRuntime
from pronghorn.stats import LevelStats
from tests.helpers import assert_no_leaks, read_csv, run_cli

BREAKOUT, FREEWAY, SEAQUEST = "MinAtar/Breakout-v0", "MinAtar/Freeway-v0", "MinAtar/Seaquest-v0"
THREE = f"{BREAKOUT},{FREEWAY},{SEAQUEST}"


def test_actor_i_plays_level_i_mod_l_and_fewer_actors_share_levels_over_their_envs():
    many = Config(levels=THREE, num_actors=7, envs_per_actor=2)
    assert [env_levels(many, i) for i in range(7)] == [[i % 3] * 2 for i in range(7)]
    few = Config(levels="minatar", num_actors=2, envs_per_actor=4)  # 5 levels, 2 actors
    assert env_levels(few, 0) == [0, 2, 4, 1] and env_levels(few, 1) == [1, 3, 0, 2]
    assert {lv for i in range(2) for lv in env_levels(few, i)} == set(range(5))
    with pytest.raises(ConfigError, match=r"2 actors x 2 envs = 4 environments could not play them all"):
        Config(levels="minatar", num_actors=2, envs_per_actor=2)


def test_suites_expand_to_registered_levels():
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    assert len(suites.SUITES["atari57"]) == 57 and all(level in gym.registry for level in suites.SUITES["atari57"])
    assert set(suites.SUITES["atari5"]) <= set(suites.SUITES["atari57"]) and len(suites.SUITES["atari5"]) == 5
    assert Config(levels="atari5").level_names == suites.SUITES["atari5"]
    assert Config(levels=" ALE/Pong-v5, ALE/Breakout-v5 ").level_names == ("ALE/Pong-v5", "ALE/Breakout-v5")
    with pytest.raises(ConfigError, match="more than once"):
        Config(levels="ALE/Pong-v5,ALE/Pong-v5")


def test_human_normalized_scores_and_suite_summary():
    assert suites.human_normalized("ALE/Pong-v5", -20.7) == 0.0
    assert suites.human_normalized("ALE/Pong-v5", 14.6) == pytest.approx(1.0)
    assert suites.human_normalized("ALE/Breakout-v5", 16.1) == pytest.approx(0.5)
    assert suites.human_normalized("CartPole-v1", 500.0) is None
    summary = suites.suite_summary({"a": 0.5, "b": 3.0, "c": 0.1})
    assert summary["hns_median"] == 0.5 and summary["hns_mean"] == pytest.approx(3.6 / 3)
    assert summary["hns_capped_mean"] == pytest.approx(1.6 / 3)  # b counts as 1.0 (human level)


def test_atari_levels_share_the_full_action_set_and_a_single_game_keeps_its_own():
    assert probe_levels(Config(levels="ALE/Pong-v5,ALE/Breakout-v5")).num_actions == 18
    assert probe_levels(Config(env="ALE/Pong-v5")).num_actions == 6


def test_skiing_gets_all_18_actions_each_mapped_to_its_form_without_fire():
    from pronghorn.envs.single import make_single

    env = make_single("ALE/Skiing-v5", 0, Config(levels="ALE/Pong-v5,ALE/Skiing-v5"))
    try:
        assert env.action_space.n == 18
        legal = env.unwrapped.get_action_meanings()  # NOOP, UP, RIGHT, ... without FIRE
        wrapper = env
        while not hasattr(wrapper, "_map"):
            wrapper = wrapper.env
        assert [legal[wrapper.action(a)] for a in (0, 1, 3, 11, 17)] == ["NOOP", "NOOP", "RIGHT", "RIGHT", "DOWNLEFT"]
    finally:
        env.close()
    with pytest.raises(ConfigError, match="Skiing-v5 the 18 actions"):
        Config(levels="ALE/Pong-v5,ALE/Skiing-v5", env_backend="envpool")


def test_minatar_levels_are_padded_to_one_observation_and_the_full_action_set():
    spec = probe_levels(Config(levels="minatar"))
    assert spec.obs_shape == (10, 10, 10) and spec.num_actions == 6
    assert probe_levels(Config(env="MinAtar/Breakout-v0")).obs_shape == (4, 10, 10)


def test_per_level_metrics_and_tags_for_an_atari_suite(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    levels = ("ALE/Pong-v5", "ALE/Breakout-v5", "ALE/Qbert-v5")
    stats = LevelStats(levels)
    first = stats.level_metrics()  # every column exists before any episode: metrics.csv fixes them on row 1
    assert math.isnan(first["suite/hns_median"]) and math.isnan(first["ALE/Pong-v5/human_normalized"])
    stats.add([Episode(0, "ALE/Pong-v5", 14.6, 100, 0.0), Episode(0, "ALE/Breakout-v5", 1.7, 100, 0.0)])
    assert math.isnan(stats.level_metrics()["suite/hns_median"])  # Qbert has no episode yet
    stats.add([Episode(0, "ALE/Qbert-v5", 163.9 + 0.25 * (13455.0 - 163.9), 100, 0.0)])
    row = stats.level_metrics()
    assert row["ALE/Pong-v5/human_normalized"] == pytest.approx(1.0) and row["suite/hns_median"] == pytest.approx(0.25)
    sink = TensorBoardSink(str(tmp_path))
    sink.metrics(1000, {**row, "fps": 5.0})
    sink.close()
    tags = EventAccumulator(str(tmp_path)).Reload().Tags()["scalars"]
    assert {"ALE/Qbert-v5/human_normalized", "suite/hns_median", "suite/hns_capped_mean", "learner/fps"} <= set(tags)


def test_levels_that_cannot_share_an_agent_are_refused_naming_both():
    proc, _, err = run_cli(["train", "--levels", "CartPole-v1,Acrobot-v1", "--no-progress"], timeout=120)
    assert proc.returncode == 2 and len(err.strip().splitlines()) == 1, err
    assert "CartPole-v1 (observation shape (4,))" in err and "Acrobot-v1 (observation shape (6,))" in err
    proc, _, err = run_cli(["train", "--levels", "procgen"], timeout=120)
    assert proc.returncode == 2 and "Procgen has no Gymnasium package" in err and len(err.strip().splitlines()) == 1


def test_actors_step_the_levels_the_rule_gives_them():
    """Two actors, three levels: env j of actor i plays level (i + 2j) % 3, seen in the slots' level field
    and in the observations themselves (each game fills its own channels of the padded grid)."""
    cfg = Config(levels=THREE, num_actors=2, envs_per_actor=3, unroll_length=40, batch_size=6).for_observations((10, 10, 10))
    spec = probe_levels(cfg)
    agent = build_agent(cfg, spec.obs_shape, spec.num_actions)
    rt = LocalRuntime(cfg, spec, sum(p.numel() for p in agent.parameters()), agent.core_size)
    rt.weights.publish(agent, 0)
    try:
        rt.start()
        for actor in range(2):
            slot = rt.unroll_slots()[rt.router.get_from(actor, timeout=60)]
            assert slot.level[0].tolist() == env_levels(cfg, actor)
            for j, level in enumerate(env_levels(cfg, actor)):
                used = slot.obs[:, j].flatten(2).amax(dim=(0, 2))  # [channels]: was it ever set?
                game = cfg.level_names[level]
                if game == BREAKOUT:
                    assert used[4:].sum() == 0  # 4 channels of its own
                elif game == FREEWAY:
                    assert used[7:].sum() == 0 and used[2:7].sum() > 0  # cars and their speed trails
                else:
                    assert used[7] == 1  # Seaquest's oxygen gauge
    finally:
        rt.close()
    assert_no_leaks()


def test_three_levels_train_with_rows_tags_and_figures_for_each(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logdir = tmp_path / "three"
    proc, out, err = run_cli(
        [
            "train",
            "--levels",
            THREE,
            "--num-actors",
            "2",
            # Freeway's games last 2,500 steps: 16 envs take ~6,000 steps each in 100k frames, so every level
            # ends games (the default 32 per actor would take ~1,560 each and end no Freeway game).
            "--envs-per-actor",
            "8",
            "--total-frames",
            "100k",
            "--logdir",
            str(logdir),
            "--no-progress",
            "--log-interval",
            "1",
            "--popart",
        ],
        timeout=300,
    )
    assert proc.returncode == 0, err[-2000:]
    assert_no_leaks(owners=(proc.pid,))
    episodes = read_csv(logdir / "episodes.csv")
    assert {r["level"] for r in episodes} == {BREAKOUT, FREEWAY, SEAQUEST}
    last = read_csv(logdir / "metrics.csv")[-1]
    for level in (BREAKOUT, FREEWAY, SEAQUEST):
        assert math.isfinite(float(last[f"{level}/mean_return_100"])) and float(last[f"popart_sigma/{level}"]) > 0
    assert math.isfinite(float(last["suite/mean_return"]))
    tags = set(EventAccumulator(str(logdir)).Reload().Tags()["scalars"])
    assert {f"{lv}/{kind}" for lv in (BREAKOUT, FREEWAY, SEAQUEST) for kind in ("episode_return", "episode_frames")} <= tags
    # The checkpoint carries the PopArt statistics; evaluate plays every level with them.
    state = torch.load(next((logdir / "checkpoints").glob("ckpt-*.pt")), weights_only=False)
    assert state["learner"]["agent"]["popart.mu"].shape == (3,) and set(state["stats"]["recent"]) == {BREAKOUT, FREEWAY, SEAQUEST}
    proc, out, err = run_cli(["evaluate", "--logdir", str(logdir), "--episodes", "2"], timeout=300)
    assert proc.returncode == 0, err[-2000:]
    report = json.loads(out)
    assert set(report["levels"]) == {BREAKOUT, FREEWAY, SEAQUEST} and all(r["episodes"] == 2 for r in report["levels"].values())
    assert report["suite"]["mean_return"] == pytest.approx(sum(r["return"]["mean"] for r in report["levels"].values()) / 3)
    proc, out, err = run_cli(["plot", str(logdir), "-o", str(tmp_path / "levels.png")], timeout=120)
    assert proc.returncode == 0 and os.path.getsize(tmp_path / "levels.png") > 0, err
