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
        self._layers = [(name, module) for name, module in torso.named_modules() if isinstance(module, (nn.Linear, nn.Conv2d))]
        self._handles: list = []  # hooks are in place only while armed: a hooked module's every call costs more

    def _hook(self, name: str):
        label = "dead/" + name.replace(".", "_")

        def record(module, inputs, output) -> None:
            # [N, C] or [N, C, H, W]: a unit is alive if any sample (and any position) is positive. The largest
            # value per unit says so in one reduction, where a boolean tensor of the whole output took several
            # passes (CartPole's learner, 10 752 x 64: 1.6 ms per layer every tenth update).
            out = output.detach()
            peak = out.amax(dim=(0, *range(2, out.dim())))
            self._latest[label] = (peak <= 0).float().mean().item()

        return record

    def arm(self) -> None:
        """Record the forward passes from now until `read` (the learner arms it just before its own pass)."""
        self.close()
        self._latest = {}
        self._handles = [module.register_forward_hook(self._hook(name)) for name, module in self._layers]

    def read(self) -> dict[str, float]:
        self.close()
        return dict(self._latest)

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
