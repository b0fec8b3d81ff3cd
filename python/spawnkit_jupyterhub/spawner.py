"""SpawnkitSpawner: a JupyterHub Spawner backed by spawnkit's spawner-service.

JupyterHub keeps its users, tokens, proxy and pages; the Kubernetes work
(pods, claims, events, profiles, recovery) is done by the spawner-service
(cmd/spawnkit-service), a Go service built on spawnkit's Manager that
reads a KubeSpawner-style YAML configuration. This class speaks its HTTP
API (v1) and nothing else:

    POST   {S}                 start (idempotent)
    GET    {S}                 status: poll, get_url
    PUT    {S}/state           the state JupyterHub kept; answers the status
    DELETE {S}[?now=true]      stop; returns once the pod is gone
    DELETE {S}?forever=true    delete_forever
    GET    {S}/progress        server-sent events, resumable with Last-Event-ID
    GET    /v1/users/{user}/options-form        (POST with the hub's configuration)
    POST   /v1/users/{user}/options-from-form

where {S} is /v1/users/{user}/server for a user's default server and
/v1/users/{user}/servers/{name} for a named one.

The KubeSpawner options (image, profile_list, storage, ...) are read as
KubeSpawner reads them, from c.KubeSpawner.<option> (or
c.SpawnkitSpawner.<option>, which wins): SpawnkitSpawner subclasses a
class named KubeSpawner that holds them as traits (_kubespawner.py). When
the hub sets any, the start carries them as "config" (_hub_config), with
their callables called in the hub as KubeSpawner calls them, and the
service builds the pod from them over its own YAML.

It needs nothing beyond JupyterHub itself (the standard library, tornado,
traitlets) and works with JupyterHub 3.0 and later. Install the
spawnkit-jupyterhub package where JupyterHub runs and set

    c.JupyterHub.spawner_class = "spawnkit"

Failure policy: only the service's own answer ends a server. When the
service cannot be reached (restarting, upgraded, briefly partitioned),
poll reports the server as running and logs a warning, so that a service
restart never makes JupyterHub forget or cull running servers; starts,
stops and deletions are sent again until their time is up (every request
is safe to repeat). A service whose TLS certificate cannot be verified
is not waited for: that is the hub's configuration (service_ca_file,
service_server_name), so the request fails at once with a message that
says so (_tls.py).

The state the service returns for a server (its pod's name, namespace,
cluster, claim) is kept in JupyterHub's database, and sent back whenever
the service may not know the server: after a hub restart (load_state),
after the service was away or answered 404, before the next poll or
stop (PUT {S}/state, whose answer is the server's status), and with
every start. A service restarted under a changed configuration (another
pod_name_template, namespace or cluster list) so finds the servers still
running where their state says, and a service that refuses the state (a
namespace or cluster its configuration no longer trusts) never makes a
poll end a server.

A server KubeSpawner started (a hub switched from KubeSpawner to
spawnkit) has KubeSpawner's state in the database: load_state takes its
pod_name, namespace, dns_name and pvc_name as the service's state, which
the first poll sends; a service run with -adopt-kubespawner then runs
that pod as the server (docs/z2jh.md, "Switching over").

Each start and each stop is one trace (_trace.py): its requests, retries
and progress stream carry the same W3C traceparent (the hub's
OpenTelemetry span where it has one, else a fresh sampled one), and its
INFO log line names the trace_id.
"""

import asyncio
import os
import re
import time
from urllib.parse import quote, urlsplit

from traitlets import Bool, Float, Integer, TraitError, Unicode, default, validate

import jupyterhub
from jupyterhub.traitlets import Command

from . import _tls, _trace
from ._api import NOT_SERVING, ServiceAPI, is_state_refused, reached
from ._kubespawner import KubeSpawner, chosen_hub_overrides, hub_config, refuse_unsupported
from ._sse import closing
from .errors import ServiceUnavailable, SpawnkitError, for_jupyterhub

__all__ = ["SpawnkitSpawner", "SpawnkitError"]

# What KubeSpawner's get_state saves that names a server's objects
# (kubespawner/spawner.py, 7.x: pod_name, namespace, dns_name, pvc_name,
# beside kubespawner_version): the fields of the service's state of the
# same names and meaning.
KUBESPAWNER_STATE_KEYS = ("pod_name", "namespace", "dns_name", "pvc_name")


def kubespawner_state(state):
    """The service's state for a state KubeSpawner saved: its pod's name,
    namespace and DNS name and its claim's name, each a non-empty string;
    None when state names none of them (no state, or one of another
    Spawner's). KubeSpawner's other keys (kubespawner_version) mean
    nothing to the service."""
    if not isinstance(state, dict):
        return None
    out = {k: state[k] for k in KUBESPAWNER_STATE_KEYS if isinstance(state.get(k), str) and state[k]}
    return out or None


def _retrieve(future):
    """Marks a request nobody waits for any more as seen (its outcome
    no longer matters), so asyncio does not log it."""
    if not future.cancelled():
        future.exception()


class SpawnkitSpawner(KubeSpawner):
    """Starts each server through spawnkit's spawner-service.

    The KubeSpawner options (image, profile_list, storage, ...) are its
    traits, configured as c.KubeSpawner.<option> (zero-to-jupyterhub's
    jupyterhub_config.py) or c.SpawnkitSpawner.<option>; when the hub sets
    any, each start sends them to the service (_hub_config), which applies
    them over its -config YAML. A hub that sets none keeps them in that
    YAML, and the start carries only what JupyterHub itself knows: the
    environment (API token, OAuth settings, URLs), cmd and args, the
    resource limits, the user's options and id.
    """

    service_url = Unicode(
        "http://127.0.0.1:8765",
        help="""Base URL of the spawnkit spawner-service (its API is under /v1).

        The default is the service's default -listen address; 8765 is
        neither JupyterHub's (8000, 8001, 8081) nor zero-to-jupyterhub's.
        """,
    ).tag(config=True)

    service_ca_file = Unicode(
        "",
        help="""PEM file of the CA certificates that verify the service's
        certificate, for an https:// service_url (a private CA's, or
        cert-manager's ca.crt). "" (default): the system's CA store.

        Both of tornado's HTTP clients use it: JupyterHub's curl client
        (used whenever pycurl is installed, as in zero-to-jupyterhub's hub
        image) ignores SSL_CERT_FILE, so this is the way to trust a
        private CA. It replaces the system's store (list public CAs in the
        file too if the service may present a certificate from one). A
        file that does not exist or holds no PEM certificate fails when
        JupyterHub makes the spawner (at hub start for the servers it
        runs, else at a user's spawn), naming this setting.
        """,
    ).tag(config=True)

    service_client_cert_file = Unicode(
        "",
        help="""PEM file of a client certificate the hub presents to the
        service's URL, with its key unless service_client_key_file is set.

        The spawner-service itself never asks for one (its API trusts the
        bearer token): this is for a service behind a proxy or mesh that
        terminates mutual TLS. The key must not be encrypted (tornado's
        clients take no password).
        """,
    ).tag(config=True)

    service_client_key_file = Unicode(
        "",
        help="""PEM file of the private key of service_client_cert_file,
        when it is not in that file. Unencrypted; readable by the hub
        alone.""",
    ).tag(config=True)

    service_server_name = Unicode(
        "",
        help="""The name to verify in the service's certificate when
        service_url's host is not a name it holds (an IP address, or
        another DNS name such as a node's): e.g. service_url =
        "https://10.0.0.12:8765" with service_server_name =
        "spawnkit-service.jupyterhub.svc".

        The requests then name it as their host (TLS server name
        indication, verification, and the Host header), while connections
        go to service_url's host. "" (default): service_url's host.
        """,
    ).tag(config=True)

    @validate("service_ca_file")
    def _validate_service_ca_file(self, proposal):
        return _tls.check_ca_file(proposal["value"])

    @validate("service_client_key_file")
    def _validate_service_client_key_file(self, proposal):
        return _tls.check_key_file(proposal["value"])

    @validate("service_server_name")
    def _validate_service_server_name(self, proposal):
        return _tls.check_server_name(proposal["value"])

    service_token = Unicode(
        help="""Bearer token for the spawner-service.

        Default: the SPAWNKIT_SERVICE_TOKEN environment variable. The
        service reads the same token from its -token-file or environment.
        """,
    ).tag(config=True)

    @default("service_token")
    def _service_token_default(self):
        return os.environ.get("SPAWNKIT_SERVICE_TOKEN", "")

    hub_id = Unicode(
        "",
        help="""This hub's name at the service, when several hubs share one
        spawner-service: a DNS label (lower case letters, digits and '-'),
        sent as the Spawnkit-Hub header. The service records it on each
        server this hub starts and answers this hub only about its own
        servers (another hub's is unknown to it, and starting it is refused
        while it runs). Give every hub of a shared service its own; keep it
        once servers run, since servers started under another id are no
        longer this hub's. "" (default): the service's one hub, which sees
        every server.""",
    ).tag(config=True)

    @validate("hub_id")
    def _validate_hub_id(self, proposal):
        value = proposal["value"]
        if value and not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", value):
            raise TraitError(
                f"c.SpawnkitSpawner.hub_id {value!r}: want a DNS label (lower case letters, digits and '-', at most 63)"
            )
        return value

    service_request_timeout = Float(
        60,
        help="""Seconds one request to the service may take; also how long
        a stop or a deletion is sent again while the service cannot be
        reached, and how long a replica that does not serve (NotLeader,
        NotReady) is asked again.

        A stop waits until the pod is gone from the API server, so this
        should exceed the service's delete_grace_period.
        """,
    ).tag(config=True)

    service_connect_timeout = Float(
        30,
        help="""Seconds to wait for a connection to the service, or for a
        free connection when all service_max_connections are busy. A hub
        that accepts hundreds of starts at once keeps its event loop busy
        for seconds, so this is generous; a start that cannot connect is
        tried again until start_timeout.""",
    ).tag(config=True)

    service_retry_interval = Float(
        1,
        help="""Seconds before the first new attempt while the service is
        unreachable or its progress stream has dropped; the wait doubles
        up to service_retry_max_interval.""",
    ).tag(config=True)

    service_retry_max_interval = Float(
        5,
        help="""The longest wait between two attempts while the service is
        unreachable.""",
    ).tag(config=True)

    service_stream_idle_timeout = Float(
        45,
        help="""Seconds the progress stream may stay silent before it is
        taken for dropped and opened again. The service sends a keepalive
        every 15 s.""",
    ).tag(config=True)

    service_first_contact_timeout = Float(
        15,
        help="""Seconds a start tries a service that this hub process has
        not reached yet (since the hub started) before it fails, naming
        service_url: a wrong URL or port fails the start in seconds rather
        than after start_timeout. Once the service has answered, a start
        rides out its restarts and failovers until start_timeout. Raise
        this where the hub and the service start together and the service
        may take longer to come up.""",
    ).tag(config=True)

    service_busy_timeout = Float(
        60,
        help="""Seconds a start waits for a stop of the same server that is
        still in flight (the service answers 409) before giving up.""",
    ).tag(config=True)

    allow_rename = Bool(
        False,
        help="""Whether JupyterHub 6's rename of a stopped named server
        (PATCH /users/{user}/servers/{name} with a new name) is allowed.

        The service names a server's objects after the server: a claim
        whose pvc_name_template uses {servername} or {user_server} (as
        KubeSpawner's default does) is not carried over to the new name.
        The next start creates the new name's claim, and the old one stays
        until deleted by hand. False (default): renames are refused with a
        message saying so. True: renames are allowed; use it when no
        object outlives a server's stop, or when the claims are named
        after the user alone.""",
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
    # JupyterHub's database through get_state. Only its pvc_name outlives
    # a stop (clear_state), as KubeSpawner's pvc_name does.
    _service_state = None
    # Whether _service_state has reached the service since it may have
    # lost the server: False after load_state (a hub restart), after the
    # service was away, and after a refusal; poll and stop send it
    # (PUT {S}/state) before anything else while it is False.
    _state_sent = False
    # Whether the service's refusal of that state has been logged as an
    # error (once per spawner; later ones are logged at debug level).
    _refusal_logged = False
    _server_url = ""
    # True from start() until clear_state: poll tells "never started" (0)
    # from "gone" (1) by it and the state.
    _started = False
    # Set once this spawner's start request has been answered (cleared by
    # clear_state, which JupyterHub calls before each start), so that
    # progress never relays a previous operation's events.
    _start_accepted = None
    # The task running start(), and its start request on the wire: a stop
    # cancels the first and waits for the second's answer, so no start
    # reaches the service after the stop's DELETE.
    _start_task = None
    _start_request = None
    # The start task a stop cancelled: it also ends at its next step, so
    # that a cancellation lost on the way (asyncio.wait_for before Python
    # 3.12 drops one that arrives as the awaited call completes) cannot
    # let it carry on, or start the stopped server again.
    _cancelled_start = None
    # The body of the start in progress (_start_body).
    _pending_start_body = None
    # The trace of the last start (_trace.Trace), which its progress
    # stream carries; None before this process started the server.
    _start_trace = None
    # The trace id (32 lowercase hex digits) of the last start or stop of
    # this spawner, as logged and sent to the service; None before one.
    trace_id = None

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # An option the service cannot honour (a "not applicable" one, a
        # Python hook on KubeSpawner's pod, its Jinja form templates) fails
        # here, when JupyterHub makes the spawner: at hub start for the
        # servers it knows, else at a user's first spawn.
        refuse_unsupported(self)
        # So does a client certificate that cannot be used with its key
        # (each file alone is checked as the setting is made).
        _tls.check_client_cert(self.service_client_cert_file, self.service_client_key_file)

    @default("options_form")
    def _options_form_default(self):
        return self._service_options_form

    @default("options_from_form")
    def _options_from_form_default(self):
        return self._service_options_from_form

    # --- addressing and transport -------------------------------------

    def _server_path(self, name=None):
        user = quote(self.user.name, safe="")
        name = self.name if name is None else name
        if name:
            return f"/v1/users/{user}/servers/{quote(name, safe='')}"
        return f"/v1/users/{user}/server"

    @property
    def _api(self):
        api = self.__dict__.get("_service_api")
        if api is None:
            api = self.__dict__["_service_api"] = ServiceAPI(self)
        return api

    def _request(self, *args, **kwargs):
        """ServiceAPI.request: one request, retried as it says."""
        return self._api.request(*args, **kwargs)

    def _remember(self, status):
        """Keeps what the service said about the server, for get_state."""
        if not isinstance(status, dict):
            return
        if status.get("state") is not None:
            self._service_state = status["state"]
        if status.get("url"):
            self._server_url = status["url"]

    # --- start ----------------------------------------------------------

    def _service_user_options(self):
        """The user options as the service takes them: a string, or a list
        of one string (form data), per key.

        JupyterHub hands user_options over as it stored them; since 5.3
        its apply_user_options hook (like pre_spawn_hook before it) turns
        some of them into spawner attributes, which reach the service
        through get_env(), cmd and args. Values of other types are for
        such hooks: they are not sent (the service would refuse the whole
        start), and a warning names them. "profile" and
        "<option>--unlisted-choice" are always sent, so that the service
        refuses a profile it cannot read rather than start the default.
        """
        sent, dropped = {}, []
        for key, value in (self.user_options or {}).items():
            if (
                isinstance(value, str)
                or (isinstance(value, (list, tuple)) and len(value) == 1 and isinstance(value[0], str))
                or key == "profile"
                or key.endswith("--unlisted-choice")
            ):
                sent[key] = list(value) if isinstance(value, tuple) else value
            else:
                dropped.append(key)
        if dropped:
            self.log.warning(
                "spawnkit: user options of %s not sent to the service (not a string, so not a profile choice): %s",
                self._log_name,
                ", ".join(sorted(dropped)),
            )
        return sent

    async def _hub_config(self, for_form=False):
        """The hub's KubeSpawner configuration as the service takes it:
        {option: value} for every option of kubespawner_options.json that
        has a value here (set by c.Spawner, c.KubeSpawner or
        c.SpawnkitSpawner, by a pre_spawn_hook or apply_user_options, or
        otherwise not its default), JSON values only; {} when the hub sets
        no KubeSpawner option (its options are in the service's YAML).

        Callables are called with the spawner as KubeSpawner calls them:
        an option's value (uid, gid, profile_list, ...), environment
        values, and the kubespawner_override values of the profile and
        choices this start uses (the others' are left out). Kubernetes
        client objects are sent as the API's JSON. A value that is none of
        these raises SpawnkitError (400) naming the option. Options that
        act in the hub are sent only when they are JSON values (their
        callables, such as pre_spawn_hook, run here).

        For a start, with a profile_list, the chosen profile's slug is
        recorded in user_options["profile"] (the default one's when the
        user chose none), as KubeSpawner's load_user_options does, so that
        JupyterHub 6's admin page shows it. for_form: the configuration
        for the options form, where no profile is chosen and no callable
        but profile_list is called.
        """
        user_options = None if for_form else dict(self.user_options or {})
        config, slug = await hub_config(self, user_options)
        if slug is not None and not for_form:
            if isinstance(self.user_options, dict):
                self.user_options["profile"] = slug
            else:
                self.user_options = {"profile": slug}
        return config

    def _hub_env(self, without_environment=False, overrides=None):
        """get_env() as a string map. without_environment: JupyterHub's
        variables alone (`environment` goes in the configuration, its
        callables called, its valueFrom kept, and the service sets it as
        KubeSpawner does). overrides: traits the chosen profile sets, as
        KubeSpawner's load_user_options sets them before get_env (so that
        MEM_LIMIT or JUPYTERHUB_DEFAULT_URL say what the profile chose);
        set for the call only."""
        saved = {}
        try:
            if without_environment:
                saved["environment"] = self.environment
                self.environment = {}
            for name, value in (overrides or {}).items():
                saved.setdefault(name, getattr(self, name))
                setattr(self, name, value)
            values = self.get_env()
        finally:
            for name, value in saved.items():
                setattr(self, name, value)
        return {k: "" if v is None else str(v) for k, v in values.items()}

    async def _start_body(self):
        config = await self._hub_config()
        if config:
            # The service builds cmd, args and the resources from the
            # configuration, as KubeSpawner does from its traits.
            body = {
                "user_options": self._service_user_options(),
                "env": self._hub_env(
                    without_environment=True,
                    overrides=chosen_hub_overrides(config.get("profile_list"), self.user_options),
                ),
                "user_id": self.user.id,
                "hub_version": jupyterhub.__version__,
                "config": config,
            }
            if self._service_state:
                body["state"] = self._service_state
            return body
        # get_env() as it is: every variable JupyterHub sets (the token,
        # OAuth client and scopes, URLs, limits) and `environment`.
        env = self._hub_env()
        body = {
            "user_options": self._service_user_options(),
            "env": env,
            "args": list(self.get_args() or []),
            "user_id": self.user.id,
            "hub_version": jupyterhub.__version__,
        }
        # JupyterHub's resource traits, as KubeSpawner turns them into the
        # container's resources: set by the hub's config, by
        # apply_user_options (5.3) or a pre_spawn_hook. The service
        # applies them over its configuration and under the profile's
        # overrides. None is unset.
        attributes = {
            name: getattr(self, name)
            for name in ("cpu_limit", "cpu_guarantee", "mem_limit", "mem_guarantee")
            if getattr(self, name, None) is not None
        }
        if attributes:
            body["attributes"] = attributes
        if self.cmd:
            body["cmd"] = list(self.cmd)
        if self._service_state:
            # The service seeds it before the start: a server still
            # running under it is not started twice, and the claim a
            # previous start used is kept whatever pvc_name_template says
            # today (a refused state only makes the service log).
            body["state"] = self._service_state
        return body

    def _start_event(self):
        if self._start_accepted is None:
            self._start_accepted = asyncio.Event()
        return self._start_accepted

    def _check_cancelled(self):
        if self._cancelled_start is not None and self._cancelled_start is asyncio.current_task():
            raise asyncio.CancelledError(f"the start of {self._log_name} was stopped")

    def _start_in_flight(self):
        """Whether a start() of this spawner is running, or its request
        may still reach the service."""
        return any(t is not None and not t.done() for t in (self._start_task, self._start_request))

    async def start(self):
        """Starts the server; returns its URL (http://<pod IP>:<port>) once
        its pod is ready.

        A failure the service reports (a refusal, a failed pod) is raised
        as a SpawnkitError, on JupyterHub 6.0 and later as a
        SpawnException as well (errors.for_jupyterhub); a service that
        cannot be reached until start_timeout as ServiceUnavailable; a
        service whose certificate cannot be verified at once, as
        ServiceTLSError (a ServiceUnavailable) naming the setting to fix.

        The start is one trace (_trace.py): every request it sends, the
        retries and its progress stream included, carries the same
        traceparent, and the log line that opens it names its trace_id.
        """
        self._start_task = asyncio.current_task()
        self._started = True
        with _trace.operation(self, "start") as trace:
            self._start_trace = trace
            self.trace_id = trace.trace_id
            self.log.info("spawnkit: starting %s (trace_id=%s)", self._log_name, trace.trace_id)
            try:
                # Once per start: its callables are called once, and a start
                # sent again (_start_again) is the same start.
                self._pending_start_body = await self._start_body()
                status = await self._request_start()
                self._state_sent = True  # it went with the start
                self._start_event().set()
                self._remember(status)
                url = await self._wait_ready()
                self._server_url = url
                await self._refresh_state()
                return url
            except SpawnkitError as e:
                failure = for_jupyterhub(e)
                if failure is e:
                    raise
                raise failure from e
            finally:
                # A refused start releases progress too (it then ends at once).
                self._start_event().set()
                self._start_task = None

    async def _request_start(self):
        """POSTs the start until the service takes it.

        A start is idempotent, so a request that could not connect or
        timed out (the service restarting, a hub too busy to connect in
        time) is sent again, with backoff, until start_timeout, as is one
        a replica that does not serve answered; a 409 (the previous stop
        of this server still in flight) until service_busy_timeout. Each
        request runs as a task of its own that a cancelled start does not
        cancel: stop() waits for its answer.
        """
        body = self._pending_start_body
        path = self._server_path()
        now = time.monotonic()
        busy_deadline = now + self.service_busy_timeout
        deadline = now + self.start_timeout
        first_contact_deadline = now + self.service_first_contact_timeout
        delay = self.service_retry_interval
        while True:
            self._check_cancelled()
            # Until the service has answered once, no attempt outlasts the
            # first-contact bound (an address that drops packets would
            # otherwise hold one for service_connect_timeout).
            connect_timeout = None
            if not reached(self.service_url):
                connect_timeout = max(first_contact_deadline - time.monotonic(), 0.5)
            request = asyncio.ensure_future(self._api.request_once("POST", path, body, None, False, connect_timeout))
            request.add_done_callback(_retrieve)
            self._start_request = request
            try:
                return await asyncio.shield(request)
            except ServiceUnavailable as e:
                if e.permanent or (e.status is not None and e.reason not in NOT_SERVING):
                    # A 5xx is the service's own failure, a certificate
                    # that cannot be verified the hub's: not retried.
                    raise
                if not reached(self.service_url) and e.reason not in NOT_SERVING:
                    # Never answered in this process: a wrong URL or port
                    # more likely than a restart.
                    if time.monotonic() + delay > first_contact_deadline:
                        raise ServiceUnavailable(
                            f"{e}; this hub has not reached the spawnkit service at {self.service_url} since it "
                            f"started (tried for {self.service_first_contact_timeout:g}s, "
                            f"service_first_contact_timeout): check c.SpawnkitSpawner.service_url, whose port is "
                            f"the service's -listen port (8765 in deploy/), and that the service runs",
                            reason=e.reason,
                        ) from e
                # Up to start_timeout, when JupyterHub gives up itself.
                wait = min(delay, deadline - time.monotonic())
                if wait <= 0:
                    raise
                if e.reason in NOT_SERVING:
                    self.log.info("spawnkit service replica answered %s for the start of %s; asking again", e.reason, self._log_name)
                else:
                    self.log.warning("spawnkit: starting %s: %s; trying again in %.1fs", self._log_name, e, wait)
            except SpawnkitError as e:
                if e.status != 409 or time.monotonic() > busy_deadline:
                    raise
                self.log.info("spawnkit: %s is still stopping; waiting to start it", self._log_name)
                wait = delay
            await asyncio.sleep(wait)
            delay = self._api.next_delay(delay)

    async def _wait_ready(self):
        """Follows the progress stream until the final event; falls back on
        the server's status when the stream drops, resuming after the last
        event seen. Returns the server's URL or raises SpawnkitError."""
        last_id = None
        deadline = time.monotonic() + self.start_timeout + 60
        while True:
            self._check_cancelled()
            try:
                async with closing(self._api.events(self._server_path(), last_id)) as events:
                    async for event_id, kind, data in events:
                        last_id = event_id or last_id
                        if kind == "ready" or data.get("ready"):
                            return data.get("url") or await self._status_url()
                        if kind == "failed" or data.get("failed"):
                            await self._fail(data.get("reason", ""), data.get("message", ""))
            except ServiceUnavailable as e:
                if e.permanent:
                    raise
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
                if e.permanent:
                    raise
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
                raise ServiceUnavailable(
                    f"{self._log_name}: no answer from the spawnkit service in time",
                    reason="Timeout",
                )
            await asyncio.sleep(self.service_retry_interval)

    async def _refresh_state(self):
        """Reads the state as the start left it, for the get_state that
        JupyterHub saves once start() returns: the start's answer was
        given before the server's claim existed, so it lacks pvc_name,
        which a later start needs whatever pvc_name_template says by
        then. Best effort: a poll brings it too."""
        try:
            self._remember(await self._request("GET", self._server_path(), not_found_ok=True))
        except SpawnkitError as e:
            self.log.warning("spawnkit: %s is ready, but its state could not be read: %s", self._log_name, e)

    async def _start_again(self):
        """The service no longer knows the server this start is waiting
        for: the replica that accepted the start went away before its pod
        existed (a crash, or a failover that found no pod). A start is
        idempotent, so it is asked for again; the new start's progress is
        followed from its beginning."""
        self._check_cancelled()
        self.log.warning(
            "spawnkit: the service lost the start of %s (a restart or failover before its pod existed); starting it again",
            self._log_name,
        )
        self._remember(await self._request_start())

    async def _status_url(self):
        status = await self._request("GET", self._server_path())
        self._remember(status)
        if not status.get("url"):
            # The service's own fault, not the start's.
            raise ServiceUnavailable(f"{self._log_name} is ready but the service gave no URL", reason="InternalError")
        return status["url"]

    async def _fail(self, reason, message):
        # Leave nothing behind: JupyterHub does not call stop for a server
        # whose poll already reports an exit status.
        try:
            await self._request(
                "DELETE", self._server_path(), not_found_ok=True, unreachable_for=self.service_request_timeout
            )
        except SpawnkitError as e:
            self.log.warning("spawnkit: cleaning up after the failed start of %s: %s", self._log_name, e)
        text = ": ".join(p for p in (reason, message) if p) or "start failed"
        raise SpawnkitError(text, reason=reason)

    # --- poll, stop, URL ---------------------------------------------------

    def _pod_state(self):
        """The state JupyterHub kept for a server with a pod, or None.

        Only a state naming a pod can stand for a running server: a
        stopped server keeps its claim's name alone (clear_state)."""
        state = self._service_state
        if isinstance(state, dict) and state.get("pod_name"):
            return state
        return None

    async def _send_state(self, **kwargs):
        """PUT {S}/state: gives the service the state JupyterHub kept, so
        that a service that restarted, possibly under a changed
        configuration, finds the server where the state says. Returns the
        server's status as a GET would, None when the service still does
        not know the server (404). A refusal (409 StateRefused) is raised
        as the service's SpawnkitError."""
        status = await self._request(
            "PUT", self._server_path() + "/state", body=self._service_state, not_found_ok=True, **kwargs
        )
        self._state_sent = True
        self._remember(status)
        return status

    def _log_refusal(self, err):
        if self._refusal_logged:
            self.log.debug("spawnkit: the service still refuses the state of %s: %s", self._log_name, err)
            return
        self._refusal_logged = True
        self.log.error(
            "spawnkit: the spawnkit service refused the state JupyterHub kept for %s, so it cannot find "
            "the server where that state says (its pod may still run there); JupyterHub keeps the server "
            "until the service takes the state: %s",
            self._log_name,
            err,
        )

    @staticmethod
    def _exit_status(status):
        """poll's answer for a status: its exit_code; 1 for a server the
        service reports stopped or failed without one (no pod, as a
        server seeded from a state whose pod is gone); None otherwise."""
        code = status.get("exit_code")
        if code is not None:
            return int(code)
        if status.get("phase") in ("stopped", "failed"):
            return 1
        return None

    async def poll(self):
        """None while the server starts or runs, its exit status once it
        stopped (1 when the service no longer knows it), 0 for a server
        this spawner never started nor loaded state for and the service
        does not know (JupyterHub's contract: "not initialized").

        A start in flight counts as running without asking the service
        (its request may not have arrived yet). When the service cannot be
        reached the server counts as running: only the service's answer
        ends a server.

        While the service may not know the server (after load_state, or
        after it was away), the state JupyterHub kept is sent instead of
        asking (PUT {S}/state answers the status); so is it when the
        service answers 404: the server is gone only when it says 404 to
        the state too. A refused state (409 StateRefused) is logged as an
        error, and the server counts as running.
        """
        if self._start_in_flight():
            return None
        held = self._pod_state()
        known = self._started or held is not None or bool(self._server_url)
        try:
            if held is not None and not self._state_sent:
                status = await self._send_state()
            else:
                status = await self._request("GET", self._server_path(), not_found_ok=True)
                if status is None and held is not None:
                    self.log.info(
                        "spawnkit: the service does not know %s (it restarted?); sending it the state JupyterHub kept",
                        self._log_name,
                    )
                    status = await self._send_state()
        except SpawnkitError as e:
            if is_state_refused(e):
                # Sent again by the next poll (one request: the service
                # knows the server no better than now until it takes it).
                self._state_sent = False
                self._log_refusal(e)
                return None
            if isinstance(e, ServiceUnavailable):
                # It may restart, or a cluster come back, without the
                # server: the next poll sends the state first.
                self._state_sent = False
            if not known:
                self.log.warning(
                    "spawnkit: cannot poll %s, which was never started here: %s; reporting it not running",
                    self._log_name,
                    e,
                )
                return 0
            # Only the service's answer ends a server: while it is away (a
            # restart, a network blip, a bad token) the server counts as running.
            self.log.warning("spawnkit: cannot poll %s, assuming it is still running: %s", self._log_name, e)
            return None
        if status is None:
            if not known:
                self.log.debug("spawnkit: poll of %s before any start: the service does not know it (0)", self._log_name)
                return 0
            return 1
        self._remember(status)
        return self._exit_status(status)

    async def stop(self, now=False):
        """Stops the server; returns once its pod is gone.

        A start in flight is cancelled first (JupyterHub 3 stops after its
        start_timeout while start() still runs; 5.1 and later cancel a
        pending start, then stop), and its request, if on the wire, is
        waited for, so that the start cannot reach the service after the
        DELETE. The DELETE is sent again while the service cannot be
        reached, for up to service_request_timeout.

        While the service may not know the server, the state JupyterHub
        kept is sent first (PUT {S}/state), and again when the DELETE
        answers 404 (then the DELETE is sent once more), so that a stop
        after a service restart deletes the pod where the state says. A
        refused state raises SpawnkitError with the service's message.

        The stop is one trace, as a start is (_trace.py).
        """
        with _trace.operation(self, "stop") as trace:
            self.trace_id = trace.trace_id
            self.log.info("spawnkit: stopping %s (trace_id=%s)", self._log_name, trace.trace_id)
            await self._stop(now)

    async def _stop(self, now):
        task = self._start_task
        if task is not None and task is not asyncio.current_task() and not task.done():
            self._cancelled_start = task
            task.cancel()
        request = self._start_request
        if request is not None and not request.done():
            self.log.info("spawnkit: %s is stopped while its start request is on its way; waiting for its answer", self._log_name)
            await asyncio.wait([request], timeout=self.service_request_timeout)
        held = self._pod_state()
        sent = False
        if held is not None and not self._state_sent:
            await self._send_state_to_stop()
            sent = True
        status = await self._delete(now)
        if status is None and held is not None and not sent:
            self.log.info(
                "spawnkit: the service does not know %s (it restarted?); sending it the state JupyterHub kept, then stopping again",
                self._log_name,
            )
            await self._send_state_to_stop()
            status = await self._delete(now)
        if status:
            self._remember(status)

    async def _send_state_to_stop(self):
        try:
            await self._send_state(unreachable_for=self.service_request_timeout, what=f"stopping {self._log_name}")
        except SpawnkitError as e:
            if not is_state_refused(e):
                raise
            self.log.error("spawnkit: cannot stop %s: %s", self._log_name, e)
            raise SpawnkitError(
                f"Cannot stop {self._log_name}: the spawnkit service refused the state JupyterHub kept for it: {e}",
                reason=e.reason,
                status=e.status,
            ) from e

    def _delete(self, now):
        return self._request(
            "DELETE",
            self._server_path(),
            query={"now": "true"} if now else None,
            not_found_ok=True,
            unreachable_for=self.service_request_timeout,
            what=f"stopping {self._log_name}",
        )

    async def delete_forever(self):
        """JupyterHub deletes the user, or this named server, for good.

        The service deletes the server's claim when delete_pvc is on (for
        a named server only when the claim's name template names the
        server), as KubeSpawner's delete_forever does; it refuses (409)
        while the server runs, which JupyterHub never asks for.
        """
        await self._request(
            "DELETE",
            self._server_path(),
            query={"forever": "true"},
            not_found_ok=True,
            unreachable_for=self.service_request_timeout,
            what=f"deleting {self._log_name} for good",
        )
        self._service_state = None
        self._server_url = ""

    async def rename(self, old_name, new_name):
        """JupyterHub 6.0 renames a stopped named server (its PATCH of
        /users/{user}/servers/{old_name} with a name); an exception here
        refuses the rename. Earlier JupyterHubs never call it.

        Refused unless allow_rename (the service's objects named after the
        old server are not carried over), and refused while the service
        still knows the server under its old name (starting, running or
        stopping).
        """
        if not self.allow_rename:
            raise self._refusal(
                f"Renaming {self.user.name}'s server {old_name!r} is turned off: the spawner's "
                "objects named after the server (such as its volume claim) would not follow the new "
                "name. An admin can allow it with c.SpawnkitSpawner.allow_rename = True.",
                reason="RenameNotAllowed",
                status=409,
            )
        status = await self._request("GET", self._server_path(old_name), not_found_ok=True)
        phase = (status or {}).get("phase", "stopped")
        if phase not in ("stopped", "failed"):
            raise self._refusal(
                f"{self.user.name}'s server {old_name!r} is {phase} in the spawnkit service; stop it before renaming it",
                reason="ServerActive",
                status=409,
            )
        self.log.info("spawnkit: %s's server %r renamed to %r", self.user.name, old_name, new_name)
        self._service_state = None
        self._server_url = ""

    def _refusal(self, message, reason, status):
        """A refusal to raise to JupyterHub: a SpawnException where
        JupyterHub has one (its handlers show the message), else a
        SpawnkitError."""
        return for_jupyterhub(SpawnkitError(message, reason=reason, status=status))

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
        # Read in JupyterHub's task, not the start's: the start's trace is
        # given along. None (a spawner that did not start the server in
        # this process): the stream goes without trace context, and its
        # events still carry the service's trace_id of the start.
        trace = self._start_trace
        last_id = None
        while True:
            try:
                async with closing(self._api.events(self._server_path(), last_id, trace)) as events:
                    async for event_id, kind, data in events:
                        last_id = event_id or last_id
                        event = {"message": data.get("message", "")}
                        if isinstance(data.get("progress"), int):
                            event["progress"] = data["progress"]
                        # The service's key for the start's trace (only
                        # the keys JupyterHub's page reads are otherwise
                        # passed: a "ready" or "failed" of the service's
                        # would end the page before JupyterHub's own).
                        if isinstance(data.get("trace_id"), str) and data["trace_id"]:
                            event["trace_id"] = data["trace_id"]
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
                if e.permanent:
                    # The start fails with the same error; JupyterHub
                    # reports it.
                    self.log.warning("spawnkit: no progress of %s: %s", self._log_name, e)
                    return
                self.log.warning("spawnkit: progress of %s interrupted: %s", self._log_name, e)
            except SpawnkitError as e:
                if e.status != 404:
                    raise
                # Not known yet (the start request is still on its way).
            await asyncio.sleep(self.service_retry_interval)

    # --- options form -------------------------------------------------------

    async def _form_config(self):
        """The hub's configuration for the options form when it has a
        profile_list (a callable one called for this spawner), else None:
        the service's own profile_list applies."""
        config = await self._hub_config(for_form=True)
        return config if config.get("profile_list") else None

    async def _service_options_form(self, spawner=None):
        """The profile picker the service renders from the profile_list
        (KubeSpawner's form): the hub's (POST with its configuration),
        else the service's YAML's (GET); empty when there is none, which
        makes JupyterHub start servers without showing a form."""
        path = f"/v1/users/{quote(self.user.name, safe='')}/options-form"
        try:
            config = await self._form_config()
            if config:
                form = await self._request("POST", path, body={"config": config})
            else:
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
        config = await self._form_config()
        body = {"form_data": fields, "config": config} if config else fields
        return await self._request("POST", path, body=body) or {}

    # --- state ----------------------------------------------------------------

    def get_state(self):
        state = super().get_state()
        if self._service_state is not None:
            state["spawnkit_state"] = self._service_state
        if self._server_url:
            state["spawnkit_url"] = self._server_url
        return state

    def load_state(self, state):
        """Restores what get_state saved; a state KubeSpawner saved (a hub
        switched from KubeSpawner, its server started there) becomes the
        service's state of the same names (kubespawner_state), so that the
        first poll or stop sends it and a service run with
        -adopt-kubespawner finds KubeSpawner's pod where it says."""
        super().load_state(state)
        if "spawnkit_state" in state:
            self._service_state = state["spawnkit_state"]
        else:
            translated = kubespawner_state(state)
            if translated:
                self._service_state = translated
        if "spawnkit_url" in state:
            self._server_url = state["spawnkit_url"]
        # The service may have restarted meanwhile, under a changed
        # configuration: the next poll or stop sends the state first.
        self._state_sent = False

    def clear_state(self):
        """Forgets the stopped server, but for its claim's name: as
        KubeSpawner keeps pvc_name, get_state saves it and the next start
        sends it, so that the server gets its claim back whatever the
        service's pvc_name_template says by then."""
        super().clear_state()
        state = self._service_state
        pvc = state.get("pvc_name") if isinstance(state, dict) else None
        self._service_state = {"pvc_name": pvc} if pvc else None
        self._state_sent = False
        self._refusal_logged = False
        self._server_url = ""
        self._started = False
        if self._start_accepted is not None:
            self._start_accepted.clear()
