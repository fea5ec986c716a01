"""The wheel: built from the source tree, installed into a new venv, run from outside the repo."""

import os
import subprocess
import sys
import sysconfig

import pytest

from tests.helpers import assert_no_leaks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(cmd, cwd, env, timeout=600):
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.timeout(900)
def test_the_wheel_installs_into_a_new_venv_and_trains_from_outside_the_repo(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    _run([sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path / "dist"), ROOT], ROOT, env)
    (wheel,) = (tmp_path / "dist").glob("pronghorn-*.whl")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], tmp_path, env)
    # The new venv sees the dev venv's packages through a .pth line (torch, gymnasium, ...: a fresh install of
    # them took a minute and a half of this suite). Only site-packages' own .pth files run, so the dev venv's
    # editable pronghorn is not importable from here: `import pronghorn` must find the installed wheel.
    (site,) = (venv / "lib").glob("python3.*/site-packages")
    (site / "dev-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = str(venv / "bin" / "python")
    _run([python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", str(wheel)], tmp_path, env)
    _run([python, "-m", "pip", "check"], tmp_path, env)  # the wheel's requirements are met by what pip found

    where = _run([python, "-c", "import pronghorn, pronghorn.suites as s; print(pronghorn.__file__, len(s.ATARI_SCORES))"], tmp_path, env)
    path, games = where.stdout.split()
    assert path.startswith(str(venv)) and int(games) == 57  # the installed copy, with the reference-score table
    help_text = _run([str(venv / "bin" / "pronghorn"), "train", "--help"], tmp_path, env).stdout
    assert "--replay-fraction" in help_text and "--eval-every" in help_text
    run = _run([str(venv / "bin" / "pronghorn"), "train", "--total-frames", "20k", "--logdir", str(tmp_path / "run"), "--no-progress"], tmp_path, env)
    assert "frame budget spent after" in run.stdout
    assert (tmp_path / "run" / "metrics.csv").exists() and (tmp_path / "run" / "checkpoints" / "latest").exists()
    assert_no_leaks()
