"""The DRA CEL environment (device.driver/attributes/capacity/allowMultipleAllocations).

Engine: kdra's own CEL implementation (parser + type checker + closure compiler, pure Python), chosen
by measurement over cel-expr-python (cel-cpp) and common-expression-language (cel-rust); the figures
are in benchmarks/bench_cel.py. Device attributes stay native Python dicts, so there is no per-device
conversion into an engine's value model, and errors, cost limits and the Kubernetes quantity/semver
libraries follow upstream (k8s.io/dynamic-resource-allocation/cel/compile.go, apiserver CEL libraries).

Public surface (docs/contracts.md):
- compile_selector(expression, *, consumable_capacity=True, list_type_attributes=False) -> Program
- device_input(driver, attributes, capacity, allow_multiple_allocations) -> CelDevice
- Program.matches(device) -> bool
- CELCompileError / CELRuntimeError (str() is cel-go's wording)
- estimate_cost(expression) -> int (worst-case estimate, for validation)
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
