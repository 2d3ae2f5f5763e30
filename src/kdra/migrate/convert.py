"""Conversion of one pod template: legacy device requests -> a ResourceClaimTemplate, pod/container claims.

Works on ruamel round-trip mappings in place (so untouched keys keep their comments, order and quoting) and
returns the ResourceClaimTemplate as a plain dict.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

from kdra.migrate import resources as res
from kdra.migrate.workloads import Path, PodTemplate, path_text
from kdra.migrate.yamldoc import delete_key

CLAIMS = "claims"
EXTENDED_RESOURCE = "extended-resource"
MODES = (CLAIMS, EXTENDED_RESOURCE)


@dataclass(frozen=True)
class Options:
    mode: str = CLAIMS
    # Memory of one GPU, to turn HAMi's nvidia.com/gpumem-percentage into an absolute capacity request.
    gpu_memory: str | None = None


@dataclass
class Report:
    """What happened to one input: changes (for --check), warnings, errors, DeviceClasses needed."""

    changes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    classes: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass
class Where:
    """Names the object for messages: `file: document N (Kind ns/name)`."""

    source: str
    document: int
    obj: Any
    prefix: Path = ()  # path of the object inside its document (kind: List items)

    def describe(self) -> str:
        kind = self.obj.get("kind", "?") if isinstance(self.obj, dict) else "?"
        meta = self.obj.get("metadata") if isinstance(self.obj, dict) else None
        meta = meta if isinstance(meta, dict) else {}
        name = str(meta.get("name") or meta.get("generateName") or "<unnamed>")
        namespace = meta.get("namespace")
        ident = f"{namespace}/{name}" if namespace else name
        where = f"{self.source}: document {self.document}"
        if self.prefix:
            where += f" {path_text(self.prefix)}"
        return f"{where} ({kind} {ident})"


@dataclass(frozen=True)
class RequestSpec:
    """A device request before naming: equal specs can share a request (sequential init containers)."""

    device_class: str
    count: int
    selectors: tuple[str, ...] = ()
    capacity: tuple[tuple[str, str], ...] = ()
    suffix: str = "gpu"
    source: str = ""  # how the legacy request read, for the change list


@dataclass
class _Container:
    entry: Any
    index: int
    group: str  # "initContainers" | "containers"
    sidecar: bool
    specs: list[RequestSpec]
    legacy_keys: list[str]


_DNS_LABEL_BAD = re.compile(r"[^a-z0-9-]+")


def _dns_label(text: str, limit: int = 63) -> str:
    label = _DNS_LABEL_BAD.sub("-", text.lower()).strip("-") or "x"
    if len(label) <= limit:
        return label
    digest = hashlib.sha256(label.encode()).hexdigest()[:8]
    return label[: limit - 9].rstrip("-") + "-" + digest


_BINARY = {
    "": 1,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
}


def _bytes(quantity: str) -> int | None:
    match = re.match(r"^(\d+)(Ki|Mi|Gi|Ti|k|M|G|T)?$", quantity.strip())
    if not match:
        return None
    return int(match.group(1)) * _BINARY[match.group(2) or ""]


class PodTemplateConverter:
    """Converts one pod template; collects changes, warnings and errors in `report`."""

    def __init__(self, options: Options, report: Report, where: Where, taken: set[str]) -> None:
        self.options = options
        self.report = report
        self.where = where
        self.taken = taken  # ResourceClaimTemplate names already used in this file

    # -- messages ---------------------------------------------------------------------------------------
    def _error(self, container: str, path: Path, message: str, hint: str) -> None:
        self.report.errors.append(
            f"{self.where.describe()}: container {container!r}: {path_text(self.where.prefix + path)}: "
            f"{message}\n  hint: {hint}"
        )

    def _warn(self, message: str) -> None:
        self.report.warnings.append(f"{self.where.describe()}: {message}")

    # -- reading legacy requests -----------------------------------------------------------------------
    def _legacy_values(self, entry: Any, path: Path) -> tuple[dict[str, int], list[str]] | None:
        """Legacy resource -> whole count for one container; None after reporting an error."""
        resources = entry.get("resources")
        if not isinstance(resources, dict):
            return {}, []
        limits: Any = resources.get("limits") if isinstance(resources.get("limits"), dict) else {}
        requests: Any = resources.get("requests") if isinstance(resources.get("requests"), dict) else {}
        name = str(entry.get("name", "?"))
        values: dict[str, int] = {}
        keys: list[str] = []
        failed = False
        for key in [*limits, *(k for k in requests if k not in limits)]:
            if key in res.UNCONVERTED:
                self._warn(f"container {name!r}: {key} left as is: {res.UNCONVERTED[key]}")
                continue
            if res.classify(key) is None:
                continue
            keys.append(key)
            parsed: dict[str, int] = {}
            for where, table in (("limits", limits), ("requests", requests)):
                if key not in table:
                    continue
                number = res.whole_number(table[key])
                if number is None:
                    self._error(
                        name,
                        (*path, "resources", where, key),
                        f"{str(table[key])!r} is not a whole number",
                        "DRA allocates whole devices and device-plugin resources are integers; "
                        "to share a GPU use MIG (nvidia.com/mig-<profile>) or HAMi's "
                        "nvidia.com/gpumem/gpucores, or round up to a whole count",
                    )
                    failed = True
                    break
                parsed[where] = number
            else:
                if len(parsed) == 2 and parsed["limits"] != parsed["requests"]:
                    self._error(
                        name,
                        (*path, "resources", "requests", key),
                        f"request {parsed['requests']} differs from limit {parsed['limits']}",
                        "extended resources cannot be overcommitted: Kubernetes requires requests == limits; "
                        "set both to the number of devices the container needs",
                    )
                    failed = True
                    continue
                values[key] = parsed.get("limits", parsed.get("requests", 0))
        return None if failed else (values, keys)

    def _specs(self, entry: Any, path: Path, values: dict[str, int]) -> list[RequestSpec] | None:
        """Device requests of one container in claims mode; None after reporting an error."""
        name = str(entry.get("name", "?"))
        kinds = {key: res.classify(key) for key in values}
        hami = {key: v for key, v in values.items() if _kind(kinds[key]).startswith("hami")}
        specs: list[RequestSpec] = []
        limits_path = (*path, "resources", "limits")
        if hami:
            if any(k and k.kind == "mig" for k in kinds.values()):
                self._error(
                    name,
                    limits_path,
                    "HAMi memory/cores shares and MIG devices in one container",
                    "HAMi shares full GPUs; request either MIG devices or a HAMi share",
                )
                return None
            count = values.get(res.NVIDIA_GPU, 1)
            if count == 0:
                self._error(
                    name,
                    (*limits_path, res.NVIDIA_GPU),
                    "nvidia.com/gpu is 0 but HAMi memory/cores are requested",
                    "HAMi shares need at least one GPU; set nvidia.com/gpu to 1 or drop the shares",
                )
                return None
            capacity: dict[str, str] = {}
            if res.HAMI_MEMORY in hami and res.HAMI_MEMORY_PERCENT in hami:
                self._error(
                    name,
                    (*limits_path, res.HAMI_MEMORY_PERCENT),
                    "both nvidia.com/gpumem and nvidia.com/gpumem-percentage are set",
                    "HAMi uses one of them; keep the one you mean",
                )
                return None
            if res.HAMI_MEMORY in hami:
                capacity["memory"] = f"{hami[res.HAMI_MEMORY]}Mi"  # HAMi counts MiB
            if res.HAMI_MEMORY_PERCENT in hami:
                percent = hami[res.HAMI_MEMORY_PERCENT]
                total = _bytes(self.options.gpu_memory) if self.options.gpu_memory else None
                if total is None or not 0 < percent <= 100:
                    self._error(
                        name,
                        (*limits_path, res.HAMI_MEMORY_PERCENT),
                        f"a memory share of {percent}% has no absolute size"
                        if total is None
                        else f"{percent}% is not between 1 and 100",
                        "DRA capacity requests are absolute: pass --gpu-memory=<one GPU's memory, e.g. 80Gi> "
                        "or convert the share to nvidia.com/gpumem (MiB) yourself",
                    )
                    return None
                mib = -(-total * percent // (100 * 2**20))
                capacity["memory"] = f"{mib}Mi"
            if res.HAMI_CORES in hami:
                cores = hami[res.HAMI_CORES]
                if cores > 100:
                    self._error(
                        name,
                        (*limits_path, res.HAMI_CORES),
                        f"{cores} is more than 100 percent of a GPU",
                        "nvidia.com/gpucores is a percentage of one GPU's cores (0-100)",
                    )
                    return None
                capacity["cores"] = str(cores)
            described = ", ".join(f"{k}: {v}" for k, v in values.items() if k == res.NVIDIA_GPU or k in hami)
            specs.append(RequestSpec(res.HAMI_CLASS, count, (), tuple(capacity.items()), "gpu", described))
        for key, value in values.items():
            kind = kinds[key]
            if kind is None or key in hami or (hami and key == res.NVIDIA_GPU) or value == 0:
                continue
            source = f"{key}: {value}"
            if kind.kind == "gpu":
                specs.append(RequestSpec(res.GPU_CLASS, value, (), (), "gpu", source))
            elif kind.kind == "mig":
                suffix = "mig-" + _dns_label(kind.profile.replace(".", ""))
                specs.append(
                    RequestSpec(res.MIG_CLASS, value, (res.mig_selector(kind.profile),), (), suffix, source)
                )
            elif kind.kind == "amd":
                specs.append(RequestSpec(res.AMD_CLASS, value, (), (), "gpu", source))
            elif kind.kind == "tpu":
                specs.append(RequestSpec(res.TPU_CLASS, value, (), (), "tpu", source))
        return specs

    # -- node selectors and affinity on GPU product labels ------------------------------------------------
    def _product_requirements(self, spec: Any) -> tuple[list[tuple[str, str, list[str]]], list[Any]]:
        """Product-label requirements that can move into the claim, and undo actions that remove them."""
        requirements: list[tuple[str, str, list[str]]] = []
        removals: list[Any] = []
        selector = spec.get("nodeSelector")
        if isinstance(selector, dict):
            for label in res.PRODUCT_LABELS:
                if label not in selector:
                    continue
                value = str(selector[label])
                if res.product_expression(res.NVIDIA_DRIVER, label, "In", [value]) is None:
                    self._warn(f"nodeSelector {label}={value} left as is: no known product name for it")
                    continue
                requirements.append((label, "In", [value]))
                removals.append(("nodeSelector", label))
        required = _nested(spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution")
        terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
        if isinstance(terms, list) and terms:
            per_term: list[set[tuple[str, str, tuple[str, ...]]]] = []
            for term in terms:
                found = set()
                for expr in (term.get("matchExpressions") or []) if isinstance(term, dict) else []:
                    if isinstance(expr, dict) and expr.get("key") in res.PRODUCT_LABELS:
                        values = tuple(str(v) for v in expr.get("values") or [])
                        found.add((str(expr["key"]), str(expr.get("operator")), values))
                per_term.append(found)
            union = set().union(*per_term)
            if union:
                convertible = all(t == per_term[0] for t in per_term) and all(
                    op in ("In", "NotIn", "Exists")
                    and (
                        op == "Exists"
                        or res.product_expression(res.NVIDIA_DRIVER, key, op, list(vals)) is not None
                    )
                    for key, op, vals in union
                )
                if not convertible:
                    self._warn(
                        "node affinity on GPU product labels left as is: the terms differ or use an operator "
                        "or value a device selector cannot express"
                    )
                else:
                    for key, op, vals in sorted(union):
                        if op != "Exists":  # a GPU claim already implies a GPU node
                            requirements.append((key, op, list(vals)))
                    removals.append(("affinity", {(k, o, v) for k, o, v in union}))
        preferred = _nested(
            spec, "affinity", "nodeAffinity", "preferredDuringSchedulingIgnoredDuringExecution"
        )
        if isinstance(preferred, list) and any(
            isinstance(p, dict)
            and any(
                isinstance(e, dict) and e.get("key") in res.PRODUCT_LABELS
                for e in _nested(p, "preference", "matchExpressions") or []
            )
            for p in preferred
        ):
            self._warn(
                "preferred node affinity on GPU product labels left as is: claims have no soft selectors"
            )
        return requirements, removals

    # -- the conversion --------------------------------------------------------------------------------------
    def convert(self, tpl: PodTemplate, workload: Any) -> dict[str, Any] | None:
        spec = tpl.template["spec"]
        containers: list[_Container] = []
        failed = False
        zero_keys: list[tuple[Any, list[str]]] = []
        shared: set[int] = set()
        for group in ("initContainers", "containers"):
            entries = spec.get(group)
            if not isinstance(entries, list):
                continue
            for index, entry in enumerate(entries):
                if not isinstance(entry, dict):
                    continue
                path = (*tpl.path, "spec", group, index)
                read = self._legacy_values(entry, path)
                if read is None:
                    failed = True
                    continue
                values, keys = read
                if not keys:
                    continue
                if self.options.mode == EXTENDED_RESOURCE:
                    self._extended(entry, path, values)
                    continue
                specs = self._specs(entry, path, values)
                if specs is None or self._aliased(entry, path, shared):
                    failed = True
                    continue
                sidecar = group == "initContainers" and entry.get("restartPolicy") == "Always"
                if specs:
                    containers.append(_Container(entry, index, group, sidecar, specs, keys))
                else:
                    zero_keys.append((entry, keys))
        if failed or self.options.mode == EXTENDED_RESOURCE:
            return None
        for entry, keys in zero_keys:
            _remove_legacy(entry, keys, drop_empty=True)
            self.report.changes.append(
                f"{self.where.describe()}: container {entry.get('name')!r}: "
                f"removed zero requests {', '.join(keys)}"
            )
        if not containers:
            return None
        return self._apply(tpl, workload, spec, containers)

    def _aliased(self, entry: Any, path: Path, seen: set[int]) -> bool:
        """Whether this container's resources are the same YAML node as another's (`resources: *gpu`):
        editing one would edit both, and each container needs its own request."""
        resources = entry.get("resources")
        nodes = [entry, resources] + [resources.get(k) for k in ("limits", "requests")]
        ids = {id(n) for n in nodes if isinstance(n, (dict, list))}
        if ids & seen:
            self._error(
                str(entry.get("name", "?")),
                (*path, "resources"),
                "shares its resources with another container through a YAML alias",
                "each container gets its own device request; write the resources out (expand the alias)",
            )
            return True
        seen.update(ids)
        return False

    def _extended(self, entry: Any, path: Path, values: dict[str, int]) -> None:
        for key in values:
            legacy = res.classify(key)
            assert legacy is not None
            device_class = res.extended_resource_class(key, legacy)
            if device_class is None:
                self._error(
                    str(entry.get("name", "?")),
                    (*path, "resources", "limits", key),
                    f"{key} is not a device count, so no DeviceClass can serve it as an extended resource",
                    "KEP-5004 maps an extended resource to a number of devices; use --mode claims, "
                    "which turns HAMi shares into consumable capacity requests",
                )
                continue
            self.report.classes.setdefault(device_class["metadata"]["name"], device_class)

    def _apply(
        self, tpl: PodTemplate, workload: Any, spec: Any, containers: list[_Container]
    ) -> dict[str, Any]:
        requirements, removals = self._product_requirements(spec)
        scheduler = spec.get("schedulerName")
        if scheduler and "hami" in str(scheduler):
            self._warn(
                f"schedulerName {scheduler} left as is: with DRA the default scheduler allocates the claims; "
                "drop it once HAMi's DRA driver serves the nodes"
            )
        nvidia_requests = any(s.device_class in res.CLASS_DOMAIN for c in containers for s in c.specs)
        if not nvidia_requests:
            requirements, removals = [], []

        def with_products(spec_: RequestSpec) -> RequestSpec:
            domain = res.CLASS_DOMAIN.get(spec_.device_class)
            if domain is None or not requirements:
                return spec_
            extra = []
            for label, op, values in requirements:
                expression = res.product_expression(domain, label, op, values)
                if expression:
                    extra.append(expression)
            return RequestSpec(
                spec_.device_class,
                spec_.count,
                spec_.selectors + tuple(extra),
                spec_.capacity,
                spec_.suffix,
                spec_.source,
            )

        for container in containers:
            container.specs = [with_products(s) for s in container.specs]

        all_tpu = all(s.device_class == res.TPU_CLASS for c in containers for s in c.specs)
        base = "tpu" if all_tpu else "gpu"
        existing = {str(c.get("name")) for c in spec.get("resourceClaims") or [] if isinstance(c, dict)}
        claim_name = _free(base, existing)
        template_name = self._template_name(workload, tpl.role, base)

        # Requests: app containers and sidecars get their own (distinct devices, as the device plugin gave).
        # A regular init container finishes before app containers and later sidecars start, and after earlier
        # init containers finished, so it reuses an equal request of one of those instead of adding devices.
        names: set[str] = set()
        requests: list[tuple[tuple[int, int, int], str, RequestSpec]] = []
        owners: list[tuple[int, RequestSpec, str]] = []  # (owner position, spec key, request name)
        refs: dict[int, list[str]] = {}
        order = {"initContainers": 0, "containers": 1}

        def new_request(position: int, number: int, spec_: RequestSpec) -> str:
            container = containers[position]
            cname = str(container.entry.get("name", "c"))
            name = _dns_label(cname if len(container.specs) == 1 else f"{cname}-{spec_.suffix}")
            name = _free(name, names)
            names.add(name)
            requests.append(((order[container.group], container.index, number), name, spec_))
            owners.append((position, key_of(spec_), name))
            return name

        def key_of(spec_: RequestSpec) -> RequestSpec:
            return RequestSpec(spec_.device_class, spec_.count, spec_.selectors, spec_.capacity)

        def regular_init(position: int) -> bool:
            return containers[position].group == "initContainers" and not containers[position].sidecar

        def reusable(position: int, spec_: RequestSpec) -> str | None:
            for owner, key, name in owners:
                if key != key_of(spec_) or name in refs.get(position, []):
                    continue
                if containers[owner].group == "containers" or (
                    (owner > position) if not regular_init(owner) else (owner < position)
                ):
                    return name
            return None

        for position, container in enumerate(containers):
            if not regular_init(position):
                refs[position] = [new_request(position, n, s) for n, s in enumerate(container.specs)]
        for position, container in enumerate(containers):
            if regular_init(position):
                refs[position] = []
                for number, spec_ in enumerate(container.specs):
                    refs[position].append(reusable(position, spec_) or new_request(position, number, spec_))
        requests.sort(key=lambda item: item[0])

        # Edit the pod template.
        for position, container in enumerate(containers):
            _remove_legacy(container.entry, container.legacy_keys)
            resources = container.entry.get("resources")
            if not isinstance(resources, dict):
                container.entry["resources"] = resources = _new_map()
            claims = resources.get("claims")
            if not isinstance(claims, list):
                claims = []
                resources["claims"] = claims
            for request_name in refs[position]:
                claims.append(_new_map(name=claim_name, request=request_name))
            what = "; ".join(
                f"{s.source} -> request {r} ({s.device_class}, count {s.count})"
                for s, r in zip(container.specs, refs[position], strict=True)
            )
            self.report.changes.append(
                f"{self.where.describe()}: {path_text(self.where.prefix + tpl.path + ('spec',))}: "
                f"container {container.entry.get('name')!r}: {what}"
            )
        pod_claims = spec.get("resourceClaims")
        if not isinstance(pod_claims, list):
            pod_claims = []
            spec["resourceClaims"] = pod_claims
        pod_claims.append(_new_map(name=claim_name, resourceClaimTemplateName=template_name))
        for removal in removals:
            self._remove_product(spec, removal)
        if requirements:
            labels = ", ".join(sorted({label for label, _, _ in requirements}))
            self.report.changes.append(
                f"{self.where.describe()}: node selection on {labels} -> CEL selectors in {template_name}"
            )
        self.report.changes.append(f"{self.where.describe()}: new ResourceClaimTemplate {template_name}")
        for _, _, spec_ in requests:
            self.report.classes.setdefault(spec_.device_class, res.CLAIM_CLASSES[spec_.device_class])
        return self._claim_template(workload, template_name, requests)

    def _template_name(self, workload: Any, role: str, base: str) -> str:
        meta = workload.get("metadata") if isinstance(workload.get("metadata"), dict) else {}
        owner = str(meta.get("name") or str(meta.get("generateName") or "").rstrip("-") or "workload")
        parts = [owner, _dns_label(role)] if role else [owner]
        name = "-".join([*parts, base])
        if len(name) > 253:
            digest = hashlib.sha256(name.encode()).hexdigest()[:8]
            name = name[:244].rstrip("-.") + "-" + digest
        name = _free(name, self.taken)
        self.taken.add(name)
        return name

    def _claim_template(
        self, workload: Any, name: str, requests: list[tuple[tuple[int, int, int], str, RequestSpec]]
    ) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name}
        namespace = (workload.get("metadata") or {}).get("namespace")
        if namespace:
            meta["namespace"] = str(namespace)
        out = []
        for _, request_name, spec_ in requests:
            exactly: dict[str, Any] = {"deviceClassName": spec_.device_class, "count": spec_.count}
            if spec_.selectors:
                exactly["selectors"] = [{"cel": {"expression": e}} for e in spec_.selectors]
            if spec_.capacity:
                exactly["capacity"] = {"requests": dict(spec_.capacity)}
            out.append({"name": request_name, "exactly": exactly})
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": meta,
            "spec": {"spec": {"devices": {"requests": out}}},
        }

    def _remove_product(self, spec: Any, removal: Any) -> None:
        where, what = removal
        if where == "nodeSelector":
            selector = spec["nodeSelector"]
            delete_key(selector, what)
            if not selector:
                delete_key(spec, "nodeSelector")
            return
        affinity = spec["affinity"]
        node_affinity = affinity["nodeAffinity"]
        required = node_affinity["requiredDuringSchedulingIgnoredDuringExecution"]
        terms = required["nodeSelectorTerms"]
        for term in list(terms):
            exprs = term.get("matchExpressions") or []
            for expr in list(exprs):
                values = tuple(str(v) for v in expr.get("values") or [])
                if (str(expr.get("key")), str(expr.get("operator")), values) in what:
                    exprs.remove(expr)
            if "matchExpressions" in term and not exprs:
                delete_key(term, "matchExpressions")
            if not term:
                terms.remove(term)
        if not terms:
            delete_key(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution")
        if not node_affinity:
            delete_key(affinity, "nodeAffinity")
        if not affinity:
            delete_key(spec, "affinity")


def _kind(legacy: res.Legacy | None) -> str:
    return legacy.kind if legacy else ""


def _nested(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _free(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    number = 2
    while f"{name}-{number}" in taken:
        number += 1
    return f"{name}-{number}"


def _new_map(**items: Any) -> Any:
    from ruamel.yaml.comments import CommentedMap

    out = CommentedMap()
    for key, value in items.items():
        out[key] = value
    return out


def _remove_legacy(entry: Any, keys: list[str], drop_empty: bool = False) -> None:
    resources = entry.get("resources")
    if not isinstance(resources, dict):
        return
    for section in ("limits", "requests"):
        table = resources.get(section)
        if not isinstance(table, dict):
            continue
        for key in keys:
            if key in table:
                delete_key(table, key)
        if not table:
            delete_key(resources, section)
    if drop_empty and not resources:
        delete_key(entry, "resources")
