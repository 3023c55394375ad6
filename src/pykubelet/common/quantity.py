"""Kubernetes resource quantities ("100m", "1Gi", "1e3", "0.5"), parsed exactly.

Design: a quantity is held as an exact ``decimal.Decimal`` plus the *format* it was written in
(``BinarySI`` for Ki/Mi/..., ``DecimalSI`` for m/k/M/... or no suffix, ``DecimalExponent`` for
``e<n>``), because upstream keeps the format so that the canonical string written back uses the
same family of suffixes.  Everything here is pure and shared by the agent and the control plane.

Upstream behaviour followed (k8s.io/apimachinery/pkg/api/resource/quantity.go):
- grammar ``<signedNumber><suffix>`` with suffix one of Ki Mi Gi Ti Pi Ei, n u m "" k M G T P E,
  or e/E followed by a signed integer; anything else is rejected with upstream's message;
- values are rounded *up* to nano precision (the smallest representable unit);
- ``MilliValue()``/``Value()`` round up (so "0.5m" CPU is 1 millicore, "0.5" bytes is 1 byte);
- canonical form: no fractional digits, the largest suffix that keeps the mantissa an integer
  (exponent a multiple of 3 for decimal, power of 1024 for binary); binary quantities in
  (-1024, 1024) or with fractional byte values fall back to DecimalSI ("1.5Gi" -> "1536Mi",
  "0.5Gi" -> "512Mi", "1000m" -> "1", "1.5M" -> "1500k").
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, InvalidOperation, localcontext

BINARY_SI = "BinarySI"
DECIMAL_SI = "DecimalSI"
DECIMAL_EXPONENT = "DecimalExponent"

_PARSE_ERROR = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"

_RE = re.compile(r"^([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE]|)$")

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_BY_EXP = {v: k for k, v in _DECIMAL.items()}
_BINARY_BY_EXP = {v: k for k, v in _BINARY.items()}
_NANO = Decimal("1e-9")


class QuantityError(ValueError):
    """Raised for strings that are not valid Kubernetes quantities."""


def _ctx_quantize_up(value: Decimal) -> Decimal:
    """Round away from zero to nano precision, as upstream does for sub-nano values."""
    with localcontext() as ctx:
        ctx.prec = 200
        if value == value.to_integral_value():
            return value
        rounding = ROUND_CEILING if value > 0 else ROUND_FLOOR
        return value.quantize(_NANO, rounding=rounding).normalize()


@dataclass(frozen=True)
class Quantity:
    """An exact quantity and the suffix family it was written in."""

    value: Decimal
    format: str = DECIMAL_SI

    def __str__(self) -> str:
        return self.canonical()

    def canonical(self) -> str:
        return format_quantity(self.value, self.format)

    def milli_value(self) -> int:
        """Upstream MilliValue(): value*1000 rounded up (toward +inf)."""
        return math.ceil(self.value * 1000)

    def int_value(self) -> int:
        """Upstream Value(): value rounded up (toward +inf)."""
        return math.ceil(self.value)

    def __add__(self, other: Quantity) -> Quantity:
        return Quantity(self.value + other.value, self.format)

    def __sub__(self, other: Quantity) -> Quantity:
        return Quantity(self.value - other.value, self.format)


def parse_quantity(s: str | int | float | Quantity) -> Quantity:
    """Parse a quantity string (or a JSON number, which upstream also accepts)."""
    if isinstance(s, Quantity):
        return s
    if isinstance(s, bool):
        raise QuantityError(_PARSE_ERROR)
    if isinstance(s, int):
        return Quantity(Decimal(s), DECIMAL_SI)
    if isinstance(s, float):
        s = repr(s)
    if not isinstance(s, str):
        raise QuantityError(_PARSE_ERROR)
    return _parse_text(s) if len(s) <= _MEMO_MAX_LEN else _parse_text.__wrapped__(s)


_MEMO_MAX_LEN = 64  # longer strings (valid ones can be any length) are parsed, not remembered


@functools.lru_cache(maxsize=4096)
def _parse_text(s: str) -> Quantity:
    """:func:`parse_quantity` of a string.  Memoized: the API server and the agent parse the same
    few requests and limits ("100m", "64Mi") for every pod, through ``Decimal`` each time; a
    :class:`Quantity` is immutable, so sharing it is safe.  A string that does not parse raises
    each time (``lru_cache`` keeps no exceptions); only strings of up to ``_MEMO_MAX_LEN``
    characters are remembered, so the memo stays small whatever clients send."""
    text = s.strip()
    m = _RE.match(text)
    if not m:
        raise QuantityError(_PARSE_ERROR)
    sign, number, suffix = m.groups()
    try:
        base = Decimal(sign + number)
    except InvalidOperation as e:  # pragma: no cover - regex guarantees a number
        raise QuantityError(_PARSE_ERROR) from e
    with localcontext() as ctx:
        ctx.prec = 200
        if suffix in _BINARY:
            value = base * (Decimal(2) ** _BINARY[suffix])
            fmt = BINARY_SI
        elif suffix in _DECIMAL:
            value = base.scaleb(_DECIMAL[suffix])
            fmt = DECIMAL_SI
        else:
            value = base.scaleb(int(suffix[1:]))
            fmt = DECIMAL_EXPONENT
    return Quantity(_ctx_quantize_up(value), fmt)


def is_valid_quantity(s: object) -> bool:
    try:
        parse_quantity(s)  # type: ignore[arg-type]
    except QuantityError:
        return False
    return True


def _decimal_parts(value: Decimal) -> tuple[int, int]:
    """Return (mantissa, exponent) with integer mantissa and exponent a multiple of 3."""
    if value == 0:
        return 0, 0
    with localcontext() as ctx:
        ctx.prec = 200
        exp = 0
        v = value
        # Scale up until integral (down to nano at most).
        while v != v.to_integral_value():
            v = v * 1000
            exp -= 3
        mant = int(v)
        while mant % 1000 == 0 and exp < 18:
            mant //= 1000
            exp += 3
        return mant, exp


def format_quantity(value: Decimal | int, fmt: str = DECIMAL_SI) -> str:
    """Canonical string for a value in the given suffix family (upstream CanonicalizeBytes)."""
    value = _ctx_quantize_up(Decimal(value))
    if value == 0:
        return "0"
    if fmt == BINARY_SI:
        if -1024 < value < 1024 or value != value.to_integral_value():
            fmt = DECIMAL_SI
        else:
            mant = int(value)
            exp = 0
            while mant % 1024 == 0 and exp < 60:
                mant //= 1024
                exp += 10
            return f"{mant}{_BINARY_BY_EXP.get(exp, '')}"
    mant, exp = _decimal_parts(value)
    if fmt == DECIMAL_EXPONENT:
        return f"{mant}e{exp}" if exp != 0 else str(mant)
    return f"{mant}{_DECIMAL_BY_EXP[exp]}"


def canonical(s: str | int | float | Quantity) -> str:
    """Parse then print canonically ("1.5Gi" -> "1536Mi")."""
    return parse_quantity(s).canonical()


def cpu_millicores(s: str | int | float | Quantity) -> int:
    """CPU quantity -> millicores, rounded up like upstream MilliValue()."""
    return parse_quantity(s).milli_value()


def memory_bytes(s: str | int | float | Quantity) -> int:
    """Memory/storage quantity -> bytes, rounded up like upstream Value()."""
    return parse_quantity(s).int_value()


def format_cpu_millicores(millis: int) -> str:
    """Millicores -> canonical DecimalSI string (1500 -> "1500m", 2000 -> "2")."""
    return format_quantity(Decimal(millis) / 1000, DECIMAL_SI)


def format_memory_bytes(n: int) -> str:
    """Bytes -> canonical BinarySI string (1073741824 -> "1Gi")."""
    return format_quantity(Decimal(n), BINARY_SI)
