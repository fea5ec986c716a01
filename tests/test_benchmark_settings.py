"""benchmarks/throughput.py's named settings are configs pronghorn accepts (a typo would surface only in a long run)."""

import os
import re
import subprocess
import sys

from pronghorn.config import Config
from tests.helpers import load_benchmark


def _script(name: str) -> str:
    """benchmarks/NAME.py's path, to run as users do."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks", f"{name}.py")


def test_every_throughput_setting_is_a_valid_config():
    throughput = load_benchmark("throughput")
    assert set(throughput.DEFAULT_SETTINGS) <= set(throughput.SETTINGS)
    for name, fields in throughput.SETTINGS.items():
        cfg = Config(**{"num_actors": 2, **fields})  # validated on construction: raises on a bad field or value
        assert cfg.env == fields["env"], name
        if name.endswith("-pinned"):
            assert cfg.pin_actors == "on", name  # the row exists to time the pinned placement against `auto`


def test_learner_layouts_times_every_variant_and_refuses_a_compiled_setting():
    script = _script("learner_layouts")
    run = subprocess.run(
        [sys.executable, script, "--part", "update", "--only", "cartpole", "--rounds", "1", "--updates", "2"], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    row = [line for line in run.stdout.splitlines() if line.startswith("| cartpole (2) |")]
    assert len(row) == 1
    cells = row[0].split("|")[2:-1]  # the four variants: median (lowest) ms per update
    assert len(cells) == 4 and all(re.fullmatch(r" \d+\.\d\d \(\d+\.\d\d\) ", cell) for cell in cells), row
    refused = subprocess.run([sys.executable, script, "--only", "cartpole-best-bf16-compiled"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "choose a setting without -compiled" in refused.stderr and "Traceback" not in refused.stderr
    # V-trace eager and compiled, the behaviour logits in both layouts (it checks they agree before timing them)
    vtrace = subprocess.run([sys.executable, script, "--part", "vtrace", "--rounds", "1"], capture_output=True, text=True, timeout=300)
    assert vtrace.returncode == 0, vtrace.stderr[-2000:]
    rows = [line for line in vtrace.stdout.splitlines() if re.fullmatch(r"\| [236] \|( [\d,]+ \|){4}", line)]
    assert len(rows) == 3, vtrace.stdout


def test_learner_glue_times_the_step_against_an_earlier_learner_and_refuses_an_unknown_revision():
    script = _script("learner_glue")
    run = subprocess.run(
        [sys.executable, script, "--only", "cartpole", "--rounds", "1", "--updates", "2", "--before", "HEAD"], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert "| setting (N) | as it is | Optimizer.step | HEAD |" in run.stdout
    row = [line for line in run.stdout.splitlines() if line.startswith("| cartpole (2) |")]
    assert len(row) == 1
    cells = row[0].split("|")[2:-1]  # median (lowest) ms per update of each variant
    assert len(cells) == 3 and all(re.fullmatch(r" \d+\.\d\d \(\d+\.\d\d\) ", cell) for cell in cells), row
    refused = subprocess.run([sys.executable, script, "--before", "no-such-revision"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--before no-such-revision" in refused.stderr and "Traceback" not in refused.stderr


def test_actor_loop_times_the_loop_against_an_earlier_acting_step_and_refuses_an_unknown_revision():
    script = _script("actor_loop")
    run = subprocess.run(
        [sys.executable, script, "--envs", "8", "--calls", "40", "--sweep-mb", "1", "--rounds", "2", "--before", "HEAD"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    turns = [line for line in run.stdout.splitlines() if "in turns" in line]
    assert len(turns) == 1 and turns[0].startswith("CartPole-v1 (auto) E=8:"), run.stdout
    numbers = r"\s+\d+\.\d \(lowest\s+\d+\.\d\)"
    assert re.search(rf"as it is{numbers} \| at HEAD{numbers}$", turns[0]), turns[0]
    refused = subprocess.run([sys.executable, script, "--before", "no-such-revision"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--before no-such-revision" in refused.stderr and "Traceback" not in refused.stderr


def test_after_products_times_the_step_after_each_part_in_every_variant_and_refuses_image_envs():
    script = _script("after_products")
    run = subprocess.run([sys.executable, script, "--envs", "4", "--rounds", "1", "--calls", "5"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "| | as installed | numpy AVX2 | OpenBLAS AVX2 | both AVX2 |" in run.stdout
    rows = [line for line in run.stdout.splitlines() if re.fullmatch(r"\| [a-zA-Z0-9 ]+ \|( \d+\.\d \|){4}", line)]
    names = [row.split("|")[1].strip() for row in rows]
    assert names[:2] == ["step after nothing", "step after answer"] and names[-1] == "loop per step" and len(rows) == 10, run.stdout
    refused = subprocess.run([sys.executable, script, "--env", "MinAtar/Breakout-v0"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "are not vectors" in refused.stderr and "Traceback" not in refused.stderr
