"""The GPU path, measured: staging overlap, learner updates/s, end-to-end frames/s, raw envpool frames/s.

Prints one JSON object. Made for a machine with one GPU and many cores, where it takes under 5 minutes
(`benchmarks/gpu_check.sh`); it runs on CPU too (`--device cpu`, shorter with --seconds), where the
staging copy is no copy at all and the overlap is reported as null.

  staging         a batch's host-to-device copy alone (copy_ms), one learner update on a batch already on
                  the device (step_ms), and updates fed through Staging, which copies batch k+1 on a side
                  stream while batch k trains (step_with_staging_ms): copy_hidden = (step + copy -
                  with_staging) / copy, 1.0 when the copy is hidden completely.
  learner         updates/s and frames/s of the learner alone, shallow and deep (Pong batch: the image defaults, 8 x T=20 x 4x84x84),
                  and step_ms_bf16: the same update with --learner-precision bf16.
  end_to_end      training frames/s of `pronghorn train` on Pong (envpool), shallow and deep, with actor and
                  central inference, actors = cores - 2.
  envpool_raw     envpool Pong stepped with random actions on every core (the environment's own limit).

The JSON is printed however the script ends (complete: false if it was stopped or failed part-way). An
end-to-end run that logs too little to measure is reported with its error and log tail, the others still run,
and the exit status is then 1; `--end-to-end shallow/actor` (repeatable) reruns only the runs named.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import queue
import signal
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))

from timed_run import TooLittleLogged, steady_fps, train_for

from pronghorn.config import Config
from pronghorn.learner import Learner
from pronghorn.models import build_agent
from pronghorn.records import Unroll, unroll_spec, zeros_unroll
from pronghorn.staging import Staging

OBS = (4, 84, 84)


class _Recycle:
    """Full slots forever: every slot handed back is full again at once."""

    def __init__(self, n: int):
        self.q: queue.Queue[int] = queue.Queue()
        for i in range(n):
            self.q.put(i)

    def get(self, timeout: float) -> int:
        return self.q.get(timeout=timeout)

    def put(self, index: int) -> None:
        self.q.put(index)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def learner_and_staging(model: str, device: torch.device, seconds: float) -> dict:
    cfg = Config(env="ALE/Pong-v5", model=model, env_backend="envpool").for_observations(OBS)
    T, E = cfg.unroll_length, cfg.envs
    agent = build_agent(cfg, OBS, 6).to(device)
    learner = Learner(cfg, agent, 4)
    layout = unroll_spec(T, E, OBS, np.uint8, 6, agent.core_size)
    slots = [zeros_unroll(layout) for _ in range(2 * cfg.batch_slots + 2)]
    for slot in slots:
        slot.obs.random_(0, 255)
        slot.action.random_(0, 6)
    host = Unroll(*(torch.cat([s[k] for s in slots[: cfg.batch_slots]], dim=1) for k in range(len(Unroll._fields))))
    on_device = Unroll(*(t.to(device) for t in host))

    def timed(fn, min_seconds: float) -> float:
        fn()
        _sync(device)
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < min_seconds:
            fn()
            n += 1
        _sync(device)
        return (time.perf_counter() - start) / n

    pinned = Unroll(*(t.pin_memory() for t in host)) if device.type == "cuda" else host
    copy_s = timed(lambda: [t.to(device, non_blocking=True) for t in pinned], seconds / 3) if device.type == "cuda" else 0.0
    step_s = timed(lambda: learner.step(on_device), seconds / 3)
    source = _Recycle(len(slots))
    staging = Staging(slots, source, source, cfg.batch_slots, device, 60.0, lambda: None, lambda: "recycled slots")
    try:
        staged_s = timed(lambda: learner.step(staging.next().data), seconds / 3)
    finally:
        staging.close()
    # The same update with the products in bfloat16 (--learner-precision bf16; a fresh copy of the agent).
    bf16 = Learner(dataclasses.replace(cfg, learner_precision="bf16"), build_agent(cfg, OBS, 6).to(device), 4)
    bf16_s = timed(lambda: bf16.step(on_device), seconds / 3)
    frames = T * cfg.batch_size * 4
    return {
        "model": model,
        "batch": f"{cfg.batch_size} x T={T}",
        "copy_ms": round(1000 * copy_s, 3),
        "step_ms": round(1000 * step_s, 3),
        "step_with_staging_ms": round(1000 * staged_s, 3),
        "copy_hidden": round((step_s + copy_s - staged_s) / copy_s, 3) if copy_s > 0 else None,
        "updates_per_s": round(1 / step_s, 1),
        "step_ms_bf16": round(1000 * bf16_s, 3),
        "learner_frames_per_s": round(frames / step_s),
    }


def envpool_raw(seconds: float) -> dict:
    import envpool

    cores = os.cpu_count() or 1
    n = 4 * cores
    pool = envpool.make("Pong-v5", env_type="gymnasium", num_envs=n, batch_size=n, num_threads=cores, frame_skip=4, stack_num=4, img_height=84, img_width=84)
    pool.reset()
    rng = np.random.default_rng(0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        pool.step(rng.integers(0, 6, n).astype(np.int32))
        steps += n
    pool.close()
    return {"envs": n, "threads": cores, "frames_per_s": round(4 * steps / (time.perf_counter() - start))}


PAIRS = ("shallow/actor", "shallow/central", "deep/actor", "deep/central")  # model/inference of the end-to-end runs


def _stop_on_sigterm(signum: int, frame: object) -> None:
    # gpu_check.sh's `timeout` sends SIGTERM. Unwinding stops the training run in progress (train_for's
    # finally) and prints what was measured so far, where the default action would lose both.
    raise SystemExit(128 + signum)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seconds", type=float, default=30.0, help="wall time of each end-to-end run (the learner timings take a third of it each)")
    parser.add_argument("--skip-end-to-end", action="store_true")
    parser.add_argument("--end-to-end", action="append", choices=PAIRS, help="only these end-to-end runs (repeatable; default all four)")
    args = parser.parse_args()
    if args.seconds <= 0:
        parser.error(f"--seconds must be positive, got {args.seconds:g}: try the default, 30")
    signal.signal(signal.SIGTERM, _stop_on_sigterm)
    device = torch.device(args.device)
    torch.set_num_threads(2)
    cores = os.cpu_count() or 1
    out: dict = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu", "cores": cores, "torch": torch.__version__}
    out["complete"] = False  # until every part asked for has run: the JSON is printed however the script ends
    failed = False
    try:
        out["learner"] = []
        for model in ("shallow", "deep"):
            out["learner"].append(learner_and_staging(model, device, min(args.seconds, 15.0)))
            print(f"learner {model}: {out['learner'][-1]}", file=sys.stderr, flush=True)
        out["envpool_raw"] = envpool_raw(min(args.seconds, 10.0))
        print(f"envpool_raw: {out['envpool_raw']}", file=sys.stderr, flush=True)
        if not args.skip_end_to_end:
            actors = max(2, cores - 2)
            out["end_to_end"] = {}
            for pair in args.end_to_end or PAIRS:
                model, inference = pair.split("/")
                flags = ["--env", "ALE/Pong-v5", "--env-backend", "envpool", "--model", model, "--inference", inference]
                flags += ["--device", args.device, "--num-actors", str(actors)]
                with tempfile.TemporaryDirectory() as logdir:
                    try:
                        with contextlib.redirect_stdout(sys.stderr):  # its command line: stdout is the JSON alone
                            rows = train_for(flags, args.seconds, os.path.join(logdir, "run"))
                    except TooLittleLogged as exc:  # one short or failed run must not cost the others' figures
                        failed = True
                        message = str(exc).splitlines()
                        entry: dict = {"error": message[0], "log_tail": message[1:][-5:], "actors": actors}
                    else:
                        entry = {"frames_per_s": round(steady_fps(rows)), "policy_lag": round(float(rows[-1]["policy_lag_mean"]), 2), "actors": actors}
                out["end_to_end"][pair] = entry
                print(f"{pair}: {entry}", file=sys.stderr, flush=True)
        out["complete"] = True
    finally:
        print(json.dumps(out, indent=2), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
