"""Weights & Biases as one more log sink (--wandb): the scalars TensorBoard gets, the config, videos, the curve.

wandb is an optional extra (`pip install 'pronghorn[wandb]'`). The run is named after the logdir, and
its id is kept in <logdir>/wandb_id, so a resumed logdir continues the same W&B run. Every scalar is
plotted against `frames` (a W&B step metric), not W&B's own step: a resumed run logs frames again from
its checkpoint, which W&B's step (strictly increasing) would drop. WANDB_MODE=offline keeps everything
on disk (under <logdir>/wandb) for a later `wandb sync`.
"""

from __future__ import annotations

import dataclasses
import math
import os
import uuid
from typing import Any

from pronghorn.config import Config
from pronghorn.logs import Episode, Evaluation

ID_FILE = "wandb_id"


def run_id(logdir: str) -> str:
    """This logdir's W&B run id: read back on resume, made (and saved) on the first start."""
    path = os.path.join(logdir, ID_FILE)
    if os.path.exists(path):
        with open(path) as f:
            saved = f.read().strip()
        if saved:
            return saved
    new = uuid.uuid4().hex[:12]
    with open(path, "w") as f:
        f.write(new + "\n")
    return new


class WandbSink:
    def __init__(self, cfg: Config, logdir: str):
        import wandb

        self._wandb = wandb
        self.id = run_id(logdir)
        self._run = wandb.init(
            project=cfg.wandb_project,
            entity=cfg.wandb_entity,
            group=cfg.wandb_group,
            name=os.path.basename(os.path.abspath(logdir)),
            id=self.id,
            resume="allow",
            dir=logdir,
            config=dataclasses.asdict(cfg),
            settings=wandb.Settings(console="off", quiet=True),  # pronghorn's console is its own
        )
        self._run.define_metric("frames")
        self._run.define_metric("*", step_metric="frames")
        self._logdir = logdir

    def _log(self, frames: int, values: dict[str, Any]) -> None:
        self._run.log({"frames": frames, **values})

    def metrics(self, frames: int, values: dict[str, float]) -> None:
        finite = {
            (k if "/" in k else f"learner/{k}"): v
            for k, v in values.items()
            if not k.startswith("eval/") and isinstance(v, (int, float)) and math.isfinite(v)  # eval/*: at their own frames, below
        }
        self._log(frames, finite)

    def episodes(self, episodes: list[Episode]) -> None:
        for e in episodes:
            self._log(e.frames, {f"{e.level}/episode_return": e.episode_return, f"{e.level}/episode_frames": e.episode_frames})

    def evaluation(self, result: Evaluation) -> None:
        values: dict[str, Any] = {f"eval/{level}/return": value for level, value in result.returns.items()}
        if result.video:
            values["eval/video"] = self._wandb.Video(result.video, format="mp4")
        self._log(result.frames, values)

    def close(self) -> None:
        curve = os.path.join(self._logdir, "curve.png")
        if os.path.exists(curve):
            self._run.log({"curve": self._wandb.Image(curve)})
        self._run.finish()
