"""Fixtures for the Kubernetes-mode (e2e) tests: one real control plane per pytest session.

The control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler; Kubernetes 1.37, or
1.36 with KDRA_K8S_VERSION=1.36, on 127.0.0.1, and KWOK as the kubelet of the test nodes) is built on first
use by hack/k8s/build.sh and hack/k8s/kwok/build.sh (binaries cached in ~/.cache/kdra/k8s/<version> and
~/.cache/kdra/kwok) and started once per session. `make e2e` runs the tests in several
pytest processes (lanes) that all attach to one plane started by `python -m support.shared_plane`
(environment KDRA_E2E_CONTROL_PLANE); without it (`pytest -p no:xdist tests/e2e/...`) the session starts
its own. A failed build makes every e2e test error with the build's output; unit tests are unaffected.

Markers: `e2e_serial` for tests that restart the API server or etcd (they get a plane of their own, after
the lanes); `e2e_lane(name="kube-scheduler")` for tests that use kube-scheduler or create cluster-scoped
objects with well-known names; `e2e_lane(name="kdra-scheduler")` for tests that run `kdra scheduler` under
the default scheduler name or lease. Tests of one lane run one after another; lanes, and the unmarked
tests (a lane of their own), run side by side (hack/e2e.sh, docs/kubernetes-mode.md "Parallel e2e").

Environment: KDRA_K8S_BIN_DIR (prebuilt binaries, skip the build), KDRA_E2E_KEEP=1 (keep the work
directory with logs, certificates and kubeconfig after the session).
"""

from __future__ import annotations

import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kdra.kube.client import KubeClient
from support.controlplane import (
    ControlPlane,
    ensure_binaries,
    ensure_default_service_account,
    ensure_kwok,
    force_delete,
)
from support.invariants import holdings
from support.lanes import Placement, misplaced
from support.shared_plane import AttachedControlPlane, session_config
from support.wait import clear_diagnostics, diagnose, diagnostics, lines_naming

E2E_DIR = Path(__file__).parent


@pytest.hookimpl(tryfirst=True)  # before -m deselects: every test here is e2e, marked or not
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    placements = []
    for item in items:
        if E2E_DIR in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.e2e)
            lane = item.get_closest_marker("e2e_lane")
            placements.append(
                Placement(
                    item.nodeid,
                    tuple(getattr(item, "fixturenames", ())),
                    lane.kwargs.get("name") if lane else None,
                    item.get_closest_marker("e2e_serial") is not None,
                )
            )
    problems = misplaced(placements)
    if problems:
        raise pytest.UsageError("\n".join(problems))


@pytest.fixture(autouse=True)
def _diagnostics() -> Iterator[None]:
    """Logs registered by a test (its kdra processes) are printed by its timed-out waits and failure."""
    clear_diagnostics()
    yield
    clear_diagnostics()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed test's report (and so the lane log) carries the tails of its kdra processes' logs and of
    the control plane's components, read when it failed."""
    outcome = yield
    rep = outcome.get_result()  # type: ignore[attr-defined]
    if not rep.failed or call.when == "teardown":
        return
    logs = diagnostics(lines=80)
    if logs:
        rep.sections.append(("kdra logs", logs))
    cp = getattr(item, "funcargs", {}).get("control_plane")
    if isinstance(cp, ControlPlane):
        rep.sections.append(("control plane log tails", cp.logs(lines=40)))


@pytest.fixture(scope="session")
def control_plane(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    attached = AttachedControlPlane.from_env()
    if attached is not None:
        yield attached
        return
    capman = request.config.pluginmanager.getplugin("capturemanager")
    # Show the (possibly long) build's progress on the terminal instead of capturing it.
    if capman is not None:
        with capman.global_and_fixture_disabled():
            bin_dir = ensure_binaries(sys.stderr)
            kwok = ensure_kwok(sys.stderr)
    else:
        bin_dir = ensure_binaries(sys.stderr)
        kwok = ensure_kwok(sys.stderr)
    work = tmp_path_factory.mktemp("controlplane")
    cp = ControlPlane(bin_dir, work, session_config(kwok))
    cp.start()
    sys.stderr.write(f"\ncontrol plane up in {cp.startup_seconds:.1f}s at {cp.server} (work dir {work})\n")
    try:
        yield cp
    finally:
        cp.stop()
        if os.environ.get("KDRA_E2E_KEEP"):
            sys.stderr.write(f"\ncontrol plane logs kept in {work}\n")
        else:
            shutil.rmtree(work / "etcd", ignore_errors=True)


@pytest.fixture
def plane_gates(control_plane: ControlPlane) -> dict[str, bool]:
    """kube-scheduler and kube-controller-manager running with the plane's own feature gates (restarted
    with them where a corpus case before left its own); only for tests the lanes keep apart from the
    corpus (support.lanes, checked at collection)."""
    control_plane.set_feature_gates({})
    return control_plane.scheduler_feature_gates


@pytest.fixture(scope="session")
def kube(control_plane: ControlPlane) -> KubeClient:
    return control_plane.client()


@pytest.fixture
def namespace(kube: KubeClient, control_plane: ControlPlane) -> Iterator[str]:
    """A fresh namespace per test, its pods force-deleted afterwards (no kubelet finishes them)."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    # Pods are refused until the namespace's default ServiceAccount exists (made here, not waited for).
    ensure_default_service_account(kube, name)
    # Every timed-out wait of the test says who holds what in its namespace and what kube-scheduler said
    # about its pods (kube-scheduler logs each pod as "namespace/name").
    diagnose(f"who holds what in {name}", lambda: holdings(kube, name))
    diagnose(
        f"kube-scheduler on {name}",
        lines_naming(control_plane.work_dir / "logs" / "kube-scheduler.log", f'"{name}/'),
    )
    yield name
    for pod in kube.list("Pod", name):
        force_delete(kube, "Pod", pod["metadata"]["name"], name)
    kube.delete("Namespace", name, missing_ok=True)
    control_plane.check_alive()


@pytest.fixture(scope="session")
def kdra_crds(kube: KubeClient) -> list[str]:
    """deploy/crds installed (PodGroup, Queue, Topology, SchedulingShard of kdra.dev) and Established."""
    import contextlib

    import yaml

    from kdra.cluster.store import AlreadyExistsError
    from support.wait import wait_for

    names = []
    for f in sorted((E2E_DIR.parents[1] / "deploy" / "crds").glob("*.yaml")):
        for doc in yaml.safe_load_all(f.read_text()):
            if doc:
                names.append(doc["metadata"]["name"])
                with contextlib.suppress(AlreadyExistsError):
                    kube.create(doc)

    def established() -> bool:
        for n in names:
            crd = kube.get("CustomResourceDefinition", n)
            conds = (crd.get("status") or {}).get("conditions") or []
            if not any(c["type"] == "Established" and c["status"] == "True" for c in conds):
                return False
        return True

    wait_for(established, 60, "the kdra CRDs to be established")
    return names
