"""Agents: a torso (MLP, IMPALA shallow CNN or deep ResNet), an optional LSTM core, policy and baseline heads.

All inputs are time-major `[T, B, ...]`; the actor calls with T=1.
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from pronghorn.defaults import resolve_torso
from pronghorn.max_pool import MaxPool
from pronghorn.obs_norm import ObservationNorm
from pronghorn.popart import PopArtHead
from pronghorn.records import AgentOutput
from pronghorn.softmax import softmax

# ReLUs work in place: the layer before each saves its input, not its output, for the backward pass, and a
# ReLU's backward reads its own result, so nothing needed is overwritten. It saves allocating and writing a
# second copy of every activation (CartPole's learner: 10 752 x 64 floats, 2.75 MB, per layer).


class NarrowLinear(nn.Linear):
    """nn.Linear for a handful of input features (CartPole's 4), multiplying by a row-major [in, out] copy of the
    weight (its transpose is a column-major view).

    The weight's layout picks the backward pass's products: with the copy, its gradient is x^T g, which at a
    learner's 10 752 rows ran about twice as fast as the (g^T x)^T it takes for the view (bf16). Forward and
    backward of a layer of 64 units (`benchmarks/learner_layouts.py --part linear`): at 4 inputs about a fifth
    faster in bf16 and three times in fp32, at 8 level in bf16 and twice in fp32, from 16 level or slower,
    hence `NARROW`.
    """

    NARROW = 8  # most input features for which MLPTorso uses this layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.bias, x, self.weight.t().contiguous())


class MLPTorso(nn.Module):
    def __init__(self, obs_shape: tuple[int, ...], hidden: int):
        super().__init__()
        inputs = math.prod(obs_shape)
        first = NarrowLinear(inputs, hidden) if inputs <= NarrowLinear.NARROW else nn.Linear(inputs, hidden)
        self.net = nn.Sequential(first, nn.ReLU(inplace=True), nn.Linear(hidden, hidden), nn.ReLU(inplace=True))
        self.out_size = hidden

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x.flatten(1).float())


# Torsos that read pixel images. The Agent scales their raw pixels to [0, 1] (or standardises them with
# --normalize-observations) before the torso, so a torso reads its input as it comes.
_PIXEL_TORSOS = ("shallow", "nature", "deep")


def _conv_layout(x: torch.Tensor, always: bool) -> torch.Tensor:
    """x [N, C, H, W] in the memory layout oneDNN's convolutions run fastest on: channels last (NHWC) on CPU.

    `benchmarks/conv_layout.py` measures it: NHWC, conversion included, halves the deep ResNet's forward
    pass and shortens every image torso's forward-and-backward (shallow and Nature by about a sixth, deep by
    a third). A forward pass alone through the shallow or Nature torso is faster without the conversion,
    so those switch (always=False) only where a backward pass follows: the learner's, with gradients on; an
    actor's step runs in inference mode. CUDA keeps NCHW: not measured there.
    """
    if _takes_channels_last(x.device, always):
        return x.contiguous(memory_format=torch.channels_last)
    return x


def _takes_channels_last(device: torch.device, always: bool) -> bool:
    return device.type == "cpu" and (always or torch.is_grad_enabled())


class _ConvFC(nn.Module):
    """Pixel images (scaled or standardised by the Agent) through a stack of conv layers, then one fully connected ReLU layer."""

    always_channels_last = False  # _conv_layout's `always`

    def __init__(self, obs_shape: tuple[int, ...], convs: nn.Sequential, hidden: int):
        super().__init__()
        assert isinstance(convs[-1], nn.ReLU), "forward takes the last ReLU after the flatten when compiled"
        self.convs = convs
        with torch.no_grad():
            flat = self.convs(torch.zeros(1, *obs_shape)).numel()  # raises if the image is smaller than the kernels
        self.fc = nn.Linear(flat, hidden)
        self.out_size = hidden

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = _conv_layout(x.float(), always=self.always_channels_last)
        if torch.compiler.is_compiling():
            # --compile-learner: the last ReLU after the flatten (the same values), as in SmallTorso.forward: before it,
            # the compiled pass wrote a bool mask of the last conv's output for the backward pass (Pong's shallow
            # network at its default batch: 435,456 elements, 4.3 ms of a 50 ms update).
            return F.relu(self.fc(F.relu(self.convs[:-1](x).flatten(1))), inplace=True)
        x = self.convs(x)
        # flatten reads the features in NCHW order whatever the layout, so the fc's weights mean the same.
        return F.relu(self.fc(x.flatten(1)), inplace=True)


class ShallowTorso(_ConvFC):
    """IMPALA's shallow network: conv 16x8x8/4, conv 32x4x4/2, fully connected 256."""

    def __init__(self, obs_shape: tuple[int, ...]):
        c = obs_shape[0]
        super().__init__(
            obs_shape, nn.Sequential(nn.Conv2d(c, 16, 8, stride=4), nn.ReLU(inplace=True), nn.Conv2d(16, 32, 4, stride=2), nn.ReLU(inplace=True)), 256
        )


class NatureTorso(_ConvFC):
    """The DQN network (Mnih et al. 2015): conv 32x8x8/4, 64x4x4/2, 64x3x3/1, fully connected 512."""

    def __init__(self, obs_shape: tuple[int, ...]):
        c = obs_shape[0]
        convs = nn.Sequential(
            nn.Conv2d(c, 32, 8, stride=4),
            nn.ReLU(inplace=True),
            nn.Conv2d(32, 64, 4, stride=2),
            nn.ReLU(inplace=True),
            nn.Conv2d(64, 64, 3, stride=1),
            nn.ReLU(inplace=True),
        )
        super().__init__(obs_shape, convs, 512)


class SmallTorso(nn.Module):
    """For small grids such as MinAtar's 10x10: conv 16x3x3/1, fully connected 128 (Young & Tian 2019).

    Inputs are 0/1 occupancy channels, so they are not rescaled."""

    # What --compile-learner hands inductor for this torso (Learner merges it into its options). Its layout
    # optimisation ran the convolution channels-last, and in bfloat16 the flatten back to the fc layer's order
    # became a scalar loop: MinAtar's 96 x 21 grids, a compiled update 29.7 against 18.9 ms with it off (fp32
    # level; the deep ResNet's compiled update 777 against 810 ms with it off, so the others keep it).
    compile_options: ClassVar[dict[str, bool]] = {"layout_optimization": False}

    def __init__(self, obs_shape: tuple[int, ...]):
        super().__init__()
        c, h, w = obs_shape
        self.conv = nn.Conv2d(c, 16, 3, stride=1)
        self.fc = nn.Linear(16 * (h - 2) * (w - 2), 128)
        self.out_size = 128

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        if x.device.type == "cpu" and x.shape[0] <= _DIRECT_CONV_ROWS:
            # An actor's step: oneDNN's convolution (what Conv2d picks on CPU) costs 55-70 us on 4-8 grids of
            # 10x10, about 30 us of it set-up; the im2col-and-product kernel takes 15-25 us (same results to
            # 1e-7). From ~24 rows up oneDNN is as fast or faster, so the learner's batches keep it.
            conv = self.conv
            y = _im2col_conv2d(x, conv.weight, conv.kernel_size, conv.bias, conv.stride, conv.padding)
        else:
            y = self.conv(x)
        if torch.compiler.is_compiling():
            # --compile-learner: the ReLU after the flatten (the same values). Before it, the compiled pass kept the
            # ReLU's mask of the conv output for the backward pass as a bool tensor, and inductor's CPU kernel took
            # about 10 ns an element to write it: 7.3 ms of each update at MinAtar's default batch, where the whole
            # eager update takes 11-13. Eager, the flatten first was 6 % slower, so eager keeps this order.
            return F.relu(self.fc(F.relu(y.flatten(1), inplace=True)), inplace=True)
        return F.relu(self.fc(F.relu(y, inplace=True).flatten(1)), inplace=True)


_DIRECT_CONV_ROWS = 16  # SmallTorso: at most this many grids take the im2col convolution (see forward)
_im2col_conv2d = torch._C._nn.thnn_conv2d  # type: ignore[attr-defined]  # ATen's CPU im2col kernel (autograd included); not in the stubs


class _Residual(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(F.relu(self.conv0(F.relu(x))))


class DeepTorso(nn.Module):
    """IMPALA's deep ResNet: 3 sections (16, 32, 32 channels) of conv, max-pool /2 and 2 residual blocks; fc 256."""

    always_channels_last = True  # _conv_layout's `always`: its forward pass alone is faster channels last too

    def __init__(self, obs_shape: tuple[int, ...]):
        super().__init__()
        layers: list[nn.Module] = []
        channels = obs_shape[0]
        for out in (16, 32, 32):
            # MaxPool is nn.MaxPool2d(3, stride=2, padding=1), run as ATen's kernels by a compiled learner on CPU
            layers += [nn.Conv2d(channels, out, 3, padding=1), MaxPool(), _Residual(out), _Residual(out)]
            channels = out
        self.sections = nn.Sequential(*layers)
        with torch.no_grad():
            flat = self.sections(torch.zeros(1, *obs_shape)).numel()
        self.fc = nn.Linear(flat, 256)
        self.out_size = 256

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.sections(_conv_layout(x.float(), always=self.always_channels_last)))
        return F.relu(self.fc(x.flatten(1)), inplace=True)


def sample_actions(logits: torch.Tensor, uniform: torch.Tensor | None = None) -> torch.Tensor:
    """One action per row of logits [N, A], drawn from softmax(logits) by inverting the CDF.

    Same distribution as torch.multinomial, at a fraction of its per-call cost on small batches
    (measured here: ~32 us -> a few us), which matters in the actor's per-step loop.
    uniform: [N, 1] draws in [0, 1) to use (the inference server draws each actor's from its own
    generator); by default they come from torch's global generator.
    """
    cdf = softmax(logits).cumsum(dim=-1)
    if uniform is None:
        uniform = torch.rand(cdf.shape[0], 1, device=logits.device)
    # The action is the number of CDF entries below u: for a non-decreasing CDF, the first index where
    # CDF >= u, which one search finds (where counting took three ops). u < 1 times the total stays within
    # the last entry; the clamp only guards against NaN logits.
    u = uniform * cdf[:, -1:]
    return torch.searchsorted(cdf, u).squeeze(1).clamp_(max=logits.shape[-1] - 1)


def build_agent(cfg, obs_shape: tuple[int, ...], num_actions: int) -> Agent:
    """The agent a Config describes (one PopArt value per level with --popart)."""
    if cfg.normalize_observations == "auto":
        raise ValueError("Config.normalize_observations is unresolved: call Config.for_observations first")
    agent = Agent(
        obs_shape,
        num_actions,
        cfg.model,
        cfg.lstm,
        cfg.hidden_size,
        popart_levels=len(cfg.level_names) if cfg.popart else 0,
        normalize_observations=cfg.normalize_observations == "on",
    )
    if cfg.init == "orthogonal":
        init_orthogonal(agent)
    return agent


def init_orthogonal(agent: Agent) -> None:
    """Orthogonal weights, zero biases: gain sqrt(2) for the ReLU torso, 0.01 for the policy head (a near-uniform
    first policy whatever the features), 1 for the baseline. The LSTM keeps PyTorch's initialisation."""
    baseline = agent.baseline if agent.popart is None else agent.popart.linear
    assert baseline is not None
    heads: list[tuple[nn.Linear | nn.Conv2d, float]] = [(agent.policy, 0.01), (baseline, 1.0)]
    layers = [(m, math.sqrt(2)) for m in agent.torso.modules() if isinstance(m, (nn.Linear, nn.Conv2d))] + heads
    for module, gain in layers:
        nn.init.orthogonal_(module.weight, gain)
        if module.bias is not None:
            nn.init.zeros_(module.bias)


def both_heads(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Policy logits [N, A] and values [N] from features x [N, F] and both heads' weight [A+1, F] and bias [A+1].

    On CPU the product is written action-major, [A+1, N], and the logits are a transposed view of it: each
    action's logits and the values are then contiguous rows, which the losses' elementwise ops and softmax
    (taken across rows, softmax.py) read without a stride of A+1. A learner's update against the row-major
    product, alternated (`benchmarks/learner_layouts.py --part update` and scratch timings, 2026-12-07):
    CartPole's best batch in bf16 10-16 % faster, its defaults 4-12 %; MinAtar's and Pong's CNNs level.
    Other devices keep [N, A+1]: not measured there.
    """
    if x.device.type == "cpu":
        both = torch.addmm(bias[:, None], weight, x.t())
        return both[:-1].t(), both[-1]
    both = F.linear(x, weight, bias)
    return both[:, :-1], both[:, -1]


class Agent(nn.Module):
    """Policy and baseline over a torso and an optional LSTM core."""

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        num_actions: int,
        model: str = "auto",
        lstm: bool = False,
        hidden_size: int = 64,
        popart_levels: int = 0,
        normalize_observations: bool = False,
    ):
        super().__init__()
        self.obs_norm = ObservationNorm(obs_shape) if normalize_observations else None
        kind = resolve_torso(model, obs_shape)
        self.scale_pixels = kind in _PIXEL_TORSOS and self.obs_norm is None  # raw pixels -> [0, 1]
        if kind in ("small", *_PIXEL_TORSOS) and len(obs_shape) != 3:
            raise ValueError(f"--model {kind} needs image observations [C, H, W], got shape {obs_shape}: use --model mlp")
        torsos = {"mlp": MLPTorso, "small": SmallTorso, "shallow": ShallowTorso, "deep": DeepTorso, "nature": NatureTorso}
        try:
            self.torso = torsos[kind](obs_shape, hidden_size) if kind == "mlp" else torsos[kind](obs_shape)
        except RuntimeError as exc:  # the torso's trial forward pass: the image is smaller than its kernels
            if "too small" not in str(exc) and "Kernel size can't be greater" not in str(exc):
                raise
            fits = "small or mlp" if kind != "small" else "mlp"
            raise ValueError(
                f"--model {kind} needs larger images than observations of shape {obs_shape} (its convolutions do not fit): use --model {fits}"
            ) from None
        self.num_actions = num_actions
        self.use_lstm = lstm
        features = self.torso.out_size
        self.core_size = features if lstm else 0
        if lstm:
            # The core also sees the previous action (one-hot) and the clipped reward, as in IMPALA.
            self.core = nn.LSTM(features + num_actions + 1, self.core_size)
        self.policy = nn.Linear(features, num_actions)
        # With PopArt the baseline is one normalised value per level, unnormalised by that level's statistics.
        self.popart = PopArtHead(features, popart_levels) if popart_levels else None
        self.baseline = None if self.popart else nn.Linear(features, 1)

    def initial_state(self, batch_size: int) -> torch.Tensor:
        """LSTM (h, c) as one tensor [2, B, H]; a [2, B, 1] placeholder without LSTM (keeps slots uniform)."""
        return torch.zeros(2, batch_size, max(1, self.core_size))

    def logits_and_values(
        self,
        obs: torch.Tensor,  # [T, B, *obs_shape]
        last_action: torch.Tensor,  # [T, B] int64, the action that led to obs[t]
        reward: torch.Tensor | None,  # [T, B] float32, clipped reward that came with obs[t] (read by the LSTM core only)
        done: torch.Tensor | None,  # [T, B] bool, obs[t] starts a new episode (read by the LSTM core only)
        core_state: torch.Tensor,  # [2, B, H]
        level: torch.Tensor | None = None,  # [B] int64 level of each column (PopArt only; default level 0)
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Policy logits [T, B, A], baseline [T, B] and the core state after obs[T-1], choosing no action.

        The learner's pass: the batch's actions were chosen by the actors."""
        t, b = obs.shape[:2]
        if self.obs_norm is not None:
            # Written in the layout the torso's convolutions take (a no-op there then), not converted after.
            always = getattr(self.torso, "always_channels_last", None)  # None: a torso without convolutions, or MinAtar's
            obs = self.obs_norm(obs, channels_last=always is not None and _takes_channels_last(obs.device, always))
        elif self.scale_pixels:
            obs = obs.float() / 255.0
        x = self.torso(obs.reshape(t * b, *obs.shape[2:]))
        if self.use_lstm:
            assert reward is not None and done is not None, "the LSTM core reads reward and done"
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
        if self.baseline is not None:
            # Both heads in one matrix product: on CPU, products with 1 to 3 output columns go row by row, and two
            # of them cost about twice one of A+1 columns (forward and backward over CartPole's 10 752 learner
            # rows: 2.0 -> 1.1 ms).
            weight = torch.cat([self.policy.weight, self.baseline.weight])
            logits, baseline = both_heads(x, weight, torch.cat([self.policy.bias, self.baseline.bias]))
        else:
            assert self.popart is not None  # one of the two heads exists
            logits = self.policy(x)
            level = torch.zeros(b, dtype=torch.int64, device=x.device) if level is None else level
            baseline, _ = self.popart(x, level.expand(t, b).reshape(t * b))
        return logits.view(t, b, -1), baseline.view(t, b), core_state

    def forward(
        self,
        obs: torch.Tensor,  # [T, B, *obs_shape]
        last_action: torch.Tensor,  # [T, B] int64, the action that led to obs[t]
        reward: torch.Tensor | None,  # [T, B] float32 (read by the LSTM core only)
        done: torch.Tensor | None,  # [T, B] bool (read by the LSTM core only)
        core_state: torch.Tensor,  # [2, B, H]
        greedy: bool = False,
        level: torch.Tensor | None = None,  # [B] int64 (PopArt only)
        uniform: torch.Tensor | None = None,  # [T*B, 1] draws for sampling (default: torch's global generator)
    ) -> tuple[AgentOutput, torch.Tensor]:
        """`logits_and_values`, and an action for every step: the most likely one, or one sampled."""
        logits, baseline, core_state = self.logits_and_values(obs, last_action, reward, done, core_state, level)
        t, b = baseline.shape
        rows = logits.reshape(t * b, -1)
        action = rows.argmax(dim=-1) if greedy else sample_actions(rows, uniform)
        return AgentOutput(logits, baseline, action.view(t, b)), core_state
