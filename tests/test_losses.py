import pytest
import torch
import torch.nn.functional as F

from pronghorn.losses import baseline_loss, clip_rewards, entropy_loss, policy_gradient_loss
from pronghorn.softmax import action_log_probs, log_softmax, softmax


def test_reward_clipping_modes():
    r = torch.tensor([-10.0, -0.5, 0.0, 0.5, 10.0])
    torch.testing.assert_close(clip_rewards(r, "abs_one"), torch.tensor([-1.0, -0.5, 0.0, 0.5, 1.0]))
    torch.testing.assert_close(clip_rewards(r, "none"), r)
    soft = clip_rewards(r, "soft_asymmetric")
    torch.testing.assert_close(soft, torch.where(r < 0, 0.3, 1.0) * 5 * torch.tanh(r / 5))
    assert soft[-1] < 5 and soft[0] > -1.5  # bounded, negatives shrunk more


def test_losses_are_sums_over_time_and_batch():
    logits = torch.zeros(3, 2, 4)  # uniform policy
    actions = torch.zeros(3, 2, dtype=torch.long)
    adv = torch.ones(3, 2)
    # -sum log(1/4) * 1 over 6 entries
    torch.testing.assert_close(policy_gradient_loss(logits, actions, adv), torch.tensor(6 * torch.log(torch.tensor(4.0)).item()))
    torch.testing.assert_close(baseline_loss(torch.ones(3, 2) * 2, torch.zeros(3, 2)), torch.tensor(0.5 * 6 * 4.0))
    torch.testing.assert_close(entropy_loss(logits), torch.tensor(-6 * torch.log(torch.tensor(4.0)).item()))


def test_policy_gradient_does_not_flow_into_advantages():
    logits = torch.randn(2, 2, 3, requires_grad=True)
    adv = torch.randn(2, 2, requires_grad=True)
    policy_gradient_loss(logits, torch.zeros(2, 2, dtype=torch.long), adv).backward()
    assert adv.grad is None and logits.grad is not None


@pytest.mark.parametrize("shape", [(3, 2, 4), (21, 512, 2), (5, 200, 6)], ids=["few-rows", "across-rows-A2", "across-rows-A6"])
def test_the_action_softmax_equals_torch_s_in_values_and_gradients(shape):
    # Above 512 rows the CPU path takes the softmax over the transposed view (faster there): same numbers.
    torch.manual_seed(0)
    x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
    actions = torch.randint(0, shape[-1], shape[:-1])
    weights = torch.randn(shape, dtype=torch.float64)
    mine = [log_softmax(x), softmax(x), action_log_probs(x, actions)]
    theirs = [F.log_softmax(x, -1), F.softmax(x, -1), F.log_softmax(x, -1).gather(-1, actions[..., None]).squeeze(-1)]
    for a, b in zip(mine, theirs):
        torch.testing.assert_close(a, b)
        w = weights[..., : a.shape[-1]] if a.dim() == x.dim() else weights[..., 0]
        (ga,) = torch.autograd.grad((a * w).sum(), x)
        (gb,) = torch.autograd.grad((b * w).sum(), x)
        torch.testing.assert_close(ga, gb)
