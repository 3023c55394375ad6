"""Quantities decode as before now that the canonical form of a quantity string is memoized:
the same canonical string for every spelling, and the same error, raised every time, for one
that does not parse."""

from __future__ import annotations

import pytest

from pykubelet.common.quantity import QuantityError, canonical
from pykubelet.server import schema
from tests.builders import container, pod

SPELLINGS = ["100m", "0.1", "1", "1.5Gi", "1536Mi", " 64Mi ", "1e3", "1E3", "+5", "-1", "0", "1000000000m",
             "12345678901234567890", "0.000001", "1k", "1Ki", "2.5", ".5", "5.", "1e-3", "100Mi", "1G"]
BAD = ["", "abc", "1.2.3", "1Qi", "--1", "1e", "Mi", " ", "1 Mi"]


def _decoded_cpu(value: object) -> object:
    p = pod(containers=[container("c", requests={"cpu": value}, limits={"memory": value})])
    out = schema.decode(p, "V1Pod").obj["spec"]["containers"][0]["resources"]
    assert out["requests"]["cpu"] == out["limits"]["memory"]
    return out["requests"]["cpu"]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_quantity_decodes_to_its_canonical_form_every_time(spelling: str) -> None:
    for _ in range(3):  # the first decode fills the memo, the others read it
        assert _decoded_cpu(spelling) == canonical(spelling.strip())


def test_numbers_decode_as_their_canonical_form() -> None:
    for n in (1, 1.5, 0, 100, 0.25):
        assert _decoded_cpu(n) == canonical(n)


@pytest.mark.parametrize("spelling", BAD)
def test_a_quantity_that_does_not_parse_fails_the_same_way_every_time(spelling: str) -> None:
    with pytest.raises(QuantityError) as want:
        canonical(spelling.strip())
    for _ in range(3):
        with pytest.raises(schema.DecodeError) as got:
            _decoded_cpu(spelling)
        assert str(got.value) == str(want.value)
