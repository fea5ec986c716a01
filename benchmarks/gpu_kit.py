"""Wheels for the GPU check on a machine that cannot reach a package index (`benchmarks/gpu_check.sh` installs them).

A GPU machine's image often has Python, PyTorch and the scientific stack, but neither the environments
(gymnasium, ale-py, envpool) nor this project's smaller dependencies, and no index to fetch them from. Run this
where pip can reach one: it downloads those wheels for the GPU machine's Python into a folder (default .whl/,
which git ignores), at the versions this checkout's environment has (the ones the test suite ran with), and trims
envpool's two wheels to Atari and classic control. Whole, they bundle every env family's compiled module and
assets (53 and 62 MB for CPython 3.12); trimmed, the kit is about 10 MB.

  .venv/bin/python benchmarks/gpu_kit.py                          # for CPython 3.12, manylinux x86-64
  .venv/bin/python benchmarks/gpu_kit.py --python 3.11 --out /tmp/kit

On the GPU machine, from the checkout's root with the folder in it: `benchmarks/gpu_check.sh`.
"""

from __future__ import annotations

import argparse
import base64
import glob
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# What pronghorn and envpool import that such an image lacks; torch, numpy, OpenCV, psutil, TensorBoard, tqdm,
# matplotlib, imageio, threadpoolctl and rich it has. dm-env is envpool's (its dm_env API is imported with it).
PACKAGES = (
    "gymnasium",
    "farama-notifications",
    "ale-py",
    "tyro",
    "docstring-parser",
    "typeguard",
    "setproctitle",
    "envpool",
    "envpool-assets",
    "dm-env",
    "dm-tree",
    "optree",
)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
KEEP_FAMILIES = ("atari", "classic_control")  # envpool's families that pronghorn steps


def _family(import_line: str) -> str | None:
    """'import envpool.box2d.registration  # noqa' -> 'box2d'; None for any other line."""
    words = import_line.split()
    if len(words) < 2 or words[0] != "import" or not words[1].startswith("envpool."):
        return None
    return words[1].split(".")[1]


def _dropped(name: str) -> bool:
    """Whether a file of envpool's or envpool-assets' wheel is left out: every folder of a family that is not
    kept (compiled module, binaries, data, Python, assets), and the rendering libraries bundled for them.
    envpool/python is the code all families share."""
    parts = name.split("/")
    if parts[0] == "envpool.libs":
        return True
    if parts[0] in ("envpool", "envpool_assets") and len(parts) > 2:
        return parts[1] not in (*KEEP_FAMILIES, "python")
    return False


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def trim(path: str) -> tuple[int, int]:
    """Rewrite the wheel at `path` with the kept families alone, its RECORD to match; (bytes before, after).

    envpool registers every family on import (entry.py imports each one's registration, whose package loads
    its compiled module): entry.py keeps the kept families' lines only."""
    before = os.path.getsize(path)
    trimmed = path + ".trimmed"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(trimmed, "w", zipfile.ZIP_DEFLATED) as dst:
        record_name = next(n for n in src.namelist() if n.endswith(".dist-info/RECORD"))
        lines = []
        for info in src.infolist():
            if _dropped(info.filename) or info.filename == record_name:
                continue
            data = src.read(info)
            if info.filename == "envpool/entry.py":
                kept = [line for line in data.decode().splitlines() if _family(line) in (None, *KEEP_FAMILIES)]
                data = ("\n".join(kept) + "\n").encode()
            dst.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)
            lines.append(_record_line(info.filename, data))
        dst.writestr(record_name, "\n".join([*lines, f"{record_name},,"]) + "\n")
    os.replace(trimmed, path)
    return before, os.path.getsize(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--python", default="3.12", help="the GPU machine's Python, MAJOR.MINOR (`python3 --version` there)")
    parser.add_argument("--out", default=os.path.join(ROOT, ".whl"), help="the folder to fill (emptied of wheels first)")
    args = parser.parse_args()
    if not args.python.replace(".", "").isdigit() or args.python.count(".") != 1:
        parser.error(f"--python takes MAJOR.MINOR, got {args.python!r}: e.g. --python 3.12")
    pins = []
    for name in PACKAGES:
        try:
            pins.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            pins.append(name)  # not in this environment: the newest
    os.makedirs(args.out, exist_ok=True)
    for old in glob.glob(os.path.join(args.out, "*.whl")):
        os.remove(old)
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--dest", tmp]
        cmd += ["--python-version", args.python, "--implementation", "cp", *(f"--platform={p}" for p in PLATFORMS), *pins]
        print("pip download", " ".join(pins), flush=True)
        if subprocess.run(cmd).returncode:
            raise SystemExit("gpu_kit: pip could not download the wheels above (is a package index reachable?)")
        for path in sorted(glob.glob(os.path.join(tmp, "*.whl"))):
            base = os.path.basename(path)
            if base.startswith(("envpool-", "envpool_assets-")):
                before, after = trim(path)
                print(f"  {base}: trimmed to {', '.join(KEEP_FAMILIES)}, {before / 1e6:.1f} -> {after / 1e6:.1f} MB")
            shutil.move(path, os.path.join(args.out, base))
    wheels = glob.glob(os.path.join(args.out, "*.whl"))
    print(f"{len(wheels)} wheels, {sum(map(os.path.getsize, wheels)) / 1e6:.1f} MB, in {args.out}")


if __name__ == "__main__":
    main()
