"""resource.k8s.io/v1 and the DRA parts of core/v1, in their Kubernetes shape.

Objects are kept as the plain JSON-compatible dicts Kubernetes serves (typed with TypedDicts in
`kdra.api.types`), so load -> dump never loses a field kdra does not know about, and no conversion
is paid on hot paths. Quantities, loading/dumping and API-server validation live in this package.
"""
