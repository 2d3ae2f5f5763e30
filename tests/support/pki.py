"""Throw-away certificates for TLS tests (needs `cryptography`, a test dependency)."""

from __future__ import annotations

import datetime as dt
from typing import Any


def make_pki() -> dict[str, bytes]:
    """PEM bytes: a CA (`ca`), a serving certificate for 127.0.0.1 (`server`, `server_key`) and a client
    certificate for CN kdra-user (`client`, `client_key`), both signed by the CA, valid for a day."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = dt.datetime.now(dt.UTC)

    def cert(name: str, key: Any, issuer: Any, issuer_key: Any, ca: bool, san: bool) -> x509.Certificate:
        b = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(issuer)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(hours=1))
            .not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if san:
            b = b.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            )
        return b.sign(issuer_key, hashes.SHA256())

    def pem_key(k: Any) -> bytes:
        return k.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    ca = cert("test-ca", ca_key, ca_name, ca_key, True, False)
    srv_key = ec.generate_private_key(ec.SECP256R1())
    srv = cert("server", srv_key, ca_name, ca_key, False, True)
    cli_key = ec.generate_private_key(ec.SECP256R1())
    cli = cert("kdra-user", cli_key, ca_name, ca_key, False, False)
    enc = serialization.Encoding.PEM
    return {
        "ca": ca.public_bytes(enc),
        "server": srv.public_bytes(enc),
        "server_key": pem_key(srv_key),
        "client": cli.public_bytes(enc),
        "client_key": pem_key(cli_key),
    }
