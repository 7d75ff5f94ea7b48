"""The demo (main job) runs and reports every mechanism."""

from skdp_label.__main__ import main
from skdp_label.mechanisms import mechanism_names


def test_demo_table_lists_every_regression_mechanism(capsys):
    assert main(["demo", "--repeats", "1"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0] for line in out.splitlines() if line.strip()}
    for name in mechanism_names("regression"):
        assert name in rows
    assert "RRWithPrior" in out and "non-private" in out
    # Every cell is a number: RMSE is positive, accuracy in [0, 1].
    for line in out.splitlines():
        if line.split() and line.split()[0] in mechanism_names("regression"):
            assert all(float(v) > 0 for v in line.split()[1:])
