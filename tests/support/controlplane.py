"""A real Kubernetes control plane (1.37 by default, or 1.36: KDRA_K8S_VERSION) on 127.0.0.1 for tests:
etcd, kube-apiserver, kube-controller-manager and kube-scheduler, and optionally KWOK as the kubelet of
the test nodes.

`ensure_binaries()` builds (or reuses) the upstream binaries with hack/k8s/build.sh; `RELEASES` holds
what differs per release (feature gates, locked gates, gate dependencies, runtime config, the Workload
API's version); `ControlPlane` generates certificates, starts the processes on free loopback ports,
writes a kubeconfig, waits
until they are ready and stops exactly the processes it started (each runs in its own process group and
also dies with the Python process that started it). Nodes are API objects: `make_node` / `create_node`
give Ready nodes without the not-ready taint, annotated for KWOK (`kwok.x-k8s.io/node: fake`) unless
`kubelet=False`.

With `ControlPlaneConfig(kwok=True)` KWOK (hack/k8s/kwok/build.sh, `ensure_kwok()`) runs beside the
control plane and manages the annotated nodes with hack/k8s/kwok/stages.yaml: bound pods become Running,
pods of Jobs complete, deleted and evicted pods terminate (graceful deletion finishes without a force
delete), and nodes renew their Leases. Nodes created with `kubelet=False` have no kubelet at all: their
pods stay Pending and only a force delete removes them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import ipaddress
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from kdra.api.types import Obj
from kdra.api.versions import DEFAULT_VERSION
from kdra.cluster.store import StoreError
from kdra.kube.client import KubeClient, KubeConfig
from support.wait import wait_for


class ControlPlaneError(RuntimeError):
    pass


K8S_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd")
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"  # = "fake": KWOK acts as this node's kubelet


@dataclass(frozen=True)
class K8sRelease:
    """What the fixture needs to know about one Kubernetes minor release (pkg/features/kube_features.go
    and the resource.k8s.io REST storage of that release), so that it starts every component with flags
    that release accepts and turns on what kdra's tests use.

    feature_gates: passed to every component; everything not listed keeps the release's default.
    locked_gates: gates locked to their (on) default: passing them as false makes a component refuse to
      start, so `resolve_gates` drops such overrides.
    gate_dependencies: gate -> gates it needs (the DRA part of defaultKubernetesFeatureGateDependencies;
      DynamicResourceAllocation is locked on in both releases): a component refuses to start when a gate
      is on and one it needs is off.
    allocator_gate_defaults: defaults of the gates that decide which of upstream's allocator
      implementations kube-scheduler uses (see support.upstream.scheduler_allocator).
    device_taint_rule_api: the resource.k8s.io version that serves DeviceTaintRule by default.
    workload_api_version: the scheduling.k8s.io version of Workload/PodGroup (behind GenericWorkload),
      which the fixture turns on (ControlPlaneConfig.workload_api).
    """

    minor: str
    feature_gates: Mapping[str, bool]
    locked_gates: frozenset[str]
    gate_dependencies: Mapping[str, tuple[str, ...]]
    runtime_config: tuple[str, ...]
    allocator_gate_defaults: Mapping[str, bool]
    device_taint_rule_api: str
    workload_api_version: str


_DRA_DEPENDENCIES_1_36: dict[str, tuple[str, ...]] = {
    "DRADeviceTaintRules": ("DRADeviceTaints",),
    "DRADeviceBindingConditions": ("DRAResourceClaimDeviceStatus",),
    "DRAResourceClaimGranularStatusAuthorization": ("DRAResourceClaimDeviceStatus",),
    "DRAWorkloadResourceClaims": ("GenericWorkload",),
}

RELEASES: dict[str, K8sRelease] = {
    # 1.36: DRA GA and locked; DRAPrioritizedList GA; DRAAdminAccess GA and locked; DRAConsumableCapacity,
    # DRADeviceTaints, DRAPartitionableDevices, DRADeviceBindingConditions, DRAExtendedResource,
    # DRAResourceClaimDeviceStatus beta and on. DRADeviceTaintRules is beta but off, because its API
    # (resource.k8s.io/v1beta2 DeviceTaintRule) is off by default: both are turned on so device-taint
    # cases can run.
    "1.36": K8sRelease(
        minor="1.36",
        feature_gates={"DRADeviceTaintRules": True, "DRAListTypeAttributes": False},
        locked_gates=frozenset({"DynamicResourceAllocation", "DRAAdminAccess"}),
        gate_dependencies=_DRA_DEPENDENCIES_1_36,
        runtime_config=("resource.k8s.io/v1=true", "resource.k8s.io/v1beta2=true"),
        allocator_gate_defaults={
            "DRADeviceBindingConditions": True,
            "DRAResourceClaimDeviceStatus": True,
            "DRAConsumableCapacity": True,
        },
        device_taint_rule_api="resource.k8s.io/v1beta2",
        workload_api_version="v1alpha2",
    ),
    # 1.37: DRADeviceTaints and DRADeviceTaintRules GA and on (not locked until 1.38), DeviceTaintRule
    # served by resource.k8s.io/v1; DRAExtendedResource, DRAPrioritizedList and
    # DRAResourceClaimDeviceStatus GA and locked (so are NodeDeclaredFeatures and, as before, DRA and
    # DRAAdminAccess); new alpha gates DRADeviceCompatibilityGroups, DRADerivedAttributes,
    # DRAOptionalNodeOperations, DRAPartitionableDevicesType; DRAFractionalCapacityRange beta, on only
    # once the cluster's compatibility version is 1.37 (off in a default 1.37 binary, whose minimum
    # compatibility version is 1.36); DRAWorkloadResourceClaims and GenericWorkload beta, off.
    # v1beta2 stays enabled: clients that still speak it for DeviceTaintRule keep working.
    "1.37": K8sRelease(
        minor="1.37",
        feature_gates={"DRAListTypeAttributes": False},
        locked_gates=frozenset(
            {
                "DynamicResourceAllocation",
                "DRAAdminAccess",
                "DRAExtendedResource",
                "DRAPrioritizedList",
                "DRAResourceClaimDeviceStatus",
                "NodeDeclaredFeatures",
            }
        ),
        gate_dependencies={
            **_DRA_DEPENDENCIES_1_36,
            "DRADeviceCompatibilityGroups": ("DRAPartitionableDevices",),
            "DRAFractionalCapacityRange": ("DRAConsumableCapacity",),
            "DRAPartitionableDevicesType": ("DRAPartitionableDevices", "DRAResourcePoolStatus"),
            "DRAOptionalNodeOperations": ("NodeDeclaredFeatures",),
        },
        runtime_config=("resource.k8s.io/v1=true", "resource.k8s.io/v1beta2=true"),
        allocator_gate_defaults={
            "DRADeviceBindingConditions": True,
            "DRAResourceClaimDeviceStatus": True,
            "DRAConsumableCapacity": True,
            "DRAFractionalCapacityRange": False,
        },
        device_taint_rule_api="resource.k8s.io/v1",
        workload_api_version="v1beta1",
    ),
    # 1.38 (v1.38.0-beta.0): the DynamicResourceAllocation gate is gone; DRAPartitionableDevices,
    # DRADeviceBindingConditions GA and locked; DRADeviceTaints/DRADeviceTaintRules locked;
    # DRAConsumableCapacity and DRAFractionalCapacityRange GA and on (not locked). Workload and PodGroup
    # stay scheduling.k8s.io/v1beta1 behind GenericWorkload (beta, off).
    "1.38": K8sRelease(
        minor="1.38",
        feature_gates={"DRAListTypeAttributes": False},
        locked_gates=frozenset(
            {
                "DRAAdminAccess",
                "DRADeviceBindingConditions",
                "DRADeviceTaintRules",
                "DRADeviceTaints",
                "DRAExtendedResource",
                "DRAPartitionableDevices",
                "DRAPrioritizedList",
                "DRAResourceClaimDeviceStatus",
                "NodeDeclaredFeatures",
            }
        ),
        gate_dependencies={
            **_DRA_DEPENDENCIES_1_36,
            "DRADeviceCompatibilityGroups": ("DRAPartitionableDevices",),
            "DRAFractionalCapacityRange": ("DRAConsumableCapacity",),
            "DRAPartitionableDevicesType": ("DRAPartitionableDevices", "DRAResourcePoolStatus"),
            "DRAOptionalNodeOperations": ("NodeDeclaredFeatures",),
        },
        runtime_config=("resource.k8s.io/v1=true", "resource.k8s.io/v1beta2=true"),
        allocator_gate_defaults={
            "DRADeviceBindingConditions": True,
            "DRAResourceClaimDeviceStatus": True,
            "DRAConsumableCapacity": True,
            "DRAFractionalCapacityRange": True,
        },
        device_taint_rule_api="resource.k8s.io/v1",
        workload_api_version="v1beta1",
    ),
}
DEFAULT_K8S_VERSION = DEFAULT_VERSION  # the release kdra behaves like by default (kdra.api.versions)
K8S_VERSION_ENV = "KDRA_K8S_VERSION"


def k8s_minor(version: str) -> str:
    """ "1.37", "v1.37", "v1.37.2", "1.37.2" -> "1.37"; ControlPlaneError for anything else."""
    v = version.strip().removeprefix("v")
    parts = v.split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise ControlPlaneError(f"not a Kubernetes version: {version!r} (expected e.g. 1.37 or v1.37.2)")
    return f"{int(parts[0])}.{int(parts[1])}"


def k8s_release(version: str | None = None) -> K8sRelease:
    """The release `version` names, else KDRA_K8S_VERSION's, else DEFAULT_K8S_VERSION's."""
    minor = k8s_minor(version or os.environ.get(K8S_VERSION_ENV) or DEFAULT_K8S_VERSION)
    release = RELEASES.get(minor)
    if release is None:
        raise ControlPlaneError(
            f"Kubernetes {minor} is not supported by the test control plane (supported: "
            + ", ".join(sorted(RELEASES))
            + f"; {K8S_VERSION_ENV} selects one)"
        )
    return release


# The selected release's values (KDRA_K8S_VERSION at import time), for callers that predate K8sRelease.
# A ControlPlane uses the release of the binaries it runs (`ControlPlane.release`).
DEFAULT_FEATURE_GATES: dict[str, bool] = dict(k8s_release().feature_gates)
LOCKED_GATES = k8s_release().locked_gates
GATE_DEPENDENCIES: dict[str, tuple[str, ...]] = dict(k8s_release().gate_dependencies)


def resolve_gates(
    base: Mapping[str, bool], overrides: Mapping[str, bool], release: K8sRelease | None = None
) -> dict[str, bool]:
    """`base` updated with `overrides`, without the release's locked gates, and with every gate whose
    dependency is switched off by `overrides` switched off too (unless `overrides` names it)."""
    rel = release or k8s_release()
    merged = dict(base)
    merged.update({k: v for k, v in overrides.items() if k not in rel.locked_gates})
    changed = True
    while changed:
        changed = False
        for gate, needs in rel.gate_dependencies.items():
            if gate in overrides:
                continue
            if any(merged.get(n) is False for n in needs) and merged.get(gate, True) is not False:
                merged[gate] = False
                changed = True
    return merged


# Metadata-level audit events for writes only (the request stage dropped: one event per request, at
# ResponseComplete, with the response code), for the objects a scheduler writes.
AUDIT_POLICY = """{
  "apiVersion": "audit.k8s.io/v1",
  "kind": "Policy",
  "omitStages": ["RequestReceived"],
  "rules": [
    {"level": "None", "verbs": ["get", "list", "watch"]},
    {"level": "Metadata", "resources": [
      {"group": "", "resources": ["pods", "pods/binding", "pods/status", "pods/eviction", "events"]},
      {"group": "resource.k8s.io",
       "resources": ["resourceclaims", "resourceclaims/status", "devicetaintrules"]},
      {"group": "coordination.k8s.io", "resources": ["leases"]}
    ]},
    {"level": "None"}
  ]
}
"""

DEFAULT_RUNTIME_CONFIG: tuple[str, ...] = k8s_release().runtime_config

SERVICE_CIDR = "10.0.0.0/24"  # configuration only: nothing is routed there
CLUSTER_CIDR = "10.64.0.0/16"


def repo_root() -> Path:
    """The source checkout this (editable) package lives in, or KDRA_REPO_ROOT."""
    env = os.environ.get("KDRA_REPO_ROOT")
    if env:
        return Path(env)
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "hack" / "k8s" / "build.sh").is_file():
            return parent
    raise ControlPlaneError(
        "cannot find hack/k8s/build.sh above " + str(here) + "; set KDRA_REPO_ROOT to the kdra checkout "
        "or KDRA_K8S_BIN_DIR to a directory holding " + ", ".join(K8S_BINARIES)
    )


def _run_build(script: Path, what: str, log: IO[str] | None, env: Mapping[str, str] | None = None) -> Path:
    out = log or sys.stderr
    proc = subprocess.Popen(
        ["bash", str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        env={**os.environ, **(env or {})},
    )
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:
        lines.append(line)
        out.write(line)
        out.flush()
    rc = proc.wait()
    if rc != 0:
        tail = "".join(lines[-40:])
        raise ControlPlaneError(f"{script} failed with exit code {rc}; the e2e tests need {what}.\n{tail}")
    return Path(lines[-1].strip()) if lines else Path()


def ensure_kwok(log: IO[str] | None = None) -> Path:
    """Build or reuse KWOK (hack/k8s/kwok/build.sh); return the path of the kwok binary. KDRA_KWOK_BIN
    names a prebuilt one and skips the build."""
    prebuilt = os.environ.get("KDRA_KWOK_BIN")
    if prebuilt:
        if not os.access(prebuilt, os.X_OK):
            raise ControlPlaneError(f"KDRA_KWOK_BIN={prebuilt} is not an executable")
        return Path(prebuilt)
    script = repo_root() / "hack" / "k8s" / "kwok" / "build.sh"
    d = _run_build(script, "KWOK", log)
    if not os.access(d / "kwok", os.X_OK):
        raise ControlPlaneError(f"{script} reported {d}, which lacks kwok")
    return d / "kwok"


def kwok_stages() -> Path:
    return repo_root() / "hack" / "k8s" / "kwok" / "stages.yaml"


def ensure_binaries(log: IO[str] | None = None, version: str | None = None) -> Path:
    """Build or reuse the control-plane binaries of Kubernetes `version` (a minor such as "1.37"; default
    KDRA_K8S_VERSION, else DEFAULT_K8S_VERSION); return their directory.

    KDRA_K8S_BIN_DIR, when set, names a directory of prebuilt binaries and skips the build. Otherwise
    hack/k8s/build.sh runs (a no-op when its cache is current); its progress goes to `log` (default:
    stderr). Raises ControlPlaneError with the build's last lines when it fails.
    """
    prebuilt = os.environ.get("KDRA_K8S_BIN_DIR")
    if prebuilt:
        d = Path(prebuilt)
        missing = [b for b in K8S_BINARIES if not os.access(d / b, os.X_OK)]
        if missing:
            raise ControlPlaneError(f"KDRA_K8S_BIN_DIR={d} lacks executable {', '.join(missing)}")
        return d
    release = k8s_release(version)
    script = repo_root() / "hack" / "k8s" / "build.sh"
    d = _run_build(script, "the control-plane binaries", log, {K8S_VERSION_ENV: release.minor})
    missing = [b for b in K8S_BINARIES if not os.access(d / b, os.X_OK)]
    if missing:
        raise ControlPlaneError(f"{script} reported {d}, which lacks {', '.join(missing)}")
    return d


def binaries_version(bin_dir: Path) -> str:
    """The Kubernetes version the binaries in bin_dir report (`kube-apiserver --version`), e.g. v1.37.2."""
    try:
        out = subprocess.run(
            [str(Path(bin_dir) / "kube-apiserver"), "--version"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ControlPlaneError(f"cannot run {bin_dir}/kube-apiserver --version: {e}") from None
    words = out.split()
    if len(words) < 2 or not words[1].startswith("v1."):
        raise ControlPlaneError(f"{bin_dir}/kube-apiserver --version printed {out.strip()!r}")
    return words[1]


def _ephemeral_low() -> int:
    """The first port of the kernel's range for outgoing connections' local ports."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


# Lock files held for this process's life: a port reserved here is one no other test process picks.
_PORT_LOCKS: dict[int, IO[str]] = {}
PORT_FLOOR = 20000


def free_port() -> int:
    """A port for a server this process starts, that nothing takes before the server binds it. Port 0's
    answer comes from the ephemeral range, where every outgoing connection takes its local port: under
    load one took a port found free before kube-scheduler bound it ("address already in use"). So: a
    random port below that range, reserved across test processes (lanes, soaks) by a lock file held
    until this process exits, and free now."""
    low = _ephemeral_low()
    if low - PORT_FLOOR < 1000:  # no room below the ephemeral range: take the kernel's answer
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    locks = Path(tempfile.gettempdir()) / "kdra-ports"
    locks.mkdir(parents=True, exist_ok=True)
    rng = secrets.SystemRandom()
    for _ in range(1000):
        port = rng.randrange(PORT_FLOOR, low)
        if port in _PORT_LOCKS:
            continue
        lock = open(locks / f"{port}.lock", "w")  # noqa: SIM115 (held until the process exits)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("127.0.0.1", port))
        except OSError:
            lock.close()
            continue
        _PORT_LOCKS[port] = lock
        return port
    raise ControlPlaneError(f"no free port in {PORT_FLOOR}-{low - 1} after 1000 tries")


# -- certificates ---------------------------------------------------------------------------------------
@dataclass
class Certs:
    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    sa_key: Path
    sa_pub: Path
    token_file: Path
    token: str


def generate_certs(directory: Path) -> Certs:
    """A CA, a serving certificate for 127.0.0.1/localhost, a service-account key pair and a static
    token for an admin user in system:masters."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    not_before = now - datetime.timedelta(hours=1)
    not_after = now + datetime.timedelta(days=30)

    def write_key(path: Path, key: Any) -> None:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        path.chmod(0o600)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kdra-test-ca")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    sans: list[x509.GeneralName] = [
        x509.DNSName("localhost"),
        x509.DNSName("kubernetes"),
        x509.DNSName("kubernetes.default"),
        x509.DNSName("kubernetes.default.svc"),
        x509.DNSName("kubernetes.default.svc.cluster.local"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.IPAddress(ipaddress.ip_address("10.0.0.1")),
    ]
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "kube-apiserver")]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    certs = Certs(
        ca_cert=directory / "ca.crt",
        ca_key=directory / "ca.key",
        server_cert=directory / "apiserver.crt",
        server_key=directory / "apiserver.key",
        sa_key=directory / "sa.key",
        sa_pub=directory / "sa.pub",
        token_file=directory / "tokens.csv",
        token=secrets.token_hex(24),
    )
    certs.ca_cert.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    write_key(certs.ca_key, ca_key)
    certs.server_cert.write_bytes(server.public_bytes(serialization.Encoding.PEM))
    write_key(certs.server_key, server_key)
    write_key(certs.sa_key, sa_key)
    certs.sa_pub.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    certs.token_file.write_text(f'{certs.token},kdra-admin,kdra-admin,"system:masters"\n')
    certs.token_file.chmod(0o600)
    return certs


def write_kubeconfig(path: Path, server: str, ca_file: Path, token: str) -> None:
    # JSON is valid YAML, and needs no YAML library here.
    import json

    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "kdra-test", "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": "kdra-admin", "user": {"token": token}}],
        "contexts": [{"name": "kdra-test", "context": {"cluster": "kdra-test", "user": "kdra-admin"}}],
        "current-context": "kdra-test",
    }
    path.write_text(json.dumps(cfg, indent=2) + "\n")
    path.chmod(0o600)


# -- processes ------------------------------------------------------------------------------------------
def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask Linux to SIGKILL the child when the Python process that started it dies (even by SIGKILL).
    SIGKILL, not SIGTERM: all four get the signal at once, and a kube-apiserver whose etcd vanishes in
    the middle of its graceful shutdown was seen hanging there."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


@dataclass
class Component:
    name: str
    args: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None

    def start(self, env: Mapping[str, str] | None = None) -> None:
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._log.write(f"# {' '.join(self.args)}\n".encode())
        self._log.flush()
        self.proc = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: stop() signals exactly this group
            preexec_fn=_die_with_parent,
            env=dict(env) if env is not None else None,
        )

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise ControlPlaneError(
                f"{self.name} exited with code {self.proc.returncode}; last log lines:\n{self.log_tail()}"
            )

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 15.0) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            pgid = proc.pid  # start_new_session: the child leads its own group, pgid == pid
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pgid, signal.SIGKILL)
                proc.wait(timeout)
        if self._log is not None:
            self._log.close()
            self._log = None


@dataclass
class ControlPlaneConfig:
    # None: the release's (K8sRelease.feature_gates / runtime_config of the binaries the plane runs).
    feature_gates: dict[str, bool] | None = None
    runtime_config: tuple[str, ...] | None = None
    # Client rate limits of kube-scheduler and kube-controller-manager. Upstream's defaults (qps 50 /
    # burst 100 for the scheduler, 20/30 for kcm) cap end-to-end throughput; both get the same high values.
    kube_api_qps: int = 500
    kube_api_burst: int = 1000
    verbosity: int = 2
    extra_apiserver_args: tuple[str, ...] = ()
    extra_scheduler_args: tuple[str, ...] = ()
    extra_controller_manager_args: tuple[str, ...] = ()
    # KWOK as the kubelet of nodes annotated kwok.x-k8s.io/node=fake (make_node's default).
    kwok: bool = False
    kwok_binary: Path | None = None  # default: ensure_kwok()
    # The upstream Workload API (scheduling.k8s.io Workload/PodGroup, GenericWorkload), in the version this
    # control plane serves it: v1alpha2 on 1.36, v1beta1 on 1.37 and 1.38; with PodGroup-level
    # ResourceClaims (DRAWorkloadResourceClaims, KEP-5729).
    workload_api: bool = True
    # Write an audit log of every write to pods, bindings, evictions, ResourceClaims, DeviceTaintRules,
    # Events and Leases (metadata level, JSON lines in <work dir>/logs/audit.log): the independent record
    # of who wrote what when, which fault tests read (support.invariants.audit_events). Reads are not
    # logged.
    audit_log: bool = False

    def feature_gates_arg(self) -> str:
        return gates_arg(self.feature_gates or {})


def gates_arg(gates: Mapping[str, bool]) -> str:
    return ",".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(gates.items()))


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler on 127.0.0.1."""

    def __init__(
        self,
        bin_dir: Path,
        work_dir: Path,
        config: ControlPlaneConfig | None = None,
        release: K8sRelease | None = None,
    ) -> None:
        self.bin_dir = Path(bin_dir)
        self.work_dir = Path(work_dir)
        # What the binaries are decides the flags (gates a release does not know make it refuse to start).
        self.version = binaries_version(self.bin_dir)
        self.release = release or k8s_release(self.version)
        cfg = dataclasses.replace(config) if config is not None else ControlPlaneConfig()
        if cfg.feature_gates is None:
            cfg.feature_gates = dict(self.release.feature_gates)
        if cfg.runtime_config is None:
            cfg.runtime_config = self.release.runtime_config
        self.config = cfg
        self.components: dict[str, Component] = {}
        self.certs: Certs | None = None
        self.server = ""
        self.kubeconfig = self.work_dir / "kubeconfig"
        self.audit_log = self.work_dir / "logs" / "audit.log"  # with ControlPlaneConfig(audit_log=True)
        self.etcd_port = 0
        self.apiserver_port = 0
        self.kcm_port = 0
        self.scheduler_port = 0
        self.startup_seconds = 0.0
        self.kwok_port = 0
        if cfg.workload_api:
            gates = dict(cfg.feature_gates)
            gates.setdefault("GenericWorkload", True)
            gates.setdefault("DRAWorkloadResourceClaims", gates["GenericWorkload"])
            api = f"scheduling.k8s.io/{self.release.workload_api_version}=true"
            runtime = cfg.runtime_config
            if gates["GenericWorkload"] and api not in runtime:
                runtime = (*runtime, api)
            cfg.feature_gates, cfg.runtime_config = gates, runtime
        self._scheduler_gates: dict[str, bool] = dict(cfg.feature_gates)

    # -- life cycle ------------------------------------------------------------------------------------
    def start(self, timeout: float = 180.0) -> ControlPlane:
        t0 = time.monotonic()
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _start(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self.work_dir.mkdir(parents=True, exist_ok=True)
        logs = self.work_dir / "logs"
        logs.mkdir(exist_ok=True)
        certs = self.certs = generate_certs(self.work_dir / "pki")
        self.etcd_port, peer_port = free_port(), free_port()
        self.apiserver_port, self.kcm_port, self.scheduler_port = free_port(), free_port(), free_port()
        self.server = f"https://127.0.0.1:{self.apiserver_port}"
        write_kubeconfig(self.kubeconfig, self.server, certs.ca_cert, certs.token)
        cfg = self.config
        gates = cfg.feature_gates_arg()
        b = self.bin_dir

        etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        self._add(
            "etcd",
            [
                str(b / "etcd"),
                "--name=kdra-test",
                f"--data-dir={self.work_dir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=kdra-test={peer_url}",
                "--unsafe-no-fsync",  # test data only: durability is not needed, speed is
                "--log-level=warn",
            ],
        )
        self.components["etcd"].start()
        self._wait_http(f"{etcd_url}/health", "etcd", deadline, component="etcd")

        audit_args: list[str] = []
        if cfg.audit_log:
            policy = self.work_dir / "audit-policy.json"
            policy.write_text(AUDIT_POLICY)
            audit_args = [
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json",
            ]
        apiserver = [
            str(b / "kube-apiserver"),
            f"--etcd-servers={etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--cert-dir={self.work_dir / 'pki'}",
            f"--tls-cert-file={certs.server_cert}",
            f"--tls-private-key-file={certs.server_key}",
            f"--client-ca-file={certs.ca_cert}",
            f"--token-auth-file={certs.token_file}",
            f"--service-account-key-file={certs.sa_pub}",
            f"--service-account-signing-key-file={certs.sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--authorization-mode=Node,RBAC",
            # No kubelet and no node-lifecycle controller: the not-ready taint would never go away.
            "--disable-admission-plugins=TaintNodesByCondition",
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            f"--feature-gates={gates}",
            f"--runtime-config={','.join(cfg.runtime_config or ())}",
            f"--v={cfg.verbosity}",
            *audit_args,
            *cfg.extra_apiserver_args,
        ]
        self._add("kube-apiserver", apiserver)
        self.components["kube-apiserver"].start()
        client = self.client()
        self._wait(
            lambda: client.request("GET", "/readyz", timeout=5) == "ok",
            "kube-apiserver /readyz",
            deadline,
        )

        kcm = self._kcm_args(gates)
        sched = self._scheduler_args(gates)
        self._add("kube-controller-manager", kcm)
        self._add("kube-scheduler", sched)
        self.components["kube-controller-manager"].start()
        self.components["kube-scheduler"].start()
        self._wait_http(
            f"https://127.0.0.1:{self.kcm_port}/healthz",
            "kube-controller-manager",
            deadline,
            component="kube-controller-manager",
        )
        self._wait_http(
            f"https://127.0.0.1:{self.scheduler_port}/healthz",
            "kube-scheduler",
            deadline,
            component="kube-scheduler",
        )
        # Pods are rejected until the service-account controller has made the default ServiceAccount.
        self._wait(
            lambda: client.get("ServiceAccount", "default", "default"),
            "the default ServiceAccount",
            deadline,
        )
        if cfg.kwok:
            self.start_kwok(deadline)

    def start_kwok(self, deadline: float | None = None) -> None:
        """KWOK, the kubelet of the nodes annotated kwok.x-k8s.io/node=fake (stages: hack/k8s/kwok)."""
        deadline = deadline or time.monotonic() + 120
        binary = self.config.kwok_binary or ensure_kwok()
        self.kwok_port = free_port()
        self._add(
            "kwok",
            [
                str(binary),
                f"--kubeconfig={self.kubeconfig}",
                f"--config={kwok_stages()}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                f"--server-address=127.0.0.1:{self.kwok_port}",
                f"--cidr={CLUSTER_CIDR}",
                "--node-ip=127.0.0.1",
                "--node-lease-duration-seconds=40",
                "-v=WARN",
            ],
        )
        self.components["kwok"].start()
        self._wait_http(f"http://127.0.0.1:{self.kwok_port}/healthz", "kwok", deadline, component="kwok")

    def _common_args(self, gates: str) -> list[str]:
        cfg = self.config
        return [
            f"--kubeconfig={self.kubeconfig}",
            f"--authentication-kubeconfig={self.kubeconfig}",
            f"--authorization-kubeconfig={self.kubeconfig}",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
            f"--kube-api-qps={cfg.kube_api_qps}",
            f"--kube-api-burst={cfg.kube_api_burst}",
            f"--feature-gates={gates}",
            f"--v={cfg.verbosity}",
        ]

    def _kcm_args(self, gates: str) -> list[str]:
        certs = self.certs
        assert certs is not None
        return [
            str(self.bin_dir / "kube-controller-manager"),
            *self._common_args(gates),
            f"--secure-port={self.kcm_port}",
            f"--cert-dir={self.work_dir / 'kcm-pki'}",
            # All but node-lifecycle, which would taint and evict our kubelet-less nodes.
            "--controllers=*,-node-lifecycle-controller",
            f"--service-account-private-key-file={certs.sa_key}",
            f"--root-ca-file={certs.ca_cert}",
            f"--cluster-signing-cert-file={certs.ca_cert}",
            f"--cluster-signing-key-file={certs.ca_key}",
            f"--cluster-cidr={CLUSTER_CIDR}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            *self.config.extra_controller_manager_args,
        ]

    def _scheduler_args(self, gates: str) -> list[str]:
        return [
            str(self.bin_dir / "kube-scheduler"),
            *self._common_args(gates),
            f"--secure-port={self.scheduler_port}",
            f"--cert-dir={self.work_dir / 'scheduler-pki'}",
            *self.config.extra_scheduler_args,
        ]

    @property
    def scheduler_feature_gates(self) -> dict[str, bool]:
        return dict(self._scheduler_gates)

    def set_feature_gates(self, gates: Mapping[str, bool], timeout: float = 60.0) -> bool:
        """Restart kube-scheduler and kube-controller-manager with the control plane's gates overridden by
        `gates` (the API server keeps its gates, so it stores every field). Locked gates are dropped and
        dependent gates follow (`resolve_gates`). kcm follows the scheduler so that, e.g., its device-taint
        eviction does not act on taints the scheduler was told to ignore. Returns whether a restart was
        needed; on failure the fixture's own gates are restored before the error is raised."""
        merged = resolve_gates(self.config.feature_gates or {}, gates, self.release)
        names = ("kube-scheduler", "kube-controller-manager")
        if merged == self._scheduler_gates and all(self.components[n].running() for n in names):
            return False
        try:
            self._restart_with_gates(merged, timeout)
        except ControlPlaneError:
            self._restart_with_gates(dict(self.config.feature_gates or {}), timeout)
            raise
        return True

    # The name under which the harness first called it.
    set_scheduler_feature_gates = set_feature_gates

    def _restart_with_gates(self, gates: dict[str, bool], timeout: float) -> None:
        arg = gates_arg(gates)
        deadline = time.monotonic() + timeout
        for name, args, port in (
            ("kube-scheduler", self._scheduler_args(arg), self.scheduler_port),
            ("kube-controller-manager", self._kcm_args(arg), self.kcm_port),
        ):
            self.components[name].stop()
            self._add(name, args)
            self.components[name].start()
            self._wait_http(f"https://127.0.0.1:{port}/healthz", name, deadline, component=name)
        self._scheduler_gates = gates

    def stop(self) -> None:
        """Stop exactly the processes this object started, newest first."""
        errors = []
        for name in reversed(list(self.components)):
            try:
                self.components[name].stop()
            except Exception as e:  # keep stopping the others
                errors.append(f"{name}: {e}")
        if errors:
            raise ControlPlaneError("; ".join(errors))

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- helpers ---------------------------------------------------------------------------------------
    def client(self) -> KubeClient:
        if self.certs is None:
            raise ControlPlaneError("control plane not started")
        # Unthrottled: tests and harnesses create hundreds of objects at once.
        return KubeClient(
            KubeConfig(server=self.server, token=self.certs.token, ca_file=str(self.certs.ca_cert)), qps=0
        )

    def metrics(self, component: str = "kube-scheduler") -> dict[str, float]:
        """A component's Prometheus metrics (`name{labels}` -> value), read with the admin token."""
        import ssl
        import urllib.request

        port = {"kube-scheduler": self.scheduler_port, "kube-controller-manager": self.kcm_port}.get(
            component, self.apiserver_port
        )
        assert self.certs is not None
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # the components serve self-signed certificates
        req = urllib.request.Request(
            f"https://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {self.certs.token}"}
        )
        with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
            text = r.read().decode()
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                with contextlib.suppress(ValueError):
                    out[name] = float(value)
        return out

    def check_alive(self) -> None:
        for c in self.components.values():
            c.check_alive()

    def logs(self, lines: int = 30) -> str:
        """The tail of each component's log (of a plane attached to, the files in its work dir)."""
        if self.components:
            return "\n".join(f"== {n}\n{c.log_tail(lines)}" for n, c in self.components.items())
        out = []
        for path in sorted((self.work_dir / "logs").glob("*.log")):
            if path != self.audit_log:
                out.append(f"== {path.stem}\n{Component(path.stem, [], path).log_tail(lines)}")
        return "\n".join(out)

    def _add(self, name: str, args: list[str]) -> None:
        self.components[name] = Component(name, args, self.work_dir / "logs" / f"{name}.log")

    def _wait(self, fn: Any, what: str, deadline: float) -> None:
        def probe() -> Any:
            self.check_alive()
            return fn()

        remaining = max(1.0, deadline - time.monotonic())
        try:
            wait_for(probe, remaining, what, interval=0.1)
        except TimeoutError as e:
            raise ControlPlaneError(f"{e}\n{self.logs()}") from None

    def _wait_http(self, url: str, what: str, deadline: float, component: str) -> None:
        import ssl
        import urllib.request

        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE  # only a liveness probe of a component we just started

        def ok() -> bool:
            try:
                with urllib.request.urlopen(url, context=ctx, timeout=3) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        self._wait(ok, f"{what} health ({url})", deadline)


# -- nodes ----------------------------------------------------------------------------------------------
def make_node(
    name: str,
    labels: Mapping[str, str] | None = None,
    capacity: Mapping[str, str] | None = None,
    *,
    kubelet: bool = True,
) -> Obj:
    """A Ready Node with status (capacity, allocatable) and no taints, as a kubelet would report it;
    annotated for KWOK unless `kubelet=False` (then nothing ever runs its pods)."""
    cap = {"cpu": "64", "memory": "512Gi", "pods": "110", "ephemeral-storage": "1Ti"}
    cap.update(capacity or {})
    node_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    node_labels.update(labels or {})
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels,
            **({"annotations": {KWOK_NODE_ANNOTATION: "fake"}} if kubelet else {}),
        },
        "spec": {},
        "status": {
            "capacity": dict(cap),
            "allocatable": dict(cap),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kdra test node (no kubelet)",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
            "addresses": [{"type": "Hostname", "address": name}],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "v1.36.3",
                "kubeProxyVersion": "",
                "bootID": "",
                "containerRuntimeVersion": "",
                "kernelVersion": "",
                "machineID": "",
                "osImage": "",
                "systemUUID": "",
            },
        },
    }


def create_node(
    client: KubeClient,
    name: str,
    labels: Mapping[str, str] | None = None,
    capacity: Mapping[str, str] | None = None,
    *,
    kubelet: bool = True,
) -> Obj:
    """Create a Ready, untainted Node (status written through the status subresource)."""
    node = make_node(name, labels, capacity, kubelet=kubelet)
    client.create(node)
    # A merge patch, not a PUT: controllers (ttl, ipam) may already have touched the new Node.
    updated = client.patch("Node", name, {"status": node["status"]}, subresource="status")
    if updated.get("spec", {}).get("taints"):
        updated = client.patch("Node", name, {"spec": {"taints": None}})
    return updated


def ensure_default_service_account(client: KubeClient, namespace: str) -> None:
    """Create the namespace's `default` ServiceAccount instead of waiting for kube-controller-manager's
    service-account controller (pods are refused until it exists; under load the controller takes
    seconds). Whoever comes second gets AlreadyExists, which is fine."""
    from kdra.cluster.store import AlreadyExistsError

    with contextlib.suppress(AlreadyExistsError):
        client.create(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": "default", "namespace": namespace},
            }
        )


def force_delete(client: KubeClient, kind: str, name: str, namespace: str | None = None) -> None:
    """Delete with grace period 0 (pods bound to kubelet-less nodes never finish terminating otherwise)."""
    with contextlib.suppress(StoreError):
        client.delete(kind, name, namespace, grace_period=0, missing_ok=True)


@contextlib.contextmanager
def running_control_plane(
    work_dir: Path,
    config: ControlPlaneConfig | None = None,
    log: IO[str] | None = None,
    version: str | None = None,
) -> Iterator[ControlPlane]:
    """Build-or-reuse the binaries (of `version`, see ensure_binaries), start a control plane in
    work_dir, stop it on exit."""
    bin_dir = ensure_binaries(log, version)
    cp = ControlPlane(bin_dir, work_dir, config)
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
