"""One acting step: E observations in, actions out (and V(final_obs) where a time limit cut an episode).

`act` is the step for any agent. `Acting` is what the actors and the inference server call: the same
step, with buffers kept from one call to the next and, for the MLP agent on CPU, without the modules'
per-call machinery. A step of that network is about fifteen tensor ops on a few hundred rows or fewer, and
on CPU its cost is their dispatch and allocation, not their arithmetic.
"""

from __future__ import annotations

import torch
from torch import nn

from pronghorn.models import Agent, MLPTorso, SmallTorso, sample_actions
from pronghorn.records import AgentOutput


def act(
    agent: Agent,
    obs: torch.Tensor,  # [B, *obs_shape]
    last_action: torch.Tensor,  # [B] int64, the action that led to obs
    reward: torch.Tensor | None,  # [B] clipped reward that came with obs (None without LSTM)
    done: torch.Tensor | None,  # [B] bool, obs starts a new episode (None without LSTM)
    core: torch.Tensor,  # [2, B, H] the core state after the previous observation
    level: torch.Tensor | None,  # [B] int64 (PopArt)
    uniform: torch.Tensor | None,  # [B, 1] draws for sampling
    cut: torch.Tensor | None = None,  # [n] int64: the rows whose episode a time limit ended at this step
    final_obs: torch.Tensor | None = None,  # [n, *obs_shape]: what those rows saw before their reset
) -> tuple[AgentOutput, torch.Tensor, torch.Tensor | None]:
    """One acting step of B environments, and V(final_obs) for the rows a time limit cut, in one forward pass.

    A time limit is not terminal, so the learner bootstraps the cut step from V(final_obs). That value needs
    the core state from *before* the reset (obs is already the next episode's first observation), the same
    last action and reward, and no episode start: the n rows are appended to the batch as copies of the cut
    rows with final_obs in place of obs. One pass over B+n rows costs about what B rows do; a second pass
    for the n rows cost a whole small forward (CartPole, one cut among 512 envs: 820-870 us per step's answer
    with two passes, 580-620 with one, 440-520 with no cut; among 16 envs: 600, 390 and 270-310).
    Returns (output for the B rows [1, B], new core state [2, B, H], values of the n rows [n] or None).
    """
    b = obs.shape[0]
    if cut is not None and final_obs is not None and cut.numel():
        n = cut.numel()
        obs = torch.cat([obs, final_obs])
        last_action = torch.cat([last_action, last_action[cut]])
        if reward is not None and done is not None:
            reward = torch.cat([reward, reward[cut]])
            done = torch.cat([done, torch.zeros(n, dtype=torch.bool, device=done.device)])
        if agent.use_lstm:  # without it the core state is a placeholder that forward hands back untouched
            core = torch.cat([core, core[:, cut]], dim=1)
        if agent.popart is not None:  # only PopArt's baseline reads the level
            level = None if level is None else torch.cat([level, level[cut]])
        # The extra rows' actions are thrown away; padding keeps the B rows' draws what they would be alone.
        uniform = None if uniform is None else torch.cat([uniform, uniform.new_zeros(n, 1)])
    r, d = (None, None) if reward is None or done is None else (reward[None], done[None])
    out, new_core = agent(obs[None], last_action[None], r, d, core, level=level, uniform=uniform)
    if obs.shape[0] == b:
        return out, new_core, None
    mine = AgentOutput(out.policy_logits[:, :b], out.baseline[:, :b], out.action[:, :b])
    return mine, new_core[:, :b] if agent.use_lstm else new_core, out.baseline[0, b:]


class Acting:
    """`act` for batches of up to `max_rows` environments, keeping what it can from one call to the next.

    For an MLP agent on CPU without LSTM, PopArt or observation statistics, the matrix products write into
    buffers kept here and read the agent's weights through views kept here (detached and transposed once:
    weights are loaded into the agent in place, which these views see), and the modules are not called.
    CartPole in an actor's loop: 114 -> ~45 us per step of 16 envs, 231 -> ~150 us of 512. The small-grid
    CNN (MinAtar) under the same conditions calls its torso module and nothing else, then the same heads.
    Any other agent goes through `act`. Both give the same logits, values and actions (tested).

    What a call returns may view the buffers: it holds until the next call, so copy what must outlive it.
    """

    def __init__(self, agent: Agent, max_rows: int):
        self.agent = agent
        modules: list[nn.Module] = list(agent.torso.net) if isinstance(agent.torso, MLPTorso) else []
        layers = [m for m in modules[0::2] if isinstance(m, nn.Linear)]
        relus = [m for m in modules[1::2] if isinstance(m, nn.ReLU)]
        mlp = bool(layers) and len(layers) == len(relus) == len(modules) // 2 and len(modules) % 2 == 0
        self._fast = (
            (mlp or isinstance(agent.torso, SmallTorso))
            and not agent.use_lstm
            and agent.baseline is not None  # not PopArt
            and agent.obs_norm is None  # the products read raw observations
            and agent.policy.weight.device.type == "cpu"
        )
        if not self._fast:
            return
        assert agent.baseline is not None
        rows = 2 * max_rows  # a time limit can add one row per environment
        # (weight transposed, bias) of each hidden layer, and a buffer for its output: MLP only (none for the CNN).
        self._layers = [(layer.weight.detach().t(), layer.bias.detach(), torch.empty(rows, layer.out_features)) for layer in layers] if mlp else []
        heads = (agent.policy, agent.baseline)
        self._head_parts = ([h.weight.detach() for h in heads], [h.bias.detach() for h in heads])
        width = agent.num_actions + 1
        self._head_weight = torch.empty(width, agent.policy.in_features)
        self._head_bias = torch.empty(width)
        self._heads = torch.empty(rows, width)
        self._views: dict[int, list[torch.Tensor]] = {}  # per row count: the buffers' first rows (views made once)

    def __call__(
        self,
        obs: torch.Tensor,
        last_action: torch.Tensor,
        reward: torch.Tensor | None,
        done: torch.Tensor | None,
        core: torch.Tensor,
        level: torch.Tensor | None,
        uniform: torch.Tensor | None,
        cut: torch.Tensor | None = None,
        final_obs: torch.Tensor | None = None,
    ) -> tuple[AgentOutput, torch.Tensor, torch.Tensor | None]:
        """`act`'s arguments and results, without the time dimension: logits [B, A], baseline and action [B]."""
        if not self._fast:
            out, core, values = act(self.agent, obs, last_action, reward, done, core, level, uniform, cut, final_obs)
            return AgentOutput(out.policy_logits[0], out.baseline[0], out.action[0]), core, values
        b = obs.shape[0]
        # The cut rows' final observations ride in the same products, as in `act`.
        x = obs if cut is None or final_obs is None or not cut.numel() else torch.cat([obs, final_obs])
        n = x.shape[0]
        views = self._views.get(n)
        if views is None:
            views = self._views[n] = [out[:n] for _, _, out in self._layers] + [self._heads[:n]]
        if self._layers:
            x = x.reshape(n, -1).float()
            for (weight_t, bias, _), buffer in zip(self._layers, views):  # MLPTorso: Linear, ReLU, Linear, ReLU, ...
                x = torch.addmm(bias, x, weight_t, out=buffer).relu_()
        else:
            x = self.agent.torso(x)  # SmallTorso: a convolution and one product
        # Both heads in one product, as in Agent.logits_and_values (same operands, so the same results). The
        # weights are concatenated at every call, so newly loaded ones are always the ones used.
        weights, biases = self._head_parts
        torch.cat(weights, out=self._head_weight)
        torch.cat(biases, out=self._head_bias)
        heads = torch.addmm(self._head_bias, x, self._head_weight.t(), out=views[-1])
        logits = heads[:b, :-1]
        action = sample_actions(logits, uniform)
        return AgentOutput(logits, heads[:b, -1], action), core, heads[b:, -1] if n > b else None
