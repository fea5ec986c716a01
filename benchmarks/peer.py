"""pronghorn beside Sample Factory 2.x (APPO), on the same cores for the same wall time.

Sample Factory is installed by this script into its own venv under benchmarks/.peer-venv (git-ignored;
never a pronghorn dependency), with the same CPU build of torch. Each setting runs Sample Factory for
--seconds, then pronghorn for the same wall time, and prints both training frames/s (steady state:
the first quarter of each run is skipped), the ratio, and each one's mean return of the last 100 games at
the frames Sample Factory reached (pronghorn's from its episodes.csv, after every game). With --seeds N each
system runs N times (--seed 0..N-1) and the figures are means over the seeds.

  .venv/bin/python benchmarks/peer.py                       # CartPole and Pong, 120 s each per system
  .venv/bin/python benchmarks/peer.py --only cartpole --seconds 60
  .venv/bin/python benchmarks/peer.py --only cartpole --variant defaults --seeds 3   # three seeds of each system
  .venv/bin/python benchmarks/peer.py --readme README.md     # both, and rewrites the README's peer table
  .venv/bin/python benchmarks/peer.py --only pong --peer-only --peer-frames 1867776 --seconds 3600 --at 933888
                                                             # one more Sample Factory run, to 1.87M frames

Settings (same network on both sides):
  cartpole  CartPole-v1, MLP 2 x 64, no RNN; 2 workers/actors; pronghorn with its defaults and with
            32 envs per actor and batch 32, 64 and 128, and 128 and 256 (the learning rate then decays
            over as many updates as the defaults', by default).
  pong      Pong, the Nature CNN (pronghorn --model nature; Sample Factory convnet_atari), no RNN,
            2 workers/actors x 8 envs (Sample Factory: 8 minibatches of 256 per rollout of 2,048 steps, as
            its sample/train ratio must be whole). Sample Factory plays PongNoFrameskip-v4 with its own wrappers,
            pronghorn ALE/Pong-v5 through envpool with --sticky-actions 0 (v4 has no sticky actions), with
            its defaults, with --learner-precision bf16, and with unrolls of 40 steps from 2 x 4 envs trained on
            twice with PPO's clip (--unroll-length 40 --envs-per-actor 4 --batch-size 4 --updates-per-batch 2
            --ppo-clip 0.2), and the same on unrolls of 80 steps from 2 x 2 envs: the settings with four seeds'
            return per frame in docs/pong_beside_sample_factory.md.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from readme_table import write_table  # noqa: E402
from timed_run import steady_fps, train_for  # noqa: E402

from pronghorn.plot import read_episodes, smooth  # noqa: E402

PINS = ["torch==2.13.0", "sample-factory==2.1.1", "ale-py<0.10"]  # ale-py 0.9 is the last for gymnasium 0.29

# pronghorn's side of the Pong comparison: the same network, envs and actions as Sample Factory's.
_PONG = ["--env", "ALE/Pong-v5", "--env-backend", "envpool", "--model", "nature", "--sticky-actions", "0"]
_CLIPPED = ["--updates-per-batch", "2", "--ppo-clip", "0.2"]

SETTINGS = {
    "cartpole": dict(
        sf=["-m", "sf_examples.train_gym_env", "--env", "CartPole-v1", "--encoder_mlp_layers", "64", "64", "--num_envs_per_worker", "16"],
        pronghorn={
            "defaults": ["--env", "CartPole-v1"],
            "E=32 B=32": ["--env", "CartPole-v1", "--envs-per-actor", "32", "--batch-size", "32"],
            "E=64 B=128": ["--env", "CartPole-v1", "--envs-per-actor", "64", "--batch-size", "128"],
            "E=128 B=256": ["--env", "CartPole-v1", "--envs-per-actor", "128", "--batch-size", "256"],
        },
    ),
    "pong": dict(
        sf=[
            "-m",
            "sf_examples.atari.train_atari",
            "--env",
            "atari_pong",
            "--encoder_conv_architecture",
            "convnet_atari",
            "--num_envs_per_worker",
            "8",
            "--num_batches_per_epoch",
            "8",
        ],
        pronghorn={
            "defaults": _PONG,
            "bf16 learner": [*_PONG, "--learner-precision", "bf16"],
            # Ahead of the defaults at every count to 1.2M frames in four seeds of four (docs/pong_beside_sample_factory.md): unrolls of 40 steps,
            # 4 per batch (the defaults' 160 steps per update), each batch trained on twice with PPO's clip of 0.2.
            "T=40 E=4 B=4, 2 clipped passes": [*_PONG, "--unroll-length", "40", "--envs-per-actor", "4", "--batch-size", "4", *_CLIPPED],
            # The same 160 steps per update as 80-step unrolls from 2 envs per actor: ahead of 40 steps from 934K frames on.
            "T=80 E=2 B=2, 2 clipped passes": [*_PONG, "--unroll-length", "80", "--envs-per-actor", "2", "--batch-size", "2", *_CLIPPED],
        },
    ),
}


def ensure_venv(path: str) -> str:
    python = os.path.join(path, "bin", "python")
    if not os.path.exists(python):
        print(f"creating {path} and installing {' '.join(PINS)} (once; about a minute)", flush=True)
        subprocess.run([sys.executable, "-m", "venv", path], check=True)
        subprocess.run([python, "-m", "pip", "install", "-q", *PINS], check=True)
        # ale-py 0.9 registers the Atari ids only when imported, and Sample Factory's Atari example never
        # imports it: a .pth line does, in every process of this venv (Sample Factory's workers included).
        site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True)
        with open(os.path.join(site.stdout.strip(), "pronghorn_peer_ale.pth"), "w") as f:
            f.write("import ale_py\n")
    return python


_SF_LINE = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+)\].*Total num frames: (\d+)")
_SF_REWARD = re.compile(r"Avg episode reward: \[\(0, '(-?[\d.]+)'\)\]")


def _remove_leftovers(before: set[str]) -> None:
    """What a killed Sample Factory leaves in /dev/shm: multiprocessing's semaphores and torch's shared tensors.

    Only entries of those two kinds that appeared while it ran are removed (run this benchmark on its own)."""
    if not os.path.isdir("/dev/shm"):
        return
    left = sorted(n for n in set(os.listdir("/dev/shm")) - before if n.startswith(("sem.mp-", "torch_")))
    for name in left:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join("/dev/shm", name))
    if left:
        print(f"  removed {len(left)} shared-memory entries Sample Factory left in /dev/shm", flush=True)


def _frames_logged(log_path: str) -> int:
    with open(log_path) as f:
        found = _SF_LINE.findall(f.read())
    return int(found[-1][1]) if found else 0


def _wait_for(proc: subprocess.Popen, log_path: str, seconds: float, stop_frames: int | None) -> None:
    """Waits until Sample Factory exits, `seconds` pass, or (with `stop_frames`) its log reports that many frames.

    Raises TimeoutExpired when it is still running, so that the caller stops it."""
    if stop_frames is None:
        proc.wait(timeout=seconds)
        return
    # Stopping at a frame count, not by passing --train_for_env_steps: its learning rate decays linearly over
    # that count, so a shorter one would change the run being compared.
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
            return
        if _frames_logged(log_path) >= stop_frames:
            break
    raise subprocess.TimeoutExpired(proc.args, seconds)


def run_sample_factory(python: str, args: list[str], seconds: float, workdir: str, stop_frames: int | None = None) -> dict:
    cmd = [python, *args, "--experiment", "peer", "--train_dir", workdir, "--num_workers", "2", "--use_rnn", "False"]
    cmd += ["--device", "cpu", "--with_wandb", "False"]
    # Sample Factory "decorrelates" by stepping its k-th env k rollouts at random before sampling, without
    # adding those steps' rewards to the game's return: the first game of every env then reports only the
    # part played after sampling began (a Pong game cut to its last points scores near 0, not -21), and at
    # Pong's 82K frames most reported games are such pieces. Off, every reported return is a whole game.
    cmd += ["--decorrelate_envs_on_one_worker", "False"]
    print("sample factory:", " ".join(cmd[1:]), flush=True)
    log_path = os.path.join(workdir, "stdout.txt")
    shm_before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    with open(log_path, "w") as log:
        # Its own session: Sample Factory's workers go with it. Sample Factory 2.1.1 never stops at
        # --train_for_seconds (its runner never adds to the seconds it compares), so this stops it after the
        # same wall time as pronghorn gets: Ctrl-C to its main process (the workers ignore SIGINT and are
        # stopped by it), and whatever of its session is still there half a minute later is killed.
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            _wait_for(proc, log_path, seconds, stop_frames)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        finally:
            try:  # workers of a hung shutdown must not run into the next measurement
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    _remove_leftovers(shm_before)
    with open(log_path) as f:
        output = f.read()
    points, rewards = [], []  # (time, frames), (frames, mean reward)
    for line in output.splitlines():
        m = _SF_LINE.search(line)
        if m:
            stamp = time.mktime(time.strptime(m.group(1).split(",")[0], "%Y-%m-%d %H:%M:%S"))
            points.append((stamp, int(m.group(2))))
        r = _SF_REWARD.search(line)
        if r and points:
            rewards.append((points[-1][1], float(r.group(1))))
    if len(points) < 4:
        raise SystemExit(f"Sample Factory printed too little to measure (exit {proc.returncode}):\n{output[-3000:]}")
    steady = points[len(points) // 4 :]
    fps = (steady[-1][1] - steady[0][1]) / max(1e-9, steady[-1][0] - steady[0][0])
    return {"fps": fps, "frames": points[-1][1], "return": rewards[-1][1] if rewards else float("nan"), "curve": rewards}


def return_at(curve: list[tuple[float, float]], frames: float) -> float:
    """The last (frames, mean return) point at or before `frames` (NaN if none)."""
    before = [r for f, r in curve if f <= frames]
    return before[-1] if before else float("nan")


def episode_curve(logdir: str) -> list[tuple[float, float]]:
    """(frames, mean return of the last 100 games) after each game in the run's episodes.csv.

    Read per game, not from the metrics rows: those come every --log-interval seconds, which at CartPole's
    200K frames/s is 400K frames apart, so "the last row at or before 510K frames" could be the mean at
    200K. Sample Factory's own mean (its reports, 5 s apart) is over its last 100 games as well."""
    games = read_episodes(logdir)
    means = smooth([float(game["episode_return"]) for game in games], 100)  # the console's mean of the last 100
    return [(float(game["frames"]), mean) for game, mean in zip(games, means)]  # frames: the learner's count as it took the game


def run_pronghorn(args: list[str], seconds: float, workdir: str) -> dict:
    rows = train_for(args, seconds, workdir)
    curve = episode_curve(workdir)
    return {"fps": steady_fps(rows), "frames": int(float(rows[-1]["frames"])), "return": curve[-1][1] if curve else float("nan"), "curve": curve}


def seed_flag(flag: str, seed: int | None) -> list[str]:
    return [] if seed is None else [flag, str(seed)]


def mean_at(runs: list[dict], frames: float) -> float:
    """The runs' mean return at `frames` (each run's last point at or before it), averaged over the runs."""
    return sum(return_at(run["curve"], frames) for run in runs) / len(runs)


def combined(runs: list[dict], at_frames: int | None = None) -> dict:
    """One system's runs (one per seed) as one: mean frames/s, least frames reached, mean returns (by the end, and at
    at_frames: by default the least frames reached, which every run got to)."""
    frames = min(run["frames"] for run in runs)
    return {
        "fps": sum(run["fps"] for run in runs) / len(runs),
        "frames": frames,
        "return": sum(run["return"] for run in runs) / len(runs),
        "return_at": mean_at(runs, frames if at_frames is None else at_frames),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=sorted(SETTINGS), action="append")
    parser.add_argument("--seconds", type=float, default=120.0, help="wall time each system trains per setting")
    parser.add_argument("--venv", default=os.path.join(HERE, ".peer-venv"))
    parser.add_argument("--readme", help="write the table between the peer markers of this README (every setting: not with --only)")
    parser.add_argument("--peer-only", action="store_true", help="run Sample Factory alone (another run of it, for its spread between runs)")
    parser.add_argument("--peer-frames", type=int, help="stop Sample Factory once it reports this many frames (--seconds still bounds it)")
    parser.add_argument("--at", type=int, action="append", help="also print both mean returns at this frame count (repeat it)")
    parser.add_argument("--seeds", type=int, help="run each system with seeds 0..N-1 and print means over them (default: one run each, its own default seed)")
    parser.add_argument("--variant", action="append", help="run only this pronghorn setting of each setting (repeat it), e.g. defaults")
    args = parser.parse_args()
    if args.peer_frames is not None and args.peer_frames <= 0:
        parser.error(f"--peer-frames must be a positive frame count, got {args.peer_frames}: pass e.g. 1867776")
    if args.seeds is not None and args.seeds <= 0:
        parser.error(f"--seeds must be a positive number of runs, got {args.seeds}: pass e.g. 3")
    known = {variant for setting in SETTINGS.values() for variant in setting["pronghorn"]}
    for variant in args.variant or []:
        if variant not in known:
            parser.error(f"--variant {variant!r} is none of pronghorn's settings here: pass one of {', '.join(sorted(known))}")
    if args.readme and (args.only or args.peer_only or args.variant):
        parser.error("--readme rewrites the whole peer table: run every setting and both systems (drop --only, --variant and --peer-only)")
    python = ensure_venv(args.venv)
    lines = []
    table = [
        "| setting | Sample Factory fps | pronghorn fps | ratio | return at Sample Factory's last frame count (SF / pronghorn) |",
        "|---|---|---|---|---|",
    ]
    seeds: list[int | None] = list(range(args.seeds)) if args.seeds else [None]  # None: each system's own default seed
    for name in args.only or list(SETTINGS):
        setting = SETTINGS[name]
        sfs = []
        for seed in seeds:
            with tempfile.TemporaryDirectory() as sf_dir:
                sfs.append(run_sample_factory(python, [*setting["sf"], *seed_flag("--seed", seed)], args.seconds, sf_dir, args.peer_frames))
            print(f"  sample factory (seed {seed}): {sfs[-1]['fps']:,.0f} fps, {sfs[-1]['frames']:,} frames, return {sfs[-1]['return']:.2f}", flush=True)
        sf = combined(sfs)  # its return at the frames every seed reached
        if args.peer_only:  # Sample Factory's curve alone (otherwise --at is printed beside pronghorn's, below)
            for at in args.at or []:
                print(f"    at {at:12,} frames: sample factory {mean_at(sfs, at):7.2f}", flush=True)
            continue
        for variant, flags in setting["pronghorn"].items():
            if args.variant and variant not in args.variant:
                continue
            phs = []
            for seed in seeds:
                with tempfile.TemporaryDirectory() as ph_dir:
                    phs.append(run_pronghorn([*flags, *seed_flag("--seed", seed)], args.seconds, os.path.join(ph_dir, "run")))
            ph = combined(phs, sf["frames"])
            runs = f" (mean of {len(seeds)} seeds)" if len(seeds) > 1 else ""
            line = (
                f"{name:9s} | sample factory {sf['fps']:9,.0f} fps, {sf['frames']:>10,} frames, return {sf['return_at']:8.2f}"
                f" | pronghorn ({variant}) {ph['fps']:9,.0f} fps, {ph['frames']:>10,} frames, return {ph['return']:8.2f}"
                f" ({ph['return_at']:.2f} at {sf['frames']:,} frames) | fps ratio {ph['fps'] / sf['fps']:.1f}x{runs}"
            )
            print(line, flush=True)
            # Both mean returns along the way, at fractions of the frames Sample Factory reached and at --at.
            for at in sorted([share * sf["frames"] for share in (0.25, 0.5, 0.75, 1.0)] + (args.at or [])):
                print(f"    at {at:12,.0f} frames: sample factory {mean_at(sfs, at):7.2f}, pronghorn {mean_at(phs, at):7.2f}", flush=True)
            lines.append(line)
            table.append(
                f"| {name}, pronghorn {variant} | {sf['fps']:,.0f} | {ph['fps']:,.0f} | {ph['fps'] / sf['fps']:.1f}× |"
                f" {sf['return_at']:.2f} / {ph['return_at']:.2f} at {sf['frames']:,} frames ({ph['return']:.2f} by the end, {ph['frames']:,} frames) |"
            )
    if lines:  # with --peer-only there is no side-by-side to sum up
        print(f"\n{args.seconds:.0f} s each on {os.cpu_count()} cores; fps = training frames/s in steady state (first quarter skipped)")
    for line in lines:
        print(line)
    if args.readme:
        seeded = f", means over seeds 0-{len(seeds) - 1} of each system" if len(seeds) > 1 else ""
        write_table(args.readme, "peer", "benchmarks/peer.py", table, f", {args.seconds:.0f} s each system per setting{seeded}")


if __name__ == "__main__":
    main()
