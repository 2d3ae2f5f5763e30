"""Runtime values of the CEL environment and the error type used during evaluation.

Values are native Python objects: int, UInt (int subclass), float, str, bytes, bool, None, list, dict,
plus Quantity (kdra.api.quantity), Semver and CelType. Errors are raised as EvalError and only turned
into CELRuntimeError at the Program boundary, so `&&`/`||` can absorb them the way cel-go does.
"""

from __future__ import annotations

import math
from typing import Any

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1


class EvalError(Exception):
    """A CEL runtime error value (cel-go types.Err). The message is cel-go's wording."""

    __slots__ = ("message",)

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class CostExceeded(EvalError):
    """Raised when the runtime cost budget is exhausted; never absorbed by && or ||."""


def no_such_overload() -> EvalError:
    return EvalError("no such overload")


class UInt(int):
    """CEL uint: an int that keeps its CEL type."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{int(self)}u"


class CelType:
    """A CEL type value, as returned by type(x)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CelType) and other.name == self.name

    def __hash__(self) -> int:
        return hash(("CelType", self.name))


INT_T = CelType("int")
UINT_T = CelType("uint")
DOUBLE_T = CelType("double")
BOOL_T = CelType("bool")
STRING_T = CelType("string")
BYTES_T = CelType("bytes")
NULL_T = CelType("null_type")
LIST_T = CelType("list")
MAP_T = CelType("map")
TYPE_T = CelType("type")
QUANTITY_T = CelType("kubernetes.Quantity")
SEMVER_T = CelType("kubernetes.Semver")
DEVICE_T = CelType("kubernetes.DRADevice")

TYPE_IDENTS = {
    "int": INT_T,
    "uint": UINT_T,
    "double": DOUBLE_T,
    "bool": BOOL_T,
    "string": STRING_T,
    "bytes": BYTES_T,
    "null_type": NULL_T,
    "list": LIST_T,
    "map": MAP_T,
    "type": TYPE_T,
}


# ---------------------------------------------------------------------------------------------------------
# Semver (github.com/blang/semver/v4 as used by the apiserver semver library)

_NUMBERS = frozenset("0123456789")
_ALPHANUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-")


def _parse_uint64(s: str) -> int:
    if not s or not all(c in _NUMBERS for c in s):
        raise ValueError(f'strconv.ParseUint: parsing "{s}": invalid syntax')
    v = int(s)
    if v > UINT64_MAX:
        raise ValueError(f'strconv.ParseUint: parsing "{s}": value out of range')
    return v


class Semver:
    """A semantic version with blang/semver's parsing, errors and precedence."""

    __slots__ = ("build", "major", "minor", "patch", "pre")

    def __init__(
        self, major: int, minor: int, patch: int, pre: tuple[int | str, ...], build: tuple[str, ...]
    ):
        self.major = major
        self.minor = minor
        self.patch = patch
        self.pre = pre
        self.build = build

    @classmethod
    def parse(cls, s: str) -> Semver:
        if not s:
            raise ValueError("Version string empty")
        parts = s.split(".", 2)
        if len(parts) != 3:
            raise ValueError("No Major.Minor.Patch elements found")
        if not all(c in _NUMBERS for c in parts[0]):
            raise ValueError(f'Invalid character(s) found in major number "{parts[0]}"')
        if len(parts[0]) > 1 and parts[0][0] == "0":
            raise ValueError(f'Major number must not contain leading zeroes "{parts[0]}"')
        major = _parse_uint64(parts[0])
        if not all(c in _NUMBERS for c in parts[1]):
            raise ValueError(f'Invalid character(s) found in minor number "{parts[1]}"')
        if len(parts[1]) > 1 and parts[1][0] == "0":
            raise ValueError(f'Minor number must not contain leading zeroes "{parts[1]}"')
        minor = _parse_uint64(parts[1])
        patch_str = parts[2]
        build: list[str] = []
        pre_strs: list[str] = []
        bi = patch_str.find("+")
        if bi != -1:
            build = patch_str[bi + 1 :].split(".")
            patch_str = patch_str[:bi]
        pi = patch_str.find("-")
        if pi != -1:
            pre_strs = patch_str[pi + 1 :].split(".")
            patch_str = patch_str[:pi]
        if not all(c in _NUMBERS for c in patch_str):
            raise ValueError(f'Invalid character(s) found in patch number "{patch_str}"')
        if len(patch_str) > 1 and patch_str[0] == "0":
            raise ValueError(f'Patch number must not contain leading zeroes "{patch_str}"')
        patch = _parse_uint64(patch_str)
        pre: list[int | str] = []
        for p in pre_strs:
            if not p:
                raise ValueError("Prerelease is empty")
            if all(c in _NUMBERS for c in p):
                if len(p) > 1 and p[0] == "0":
                    raise ValueError(f'Numeric PreRelease version must not contain leading zeroes "{p}"')
                pre.append(_parse_uint64(p))
            elif all(c in _ALPHANUM for c in p):
                pre.append(p)
            else:
                raise ValueError(f'Invalid character(s) found in prerelease "{p}"')
        for b in build:
            if not b:
                raise ValueError("Build meta data is empty")
            if not all(c in _ALPHANUM for c in b):
                raise ValueError(f'Invalid character(s) found in build meta data "{b}"')
        return cls(major, minor, patch, tuple(pre), tuple(build))

    def compare(self, o: Semver) -> int:
        a = (self.major, self.minor, self.patch)
        b = (o.major, o.minor, o.patch)
        if a != b:
            return -1 if a < b else 1
        if not self.pre and not o.pre:
            return 0
        if not self.pre:
            return 1
        if not o.pre:
            return -1
        for x, y in zip(self.pre, o.pre, strict=False):
            c = _cmp_pr(x, y)
            if c:
                return c
        if len(self.pre) == len(o.pre):
            return 0
        return -1 if len(self.pre) < len(o.pre) else 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.compare(other) == 0

    def __hash__(self) -> int:
        return hash((self.major, self.minor, self.patch, self.pre))

    def __str__(self) -> str:
        s = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            s += "-" + ".".join(str(p) for p in self.pre)
        if self.build:
            s += "+" + ".".join(self.build)
        return s

    def __repr__(self) -> str:
        return f"semver({str(self)!r})"


def _cmp_pr(x: int | str, y: int | str) -> int:
    xi = isinstance(x, int)
    yi = isinstance(y, int)
    if xi and yi:
        return 0 if x == y else (-1 if x < y else 1)  # type: ignore[operator]
    if xi:
        return -1
    if yi:
        return 1
    return 0 if x == y else (-1 if x < y else 1)  # type: ignore[operator]


def normalize_and_parse_semver(s: str) -> Semver:
    """apiserver semverlib normalizeAndParse: drop 'v', strip leading zeros, fill missing parts."""
    if s.startswith("v"):
        s = s[1:]
    parts = s.split(".", 2)
    for i, p in enumerate(parts):
        if len(p) > 1:
            p = p.lstrip("0")
            if not p or p[0] not in _NUMBERS:
                p = "0" + p
            parts[i] = p
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            raise ValueError("short version cannot contain PreRelease/Build meta data")
        while len(parts) < 3:
            parts.append("0")
    return Semver.parse(".".join(parts))


# ---------------------------------------------------------------------------------------------------------
# Type names, formatting


def type_of(v: Any) -> CelType:
    t = type(v)
    if t is bool:
        return BOOL_T
    if t is int:
        return INT_T
    if t is UInt:
        return UINT_T
    if t is float:
        return DOUBLE_T
    if t is str:
        return STRING_T
    if t is bytes:
        return BYTES_T
    if v is None:
        return NULL_T
    if t is list or t is tuple:
        return LIST_T
    if isinstance(v, dict):
        return MAP_T
    if t is CelType:
        return TYPE_T
    if t is Semver:
        return SEMVER_T
    if _is_quantity(v):
        return QUANTITY_T
    return CelType(t.__name__)


def _is_quantity(v: Any) -> bool:
    return type(v).__name__ in ("Quantity", "CelQuantity")


def format_double(f: float) -> str:
    """Go fmt %g (shortest) as cel-go's string(double) uses: exponent form when exp < -4 or exp >= 6."""
    if math.isnan(f):
        return "NaN"
    if math.isinf(f):
        return "+Inf" if f > 0 else "-Inf"
    if f == 0.0:
        return "-0" if math.copysign(1.0, f) < 0 else "0"
    sign = "-" if f < 0 else ""
    mant, _, exp_s = f"{abs(f)!r}".partition("e")
    int_part, _, frac_part = mant.partition(".")
    digits = (int_part + frac_part).lstrip("0")
    lead_zeros = len(int_part + frac_part) - len((int_part + frac_part).lstrip("0"))
    dp = len(int_part) + (int(exp_s) if exp_s else 0) - lead_zeros  # decimal point position in digits
    digits = digits.rstrip("0") or "0"
    exp = dp - 1
    if exp < -4 or exp >= 6:  # strconv ftoa: shortest %g uses precision 6 for this decision
        m = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{m}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if dp <= 0:
        return f"{sign}0.{'0' * -dp}{digits}"
    if dp >= len(digits):
        return f"{sign}{digits}{'0' * (dp - len(digits))}"
    return f"{sign}{digits[:dp]}.{digits[dp:]}"
