"""The DRA CEL environment (device.driver/attributes/capacity/allowMultipleAllocations).

Engine decision (measured, benchmarks/bench_cel.py): kdra's own CEL implementation -- a parser, a
cel-go-style type checker and a compiler from the checked AST to nested Python closures. On the DRA
workload (2-core machine, Python 3.11.7, evaluations/s; run A quiet machine, run B final code on a
machine loaded by other jobs):

    workload                                      kdra.cel       cel-expr-python   common-expression-language
                                                  A / B          0.1.3 (cel-cpp)   0.10.0 (cel-rust)
    attribute equality                            3.37M / 1.28M  0.62M / 0.13M     0.98M / 0.31M
    capacity compareTo(quantity("24Gi")) >= 0     2.40M / 0.74M  0.24M / 0.07M     0.31M / 0.12M
    semver isGreaterThan(semver("1.2.0"))         1.86M / 0.71M  0.22M / 0.07M     0.15M / 0.09M
    10 selectors x 10k devices incl. conversion   0.34 / 0.37 s  0.55 / 2.89 s     0.77 / 2.15 s
      ... stopping at the first false selector    0.16 / 0.28 s  0.36 / 0.76 s     0.63 / 1.93 s
    references leaked per quantity/semver call    0              1                 0

Why it wins: device attributes stay native Python dicts (a CelDevice is converted once, lazily, and
reused by every selector), there is no boundary crossing per call, constants such as
quantity("24Gi") are folded at compile time, and the common shapes (`device.attributes[D].x`,
`== const`, `>= int`) compile to single closures. It also has what the native engines lack: a
runtime cost limit (none has one), cel.bind (cel-rust has none), no leak per Python call (cel-cpp
leaks), upstream's error texts and real Kubernetes quantity/semver types.

Semantics follow k8s.io/dynamic-resource-allocation/cel/compile.go (v1.36) and cel-go, and are
pinned by a differential test: tests/cel/celgo_golden.jsonl holds 2,311 expressions recorded from the
real k8s.io/dynamic-resource-allocation v0.36.3 (cel-go v0.26.0) in both environments, curated
cases plus random ones (the DIFFERENTIAL ones also checked against v0.37.2); kdra agrees exactly on
every curated case outside KNOWN_GAPS.
- `device` with driver, attributes (map domain -> map id -> value), capacity (map domain -> map id
  -> Quantity) and allowMultipleAllocations; names without '/' belong to the driver's domain; an
  unknown domain is an empty map; a missing id is `no such key: <id>`; attributes are converted
  eagerly per evaluation as upstream does, so an attribute without a value fails every selector with
  `attribute <name>: unsupported attribute value` (list values too unless list_type_attributes=True,
  DRAListTypeAttributes, which also allows a dyn result).
- Two environments, as upstream: the default is NewExpressions (API validation of new or changed
  expressions: allowMultipleAllocations only with consumable_capacity, includes() only with
  list_type_attributes); stored_expressions=True is what kube-scheduler compiles with (every
  declaration present whatever the gates).
- CEL core (literals, int64/uint64 overflow, division by zero, heterogeneous numeric comparison and
  equality, in, ternary, has/all/exists/exists_one/map/filter, conversions, type()), `&&`/`||` with
  commutative error absorption, lazy cel.bind, homogeneous aggregate literals, ext.Strings, the
  Kubernetes lists/sets/regex/quantity/semver libraries. Result must be bool (statically: bool or
  the unknown type).
- Compile errors carry cel-go's text, every type error with `<input>:line:col` and the caret snippet,
  constant conversions and constant regexes fail as cel-go does ("program instantiation failed: ...",
  "invalid matches argument"); runtime errors carry cel-go's wording, including "no such overload:
  f(type, ...)". Expressions over 10Ki are rejected; each evaluation has a cost budget of 1,000,000
  (comprehension iterations weighted by their body, size-proportional string/list work) ending in
  `operation cancelled: actual cost limit exceeded`; hostile expressions stop in well under a second.
  Regular expressions use RE2 syntax and never backtrack exponentially (Pike VM for risky patterns).
- estimate_cost / Program.max_cost: the API server's worst-case estimate, ported from cel-go v0.29's
  checker/cost.go with Kubernetes' library.CostEstimator and the DRA size estimator (_cost.py); equal to
  upstream's MaxCost on every expression of tests/cel/cost_golden.jsonl (recorded from v0.37.2), so
  validation accepts and rejects what kube-apiserver 1.37 does. Stored objects (with a resourceVersion)
  are not re-validated (kdra.validation.rules), as upstream.

Known gaps: only the first syntax error is reported (cel-go's parser recovers and lists several);
for deeply invalid expressions the set of type errors can differ after the first; \\p{..} Unicode
scripts (\\p{Greek}) and a negated \\P{..} inside a bracket class are rejected in regexes (general
categories such as \\pL and \\p{Nd} work, from Python's Unicode tables); timestamp/duration,
url/ip/cidr/format libraries, optional types,
ext.Lists v3 (distinct, flatten, range, reverse, slice, sort, sortBy, first, last), ext.Strings v2's
format and quote, and two-variable comprehensions (all(i, v, ..), transformList ..) are not declared
("undeclared reference") though upstream's base environment has them; runtime cost units
approximate cel-go's; the estimate follows 1.37 where 1.36 differs (the global matches() and includes()
cost 1 there); a constant non-key index ("invalid
qualifier type") fails at evaluation rather than at program construction.

Public surface (docs/contracts.md):
- compile_selector(expression, *, consumable_capacity=True, list_type_attributes=False,
  stored_expressions=False) -> Program
- device_input(driver, attributes, capacity, allow_multiple_allocations) -> CelDevice
- Program.matches(device) -> bool
- CELCompileError (an InputError) / CELRuntimeError (an AllocationError); str() is cel-go's wording
- estimate_cost(expression, ...) -> int and Program.max_cost (validation: > 1,000,000 is too complex)
- device_reads(expression) / selector_input_key(expressions, device): the device fields an outcome
  depends on (results shared by devices that agree on them)
"""

from kdra.cel._api import (
    CEL_SELECTOR_EXPRESSION_MAX_COST,
    CEL_SELECTOR_EXPRESSION_MAX_LENGTH,
    CELCompileError,
    CELRuntimeError,
    Program,
    compile_derived_attribute,
    compile_selector,
    estimate_cost,
    without_container_note,
)
from kdra.cel._device import CelDevice, device_input
from kdra.cel._reads import device_reads, selector_input_key

__all__ = [
    "CEL_SELECTOR_EXPRESSION_MAX_COST",
    "CEL_SELECTOR_EXPRESSION_MAX_LENGTH",
    "CELCompileError",
    "CELRuntimeError",
    "CelDevice",
    "Program",
    "compile_derived_attribute",
    "compile_selector",
    "device_input",
    "device_reads",
    "estimate_cost",
    "selector_input_key",
    "without_container_note",
]
