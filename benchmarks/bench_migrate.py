"""`kdra migrate` throughput and memory on multi-megabyte streams.

Builds streams from the migration corpus (tests/migrate/manifests, the inputs that convert), the top-level
workloads renamed so most names stay unique (the items of `kind: List` documents keep theirs: their templates
get numbered names, as repeated workload names across namespaces do), and runs `kdra migrate -j N` on them in
a fresh process each, printing input size, worker processes, wall and CPU time (the workers' included),
throughput per wall second and per CPU second, and peak RSS of the process and of its largest worker (VmHWM,
ru_maxrss); a warm-up run compiles the modules first, as an installed kdra has them compiled:

  gpu      every document a GPU workload (the worst case: each one is parsed and edited), with one process
           and with the default number of workers (the usable CPUs, at most 8)
  cluster  a cluster dump: one GPU workload in ten, the rest Services, ConfigMaps and CPU Deployments
  check    `--check` on the gpu stream (no output is produced)
  repo     the gpu stream as a folder of files of ten documents each (a repository of manifests)

Memory should follow the largest document, not the input: the 5x larger stream must not need 5x the memory.
`--profile` prints the top functions of a cProfile run on the gpu stream (one process) instead.

    python benchmarks/bench_migrate.py [--mb 5] [--scale 5] [--profile] [--src OTHER/src]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from kdra.migrate.parallel import default_jobs  # noqa: E402

MANIFESTS = ROOT / "tests" / "migrate" / "manifests"

FILLER = """\
apiVersion: v1
kind: Service
metadata:
  name: web-{n}
  namespace: shop
  labels: {{app: web-{n}, tier: frontend}}
spec:
  selector: {{app: web-{n}}}
  ports:
  - name: http
    port: 80
    targetPort: 8080
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-{n}-config
  namespace: shop
data:
  settings.yaml: |
    cache:
      size: 512Mi
      ttl: 300s
    upstreams:
    - https://api.example.com/v{n}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web-{n}
  namespace: shop
spec:
  replicas: 3
  selector:
    matchLabels: {{app: web-{n}}}
  template:
    metadata:
      labels: {{app: web-{n}}}
    spec:
      containers:
      - name: web
        image: ghcr.io/example/web:1.{n}
        ports:
        - containerPort: 8080
        resources:
          requests: {{cpu: 250m, memory: 256Mi}}
          limits: {{memory: 512Mi}}
"""


def _gpu_documents() -> list[str]:
    out = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        case = path.name[: -len(".yaml")]
        if path.name.endswith(".expected.yaml") or (MANIFESTS / f"{case}.exit").exists():
            continue
        if (MANIFESTS / f"{case}.args").exists():
            continue
        out.append(path.read_text())
    return out


def build(size: int, gpu_share: float) -> str:
    """A stream of about `size` bytes; `gpu_share` of its documents are GPU workloads."""
    gpu = _gpu_documents()
    pieces: list[str] = []
    total = 0
    n = 0
    while total < size:
        n += 1
        if gpu_share >= 1 or n % round(1 / gpu_share) == 0:
            text = gpu[n % len(gpu)]
            text = re.sub(r"(?m)^(  name|  generateName): ([a-z0-9-]+)", rf"\1: \2-{n}", text)
        else:
            text = FILLER.format(n=n)
        piece = ("---\n" if not text.startswith("---") else "") + text
        pieces.append(piece)
        total += len(piece)
    return "".join(pieces)


def split_into_files(text: str, folder: Path, per_file: int) -> None:
    """The stream's documents as files of `per_file` documents each (a repository of manifests)."""
    from kdra.migrate.documents import split_documents

    folder.mkdir()
    chunks = split_documents(text)
    for first in range(0, len(chunks), per_file):
        part = "".join(chunk.text for chunk in chunks[first : first + per_file])
        (folder / f"part-{first // per_file:05d}.yaml").write_text(part)


SRC = ROOT / "src"


# The child reports its own peak from /proc (VmHWM, of the process image after exec): ru_maxrss from wait4
# would not do, since Linux carries the forking parent's peak across exec into it, and this parent holds the
# streams it built.
CHILD = """\
import re, resource, sys
from kdra.cli.main import main
code = main(sys.argv[2:])
with open("/proc/self/status") as status:
    peak = re.search(r"VmHWM:\\s+(\\d+) kB", status.read()).group(1)
worker = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # kB: the largest worker's peak
with open(sys.argv[1], "w") as out:
    out.write(f"{peak} {worker}")
sys.exit(code)
"""


# Bytecode goes to a folder of its own, written by a warm-up run (`warm_up`): an installed kdra has its .pyc,
# so compiling the modules (which PYTHONDONTWRITEBYTECODE=1 makes every child do, ~0.2 s) is not migration.
PYCACHE: Path | None = None


def _child_env() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(SRC)
    if PYCACHE is not None:
        env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    return env


def warm_up(folder: Path) -> None:
    """One run on a tiny input, so the measured runs find their modules compiled."""
    global PYCACHE
    PYCACHE = folder / "pycache"
    tiny = folder / "tiny.yaml"
    tiny.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    run(tiny)


def run(path: Path, *extra: str) -> dict[str, float]:
    """`kdra migrate` on `path` in a fresh process: wall, CPU seconds (with its workers'), peak RSS in MiB of
    the process and of its largest worker."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as errors, tempfile.NamedTemporaryFile("r") as peak:
        # notes can be many: a pipe would fill and block the child
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, peak.name, "migrate", *extra, str(path)],
            stdout=subprocess.DEVNULL,
            stderr=errors,
            env=_child_env(),
        )
        _, status, usage = os.wait4(proc.pid, 0)  # the child's usage includes the workers it joined
        wall = time.perf_counter() - start
        errors.seek(0)
        err = errors.read().decode(errors="replace")
        exit_code = os.waitstatus_to_exitcode(status)
        if exit_code not in (0, 1):
            raise SystemExit(f"kdra migrate failed ({exit_code}): {err[-2000:]}")
        own, worker = (int(kb) / 1024 for kb in (peak.read() or "0 0").split())
    return {"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "rss": own, "worker": worker}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=float, default=5.0, help="size of the streams in MB (default 5)")
    parser.add_argument("--scale", type=float, default=5.0, help="factor of the larger stream (memory check)")
    parser.add_argument("--profile", action="store_true", help="cProfile the gpu stream instead")
    parser.add_argument("--src", help="another checkout's src/ to measure (e.g. main's, for a before/after)")
    args = parser.parse_args()
    global SRC
    if args.src:
        SRC = Path(args.src).resolve()
    size = int(args.mb * 1e6)
    with tempfile.TemporaryDirectory() as folder:
        gpu = Path(folder) / "gpu.yaml"
        gpu.write_text(build(size, 1.0))
        if args.profile:
            profile(gpu)
            return
        cluster = Path(folder) / "cluster.yaml"
        cluster.write_text(build(size, 0.1))
        big = Path(folder) / "gpu-big.yaml"
        big.write_text(build(int(size * args.scale), 1.0))
        repo = Path(folder) / "repo"
        split_into_files(gpu.read_text(), repo, 10)
        warm_up(Path(folder))
        jobs = default_jobs()
        print(
            f"{'stream':<10} {'MB':>5} {'jobs':>4} {'wall s':>7} {'CPU s':>6} {'MB/s':>5} {'MB/CPU-s':>8} "
            f"{'RSS MiB':>7} {'worker':>6}",
            flush=True,
        )
        rows = [
            ("gpu", gpu, 1, ()),
            ("gpu", gpu, jobs, ()),
            ("cluster", cluster, jobs, ()),
            ("check", gpu, jobs, ("--check",)),
            ("repo", repo, jobs, ()),
            ("gpu x5", big, jobs, ()),
        ]
        results = {}
        for name, path, n, extra in rows:
            mb = (
                sum(p.stat().st_size for p in path.glob("*.yaml")) / 1e6
                if path.is_dir()
                else path.stat().st_size / 1e6
            )
            result = run(path, "-j", str(n), *extra)
            results[name] = result
            print(
                f"{name:<10} {mb:5.1f} {n:4d} {result['wall']:7.2f} {result['cpu']:6.2f} "
                f"{mb / result['wall']:5.2f} {mb / result['cpu']:8.2f} {result['rss']:7.1f} "
                f"{result['worker']:6.1f}",
                flush=True,
            )
        growth = max(results["gpu x5"]["rss"], results["gpu x5"]["worker"]) / max(
            results["gpu"]["rss"], results["gpu"]["worker"]
        )
        print(
            f"peak RSS of one process grows {growth:.2f}x for {args.scale:.0f}x the input; MB/s is per wall "
            "second, MB/CPU-s per CPU second of all processes (on a shared machine both move 20-30% between "
            "identical runs)"
        )


def profile(path: Path) -> None:
    import cProfile
    import io
    import pstats
    from contextlib import redirect_stderr, redirect_stdout

    from kdra.cli.main import main as kdra_main

    profiler = cProfile.Profile()
    sink = io.StringIO()
    with redirect_stdout(sink), redirect_stderr(io.StringIO()):
        profiler.enable()
        kdra_main(["migrate", "-j", "1", str(path)])
        profiler.disable()
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
