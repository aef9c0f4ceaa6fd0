"""How `make test` deals the lab test modules out to its two labs (tests/lab/shards.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.lab import shards

LAB_TESTS = Path(__file__).resolve().parents[1] / "lab"


def modules() -> list[str]:
    return sorted(p.name for p in LAB_TESTS.glob("test_*.py"))


def seconds(assigned: dict[str, int], lab: int) -> int:
    return sum(shards.MODULE_SECONDS.get(m, shards.NEW_MODULE_S) for m, k in assigned.items() if k == lab)


def test_every_module_runs_on_exactly_one_lab_and_the_24_11_ones_share_the_first():
    assigned = shards.assign(modules(), 2)
    assert sorted(assigned) == modules() and set(assigned.values()) == {1, 2}
    assert all(assigned[m] == 1 for m in modules() if m.startswith(shards.FIRST_LAB))


def test_the_two_labs_get_near_equal_time():
    assigned = shards.assign(modules(), 2)
    one, two = seconds(assigned, 1), seconds(assigned, 2)
    # the largest module that could move between them bounds the difference
    assert abs(one - two) <= max(shards.MODULE_SECONDS.values())
    assert abs(one - two) / (one + two) < 0.1, (one, two)


def test_a_new_module_goes_to_the_lab_with_less_time_and_leaves_the_others_where_they_were(monkeypatch):
    assert shards.assign(["test_a.py", "test_b.py"], 2) == {"test_a.py": 1, "test_b.py": 2}
    monkeypatch.setitem(shards.MODULE_SECONDS, "test_a.py", 300)
    monkeypatch.setitem(shards.MODULE_SECONDS, "test_b.py", 100)
    after = shards.assign(["test_a.py", "test_b.py", "test_new.py"], 2)
    assert after == {"test_a.py": 1, "test_b.py": 2, "test_new.py": 2}


def test_one_lab_runs_everything():
    assert set(shards.assign(modules(), 1).values()) == {1}


@pytest.mark.parametrize("spec", ["2", "0/2", "3/2", "a/b", "1/2/3"])
def test_a_bad_shard_is_refused_naming_the_variable(spec):
    with pytest.raises(ValueError, match="GPU_FLEET_LAB_SHARD"):
        shards.parse(spec)


def test_a_shard_parses():
    assert shards.parse("2/2") == (2, 2)
