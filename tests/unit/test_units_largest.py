"""roles/planner/units._largest, the search under every "largest context / weights that fit" figure: exact answers
for a threshold anywhere in the range, at either end, and outside it (issue 14: its survivors)."""

from __future__ import annotations

import pytest

from roles.planner.units import _largest


@pytest.mark.parametrize("threshold", [1, 2, 5, 9, 10, 4096])
def test_largest_is_the_threshold_clamped_to_the_range(threshold):
    assert _largest(lambda x: x <= threshold, 1, 10) == min(threshold, 10)


def test_none_true_gives_one_below_the_range_and_an_empty_range_too():
    assert _largest(lambda x: False, 1, 10) == 0
    assert _largest(lambda x: x <= 3, 4, 10) == 3
    assert _largest(lambda x: True, 10, 9) == 9


def test_it_asks_about_log2_of_the_range_values_only():
    asked: list[int] = []
    assert _largest(lambda x: asked.append(x) or x <= 700_000, 1, 1_000_000) == 700_000
    assert len(asked) <= 21 and len(set(asked)) == len(asked)
