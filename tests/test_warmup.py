"""``skdp-label warmup``: compiles the kernels on public synthetic data."""

import pytest

from skdp_label.__main__ import main
from skdp_label._warmup import _public_inputs, warm_up
from skdp_label.mechanisms import mechanism_names


def test_warm_up_reports_each_named_mechanism():
    seen = []
    seconds = warm_up(["laplace", "rr"], progress=lambda name, s: seen.append(name))
    assert list(seconds) == ["laplace", "rr"] == seen
    assert all(s >= 0 for s in seconds.values())


def test_unknown_name_fails_before_any_work():
    seen = []
    with pytest.raises(ValueError, match="no-such-mechanism"):
        warm_up(["laplace", "no-such-mechanism"], progress=lambda name, s: seen.append(name))
    assert seen == []


@pytest.mark.parametrize("name", mechanism_names())
def test_public_inputs_fit_every_mechanism_declaration(name):
    # The synthetic column lies inside the declared public inputs of each family.
    kwargs, column = _public_inputs(name)
    assert ("classes" in kwargs) == (name in mechanism_names("classification"))
    if "bounds" in kwargs:
        assert column.min() >= kwargs["bounds"][0] and column.max() <= kwargs["bounds"][1]


def test_command_line(capsys):
    assert main(["warmup", "discrete-laplace"]) == 0
    assert "discrete-laplace" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["warmup", "no-such-mechanism"])
