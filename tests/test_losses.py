import pytest
import torch
import torch.nn.functional as F

from pronghorn.losses import baseline_loss, clip_rewards, clipped_policy_loss, entropy_loss, policy_gradient_loss, standardized
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


def test_clipped_policy_loss_golden_values():
    # rho = 2 with A = +1 is clipped to 1.2; rho = 0.5 with A = +1 is not (the min keeps 0.5);
    # rho = 0.5 with A = -1 is clipped to 0.8 (min(-0.5, -0.8)); rho = 2 with A = -1 is not (-2).
    log_rhos = torch.log(torch.tensor([[2.0, 0.5], [0.5, 2.0]]))
    adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    torch.testing.assert_close(clipped_policy_loss(log_rhos, adv, 0.2), -torch.tensor(1.2 + 0.5 - 0.8 - 2.0))


def test_clipped_policy_loss_is_the_policy_gradient_on_policy_and_stops_outside_the_clip():
    torch.manual_seed(0)
    logits = torch.randn(4, 3, 5, dtype=torch.float64, requires_grad=True)
    actions = torch.randint(0, 5, (4, 3))
    adv = torch.randn(4, 3, dtype=torch.float64)

    def grad(shift: torch.Tensor | float) -> torch.Tensor:
        # log pi - log mu with mu = pi moved by `shift` in log space (only pi carries the gradient)
        log_rhos = action_log_probs(logits, actions) - action_log_probs(logits.detach(), actions) + shift
        return torch.autograd.grad(clipped_policy_loss(log_rhos, adv, 0.1), logits)[0]

    # Behaviour = target: rho = 1 everywhere, and the gradient is IMPALA's policy gradient's.
    (g_pg,) = torch.autograd.grad(policy_gradient_loss(logits, actions, adv), logits)
    torch.testing.assert_close(grad(0.0), g_pg)
    # Moved past 1 + clip where the advantage is positive, or below 1 - clip where it is negative: no gradient
    # from those steps; moved the other way, the step still gets one (the min keeps the unclipped term).
    shift = torch.where(adv > 0, 0.5, -0.5)
    assert grad(shift).abs().max() == 0
    g_in = grad(-shift)
    assert (g_in.abs().sum(-1) > 0).all()


def test_clipped_policy_loss_does_not_flow_into_advantages():
    log_rhos = torch.zeros(2, 2, requires_grad=True)
    adv = torch.randn(2, 2, requires_grad=True)
    clipped_policy_loss(log_rhos, adv, 0.2).backward()
    assert adv.grad is None and log_rhos.grad is not None


def test_standardized_advantages_golden_values_and_edge_cases():
    # mean 2.5, population std sqrt(1.25): [1, 2, 3, 4] -> [-3, -1, 1, 3] / sqrt(5)
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    torch.testing.assert_close(standardized(a), torch.tensor([[-3.0, -1.0], [1.0, 3.0]]) / 5**0.5)
    # Invariant to a positive affine change of the advantages, so to the rewards' scale.
    x = torch.randn(20, 8, dtype=torch.float64)
    torch.testing.assert_close(standardized(x), standardized(7.0 * x - 3.0))
    out = standardized(x)
    assert abs(out.mean().item()) < 1e-12 and abs(out.std(correction=0).item() - 1) < 1e-12
    # All equal (a reward-free stretch with a settled baseline), or one step: zeros, not NaN or a blow-up.
    assert torch.equal(standardized(torch.full((5, 3), 0.25)), torch.zeros(5, 3))
    assert torch.equal(standardized(torch.tensor([[4.0]])), torch.zeros(1, 1))


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
