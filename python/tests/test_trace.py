"""W3C trace context from the hub to the service (_trace.py): every
request of one start or stop carries the same traceparent, its retries
and the start's progress stream included; the hub's OpenTelemetry span
is its parent where the hub has one; the log names the trace id.

Debian has no package of OpenTelemetry's Python API, so the hub's API is
StubOTel below, put in sys.modules: get_current_span, get_tracer (whose
spans become current, as the SDK's; with sdk=False as the API's no-op
tracer, which hands on the current span's context) and propagate.inject
(W3C traceparent and tracestate). RealSDKTest runs the same checks on
the real API and SDK where they are importable.
"""

import asyncio
import contextlib
import contextvars
import logging
import os
import re
import sys
import types
from unittest import mock

from spawnkit_jupyterhub import _trace
from tests.fakeservice import ServiceTestCase, make_spawner

TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-(0[01])$")
# What an OpenTelemetry SDK may send: W3C Trace Context Level 2 adds the
# random-trace-id flag (02) to the sampled one.
OTEL_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-(0[0-3])$")


def no_otel():
    """The hub has no OpenTelemetry API (whatever this Python has)."""
    return mock.patch.object(_trace, "_otel", lambda: None)


class TraceHeadersMixin:
    def assert_fresh(self, requests):
        """Each request carries the same valid traceparent of a trace of
        its own, sampled; returns its trace id."""
        self.assertTrue(requests)
        values = {r.traceparent for r in requests}
        self.assertEqual(len(values), 1, values)
        (value,) = values
        m = TRACEPARENT.match(value or "")
        self.assertIsNotNone(m, value)
        self.assertNotEqual(m.group(1), "0" * 32)
        self.assertNotEqual(m.group(2), "0" * 16)
        self.assertEqual(m.group(3), "01")
        return m.group(1)


class FreshTraceTest(TraceHeadersMixin, ServiceTestCase):
    """A hub without OpenTelemetry: each operation is a trace of its own."""

    async def test_start_and_stop_send_a_traceparent(self):
        spawner = make_spawner(self.service.url)
        with no_otel():
            await spawner.start()
            start_id = self.assert_fresh(self.service.requests)
            self.assertEqual(spawner.trace_id, start_id)
            begin = len(self.service.requests)
            await spawner.stop()
        stop_id = self.assert_fresh(self.service.requests[begin:])
        self.assertEqual([r.method for r in self.service.requests[begin:]], ["DELETE"])
        self.assertNotEqual(stop_id, start_id)
        self.assertEqual(spawner.trace_id, stop_id)
        # No trace context leaks out of an operation.
        self.assertEqual(_trace.headers(), {})

    async def test_every_request_of_a_start_is_in_its_trace(self):
        # POST, the progress stream, the status read at the end.
        spawner = make_spawner(self.service.url)
        with no_otel():
            await spawner.start()
        self.assertEqual(
            [(r.method, r.path.rsplit("/", 1)[-1]) for r in self.service.requests],
            [("POST", "server"), ("GET", "progress"), ("GET", "server")],
        )
        self.assert_fresh(self.service.requests)

    async def test_retries_of_a_start_carry_its_trace(self):
        self.service.start_errors = [(503, "NotLeader", "this replica stands by")] * 2
        spawner = make_spawner(self.service.url)
        with no_otel():
            await asyncio.wait_for(spawner.start(), 10)
            posts = self.service.calls("POST")
            self.assertEqual(len(posts), 3)
            first = self.assert_fresh(self.service.requests)
            await spawner.stop()
            await asyncio.wait_for(spawner.start(), 10)
        # A second start is a trace of its own.
        second = self.service.calls("POST")[3:]
        self.assertEqual(len(second), 1)
        self.assertNotEqual(second[0].trace_id, first)

    async def test_a_start_lost_and_posted_again_stays_in_its_trace(self):
        self.service.lose_starts = 1
        spawner = make_spawner(self.service.url)
        with no_otel(), self.assertLogs(spawner.log, "WARNING"):
            await asyncio.wait_for(spawner.start(), 10)
        self.assertEqual(len(self.service.calls("POST")), 2)
        self.assert_fresh(self.service.requests)

    async def test_retries_of_a_stop_carry_its_trace(self):
        spawner = make_spawner(self.service.url)
        with no_otel():
            await spawner.start()
            begin = len(self.service.requests)
            self.service.stop_errors = [(503, "ClusterUnavailable", 'manager: cluster "b" is unavailable')] * 2
            with self.assertLogs(spawner.log, "WARNING"):
                await asyncio.wait_for(spawner.stop(), 10)
        stops = self.service.requests[begin:]
        self.assertEqual([r.method for r in stops], ["DELETE"] * 3)
        self.assertEqual(self.assert_fresh(stops), spawner.trace_id)

    async def test_a_stop_after_a_hub_restart_sends_the_state_in_its_trace(self):
        spawner = make_spawner(self.service.url)
        spawner.load_state({"spawnkit_state": {"pod_name": "jupyter-alice", "namespace": "default"}})
        with no_otel():
            await spawner.stop()
        self.assertEqual([r.method for r in self.service.requests], ["PUT", "DELETE"])
        self.assertEqual(self.assert_fresh(self.service.requests), spawner.trace_id)

    async def test_the_progress_stream_carries_the_starts_trace(self):
        spawner = make_spawner(self.service.url)
        with no_otel():
            start = asyncio.ensure_future(spawner.start())
            events = [e async for e in spawner.progress()]
            await asyncio.wait_for(start, 10)
        progress = [r for r in self.service.requests if r.path.endswith("/progress")]
        # The start's own and the one JupyterHub reads (another task).
        self.assertEqual(len(progress), 2)
        self.assertEqual(self.assert_fresh(self.service.requests), spawner.trace_id)
        # The events keep the service's trace_id of the start.
        self.assertEqual([e.get("trace_id") for e in events], [spawner.trace_id] * 2)
        self.assertEqual(events[-1]["progress"], 100)

    async def test_a_progress_stream_without_a_start_here_has_no_trace_context(self):
        # The start went through another spawner (a hub since restarted):
        # this one has no trace; its stream carries none, and the events
        # still carry the service's trace_id of the start.
        with no_otel():
            starter = make_spawner(self.service.url)
            await starter.start()
            spawner = make_spawner(self.service.url)
            spawner._start_event().set()
            begin = len(self.service.requests)
            events = [e async for e in spawner.progress()]
        (request,) = self.service.requests[begin:]
        self.assertIsNone(request.traceparent)
        self.assertEqual([e.get("trace_id") for e in events], [starter.trace_id] * 2)

    async def test_progress_events_without_a_trace_id_have_none(self):
        # A service from before trace_id.
        spawner = make_spawner(self.service.url)
        self.service.trace_in_events = False
        with no_otel():
            start = asyncio.ensure_future(spawner.start())
            events = [e async for e in spawner.progress()]
            await asyncio.wait_for(start, 10)
        self.assertEqual(len(events), 2)
        self.assertFalse([e for e in events if "trace_id" in e])

    async def test_the_log_names_the_trace_id(self):
        spawner = make_spawner(self.service.url, name="gpu")
        with no_otel(), self.assertLogs(spawner.log, "INFO") as logs:
            await spawner.start()
            start_id = spawner.trace_id
            await spawner.stop()
        lines = [r.getMessage() for r in logs.records if r.levelno == logging.INFO]
        self.assertIn(f"spawnkit: starting alice:gpu (trace_id={start_id})", lines)
        self.assertIn(f"spawnkit: stopping alice:gpu (trace_id={spawner.trace_id})", lines)
        self.assertRegex(
            "\n".join(lines), r"(?m)^spawnkit: starting alice:gpu \(trace_id=[0-9a-f]{32}\)$"
        )

    async def test_requests_outside_a_start_or_stop_carry_no_trace_context(self):
        spawner = make_spawner(self.service.url)
        with no_otel():
            await spawner.start()
            begin = len(self.service.requests)
            await spawner.poll()
            await spawner.get_url()
        self.assertEqual([r.method for r in self.service.requests[begin:]], ["GET", "GET"])
        self.assertEqual([r.traceparent for r in self.service.requests[begin:]], [None, None])


# --- a stand-in for OpenTelemetry's API -------------------------------------


class SpanContext:
    def __init__(self, trace_id, span_id, trace_flags=1):
        self.trace_id = trace_id
        self.span_id = span_id
        self.trace_flags = trace_flags

    @property
    def is_valid(self):
        return self.trace_id != 0 and self.span_id != 0


INVALID = SpanContext(0, 0, 0)


class Span:
    def __init__(self, name, context):
        self.name = name
        self.context = context
        self.attributes = {}
        self.ended = False

    def get_span_context(self):
        return self.context


class StubOTel:
    """opentelemetry.trace and opentelemetry.propagate as much as
    _trace.py and a hub use them. sdk: whether get_tracer's spans are
    real (a child of the current span, else a root), or the API's no-op
    tracer's (the current span's context handed on). traceparent: whether
    inject writes W3C headers (else a B3 header only)."""

    def __init__(self, sdk=True, traceparent=True):
        self.sdk = sdk
        self.traceparent = traceparent
        self.current = contextvars.ContextVar("stub_span", default=Span("invalid", INVALID))
        self.spans = []  # every span started by get_tracer's tracers
        self.tracers = []  # (name, version) per get_tracer
        self.get_tracer_error = None
        self.inject_error = None

    def get_current_span(self, context=None):
        return self.current.get()

    @contextlib.contextmanager
    def use(self, span):
        token = self.current.set(span)
        try:
            yield span
        finally:
            self.current.reset(token)
            span.ended = True

    def hub_span(self):
        """The hub's span for the request that starts or stops a server."""
        return self.use(Span("hub", SpanContext(int.from_bytes(os.urandom(16), "big") | 1, int.from_bytes(os.urandom(8), "big") | 1)))

    def get_tracer(self, name, version=None, *args, **kwargs):
        if self.get_tracer_error:
            raise self.get_tracer_error
        self.tracers.append((name, version))
        return types.SimpleNamespace(start_as_current_span=self.start_as_current_span)

    def start_as_current_span(self, name, context=None, kind=None, attributes=None, **kwargs):
        parent = self.current.get().get_span_context()
        if self.sdk:
            trace_id = parent.trace_id if parent.is_valid else int.from_bytes(os.urandom(16), "big") | 1
            span = Span(name, SpanContext(trace_id, int.from_bytes(os.urandom(8), "big") | 1))
        else:
            span = Span(name, parent)
        span.attributes = dict(attributes or {})
        self.spans.append(span)
        return self.use(span)

    def inject(self, carrier, context=None, setter=None):
        if self.inject_error:
            raise self.inject_error
        ctx = self.current.get().get_span_context()
        if not ctx.is_valid:
            return
        if self.traceparent:
            carrier["traceparent"] = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"
            carrier["tracestate"] = "hub=1"
        else:
            carrier["b3"] = f"{ctx.trace_id:032x}-{ctx.span_id:016x}-1"

    def installed(self):
        """Puts the stub in sys.modules as opentelemetry.trace and
        opentelemetry.propagate for the with block."""
        package = types.ModuleType("opentelemetry")
        package.__path__ = []
        trace = types.ModuleType("opentelemetry.trace")
        trace.get_current_span = self.get_current_span
        trace.get_tracer = self.get_tracer
        propagate = types.ModuleType("opentelemetry.propagate")
        propagate.inject = self.inject
        package.trace, package.propagate = trace, propagate
        return mock.patch.dict(
            sys.modules,
            {"opentelemetry": package, "opentelemetry.trace": trace, "opentelemetry.propagate": propagate},
        )


class OpenTelemetryTest(TraceHeadersMixin, ServiceTestCase):
    """A hub with OpenTelemetry's API (StubOTel)."""

    def assert_child_of(self, requests, span):
        """Each request carries span's context as its parent, with the
        hub propagator's tracestate."""
        ctx = span.get_span_context()
        want = f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{ctx.trace_flags:02x}"
        self.assertTrue(requests)
        self.assertEqual({r.traceparent for r in requests}, {want})
        self.assertEqual({r.headers.get("tracestate") for r in requests}, {"hub=1"})

    async def test_the_service_is_a_child_of_our_span_in_the_hubs_trace(self):
        otel = StubOTel()
        spawner = make_spawner(self.service.url)
        with otel.installed(), otel.hub_span() as hub, self.assertLogs(spawner.log, "INFO") as logs:
            await spawner.start()
            start_requests = list(self.service.requests)
            await spawner.stop()
            # The hub's span is current again after each operation.
            self.assertIs(otel.get_current_span(), hub)
        start, stop = otel.spans
        self.assertEqual((start.name, stop.name), ("SpawnkitSpawner.start", "SpawnkitSpawner.stop"))
        self.assertEqual(start.attributes, {"jupyterhub.user": "alice", "jupyterhub.server_name": ""})
        self.assertTrue(start.ended and stop.ended)
        self.assertEqual(otel.tracers[0][0], "spawnkit_jupyterhub")
        hub_trace = f"{hub.get_span_context().trace_id:032x}"
        for span in (start, stop):
            self.assertEqual(f"{span.get_span_context().trace_id:032x}", hub_trace)
        self.assert_child_of(start_requests, start)
        self.assert_child_of(self.service.requests[len(start_requests):], stop)
        self.assertEqual(spawner.trace_id, hub_trace)
        self.assertIn(f"spawnkit: starting alice (trace_id={hub_trace})", [r.getMessage() for r in logs.records])

    async def test_the_progress_stream_and_retries_carry_our_span(self):
        otel = StubOTel()
        self.service.start_errors = [(503, "NotLeader", "this replica stands by")]
        spawner = make_spawner(self.service.url)
        with otel.installed(), otel.hub_span():
            start = asyncio.ensure_future(spawner.start())
            events = [e async for e in spawner.progress()]
            await asyncio.wait_for(start, 10)
        (span,) = otel.spans
        self.assertEqual(len(self.service.calls("POST")), 2)
        self.assertEqual(len([r for r in self.service.requests if r.path.endswith("/progress")]), 2)
        self.assert_child_of(self.service.requests, span)
        self.assertEqual({e["trace_id"] for e in events}, {spawner.trace_id})

    async def test_an_sdk_without_a_hub_span_makes_ours_the_root(self):
        otel = StubOTel()
        spawner = make_spawner(self.service.url)
        with otel.installed():
            await spawner.start()
        (span,) = otel.spans
        self.assert_child_of(self.service.requests, span)

    async def test_the_api_alone_hands_on_the_hubs_span(self):
        # No SDK: the no-op tracer's span has the current span's context,
        # so the service's spans are the hub span's children.
        otel = StubOTel(sdk=False)
        spawner = make_spawner(self.service.url)
        with otel.installed(), otel.hub_span() as hub:
            await spawner.start()
        self.assert_child_of(self.service.requests, hub)

    async def test_the_api_alone_without_a_span_gives_a_fresh_trace(self):
        otel = StubOTel(sdk=False)
        spawner = make_spawner(self.service.url)
        with otel.installed():
            await spawner.start()
        self.assertEqual(self.assert_fresh(self.service.requests), spawner.trace_id)
        self.assertIsNone(self.service.requests[0].headers.get("tracestate"))

    async def test_a_propagator_without_w3c_still_sends_a_traceparent(self):
        otel = StubOTel(traceparent=False)
        spawner = make_spawner(self.service.url)
        with otel.installed(), otel.hub_span():
            await spawner.start()
        (span,) = otel.spans
        ctx = span.get_span_context()
        self.assertEqual(
            {r.traceparent for r in self.service.requests}, {f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-01"}
        )
        self.assertEqual({r.headers.get("b3") for r in self.service.requests}, {f"{ctx.trace_id:032x}-{ctx.span_id:016x}-1"})

    async def test_an_api_that_raises_gives_a_fresh_trace(self):
        for where in ("get_tracer", "inject"):
            with self.subTest(where):
                self.service.requests.clear()
                otel = StubOTel()
                setattr(otel, f"{where}_error", RuntimeError("broken exporter"))
                spawner = make_spawner(self.service.url)
                with otel.installed(), otel.hub_span() as hub, self.assertLogs(spawner.log, "DEBUG") as logs:
                    await spawner.start()
                    await spawner.stop()
                    # A span that was started is ended, and the hub's is current again.
                    self.assertIs(otel.get_current_span(), hub)
                trace_id = self.assert_fresh([r for r in self.service.requests if r.method == "DELETE"])
                self.assertEqual(trace_id, spawner.trace_id)
                self.assertNotEqual(trace_id, f"{hub.get_span_context().trace_id:032x}")
                self.assertIn("broken exporter", "\n".join(logs.output))
                self.assertTrue(all(s.ended for s in otel.spans))
                self.assertEqual(len(otel.spans), 2 if where == "inject" else 0)

    async def test_a_broken_installation_gives_a_fresh_trace(self):
        spawner = make_spawner(self.service.url)

        def broken():
            raise SyntaxError("a half-installed package")

        with mock.patch.object(_trace, "_otel", broken), self.assertLogs(spawner.log, "DEBUG") as logs:
            await spawner.start()
        self.assertEqual(self.assert_fresh(self.service.requests), spawner.trace_id)
        self.assertIn("a half-installed package", "\n".join(logs.output))


def _real_sdk():
    try:
        from opentelemetry import trace  # noqa: F401
        from opentelemetry.sdk.trace import TracerProvider  # noqa: F401
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: F401
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: F401
    except ImportError:
        return False
    return True


class RealSDKTest(ServiceTestCase):
    """OpenTelemetry's own API and SDK, where this Python has them."""

    async def asyncSetUp(self):
        if not _real_sdk():
            self.skipTest("OpenTelemetry's Python SDK is not installed")
        await super().asyncSetUp()

    async def test_the_service_is_a_child_of_our_span_in_the_hubs_trace(self):
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        spawner = make_spawner(self.service.url)
        # The global provider, set for this test only.
        with mock.patch.object(trace, "_TRACER_PROVIDER", provider):
            with provider.get_tracer("hub").start_as_current_span("hub") as hub:
                await spawner.start()
        spans = {s.name: s for s in exporter.get_finished_spans()}
        ours = spans["SpawnkitSpawner.start"]
        self.assertEqual(ours.parent.span_id, hub.get_span_context().span_id)
        hub_trace = f"{hub.get_span_context().trace_id:032x}"
        for request in self.service.requests:
            m = OTEL_TRACEPARENT.match(request.traceparent or "")
            self.assertIsNotNone(m, request.traceparent)
            self.assertEqual(m.group(1), hub_trace)
            self.assertEqual(m.group(2), f"{ours.context.span_id:016x}")
        self.assertEqual(spawner.trace_id, hub_trace)
