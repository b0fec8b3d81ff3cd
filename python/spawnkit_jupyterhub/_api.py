"""The spawner-service's HTTP API (v1) as a SpawnkitSpawner reaches it:
requests with the spawner's token, timeouts and retries, and the
progress stream.

ServiceAPI reads the spawner's settings (service_url, service_token, the
service_* timeouts, the TLS settings) at every call, so a changed
setting takes effect at once. Every request is safe to repeat, which is
what makes the retries here correct: a start is idempotent, a stop of a
stopped server succeeds.

Requests go through tornado's AsyncHTTPClient as JupyterHub configured
it: the curl client when pycurl is installed, else the simple one;
_tls.py makes TLS the same on both, and a certificate that cannot be
verified a permanent error (ServiceTLSError), never retried.

A request sent during a start or a stop carries that operation's trace
context (traceparent; _trace.py), the same on every retry.
"""

import asyncio
import json
import re
import ssl
import weakref
from urllib.parse import urlencode

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from tornado.simple_httpclient import SimpleAsyncHTTPClient

from . import _tls, _trace
from ._sse import SSEConnection
from .errors import NotTheService, ServiceTLSError, ServiceUnavailable, SpawnkitError

__all__ = ["CLUSTER_UNAVAILABLE", "NOT_SERVING", "SERVICE_HEADER", "STATE_REFUSED", "ServiceAPI", "http_client", "is_state_refused", "reached"]

# Answers of a replica that must not serve (it stands by, or shuts down):
# asked again, since another replica answers soon.
NOT_SERVING = ("NotLeader", "NotReady")

# The server's cluster (for a start, every cluster it may go to) has not
# answered for a while: every replica would say so. A start fails at once
# with the service's message, naming the cluster; a stop or a deletion is
# asked again for as long as an unreachable service would be.
CLUSTER_UNAVAILABLE = "ClusterUnavailable"

# The service cannot trust the state JupyterHub kept for a server (409 to
# PUT .../state): it names a namespace or cluster the service's
# configuration no longer trusts (not listed as retired), or a pod of
# another server. The message names the option that would keep it.
STATE_REFUSED = "StateRefused"


# The header on every answer of the service (service.ServiceHeader), with
# its version: what tells it from another server at a misconfigured URL.
SERVICE_HEADER = "Spawnkit-Service"

# service_urls that answered as the service in this process: a start that
# cannot reach one of these rides out a restart; one never reached is
# given service_first_contact_timeout (a wrong URL fails in seconds).
_reached = set()


def reached(service_url):
    """Whether service_url has answered as the service in this process."""
    return service_url.rstrip("/") in _reached


def _note_reached(service_url):
    _reached.add(service_url.rstrip("/"))


def is_service_answer(response):
    """Whether an HTTP answer came from the spawnkit service: it carries
    SERVICE_HEADER, or (a service from before the header) is the
    service's JSON: an error {"error", "reason"}, a success any JSON.
    A Kubernetes Status (reason, no error) or JupyterHub's API error
    ({"status", "message"}) is not."""
    if response.headers.get(SERVICE_HEADER):
        return True
    body = response.body or b""
    try:
        doc = json.loads(body) if body else None
    except ValueError:
        return False
    if response.code >= 400:
        return isinstance(doc, dict) and "error" in doc and "reason" in doc
    return doc is not None or not body


def _redact(text, token):
    """text without the token, and without anything after "Bearer ": a
    foreign server's page may echo the request's headers, and the error
    quoting it is shown to users."""
    if token:
        text = text.replace(token, "<redacted>")
    return re.sub(r"(?i)(bearer)\s+\S+", r"\1 <redacted>", text)


def not_the_service(s, what, code, headers, body):
    """The error for an answer that is not the service's: permanent,
    naming the URL and what answered, unless it is a gateway's 502-504
    (a proxy in front of a service that restarts), which is asked again
    as an unreachable service is."""
    ctype = headers.get("Content-Type", "")
    server = headers.get("Server", "")
    text = " ".join(body.decode("utf-8", "replace").split())[:200] if body else ""
    text = _redact(text, s.service_token)
    answered = f"HTTP {code}" + (f" ({ctype})" if ctype else "") + (f", Server: {server}" if server else "")
    if text:
        answered += f": {text!r}"
    if code == 400 and "HTTP request to an HTTPS server" in text:
        message = (
            f"{s.service_url} answered {what} with {answered}: the service serves TLS there; "
            f"use an https:// service_url (with c.SpawnkitSpawner.service_ca_file for a private CA)"
        )
    else:
        message = (
            f"{s.service_url} answered {what} with {answered}, and that is not the spawnkit service "
            f"(its answers carry a {SERVICE_HEADER} header): check c.SpawnkitSpawner.service_url, "
            f"whose port is the service's -listen port (8765 in deploy/)"
        )
    if code in (502, 503, 504):
        return ServiceUnavailable(message, reason="NotTheService")
    return NotTheService(message, reason="NotTheService", status=code)


def is_state_refused(err):
    """Whether err is the service's refusal of a hub's saved state."""
    return isinstance(err, SpawnkitError) and err.status == 409 and err.reason == STATE_REFUSED

# HTTP clients of the service's own, per event loop, then per client
# class and TLS settings: the service's requests never wait in the queue
# of the client that JupyterHub shares for everything else, and one
# client's connections (and the curl client's handles, which keep a CA
# file once set) always carry the same TLS settings.
_clients = weakref.WeakKeyDictionary()


def is_curl(cls):
    """Whether cls is (a subclass of) tornado's curl client."""
    return any(c.__module__ == "tornado.curl_httpclient" and c.__name__ == "CurlAsyncHTTPClient" for c in cls.__mro__)


def http_client(tls=_tls.TLSSettings(), log=None):
    """The client for requests with these TLS settings, of the class
    JupyterHub configured (AsyncHTTPClient.configure): the curl client
    when pycurl is installed, else the simple one."""
    loop = asyncio.get_running_loop()
    cls = AsyncHTTPClient.configured_class()
    per_loop = _clients.setdefault(loop, {})
    client = per_loop.get((cls, tls))
    if client is None:
        curl = is_curl(cls)
        if tls.server_name and not curl and not issubclass(cls, SimpleAsyncHTTPClient):
            raise ServiceTLSError(
                f"c.SpawnkitSpawner.service_server_name needs tornado's simple or curl HTTP client; "
                f"AsyncHTTPClient is configured as {cls.__module__}.{cls.__name__}",
                reason="TLSSettingsUnsupported",
            )
        # defaults=None: none of the defaults configured for everybody's
        # clients (JupyterHub's internal_ssl sets its own CA's ssl_options
        # there, which would replace service_ca_file).
        client = per_loop[(cls, tls)] = AsyncHTTPClient(
            force_instance=True, max_clients=64, defaults=None, **_tls.client_options(tls, curl)
        )
        if log is not None:
            log.info(
                "spawnkit: requests to the spawnkit service go through tornado's %s%s",
                cls.__name__,
                f" (TLS: {describe(tls)})" if tls != _tls.TLSSettings() else "",
            )
    return client


def describe(tls):
    parts = [f"CA {tls.ca_file}" if tls.ca_file else "the system's CAs"]
    if tls.cert_file:
        parts.append(f"client certificate {tls.cert_file}")
    if tls.server_name:
        parts.append(f"verifying {tls.server_name} at {tls.address}:{tls.port}")
    return ", ".join(parts)


class ServiceAPI:
    """The service's API for one spawner (s), whose settings and log it
    uses; it keeps no state of its own."""

    def __init__(self, spawner):
        self.s = spawner

    def tls(self):
        return _tls.settings_of(self.s)

    def url(self, path, query=None, tls=None):
        """The request's URL; with service_server_name, its host is that
        name (connections still go to service_url's host)."""
        url = self.s.service_url.rstrip("/") + path
        if query:
            url += "?" + urlencode(query)
        return _tls.with_server_name(url, tls or self.tls())

    def headers(self, extra=None, trace=None):
        """The request's headers: the trace context of the operation it
        belongs to (trace, else the current one's, _trace.py), then the
        service's own."""
        headers = dict(trace.headers) if trace is not None else _trace.headers()
        headers["Accept"] = "application/json"
        if self.s.service_token:
            headers["Authorization"] = f"Bearer {self.s.service_token}"
        if self.s.hub_id:
            headers["Spawnkit-Hub"] = self.s.hub_id
        if extra:
            headers.update(extra)
        return headers

    def next_delay(self, delay):
        return min(delay * 2, max(self.s.service_retry_max_interval, self.s.service_retry_interval))

    async def request(self, method, path, body=None, query=None, not_found_ok=False, unreachable_for=0, what=""):
        """One request to the service; returns the decoded JSON body.

        A replica that must not answer (503 NotLeader: it stands by while
        another replica leads; NotReady: it is shutting down) is asked
        again every service_retry_interval for up to
        service_request_timeout, so a failover between service replicas
        does not fail the hub's call; with unreachable_for, so is a
        service that cannot be reached (connection refused during a
        restart, a connect timeout), or whose server's cluster does not
        answer (503 ClusterUnavailable), for that many seconds, with
        backoff.
        Every request is safe to repeat: a start is idempotent, a stop of
        a stopped server succeeds.

        Raises SpawnkitError for a refusal (4xx) and ServiceUnavailable
        when the service is unreachable or fails (5xx). With not_found_ok a
        404 returns None.
        """
        loop = asyncio.get_running_loop()
        begin = loop.time()
        delay = self.s.service_retry_interval
        while True:
            try:
                return await self.request_once(method, path, body, query, not_found_ok)
            except ServiceUnavailable as e:
                if e.permanent:
                    raise
                now = loop.time()
                if e.reason in NOT_SERVING:
                    if now + self.s.service_retry_interval > begin + self.s.service_request_timeout:
                        raise
                    self.s.log.info(
                        "spawnkit service replica answered %s for %s %s; asking again", e.reason, method, path
                    )
                    await asyncio.sleep(self.s.service_retry_interval)
                    continue
                # A cluster that does not answer (503 ClusterUnavailable:
                # the service serves, one of its clusters is away) is
                # waited for as an unreachable service is.
                if (e.status is not None and e.reason != CLUSTER_UNAVAILABLE) or now + delay > begin + unreachable_for:
                    raise
                self.s.log.warning("spawnkit: %s: %s; trying again in %.1fs", what or f"{method} {path}", e, delay)
                await asyncio.sleep(delay)
                delay = self.next_delay(delay)

    async def request_once(self, method, path, body, query, not_found_ok, connect_timeout=None):
        """One request; connect_timeout, when given, bounds the connection
        below service_connect_timeout."""
        headers = {}
        payload = None
        if body is not None:
            payload = json.dumps(body)
            headers["Content-Type"] = "application/json"
        tls = self.tls()
        client = http_client(tls, self.s.log)
        curl = is_curl(type(client))
        req = HTTPRequest(
            self.url(path, query, tls),
            method=method,
            headers=self.headers(headers),
            body=payload,
            # Also bounds the wait for a free connection (tornado's queue).
            connect_timeout=min(
                self.s.service_connect_timeout,
                self.s.service_request_timeout,
                connect_timeout if connect_timeout is not None else float("inf"),
            ),
            request_timeout=self.s.service_request_timeout,
            follow_redirects=False,
            **_tls.request_options(tls, curl),
        )
        what = f"{method} {path}"
        try:
            resp = await client.fetch(req)
        except HTTPClientError as e:
            if e.response is not None and e.code != 599:
                if not is_service_answer(e.response):
                    raise not_the_service(self.s, what, e.code, e.response.headers, e.response.body) from e
                _note_reached(self.s.service_url)
            if e.code == 401:
                message, _ = error_of(e.response)
                hint = "" if self.s.service_token else (
                    "; the hub sent no token: c.SpawnkitSpawner.service_token is empty and "
                    "SPAWNKIT_SERVICE_TOKEN is not set in the hub's environment"
                )
                raise SpawnkitError(
                    f"the spawnkit service at {self.s.service_url} refused the hub's token ({what}): {message}{hint}",
                    reason="Unauthorized",
                    status=401,
                ) from e
            if e.code == 404 and not_found_ok:
                return None
            kind = _tls.curl_tls_error(e) if curl and e.code == 599 else None
            if kind:
                raise _tls.tls_failure(self.s, what, e, kind) from e
            if e.code == 599 or e.response is None:
                # No answer: refused, "Timeout while connecting", "Timeout
                # in request queue", or the connection dropped.
                raise ServiceUnavailable(
                    f"spawnkit service at {self.s.service_url} unreachable ({method} {path}): {e}",
                    reason="ServiceUnavailable",
                ) from e
            message, reason = error_of(e.response)
            err = ServiceUnavailable if e.code >= 500 else SpawnkitError
            raise err(message or str(e), reason=reason, status=e.code) from e
        except (OSError, asyncio.TimeoutError, ssl.SSLError) as e:
            if _tls.is_verification_error(e):
                raise _tls.tls_failure(self.s, what, e) from e
            if req.url.startswith("https:") and _tls.local_file_error(e):
                raise _tls.tls_failure(self.s, what, e, "local") from e
            raise ServiceUnavailable(
                f"spawnkit service at {self.s.service_url} unreachable ({method} {path}): {e}",
                reason="ServiceUnavailable",
            ) from e
        # A service from before the header serves the options form as
        # HTML without it.
        old_form = path.endswith("/options-form") and resp.headers.get("Content-Type", "").startswith("text/html")
        if not old_form and not is_service_answer(resp):
            raise not_the_service(self.s, what, resp.code, resp.headers, resp.body)
        _note_reached(self.s.service_url)
        if not resp.body:
            return None
        ctype = resp.headers.get("Content-Type", "")
        if ctype.startswith("application/json"):
            return json.loads(resp.body)
        return resp.body.decode("utf-8", "replace")

    async def events(self, path, last_event_id, trace=None):
        """Yields (id, event, data) from GET {path}/progress; trace: the
        trace context to send (default: the current operation's).

        Raises ServiceUnavailable when the connection fails or falls
        silent for service_stream_idle_timeout, SpawnkitError for a
        refusal (404: unknown server).
        """
        headers = self.headers({"Accept": "text/event-stream", "Cache-Control": "no-cache"}, trace)
        if last_event_id:
            headers["Last-Event-ID"] = str(last_event_id)
        tls = self.tls()
        url = self.url(path + "/progress", tls=tls)
        try:
            async with SSEConnection(
                url,
                headers,
                connect_timeout=self.s.service_connect_timeout,
                idle_timeout=self.s.service_stream_idle_timeout,
                ssl_context=(lambda: _tls.ssl_context(tls)),
                address=tls.address,
            ) as conn:
                if conn.status != 200:
                    body = await conn.read_body()
                    message, reason = error_of_bytes(body)
                    err = ServiceUnavailable if conn.status >= 500 else SpawnkitError
                    raise err(message or f"HTTP {conn.status} from {url}", reason=reason, status=conn.status)
                async for event in conn.events():
                    yield event
        except (OSError, asyncio.TimeoutError, ssl.SSLError, EOFError, ValueError) as e:
            if _tls.is_verification_error(e):
                raise _tls.tls_failure(self.s, f"GET {path}/progress", e) from e
            if url.startswith("https:") and _tls.local_file_error(e):
                raise _tls.tls_failure(self.s, f"GET {path}/progress", e, "local") from e
            raise ServiceUnavailable(f"progress stream {url}: {e!r}", reason="ServiceUnavailable") from e



def error_of(response):
    return error_of_bytes(response.body if response is not None else b"")


def error_of_bytes(body):
    """The service's {"error", "reason"} body, or its text."""
    if not body:
        return "", ""
    try:
        doc = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()[:500], ""
    if isinstance(doc, dict):
        return str(doc.get("error", "")), str(doc.get("reason", ""))
    return "", ""
