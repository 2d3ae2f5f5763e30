"""resource.k8s.io/v1 and the DRA parts of core/v1, in their Kubernetes shape.

Objects are kept as the plain JSON-compatible dicts Kubernetes serves (typed with TypedDicts in
`kdra.api.types`), so load -> dump never loses a field kdra does not know about, and no conversion
is paid on hot paths. Quantities, loading/dumping, feature gates and well-known names live in this
package; API-server validation, which needs the CEL layer, is kdra.validation.

Surface (docs/contracts.md):
- `kdra.api.quantity`: `Quantity` (exact, int nano-units; `parse`, ordering, `+`/`-`, `str()` as Go's
  String(), `value()`, `milli_value()`, `nanos`), `parse_quantity` (cached), `parse_quantity_any`
  (a quantity field of an object: string with surrounding whitespace trimmed, or number).
- `kdra.api.types`: TypedDicts plus `kind_of`, `name_of`, `namespace_of`, `labels_of`, `uid_of`,
  `object_ref` ("Kind ns/name").
- `kdra.api.load`: `load_text`, `load_paths`, `dump_yaml`, `dump_json`.
- `kdra.api.features`: `FeatureGates` (a release and its DRA gates), `DEFAULT_VERSION`.
- `kdra.api.pods`: a pod's claims (`pod_claim_names`, `entry_claim_name`) and a claim's consumers
  (`reserved_for`, `reserved_for_pod`).
- `kdra.api.wellknown`: driver, DeviceClass and extended-resource names.
"""
