"""SpawnkitSpawner: a JupyterHub Spawner backed by spawnkit's spawner-service.

JupyterHub keeps its users, tokens, proxy and pages; the Kubernetes work
(pods, claims, events, profiles, recovery) is done by the spawner-service
(cmd/spawnkit-service), a Go service built on spawnkit's Manager that
reads a KubeSpawner-style YAML configuration. This class speaks its HTTP
API (v1) and nothing else:

    POST   {S}                 start (idempotent)
    GET    {S}                 status: poll, get_url
    DELETE {S}[?now=true]      stop; returns once the pod is gone
    GET    {S}/progress        server-sent events, resumable with Last-Event-ID
    GET    /v1/users/{user}/options-form
    POST   /v1/users/{user}/options-from-form

where {S} is /v1/users/{user}/server for a user's default server and
/v1/users/{user}/servers/{name} for a named one.

It needs nothing beyond JupyterHub itself (the standard library, tornado,
traitlets) and works with JupyterHub 3.0 and later. Put this file on
JupyterHub's PYTHONPATH (or next to jupyterhub_config.py) and set

    c.JupyterHub.spawner_class = "spawnkit_spawner.SpawnkitSpawner"

Failure policy: only the service's own answer ends a server. When the
service cannot be reached (restarting, upgraded, briefly partitioned),
poll reports the server as running and logs a warning, so that a service
restart never makes JupyterHub forget or cull running servers.
"""

import asyncio
import json
import os
import ssl
import time
import weakref
from urllib.parse import quote, urlencode, urlsplit

from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest
from traitlets import Float, Integer, Unicode, default

import jupyterhub
from jupyterhub.spawner import Spawner
from jupyterhub.traitlets import Command

__all__ = ["SpawnkitSpawner", "SpawnkitError"]


class SpawnkitError(Exception):
    """The spawner-service refused or failed an operation.

    reason is the service's CamelCase reason (ErrImagePull, Timeout,
    InvalidUserOptions, ...), status the HTTP status when there was one.
    jupyterhub_message is what JupyterHub shows the user ("Spawn failed: ...").
    """

    def __init__(self, message, reason="", status=None):
        super().__init__(message)
        self.reason = reason
        self.status = status
        self.jupyterhub_message = message


class ServiceUnavailable(SpawnkitError):
    """The service could not be reached, or answered with a server error."""


# One HTTP client per event loop: the service's requests never wait in
# the queue of the client that JupyterHub shares for everything else.
_clients = weakref.WeakKeyDictionary()


def _http_client():
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = AsyncHTTPClient(force_instance=True, max_clients=64)
    return client


class SpawnkitSpawner(Spawner):
    """Starts each server through spawnkit's spawner-service.

    The KubeSpawner options (image, profile_list, storage, ...) live in the
    service's -config YAML under the same names; this class only carries
    what JupyterHub itself knows: the environment (API token, OAuth
    settings, URLs), cmd and args, the user's options and id.
    """

    service_url = Unicode(
        "http://127.0.0.1:8081",
        help="""Base URL of the spawnkit spawner-service (its API is under /v1).""",
    ).tag(config=True)

    service_token = Unicode(
        help="""Bearer token for the spawner-service.

        Default: the SPAWNKIT_SERVICE_TOKEN environment variable. The
        service reads the same token from its -token-file or environment.
        """,
    ).tag(config=True)

    @default("service_token")
    def _service_token_default(self):
        return os.environ.get("SPAWNKIT_SERVICE_TOKEN", "")

    service_request_timeout = Float(
        60,
        help="""Seconds one request to the service may take.

        A stop waits until the pod is gone from the API server, so this
        should exceed the service's delete_grace_period.
        """,
    ).tag(config=True)

    service_connect_timeout = Float(
        30,
        help="""Seconds to wait for a connection to the service. A hub that
        accepts hundreds of starts at once keeps its event loop busy for
        seconds, so this is generous; a start that cannot connect is tried
        again until start_timeout.""",
    ).tag(config=True)

    service_retry_interval = Float(
        1,
        help="""Seconds between attempts while the service is unreachable or
        its progress stream has dropped.""",
    ).tag(config=True)

    service_busy_timeout = Float(
        60,
        help="""Seconds a start waits for a stop of the same server that is
        still in flight (the service answers 409) before giving up.""",
    ).tag(config=True)

    # As in KubeSpawner: the container's own command unless configured,
    # listening on every interface of the pod, on a fixed port.
    cmd = Command(
        None,
        allow_none=True,
        minlen=0,
        help="""The command to start the server with. None (default): the
        service's configured cmd, else the image's own command.""",
    ).tag(config=True)

    ip = Unicode("0.0.0.0", help="""The address the server listens on in its pod.""").tag(
        config=True
    )

    port = Integer(
        8888,
        help="""The port the server listens on in its pod; keep it equal to
        the service's `port` option (default 8888).""",
    ).tag(config=True)

    @default("env_keep")
    def _env_keep_default(self):
        # As KubeSpawner: none of the hub's own environment (PATH,
        # PYTHONPATH, LANG, ...) reaches the pod, whose image knows its own.
        return []

    # What the service last said about this server; persisted in
    # JupyterHub's database through get_state.
    _service_state = None
    _server_url = ""
    # Set once this spawner's start request has been answered (cleared by
    # clear_state, which JupyterHub calls before each start), so that
    # progress never relays a previous operation's events.
    _start_accepted = None
    _start_task = None

    @default("options_form")
    def _options_form_default(self):
        return self._service_options_form

    @default("options_from_form")
    def _options_from_form_default(self):
        return self._service_options_from_form

    # --- addressing and transport -------------------------------------

    def _server_path(self):
        user = quote(self.user.name, safe="")
        if self.name:
            return f"/v1/users/{user}/servers/{quote(self.name, safe='')}"
        return f"/v1/users/{user}/server"

    def _url(self, path, query=None):
        url = self.service_url.rstrip("/") + path
        if query:
            url += "?" + urlencode(query)
        return url

    def _headers(self, extra=None):
        headers = {"Accept": "application/json"}
        if self.service_token:
            headers["Authorization"] = f"Bearer {self.service_token}"
        if extra:
            headers.update(extra)
        return headers

    async def _request(self, method, path, body=None, query=None, not_found_ok=False):
        """One request to the service; returns the decoded JSON body.

        A replica that must not answer (503 NotLeader: it stands by while
        another replica leads; NotReady: it is shutting down) is asked
        again every service_retry_interval for up to
        service_request_timeout, so a failover between service replicas
        does not fail the hub's call: every request is safe to repeat
        (a start is idempotent, a stop of a stopped server succeeds).

        Raises SpawnkitError for a refusal (4xx) and ServiceUnavailable
        when the service is unreachable or fails (5xx). With not_found_ok a
        404 returns None.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.service_request_timeout
        while True:
            try:
                return await self._request_once(method, path, body, query, not_found_ok)
            except ServiceUnavailable as e:
                if e.reason not in ("NotLeader", "NotReady"):
                    raise
                if loop.time() + self.service_retry_interval > deadline:
                    raise
                self.log.info(
                    "spawnkit service replica answered %s for %s %s; asking again", e.reason, method, path
                )
                await asyncio.sleep(self.service_retry_interval)

    async def _request_once(self, method, path, body, query, not_found_ok):
        headers = {}
        payload = None
        if body is not None:
            payload = json.dumps(body)
            headers["Content-Type"] = "application/json"
        req = HTTPRequest(
            self._url(path, query),
            method=method,
            headers=self._headers(headers),
            body=payload,
            connect_timeout=min(self.service_connect_timeout, self.service_request_timeout),
            request_timeout=self.service_request_timeout,
            follow_redirects=False,
        )
        try:
            resp = await _http_client().fetch(req)
        except HTTPClientError as e:
            if e.code == 404 and not_found_ok:
                return None
            if e.code == 599 or e.response is None:
                raise ServiceUnavailable(
                    f"spawnkit service at {self.service_url} unreachable ({method} {path}): {e}",
                    reason="ServiceUnavailable",
                ) from e
            message, reason = _error_of(e.response)
            err = ServiceUnavailable if e.code >= 500 else SpawnkitError
            raise err(message or str(e), reason=reason, status=e.code) from e
        except (OSError, asyncio.TimeoutError, ssl.SSLError) as e:
            raise ServiceUnavailable(
                f"spawnkit service at {self.service_url} unreachable ({method} {path}): {e}",
                reason="ServiceUnavailable",
            ) from e
        if not resp.body:
            return None
        ctype = resp.headers.get("Content-Type", "")
        if ctype.startswith("application/json"):
            return json.loads(resp.body)
        return resp.body.decode("utf-8", "replace")

    def _remember(self, status):
        """Keeps what the service said about the server, for get_state."""
        if not isinstance(status, dict):
            return
        if status.get("state") is not None:
            self._service_state = status["state"]
        if status.get("url"):
            self._server_url = status["url"]

    # --- start ----------------------------------------------------------

    def _start_body(self):
        env = {k: "" if v is None else str(v) for k, v in self.get_env().items()}
        body = {
            "user_options": self.user_options or {},
            "env": env,
            "args": list(self.get_args() or []),
            "user_id": self.user.id,
            "hub_version": jupyterhub.__version__,
        }
        if self.cmd:
            body["cmd"] = list(self.cmd)
        return body

    def _start_event(self):
        if self._start_accepted is None:
            self._start_accepted = asyncio.Event()
        return self._start_accepted

    async def start(self):
        self._start_task = asyncio.current_task()
        try:
            status = await self._request_start()
            self._start_event().set()
            self._remember(status)
            url = await self._wait_ready()
            self._server_url = url
            return url
        finally:
            # A refused start releases progress too (it then ends at once).
            self._start_event().set()
            self._start_task = None

    async def _request_start(self):
        """POSTs the start until the service takes it. A start is
        idempotent, so a request that could not connect or timed out (the
        service restarting, a hub too busy to connect in time) is sent
        again, with backoff, until start_timeout; a 409 (the previous stop
        of this server still in flight) until service_busy_timeout."""
        now = time.monotonic()
        busy_deadline = now + self.service_busy_timeout
        deadline = now + self.start_timeout
        delay = self.service_retry_interval
        while True:
            try:
                return await self._request("POST", self._server_path(), body=self._start_body())
            except ServiceUnavailable as e:
                if e.status is not None or time.monotonic() + delay > deadline:
                    raise  # a 5xx is the service's own failure: not retried
                self.log.warning("spawnkit: starting %s: %s; trying again in %.1fs", self._log_name, e, delay)
            except SpawnkitError as e:
                if e.status != 409 or time.monotonic() > busy_deadline:
                    raise
                self.log.info("spawnkit: %s is still stopping; waiting to start it", self._log_name)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _wait_ready(self):
        """Follows the progress stream until the final event; falls back on
        the server's status when the stream drops, resuming after the last
        event seen. Returns the server's URL or raises SpawnkitError."""
        last_id = None
        deadline = time.monotonic() + self.start_timeout + 60
        while True:
            try:
                async with _closing(self._events(last_id)) as events:
                    async for event_id, kind, data in events:
                        last_id = event_id or last_id
                        if kind == "ready" or data.get("ready"):
                            return data.get("url") or await self._status_url()
                        if kind == "failed" or data.get("failed"):
                            await self._fail(data.get("reason", ""), data.get("message", ""))
            except ServiceUnavailable as e:
                self.log.warning("spawnkit: progress of %s interrupted: %s", self._log_name, e)
            except SpawnkitError as e:
                if e.status != 404 or time.monotonic() > deadline:
                    raise
                await self._start_again()
                last_id = None
                continue
            # The stream ended without a final event: ask for the status.
            try:
                status = await self._request("GET", self._server_path())
            except ServiceUnavailable as e:
                self.log.warning("spawnkit: status of %s unavailable: %s", self._log_name, e)
                status = None
            except SpawnkitError as e:
                if e.status != 404 or time.monotonic() > deadline:
                    raise
                await self._start_again()
                last_id = None
                continue
            if status:
                self._remember(status)
                phase = status.get("phase")
                if phase == "running" and status.get("ready") and status.get("url"):
                    return status["url"]
                if phase in ("failed", "stopped", "stopping"):
                    await self._fail(status.get("reason", ""), status.get("message", ""))
            if time.monotonic() > deadline:
                raise SpawnkitError(
                    f"{self._log_name}: no answer from the spawnkit service in time",
                    reason="Timeout",
                )
            await asyncio.sleep(self.service_retry_interval)

    async def _start_again(self):
        """The service no longer knows the server this start is waiting
        for: the replica that accepted the start went away before its pod
        existed (a crash, or a failover that found no pod). A start is
        idempotent, so it is asked for again; the new start's progress is
        followed from its beginning."""
        self.log.warning(
            "spawnkit: the service lost the start of %s (a restart or failover before its pod existed); starting it again",
            self._log_name,
        )
        self._remember(await self._request_start())

    async def _status_url(self):
        status = await self._request("GET", self._server_path())
        self._remember(status)
        if not status.get("url"):
            raise SpawnkitError(f"{self._log_name} is ready but the service gave no URL")
        return status["url"]

    async def _fail(self, reason, message):
        # Leave nothing behind: JupyterHub does not call stop for a server
        # whose poll already reports an exit status.
        try:
            await self._request("DELETE", self._server_path(), not_found_ok=True)
        except SpawnkitError as e:
            self.log.warning("spawnkit: cleaning up after the failed start of %s: %s", self._log_name, e)
        text = ": ".join(p for p in (reason, message) if p) or "start failed"
        raise SpawnkitError(text, reason=reason)

    # --- poll, stop, URL ---------------------------------------------------

    async def poll(self):
        try:
            status = await self._request("GET", self._server_path(), not_found_ok=True)
        except SpawnkitError as e:
            # Only the service's answer ends a server: while it is away (a
            # restart, a network blip, a bad token) the server counts as running.
            self.log.warning(
                "spawnkit: cannot poll %s, assuming it is still running: %s", self._log_name, e
            )
            return None
        if status is None:
            return 1
        self._remember(status)
        code = status.get("exit_code")
        return None if code is None else int(code)

    async def stop(self, now=False):
        task = self._start_task
        if task is not None and task is not asyncio.current_task() and not task.done():
            # JupyterHub gave up on the start (start_timeout): the service
            # cancels it below; our start must not outlive it.
            task.cancel()
        query = {"now": "true"} if now else None
        status = await self._request("DELETE", self._server_path(), query=query, not_found_ok=True)
        if status:
            self._remember(status)

    async def delete_forever(self):
        """JupyterHub deletes the user, or this named server, for good.

        The service deletes the server's claim when delete_pvc is on (for
        a named server only when the claim's name template names the
        server), as KubeSpawner's delete_forever does; it refuses (409)
        while the server runs, which JupyterHub never asks for.
        """
        await self._request("DELETE", self._server_path(), query={"forever": "true"}, not_found_ok=True)
        self._service_state = None
        self._server_url = ""

    async def get_url(self):
        try:
            status = await self._request("GET", self._server_path(), not_found_ok=True)
        except SpawnkitError as e:
            self.log.warning("spawnkit: cannot ask the URL of %s: %s", self._log_name, e)
            status = None
        if status and status.get("url"):
            self._remember(status)
            return self._full_url(status["url"])
        return await super().get_url()

    def _full_url(self, url):
        """The service's URL of the server (the pod's address) with the
        server's prefix, as JupyterHub stores it (Spawner.get_url)."""
        parts = urlsplit(url)
        if parts.path in ("", "/") and self.server is not None:
            return f"{parts.scheme}://{parts.netloc}{self.server.base_url}"
        return url

    # --- progress -----------------------------------------------------------

    async def progress(self):
        # Until this start has been accepted the service still holds the
        # previous operation's events.
        await self._start_event().wait()
        last_id = None
        while True:
            try:
                async with _closing(self._events(last_id)) as events:
                    async for event_id, kind, data in events:
                        last_id = event_id or last_id
                        event = {"message": data.get("message", "")}
                        if isinstance(data.get("progress"), int):
                            event["progress"] = data["progress"]
                        if kind == "failed" or data.get("failed"):
                            event["message"] = ": ".join(
                                p for p in (data.get("reason"), data.get("message")) if p
                            )
                        elif kind == "ready" or data.get("ready"):
                            # JupyterHub itself says "Server ready" once the
                            # server answers over HTTP, which may take a while
                            # longer (http_timeout).
                            event["message"] = (
                                f"Server started at {data.get('url', '')}, waiting for it to respond"
                            )
                        yield event
                        if kind in ("ready", "failed") or data.get("ready") or data.get("failed"):
                            return
                # The stream ended before the final event (the service
                # shut down): resume after the last event. JupyterHub stops
                # iterating once the start has finished either way.
            except ServiceUnavailable as e:
                self.log.warning("spawnkit: progress of %s interrupted: %s", self._log_name, e)
            except SpawnkitError as e:
                if e.status != 404:
                    raise
                # Not known yet (the start request is still on its way).
            await asyncio.sleep(self.service_retry_interval)

    async def _events(self, last_event_id):
        """Yields (id, event, data) from GET {S}/progress.

        Raises ServiceUnavailable when the connection fails or falls
        silent (the service sends a keepalive every 15 s), SpawnkitError
        for a refusal (404: unknown server).
        """
        headers = self._headers({"Accept": "text/event-stream", "Cache-Control": "no-cache"})
        if last_event_id:
            headers["Last-Event-ID"] = str(last_event_id)
        url = self._url(self._server_path() + "/progress")
        try:
            async with _SSEConnection(url, headers, idle_timeout=45) as conn:
                if conn.status != 200:
                    body = await conn.read_body()
                    message, reason = _error_of_bytes(body)
                    err = ServiceUnavailable if conn.status >= 500 else SpawnkitError
                    raise err(message or f"HTTP {conn.status} from {url}", reason=reason, status=conn.status)
                async for event in conn.events():
                    yield event
        except (OSError, asyncio.TimeoutError, ssl.SSLError, EOFError, ValueError) as e:
            raise ServiceUnavailable(f"progress stream {url}: {e!r}", reason="ServiceUnavailable") from e

    # --- options form -------------------------------------------------------

    async def _service_options_form(self, spawner=None):
        """The profile picker the service renders from its profile_list
        (KubeSpawner's form); empty when there is no profile_list, which
        makes JupyterHub start servers without showing a form."""
        path = f"/v1/users/{quote(self.user.name, safe='')}/options-form"
        try:
            form = await self._request("GET", path)
        except SpawnkitError as e:
            self.log.error("spawnkit: cannot load the options form for %s: %s", self._log_name, e)
            raise
        return form or ""

    async def _service_options_from_form(self, form_data):
        """Turns the submitted form into KubeSpawner's user_options
        ({"profile": slug, "<option>": choice, "<option>--unlisted-choice":
        text}); the service validates them."""
        fields = {
            k: [v for v in vs if isinstance(v, str)]
            for k, vs in (form_data or {}).items()
            if isinstance(vs, (list, tuple))
        }
        path = f"/v1/users/{quote(self.user.name, safe='')}/options-from-form"
        return await self._request("POST", path, body=fields) or {}

    # --- state ----------------------------------------------------------------

    def get_state(self):
        state = super().get_state()
        if self._service_state is not None:
            state["spawnkit_state"] = self._service_state
        if self._server_url:
            state["spawnkit_url"] = self._server_url
        return state

    def load_state(self, state):
        super().load_state(state)
        if "spawnkit_state" in state:
            self._service_state = state["spawnkit_state"]
        if "spawnkit_url" in state:
            self._server_url = state["spawnkit_url"]

    def clear_state(self):
        super().clear_state()
        self._service_state = None
        self._server_url = ""
        if self._start_accepted is not None:
            self._start_accepted.clear()


def _error_of(response):
    return _error_of_bytes(response.body if response is not None else b"")


def _error_of_bytes(body):
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


class _closing:
    """contextlib.aclosing, which Python 3.8 and 3.9 lack."""

    def __init__(self, agen):
        self.agen = agen

    async def __aenter__(self):
        return self.agen

    async def __aexit__(self, *exc):
        await self.agen.aclose()


class _SSEConnection:
    """One GET of a server-sent event stream over a plain asyncio connection.

    tornado's client cannot abort a streaming request that falls silent;
    this one closes the socket when nothing (not even a keepalive) arrives
    for idle_timeout seconds.
    """

    def __init__(self, url, headers, idle_timeout):
        self.url = url
        self.headers = headers
        self.idle_timeout = idle_timeout
        self.status = 0
        self.response_headers = {}
        self._reader = None
        self._writer = None
        self._chunked = False
        self._remaining = None  # bytes left with Content-Length

    async def __aenter__(self):
        parts = urlsplit(self.url)
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        self._reader, self._writer = await asyncio.wait_for(
            asyncio.open_connection(
                parts.hostname, port, ssl=ssl.create_default_context() if tls else None
            ),
            timeout=10,
        )
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        host = parts.hostname if parts.port is None else f"{parts.hostname}:{parts.port}"
        lines = [f"GET {target} HTTP/1.1", f"Host: {host}", "Connection: close"]
        lines += [f"{k}: {v}" for k, v in self.headers.items()]
        self._writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("utf-8"))
        await self._writer.drain()
        status_line = await self._line()
        fields = status_line.split(" ", 2)
        if len(fields) < 2 or not fields[0].startswith("HTTP/"):
            raise ValueError(f"bad status line {status_line!r}")
        self.status = int(fields[1])
        while True:
            line = await self._line()
            if not line:
                break
            name, _, value = line.partition(":")
            self.response_headers[name.strip().lower()] = value.strip()
        self._chunked = "chunked" in self.response_headers.get("transfer-encoding", "").lower()
        if "content-length" in self.response_headers:
            self._remaining = int(self.response_headers["content-length"])
        return self

    async def __aexit__(self, *exc):
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except Exception:
                pass

    async def _line(self):
        data = await asyncio.wait_for(self._reader.readline(), self.idle_timeout)
        if not data:
            raise EOFError("connection closed")
        return data.decode("utf-8").rstrip("\r\n")

    async def _body_chunks(self):
        """Yields the decoded body as bytes."""
        while True:
            if self._chunked:
                size = int((await self._line()).split(";", 1)[0], 16)
                if size == 0:
                    return
                data = await asyncio.wait_for(self._reader.readexactly(size + 2), self.idle_timeout)
                yield data[:-2]
            elif self._remaining is not None:
                if self._remaining <= 0:
                    return
                data = await asyncio.wait_for(
                    self._reader.read(min(self._remaining, 65536)), self.idle_timeout
                )
                if not data:
                    raise EOFError("connection closed")
                self._remaining -= len(data)
                yield data
            else:
                data = await asyncio.wait_for(self._reader.read(65536), self.idle_timeout)
                if not data:
                    return
                yield data

    async def read_body(self):
        chunks = []
        async for data in self._body_chunks():
            chunks.append(data)
        return b"".join(chunks)

    async def events(self):
        """Yields (id, event, data) per event; data is the decoded JSON."""
        buf = b""
        event_id, kind, data_lines = None, "message", []
        async for chunk in self._body_chunks():
            buf += chunk
            while True:
                nl = buf.find(b"\n")
                if nl < 0:
                    break
                line = buf[:nl].rstrip(b"\r").decode("utf-8")
                buf = buf[nl + 1 :]
                if not line:
                    if data_lines:
                        yield event_id, kind, json.loads("\n".join(data_lines))
                    kind, data_lines = "message", []
                    continue
                if line.startswith(":"):
                    continue  # keepalive comment
                field, _, value = line.partition(":")
                if value.startswith(" "):
                    value = value[1:]
                if field == "id":
                    event_id = value
                elif field == "event":
                    kind = value
                elif field == "data":
                    data_lines.append(value)
