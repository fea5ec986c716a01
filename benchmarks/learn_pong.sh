#!/usr/bin/env bash
# Train ALE/Pong-v5 with pronghorn's defaults (shallow CNN, the image settings) for 10M frames, then write
# the learning curve (PNG) and print the final mean return and the wall time. Extra flags pass through.
#   benchmarks/learn_pong.sh                       # 10M frames, envpool backend, into runs/learn_pong
#   SEED=1 LOGDIR=runs/learn_pong_s1 benchmarks/learn_pong.sh
#   FRAMES=10M BACKEND=gymnasium LOGDIR=runs/p2 benchmarks/learn_pong.sh
set -euo pipefail
cd "$(dirname "$0")/.."
FRAMES=${FRAMES:-10M}
SEED=${SEED:-0}
BACKEND=${BACKEND:-envpool}
LOGDIR=${LOGDIR:-runs/learn_pong}
PY=${PY:-.venv/bin/python}
start=$(date +%s)
"$PY" -m pronghorn.cli train --env ALE/Pong-v5 --env-backend "$BACKEND" --num-actors 2 --seed "$SEED" \
  --total-frames "$FRAMES" --logdir "$LOGDIR" --no-progress --log-interval 30 "$@"
end=$(date +%s)
"$PY" -m pronghorn.cli plot "$LOGDIR" -o "$LOGDIR/curve.png"
"$PY" - "$LOGDIR" "$((end - start))" <<'PYEOF'
import csv, sys
logdir, wall = sys.argv[1], int(sys.argv[2])
rows = list(csv.DictReader(open(f"{logdir}/episodes.csv")))
last = [float(r["episode_return"]) for r in rows[-100:]]
frames = rows[-1]["frames"] if rows else 0
print(f"learn_pong: {len(rows)} episodes; mean return of the last {len(last)}: {sum(last) / max(1, len(last)):.2f} "
      f"at {int(frames):,} frames; wall time {wall} s; curve {logdir}/curve.png")
PYEOF
