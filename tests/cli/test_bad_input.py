"""The bad-input corpus across commands: what a new user gets wrong, through the real `kdra` entry point.

Every case asserts the exit code, that stderr is one line naming the object, the field and the rule (the
needles), and that there is no traceback. Inputs that would run unbounded (alias bombs, a billion
replicas) must also fail fast. The allocate-specific corpus is in test_allocate_cli.py (BAD_INPUT).
"""

from __future__ import annotations

import io
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kdra.cli.main import main

CLASS = """\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.example.com}
spec:
  selectors:
  - cel: {expression: device.driver == "gpu.example.com"}
"""
SLICE = """\
apiVersion: resource.k8s.io/v1
kind: ResourceSlice
metadata: {name: n1-gpus}
spec:
  driver: gpu.example.com
  nodeName: n1
  pool: {name: n1, generation: 1, resourceSliceCount: 1}
  devices:
  - name: gpu-0
    capacity: {memory: {value: 80Gi}}
"""
NODE = """\
apiVersion: v1
kind: Node
metadata: {name: n1}
status:
  allocatable: {cpu: "8", memory: 64Gi, pods: "110"}
"""


def claim(
    devices: str = "requests:\n    - name: gpu\n      exactly: {deviceClassName: gpu.example.com}",
) -> str:
    return f"""\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: train, namespace: default}}
spec:
  devices:
    {devices}
"""


def pod(spec_extra: str = "", cpu: str = "1") -> str:
    return f"""\
apiVersion: v1
kind: Pod
metadata: {{name: trainer, namespace: default}}
spec:
  containers:
  - name: main
    image: x
    resources: {{requests: {{cpu: "{cpu}"}}}}
{spec_extra}"""


def docs(*parts: str) -> str:
    return "---\n".join(parts)


BOMB = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)
K8S_BOMB = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  labels: {}\nx:\n  " + BOMB.replace(
    "\n", "\n  "
)


def fleet(pool: str) -> str:
    return f"""\
apiVersion: kdra.dev/v1alpha1
kind: Fleet
metadata: {{name: f}}
spec:
  pools:
  - {pool}
"""


def generator(stream: str) -> str:
    return f"""\
apiVersion: kdra.dev/v1alpha1
kind: WorkloadGenerator
metadata: {{name: g}}
spec:
  duration: 365d
  streams:
  - {stream}
"""


DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 1000000000
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: x}]
"""


@dataclass
class Case:
    id: str
    argv: list[str]  # FILE, FLEET, WORKLOAD are replaced by the paths of the texts below
    code: int
    needles: list[str]
    file: str | None = None
    fleet: str | None = None
    workload: str | None = None
    stdin: str | None = None
    lines: int = 1  # stderr lines expected; 0: an argparse usage error (usage, then one `error:` line)
    extra: dict[str, str] = field(default_factory=dict)


CASES = [
    # -- strict field validation (kubectl --validate=strict) --------------------------------------------
    Case(
        "unknown-field-in-claim",
        ["allocate", "-f", "FILE"],
        2,
        ["ResourceClaim default/train", "spec.devices.requestz", 'unknown field "requestz"', "--validate"],
        file=docs(CLASS, SLICE, claim("requestz: []")),
    ),
    Case(
        "unknown-field-in-container",
        ["allocate", "-f", "FILE"],
        2,
        ["Pod default/trainer", "spec.containers[0].resourcez", "unknown field"],
        file=docs(CLASS, SLICE, pod().replace("resources:", "resourcez:")),
    ),
    Case(
        "unknown-field-in-list-item",
        ["allocate", "-f", "FILE"],
        2,
        ["ResourceSlice n1-gpus", "spec.devices[0].capacityz", "unknown field"],
        file=docs(CLASS, SLICE.replace("capacity:", "capacityz:"), claim()),
    ),
    Case(
        "validate-bad-value",
        ["allocate", "-f", "FILE", "--validate", "sometimes"],
        2,
        ["--validate", "Unsupported value", "'sometimes'", "strict, warn, ignore"],
        file=docs(CLASS, SLICE, claim()),
    ),
    Case(
        "unknown-field-in-workload",
        ["simulate", "--workload", "WORKLOAD", "-o", "json"],
        2,
        ["Pod default/trainer", "spec.containerz", "unknown field"],
        workload=pod().replace("containers:", "containerz:"),
    ),
    Case(
        "unknown-field-in-fleet-pcie",
        ["cluster", "render", "-c", "FLEET"],
        2,
        ["Fleet f", "spec.pools[0].accelerator.pcie.gpuPerRoot", "unknown field"],
        fleet=fleet(
            "{name: p, count: 1, accelerator: {model: H100-SXM-80GB, count: 8, pcie: {gpuPerRoot: 2}}}"
        ),
    ),
    # -- a value of the wrong type is one error: the rules that would then read the field as absent are not
    #    run (kube-apiserver fails to decode it and validates nothing) -------------------------------------
    Case(
        "slice-all-nodes-not-a-boolean",
        ["allocate", "-f", "FILE"],
        2,
        ["ResourceSlice n1-gpus", "spec.allNodes", '"x"', "must be of type boolean"],
        file=docs(CLASS, SLICE.replace("  nodeName: n1\n", "  allNodes: x\n"), claim()),
    ),
    Case(
        "pod-resource-claims-not-a-list",
        ["simulate", "--workload", "WORKLOAD", "--mode", "dra", "-o", "json"],
        2,
        ["Pod default/trainer", "spec.resourceClaims", "must be of type array"],
        workload=pod("  resourceClaims: {name: gpu, resourceClaimName: train}\n").replace(
            'resources: {requests: {cpu: "1"}}', 'resources: {requests: {cpu: "1"}, claims: [{name: gpu}]}'
        ),
    ),
    # -- empty input ----------------------------------------------------------------------------------
    Case("empty-file", ["allocate", "-f", "FILE"], 2, ["no objects in", "input.yaml"], file=""),
    Case("comments-only", ["allocate", "-f", "FILE"], 2, ["no objects in"], file="# nothing here\n---\n"),
    Case("empty-stdin", ["allocate", "-f", "-"], 2, ["no objects in <stdin>"], stdin=""),
    Case("top-empty-file", ["top", "-f", "FILE"], 2, ["no objects in", "input.yaml"], file="\n"),
    Case(
        "simulate-empty-workload",
        ["simulate", "--workload", "WORKLOAD"],
        2,
        ["no objects in"],
        workload="---\n",
    ),
    Case("fleet-empty", ["cluster", "describe", "-c", "FLEET"], 2, ["expected exactly one Fleet"], fleet=""),
    # -- alias bombs, in every command that reads YAML -------------------------------------------------
    Case("bomb-allocate", ["allocate", "-f", "FILE"], 2, ["document 1", "excessive aliasing"], file=K8S_BOMB),
    Case("bomb-top", ["top", "-f", "FILE"], 2, ["excessive aliasing"], file=K8S_BOMB),
    Case(
        "bomb-simulate", ["simulate", "--workload", "WORKLOAD"], 2, ["excessive aliasing"], workload=K8S_BOMB
    ),
    Case("bomb-fleet", ["cluster", "render", "-c", "FLEET"], 2, ["excessive aliasing"], fleet=BOMB),
    Case(
        "bomb-stdin",
        ["allocate", "-f", "-"],
        2,
        ["<stdin>", "excessive aliasing"],
        stdin=K8S_BOMB,
    ),
    Case(
        "recursive-alias",
        ["allocate", "-f", "FILE"],
        2,
        ["recursive alias"],
        file="apiVersion: v1\nkind: Pod\nmetadata: &m {name: p, labels: *m}\n",
    ),
    # -- quantities name the field ----------------------------------------------------------------------
    Case(
        "bad-cpu-request",
        ["allocate", "-f", "FILE"],
        2,
        [
            "Pod default/trainer",
            "spec.containers[0].resources.requests[cpu]",
            "1.5.3Gi",
            "regular expression",
        ],
        file=docs(
            NODE,
            CLASS,
            SLICE,
            pod("  resourceClaims: [{name: gpu, resourceClaimName: train}]\n", cpu="1.5.3Gi"),
            claim(),
        ),
    ),
    Case(
        "bad-node-allocatable",
        ["allocate", "-f", "FILE"],
        2,
        ["Node n1", "status.allocatable[cpu]", "lots"],
        file=docs(NODE.replace('cpu: "8"', "cpu: lots"), CLASS, SLICE, pod(), claim()),
    ),
    Case(
        "fleet-bad-cpu",
        ["cluster", "render", "-c", "FLEET"],
        2,
        ["Fleet f", "pool p", "spec.pools[0].cpu", "'1.5.3Gi'", "regular expression"],
        fleet=fleet("{name: p, count: 1, cpu: 1.5.3Gi}"),
    ),
    Case(
        "fleet-bad-memory",
        ["simulate", "-c", "FLEET"],
        2,
        ["Fleet f", "spec.pools[0].memory", "'lots'"],
        fleet=fleet("{name: p, count: 1, memory: lots}"),
    ),
    Case(
        "generator-bad-memory",
        ["simulate", "--workload", "WORKLOAD"],
        2,
        ["WorkloadGenerator g", "spec.streams[0].memory", "'1.5.3Gi'"],
        workload=generator("{name: s, type: training, arrivals: {count: 1}, memory: 1.5.3Gi}"),
    ),
    # -- bounds: nothing runs unbounded by accident ------------------------------------------------------
    Case(
        "fleet-too-many-nodes",
        ["cluster", "render", "-c", "FLEET"],
        2,
        ["Fleet f", "spec.pools[0].count", "1000000000", "--max-nodes"],
        fleet=fleet("{name: p, count: 1000000000}"),
    ),
    Case(
        "fleet-too-many-nodes-lifted-still-bounded",
        ["cluster", "describe", "-c", "FLEET", "--max-nodes", "100"],
        2,
        ["spec.pools[0].count", "more than 100 nodes"],
        fleet=fleet("{name: p, count: 101}"),
    ),
    Case(
        "fleet-too-many-gpus-per-node",
        ["simulate", "-c", "FLEET"],
        2,
        ["spec.pools[0].accelerator.count", "at most 128 accelerators per node"],
        fleet=fleet("{name: p, count: 1, accelerator: {model: L4, count: 100000}}"),
    ),
    Case(
        "max-nodes-zero",
        ["cluster", "render", "-c", "mixed", "--max-nodes", "0"],
        2,
        ["--max-nodes", "must be at least 1"],
    ),
    Case(
        "deployment-billion-replicas",
        ["simulate", "--workload", "WORKLOAD"],
        2,
        ["Deployment default/web", "spec.replicas", "1,000,000,000", "--max-pods"],
        workload=DEPLOYMENT,
    ),
    Case(
        "generator-arrivals-every-second",
        ["simulate", "--workload", "WORKLOAD"],
        2,
        ["WorkloadGenerator g", "spec.streams[0].arrivals.every", "--max-pods"],
        workload=generator("{name: s, type: training, arrivals: {every: 1s}}"),
    ),
    Case(
        "generator-arrivals-count",
        ["simulate", "--workload", "WORKLOAD"],
        2,
        ["spec.streams[0].arrivals.count", "--max-pods"],
        workload=generator("{name: s, type: training, arrivals: {count: 1000000000}}"),
    ),
    Case(
        "generator-replicas-times-arrivals",
        ["simulate", "--workload", "WORKLOAD", "--max-pods", "1000"],
        2,
        ["spec.streams[0].replicas", "more than 1,000 pods"],
        workload=generator("{name: s, type: inference, arrivals: {count: 100}, replicas: 50}"),
    ),
    Case(
        "exporter-too-many-pods",
        ["exporter", "--from-simulation", "--once", "--workload", "WORKLOAD"],
        2,
        ["spec.replicas", "--max-pods"],
        workload=DEPLOYMENT,
    ),
    # -- durations: NaN and infinity parse as floats but are no time (the event queue stalled on NaN) -------
    Case(
        "arrival-time-nan",
        ["simulate", "--workload", "WORKLOAD", "--mode", "dra", "-o", "json"],
        2,
        ["Pod default/trainer", "metadata.annotations[kdra.dev/arrival-time]", "'NaN'", "duration"],
        workload=pod().replace(
            "namespace: default}", "namespace: default, annotations: {kdra.dev/arrival-time: NaN}}"
        ),
    ),
    Case(
        "generator-duration-inf",
        ["simulate", "--workload", "WORKLOAD", "--mode", "dra", "-o", "json"],
        2,
        ["WorkloadGenerator g", "spec.duration", "inf", "at most 1000 years"],
        workload=generator("{name: s, type: training, arrivals: {count: 1}}").replace("365d", ".inf"),
    ),
    Case(
        "podgroup-timeout-inf",
        ["simulate", "--workload", "WORKLOAD", "--mode", "dra", "-o", "json"],
        2,
        ["PodGroup ml/g", "spec.scheduleTimeout", "'1e999'", "duration"],
        workload="apiVersion: kdra.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: g, namespace: ml}\n"
        "spec: {minMember: 2, scheduleTimeout: '1e999'}\n",
    ),
    Case(
        "generator-duration-past-year-9999",
        ["simulate", "--workload", "WORKLOAD", "--mode", "dra", "-o", "json"],
        2,
        ["WorkloadGenerator g", "spec.duration", "100000000000000000000", "at most 1000 years"],
        workload=generator("{name: s, type: training, arrivals: {count: 1}}").replace(
            "365d", "100000000000000000000"
        ),
    ),
    Case(
        "queue-bad-duration-is-refused-not-pending",
        ["simulate", "--workload", "WORKLOAD", "--mode", "dra", "-o", "json"],
        2,
        ["Queue q", "spec.reclaimMinRuntime", "'1.5.3Gi'", "duration"],
        workload="apiVersion: kdra.dev/v1alpha1\nkind: Queue\nmetadata: {name: q}\n"
        "spec: {reclaimMinRuntime: 1.5.3Gi}\n---\n" + pod(),
    ),
    Case(
        "podgroup-topology-constraint-not-a-map",
        ["simulate", "--workload", "WORKLOAD", "--mode", "dra", "-o", "json"],
        2,
        ["PodGroup ml/g", "spec.topologyConstraint", "must be of type object"],
        workload="apiVersion: kdra.dev/v1alpha1\nkind: PodGroup\nmetadata: {name: g, namespace: ml}\n"
        "spec: {minMember: 2, topologyConstraint: 9223372036854775808}\n",
    ),
    # -- WorkloadGenerator fields of the wrong type or shape: named once, not per generated object --------
    Case(
        "generator-type-is-a-list",
        ["simulate", "--workload", "WORKLOAD", "--mode", "dra", "-o", "json"],
        2,
        ["WorkloadGenerator g", "spec.streams[0].type", "Unsupported value: ['training']"],
        workload=generator("{name: s, type: [training], arrivals: {count: 1}}"),
    ),
    Case(
        "generator-namespace-not-a-label",
        ["simulate", "--workload", "WORKLOAD", "--mode", "dra", "-o", "json"],
        2,
        ["WorkloadGenerator g", "spec.namespace", "'1.5'", "DNS label"],
        workload=generator("{name: s, type: training, arrivals: {count: 1}}").replace(
            "  duration: 365d", '  duration: 365d\n  namespace: "1.5"'
        ),
    ),
    # -- PCIe / NUMA layouts in Fleet files ---------------------------------------------------------------
    Case(
        "pcie-does-not-divide",
        ["cluster", "render", "-c", "FLEET"],
        2,
        ["spec.pools[0].accelerator.pcie.gpusPerRoot", "must divide the node's 8 GPUs"],
        fleet=fleet(
            "{name: p, count: 1, accelerator: {model: H100-SXM-80GB, count: 8, pcie: {gpusPerRoot: 3}}}"
        ),
    ),
    Case(
        "pcie-gpu-in-no-group",
        ["cluster", "render", "-c", "FLEET"],
        2,
        ["spec.pools[0].accelerator.pcie.roots", "GPU(s) [3] in no group"],
        fleet=fleet("{name: p, count: 1, accelerator: {model: L4, count: 4, pcie: {roots: [[0, 1], [2]]}}}"),
    ),
    Case(
        "pcie-root-across-numa",
        ["cluster", "render", "-c", "FLEET"],
        2,
        ["spec.pools[0].accelerator.pcie", "share a PCIe root but not a NUMA node"],
        fleet=fleet(
            "{name: p, count: 1, accelerator: "
            "{model: L4, count: 4, pcie: {roots: [[0, 1, 2, 3]], numaNodes: 2}}}"
        ),
    ),
    Case(
        "pcie-numa-on-amd",
        ["cluster", "render", "-c", "FLEET"],
        2,
        ["spec.pools[0].accelerator.pcie.numaNodes", "Forbidden", "AMD"],
        fleet=fleet("{name: p, count: 1, accelerator: {model: MI300X, count: 8, pcie: {numaNodes: 2}}}"),
    ),
    Case(
        "pcie-on-tpu",
        ["cluster", "render", "-c", "FLEET"],
        2,
        ["spec.pools[0].accelerator.pcie", "Forbidden"],
        fleet=fleet(
            "{name: p, count: 4, accelerator: {model: tpu-v6e, topology: 4x4, pcie: {gpusPerRoot: 1}}}"
        ),
    ),
    # -- flags ------------------------------------------------------------------------------------------
    Case(
        "nodes-negative",
        ["allocate", "-f", "FILE", "--nodes", "-1"],
        2,
        ["--nodes", "at least 0"],
        file=CLASS,
    ),
    Case(
        "empty-namespace",
        ["allocate", "-f", "FILE", "-n", ""],
        2,
        ["-n/--namespace", "must not be empty"],
        file=CLASS,
    ),
    Case(
        "namespace-and-all",
        ["allocate", "-f", "FILE", "-n", "a", "-A"],
        2,
        ["-A/--all-namespaces", "not allowed with argument -n/--namespace"],
        file=CLASS,
        lines=0,
    ),
    Case(
        "top-unknown-node",
        ["top", "-f", "FILE", "--node", "nope"],
        1,
        ['node "nope" not found'],
        file=docs(NODE, SLICE),
    ),
    Case(
        "exporter-bad-at",
        ["exporter", "--from-simulation", "--once", "--at", "soon"],
        2,
        ["--at", "'soon'", "duration"],
    ),
    Case(
        "replay-bad-policy-repeated",
        ["replay", "alibaba", "--policy", "kdra", "--policy", "nope"],
        2,
        ["--policy", "Unsupported value", "'nope'"],
    ),
    Case(
        "attributes-unknown-driver",
        ["cluster", "attributes", "-c", "mixed", "--driver", "gpu.example.com"],
        2,
        ["--driver gpu.example.com", "Not found"],
    ),
    Case(
        "attributes-empty-driver",  # '' once listed every driver with exit 0
        ["cluster", "attributes", "-c", "mixed", "--driver", ""],
        2,
        ["--driver", "Required value"],
    ),
    Case(
        "export-o-is-a-format",
        ["export", "--kubeconfig", "/nonexistent/kubeconfig", "--output-file", "a.yaml", "-o", "b.yaml"],
        2,
        ["-o/--output", "invalid choice", "'b.yaml'"],
        lines=0,
    ),
    Case("completion-unknown-shell", ["completion", "fish"], 2, ["invalid choice", "'fish'"], lines=0),
]


class _TooSlow(BaseException):  # not an Exception: main() must not report it as an internal error
    pass


def _run(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[int, str, str]:
    argv = []
    for arg in case.argv:
        text = {"FILE": case.file, "FLEET": case.fleet, "WORKLOAD": case.workload}.get(arg)
        if arg in ("FILE", "FLEET", "WORKLOAD") and text is not None:
            path = tmp_path / {"FILE": "input.yaml", "FLEET": "fleet.yaml", "WORKLOAD": "workload.yaml"}[arg]
            path.write_text(text)
            arg = str(path)
        argv.append(arg)
    if case.stdin is not None:
        monkeypatch.setattr("sys.stdin", io.StringIO(case.stdin))
    monkeypatch.chdir(tmp_path)

    def too_slow(signum: int, frame: object) -> None:
        raise _TooSlow

    previous = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(60)  # an input that stalls the command fails the test instead of hanging the suite
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors
        code = exc.code if isinstance(exc.code, int) else 2
    except _TooSlow:
        pytest.fail(f"{case.id}: still running after 60 s: bad input must fail fast")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    started = time.monotonic()
    code, out, err = _run(case, tmp_path, capsys, monkeypatch)
    assert time.monotonic() - started < 20, "bad input must fail fast"
    assert "Traceback" not in err and "Traceback" not in out
    assert code == case.code, f"exit {code}, expected {case.code}\n{err}"
    for needle in case.needles:
        assert needle in err, f"stderr lacks {needle!r}:\n{err}"
    lines = [line for line in err.splitlines() if line.strip()]
    if case.lines == 0:
        assert len([line for line in lines if "error:" in line]) == 1 and lines[0].startswith("usage:"), err
    else:
        assert len(lines) == case.lines, f"expected {case.lines} line(s) on stderr:\n{err}"
    assert "internal error" not in err


ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("command", [["allocate", "-f", "-"], ["top", "-f", "-"]])
def test_closed_stdin_is_a_clear_error(command: list[str]) -> None:
    """`kdra allocate -f - <&-`: no stdin at all (sys.stdin is None in Python), a real process."""
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from kdra.cli.main import main; sys.exit(main(sys.argv[1:]))",
            *command,
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lambda: __import__("os").close(0),
    )
    assert proc.returncode == 2, proc.stderr
    assert "standard input is closed" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_validate_warn_and_ignore(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "in.yaml"
    path.write_text(
        docs(
            CLASS,
            SLICE,
            claim(
                "requests:\n    - name: gpu\n      exactly: {deviceClassName: gpu.example.com}\n"
                "    requestz: []"
            ),
        )
    )
    assert main(["allocate", "-f", str(path), "--validate=warn", "-o", "name"]) == 0
    out, err = capsys.readouterr()
    assert out == "resourceclaim.resource.k8s.io/train\n"
    assert (
        err.strip() == 'Warning: ResourceClaim default/train: spec.devices.requestz: unknown field "requestz"'
    )
    assert main(["allocate", "-f", str(path), "--validate=false", "-o", "name"]) == 0
    assert capsys.readouterr().err == ""


def test_internal_errors_are_not_allocation_errors(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 3 is for allocation errors only: a bug is one line and exit 4."""
    import kdra.cli.allocate as allocate

    def broken(args: object) -> int:
        raise KeyError("boom")

    monkeypatch.setattr(allocate, "_run", broken)
    assert main(["allocate", "-f", "x.yaml"]) == 4
    err = capsys.readouterr().err
    assert err.startswith("error: internal error: KeyError") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
