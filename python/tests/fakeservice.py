"""An in-process stand-in for the spawner-service's HTTP API (v1), and a
SpawnkitSpawner wired to it, for the unit tests.

The fake keeps one record per server and logs every request it gets
(method, path, query, body) with the time it arrived and was answered,
so that a test can check what reached the service and in which order.
Tests script it through its attributes: start_delay (seconds a POST
takes), start_status (the POST's HTTP status), start_error and
start_errors (refusals), final_event (the progress stream's last event),
claims (the state names a claim), state_error (refuses every hub state
PUT, as a service whose configuration does not trust it), and restart()
(the service forgets its servers, whose pods still run).

FakeService(ssl_options=...) answers over TLS (an SSLContext; one that
requires a client certificate makes it a mutual-TLS proxy's stand-in);
each request records its Host header and its client certificate's
common name.

PUT {S}/state behaves as the service's (manager.Seed): a server the fake
knows answers its status; one it forgot since restart() is found again
where the state says, running; a state naming a pod the fake never ran
gives a stopped server (the service's answer for a pod that is gone:
phase stopped, exit_code null); a state naming no pod, 404.

GET .../options-form answers form_html; POST .../options-form (a hub that
sends its configuration) answers form_html too. POST .../options-from-form
answers {"profile": <the form's first "profile" value>}, from the field
map itself or from its "form_data" (a hub that sends its configuration).

Each request records its headers (a tornado HTTPHeaders: case-insensitive
get). As the service does, the fake takes a start's trace id from its
traceparent and puts it in every event of that start's progress stream
as trace_id (none for a start without a valid traceparent).
"""

import asyncio
import json
import re
import socket
import types
import unittest

from tornado import web
from tornado.httpserver import HTTPServer

from jupyterhub.objects import Hub, Server

from spawnkit_jupyterhub import SpawnkitSpawner

TOKEN = "service-token"


class Request:
    def __init__(self, method, path, query, body):
        self.method = method
        self.path = path
        self.query = query
        self.body = body
        self.received = asyncio.get_running_loop().time()
        self.answered = None
        # The Spawnkit-Hub header, None without one.
        self.hub = None
        # The Host header, and the client certificate's common name (None
        # without one).
        self.host = None
        self.client_cn = None
        # Every header, as received.
        self.headers = {}

    @property
    def traceparent(self):
        return self.headers.get("traceparent")

    @property
    def trace_id(self):
        """The trace id of a valid traceparent, else None."""
        m = re.fullmatch(r"00-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}", self.traceparent or "")
        return m.group(1) if m else None

    def __repr__(self):
        return f"{self.method} {self.path}{'?' + self.query if self.query else ''}"


def _record_connection(record, request):
    record.host = request.headers.get("Host")
    record.headers = request.headers.copy()
    cert = request.get_ssl_certificate() if request.protocol == "https" else None
    if cert:
        for rdn in cert.get("subject", ()):
            for key, value in rdn:
                if key == "commonName":
                    record.client_cn = value


class FakeService:
    def __init__(self, ssl_options=None):
        self.ssl_options = ssl_options
        self.requests = []
        self.servers = {}  # path -> status dict
        self.start_delay = 0.0
        self.start_status = 202
        self.start_error = None  # (status, reason, message) to refuse every start with
        self.start_errors = []  # the same, for the next starts, one each
        self.stop_errors = []  # (status, reason, message) for the next stops, one each
        self.get_errors = []  # the same, for the next status requests (GET, or PUT of a state), one each
        self.lose_starts = 0  # accept (202) but forget this many starts, as a crash before the pod would
        self.claims = False  # whether a start's state names a claim (pvc_name), as with storage
        self.state_error = None  # (status, reason, message) to refuse every PUT .../state with
        # Servers whose pods still run but that the service does not know
        # since restart(): path -> status.
        self.forgotten = {}
        self.form_html = "<div>profiles</div>"
        # path -> the trace id of the start that made the server's record
        # (from its traceparent), which its progress events carry.
        self.trace_ids = {}
        self.trace_in_events = True  # False: as a service from before trace_id
        self.final_event = ("ready", {"ready": True, "url": "http://127.0.0.2:8888", "progress": 100})
        self._server = None
        self.port = None

    # --- lifecycle ---------------------------------------------------------

    def listen(self, port=0):
        """Starts answering on 127.0.0.1 (port 0: any free port)."""
        app = web.Application(
            [
                (r"(/v1/users/[^/]+/(?:server|servers/[^/]+))(/progress|/state)?", _ServerHandler, {"fake": self}),
                (r"(/v1/users/[^/]+/(?:options-form|options-from-form))", _FormHandler, {"fake": self}),
            ],
            log_function=lambda handler: None,
        )
        self._server = HTTPServer(app, ssl_options=self.ssl_options)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
        sock.setblocking(False)
        self.port = sock.getsockname()[1]
        self._server.add_sockets([sock])

    async def close(self):
        if self._server is not None:
            self._server.stop()
            await self._server.close_all_connections()
            self._server = None

    def restart(self):
        """The service restarted under a configuration that does not find
        its servers by itself: it forgets them; their pods run on, and a
        hub's state (PUT .../state, or a start's "state") finds them."""
        self.forgotten.update(self.servers)
        self.servers = {}

    @property
    def url(self):
        return f"{'https' if self.ssl_options else 'http'}://127.0.0.1:{self.port}"

    # --- what arrived ----------------------------------------------------------

    def calls(self, method=None):
        return [r for r in self.requests if method is None or r.method == method]

    def started(self, path):
        return path in self.servers and self.servers[path]["phase"] in ("starting", "running")


class _ServerHandler(web.RequestHandler):
    def set_default_headers(self):
        self.set_header("Spawnkit-Service", "fake")

    def initialize(self, fake):
        self.fake = fake

    def prepare(self):
        if self.request.headers.get("Authorization") != f"Bearer {TOKEN}":
            self._error(401, "Unauthorized", "bad token")
            return
        sub = self.path_args[1]
        if (sub == "/state" and self.request.method != "PUT") or (sub == "/progress" and self.request.method != "GET"):
            self._error(405, "MethodNotAllowed", f"{self.request.method} not allowed on {sub}")
            return
        if sub is None and self.request.method == "PUT":
            self._error(405, "MethodNotAllowed", "PUT only on .../state")
            return
        body = json.loads(self.request.body) if self.request.body else None
        self.record = Request(self.request.method, self.path_args[0] + (self.path_args[1] or ""), self.request.query, body)
        self.record.hub = self.request.headers.get("Spawnkit-Hub")
        _record_connection(self.record, self.request)
        self.fake.requests.append(self.record)

    def on_finish(self):
        if getattr(self, "record", None) is not None:
            self.record.answered = asyncio.get_running_loop().time()

    def _error(self, status, reason, message):
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"error": message, "reason": reason}))

    def _json(self, status, doc):
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(doc))

    async def post(self, path, progress):
        if self.fake.start_delay:
            await asyncio.sleep(self.fake.start_delay)
        if self.fake.start_errors:
            self._error(*self.fake.start_errors.pop(0))
            return
        if self.fake.start_error:
            self._error(*self.fake.start_error)
            return
        seed = (self.record.body or {}).get("state")
        if seed and seed.get("pod_name") and path in self.fake.forgotten:
            # The hub's state finds the server still running: not started twice.
            self.fake.servers[path] = self.fake.forgotten.pop(path)
            self._json(200, self.fake.servers[path])
            return
        state = {"pod_name": "jupyter-x", "namespace": "default"}
        status = {"phase": "starting", "ready": False, "exit_code": None, "state": state}
        if self.fake.lose_starts > 0:
            self.fake.lose_starts -= 1
        else:
            self.fake.servers[path] = status
            self.fake.trace_ids[path] = self.record.trace_id
        self._json(self.fake.start_status, status)
        if self.fake.claims:
            # As the service: the claim is named in the state once it
            # exists, after the start's answer.
            status["state"] = dict(state, pvc_name=(seed or {}).get("pvc_name") or "claim-x")

    async def put(self, path, sub):
        if self.fake.get_errors:
            self._error(*self.fake.get_errors.pop(0))
            return
        if self.fake.state_error:
            self._error(*self.fake.state_error)
            return
        seed = self.record.body or {}
        status = self.fake.servers.get(path)
        if status is None and seed.get("pod_name") and path in self.fake.forgotten:
            status = self.fake.servers[path] = self.fake.forgotten.pop(path)
        elif status is None and (seed.get("pod_name") or seed.get("pvc_name")):
            status = self.fake.servers[path] = {"phase": "stopped", "ready": False, "exit_code": None, "state": seed}
        if status is None:
            self._error(404, "NotFound", f"no server {path}")
            return
        self._json(200, status)

    async def get(self, path, progress):
        if not progress and self.fake.get_errors:
            self._error(*self.fake.get_errors.pop(0))
            return
        status = self.fake.servers.get(path)
        if status is None:
            self._error(404, "NotFound", f"no server {path}")
            return
        if not progress:
            self._json(200, status)
            return
        kind, data = self.fake.final_event
        if kind == "ready":
            status.update(phase="running", ready=True, url=data.get("url", ""))
        trace = {}
        if self.fake.trace_in_events and self.fake.trace_ids.get(path):
            trace["trace_id"] = self.fake.trace_ids[path]
        self.set_header("Content-Type", "text/event-stream")
        self.write(f"id: 1\nevent: progress\ndata: {json.dumps({'progress': 10, 'message': 'Pod created', **trace})}\n\n")
        self.write(f"id: 2\nevent: {kind}\ndata: {json.dumps({**data, **trace})}\n\n")
        await self.finish()

    async def delete(self, path, progress):
        if self.fake.stop_errors:
            self._error(*self.fake.stop_errors.pop(0))
            return
        forever = self.get_query_argument("forever", "") == "true"
        status = self.fake.servers.get(path)
        if forever:
            if status is not None and status["phase"] in ("starting", "running"):
                self._error(409, "Conflict", "server is not stopped")
                return
            self.fake.servers.pop(path, None)
            self.set_status(204)
            self.finish()
            return
        if status is None:
            self._error(404, "NotFound", f"no server {path}")
            return
        status.update(phase="stopped", ready=False, exit_code=0)
        self.fake.servers.pop(path, None)
        self._json(200, status)


class _FormHandler(web.RequestHandler):
    def set_default_headers(self):
        self.set_header("Spawnkit-Service", "fake")

    def initialize(self, fake):
        self.fake = fake

    def prepare(self):
        if self.request.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.set_status(401)
            self.finish(json.dumps({"error": "bad token", "reason": "Unauthorized"}))
            return
        body = json.loads(self.request.body) if self.request.body else None
        record = Request(self.request.method, self.path_args[0], self.request.query, body)
        _record_connection(record, self.request)
        self.fake.requests.append(record)

    def get(self, path):
        if not path.endswith("/options-form"):
            self.set_status(405)
            self.finish()
            return
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(self.fake.form_html)

    def post(self, path):
        if path.endswith("/options-form"):
            self.get(path)
            return
        body = json.loads(self.request.body)
        fields = body["form_data"] if isinstance(body.get("form_data"), dict) else body
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"profile": (fields.get("profile") or [""])[0]}))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_spawner(service_url, user="alice", name="", **traits):
    """A SpawnkitSpawner as JupyterHub sets one up for a start: a user, the
    hub, the server's prefix, an API token and OAuth client, with short
    timeouts."""
    user_obj = types.SimpleNamespace(name=user, id=7, url=f"/user/{user}/", escaped_name=user)
    defaults = dict(
        service_url=service_url,
        service_token=TOKEN,
        service_retry_interval=0.05,
        service_retry_max_interval=0.2,
        service_request_timeout=5,
        service_connect_timeout=2,
        start_timeout=10,
        api_token="hub-api-token",
        oauth_client_id=f"jupyterhub-user-{user}",
        oauth_access_scopes=[f"access:servers!server={user}/{name}"],
    )
    defaults.update(traits)
    # Spawner.name and .server live on its database row.
    orm_spawner = types.SimpleNamespace(name=name, server=None, state=None, user_options=None)
    spawner = SpawnkitSpawner(
        user=user_obj, hub=Hub(ip="127.0.0.1", port=8081, base_url="/hub/"), orm_spawner=orm_spawner, **defaults
    )
    prefix = f"/user/{user}/{name + '/' if name else ''}"
    spawner.server = Server(base_url=prefix)
    return spawner


class ServiceTestCase(unittest.IsolatedAsyncioTestCase):
    """A test with a FakeService listening (self.service)."""

    async def asyncSetUp(self):
        self.service = FakeService()
        self.service.listen()

    async def asyncTearDown(self):
        await self.service.close()
