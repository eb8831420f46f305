"""``specmon breakeven``: the lesson's table, JSON for machines, bad arguments."""

from __future__ import annotations

import subprocess
import sys

import pytest

from specmon.cli.main import main
from tests.support.strict_json import strict_loads


def test_default_table_matches_the_lesson(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["breakeven"]) == 0
    out = capsys.readouterr().out
    rows = {
        line.split()[0]: line.split()[1:]
        for line in out.splitlines()
        if line[:1] in ("2", "4", "8")
    }
    # three decimals; the lesson's two-decimal table is these rounded half-up
    assert rows == {
        "2": ["0.171", "0.306", "0.475"],
        "4": ["0.287", "0.455", "0.622"],
        "8": ["0.445", "0.621", "0.759"],
    }


def test_two_decimals_and_alpha(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["breakeven", "-k", "1,3", "-c", "0.5,1", "--alpha", "0.5", "--precision", "2"]) == 0
    )
    out = capsys.readouterr().out
    assert "1          0.50    1.00" in out
    # S(0.5, 3, 0.5) = (1 + .5 + .25 + .125) / 2.5 = 0.75
    assert "0.75x" in out


def test_json() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "specmon", "breakeven", "-k", "4", "-c", "0.2", "--alpha", "0.6", "--json"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    (row,) = strict_loads(result.stdout)["rows"]
    assert row["chain_length"] == 4 and row["draft_cost"] == 0.2
    assert row["breakeven_alpha"] == pytest.approx(0.4553, abs=1e-4)
    assert row["speedup"] == pytest.approx((1 + 0.6 + 0.36 + 0.216 + 0.1296) / 1.8)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-c", "1.5"], "draft costs must be between 0 and 1"),
        (["-k", "0"], "chain lengths must be between 1 and 64"),
        (["-k", "two"], "is not a comma-separated list of ints"),
        (["--alpha", "2"], "must be between 0 and 1"),
    ],
)
def test_bad_arguments(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["breakeven", *args])
    assert info.value.code == 2
    assert message in capsys.readouterr().err
