"""A model's parameters, and their gradients, as views of one contiguous tensor each.

An optimizer step, gradient clipping, zeroing the gradients and copying the weights to the actors each
loop over the parameter tensors, a few small ops per tensor. On CartPole's MLP (8 tensors) that was about
a seventh of a B=16 update. With every parameter a view of one flat tensor, each is a few ops on that one
(and publishing the weights is one copy), and RMSProp's step is its four ops on it (`optimizer_step`).

The module keeps its own Parameter objects (names, state_dict, hooks and optimizer-free code unchanged);
only their storage moves. Autograd adds a new gradient into an existing `.grad` in place, so gradients
land in the flat gradient: zero it between steps rather than setting `.grad` to None.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn


def flatten_parameters(module: nn.Module) -> nn.Parameter:
    """Move every parameter of `module` (values kept) into one flat Parameter, in `parameters()` order.

    Returns the flat Parameter; its `.grad` is a flat tensor of zeros whose slices are the parameters'
    `.grad`. Parameters that need no gradient (PopArt's statistics) are included, so the flat tensor is
    the whole state the actors need; their gradient stays zero, so no optimizer step moves them."""
    params = list(module.parameters())
    flat = nn.Parameter(torch.cat([p.detach().reshape(-1) for p in params]))
    flat.grad = torch.zeros_like(flat)
    offset = 0
    for p in params:
        n = p.numel()
        p.data = flat.data[offset : offset + n].view_as(p)
        p.grad = flat.grad[offset : offset + n].view_as(p)
        offset += n
    return flat


def flat_holder(module: nn.Module) -> nn.Module:
    """Flatten `module`'s parameters (flatten_parameters) and return a module whose one parameter is that flat
    tensor. Loading weights into the holder (a WeightSource's `load_into`, load_flat) writes through to
    `module`'s parameters in one copy, without walking `module`'s submodules to find them."""
    holder = nn.Module()
    holder.register_parameter("flat", flatten_parameters(module))
    return holder


def flat_view(params: Sequence[torch.Tensor]) -> torch.Tensor | None:
    """The one tensor that `params` are consecutive views of, in order (as `flatten_parameters` leaves
    them), or None if they are laid out any other way."""
    if not params:
        return None
    first = params[0]
    offset = first.storage_offset()
    for p in params:
        if not p.is_contiguous() or p.untyped_storage().data_ptr() != first.untyped_storage().data_ptr() or p.storage_offset() != offset:
            return None
        offset += p.numel()
    return first.detach().as_strided((offset - first.storage_offset(),), (1,), first.storage_offset())


def optimizer_state_to_flat(state: dict[str, Any], shapes: list[torch.Size]) -> dict[str, Any]:
    """An optimizer state_dict saved with one entry per parameter, rewritten for one flat parameter.

    Checkpoints written before the parameters were flattened keep per-parameter RMSprop/Adam state
    (square averages, moments, step counts); this concatenates each per-parameter tensor in parameter
    order (zeros where a parameter had no state: it had no gradient, so no step moved it), so those runs
    resume with the same optimizer state. A state already for one parameter is returned unchanged."""
    groups = state["param_groups"]
    if len(groups) != 1 or len(groups[0]["params"]) != len(shapes) or len(shapes) == 1:
        return state
    ids = groups[0]["params"]
    per_param = [state["state"].get(i, {}) for i in ids]
    keys = {k for s in per_param for k in s}
    flat_state: dict[str, Any] = {}
    for key in keys:
        values = [s.get(key) for s in per_param]
        if all(v is None or v.dim() == 0 for v in values):  # step counts: the same for every parameter stepped
            flat_state[key] = next(v for v in values if v is not None).clone()
        else:
            flat_state[key] = torch.cat([(v if v is not None else torch.zeros(shape)).reshape(-1) for v, shape in zip(values, shapes)])
    return {"state": {0: flat_state} if flat_state else {}, "param_groups": [{**groups[0], "params": [0]}]}


@torch.no_grad()
def optimizer_step(optimizer: torch.optim.Optimizer, flat: torch.Tensor) -> None:
    """`optimizer.step()` for an optimizer over the one tensor `flat`: RMSProp's (plain, not centered, no
    weight decay) as its own ops on the optimizer's state, in the order and with the values of PyTorch's
    single-tensor RMSprop, so the weights and the state come out the same; any other optimizer, and RMSProp's
    first step (which makes its state), through `optimizer.step()`.

    Why: between two updates `Optimizer.step` (its hooks, grouping and state lookup around the same ops) took
    165-185 us of thread CPU at CartPole's best batch in bfloat16, compiled, and these four ops 52 (39 and 16
    back to back); a whole update at CartPole's defaults is about 1.1 ms (benchmarks/learner_glue.py)."""
    state = optimizer.state.get(flat)
    group = optimizer.param_groups[0]
    plain = isinstance(optimizer, torch.optim.RMSprop) and not (
        group["centered"] or group["weight_decay"] or group["maximize"] or group["differentiable"] or group["capturable"]
    )
    if not (plain and state and len(optimizer.param_groups) == 1 and len(group["params"]) == 1 and group["params"][0] is flat):
        optimizer.step()
        return
    grad, alpha, momentum = flat.grad, group["alpha"], group["momentum"]
    assert grad is not None
    state["step"] += 1
    square_avg = state["square_avg"]
    square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
    avg = square_avg.sqrt().add_(group["eps"])
    if momentum > 0:
        buf = state["momentum_buffer"]
        buf.mul_(momentum).addcdiv_(grad, avg)
        flat.add_(buf, alpha=-group["lr"])
    else:
        flat.addcdiv_(grad, avg, value=-group["lr"])


@torch.no_grad()
def load_flat(params: Sequence[torch.Tensor], flat: torch.Tensor) -> None:
    """Copy `flat` (every parameter, in order, as `flatten_parameters` lays them out) into `params`, in place.

    In place, so views of the parameters that others keep (the acting step's transposed weights) stay
    valid: one copy when the parameters are themselves views of one tensor, else one per parameter."""
    view = flat_view(params)
    if view is not None:
        view.copy_(flat)
        return
    offset = 0
    for p in params:
        n = p.numel()
        p.copy_(flat[offset : offset + n].view_as(p))
        offset += n
