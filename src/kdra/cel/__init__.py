"""The DRA CEL environment (device.driver/attributes/capacity/allowMultipleAllocations).

Engine decision (measured, benchmarks/bench_cel.py): kdra's own CEL implementation -- a parser, a
cel-go-style type checker and a compiler from the checked AST to nested Python closures. On the DRA
workload (2-core machine, Python 3.11.7, evaluations/s):

    workload                                      kdra.cel   cel-expr-python   common-expression-language
                                                             0.1.3 (cel-cpp)   0.10.0 (cel-rust)
    attribute equality                            3.37M      0.62M             0.98M
    capacity compareTo(quantity("24Gi")) >= 0     2.40M      0.24M             0.31M
    semver isGreaterThan(semver("1.2.0"))         1.86M      0.22M             0.15M
    10 selectors x 10k devices incl. conversion   0.34 s     0.55 s            0.77 s
      ... stopping at the first false selector    0.16 s     0.36 s            0.63 s
    references leaked per quantity/semver call    0          1                 0

Why it wins: device attributes stay native Python dicts (a CelDevice is converted once, lazily, and
reused by every selector), there is no boundary crossing per call, constants such as
quantity("24Gi") are folded at compile time, and the common shapes (`device.attributes[D].x`,
`== const`, `>= int`) compile to single closures. It also does what none of the native engines
do: cel.bind, the cost limit, upstream's error texts and the Kubernetes quantity/semver types.

Semantics follow k8s.io/dynamic-resource-allocation/cel/compile.go (v1.36) and cel-go:
- `device` with driver, attributes (map domain -> map id -> value), capacity (map domain -> map id
  -> Quantity) and, with consumable_capacity=True (DRAConsumableCapacity), allowMultipleAllocations;
  names without '/' belong to the driver's domain; an unknown domain is an empty map; a missing id is
  `no such key: <id>`; attributes are converted eagerly per evaluation as upstream does, so an
  attribute without a value fails every selector with `attribute <name>: unsupported attribute value`
  (list values too unless list_type_attributes=True, DRAListTypeAttributes, which also adds
  includes() and allows a dyn result).
- CEL core (literals, int64/uint64 overflow, division by zero, heterogeneous numeric comparison and
  equality, in, ternary, has/all/exists/exists_one/map/filter, conversions, type()), `&&`/`||` with
  commutative error absorption, ext.Strings, the Kubernetes lists/sets/regex/quantity/semver
  libraries, cel.bind. Result must be bool (statically: bool or the unknown type).
- Compile errors carry cel-go's text and `<input>:line:col` with the caret snippet; runtime errors
  carry cel-go's wording. Expressions over 10Ki are rejected; each evaluation has a cost budget of
  1,000,000 (comprehension iterations weighted by their body, size-proportional string/list work)
  ending in `operation cancelled: actual cost limit exceeded`. Regular expressions use RE2 syntax and
  never backtrack exponentially (Pike VM for risky patterns).

Known gaps: timestamp/duration, url/ip/cidr/format/jsonpatch libraries and optional types are not
declared (compile error "undeclared reference"); only the first compile error is reported (cel-go
lists all); cost figures approximate cel-go's (same order, not identical units); estimate_cost is
a coarse static bound; Unicode classes (\\p{..}) in regexes are rejected.

Public surface (docs/contracts.md):
- compile_selector(expression, *, consumable_capacity=True, list_type_attributes=False) -> Program
- device_input(driver, attributes, capacity, allow_multiple_allocations) -> CelDevice
- Program.matches(device) -> bool
- CELCompileError (an InputError) / CELRuntimeError (an AllocationError); str() is cel-go's wording
- estimate_cost(expression) -> int (worst-case estimate for validation; Program.max_cost)
"""

from kdra.cel._api import (
    CEL_SELECTOR_EXPRESSION_MAX_COST,
    CEL_SELECTOR_EXPRESSION_MAX_LENGTH,
    CELCompileError,
    CELRuntimeError,
    Program,
    compile_selector,
    estimate_cost,
)
from kdra.cel._device import CelDevice, device_input

__all__ = [
    "CEL_SELECTOR_EXPRESSION_MAX_COST",
    "CEL_SELECTOR_EXPRESSION_MAX_LENGTH",
    "CELCompileError",
    "CELRuntimeError",
    "CelDevice",
    "Program",
    "compile_selector",
    "device_input",
    "estimate_cost",
]
