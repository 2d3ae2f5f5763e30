"""Test support that kdra's own suites and benchmarks share: a real Kubernetes control plane
(`kdra.testing.controlplane`, reached with kdra's one REST client, `kdra.kube.client`), polling
(`kdra.testing.wait`), the invariant checker every fault test uses (`kdra.testing.invariants`) and the
differential harness that runs a case through the real kube-scheduler (`kdra.testing.upstream`).

Nothing here is imported by kdra's runtime layers.
"""
