import pytest
import torch

from pronghorn.models import Agent


@pytest.mark.parametrize("model,shape", [("mlp", (4,)), ("shallow", (4, 84, 84)), ("deep", (4, 84, 84))])
@pytest.mark.parametrize("lstm", [False, True])
def test_shapes_time_major(model, shape, lstm):
    agent = Agent(shape, 6, model=model, lstm=lstm)
    T, B = 3, 2
    obs = torch.randint(0, 255, (T, B, *shape), dtype=torch.uint8) if len(shape) == 3 else torch.randn(T, B, *shape)
    out, state = agent(obs, torch.zeros(T, B, dtype=torch.long), torch.zeros(T, B), torch.zeros(T, B, dtype=torch.bool), agent.initial_state(B))
    assert out.policy_logits.shape == (T, B, 6) and out.baseline.shape == (T, B) and out.action.shape == (T, B)
    assert state.shape == agent.initial_state(B).shape
    greedy, _ = agent(obs, torch.zeros(T, B, dtype=torch.long), torch.zeros(T, B), torch.zeros(T, B, dtype=torch.bool), agent.initial_state(B), greedy=True)
    torch.testing.assert_close(greedy.action, greedy.policy_logits.argmax(-1))


def test_lstm_state_resets_where_an_episode_starts():
    torch.manual_seed(0)
    agent = Agent((4,), 3, lstm=True)
    T, B = 5, 2
    obs = torch.randn(T, B, 4)
    last_action = torch.randint(0, 3, (T, B))
    reward = torch.randn(T, B)
    done = torch.zeros(T, B, dtype=torch.bool)
    done[2, 0] = True  # env 0 starts a new episode at t=2
    state = torch.randn(2, B, agent.core_size)
    out, _ = agent(obs, last_action, reward, done, state)
    # From t=2 on, env 0 must behave as if started fresh at t=2 (zero state, zeroed action/reward inputs).
    fresh, _ = agent(obs[2:, :1], torch.zeros(T - 2, 1, dtype=torch.long).index_fill(0, torch.tensor([1, 2]), 0) + last_action[2:, :1] * (torch.arange(T - 2)[:, None] > 0),
                     reward[2:, :1] * (torch.arange(T - 2)[:, None] > 0), done[2:, :1], torch.zeros(2, 1, agent.core_size))
    torch.testing.assert_close(out.baseline[2:, 0], fresh.baseline[:, 0])
    # ...while env 1 carries its memory through.
    carried, _ = agent(obs[2:, 1:], last_action[2:, 1:], reward[2:, 1:], done[2:, 1:], torch.zeros(2, 1, agent.core_size))
    assert not torch.allclose(out.baseline[2:, 1], carried.baseline[:, 0])


def test_image_model_on_vector_observations_is_refused():
    with pytest.raises(ValueError, match="--model shallow needs image observations"):
        Agent((4,), 2, model="shallow")
