"""Test support that kdra's own suites and benchmarks share: a real Kubernetes control plane
(`support.controlplane`, reached with kdra's one REST client, `kdra.kube.client`), polling
(`support.wait`), the invariant checker every fault test uses (`support.invariants`) and the
differential harness that runs a case through the real kube-scheduler (`support.upstream`).

Not part of the kdra package: tests/ is on the path of every pytest process (pyproject.toml), benchmarks
insert it themselves, and nothing under src/ imports it.
"""
