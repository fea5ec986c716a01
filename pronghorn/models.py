"""Agents: a torso (MLP, IMPALA shallow CNN or deep ResNet), an optional LSTM core, policy and baseline heads.

All inputs are time-major `[T, B, ...]`; the actor calls with T=1.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from pronghorn.records import AgentOutput


class MLPTorso(nn.Module):
    def __init__(self, obs_shape: tuple[int, ...], hidden: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(math.prod(obs_shape), hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU())
        self.out_size = hidden

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.flatten(1).float())


class ShallowTorso(nn.Module):
    """IMPALA's shallow network: conv 16x8x8/4, conv 32x4x4/2, fully connected 256."""

    def __init__(self, obs_shape: tuple[int, ...]):
        super().__init__()
        c, h, w = obs_shape
        self.convs = nn.Sequential(nn.Conv2d(c, 16, 8, stride=4), nn.ReLU(), nn.Conv2d(16, 32, 4, stride=2), nn.ReLU())
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, c, h, w)).numel()
        self.fc = nn.Linear(flat, 256)
        self.out_size = 256

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.convs(x.float() / 255.0)
        return F.relu(self.fc(x.flatten(1)))


class _Residual(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(F.relu(self.conv0(F.relu(x))))


class DeepTorso(nn.Module):
    """IMPALA's deep ResNet: 3 sections (16, 32, 32 channels) of conv, max-pool /2 and 2 residual blocks; fc 256."""

    def __init__(self, obs_shape: tuple[int, ...]):
        super().__init__()
        layers: list[nn.Module] = []
        channels = obs_shape[0]
        for out in (16, 32, 32):
            layers += [nn.Conv2d(channels, out, 3, padding=1), nn.MaxPool2d(3, stride=2, padding=1), _Residual(out), _Residual(out)]
            channels = out
        self.sections = nn.Sequential(*layers)
        with torch.no_grad():
            flat = self.sections(torch.zeros(1, *obs_shape)).numel()
        self.fc = nn.Linear(flat, 256)
        self.out_size = 256

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.sections(x.float() / 255.0))
        return F.relu(self.fc(x.flatten(1)))


def sample_actions(logits: torch.Tensor) -> torch.Tensor:
    """One action per row of logits [N, A], drawn from softmax(logits) by inverting the CDF.

    Same distribution as torch.multinomial, at a fraction of its per-call cost on small batches
    (measured here: ~32 us -> a few us), which matters in the actor's per-step loop.
    """
    cdf = F.softmax(logits, dim=-1).cumsum(dim=-1)
    u = torch.rand(cdf.shape[0], 1, device=logits.device) * cdf[:, -1:]
    return (cdf < u).sum(dim=-1).clamp_(max=logits.shape[-1] - 1)


def pick_torso(model: str, obs_shape: tuple[int, ...]) -> str:
    """Resolve `auto`: images (3-d observations) get the shallow CNN, everything else the MLP."""
    if model != "auto":
        return model
    return "shallow" if len(obs_shape) == 3 else "mlp"


class Agent(nn.Module):
    """Policy and baseline over a torso and an optional LSTM core."""

    def __init__(self, obs_shape: tuple[int, ...], num_actions: int, model: str = "auto", lstm: bool = False, hidden_size: int = 64):
        super().__init__()
        kind = pick_torso(model, obs_shape)
        if kind in ("shallow", "deep") and len(obs_shape) != 3:
            raise ValueError(f"--model {kind} needs image observations [C, H, W], got shape {obs_shape}: use --model mlp")
        self.torso = {"mlp": lambda: MLPTorso(obs_shape, hidden_size), "shallow": lambda: ShallowTorso(obs_shape), "deep": lambda: DeepTorso(obs_shape)}[kind]()
        self.num_actions = num_actions
        self.use_lstm = lstm
        features = self.torso.out_size
        self.core_size = features if lstm else 0
        if lstm:
            # The core also sees the previous action (one-hot) and the clipped reward, as in IMPALA.
            self.core = nn.LSTM(features + num_actions + 1, self.core_size)
        self.policy = nn.Linear(features, num_actions)
        self.baseline = nn.Linear(features, 1)

    def initial_state(self, batch_size: int) -> torch.Tensor:
        """LSTM (h, c) as one tensor [2, B, H]; a [2, B, 1] placeholder without LSTM (keeps slots uniform)."""
        return torch.zeros(2, batch_size, max(1, self.core_size))

    def forward(
        self,
        obs: torch.Tensor,  # [T, B, *obs_shape]
        last_action: torch.Tensor,  # [T, B] int64, the action that led to obs[t]
        reward: torch.Tensor,  # [T, B] float32, clipped reward that came with obs[t]
        done: torch.Tensor,  # [T, B] bool, obs[t] starts a new episode
        core_state: torch.Tensor,  # [2, B, H]
        greedy: bool = False,
    ) -> tuple[AgentOutput, torch.Tensor]:
        t, b = obs.shape[:2]
        x = self.torso(obs.reshape(t * b, *obs.shape[2:]))
        if self.use_lstm:
            # At an episode start the previous action and reward belong to another episode: zero them.
            fresh = ~done
            last_action = last_action * fresh
            reward = reward * fresh
            x = torch.cat([x, F.one_hot(last_action.reshape(t * b), self.num_actions).float(), reward.reshape(t * b, 1)], dim=1)
            x = x.view(t, b, -1)
            h, c = core_state[0:1], core_state[1:2]
            outputs = []
            for step in range(t):
                # obs[step] opens a new episode where done[step]: forget the old episode's memory first.
                keep = (~done[step]).float().view(1, b, 1)
                out, (h, c) = self.core(x[step : step + 1], (h * keep, c * keep))
                outputs.append(out)
            x = torch.cat(outputs).reshape(t * b, -1)
            core_state = torch.cat([h, c])
        logits = self.policy(x)
        baseline = self.baseline(x).squeeze(-1)
        if greedy:
            action = logits.argmax(dim=-1)
        else:
            action = sample_actions(logits)
        return AgentOutput(logits.view(t, b, -1), baseline.view(t, b), action.view(t, b)), core_state
