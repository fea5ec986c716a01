"""benchmarks/throughput.py's named settings are configs pronghorn accepts (a typo would surface only in a long run)."""

from pronghorn.config import Config
from tests.helpers import load_benchmark


def test_every_throughput_setting_is_a_valid_config():
    throughput = load_benchmark("throughput")
    assert set(throughput.DEFAULT_SETTINGS) <= set(throughput.SETTINGS)
    for name, fields in throughput.SETTINGS.items():
        cfg = Config(**{"num_actors": 2, **fields})  # validated on construction: raises on a bad field or value
        assert cfg.env == fields["env"], name
        if name.endswith("-pinned"):
            assert cfg.pin_actors == "on", name  # the row exists to time the pinned placement against `auto`
