"""Taint/toleration matching follows upstream Toleration.ToleratesTaint."""

from __future__ import annotations

import pytest

from pykubelet.common.tolerations import (
    first_untolerated_taint,
    matching_tolerations,
    tolerates_taint,
    tolerations_tolerate_taint,
    untolerated_taints,
)

TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}, True),
        ({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}, True),  # empty operator = Equal
        ({"key": "dedicated", "operator": "Equal", "value": "cpu", "effect": "NoSchedule"}, False),
        ({"key": "dedicated", "operator": "Exists", "value": "ignored", "effect": "NoSchedule"}, True),
        ({"key": "dedicated", "operator": "Exists"}, True),  # empty effect matches all effects
        ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
        ({"operator": "Exists"}, True),  # empty key with Exists tolerates everything
        ({"operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "dedicated", "operator": "Gt", "value": "gpu"}, False),  # unknown operator never matches
    ],
)
def test_toleration_matches_taint_like_upstream(toleration: dict[str, str], expected: bool) -> None:
    assert tolerates_taint(toleration, TAINT) is expected


def test_absent_value_equals_empty_value() -> None:
    assert tolerates_taint({"key": "k", "operator": "Equal", "value": ""}, {"key": "k", "effect": "NoSchedule"})


def test_list_tolerates_when_any_toleration_matches_and_skips_malformed_entries() -> None:
    tols = ["junk", None, {"key": "dedicated", "operator": "Exists"}]
    assert tolerations_tolerate_taint(tols, TAINT)
    assert not tolerations_tolerate_taint(["junk"], TAINT)
    assert matching_tolerations(tols, TAINT) == [{"key": "dedicated", "operator": "Exists"}]


def test_untolerated_taints_are_filtered_by_effect_and_keep_node_order() -> None:
    taints = [
        {"key": "a", "effect": "PreferNoSchedule"},
        {"key": "b", "effect": "NoExecute"},
        {"key": "c", "effect": "NoSchedule"},
        {"key": "d", "effect": "NoSchedule"},
    ]
    tols = [{"key": "d", "operator": "Exists"}]
    effects = ("NoSchedule", "NoExecute")
    assert [t["key"] for t in untolerated_taints(taints, tols, effects)] == ["b", "c"]
    assert [t["key"] for t in untolerated_taints(taints, tols)] == ["a", "b", "c"]
    assert first_untolerated_taint(taints, tols, effects) == {"key": "b", "effect": "NoExecute"}
    assert first_untolerated_taint(taints, [{"operator": "Exists"}], effects) is None
