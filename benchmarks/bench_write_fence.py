"""How long after the write fence's check does a write reach the socket? (issue 18, item 1)

A leader paused in that gap wakes up and sends a write its lease no longer covers: the gap is the window
no fence can close. T threads of one KubeClient PUT objects as fast as they can to a plain-HTTP server in
a process of its own (so only the client's threads contend for the GIL, as the binding workers of
`kdra scheduler` do); the fence stamps the time, the first socket write after it on that thread measures
the gap. Printed: the gap's median, 99th percentile and maximum, and how many writes waited over 1 ms.
`--credential-ms` adds a slow credential (an exec plugin's cost per request, e.g. a token refresh).

Usage: python benchmarks/bench_write_fence.py [--threads 16] [--writes 200] [--credential-ms 0]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import socket
import statistics
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kdra.kube.client import KubeClient
from kdra.kube.kubeconfig import KubeConfig


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:
        pass

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _serve(port: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    port.put(srv.server_address[1])
    srv.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--writes", type=int, default=200, help="per thread")
    ap.add_argument("--credential-ms", type=float, default=0.0)
    args = ap.parse_args()

    ports: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    server = multiprocessing.Process(target=_serve, args=(ports,), daemon=True)
    server.start()
    url = f"http://127.0.0.1:{ports.get(timeout=10)}"
    client = KubeClient(KubeConfig(server=url), qps=0)
    if args.credential_ms:
        creds = client.credentials
        plain = creds.token

        def slow_token() -> str | None:
            time.sleep(args.credential_ms / 1000)
            return plain()

        creds.token = slow_token  # type: ignore[method-assign]

    local = threading.local()
    gaps: list[float] = []
    lock = threading.Lock()

    def fence(method: str, path: str) -> None:
        local.checked = time.perf_counter()

    client.write_fence = fence
    real_sendall = socket.socket.sendall

    def sendall(sock: socket.socket, data: bytes, *a: object) -> None:
        checked = getattr(local, "checked", None)
        if checked is not None:
            local.checked = None
            gap = time.perf_counter() - checked
            with lock:
                gaps.append(gap)
        real_sendall(sock, data, *a)  # type: ignore[arg-type]

    socket.socket.sendall = sendall  # type: ignore[method-assign,assignment]
    obj = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "default"}}
    obj["data"] = {"payload": "x" * 3000}  # over http.client's 2,000 bytes: headers and body apart

    def worker() -> None:
        for _ in range(args.writes):
            client.update(obj)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(args.threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    socket.socket.sendall = real_sendall  # type: ignore[method-assign]
    server.terminate()
    us = sorted(g * 1e6 for g in gaps)
    print(
        json.dumps(
            {
                "threads": args.threads,
                "writes": len(us),
                "writes_per_s": round(len(us) / wall),
                "gap_p50_us": round(statistics.median(us), 1),
                "gap_p99_us": round(us[int(len(us) * 0.99) - 1], 1),
                "gap_max_us": round(us[-1], 1),
                "over_1ms": sum(1 for g in us if g > 1000),
            }
        )
    )


if __name__ == "__main__":
    main()
