"""Test support that kdra's own suites and benchmarks share: a real Kubernetes control plane
(`kdra.testing.controlplane`), a minimal REST client (`kdra.testing.kube`) and the differential
harness that runs a case through the real kube-scheduler (`kdra.testing.upstream`).

Nothing here is imported by kdra's runtime layers.
"""
