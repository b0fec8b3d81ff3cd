"""TLS to the spawner-service, the same on both of tornado's HTTP clients.

JupyterHub uses tornado's curl client (CurlAsyncHTTPClient) whenever
pycurl can be imported, as in zero-to-jupyterhub's hub image, else the
simple one. Both honour HTTPRequest's ca_certs, client_cert, client_key
and validate_cert, which every request to the service carries; libcurl
never reads SSL_CERT_FILE, so service_ca_file is the one way to trust a
private CA on both. The progress stream (_sse.py) uses an SSLContext
built from the same settings.

service_server_name, the name to verify when service_url's host is an
IP address or another name, is the URL's host as far as TLS and HTTP
go (SNI, the verified name, the Host header), while connections go to
service_url's host: the request's URL names the server name, and the
simple client resolves it to service_url's host (its hostname_mapping)
where the curl client connects there (libcurl's CONNECT_TO). Neither
client can verify a name other than its URL's host otherwise.
"""

import ipaddress
import os
import re
import ssl
from typing import NamedTuple
from urllib.parse import urlsplit, urlunsplit

from traitlets import TraitError

from .errors import ServiceTLSError

__all__ = [
    "TLSSettings",
    "check_ca_file",
    "check_client_cert",
    "check_key_file",
    "check_server_name",
    "curl_tls_error",
    "is_verification_error",
    "settings_of",
    "ssl_context",
    "tls_failure",
]

# libcurl's errors that asking again cannot cure: the peer's certificate
# was not verified (CURLE_PEER_FAILED_VERIFICATION, 60, which libcurl
# 7.62 merged CURLE_SSL_CACERT into), the issuer check failed (83), or a
# file of the hub's own could not be used (CURLE_SSL_CERTPROBLEM 58,
# CURLE_SSL_CACERT_BADFILE 77).
CURL_VERIFICATION_FAILED = (60, 83)
CURL_LOCAL_FILE_ERRORS = (58, 77)


class TLSSettings(NamedTuple):
    """A spawner's TLS settings, as one request needs them. address is
    service_url's host when server_name differs from it (connections go
    there), else ""; port is service_url's port."""

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    server_name: str = ""
    address: str = ""
    port: int = 0


def settings_of(spawner):
    """The spawner's TLS settings for service_url (only an https URL
    uses them)."""
    parts = urlsplit(spawner.service_url)
    if parts.scheme != "https":
        return TLSSettings()
    name = spawner.service_server_name
    address = parts.hostname or ""
    if not name or name.lower() == address.lower():
        name, address = "", ""
    return TLSSettings(
        ca_file=spawner.service_ca_file,
        cert_file=spawner.service_client_cert_file,
        key_file=spawner.service_client_key_file,
        server_name=name,
        address=address,
        port=parts.port or 443,
    )


def _bracketed(host):
    return f"[{host}]" if ":" in host else host


def with_server_name(url, tls):
    """url with its host replaced by tls.server_name (and the port made
    explicit), when one is set."""
    if not tls.server_name:
        return url
    parts = urlsplit(url)
    netloc = f"{_bracketed(tls.server_name)}:{tls.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def request_options(tls, curl):
    """HTTPRequest's arguments for these settings; curl: whether the
    client is tornado's curl client (which needs CONNECT_TO for a server
    name; the simple client gets a hostname_mapping instead, see
    client_options)."""
    options = {"validate_cert": True}
    if tls.ca_file:
        options["ca_certs"] = tls.ca_file
    if tls.cert_file:
        options["client_cert"] = tls.cert_file
        if tls.key_file:
            options["client_key"] = tls.key_file
    if tls.server_name and curl:
        entry = f"{_bracketed(tls.server_name)}:{tls.port}:{_bracketed(tls.address)}:{tls.port}"

        def connect_to(handle, entry=entry):
            import pycurl

            handle.setopt(pycurl.CONNECT_TO, [entry])

        options["prepare_curl_callback"] = connect_to
    return options


def client_options(tls, curl):
    """AsyncHTTPClient's arguments for these settings: the simple
    client's hostname_mapping for a server name."""
    if tls.server_name and not curl:
        return {"hostname_mapping": {tls.server_name: tls.address}}
    return {}


def ssl_context(tls):
    """The SSLContext of the progress stream, which uses no tornado
    client: the same CA, client certificate and server name."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=tls.ca_file or None)
    if tls.cert_file:
        ctx.load_cert_chain(tls.cert_file, tls.key_file or None, password=_no_password)
    return ctx


def _no_password():
    # Never prompt on the hub's terminal; check_client_cert refuses
    # encrypted keys beforehand.
    raise ValueError("encrypted private keys are not supported")


# --- what a verification failure says ---------------------------------------


def is_verification_error(err):
    """Whether err (raised by the simple client or the SSE connection)
    is a failed certificate verification."""
    return isinstance(err, ssl.SSLCertVerificationError)


# OpenSSL's X509_V_ERR_HOSTNAME_MISMATCH and X509_V_ERR_IP_ADDRESS_MISMATCH.
_NAME_MISMATCH_CODES = (62, 64)
# How libcurl says so: with GnuTLS "certificate subject name (x) does not
# match target host name 'y'", with OpenSSL "no alternative certificate
# subject name matches target host name 'y'" (or "... does not match ...").
_NAME_MISMATCH_TEXT = ("match target host name", "subject name")


def is_name_mismatch(err):
    """Whether a verification failure (an SSLCertVerificationError or a
    CurlError) is the certificate naming another host (its CA is
    trusted)."""
    if isinstance(err, ssl.SSLCertVerificationError):
        return getattr(err, "verify_code", None) in _NAME_MISMATCH_CODES
    text = str(err).lower()
    return any(t in text for t in _NAME_MISMATCH_TEXT)


def local_file_error(err):
    """Whether err, raised by the simple client or the SSE connection
    before any byte went to the service, is a TLS file of the hub's that
    could not be read (gone, unreadable, no PEM in it): loading the CA
    file or the client certificate is the only file access they make."""
    if isinstance(err, (FileNotFoundError, PermissionError, IsADirectoryError)):
        return True
    return isinstance(err, ssl.SSLError) and getattr(err, "library", None) in ("PEM", "X509")


def curl_tls_error(err):
    """For a CurlError: "verify" when the service's certificate was not
    verified, "local" when a TLS file of the hub's could not be used,
    else None."""
    errno = getattr(err, "errno", None)
    if errno in CURL_VERIFICATION_FAILED:
        return "verify"
    if errno in CURL_LOCAL_FILE_ERRORS:
        return "local"
    return None


def tls_failure(spawner, what, err, kind="verify"):
    """The ServiceTLSError for a failed handshake with the service: what
    failed (the request), the client's error, and the setting to change.
    Permanent: a wrong CA or name does not fix itself, so a start fails
    at once instead of being sent again until start_timeout."""
    url = spawner.service_url
    detail = err.message if hasattr(err, "message") and isinstance(err.message, str) else str(err)
    errno = getattr(err, "errno", None) if type(err).__name__ == "CurlError" else None
    if errno == 77:
        detail = f"libcurl could not read the CA file (error 77: {detail})"
    elif errno == 58:
        detail = f"libcurl could not use the client certificate or its key (error 58: {detail})"
    if kind == "local":
        files = ", ".join(
            f"{name} = {getattr(spawner, name)!r}"
            for name in ("service_ca_file", "service_client_cert_file", "service_client_key_file")
            if getattr(spawner, name)
        )
        return ServiceTLSError(
            f"spawnkit service at {url}: the hub's TLS files could not be used ({what}): {detail}. "
            f"Check c.SpawnkitSpawner's {files or 'TLS settings'} (readable PEM files).",
            reason="TLSFilesUnusable",
        )
    head = f"spawnkit service at {url}: its TLS certificate could not be verified ({what}): {detail}."
    tail = "Not retried: this does not fix itself."
    if is_name_mismatch(err):
        if spawner.service_server_name:
            fix = (
                f"The certificate does not name c.SpawnkitSpawner.service_server_name "
                f"({spawner.service_server_name!r}): set it to a name the certificate holds."
            )
        else:
            host = urlsplit(url).hostname or ""
            fix = (
                f"The certificate does not name service_url's host ({host}): set "
                "c.SpawnkitSpawner.service_server_name to a name it holds (connections still go to "
                f"{host}), or use that name in service_url."
            )
        return ServiceTLSError(f"{head} {fix} {tail}", reason="TLSVerificationFailed")
    if spawner.service_ca_file:
        fix = (
            f"The hub verifies it against c.SpawnkitSpawner.service_ca_file ({spawner.service_ca_file}): make "
            "that the PEM file of the CA that signed the service's certificate."
        )
    else:
        fix = (
            "The hub verifies it against the system's CA store (c.SpawnkitSpawner.service_ca_file is not "
            "set; tornado's curl client, which JupyterHub uses when pycurl is installed, ignores "
            "SSL_CERT_FILE): set c.SpawnkitSpawner.service_ca_file to the PEM file of the CA that signed "
            "the service's certificate."
        )
    return ServiceTLSError(f"{head} {fix} {tail}", reason="TLSVerificationFailed")


# --- checks of the settings, when JupyterHub makes a spawner -------------------

# (trait, path, mtime_ns, size[, other]) -> None for files checked once:
# a hub making hundreds of spawners parses each file once.
_checked = {}


def _stat_key(*paths):
    key = []
    for p in paths:
        st = os.stat(p)
        key.append((p, st.st_mtime_ns, st.st_size))
    return tuple(key)


def _read(trait, path, want):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TraitError(f"c.SpawnkitSpawner.{trait} {path!r}: {e.strerror or e}; want {want}") from None


def check_ca_file(path):
    """A CA bundle that a TLS client can load: readable, with at least one
    PEM certificate (what both tornado clients read)."""
    if not path:
        return path
    want = "a PEM file of the CA certificates that verify the spawnkit service"
    _read("service_ca_file", path, want)
    key = ("ca",) + _stat_key(path)
    if key in _checked:
        return path
    try:
        ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=path)
    except (ssl.SSLError, ValueError, OSError) as e:
        raise TraitError(f"c.SpawnkitSpawner.service_ca_file {path!r}: no PEM certificate could be read ({e}); want {want}") from None
    _checked[key] = None
    return path


def check_key_file(path):
    if not path:
        return path
    data = _read("service_client_key_file", path, "a PEM private key")
    if b"PRIVATE KEY-----" not in data:
        raise TraitError(f"c.SpawnkitSpawner.service_client_key_file {path!r}: no PEM private key in it")
    if b"ENCRYPTED" in data:
        raise TraitError(
            f"c.SpawnkitSpawner.service_client_key_file {path!r}: the key is encrypted; tornado's clients "
            "take no password: give an unencrypted key (readable by the hub alone)"
        )
    return path


def check_client_cert(cert, key):
    """The client certificate (and its key, from key or else from the
    certificate's own file) as a TLS client would load them."""
    if not cert:
        if key:
            raise TraitError(
                "c.SpawnkitSpawner.service_client_key_file is set without service_client_cert_file: "
                "set both, or neither"
            )
        return
    data = _read("service_client_cert_file", cert, "a PEM certificate (and its key, unless service_client_key_file)")
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise TraitError(f"c.SpawnkitSpawner.service_client_cert_file {cert!r}: no PEM certificate in it")
    if not key and b"ENCRYPTED" in data:
        raise TraitError(
            f"c.SpawnkitSpawner.service_client_cert_file {cert!r}: its key is encrypted; tornado's clients "
            "take no password: give an unencrypted key"
        )
    if key:
        _read("service_client_key_file", key, "a PEM private key")
    paths = (cert, key) if key else (cert,)
    ck = ("client",) + _stat_key(*paths)
    if ck in _checked:
        return
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        ctx.load_cert_chain(cert, key or None, password=_no_password)
    except (ssl.SSLError, ValueError, OSError) as e:
        where = (
            f"service_client_cert_file {cert!r} and service_client_key_file {key!r}"
            if key
            else f"service_client_cert_file {cert!r} (no service_client_key_file: its key must be in the same file)"
        )
        raise TraitError(
            f"c.SpawnkitSpawner.{where}: not a certificate and its matching private key ({e})"
        ) from None
    _checked[ck] = None


_dns_name = re.compile(r"(?=.{1,253}$)(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*")


def check_server_name(name):
    """A DNS name or an IP address: what a certificate names."""
    if not name:
        return name
    try:
        ipaddress.ip_address(name)
        return name
    except ValueError:
        pass
    if not _dns_name.fullmatch(name):
        raise TraitError(
            f"c.SpawnkitSpawner.service_server_name {name!r}: want the DNS name (or IP address) the service's "
            "certificate is issued for, without scheme or port, such as spawnkit-service.jupyterhub.svc"
        )
    return name
