from decimal import Decimal

import pytest

from pykubelet.common.quantity import (
    QuantityError,
    canonical,
    cpu_millicores,
    format_cpu_millicores,
    format_memory_bytes,
    is_valid_quantity,
    memory_bytes,
    parse_quantity,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("100m", Decimal("0.1")),
        ("1Gi", Decimal(1 << 30)),
        ("1e3", Decimal(1000)),
        ("0.5", Decimal("0.5")),
        ("1E", Decimal(10) ** 18),
        ("1.5k", Decimal(1500)),
        ("-2Mi", Decimal(-2 << 20)),
        (".5", Decimal("0.5")),
        ("5n", Decimal("5e-9")),
    ],
)
def test_parse_exact(text: str, value: Decimal) -> None:
    assert parse_quantity(text).value == value


@pytest.mark.parametrize("text", ["", "abc", "1.2.3", "1 Gi", "1Gb", "Mi", "1ki"])
def test_parse_rejects(text: str) -> None:
    with pytest.raises(QuantityError, match="quantities must match"):
        parse_quantity(text)
    assert not is_valid_quantity(text)


@pytest.mark.parametrize(
    ("text", "canon"),
    [
        ("1.5Gi", "1536Mi"),
        ("0.5Gi", "512Mi"),
        ("1000m", "1"),
        ("1.5M", "1500k"),
        ("1e3", "1e3"),
        ("100m", "100m"),
        ("1024", "1024"),
        ("1025Ki", "1025Ki"),
        ("0", "0"),
        ("0.1m", "100u"),
        ("500Mi", "500Mi"),
        ("2048Mi", "2Gi"),
    ],
)
def test_canonical(text: str, canon: str) -> None:
    assert canonical(text) == canon


def test_cpu_and_memory_helpers_round_up() -> None:
    assert cpu_millicores("250m") == 250
    assert cpu_millicores("1.5") == 1500
    assert cpu_millicores("0.0001") == 1
    assert cpu_millicores(2) == 2000
    assert memory_bytes("1Ki") == 1024
    assert memory_bytes("1M") == 1_000_000
    assert memory_bytes("0.5") == 1
    assert format_cpu_millicores(1500) == "1500m"
    assert format_cpu_millicores(2000) == "2"
    assert format_memory_bytes(1 << 30) == "1Gi"
    assert format_memory_bytes(1000) == "1k"
