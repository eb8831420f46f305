"""``@record``: value classes that are cheap to build and read-only to the type checker."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

from mypy import api as mypy_api

from specmon.records import record


@record
class _Point:
    x: int
    y: tuple[int, ...] = ()


def test_a_record_is_a_value() -> None:
    a, b = _Point(1, (2,)), _Point(1, (2,))
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != _Point(2, (2,))
    assert dataclasses.replace(a, x=5) == _Point(5, (2,)) and a.x == 1
    assert not hasattr(a, "__dict__")  # slotted: no stray attributes


def test_the_type_checker_refuses_an_assignment_to_a_field(tmp_path: Path) -> None:
    source = tmp_path / "uses_record.py"
    source.write_text(
        textwrap.dedent(
            """
            from specmon.records import record

            @record
            class P:
                x: int

            p = P(1)
            p.x = 2
            """
        )
    )
    out, _, status = mypy_api.run(
        ["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"), str(source)]
    )
    assert status == 1
    assert 'uses_record.py:9: error: Property "x" defined in "P" is read-only' in out
