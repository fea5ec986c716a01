"""`pronghorn train ...`: the command line, generated from Config by tyro.

Bad input exits with code 2 and one line naming the problem and the fix, never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import math
import os
import re
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

USAGE = "usage: pronghorn {train,evaluate,plot,status} [--help] ..."
_BOX = re.compile(r"[\u2500-\u257f]")  # box-drawing characters tyro frames its messages with


def fail(message: str, code: int = 2) -> NoReturn:
    print(f"pronghorn: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def _one_line(tyro_output: str) -> str:
    """Reduce tyro's boxed error to its first sentence of substance."""
    lines = [_BOX.sub("", line).strip() for line in tyro_output.splitlines()]
    lines = [line for line in lines if line.strip("-=_ ") and not line.startswith(("usage:", "For full helptext", "Argument helptext"))]
    titles = {"Invalid choice", "Value error", "Parsing error", "Unrecognized options", "Required options", "Missing argument"}
    body = [line for line in lines if line not in titles]
    return " ".join(body[:2]) if body else "could not parse the command line"


def parse_config(argv: Sequence[str], prog: str = "pronghorn train"):
    """Config from flags; exits 2 with one line on any bad flag or value."""
    import tyro

    from pronghorn.config import Config, ConfigError

    captured = io.StringIO()
    try:
        with contextlib.redirect_stderr(captured), contextlib.redirect_stdout(captured):
            return tyro.cli(Config, args=list(argv), prog=prog)
    except ConfigError as exc:
        fail(str(exc))
    except SystemExit as exc:
        if exc.code in (0, None):  # --help: the help text was captured with everything else
            sys.stdout.write(captured.getvalue())
            raise
        # A flag missing its value before --help (`--env --help`) lands here too: one line, not tyro's box.
        fail(f"{_one_line(captured.getvalue())} (see `{prog} --help`)")


def prepare_learner_process(cfg) -> None:
    """What `pronghorn train` does to its process before `train(cfg)` (benchmarks/interleave.py's training process
    does the same). Call it before torch is imported: OpenMP reads its wait policy when torch loads it."""
    from pronghorn.runtime.tuning import quiet_openmp

    quiet_openmp(cfg, os.cpu_count() or 1)
    from pronghorn.runtime import tune_learner_process

    tune_learner_process()
    # SIGTERM (a scheduler, `kill`) stops training like Ctrl-C: checkpoint, stop actors, exit.
    signal.signal(signal.SIGTERM, lambda signum, frame: (_ for _ in ()).throw(KeyboardInterrupt()))


def cmd_train(argv: Sequence[str]) -> int:
    cfg = parse_config(argv)  # before torch is imported: a bad flag is answered in a fraction of a second
    prepare_learner_process(cfg)  # also before torch

    from pronghorn.checkpoint import CheckpointError
    from pronghorn.config import ConfigError
    from pronghorn.logs import LogWriteError
    from pronghorn.runtime import WorkerError
    from pronghorn.training import NonFiniteError, train

    try:
        result = train(cfg)
    except ConfigError as exc:
        fail(str(exc))
    except (WorkerError, TimeoutError, NonFiniteError, CheckpointError, LogWriteError) as exc:
        fail(f"training stopped: {exc}", code=1)
    ret = "n/a" if math.isnan(result.mean_return) else f"{result.mean_return:.2f}"
    status = "solved" if result.solved else ("interrupted" if result.interrupted else "frame budget spent")
    if result.resumed_from:
        status += f" (resumed from {result.resumed_from})"
    print(
        f"pronghorn: {status} after {result.frames:,} frames, {result.learner_steps:,} learner steps, "
        f"{result.wall_time:.0f} s; mean return of last {min(100, result.episodes)} episodes: {ret}\n"
        f"  logs:       {result.logdir}/metrics.csv, {result.logdir}/episodes.csv (TensorBoard: tensorboard --logdir {result.logdir})\n"
        f"  checkpoint: {result.checkpoint}\n"
        f"  curve:      {result.curve}",
        flush=True,
    )
    return 130 if result.interrupted else 0


def cmd_plot(argv: Sequence[str]) -> int:
    parser = _argparser("pronghorn plot", "Plot episode return against frames; runs sharing a folder name become a mean with a band.")
    parser.add_argument("runs", nargs="+", help="run folders (each with an episodes.csv)")
    parser.add_argument("-o", "--output", default="curves.png", help="PNG file to write")
    parser.add_argument("--x", choices=("frames", "wall"), default="frames", help="x axis: environment frames or wall-clock seconds")
    parser.add_argument("--window", type=int, default=100, help="episodes in the trailing mean")
    parser.add_argument(
        "--reference",
        metavar="CSV",
        help="published curves to draw dashed beside the runs: columns level,label,frames,return (e.g. benchmarks/published/dopamine_atari.csv)",
    )
    args = parser.parse_args(argv)
    from pronghorn.plot import plot_runs  # matplotlib: after the flags are checked

    try:
        print(plot_runs(args.runs, args.output, args.x, args.window, reference=args.reference))
    except (FileNotFoundError, ValueError) as exc:
        fail(str(exc))
    return 0


class _OneLineParser(argparse.ArgumentParser):
    """argparse with its errors as one line and exit 2, like every other input error."""

    def error(self, message: str) -> NoReturn:
        fail(f"{message} (see `{self.prog} --help`)")


def _argparser(prog: str, description: str) -> argparse.ArgumentParser:
    return _OneLineParser(prog=prog, description=description)


def cmd_evaluate(argv: Sequence[str]) -> int:
    import json

    from pronghorn.config import ConfigError

    parser = _argparser("pronghorn evaluate", "Play a trained agent and print a JSON summary per level.")
    parser.add_argument("--logdir", required=True, help="the run folder (its config.json says what to build)")
    parser.add_argument("--checkpoint", help="a checkpoint file; default: the newest usable one in the logdir")
    parser.add_argument("--episodes", type=int, default=30, help="whole games per level")
    parser.add_argument("--greedy", action="store_true", help="take the most likely action instead of sampling")
    parser.add_argument("--video", help="write an MP4 of the first game here")
    parser.add_argument("--seed", type=int, default=10_000, help="environment seed of the first evaluation env")
    args = parser.parse_args(argv)
    from pronghorn.evaluate import evaluate  # torch: after the flags are checked

    try:
        summary = evaluate(args.logdir, args.checkpoint, args.episodes, args.greedy, args.video, args.seed)
    except ConfigError as exc:
        fail(str(exc))
    print(json.dumps(summary, indent=2))
    return 0


def cmd_status(argv: Sequence[str]) -> int:
    parser = _argparser("pronghorn status", "Where a run stands: frames, fps, last checkpoint, recent returns.")
    parser.add_argument("logdir")
    args = parser.parse_args(argv)
    from pronghorn.status import run_status

    try:
        print(run_status(args.logdir))
    except FileNotFoundError as exc:
        fail(str(exc))
    return 0


COMMANDS = {"train": cmd_train, "evaluate": cmd_evaluate, "plot": cmd_plot, "status": cmd_status}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    import faulthandler

    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 <pid>` prints every thread's stack
    # pronghorn's own INFO lines; other libraries only from WARNING up (matplotlib, imported by MinAtar, logs
    # at INFO that it built its font cache, on a fresh machine, beside a refused flag's one-line error).
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("pronghorn").setLevel(logging.INFO)
    if not argv or argv[0] in ("-h", "--help"):
        print(f"{USAGE}\ncommands: {', '.join(COMMANDS)}")
        return 0 if argv else 2
    command = COMMANDS.get(argv[0])
    if command is None:
        fail(f"unknown command {argv[0]!r}: use one of {', '.join(COMMANDS)}")
    return command(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
