"""Exact Kubernetes resource quantities (k8s.io/apimachinery/pkg/api/resource, quantity.go).

Capacities, capacity requests and consumed capacity are quantities; the allocator compares and
adds them on its hot path and the CLI prints them back, so both the arithmetic and the printed
form must match Go's `resource.Quantity` exactly. A quantity is held as one Python int counting
nano-units (parsing never keeps anything finer than 1n, it rounds away from zero), which makes
comparison, addition and hashing plain int operations.
"""

from __future__ import annotations

import re
from functools import lru_cache, total_ordering
from typing import Final

DECIMAL_SI: Final = "DecimalSI"
BINARY_SI: Final = "BinarySI"
DECIMAL_EXPONENT: Final = "DecimalExponent"

# Upstream's error texts (quantity.go: ErrFormatWrong, ErrNumeric, ErrSuffix).
SPLIT_RE_STRING: Final = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
ERR_FORMAT_WRONG: Final = "quantities must match the regular expression '" + SPLIT_RE_STRING + "'"
ERR_NUMERIC: Final = "unable to parse numeric part of quantity"
ERR_SUFFIX: Final = "unable to parse quantity's suffix"
# kdra-only guard: Go keeps any int32 exponent in an inf.Dec; an exact Python int of 10**(2**31)
# would hang the process, so magnitudes beyond 10**MAX_DECIMAL_EXPONENT are rejected.
MAX_DECIMAL_EXPONENT: Final = 1000
ERR_TOO_LARGE: Final = (
    f"quantity too large (kdra accepts magnitudes below 1e{MAX_DECIMAL_EXPONENT} and at most 1024 characters)"
)

_NANO: Final = 1_000_000_000
_MAX_INT64: Final = (1 << 63) - 1
_MAX_BINARY_NANOS: Final = _MAX_INT64 * _NANO  # BinarySI values are capped at 2^63-1 on parse
_LIMIT_NANOS: Final = 10 ** (MAX_DECIMAL_EXPONENT + 9)
_MAX_TEXT: Final = 1024  # longer numbers are rejected too (Python refuses int() of >4300 digits)

# Mirrors parseQuantityString: sign, leading zeros, integer digits, optional fraction, then a suffix of
# suffix letters, an optional sign and digits. Anything else is ErrFormatWrong.
_SCAN = re.compile(r"([+-]?)(0*)([0-9]*)(\.([0-9]*))?([eEinumkKMGTP]*[-+]?[0-9]*)")
_EXP_DIGITS = re.compile(r"[+-]?[0-9]+")

_DEC_SUFFIXES: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BIN_SUFFIXES: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DEC_SUFFIX_BY_EXP: Final = {v: k for k, v in _DEC_SUFFIXES.items()}
_BIN_SUFFIX_BY_POWER: Final = {0: "", 1: "Ki", 2: "Mi", 3: "Gi", 4: "Ti", 5: "Pi", 6: "Ei"}
# Unsigned integers with a common suffix (Pi/Ei excluded: Go always takes its slow path for them).
_SIMPLE = re.compile(r"([1-9][0-9]{0,14})(Ki|Mi|Gi|Ti|[numkMGTPE])?")
_POW10_NANO: Final = {e: 10 ** (e + 9) for e in range(-9, 19, 3)}
# int32(float32(exponent)*3/10) in ParseQuantity's BinarySI precision estimate.
_BIN_PRECISION_DIGITS: Final = {10: 3, 20: 6, 30: 9, 40: 12, 50: 15, 60: 18}


def _wrap_int32(v: int) -> int:
    """Go's int32(x) conversion of an int64, which ParseQuantity applies to a parsed exponent."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


def _ceil_div(a: int, b: int) -> int:
    """ceil(a / b) for a >= 0, b > 0."""
    return -(-a // b)


@total_ordering
class Quantity:
    """An exact quantity: value in nano-units plus the format it was written in.

    Equality, ordering and hashing use the value only (Go's Cmp/Equal), so "1Gi" == "1024Mi" and
    both hash alike; `str()` keeps the format, as Go's String() does.
    """

    __slots__ = ("_fmt", "_n", "_s")

    _n: int
    _fmt: str
    _s: str

    def __init__(self, nanos: int = 0, fmt: str = DECIMAL_SI, text: str = "") -> None:
        self._n = nanos
        self._fmt = fmt
        self._s = text  # cached printed form ("" until computed or when parse could not reuse input)

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def parse(cls, value: str | int | float) -> Quantity:
        """Parse like ParseQuantity; raises ValueError with upstream's wording."""
        if isinstance(value, bool):
            raise ValueError(ERR_FORMAT_WRONG)
        if isinstance(value, int):
            return cls(value * _NANO, DECIMAL_SI, str(value))
        if isinstance(value, float):
            value = repr(value)
        if not isinstance(value, str):
            raise ValueError(ERR_FORMAT_WRONG)
        return _parse(value)

    @classmethod
    def from_int(cls, value: int, fmt: str = DECIMAL_SI) -> Quantity:
        """NewQuantity(value, format)."""
        return cls(value * _NANO, fmt)

    @classmethod
    def from_milli(cls, value: int, fmt: str = DECIMAL_SI) -> Quantity:
        """NewMilliQuantity(value, format)."""
        return cls(value * 1_000_000, fmt)

    @classmethod
    def from_nanos(cls, nanos: int, fmt: str = DECIMAL_SI) -> Quantity:
        """A quantity of `nanos` * 1e-9, for hot paths that sum raw nano counts."""
        return cls(nanos, fmt)

    # ---- accessors ----------------------------------------------------------------------------
    @property
    def nanos(self) -> int:
        """The exact value in units of 1e-9 (every parsed quantity is a whole number of these)."""
        return self._n

    @property
    def format(self) -> str:
        """DecimalSI, BinarySI or DecimalExponent: how `str()` prints it."""
        return self._fmt

    def sign(self) -> int:
        """-1, 0 or 1."""
        return (self._n > 0) - (self._n < 0)

    def is_zero(self) -> bool:
        return self._n == 0

    def value(self) -> int:
        """Go's Value(): the value rounded up (away from zero) to an integer."""
        n = self._n
        return _ceil_div(n, _NANO) if n >= 0 else -_ceil_div(-n, _NANO)

    def milli_value(self) -> int:
        """Go's MilliValue(): ceil(q * 1000), away from zero."""
        n = self._n
        return _ceil_div(n, 1_000_000) if n >= 0 else -_ceil_div(-n, 1_000_000)

    def scaled_value(self, scale: int) -> int:
        """Go's ScaledValue(scale): ceil(q / 10^scale), away from zero (scale >= -9)."""
        e = scale + 9
        n = self._n
        if e >= 0:
            d = 10**e
            return _ceil_div(n, d) if n >= 0 else -_ceil_div(-n, d)
        return n * int(10 ** (-e))

    def as_float(self) -> float:
        """Approximate float value (AsApproximateFloat64); never use it for decisions."""
        return self._n / _NANO

    def cmp(self, other: Quantity) -> int:
        """Go's Cmp: -1, 0 or 1."""
        a, b = self._n, other._n
        return (a > b) - (a < b)

    # ---- arithmetic (Go's Add/Sub/Neg keep the receiver's format unless it is zero) -----------
    def __add__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(self._n + other._n, other._fmt if self._n == 0 else self._fmt)

    def __radd__(self, other: object) -> Quantity:
        """So that sum() works without a start value (0 + q)."""
        if isinstance(other, int) and not isinstance(other, bool) and other == 0:
            return self
        return NotImplemented

    def __sub__(self, other: Quantity) -> Quantity:
        if not isinstance(other, Quantity):
            return NotImplemented
        return Quantity(self._n - other._n, other._fmt if self._n == 0 else self._fmt)

    def __neg__(self) -> Quantity:
        return Quantity(-self._n, self._fmt)

    def __abs__(self) -> Quantity:
        return Quantity(abs(self._n), self._fmt)

    def mul(self, factor: int) -> Quantity:
        """Go's Mul(int64): exact product, same format."""
        return Quantity(self._n * factor, self._fmt)

    # ---- comparison and hashing ---------------------------------------------------------------
    def __eq__(self, other: object) -> bool:
        if isinstance(other, Quantity):
            return self._n == other._n
        return NotImplemented

    def __lt__(self, other: Quantity) -> bool:
        if isinstance(other, Quantity):
            return self._n < other._n
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._n)

    def __bool__(self) -> bool:
        return self._n != 0

    # ---- printing -----------------------------------------------------------------------------
    def __str__(self) -> str:
        s = self._s
        if not s:
            s = self._s = _canonical(self._n, self._fmt)
        return s

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"

    def __reduce__(self) -> tuple[type[Quantity], tuple[int, str, str]]:
        return (Quantity, (self._n, self._fmt, self._s))


def _parse(text: str) -> Quantity:
    """ParseQuantity, step by step (quantity.go); see the module docstring for the representation."""
    if not text:
        raise ValueError(ERR_FORMAT_WRONG)
    if text == "0":
        return Quantity(0, DECIMAL_SI, "0")
    simple = _SIMPLE.fullmatch(text)
    if simple is not None:  # "80Gi", "500m", "16": the shapes objects carry, decided without the scanner
        digits_s, suffix = simple.groups()
        d = int(digits_s)
        if suffix in _BIN_SUFFIXES:
            bexp = _BIN_SUFFIXES[suffix]
            if len(digits_s) <= 14 - _BIN_PRECISION_DIGITS[bexp]:  # Go's int64 fast path
                return Quantity((d << bexp) * _NANO, BINARY_SI, text if d & 7 else "")
        else:
            exp = _DEC_SUFFIXES[suffix or ""]
            return Quantity(d * _POW10_NANO[exp], DECIMAL_SI, "" if digits_s.endswith("000") else text)
    if len(text) > _MAX_TEXT:
        raise ValueError(ERR_TOO_LARGE)
    m = _SCAN.fullmatch(text)
    if m is None:
        raise ValueError(ERR_FORMAT_WRONG)
    sign, zeros, num, _dot, denom, suffix = m.groups()
    denom = denom or ""
    if not num:
        num = "0"
    negative = sign == "-"

    # quantitySuffixer.interpret
    exponent = _DEC_SUFFIXES.get(suffix)
    if exponent is not None:
        fmt = DECIMAL_SI
        binary = False
    else:
        bin_exp = _BIN_SUFFIXES.get(suffix)
        if bin_exp is not None:
            fmt, binary, exponent = BINARY_SI, True, bin_exp
        elif len(suffix) > 1 and suffix[0] in "eE" and _EXP_DIGITS.fullmatch(suffix, 1):
            parsed = int(suffix[1:])
            if not -(1 << 63) <= parsed <= _MAX_INT64:
                raise ValueError(ERR_SUFFIX)
            fmt, binary, exponent = DECIMAL_EXPONENT, False, _wrap_int32(parsed)
        else:
            raise ValueError(ERR_SUFFIX)

    digits_text = num + denom
    digits = int(digits_text)
    ndenom = len(denom)

    # Would Go take its int64 fast path? Only then may String() reuse the input text.
    if binary:
        precision = 15 - len(num) - _BIN_PRECISION_DIGITS[exponent] - 1 if ndenom == 0 else -1
        fast = precision >= 0 and digits << exponent <= _MAX_INT64
        reuse = fast and digits & 7 != 0  # exponent % 10 == 0 always holds for Ki..Ei
    else:
        scale = exponent - ndenom
        fast = len(digits_text) <= 18 and scale >= -9
        reuse = fast and scale % 3 == 0 and not digits_text.endswith("000") and digits_text[0] != "0"
    if not fast and not (zeros or m.group(3) or denom):
        # The slow path hands the bare number text (".", "-.") to inf.Dec, which rejects it.
        raise ValueError(ERR_NUMERIC)
    cache_text = text if reuse else ""

    if binary:
        numerator = digits << exponent
        nanos = _ceil_div(numerator * _NANO, 10**ndenom) if ndenom else numerator * _NANO
    else:
        e = exponent - ndenom + 9  # power of ten that turns `digits` into nano-units
        if e >= 0:
            if digits and len(digits_text.lstrip("0")) + e > MAX_DECIMAL_EXPONENT + 9 + 1:
                raise ValueError(ERR_TOO_LARGE)
            nanos = digits * 10**e
        elif digits == 0:
            nanos = 0
        elif -e > len(digits_text):
            nanos = 1  # finer than 1n: rounds up to the smallest non-zero value
        else:
            nanos = _ceil_div(digits, 10 ** (-e))
    if nanos >= _LIMIT_NANOS:
        raise ValueError(ERR_TOO_LARGE)
    if binary:
        if nanos > _MAX_BINARY_NANOS:
            nanos = _MAX_BINARY_NANOS
            cache_text = ""
        elif 0 < nanos < _NANO:
            fmt = DECIMAL_SI  # below 1, BinarySI becomes DecimalSI (avoids rounding)
    return Quantity(-nanos if negative else nanos, fmt, cache_text)


def _canonical(nanos: int, fmt: str) -> str:
    """Go's CanonicalizeBytes + suffix: largest exponent (a multiple of 3, or a power of 1024)
    that loses no precision; BinarySI falls back to DecimalSI below 1024 or for fractions."""
    if nanos == 0:
        return "0"
    if fmt == BINARY_SI:
        if -1024 * _NANO < nanos < 1024 * _NANO or nanos % _NANO:
            fmt = DECIMAL_SI
        else:
            v = nanos // _NANO
            mag = -v if v < 0 else v
            power = 0
            while mag >= 1024 and mag & 1023 == 0 and power < 6:
                mag >>= 10
                power += 1
            return f"{'-' if v < 0 else ''}{mag}{_BIN_SUFFIX_BY_POWER[power]}"
    elif fmt != DECIMAL_SI:
        fmt = DECIMAL_EXPONENT
    negative = nanos < 0
    mant = -nanos if negative else nanos
    exp = -9
    while mant % 1_000_000_000 == 0:
        mant //= 1_000_000_000
        exp += 9
    while mant % 10 == 0:
        mant //= 10
        exp += 1
    rem = exp % 3
    if rem:
        mant *= 10**rem
        exp -= rem
    # Kubernetes 1.36 prints a DecimalSI value beyond the "E" suffix (10^18) without any suffix:
    # "1000E" prints as "1" (recorded from kube-apiserver 1.36.3 in tests/api/data; fixed in later
    # apimachinery, which falls back to "1e21"). Faithful to 1.36: the value itself stays exact.
    suffix = _DEC_SUFFIX_BY_EXP.get(exp, "") if fmt == DECIMAL_SI else ("" if exp == 0 else f"e{exp}")
    return f"{'-' if negative else ''}{mant}{suffix}"


@lru_cache(maxsize=65536)
def parse_quantity(value: str) -> Quantity:
    """Cached `Quantity.parse` for the strings objects carry; quantities are immutable, so sharing is safe."""
    return Quantity.parse(value)


# unicode.IsSpace, which Quantity.UnmarshalJSON trims with strings.TrimSpace.
_GO_SPACE: Final = "\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(
    chr(c) for c in range(0x2000, 0x200B)
)


_QUANTITY_UNIT = re.compile(r"\b\d+(?:\.\d+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)\b")
_UNIT_FACTOR = {
    **{u: 1024 ** (i + 1) for i, u in enumerate(("Ki", "Mi", "Gi", "Ti", "Pi", "Ei"))},
    **{u: 1000 ** (i + 1) for i, u in enumerate(("k", "M", "G", "T", "P", "E"))},
}


def in_unit_of(value: str, needs: str) -> str:
    """The quantity `value` in the unit of the quantity in `needs` (81559Mi beside `>= 141Gi` reads
    79.65Gi), so the two compare at a glance; unchanged when `needs` names no unit, `value` is no quantity,
    or the rounding would hide the difference (79.999Gi beside 80Gi)."""
    m = _QUANTITY_UNIT.search(needs)
    if m is None:
        return value
    try:
        number = parse_quantity(value).as_float()
        wanted = parse_quantity(m.group(0)).as_float()
    except ValueError:
        return value
    unit = m.group(1)
    shown = f"{number / _UNIT_FACTOR[unit]:.2f}".rstrip("0").rstrip(".") + unit
    if number != wanted and parse_quantity(shown).as_float() == wanted:
        return value
    return shown


def parse_quantity_any(value: object) -> Quantity:
    """Parse a quantity field of an object as the API server decodes it (UnmarshalJSON: a string,
    surrounding whitespace trimmed, or a number); raises ValueError otherwise."""
    if isinstance(value, str):
        return parse_quantity(value.strip(_GO_SPACE))
    if isinstance(value, int | float) and not isinstance(value, bool):
        return Quantity.parse(value)
    raise ValueError(ERR_FORMAT_WRONG)


ZERO: Final = Quantity(0, DECIMAL_SI)

__all__ = [
    "BINARY_SI",
    "DECIMAL_EXPONENT",
    "DECIMAL_SI",
    "ERR_FORMAT_WRONG",
    "ERR_NUMERIC",
    "ERR_SUFFIX",
    "ZERO",
    "Quantity",
    "in_unit_of",
    "parse_quantity",
    "parse_quantity_any",
]
