"""Flags of the metrics and health endpoint that `kdra exporter` and `kdra scheduler --metrics-listen`
serve (kdra.observe.server): TLS and the authentication of /metrics."""

from __future__ import annotations

import argparse

from kdra.observe.server import ServingOptions


def add_serving_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "metrics endpoint security",
        "TLS and authentication for /metrics; /healthz, /livez and /readyz stay open for kubelet probes",
    )
    g.add_argument("--metrics-tls-cert-file", metavar="FILE", help="serve HTTPS with this certificate (PEM)")
    g.add_argument("--metrics-tls-key-file", metavar="FILE", help="the certificate's private key (PEM)")
    g.add_argument(
        "--metrics-client-ca-file",
        metavar="FILE",
        help="admit /metrics clients presenting a certificate signed by this CA (needs TLS)",
    )
    g.add_argument(
        "--metrics-token-file",
        metavar="FILE",
        help="admit /metrics requests with 'Authorization: Bearer T' for a T in this file (one per line; "
        "re-read when it changes)",
    )


def serving_options(args: argparse.Namespace) -> ServingOptions:
    opts = ServingOptions(
        tls_cert_file=args.metrics_tls_cert_file,
        tls_key_file=args.metrics_tls_key_file,
        client_ca_file=args.metrics_client_ca_file,
        token_file=args.metrics_token_file,
    )
    opts.validate()
    return opts
