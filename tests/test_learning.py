import pytest

import pronghorn
from tests.helpers import assert_no_leaks


@pytest.mark.learning
def test_cartpole_defaults_reach_450_within_500k_frames(tmp_path):
    result = pronghorn.train(pronghorn.Config(logdir=str(tmp_path / "cartpole"), progress=False))
    assert result.frames <= 500_000 + 16 * 20 * 4  # within the budget (one batch of slack)
    assert result.mean_return >= 450, result
    assert_no_leaks()
