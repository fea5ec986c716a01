"""benchmarks/gpu_check.py: the one script a lent GPU runs, checked here on CPU so that it works when it gets there."""

import importlib.util
import json
import os
import signal
import subprocess
import sys

import torch

from tests.helpers import assert_no_leaks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "benchmarks", "gpu_check.py")


def test_gpu_check_measures_the_learner_staging_and_envpool_on_cpu():
    proc = subprocess.run(
        [sys.executable, SCRIPT, "--device", "cpu", "--seconds", "1.5", "--skip-end-to-end"], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)  # stdout is the JSON alone; progress goes to stderr
    assert out["complete"] is True and out["device"] == "cpu"
    assert [row["model"] for row in out["learner"]] == ["shallow", "deep"]
    for row in out["learner"]:
        assert row["step_ms"] > 0 and row["step_with_staging_ms"] > 0 and row["step_ms_bf16"] > 0 and row["updates_per_s"] > 0
        assert row["copy_ms"] == 0.0 and row["copy_hidden"] is None  # on CPU staging copies nothing
    assert out["envpool_raw"]["frames_per_s"] > 0
    assert "end_to_end" not in out
    assert_no_leaks()


def _load_gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_run_that_logs_too_little_is_reported_and_the_others_still_run(monkeypatch, capsys):
    gpu_check = _load_gpu_check()
    monkeypatch.setattr(gpu_check, "learner_and_staging", lambda model, device, seconds: {"model": model})
    monkeypatch.setattr(gpu_check, "envpool_raw", lambda seconds: {"frames_per_s": 1})
    runs = []

    def train_for(flags, seconds, logdir):
        model, inference = flags[flags.index("--model") + 1], flags[flags.index("--inference") + 1]
        runs.append(f"{model}/{inference}")
        print("pronghorn: train", *flags)  # as the real one prints its command line, to stdout
        if model == "deep":
            raise gpu_check.TooLittleLogged("pronghorn logged too little to measure (exit 1):\nTraceback\nRuntimeError: CUDA out of memory")
        return [{"frames": str(1000 * i), "time": str(i), "policy_lag_mean": "1.5"} for i in range(8)]

    monkeypatch.setattr(gpu_check, "train_for", train_for)
    monkeypatch.setattr(sys, "argv", ["gpu_check.py", "--device", "cpu", "--seconds", "1"])
    handler, threads = signal.getsignal(signal.SIGTERM), torch.get_num_threads()
    try:
        code = gpu_check.main()
    finally:  # main() installs its SIGTERM handler and sets torch's threads: not for the rest of the suite
        signal.signal(signal.SIGTERM, handler)
        torch.set_num_threads(threads)
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["complete"] is True
    assert runs == ["shallow/actor", "shallow/central", "deep/actor", "deep/central"]
    assert out["end_to_end"]["shallow/central"] == {"frames_per_s": 1000, "policy_lag": 1.5, "actors": max(2, (os.cpu_count() or 1) - 2)}
    failed = out["end_to_end"]["deep/actor"]
    assert failed["error"] == "pronghorn logged too little to measure (exit 1):"
    assert failed["log_tail"] == ["Traceback", "RuntimeError: CUDA out of memory"]

    monkeypatch.setattr(sys, "argv", ["gpu_check.py", "--device", "cpu", "--end-to-end", "shallow/actor"])
    runs.clear()
    try:
        assert gpu_check.main() == 0
    finally:
        signal.signal(signal.SIGTERM, handler)
        torch.set_num_threads(threads)
    assert runs == ["shallow/actor"] and list(json.loads(capsys.readouterr().out)["end_to_end"]) == ["shallow/actor"]
