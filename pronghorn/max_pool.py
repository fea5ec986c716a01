"""The deep ResNet's max-pool (3x3, stride 2, padding 1), which a compiled learner on CPU runs as ATen's kernels.

Inductor lowers max-pooling and its backward pass into loops of its own. On CPU (torch 2.13+cpu, a 2-core AMD
EPYC) those took about 3x what ATen's kernels take: forward and backward of the deep ResNet's three pools at
Pong's batch of 168 frames, one thread, 383 ms compiled against 122 ms eager and 118 ms through this op, and a
whole compiled update 633-644 ms with it against 777-816 ms without (docs/throughput_log.md, "The deep
ResNet's max-pools compiled"). Wrapped in a custom op the pool is one opaque call to the compiler, which runs
ATen's forward and backward kernels as eager does, with the same results. Eager passes and other devices call
`F.max_pool2d` as before.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_aten = torch.ops.aten
_KERNEL, _STRIDE, _PADDING = [3, 3], [2, 2], [1, 1]


def _pool(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The pooled values and, for the backward pass, the flat index of each one's input (ATen's kernel)."""
    return _aten.max_pool2d_with_indices(x, _KERNEL, _STRIDE, _PADDING)


def _pool_backward(grad: torch.Tensor, x: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    return _aten.max_pool2d_with_indices_backward(grad, x, _KERNEL, _STRIDE, _PADDING, [1, 1], False, indices)


# Each op's fake (shape) function is the op itself: on fake tensors ATen's meta kernels give the shapes and strides.
_max_pool = torch.library.custom_op("pronghorn::max_pool_3x3_s2", _pool, mutates_args=())
_max_pool.register_fake(_pool)
_max_pool_backward = torch.library.custom_op("pronghorn::max_pool_3x3_s2_backward", _pool_backward, mutates_args=())
_max_pool_backward.register_fake(_pool_backward)


def _save(ctx, inputs: tuple[torch.Tensor], output: tuple[torch.Tensor, torch.Tensor]) -> None:
    ctx.save_for_backward(inputs[0], output[1])  # what eager's max-pool keeps: its input and the indices


def _backward(ctx, grad: torch.Tensor, _indices_grad: torch.Tensor | None) -> torch.Tensor:
    x, indices = ctx.saved_tensors
    return _max_pool_backward(grad, x, indices)


_max_pool.register_autograd(_backward, setup_context=_save)


class MaxPool(nn.Module):
    """nn.MaxPool2d(3, stride=2, padding=1), as ATen's kernels when compiled on CPU (see the module's docstring)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.compiler.is_compiling() and x.device.type == "cpu":
            return _max_pool(x)[0]
        return F.max_pool2d(x, _KERNEL, stride=_STRIDE, padding=_PADDING)
