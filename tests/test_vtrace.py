"""V-trace against a deliberately slow double loop written from the paper's definition."""

import math

import pytest
import torch

from pronghorn import vtrace


def reference_vtrace(log_rhos, discounts, rewards, values, bootstrap_value, rho_bar=1.0, pg_rho_bar=1.0, lam=1.0):
    """v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i c_i) delta_t, with explicit loops over s and t."""
    T, B = values.shape
    rhos = torch.exp(log_rhos)
    vs = torch.zeros(T, B, dtype=torch.float64)
    for b in range(B):
        v_ext = [float(values[t, b]) for t in range(T)] + [float(bootstrap_value[b])]
        for s in range(T):
            total = v_ext[s]
            for t in range(s, T):
                weight = 1.0
                for i in range(s, t):  # prod of gamma_i * c_i over i in [s, t)
                    weight *= float(discounts[i, b]) * lam * min(1.0, float(rhos[i, b]))
                rho_t = float(rhos[t, b]) if rho_bar is None else min(rho_bar, float(rhos[t, b]))
                delta = rho_t * (float(rewards[t, b]) + float(discounts[t, b]) * v_ext[t + 1] - v_ext[t])
                total += weight * delta
            vs[s, b] = total
    pg = torch.zeros(T, B, dtype=torch.float64)
    for b in range(B):
        for s in range(T):
            v_next = float(vs[s + 1, b]) if s + 1 < T else float(bootstrap_value[b])
            rho = float(rhos[s, b]) if pg_rho_bar is None else min(pg_rho_bar, float(rhos[s, b]))
            pg[s, b] = rho * (float(rewards[s, b]) + float(discounts[s, b]) * v_next - float(values[s, b]))
    return vs, pg


def random_inputs(T=7, B=5, seed=0, episode_ends=True):
    g = torch.Generator().manual_seed(seed)
    log_rhos = torch.randn(T, B, generator=g, dtype=torch.float64) * 0.8
    discounts = torch.full((T, B), 0.9, dtype=torch.float64)
    if episode_ends:
        discounts[torch.rand(T, B, generator=g) < 0.25] = 0.0  # episodes ending inside the unroll
    rewards = torch.randn(T, B, generator=g, dtype=torch.float64)
    values = torch.randn(T, B, generator=g, dtype=torch.float64)
    bootstrap = torch.randn(B, generator=g, dtype=torch.float64)
    return log_rhos, discounts, rewards, values, bootstrap


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("thresholds", [(1.0, 1.0), (None, None), (2.0, 0.5)])
def test_matches_definition_on_random_inputs(seed, thresholds):
    inputs = random_inputs(seed=seed)
    got = vtrace.from_importance_weights(*inputs, clip_rho_threshold=thresholds[0], clip_pg_rho_threshold=thresholds[1])
    want_vs, want_pg = reference_vtrace(*inputs, rho_bar=thresholds[0], pg_rho_bar=thresholds[1])
    torch.testing.assert_close(got.vs, want_vs)
    torch.testing.assert_close(got.pg_advantages, want_pg)


@pytest.mark.parametrize("lam", [0.0, 0.5, 0.95])
def test_lambda_matches_definition(lam):
    inputs = random_inputs(seed=3)
    got = vtrace.from_importance_weights(*inputs, lambda_=lam)
    want_vs, want_pg = reference_vtrace(*inputs, lam=lam)
    torch.testing.assert_close(got.vs, want_vs)
    torch.testing.assert_close(got.pg_advantages, want_pg)


def test_lambda_zero_on_policy_gives_one_step_td_targets():
    log_rhos, discounts, rewards, values, bootstrap = random_inputs(seed=4)
    out = vtrace.from_importance_weights(torch.zeros_like(log_rhos), discounts, rewards, values, bootstrap, lambda_=0.0)
    v_tp1 = torch.cat([values[1:], bootstrap[None]])
    torch.testing.assert_close(out.vs, rewards + discounts * v_tp1)


def test_golden_values_by_hand():
    # T=2, B=1, on-policy (rho=1), gamma=0.5, no episode end:
    # v_1 = r_1 + g*V_boot = 1 + 0.5*4 = 3;  v_0 = r_0 + g*v_1 = 2 + 1.5 = 3.5
    zeros = torch.zeros(2, 1)
    out = vtrace.from_importance_weights(zeros, torch.full((2, 1), 0.5), torch.tensor([[2.0], [1.0]]), torch.tensor([[10.0], [-3.0]]), torch.tensor([4.0]))
    torch.testing.assert_close(out.vs, torch.tensor([[3.5], [3.0]]))
    # pg_0 = r_0 + g*v_1 - V_0 = 2 + 1.5 - 10 = -6.5;  pg_1 = 1 + 0.5*4 - (-3) = 6
    torch.testing.assert_close(out.pg_advantages, torch.tensor([[-6.5], [6.0]]))


def test_on_policy_is_n_step_return():
    """With rho = 1 everywhere, v_s is the discounted n-step return bootstrapped at T."""
    _, discounts, rewards, values, bootstrap = random_inputs(seed=3, episode_ends=True)
    out = vtrace.from_importance_weights(torch.zeros_like(values), discounts, rewards, values, bootstrap)
    ret = bootstrap.clone()
    for t in reversed(range(values.shape[0])):
        ret = rewards[t] + discounts[t] * ret
        torch.testing.assert_close(out.vs[t], ret)


def test_episode_end_cuts_the_trace():
    """A zero discount at t: targets before t do not depend on anything after t."""
    log_rhos, discounts, rewards, values, bootstrap = random_inputs(seed=1, episode_ends=False)
    discounts[3] = 0.0
    a = vtrace.from_importance_weights(log_rhos, discounts, rewards, values, bootstrap)
    rewards2, values2 = rewards.clone(), values.clone()
    rewards2[4:] += 100.0
    values2[4:] -= 50.0
    b = vtrace.from_importance_weights(log_rhos, discounts, rewards2, values2, bootstrap + 7.0)
    torch.testing.assert_close(a.vs[:4], b.vs[:4])
    torch.testing.assert_close(a.pg_advantages[:4], b.pg_advantages[:4])


def test_trailing_dims_and_no_gradient():
    log_rhos, discounts, rewards, values, bootstrap = (
        x.unsqueeze(-1).repeat(1, 1, 3) if x.dim() == 2 else x.unsqueeze(-1).repeat(1, 3) for x in random_inputs(seed=2)
    )
    values = values.clone().requires_grad_(True)
    out = vtrace.from_importance_weights(log_rhos, discounts, rewards, values, bootstrap)
    assert out.vs.shape == values.shape and not out.vs.requires_grad and not out.pg_advantages.requires_grad
    want_vs, _ = reference_vtrace(log_rhos[..., 1], discounts[..., 1], rewards[..., 1], values[..., 1].detach(), bootstrap[..., 1])
    torch.testing.assert_close(out.vs[..., 1], want_vs)


def test_from_logits_uses_log_ratio_of_taken_actions():
    g = torch.Generator().manual_seed(4)
    T, B, A = 6, 4, 3
    behaviour, target = torch.randn(T, B, A, generator=g), torch.randn(T, B, A, generator=g)
    actions = torch.randint(0, A, (T, B), generator=g)
    _, discounts, rewards, values, bootstrap = (x.float() for x in random_inputs(T, B, seed=4))
    out = vtrace.from_logits(behaviour, target, actions, discounts, rewards, values, bootstrap)

    def pick(logits):
        return torch.log_softmax(logits, -1).gather(-1, actions[..., None]).squeeze(-1)

    torch.testing.assert_close(out.log_rhos, pick(target) - pick(behaviour))
    direct = vtrace.from_importance_weights(pick(target) - pick(behaviour), discounts, rewards, values, bootstrap)
    torch.testing.assert_close(out.vs, direct.vs)
    torch.testing.assert_close(out.pg_advantages, direct.pg_advantages)
    assert math.isclose(float(out.target_action_log_probs.exp().max()), float(pick(target).exp().max()), rel_tol=1e-6)
