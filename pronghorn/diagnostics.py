"""Health of the network while it trains: how many units a ReLU silences for a whole batch.

A unit (a Linear output or a conv channel) whose pre-activation is never positive over a batch passes no
gradient to the weights that feed it; once most of a layer is there, it rarely comes back. The shallow CNN
that did not learn Pong (issue 12) ended with two thirds or more of its fc units there, so the learner logs
the fraction for every torso layer, as `dead/<layer>`: a cheap signal to watch, not a diagnosis on its own.

The probe watches the forward pass the learner already runs (forward hooks, no second pass).
"""

from __future__ import annotations

from torch import nn


class DeadUnits:
    """Fraction of each torso layer's units that are never positive over one forward pass's batch."""

    def __init__(self, torso: nn.Module):
        self._latest: dict[str, float] = {}
        self._armed = False
        self._handles = [module.register_forward_hook(self._hook(name)) for name, module in torso.named_modules() if isinstance(module, (nn.Linear, nn.Conv2d))]

    def _hook(self, name: str):
        label = "dead/" + name.replace(".", "_")

        def record(module, inputs, output) -> None:
            if not self._armed:
                return
            # [N, C] or [N, C, H, W]: a unit is alive if any sample (and any position) is positive.
            alive = (output.detach() > 0).flatten(2).any(dim=2) if output.dim() > 2 else (output.detach() > 0)
            self._latest[label] = 1.0 - alive.any(dim=0).float().mean().item()

        return record

    def arm(self) -> None:
        """Record the forward passes from now until `read` (the learner arms it just before its own pass)."""
        self._armed = True
        self._latest = {}

    def read(self) -> dict[str, float]:
        self._armed = False
        return dict(self._latest)

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
