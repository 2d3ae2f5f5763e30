"""kdra: Kubernetes Dynamic Resource Allocation (resource.k8s.io/v1) for AI accelerator fleets."""

__version__ = "0.1.0"
