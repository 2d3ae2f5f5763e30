"""Conversion of one pod spec: device-plugin requests -> a ResourceClaimTemplate and pod/container claims.

Reads the pod spec's nodes, decides the requests, and records text edits; nothing is written when anything
is invalid or cannot be expressed (the caller drops the editor of a failed document).

Semantics kept from the device plugin:
- each container gets its own devices (one request per container and kind of device);
- a regular init container runs before the app containers and after earlier init containers, so it shares
  their devices; the pod holds max(init, app) devices per kind, Kubernetes' effective request (an app request
  is split when an init container needs fewer devices than it, and the init container gets the rest as its
  own request when it needs more); sidecars already running are not shared;
- node selection on GPU products moves into the device request; a time-sliced GPU (`-SHARED` product label,
  `nvidia.com/gpu.shared`) becomes a share of a device published for multiple allocations, and a GPU under
  MIG's single strategy (`-MIG-<profile>` label) a MIG device of that profile;
- tolerations that the ExtendedResourceToleration admission plugin added for the removed resources stay.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field, replace
from typing import Any

from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from kdra.migrate import resources as res
from kdra.migrate.context import DocContext, free_name
from kdra.migrate.edits import Literal
from kdra.migrate.kinds import Found, Shape
from kdra.migrate.nodes import (
    Path,
    get,
    get_path,
    has_duplicates,
    has_merges,
    lookup,
    own_entries,
    scalar,
    text_of,
)
from kdra.migrate.report import Where

MAX_DEVICES_PER_CLAIM = 32  # resource.k8s.io/v1 AllocationResultsMaxSize
_PLAIN_NUMBER = re.compile(r"\+?[0-9]+(?:\.0*)?")  # a count without a unit or exponent
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True)
class RequestSpec:
    """A device request before naming; requests with the same key can share devices (init containers)."""

    device_class: str
    count: int
    selectors: tuple[str, ...] = ()
    capacity: tuple[tuple[str, str], ...] = ()
    suffix: str = "gpu"
    source: str = ""  # how the legacy request read, for the change list
    whole: bool = False  # whole devices, never a share (kdra.api.whole)
    # For whole GPUs: the node-label requirements on GPU models the request came with (label, op, values).
    products: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    @property
    def key(self) -> tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]]:
        return (self.device_class, self.selectors, self.capacity)


@dataclass
class Container:
    node: MappingNode
    name: str
    group: str  # "init" | "sidecar" | "app"
    init_index: int  # position among init containers (-1 for app containers)
    path: Path  # from the object root
    resources: MappingNode | None
    sections: dict[str, MappingNode]  # "limits" / "requests" -> mapping
    legacy: list[str]  # device-plugin keys to remove (zero counts included)
    values: dict[str, int]  # key -> count (> 0 and 0)
    specs: list[RequestSpec] = field(default_factory=list)


@dataclass
class Part:
    """One request of the claim template; a container may reference several."""

    name: str
    spec: RequestSpec
    count: int
    owner: Container
    kind: str  # "app" | "sidecar" | "extra" (devices an init container needs beyond what it can share)


def dns_label(text: str, limit: int = 63) -> str:
    label = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-") or "x"
    if len(label) <= limit:
        return label
    digest = hashlib.sha256(label.encode()).hexdigest()[:8]
    return label[: limit - 9].rstrip("-") + "-" + digest


@dataclass
class Products:
    """GPU product node selection that moves into the device requests."""

    requirements: list[tuple[str, str, list[str]]] = field(default_factory=list)
    removals: list[tuple[str, Any]] = field(default_factory=list)
    shared: bool = False  # the selected nodes time-slice their GPUs (GFD `-SHARED`)
    mig_profile: str = ""  # the selected nodes run MIG's single strategy with this profile
    labels: list[str] = field(default_factory=list)  # label=value as written, for messages


class PodSpecConverter:
    """Converts one pod spec of a workload (claims mode)."""

    def __init__(self, ctx: DocContext, where: Where, found: Found, obj: MappingNode) -> None:
        self.ctx = ctx
        self.where = where
        self.found = found
        self.obj = obj
        self.spec = found.node
        self.shape: Shape = found.place.shape
        self.failed = False
        self.converted: list[Container] = []  # the containers whose requests became claims

    # -- messages --------------------------------------------------------------------------------------------
    def _at(self, path: Path, node: Node | None = None) -> str:
        return self.where.at(path, node.start_mark.line if node is not None else None)

    def _invalid(self, path: Path, node: Node | None, message: str, hint: str = "") -> None:
        self.failed = True
        self.ctx.invalid(f"{self._at(path, node)}: {message}", hint)

    def _blocked(self, path: Path, node: Node | None, message: str, hint: str = "") -> None:
        self.failed = True
        self.ctx.blocked(f"{self._at(path, node)}: {message}", hint)

    def _warn(self, message: str) -> None:
        self.ctx.report.warnings.append(f"{self.where.describe()}: {message}")

    # -- reading containers ---------------------------------------------------------------------------------
    def containers(self) -> list[Container]:
        out: list[Container] = []
        spec_path = self.found.path
        init_index = 0
        for group_path in self.shape.lists:
            entries = get_path(self.spec, *group_path)
            if not isinstance(entries, SequenceNode):
                continue
            is_init = group_path == ("initContainers",)
            for index, entry in enumerate(entries.value):
                if not isinstance(entry, MappingNode):
                    continue
                path = (*spec_path, *group_path, index)
                if is_init:
                    group = "sidecar" if text_of(get(entry, "restartPolicy")) == "Always" else "init"
                    position = init_index
                    init_index += 1
                else:
                    group, position = "app", -1
                container = self._read(entry, path, group, position, "")
                if container is not None:
                    out.append(container)
        for key in self.shape.singles:
            entry = get(self.spec, key)
            if isinstance(entry, MappingNode):
                container = self._read(entry, (*spec_path, key), "app", -1, self.shape.single_name)
                if container is not None:
                    out.append(container)
        return out

    def _read(
        self, entry: MappingNode, path: Path, group: str, init_index: int, default: str
    ) -> Container | None:
        """A container with device-plugin requests (None when it has none or is invalid)."""
        name_node = get(entry, "name")
        name = text_of(name_node) or default
        res_key, resources, res_owned = lookup(entry, "resources")
        if not isinstance(resources, MappingNode):
            return None
        sections: dict[str, MappingNode] = {}
        vendor_keys: list[ScalarNode] = []  # the device-plugin keys of all sections, to consume
        legacy: list[str] = []
        for section in ("limits", "requests"):
            key_node, table, owned = lookup(resources, section)
            if not isinstance(table, MappingNode):
                continue
            own_vendor = [(k, v) for _, k, v in own_entries(table) if res.is_vendor_resource(str(k.value))]
            vendor = [k for k, _ in own_vendor]
            merged_vendor = has_merges(table) and _merged_vendor(table)
            if not vendor and not merged_vendor:
                continue
            sections[section] = table
            vendor_keys += vendor
            for k in vendor:
                if k.value not in legacy:
                    legacy.append(str(k.value))
            where_path = (*path, "resources", section)
            if not (owned and res_owned) or merged_vendor:
                self._blocked(
                    where_path,
                    key_node,
                    "the accelerator request comes from a YAML merge key (<<), so editing it would edit "
                    "every "
                    "object that merges it",
                    "write the resources out in this container",
                )
                self.ctx.consume(*[k for _, k, _ in own_entries(table)])
                return None
            anchored = next(
                ((k, what) for k, v in own_vendor if (what := _anchored(self.ctx.body, table, k, v))), None
            )
            if anchored is not None:
                named, what = anchored
                self._blocked(
                    (*where_path, str(named.value)),
                    key_node,
                    f"the {what} of {named.value} is a YAML anchor or alias, so removing it here would break "
                    "or change the other places that use it",
                    f"write the {what} out in this container",
                )
                self.ctx.consume(*[k for _, k, _ in own_entries(table)])
                return None
            if has_duplicates(table):
                dup = _duplicates(table)[0]
                self._invalid((*where_path, str(dup.value)), dup, f"duplicate key {dup.value!r}", "keep one")
                # reported: not also as requests "not in a pod spec kdra knows"
                self.ctx.consume(*_section_keys(resources))
                return None
        if not legacy:
            return None
        for node in (resources, *sections.values()):
            other = self.ctx.shared.get(id(node))
            if other is not None:
                self._blocked(
                    (*path, "resources"),
                    res_key,
                    f"shares its resources with container {other!r} through a YAML alias",
                    "each container gets its own device request; write the resources out (expand the alias)",
                )
                self.ctx.consume(*[k for t in sections.values() for _, k, _ in own_entries(t)])
                return None
        for node in (resources, *sections.values()):
            self.ctx.shared[id(node)] = name
        if not _DNS_LABEL.match(name) or len(name) > 63:
            self._invalid(
                (*path, "name"),
                name_node,
                f"{name!r} is not a valid container name",
                "a container name is a DNS label: at most 63 lower-case letters, digits and '-', starting "
                "and "
                "ending with a letter or digit (RFC 1123)",
            )
            self.ctx.consume(*vendor_keys)
            return None
        values = self._values(name, path, sections, legacy)
        self.ctx.consume(*vendor_keys)
        if values is None:
            return None
        return Container(entry, name, group, init_index, path, resources, sections, legacy, values)

    def _values(
        self, name: str, path: Path, sections: dict[str, MappingNode], legacy: list[str]
    ) -> dict[str, int] | None:
        values: dict[str, int] = {}
        ok = True
        for key in legacy:
            parsed: dict[str, int] = {}
            nodes: dict[str, Node] = {}
            for section, table in sections.items():
                key_node, value_node, _ = lookup(table, key)
                if value_node is None:
                    continue
                nodes[section] = key_node or value_node
                raw = scalar(value_node)
                text = text_of(value_node) or ""
                if "{{" in text and self.shape.claims == "podSpecPatch":  # Argo's own tags, filled per run
                    self._blocked(
                        (*path, "resources", section, key),
                        value_node,
                        f"{text!r} is an Argo parameter, not a count: a claim template's count is fixed "
                        "when the workflow is written",
                        "write the number (one template per GPU count), or use --mode extended-resource "
                        "(KEP-5004) to keep the parameterised request",
                    )
                    return None
                if "{{" in text:
                    self._blocked(
                        (*path, "resources", section, key),
                        value_node,
                        f"{text!r} is a Helm template expression, not a count",
                        "migrate rendered manifests: helm template RELEASE CHART | kdra migrate -",
                    )
                    return None
                number = res.whole_number(raw)
                if number is None:
                    self._invalid(
                        (*path, "resources", section, key),
                        value_node,
                        f"{text!r} is not a whole number",
                        "DRA allocates whole devices and device-plugin resources are integers; to share a "
                        "GPU "
                        "use MIG (nvidia.com/mig-<profile>), time-slicing, or HAMi's "
                        "nvidia.com/gpumem/gpucores, "
                        "or round up to a whole count",
                    )
                    ok = False
                    break
                if key == res.HAMI_MEMORY and not _PLAIN_NUMBER.fullmatch(text.strip()):
                    self._invalid(
                        (*path, "resources", section, key),
                        value_node,
                        f"{text!r} is {number} MiB to HAMi",
                        f"HAMi reads {key} as a number of MiB, so a quantity's unit multiplies it (4Gi is "
                        "4294967296 MiB); write the MiB (4Gi -> 4096)",
                    )
                    ok = False
                    break
                if number > res.INT64_MAX:
                    self._invalid(
                        (*path, "resources", section, key),
                        value_node,
                        f"{number} is beyond int64 ({res.INT64_MAX})",
                        "a device count is an int64; no node has that many devices",
                    )
                    ok = False
                    break
                parsed[section] = number
            if not ok:
                continue
            if "limits" not in parsed and "requests" in parsed:
                self._invalid(
                    (*path, "resources", "requests", key),
                    nodes["requests"],
                    "requested without a limit",
                    "Kubernetes requires a limit for extended resources (they cannot be overcommitted); set "
                    f"limits[{key!r}] to the same count",
                )
                ok = False
                continue
            if len(parsed) == 2 and parsed["limits"] != parsed["requests"]:
                self._invalid(
                    (*path, "resources", "requests", key),
                    nodes["requests"],
                    f"request {parsed['requests']} differs from limit {parsed['limits']}",
                    "extended resources cannot be overcommitted: Kubernetes requires requests == limits; set "
                    "both to the number of devices the container needs",
                )
                ok = False
                continue
            refused = res.refusal(key)
            if refused is not None:
                self._blocked((*path, "resources", "limits", key), nodes.get("limits"), *refused)
                ok = False
                continue
            if res.classify(key) is None:
                self._blocked(
                    (*path, "resources", "limits", key),
                    nodes.get("limits"),
                    f"no DRA DeviceClass is known for {key}",
                    "kdra converts nvidia.com/gpu, nvidia.com/gpu.shared, nvidia.com/mig-<profile>, HAMi's "
                    "nvidia.com/gpumem/gpucores, amd.com/gpu, google.com/tpu and gpu.intel.com/i915|xe; "
                    "request "
                    "the devices through a ResourceClaim by hand, or use --mode extended-resource with a "
                    "DeviceClass of your own",
                )
                ok = False
                continue
            values[key] = parsed.get("limits", 0)
        return values if ok else None

    # -- node selection on GPU products ----------------------------------------------------------------------
    def products(self) -> Products | None:
        out = Products()
        selector_key, selector, _ = lookup(self.spec, "nodeSelector")
        spec_path = self.found.path
        if isinstance(selector, MappingNode):
            for _, key, value in own_entries(selector):
                label = str(key.value)
                if label not in res.PRODUCT_LABELS:
                    continue
                text = text_of(value) or ""
                if res.product_expression(res.NVIDIA_DRIVER, label, "In", [text]) is None:
                    self._warn(f"nodeSelector {label}={text} left as is: no known product name for it")
                    continue
                out.requirements.append((label, "In", [text]))
                out.removals.append(("nodeSelector", label))
                out.labels.append(f"{label}={text}")
        required = get_path(
            self.spec, "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"
        )
        terms = get(required, "nodeSelectorTerms")
        if isinstance(terms, SequenceNode) and terms.value:
            per_term: list[set[tuple[str, str, tuple[str, ...]]]] = []
            for term in terms.value:
                found: set[tuple[str, str, tuple[str, ...]]] = set()
                exprs = get(term, "matchExpressions")
                for expr in exprs.value if isinstance(exprs, SequenceNode) else []:
                    key_text = text_of(get(expr, "key"))
                    if key_text in res.PRODUCT_LABELS:
                        values = tuple(text_of(v) or "" for v in _items(get(expr, "values")))
                        found.add((str(key_text), text_of(get(expr, "operator")) or "", values))
                per_term.append(found)
            union = set().union(*per_term)
            if union:
                convertible = all(t == per_term[0] for t in per_term) and all(
                    op in ("In", "NotIn", "Exists")
                    and (
                        op == "Exists"
                        or res.product_expression(res.NVIDIA_DRIVER, lk, op, list(vs)) is not None
                    )
                    for lk, op, vs in union
                )
                if not convertible:
                    self._warn(
                        "node affinity on GPU product labels left as is: the terms differ or use an "
                        "operator or "
                        "value a device selector cannot express"
                    )
                else:
                    for label_key, op, label_values in sorted(union):
                        if op != "Exists":  # a GPU claim already implies a GPU node
                            out.requirements.append((label_key, op, list(label_values)))
                            out.labels.append(f"{label_key} {op} {list(label_values)}")
                    out.removals.append(("affinity", union))
        preferred = get_path(
            self.spec, "affinity", "nodeAffinity", "preferredDuringSchedulingIgnoredDuringExecution"
        )
        if isinstance(preferred, SequenceNode) and any(
            text_of(get(e, "key")) in res.PRODUCT_LABELS
            for p in preferred.value
            for e in _items(get_path(p, "preference", "matchExpressions"))
        ):
            self._warn(
                "preferred node affinity on GPU product labels left as is: claims have no soft selectors"
            )
        # Time-slicing and MIG's single strategy show in GFD's product label.
        shared_flags: set[bool] = set()
        profiles: set[str] = set()
        for label, op, products in out.requirements:
            if label != res.GFD_PRODUCT:
                continue
            for product in products:
                shared_flags.add(res.gfd_shared(product))
                profiles.add(res.gfd_mig_profile(product) or "")
                if op == "NotIn" and (res.gfd_shared(product) or res.gfd_mig_profile(product)):
                    self._blocked(
                        (*spec_path, "affinity"),
                        selector_key,
                        f"NotIn {product}: excluding time-sliced or MIG nodes has no device selector",
                        "select the GPU product you want with In, or keep the node affinity and request the "
                        "devices by hand",
                    )
                    return None
        if len(shared_flags) > 1 or len(profiles) > 1:
            self._blocked(
                (*spec_path, "nodeSelector" if selector is not None else "affinity"),
                selector_key,
                "the GPU product selection mixes time-sliced, MIG and whole GPUs, which are different "
                "devices "
                "under DRA",
                "select one kind of GPU per pod template",
            )
            return None
        out.shared = shared_flags == {True}
        out.mig_profile = next(iter(profiles)) if profiles else ""
        return out

    # -- device requests -------------------------------------------------------------------------------------
    def specs(self, container: Container, products: Products) -> list[RequestSpec] | None:
        values = container.values
        kinds = {key: res.classify(key) for key in values}
        hami = {k: v for k, v in values.items() if (kinds[k] and kinds[k].kind.startswith("hami"))}  # type: ignore[union-attr]
        limits_path = (*container.path, "resources", "limits")
        out: list[RequestSpec] = []
        if hami:
            made = self._hami(container, values, kinds, hami, limits_path)
            if made is None:
                return None
            out.append(made)
        for key, value in values.items():
            kind = kinds[key]
            if kind is None or key in hami or (hami and key == res.NVIDIA_GPU) or value == 0:
                continue
            source = f"{key}: {value}"
            if kind.kind in ("gpu", "shared") and (products.shared or kind.kind == "shared"):
                if value != 1:
                    self._blocked(
                        (*limits_path, key),
                        None,
                        f"{value} time-sliced GPUs in one container",
                        "a time-sliced replica is a share of one GPU and several replicas do not add compute "
                        "(NVIDIA's failRequestsGreaterThanOne); request 1, or whole GPUs",
                    )
                    return None
                out.append(RequestSpec(res.GPU_CLASS, 1, (res.SHARED_SELECTOR,), (), "gpu", source))
            elif kind.kind == "gpu" and products.mig_profile:
                profile = products.mig_profile
                suffix = "mig-" + dns_label(profile.replace(".", "").replace("+", "-"))
                out.append(
                    RequestSpec(res.MIG_CLASS, value, (res.mig_selector(profile),), (), suffix, source)
                )
            elif kind.kind == "gpu":
                out.append(RequestSpec(res.GPU_CLASS, value, (), (), "gpu", source, whole=True))
            elif kind.kind == "mig":
                suffix = "mig-" + dns_label(kind.profile.replace(".", "").replace("+", "-"))
                out.append(
                    RequestSpec(res.MIG_CLASS, value, (res.mig_selector(kind.profile),), (), suffix, source)
                )
            elif kind.kind == "amd":
                out.append(RequestSpec(res.AMD_CLASS, value, (), (), "gpu", source))
            elif kind.kind == "tpu":
                out.append(RequestSpec(res.TPU_CLASS, value, (), (), "tpu", source))
            elif kind.kind == "intel":
                out.append(RequestSpec(res.INTEL_CLASS, value, (), (), "gpu", source))
        return out

    def _hami(
        self,
        container: Container,
        values: dict[str, int],
        kinds: dict[str, res.Legacy | None],
        hami: dict[str, int],
        limits_path: Path,
    ) -> RequestSpec | None:
        if any(k and k.kind == "mig" for k in kinds.values()):
            self._invalid(
                limits_path,
                None,
                "HAMi memory/cores shares and MIG devices in one container",
                "HAMi shares full GPUs; request either MIG devices or a HAMi share",
            )
            return None
        count = values.get(res.NVIDIA_GPU, 1)
        if count == 0:
            self._invalid(
                (*limits_path, res.NVIDIA_GPU),
                None,
                "nvidia.com/gpu is 0 but HAMi memory/cores are requested",
                "HAMi shares need at least one GPU; set nvidia.com/gpu to 1 or drop the shares",
            )
            return None
        capacity: dict[str, str] = {}
        if res.HAMI_MEMORY in hami and res.HAMI_MEMORY_PERCENT in hami:
            self._invalid(
                (*limits_path, res.HAMI_MEMORY_PERCENT),
                None,
                "both nvidia.com/gpumem and nvidia.com/gpumem-percentage are set",
                "HAMi uses one of them; keep the one you mean",
            )
            return None
        if res.HAMI_MEMORY in hami:
            capacity["memory"] = f"{hami[res.HAMI_MEMORY]}Mi"  # HAMi counts MiB
        if res.HAMI_MEMORY_PERCENT in hami:
            percent = hami[res.HAMI_MEMORY_PERCENT]
            total = self.ctx.options.gpu_memory_size()
            if total is None or not 0 < percent <= 100:
                self._blocked(
                    (*limits_path, res.HAMI_MEMORY_PERCENT),
                    None,
                    f"a memory share of {percent}% has no absolute size"
                    if total is None
                    else f"{percent}% is not between 1 and 100",
                    "DRA capacity requests are absolute: pass --gpu-memory=<one GPU's memory, e.g. 80Gi> "
                    "or convert "
                    "the share to nvidia.com/gpumem (MiB) yourself",
                )
                return None
            capacity["memory"] = f"{-(-total * percent // (100 * 2**20))}Mi"
        if res.HAMI_CORES in hami:
            cores = hami[res.HAMI_CORES]
            if cores > 100:
                self._invalid(
                    (*limits_path, res.HAMI_CORES),
                    None,
                    f"{cores} is more than 100 percent of a GPU",
                    "nvidia.com/gpucores is a percentage of one GPU's cores (0-100)",
                )
                return None
            capacity["cores"] = str(cores)
        described = ", ".join(f"{k}: {v}" for k, v in values.items() if k == res.NVIDIA_GPU or k in hami)
        return RequestSpec(res.HAMI_CLASS, count, (), tuple(capacity.items()), "gpu", described)

    def with_products(self, spec: RequestSpec, products: Products) -> RequestSpec:
        domain = res.CLASS_DOMAIN.get(spec.device_class)
        if domain is None or not products.requirements:
            return spec
        extra = [
            e
            for label, op, values in products.requirements
            if (e := res.product_expression(domain, label, op, values))
        ]
        wanted = tuple((label, op, tuple(values)) for label, op, values in products.requirements)
        return replace(spec, selectors=spec.selectors + tuple(extra), products=wanted if spec.whole else ())

    # -- the conversion --------------------------------------------------------------------------------------
    def convert(self) -> dict[str, Any] | None:
        """Record the edits of this pod spec; return its ResourceClaimTemplate (None when there is none)."""
        containers = self.containers()
        if self.failed or not containers:
            return None
        products = self.products()
        if products is None:
            return None
        for container in containers:
            specs = self.specs(container, products)
            if specs is None:
                return None
            container.specs = specs
        if self.failed:
            return None
        nvidia = any(s.device_class in res.CLASS_DOMAIN for c in containers for s in c.specs)
        if not nvidia:
            products = Products()
        for container in containers:
            container.specs = [self.with_products(s, products) for s in container.specs]
        with_devices = [c for c in containers if c.specs]
        parts, refs = plan_requests(with_devices)
        total = sum(p.count for p in parts)
        if total > MAX_DEVICES_PER_CLAIM:
            self._blocked(
                (*self.found.path, "containers"),
                None,
                f"the pod asks for {total} devices, and a ResourceClaim allocates at most "
                f"{MAX_DEVICES_PER_CLAIM}",
                "resource.k8s.io/v1 AllocationResultsMaxSize; split the work over more pods",
            )
            return None
        if not self._claims_location_ok():
            return None
        self._edit_containers(containers, parts, refs)
        self.converted = containers
        if not parts:
            return None
        base = "tpu" if all(p.spec.device_class == res.TPU_CLASS for p in parts) else "gpu"
        existing = {text_of(get(c, "name")) or "" for c in _items(get(self.spec, "resourceClaims"))}
        claim_name = free_name(base, existing)
        template_name = self._template_name(base)
        if template_name is None:
            return None
        for container in with_devices:
            self._add_claim_refs(container, claim_name, [p.name for p in refs[id(container)]])
        self._add_pod_claim(claim_name, template_name)
        self._remove_products(products)
        self._notes(containers, parts, refs, products, template_name)
        self._tolerations(containers)
        self.ctx.report.changes.append(f"{self.where.describe()}: new ResourceClaimTemplate {template_name}")
        for part in parts:
            self.ctx.report.classes.setdefault(
                part.spec.device_class, res.CLAIM_CLASSES[part.spec.device_class]
            )
        return self._claim_template(template_name, parts)

    def _claims_location_ok(self) -> bool:
        if self.shape.claims != "podSpecPatch":
            return True
        patch = get(self.spec, "podSpecPatch")
        if patch is None:
            return True
        text = text_of(patch) or ""
        data: Any = None
        if "{{" not in text:
            try:
                import yaml

                data = yaml.safe_load(text) if text.strip() else {}
            except yaml.YAMLError:
                data = None
        if not isinstance(data, dict):
            self._blocked(
                (*self.found.path, "podSpecPatch"),
                patch,
                "the template's podSpecPatch is not a plain mapping kdra can add resourceClaims to",
                "add `resourceClaims` to the podSpecPatch by hand",
            )
            return False
        return True

    def _edit_containers(
        self, containers: list[Container], parts: list[Part], refs: dict[int, list[Part]]
    ) -> None:
        editor = self.ctx.editor
        for container in containers:
            for table in container.sections.values():
                for key in container.legacy:
                    if lookup(table, key)[0] is not None:
                        editor.delete(table, key)
            assert container.resources is not None
            for section, table in container.sections.items():
                if not editor.remaining_keys(table):
                    editor.delete(container.resources, section)
            zero = [k for k in container.legacy if container.values.get(k, 0) == 0]
            if zero:
                removed = ", ".join(zero)
                self.ctx.report.changes.append(
                    f"{self.where.describe()}: container {container.name!r}: removed zero requests {removed}"
                )
            if not container.specs and not editor.remaining_keys(container.resources):
                editor.delete(container.node, "resources")
            if container.specs:
                what = "; ".join(
                    f"{s.source} -> request{'s' if len(refs_for(refs, container, s)) > 1 else ''} "
                    f"{', '.join(p.name for p in refs_for(refs, container, s))} ({s.device_class}, count "
                    f"{s.count})"
                    for s in container.specs
                )
                self.ctx.report.changes.append(
                    f"{self.where.at(container.path)}: container {container.name!r}: {what}"
                )

    def _add_claim_refs(self, container: Container, claim: str, requests: list[str]) -> None:
        editor = self.ctx.editor
        assert container.resources is not None
        items = [{"name": claim, "request": r} for r in requests]
        existing = get(container.resources, "claims")
        if isinstance(existing, SequenceNode):
            for item in items:
                editor.append(existing, item)
        else:
            editor.add(container.resources, "claims", items)

    def _add_pod_claim(self, claim: str, template: str) -> None:
        editor = self.ctx.editor
        entry = {"name": claim, "resourceClaimTemplateName": template}
        if self.shape.claims == "podSpecPatch":
            self._add_patch_claim(entry)
            return
        existing_key, existing, _ = lookup(self.spec, "resourceClaims")
        if isinstance(existing, SequenceNode):
            editor.append(existing, entry)
        elif existing_key is not None and existing is not None:
            editor.replace(existing, existing_key.end_mark.index, [entry])
        else:
            editor.add(self.spec, "resourceClaims", [entry])

    def _add_patch_claim(self, entry: dict[str, str]) -> None:
        import json

        import yaml

        _, patch, _ = lookup(self.spec, "podSpecPatch")
        if patch is None:
            self.ctx.editor.add(self.spec, "podSpecPatch", Literal(_yaml_block({"resourceClaims": [entry]})))
            return
        data = yaml.safe_load(text_of(patch) or "") or {}
        claims = data.setdefault("resourceClaims", [])
        claims.append(entry)
        assert isinstance(patch, ScalarNode)
        if patch.style in ("|", ">"):
            self.ctx.editor.replace_block(patch, _yaml_block(data))
        else:
            self.ctx.editor.replace_text(patch, json.dumps(json.dumps(data)))

    def _template_name(self, base: str) -> str | None:
        owner = self.where.name or "workload"
        role = dns_label(self.found.role) if self.found.role else ""
        name = "-".join(p for p in (owner, role, base) if p)
        if len(name) > 253:
            digest = hashlib.sha256(name.encode()).hexdigest()[:8]
            name = name[:244].rstrip("-.") + "-" + digest
        name = self.ctx.taken.free(name, 253)
        self.ctx.take(name)
        return name

    def _claim_template(self, name: str, parts: list[Part]) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name}
        if self.where.namespace:
            meta["namespace"] = self.where.namespace
        requests = []
        for part in parts:
            if part.spec.whole:
                from kdra.api.whole import whole_request

                shapes = shareable_shapes(self.ctx.options, part.spec)
                requests.append(
                    whole_request(part.name, part.spec.device_class, part.count, part.spec.selectors, shapes)
                )
                continue
            exactly: dict[str, Any] = {"deviceClassName": part.spec.device_class, "count": part.count}
            if part.spec.selectors:
                exactly["selectors"] = [{"cel": {"expression": e}} for e in part.spec.selectors]
            if part.spec.capacity:
                exactly["capacity"] = {"requests": dict(part.spec.capacity)}
            requests.append({"name": part.name, "exactly": exactly})
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": meta,
            "spec": {"spec": {"devices": {"requests": requests}}},
        }

    # -- product selectors out of nodeSelector / affinity ----------------------------------------------------
    def _remove_products(self, products: Products) -> None:
        editor = self.ctx.editor
        for where, what in products.removals:
            if where == "nodeSelector":
                selector = get(self.spec, "nodeSelector")
                assert isinstance(selector, MappingNode)
                editor.delete(selector, what)
                if not editor.remaining_keys(selector):
                    editor.delete(self.spec, "nodeSelector")
                continue
            affinity = get(self.spec, "affinity")
            node_affinity = get(affinity, "nodeAffinity")
            required = get(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution")
            terms = get(required, "nodeSelectorTerms")
            assert isinstance(terms, SequenceNode)
            for t_index, term in enumerate(terms.value):
                exprs = get(term, "matchExpressions")
                if isinstance(exprs, SequenceNode):
                    for e_index, expr in enumerate(exprs.value):
                        vals = get(expr, "values")
                        values = (
                            tuple(text_of(v) or "" for v in vals.value)
                            if isinstance(vals, SequenceNode)
                            else ()
                        )
                        if (text_of(get(expr, "key")), text_of(get(expr, "operator")), values) in what:
                            editor.delete_item(exprs, e_index)
                    if not editor.remaining_items(exprs):
                        assert isinstance(term, MappingNode)
                        editor.delete(term, "matchExpressions")
                if isinstance(term, MappingNode) and not editor.remaining_keys(term):
                    editor.delete_item(terms, t_index)
            assert isinstance(required, MappingNode) and isinstance(node_affinity, MappingNode)
            assert isinstance(affinity, MappingNode)
            if not editor.remaining_items(terms):
                editor.delete(required, "nodeSelectorTerms")
            if not editor.remaining_keys(required):
                editor.delete(node_affinity, "requiredDuringSchedulingIgnoredDuringExecution")
            if not editor.remaining_keys(node_affinity):
                editor.delete(affinity, "nodeAffinity")
            if not editor.remaining_keys(affinity):
                editor.delete(self.spec, "affinity")

    # -- what else changes, said once per object -------------------------------------------------------------
    def _notes(
        self,
        containers: list[Container],
        parts: list[Part],
        refs: dict[int, list[Part]],
        products: Products,
        template: str,
    ) -> None:
        ctx, where = self.ctx, self.where
        role = f" ({self.found.role})" if self.found.role else ""
        if products.requirements:
            labels = ", ".join(products.labels)
            ctx.report.changes.append(
                f"{where.describe()}: node selection on "
                f"{', '.join(sorted({label for label, _, _ in products.requirements}))} -> CEL selectors "
                f"in {template}"
            )
            ctx.note(where, f"node selection {labels} -> device selectors{role}")
        if products.shared or any(c.values.get(res.NVIDIA_SHARED) for c in containers):
            ctx.note(
                where,
                f"time-sliced GPU{role} -> a share of a gpu.nvidia.com device with allowMultipleAllocations "
                "(the driver's consumable shares; without them the pod stays pending rather than take a "
                "whole GPU)",
            )
        if products.mig_profile:
            ctx.note(
                where,
                f"nvidia.com/gpu{role} -> mig.nvidia.com {products.mig_profile} devices (MIG single "
                "strategy: each "
                "nvidia.com/gpu was such a slice)",
            )
        for container in containers:
            if container.group != "init":
                continue
            shared = [p for p in refs.get(id(container), []) if p.kind != "extra"]
            extra = [p for p in refs.get(id(container), []) if p.kind == "extra"]
            if shared:
                owners = ", ".join(map(repr, sorted({p.owner.name for p in shared})))
                ctx.note(
                    where,
                    f"init container {container.name!r}{role} shares the devices of {owners} "
                    "(it runs first: the pod holds max(init, app) devices, as Kubernetes counts them)",
                )
            if extra:
                ctx.note(
                    where,
                    f"init container {container.name!r}{role} gets {sum(p.count for p in extra)} device(s) "
                    "of its "
                    "own, held for the pod's life (Kubernetes counted them for the pod's life too)",
                )
        del parts

    def _tolerations(self, containers: list[Container]) -> None:
        """Keep what the ExtendedResourceToleration admission plugin (GKE and others) added for the removed
        resources: a NoSchedule toleration per requested extended resource, so tainted GPU nodes still take
        the pod once it no longer requests the resource."""
        names = sorted({k for c in containers for k, v in c.values.items() if v > 0})
        tolerations = get(self.spec, "tolerations")
        present = [
            (text_of(get(t, "key")), text_of(get(t, "operator")), text_of(get(t, "effect")))
            for t in _items(tolerations)
        ]
        missing = [n for n in names if not _tolerated(present, n)]
        if not missing:
            return
        items = [{"key": n, "operator": "Exists", "effect": "NoSchedule"} for n in missing]
        if isinstance(tolerations, SequenceNode):
            for item in items:
                self.ctx.editor.append(tolerations, item)
        elif tolerations is None:
            self.ctx.editor.add(self.spec, "tolerations", items)
        else:
            key_node, _, _ = lookup(self.spec, "tolerations")
            assert key_node is not None
            self.ctx.editor.replace(tolerations, key_node.end_mark.index, items)
        role = f" ({self.found.role})" if self.found.role else ""
        self.ctx.note(
            self.where,
            f"toleration {', '.join(missing)}:NoSchedule added{role} (ExtendedResourceToleration added it "
            "for "
            "the extended resource)",
        )


def _items(node: Node | None) -> list[Node]:
    return list(node.value) if isinstance(node, SequenceNode) else []


def _tolerated(present: list[tuple[str | None, str | None, str | None]], name: str) -> bool:
    """Whether one of the (key, operator, effect) tolerations tolerates a NoSchedule taint on `name`."""
    for key, operator, effect in present:
        if effect not in (None, "", "NoSchedule"):
            continue
        if key == name or (not key and operator == "Exists"):
            return True
    return False


def refs_for(refs: dict[int, list[Part]], container: Container, spec: RequestSpec) -> list[Part]:
    return [p for p in refs.get(id(container), []) if p.spec.key == spec.key]


def plan_requests(containers: list[Container]) -> tuple[list[Part], dict[int, list[Part]]]:
    """The claim's requests and which each container references.

    App containers and sidecars get their own devices. A regular init container takes devices of the same
    kind from the containers that start after it (app containers, later sidecars) and from the extra devices
    of earlier init containers, splitting a request where it needs fewer; what it still lacks becomes an
    extra request of its own. So each kind of device is held max(init, app) times, as Kubernetes counts it.
    """
    names: set[str] = set()
    parts: list[Part] = []
    refs: dict[int, list[Part]] = {}

    def name_for(text: str) -> str:
        name = free_name(dns_label(text), names)
        names.add(name)
        return name

    for container in containers:
        if container.group == "init":
            continue
        refs[id(container)] = []
        for spec in container.specs:
            label = container.name if len(container.specs) == 1 else f"{container.name}-{spec.suffix}"
            part = Part(
                name_for(label), spec, spec.count, container, "app" if container.group == "app" else "sidecar"
            )
            parts.append(part)
            refs[id(container)].append(part)
    for container in containers:
        if container.group != "init":
            continue
        refs[id(container)] = []
        for spec in container.specs:
            pool = [
                p
                for p in parts
                if p.spec.key == spec.key
                and p not in refs[id(container)]
                and (
                    p.kind in ("app", "extra")
                    or (p.kind == "sidecar" and p.owner.init_index > container.init_index)
                )
            ]
            need = spec.count
            exact = [p for p in pool if p.count == need]
            chosen: list[Part] = exact[:1]
            if chosen:
                need = 0
            for part in pool:
                if need == 0:
                    break
                if part.count <= need:
                    chosen.append(part)
                    need -= part.count
                    continue
                # Split: the part keeps count - need, a new part of `need` goes to this init container and to
                # every container that referenced the part, so their device counts stay the same.
                split = Part(
                    name_for(f"{part.name}-{container.name}"), part.spec, need, part.owner, part.kind
                )
                part.count -= need
                parts.insert(parts.index(part) + 1, split)
                for owned in refs.values():
                    if part in owned:
                        owned.insert(owned.index(part) + 1, split)
                chosen.append(split)
                need = 0
            if need:
                label = container.name if len(container.specs) == 1 else f"{container.name}-{spec.suffix}"
                extra = Part(name_for(label), spec, need, container, "extra")
                parts.append(extra)
                chosen.append(extra)
            refs[id(container)].extend(chosen)
    return parts, refs


def _yaml_block(data: dict[str, Any]) -> str:
    from kdra.migrate.edits import Style, document_text

    return document_text(data, Style())


def _section_keys(resources: MappingNode) -> list[ScalarNode]:
    """Every key of a container's `limits` and `requests`."""
    out: list[ScalarNode] = []
    for section in ("limits", "requests"):
        table = get(resources, section)
        if isinstance(table, MappingNode):
            out += [k for _, k, _ in own_entries(table)]
    return out


def _anchored(body: str, table: MappingNode, key: ScalarNode, value: Node) -> str:
    """What of a request entry of `table` removing it would break: "name" when its key is an alias (`*r: 1`:
    the node lies at its anchor, outside the table) or carries an anchor (`&r nvidia.com/gpu: 1`) an alias
    elsewhere may use, "count" when its value carries one (`nvidia.com/gpu: &n 2`, `value: *n` in an env
    entry); "" when neither (a count that is an alias, `nvidia.com/gpu: *n`, goes with no harm)."""
    start = key.start_mark.index
    if not table.start_mark.index <= start < table.end_mark.index or body.startswith("&", start):
        return "name"
    at = value.start_mark.index
    if start < at and body.startswith("&", at):
        return "count"
    return ""


def _merged_vendor(table: MappingNode) -> bool:
    from kdra.migrate.nodes import keys, merged_sources

    if not merged_sources(table):
        return False
    own = {str(k.value) for _, k, _ in own_entries(table)}
    return any(res.is_vendor_resource(k) and k not in own for k in keys(table))


def _duplicates(table: MappingNode) -> list[ScalarNode]:
    from kdra.migrate.nodes import duplicate_keys

    return duplicate_keys(table)


_INDEXES: dict[int, tuple[Any, Any]] = {}


def shareable_shapes(options: Any, spec: RequestSpec) -> list[Any]:
    """The capacity shapes of the shareable devices a whole-GPU request could meet: the target's
    (--fleet), else those of the GPU models the workload names (GFD product label, GKE accelerator,
    architecture) as NVIDIA's driver publishes them for sharing, when they are a few; none otherwise
    (exclusive devices only)."""
    if options.shareable:
        from kdra.allocator.whole import device_index
        from kdra.allocator.whole import shareable_shapes as shapes

        got = _INDEXES.get(id(options))
        if got is None or got[0] is not options:
            got = _INDEXES[id(options)] = (options, device_index(options.shareable))
        return shapes(got[1], spec.device_class, spec.selectors)
    if spec.device_class != res.GPU_CLASS:
        return []
    found = res.catalog_shapes(spec.products)
    # Only a choice of a few models (a product, a GKE accelerator), not "anything but a T4".
    return found if len(found) <= MAX_CATALOG_SHAPES else []


MAX_CATALOG_SHAPES = 3
