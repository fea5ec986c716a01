"""Random flag combinations: the parser returns a valid Config or exits 2 with one line, never a traceback."""

import contextlib
import io

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pronghorn.cli import parse_config
from pronghorn.config import Config

FLAGS = [
    "--env",
    "--env-backend",
    "--model",
    "--num-actors",
    "--envs-per-actor",
    "--unroll-length",
    "--batch-size",
    "--num-buffers",
    "--actor-nice",
    "--total-frames",
    "--learning-rate",
    "--discount",
    "--entropy-cost",
    "--reward-clipping",
    "--sticky-actions",
    "--noop-max",
    "--device",
    "--seed",
    "--log-interval",
    "--hidden-size",
    "--rmsprop-eps",
    "--rmsprop-init",
    "--optimizer",
    "--grad-norm-clip",
    "--keep-checkpoints",
    "--timeout",
    "--lstm",
    "--no-lstm",
    "--bogus-flag",
]
VALUES = st.one_of(
    st.integers(-5, 100).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(["CartPole-v1", "ALE/Pong-v5", "envpool", "gymnasium", "mlp", "deep", "abs_one", "cpu", "adam", "rmsprop", "10M", "1.5k", "", "x", "-1e3"]),
    st.text(max_size=8),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(FLAGS), VALUES | st.just("--help")), max_size=4))
def test_parser_gives_a_config_or_one_line_and_exit_2(pairs):
    # Hypothesis found `--env --help` (tyro's boxed "Missing argument", several lines) and `--bogus-flag --help`.
    argv = []
    for flag, value in pairs:
        argv += [flag] if flag in ("--lstm", "--no-lstm") else [flag, value]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            cfg = parse_config(argv)
    except SystemExit as exc:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        if exc.code == 0:  # a value of "--help" is read as the help flag: help, whatever else is wrong
            assert "--help" in argv or "-h" in argv, argv
            return
        assert exc.code == 2, (argv, err.getvalue())
        assert len(lines) == 1 and lines[0].startswith("pronghorn: error: "), (argv, err.getvalue())
    else:
        assert isinstance(cfg, Config)
