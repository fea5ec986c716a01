"""Config built in Python, not through the CLI, is held to the same choices (config_checks.check)."""

import dataclasses
import typing

import pytest

from pronghorn.config import Config
from pronghorn.config_checks import ConfigError, choices


def test_every_literal_field_is_checked():
    literal_fields = {f.name for f in dataclasses.fields(Config) if "Literal[" in str(f.type)}
    assert literal_fields and set(choices(Config)) == literal_fields


@pytest.mark.parametrize("name", sorted(choices(Config)))
def test_a_value_outside_a_fields_choices_is_refused_with_the_choices(name):
    allowed = choices(Config)[name]
    assert getattr(Config(), name) in allowed  # the default is one of them
    flag = "--" + name.replace("_", "-")
    with pytest.raises(ConfigError) as err:
        Config(**{name: "no-such-choice"})
    message = str(err.value)
    assert message.startswith(f"{flag} is 'no-such-choice': choose one of ")
    assert all(str(v) in message for v in allowed if v is not None)


def test_choices_read_literals_inside_optional():
    @dataclasses.dataclass
    class Small:
        mode: typing.Literal["a", "b"] | None = None
        size: int = 1

    assert choices(Small) == {"mode": ("a", "b", None)}
