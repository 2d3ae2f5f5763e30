"""TLS contexts for the API client, with kubeconfig `*-data` kept in memory.

Python's `ssl` takes CAs from memory (`cadata`) but a certificate chain and its key only from a path. On
Linux the pair goes to an anonymous in-memory file (`memfd_create`, read through /proc/self/fd): nothing
touches a disk and nothing outlives the process. Elsewhere it goes to a private directory (mode 0700) that
is removed as soon as `load_cert_chain` has read it.
"""

from __future__ import annotations

import os
import shutil
import ssl
import tempfile
from pathlib import Path

from kdra.errors import InputError

# A client certificate: either paths (cert, key) or PEM bytes (cert, key).
CertPair = tuple[str, str] | tuple[bytes, bytes]


def load_pem_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """`ctx.load_cert_chain` from PEM bytes, without leaving a file behind."""
    blob = cert.rstrip(b"\n") + b"\n" + key
    memfd = getattr(os, "memfd_create", None)
    if memfd is not None and os.path.isdir("/proc/self/fd"):
        fd = memfd("kdra-client-cert", getattr(os, "MFD_CLOEXEC", 0))
        try:
            os.write(fd, blob)
            ctx.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        return
    d = tempfile.mkdtemp(prefix="kdra-cert-")  # mode 0700
    try:
        path = Path(d) / "client.pem"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        ctx.load_cert_chain(str(path))
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _must_exist(files: tuple[tuple[str, str], ...]) -> None:
    """`load_cert_chain` says neither which of its two files is missing nor its name (its
    FileNotFoundError has no filename): check each first, naming the field or flag that gave it."""
    for what, path in files:
        if not os.path.exists(path):
            raise InputError(f"{what} {path}: No such file or directory")
        if os.path.isdir(path):
            raise InputError(f"{what} {path}: Is a directory")


def client_context(
    *,
    ca_file: str | None = None,
    ca_data: bytes | None = None,
    insecure: bool = False,
    cert: CertPair | None = None,
    source: str = "",
) -> ssl.SSLContext:
    """The context for HTTPS to an API server; InputError (naming `source`) for unreadable material."""
    where = f"{source}: " if source else ""
    try:
        ctx = ssl.create_default_context(cafile=ca_file) if ca_file else ssl.create_default_context()
    except FileNotFoundError:
        raise InputError(f"{where}certificate-authority {ca_file}: No such file or directory") from None
    except (ssl.SSLError, OSError) as e:
        raise InputError(f"{where}certificate-authority {ca_file}: not a PEM certificate ({e})") from None
    if ca_data:
        try:
            text: str | None = ca_data.decode("ascii")
        except UnicodeDecodeError:
            text = None  # DER
        try:
            if text is None:
                ctx.load_verify_locations(cadata=ca_data)
            elif "-----BEGIN" in text:
                ctx.load_verify_locations(cadata=text)
            else:
                raise ValueError("no PEM block")
        except (ssl.SSLError, ValueError) as e:
            raise InputError(f"{where}certificate-authority-data: not a certificate ({e})") from None
    if insecure:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if cert is not None:
        c, k = cert
        if not isinstance(c, bytes):
            _must_exist(((f"{where}client-certificate", str(c)), (f"{where}client-key", str(k))))
        try:
            if isinstance(c, bytes) and isinstance(k, bytes):
                load_pem_chain(ctx, c, k)
            else:
                ctx.load_cert_chain(str(c), str(k))
        except FileNotFoundError as e:
            raise InputError(f"{where}client certificate: {e.filename}: No such file or directory") from None
        except (ssl.SSLError, OSError) as e:
            # The library's reason only ("PEM lib", "KEY_VALUES_MISMATCH"), never the key material.
            reason = getattr(e, "reason", None) or getattr(e, "strerror", None) or type(e).__name__
            raise InputError(f"{where}client certificate and key: cannot be loaded ({reason})") from None
    return ctx


def server_context(cert_file: str, key_file: str, client_ca_file: str | None = None) -> ssl.SSLContext:
    """A serving context (metrics and health endpoints). With a client CA, clients may present a
    certificate signed by it (checked per request: /metrics needs one, the probes do not)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    _must_exist((("--metrics-tls-cert-file", cert_file), ("--metrics-tls-key-file", key_file)))
    try:
        ctx.load_cert_chain(cert_file, key_file)
    except FileNotFoundError as e:
        raise InputError(f"--metrics-tls-cert-file/--metrics-tls-key-file: {e.filename}: not found") from None
    except (ssl.SSLError, OSError) as e:
        reason = getattr(e, "reason", None) or type(e).__name__
        raise InputError(
            f"--metrics-tls-cert-file/--metrics-tls-key-file: cannot be loaded ({reason})"
        ) from None
    if client_ca_file:
        try:
            ctx.load_verify_locations(cafile=client_ca_file)
        except (ssl.SSLError, OSError) as e:
            raise InputError(f"--metrics-client-ca-file {client_ca_file}: {e}") from None
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx
