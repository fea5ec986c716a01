"""benchmarks/gpu_check.py: the one script a lent GPU runs, checked here on CPU so that it works when it gets there."""

import json
import os
import signal
import subprocess
import sys
import zipfile

import torch

from tests.helpers import assert_no_leaks, load_benchmark

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


def _main(gpu_check, monkeypatch, *argv: str) -> int:
    """gpu_check.main() with these flags, in this process; its SIGTERM handler and torch's threads put back after."""
    monkeypatch.setattr(sys, "argv", ["gpu_check.py", *argv])
    handler, threads = signal.getsignal(signal.SIGTERM), torch.get_num_threads()
    try:
        return gpu_check.main()
    finally:  # not for the rest of the suite
        signal.signal(signal.SIGTERM, handler)
        torch.set_num_threads(threads)


def test_a_run_that_logs_too_little_is_reported_and_the_others_still_run(monkeypatch, capsys):
    gpu_check = load_benchmark("gpu_check")
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
    code = _main(gpu_check, monkeypatch, "--device", "cpu", "--seconds", "1")
    out = json.loads(capsys.readouterr().out)
    assert code == 1 and out["complete"] is True
    assert runs == ["shallow/actor", "shallow/central", "deep/actor", "deep/central"]
    assert out["end_to_end"]["shallow/central"] == {"frames_per_s": 1000, "policy_lag": 1.5, "actors": max(2, (os.cpu_count() or 1) - 2)}
    failed = out["end_to_end"]["deep/actor"]
    assert failed["error"] == "pronghorn logged too little to measure (exit 1):"
    assert failed["log_tail"] == ["Traceback", "RuntimeError: CUDA out of memory"]

    runs.clear()
    assert _main(gpu_check, monkeypatch, "--device", "cpu", "--end-to-end", "shallow/actor") == 0
    assert runs == ["shallow/actor"] and list(json.loads(capsys.readouterr().out)["end_to_end"]) == ["shallow/actor"]


def _fake_envpool_wheel(path):
    """A wheel laid out as envpool's: entry.py registers every family, each family's folder holds its module."""
    files = {
        "envpool/__init__.py": "import envpool.entry\n",
        "envpool/entry.py": '"""Entry."""\n\nimport envpool.atari.registration  # noqa: F401\nimport envpool.box2d.registration  # noqa: F401\n'
        "import envpool.classic_control.registration  # noqa: F401\nimport envpool.mujoco.dmc.registration  # noqa: F401\n",
        "envpool/python/api.py": "API = 1\n",
        "envpool/atari/__init__.py": "",
        "envpool/atari/registration.py": "ATARI = 1\n",
        "envpool/atari/atari_envpool.so": "\0" * 64,
        "envpool/classic_control/__init__.py": "",
        "envpool/classic_control/registration.py": "CLASSIC = 1\n",
        "envpool/box2d/__init__.py": "from .box2d_envpool import X\n",
        "envpool/box2d/registration.py": "BOX2D = 1\n",
        "envpool/box2d/box2d_envpool.so": "\0" * 4096,
        "envpool/mujoco/dmc/registration.py": "DMC = 1\n",
        "envpool.libs/libEGL-1.so.1": "\0" * 4096,
        "envpool-9.9.dist-info/METADATA": "Metadata-Version: 2.1\nName: envpool\nVersion: 9.9\n",
        "envpool-9.9.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        "envpool-9.9.dist-info/RECORD": "",
    }
    with zipfile.ZipFile(path, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)


def test_the_gpu_kit_trims_envpool_to_atari_and_classic_control_and_pip_installs_it(tmp_path):
    gpu_kit = load_benchmark("gpu_kit")
    wheel = tmp_path / "envpool-9.9-py3-none-any.whl"
    _fake_envpool_wheel(wheel)
    before, after = gpu_kit.trim(str(wheel))
    assert after < before
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        entry = z.read("envpool/entry.py").decode()
        record = z.read("envpool-9.9.dist-info/RECORD").decode().splitlines()
    assert {"envpool/atari/atari_envpool.so", "envpool/classic_control/registration.py", "envpool/python/api.py"} <= names
    assert not any(n.startswith(("envpool/box2d/", "envpool/mujoco/", "envpool.libs/")) for n in names)
    assert "envpool.atari.registration" in entry and "envpool.classic_control.registration" in entry
    assert "box2d" not in entry and "mujoco" not in entry
    assert sorted(line.split(",")[0] for line in record) == sorted(names)  # every file listed once, nothing dropped listed
    target = tmp_path / "site"
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(target), str(wheel)], capture_output=True, text=True
    )
    assert pip.returncode == 0, pip.stderr
    check = subprocess.run([sys.executable, "-c", "import envpool.entry"], cwd=target, capture_output=True, text=True)
    assert check.returncode == 0, check.stderr  # entry.py no longer imports a family that is gone
