"""One acting step: E observations in, actions out (and V(final_obs) where a time limit cut an episode).

`act` is the step for any agent. `Acting` is what the actors and the inference server call: the same
step, with buffers kept from one call to the next and, for the MLP and the small-grid CNN on CPU, without
the modules' per-call machinery (the MLP's step runs in numpy).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from pronghorn.models import Agent, MLPTorso, SmallTorso, sample_actions
from pronghorn.records import AgentOutput

# The heads' logits [B, A], values [B] and the cut rows' values [n] (None without cut rows), as views of one buffer.
_HeadArrays = tuple[np.ndarray, np.ndarray, np.ndarray | None]
_HeadTensors = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]


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

    Two agents on CPU (without LSTM, PopArt or observation statistics) take a shorter path; any other agent
    goes through `act`. All give the same logits, values and actions (tested).
    - The MLP runs in numpy, on numpy views of the agent's weights (weights are loaded into the agent in
      place, which the views see) and buffers kept here. On a few hundred rows or fewer its cost is the
      ops' dispatch, not their arithmetic, and torch's dispatch costs more than numpy's, the more so
      between env steps (docs/throughput_log.md, "The MLP acts in numpy"). `numpy_answer` is that step with numpy in and
      out, which the actors call so that no torch call falls between their env steps.
    - The small-grid CNN (MinAtar) calls its torso module and nothing else, then both heads in one product.

    What a call returns may view the buffers: it holds until the next call, so copy what must outlive it.
    The actions are a new tensor at every call: the actor hands the last one back as the next call's
    `last_action` and writes it into the slot after that call.
    """

    def __init__(self, agent: Agent, max_rows: int):
        self.agent = agent
        modules: list[nn.Module] = list(agent.torso.net) if isinstance(agent.torso, MLPTorso) else []
        layers = [m for m in modules[0::2] if isinstance(m, nn.Linear)]
        relus = [m for m in modules[1::2] if isinstance(m, nn.ReLU)]
        mlp = bool(layers) and len(layers) == len(relus) == len(modules) // 2 and len(modules) % 2 == 0
        plain = (
            not agent.use_lstm
            and agent.baseline is not None  # not PopArt
            and agent.obs_norm is None  # the products read raw observations
            and agent.policy.weight.device.type == "cpu"
            and agent.policy.weight.dtype == torch.float32
        )
        self.mode = "numpy" if plain and mlp else "torso" if plain and isinstance(agent.torso, SmallTorso) else "act"
        if self.mode == "act":
            return
        assert agent.baseline is not None
        rows = 2 * max_rows  # a time limit can add one row per environment
        heads = (agent.policy, agent.baseline)
        width = agent.num_actions + 1
        if self.mode == "numpy":
            # Each product takes its bias as one more input row: its input carries a last column of ones and
            # its weight, transposed, a last row of biases, so no pass over [rows, width] adds them (on 512 rows
            # that add took 9 us a layer, about twice the ReLU's pass; the answer alone 105 -> 97-99 us, actor_loop.py).
            # The ones column is a column of the input buffer, set once; each hidden layer's weight but the last
            # carries one more output column, zero but for a 1 in its bias row, which keeps the ones column in its
            # output (the ReLU leaves a 1 as it is) for the next product. The last hidden layer's output has no
            # ones column: the heads' biases are added by the copy that transposes the heads' output, which runs
            # anyway, so its product is 64 columns wide, not 65, a whole number of AVX-512 vectors (on 512 rows
            # 39-40 against 45-47 us, and the heads' product 4.4 against 6.3). A layer's entry: its weight
            # [in + 1, out + 1] ([in + 1, out] for the last), refilled from the agent's parameters at every call
            # so that newly loaded weights are the ones used; the parameters it is filled from; its output buffer
            # and zeros as large: numpy's maximum against an array is vectorised, while against the scalar 0 it
            # took 4x as long on 512 rows.
            self._np_input = np.ones((rows, layers[0].in_features + 1), np.float32)
            self._layers = []
            for k, layer in enumerate(layers):
                carry = k < len(layers) - 1
                width_out = layer.out_features + carry
                weight = np.zeros((layer.in_features + 1, width_out), np.float32)
                if carry:
                    weight[-1, -1] = 1.0  # the ones column, carried to the output for the next product's bias row
                params = (layer.weight.detach().numpy(), layer.bias.detach().numpy())
                self._layers.append((weight, params, np.empty((rows, width_out), np.float32), np.zeros((rows, width_out), np.float32)))
            self._np_parts = ([h.weight.detach().numpy() for h in heads], [h.bias.detach().numpy() for h in heads])
            # The heads' weights transposed, [in, A + 1], contiguous: through a transposed view of [A + 1, in],
            # BLAS took 11 us for CartPole's 512 x 64 by 64 x 3, against 5 for this layout (one BLAS thread; the
            # whole step 110 -> 99 us). Their biases, [A + 1, 1], are added as the output is transposed.
            self._np_head_weight_t = np.empty((agent.policy.in_features, width), np.float32)
            self._np_head_bias = np.empty((width, 1), np.float32)
            # The heads' product is taken as [rows, A + 1], then copied transposed: with the activations as
            # the left operand BLAS runs at speed, while W @ x.T (A + 1 = 3 output rows) took 21 us on 512
            # rows.
            self._np_heads = np.empty((rows, width), np.float32)
            # The heads' output transposed, [A + 1, rows]: sampling reduces over actions, and numpy reduces a
            # few long rows far faster than many short ones (on 512 rows, 2-3x for max), and the sampler adds and
            # compares whole rows.
            self._np_heads_t = np.empty((width, rows), np.float32)
            # per (rows, envs): the heads' buffer, and its logits [envs, A], values [envs] and cut rows' values
            # [rows - envs] as numpy views; as tensors viewing them for `__call__` (made once: a view costs ~0.5 us)
            self._np_views: dict[tuple[int, int], tuple[np.ndarray, _HeadArrays]] = {}
            self._torch_views: dict[tuple[int, int], _HeadTensors] = {}
            return
        self._head_parts = ([h.weight.detach() for h in heads], [h.bias.detach() for h in heads])
        self._head_weight = torch.empty(width, agent.policy.in_features)
        self._head_bias = torch.empty(width)
        self._heads = torch.empty(rows, width)

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
        cuts = cut is not None and final_obs is not None and cut.numel() > 0
        if self.mode == "numpy":  # no autograd to switch off: entering inference mode cost more than the products
            b = obs.shape[0]
            heads_t, arrays = self._numpy_heads(obs.numpy(), final_obs.numpy() if cuts and final_obs is not None else None)
            key = (heads_t.shape[1], b)
            tensors = self._torch_views.get(key)
            if tensors is None:
                tensors = self._torch_views[key] = (
                    torch.from_numpy(arrays[0]),
                    torch.from_numpy(arrays[1]),
                    None if arrays[2] is None else torch.from_numpy(arrays[2]),
                )
            logits, (logits_t, baseline_t, values_t) = arrays[0], tensors
            draws = (uniform if uniform is not None else torch.rand(b, 1)).numpy()
            action = torch.from_numpy(sample_actions_numpy(logits, draws))
            return AgentOutput(logits_t, baseline_t, action), core, values_t
        with torch.inference_mode():  # lighter than no_grad per call: no version counters or views tracked
            if self.mode == "act":
                out, core, values = act(self.agent, obs, last_action, reward, done, core, level, uniform, cut, final_obs)
                return AgentOutput(out.policy_logits[0], out.baseline[0], out.action[0]), core, values
            out, values = self._torso_step(obs, uniform, final_obs if cuts else None)
            return out, core, values

    def _torso_step(self, obs: torch.Tensor, uniform: torch.Tensor | None, final_obs: torch.Tensor | None) -> tuple[AgentOutput, torch.Tensor | None]:
        """The small-grid CNN's step: its torso, then both heads in one product; cut rows' final_obs ride along."""
        b = obs.shape[0]
        x = self.agent.torso(obs if final_obs is None else torch.cat([obs, final_obs]))  # a convolution and one product
        # Both heads in one product, with the operands of Agent.logits_and_values (which writes them action-major
        # on CPU, [A+1, N]: the same values up to the products' rounding). The weights are concatenated at every
        # call, so newly loaded ones are always the ones used.
        weights, biases = self._head_parts
        torch.cat(weights, out=self._head_weight)
        torch.cat(biases, out=self._head_bias)
        n = x.shape[0]
        heads = torch.addmm(self._head_bias, x, self._head_weight.t(), out=self._heads[:n])
        logits = heads[:b, :-1]
        action = sample_actions(logits, uniform)
        return AgentOutput(logits, heads[:b, -1], action), heads[b:, -1] if n > b else None

    def numpy_answer(self, obs: np.ndarray, uniform: np.ndarray, final_obs: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """The MLP's step with numpy in and out (mode "numpy" only): what `LocalPolicy` calls, with no torch call.

        obs [B, *obs_shape]; uniform [B, 1] float32 draws; final_obs [n, *obs_shape] of the rows a time limit
        cut, or None. Returns the actions [B] int64 (a new array every call), the logits [B, A] and the cut
        rows' values [n] (or None): those two view buffers that the next call overwrites.
        """
        _, (logits, _, values) = self._numpy_heads(obs, final_obs)
        return sample_actions_numpy(logits, uniform), logits, values

    def _numpy_heads(self, obs: np.ndarray, final_obs: np.ndarray | None) -> tuple[np.ndarray, _HeadArrays]:
        """The MLP's products on obs [b, ...] and then any cut rows' final_obs [n - b, ...], whose values come second
        (they ride in the same products, as in `act`). Returns the heads [A + 1, n] and their views (`_np_views`)."""
        b = obs.shape[0]
        cut = 0 if final_obs is None else len(final_obs)
        n = b + cut
        x = self._np_input[:n]  # its last column is ones: the first product's bias row multiplies it
        x[:b, :-1] = obs.reshape(b, -1)  # cast to float32 as it is written
        if final_obs is not None and cut:
            x[b:, :-1] = final_obs.reshape(cut, -1)
        for weight, (w, bias), buffer, zeros in self._layers:  # MLPTorso: Linear, ReLU, Linear, ReLU, ...
            out_features = w.shape[0]
            weight[:-1, :out_features] = w.T
            weight[-1, :out_features] = bias
            out = np.matmul(x, weight, out=buffer[:n])  # x W^T + b, and (but after the last layer) the ones column again
            x = np.maximum(out, zeros[:n], out=out)
        weights, biases = self._np_parts  # refilled at every call, as the torch path concatenates them
        np.concatenate([w.T for w in weights], axis=1, out=self._np_head_weight_t)
        np.concatenate(biases, out=self._np_head_bias[:, 0])
        views = self._np_views.get((n, b))
        if views is None:
            heads_t = self._np_heads_t[:, :n]
            views = self._np_views[n, b] = (heads_t, (heads_t[:-1, :b].T, heads_t[-1, :b], heads_t[-1, b:] if n > b else None))
        heads = np.matmul(x, self._np_head_weight_t, out=self._np_heads[:n])
        np.add(heads.T, self._np_head_bias, out=views[0])  # [A + 1, n]: the heads' rows are the actions, biases added
        return views


def sample_actions_numpy(logits: np.ndarray, uniform: np.ndarray) -> np.ndarray:
    """`models.sample_actions` in numpy: one action per row of logits [N, A], given draws uniform [N, 1] in [0, 1).

    The action is the number of entries of the (unnormalised) CDF below u x its total. NaN logits compare
    false everywhere and give action 0. It works on the transpose, [A, N], so it is fastest when that is
    contiguous (logits a transposed view, as `Acting` passes them).
    """
    logits_t = logits.T
    cdf = np.exp(logits_t - logits_t.max(axis=0))
    # The running sum and the count, one row of A at a time: the same sums in the same order as np.cumsum
    # along axis 0, and the same comparisons as np.count_nonzero, but on 512 rows and 2 actions the two
    # reductions took 10 of the step's 15 us, and this 7 in all (6 actions: 22 -> 16 us).
    for a in range(1, len(cdf)):
        np.add(cdf[a - 1], cdf[a], out=cdf[a])
    threshold = uniform[:, 0] * cdf[-1]
    action = (cdf[0] < threshold).astype(np.int64)
    for a in range(1, len(cdf) - 1):  # the last entry, the total, is never below u x itself
        action += cdf[a] < threshold
    return action
