#!/usr/bin/env bash
# One agent on the five MinAtar games, trained twice for the same frames: without and with --popart.
# Prints each level's mean return (last 100 episodes) for both runs and draws both into one figure.
#   benchmarks/learn_multilevel.sh                     # 12M frames per run, one run after the other
#   PARALLEL=1 benchmarks/learn_multilevel.sh          # both runs at once (each gets half the cores)
#   FRAMES=2M LOGDIR=runs/ml_quick benchmarks/learn_multilevel.sh
# 2 actors x 10 envs: with fewer actors than levels each actor's envs take turns over the games, so
# every game is played by 4 of the 20 environments.
set -euo pipefail
cd "$(dirname "$0")/.."
FRAMES=${FRAMES:-12M}
LOGDIR=${LOGDIR:-runs/learn_multilevel}
PARALLEL=${PARALLEL:-0}
PY=${PY:-.venv/bin/python}
run() {
  "$PY" -m pronghorn.cli train --levels minatar --num-actors 2 --envs-per-actor 10 --total-frames "$FRAMES" \
    --logdir "$LOGDIR/$1" --no-progress --log-interval 30 "${@:2}"
}
start=$(date +%s)
if [ "$PARALLEL" = 1 ]; then
  mkdir -p "$LOGDIR"
  run baseline > "$LOGDIR/baseline.log" 2>&1 & first=$!
  run popart --popart > "$LOGDIR/popart.log" 2>&1 & second=$!
  wait "$first"; wait "$second"
else
  run baseline
  run popart --popart
fi
end=$(date +%s)
"$PY" -m pronghorn.cli plot "$LOGDIR/baseline" "$LOGDIR/popart" -o "$LOGDIR/curves.png"
"$PY" - "$LOGDIR" "$((end - start))" <<'PYEOF'
import csv, sys
logdir, wall = sys.argv[1], int(sys.argv[2])
runs = {name: list(csv.DictReader(open(f"{logdir}/{name}/episodes.csv"))) for name in ("baseline", "popart")}
levels = sorted({r["level"] for rows in runs.values() for r in rows})
print(f"learn_multilevel: mean return of the last 100 episodes per level; wall time {wall} s; curves {logdir}/curves.png")
print(f"{'level':<24}" + "".join(f"{name:>12}" for name in runs))
means = {name: [] for name in runs}
for level in levels:
    cells = []
    for name, rows in runs.items():
        last = [float(r["episode_return"]) for r in rows if r["level"] == level][-100:]
        means[name].append(sum(last) / max(1, len(last)))
        cells.append(f"{means[name][-1]:>12.2f}")
    print(f"{level:<24}" + "".join(cells))
print(f"{'mean over levels':<24}" + "".join(f"{sum(v) / max(1, len(v)):>12.2f}" for v in means.values()))
for name, rows in runs.items():
    print(f"{name}: {len(rows)} episodes, last at {int(rows[-1]['frames']):,} frames")
PYEOF
