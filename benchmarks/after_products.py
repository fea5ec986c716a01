"""What slows an actor's env step inside its loop: the env step after each part of the answer, by SIMD width.

The component limit (`throughput.py`) prices the env step and the answer each timed back to back. Inside the
actor's loop, where the two alternate, the env step runs slower (`actor_loop.py`). This times one env batch's
step right after each of the following, in one process pinned to one CPU, in rounds (medians):
  nothing        the step back to back
  answer         the actor's whole answer (`LocalPolicy.answer`)
  products       the MLP's three matrix products alone (the answer's shapes, numpy's BLAS)
  relus          its two ReLU passes (`np.maximum` over [E, 65] and [E, 64])
  sampler        the action sampler over [2, E] logits
  sweep 400KB    an in-place add over 400 KB of float64 (memory the step's own data must come back from)
  python loop    3,000 additions in pure Python
and then the loop itself (env step, answer, slot-row writes) per step. Each variant runs in its own process
with numpy's and OpenBLAS's AVX-512 kernels as installed, or with either or both limited to AVX2 through
their environment variables (`NPY_DISABLE_CPU_FEATURES`, `OPENBLAS_CORETYPE=Haswell`), the processes
alternated --rounds times. Each cell: the median over those processes of each one's median in µs.

  .venv/bin/python benchmarks/after_products.py                 # CartPole, 512 envs
  .venv/bin/python benchmarks/after_products.py --envs 16 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

# numpy and OpenBLAS read the variables below when they load, so each variant is a process of its own started
# with them set; imports at the top of this file happen in that process, after they are set.
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from actor_loop import _InitialWeights  # benchmarks/ is on the path: this script's own folder

from pronghorn import Config
from pronghorn.acting import sample_actions_numpy
from pronghorn.actor import LocalPolicy, _Step, _write_row
from pronghorn.config import ConfigError
from pronghorn.defaults import resolve_torso
from pronghorn.envs import make_batched, probe
from pronghorn.records import Unroll, unroll_spec, zeros_unroll
from pronghorn.runtime.tuning import limit_threads

VARIANTS = {
    "as installed": {},
    "numpy AVX2": {"NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR"},
    "OpenBLAS AVX2": {"OPENBLAS_CORETYPE": "Haswell"},
    "both AVX2": {"NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR", "OPENBLAS_CORETYPE": "Haswell"},
}
BETWEEN = ("nothing", "answer", "products", "relus", "sampler", "sweep 400KB", "python loop")


def unsupported(env_id: str) -> str | None:
    """Why `env_id` cannot be timed here (its answer is not the MLP's numpy step), or None."""
    try:
        cfg = Config(env=env_id)
        shape = probe(env_id, cfg).obs_shape
    except (ConfigError, ValueError) as error:
        return f"{error}"
    if resolve_torso(cfg.model, shape) != "mlp":
        return f"its observations {shape} are not vectors, so its actors do not answer with the MLP's numpy step; use actor_loop.py for it"
    return None


def child(env_id: str, envs: int, cpu: int, calls: int) -> dict[str, float]:
    """Run in a child process: the medians, µs, of the env step after each of BETWEEN, each part alone, and the loop."""
    os.sched_setaffinity(0, {cpu})
    limit_threads(1)  # as an actor process runs
    cfg = Config(env=env_id, num_actors=1, envs_per_actor=envs, batch_size=envs)
    spec = probe(cfg.env, cfg)
    cfg = cfg.for_observations(spec.obs_shape)
    policy = LocalPolicy(0, cfg, spec, _InitialWeights())
    env = make_batched([env_id] * envs, list(range(envs)), cfg)
    out = env.reset()
    zeros = np.zeros(envs, np.int64)
    slot = Unroll._make(t.numpy() for t in zeros_unroll(unroll_spec(20, envs, spec.obs_shape, spec.obs_dtype, spec.num_actions, policy.agent.core_size)))
    # The answer's parts on arrays of its shapes (acting.py's numpy MLP: obs and a ones column, the first hidden
    # layer's 64 and a ones column, the last hidden layer's 64 without one, both heads).
    hidden = policy.agent.torso.net[0].out_features
    x = np.ones((envs, spec.obs_shape[0] + 1), np.float32)
    w_in, w_hidden, w_heads = (np.ones(s, np.float32) for s in ((x.shape[1], hidden + 1), (hidden + 1, hidden), (hidden, spec.num_actions + 1)))
    h1, h2, heads = (np.zeros(s, np.float32) for s in ((envs, hidden + 1), (envs, hidden), (envs, spec.num_actions + 1)))
    floor1, floor2 = np.zeros_like(h1), np.zeros_like(h2)  # the ReLUs' zeros, as large as their outputs (as in acting.py)
    logits_t, uniform = np.zeros((spec.num_actions, envs), np.float32), np.full((envs, 1), 0.5, np.float32)
    sweep = np.zeros(400_000 // 8)

    def products() -> None:
        np.matmul(x, w_in, out=h1)
        np.matmul(h1, w_hidden, out=h2)
        np.matmul(h2, w_heads, out=heads)

    def python_loop() -> None:
        total = 0
        for i in range(3000):
            total += i

    work = {
        "nothing": lambda: None,
        "answer": lambda: policy.answer(out, zeros),
        "products": products,
        "relus": lambda: (np.maximum(h1, floor1, out=h1), np.maximum(h2, floor2, out=h2)),
        "sampler": lambda: sample_actions_numpy(logits_t.T, uniform),
        "sweep 400KB": lambda: np.add(sweep, 1.0, out=sweep),
        "python loop": python_loop,
    }
    after: dict[str, list[float]] = {name: [] for name in BETWEEN}
    for _ in range(12):  # rounds of every kind in turn, so that a slow stretch of the machine hits each alike
        for name in BETWEEN:
            times = []
            for _ in range(calls):
                work[name]()
                start = time.perf_counter()
                env.step(zeros)
                times.append(time.perf_counter() - start)
            after[name].append(float(np.median(times)))
    result = {f"step after {name}": float(np.median(t)) * 1e6 for name, t in after.items()}
    for name in ("answer", "products"):
        start = time.perf_counter()
        for _ in range(300):
            work[name]()
        result[f"{name} itself"] = (time.perf_counter() - start) / 300 * 1e6
    loop = []
    reply = policy.answer(out, zeros)
    for _ in range(20):
        start = time.perf_counter()
        for t in range(1, 21):  # one unroll's rows, as run_actor writes them
            action = reply.action
            env_out = env.step(action)
            reply = policy.answer(env_out, action)
            _write_row(slot, t, _Step(env_out, action, reply), reply.truncation_value)
        loop.append((time.perf_counter() - start) / 20)
    result["loop per step"] = float(np.median(loop)) * 1e6
    env.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="CartPole-v1", help="an env whose acting step is the MLP's numpy answer (vector observations)")
    parser.add_argument("--envs", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=4, help="processes per variant, alternated")
    parser.add_argument("--cpu", type=int, default=min(1, (os.cpu_count() or 1) - 1), help="the CPU each process is pinned to")
    parser.add_argument("--calls", type=int, default=150, help="env steps per timing (12 timings of each kind per process)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.env, args.envs, args.cpu, args.calls)))
        return
    refusal = unsupported(args.env)
    if refusal:
        print(f"after_products.py: --env {args.env}: {refusal}", file=sys.stderr)
        sys.exit(2)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in VARIANTS}
    flags = {"--env": args.env, "--envs": args.envs, "--cpu": args.cpu, "--calls": args.calls}
    command = [sys.executable, os.path.abspath(__file__), "--child", *(str(part) for pair in flags.items() for part in pair)]
    for rnd in range(args.rounds):
        for name, extra in VARIANTS.items():
            done = subprocess.run(command, env={**os.environ, **extra}, capture_output=True, text=True, check=True)
            runs[name].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(f"round {rnd + 1}/{args.rounds}: {name} done", file=sys.stderr, flush=True)
    keys = list(runs["as installed"][0])
    print(f"{args.env}, {args.envs} envs, µs (median of {args.rounds} processes per variant, each its own medians)")
    print("| | " + " | ".join(VARIANTS) + " |")
    print("|---|" + "---|" * len(VARIANTS))
    for key in keys:
        print(f"| {key} | " + " | ".join(f"{np.median([r[key] for r in runs[name]]):.1f}" for name in VARIANTS) + " |")


if __name__ == "__main__":
    main()
