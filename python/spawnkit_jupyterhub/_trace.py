"""W3C trace context from the hub to the service: one start or stop is
one trace.

operation(spawner, "start") opens a start's or a stop's trace and makes
it the current one (a ContextVar, so the task that runs the operation
and the tasks it makes see it, and a stop in another task has its own);
every request ServiceAPI sends meanwhile carries its headers (headers()).
The progress stream of a start, which JupyterHub reads in another task,
is given the start's trace by the spawner.

Where the hub has OpenTelemetry's API (opentelemetry.trace and
opentelemetry.propagate importable), the operation runs in a span of its
own, "SpawnkitSpawner.start" or "SpawnkitSpawner.stop", made by the
hub's tracer as a child of the hub's current span; when that span is
valid (an SDK is configured, or the hub's current span is), its context
is injected with the hub's propagator, so the service's spans are its
children. Without an SDK the API's tracer is a no-op that costs next to
nothing. Otherwise (no API, no valid span, or an API that raises, logged
at debug) the operation gets a fresh trace id and parent id, sampled
(flags 01), so that a service whose sampler follows its parent records
it.

The headers are made once per operation: every retry of the same start
or stop, and every request it sends, carries the same traceparent. The
parent is the hub's one span for the operation (ours, or the made-up
parent id that stands for it), and each attempt the service receives is
a child of it; a parent id per attempt would name spans that nobody
reports.
"""

import contextvars
import os
import re

from ._version import __version__

__all__ = ["TRACEPARENT", "Trace", "current", "headers", "operation"]

TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")

_current = contextvars.ContextVar("spawnkit_trace", default=None)


class Trace:
    """One operation's trace: its trace id (32 lowercase hex digits) and
    the headers that carry it (traceparent, and whatever else the hub's
    propagator sets: tracestate, baggage)."""

    __slots__ = ("trace_id", "headers")

    def __init__(self, trace_id, headers):
        self.trace_id = trace_id
        self.headers = headers

    def __repr__(self):
        return f"Trace({self.headers.get('traceparent')!r})"


def _random_hex(n):
    """n random bytes as hex, not all zero (an invalid id in W3C trace
    context)."""
    while True:
        b = os.urandom(n)
        if any(b):
            return b.hex()


def fresh():
    """A new trace of its own: random trace and parent ids, sampled."""
    trace_id = _random_hex(16)
    return Trace(trace_id, {"traceparent": f"00-{trace_id}-{_random_hex(8)}-01"})


def current():
    """The current operation's Trace, or None outside one."""
    return _current.get()


def headers():
    """The current operation's trace headers; {} outside one."""
    trace = _current.get()
    return dict(trace.headers) if trace is not None else {}


def _otel():
    """(opentelemetry.trace, opentelemetry.propagate), or None without
    OpenTelemetry's API. Imported at each operation (a failed import is a
    look-up in the path's cached listings), so an API installed or set up
    after this module still counts."""
    try:
        from opentelemetry import propagate, trace
    except ImportError:
        return None
    return trace, propagate


def _clean(carrier):
    """The propagator's headers that can go on the wire as they are:
    strings without line breaks (the progress stream writes its headers
    itself)."""
    out = {}
    for key, value in carrier.items():
        if isinstance(key, str) and isinstance(value, str) and not any(c in key + value for c in "\r\n"):
            out[key.lower()] = value
    return out


class operation:
    """A context manager: the trace of one start or stop of spawner
    (what: "start" or "stop"), current until it exits; entering returns
    the Trace. It never raises for tracing's sake: any error of the
    OpenTelemetry API is logged at debug and the operation gets a fresh
    trace."""

    def __init__(self, spawner, what):
        self.spawner = spawner
        self.what = what
        self._span = None  # OpenTelemetry's context manager of our span, once entered
        self._token = None

    def __enter__(self):
        trace = None
        otel = None
        try:
            otel = _otel()
        except Exception as e:  # a broken installation
            self._debug("cannot import OpenTelemetry's API; sending a trace id of its own", e)
        if otel is not None:
            try:
                trace = self._enter_span(*otel)
            except Exception as e:
                self._debug("OpenTelemetry's API failed; sending a trace id of its own", e)
                self._exit_span(None, None, None)
                trace = None
        if trace is None:
            trace = fresh()
        self._token = _current.set(trace)
        return trace

    def __exit__(self, exc_type, exc, tb):
        _current.reset(self._token)
        self._exit_span(exc_type, exc, tb)
        return False

    def _enter_span(self, trace_api, propagate):
        tracer = trace_api.get_tracer("spawnkit_jupyterhub", __version__)
        span_cm = tracer.start_as_current_span(
            f"SpawnkitSpawner.{self.what}",
            attributes={"jupyterhub.user": self.spawner.user.name, "jupyterhub.server_name": self.spawner.name or ""},
        )
        span = span_cm.__enter__()
        self._span = span_cm
        ctx = span.get_span_context()
        if not ctx.is_valid:
            # No SDK and no span of the hub's: the no-op tracer's span.
            return None
        carrier = {}
        propagate.inject(carrier)
        out = _clean(carrier)
        trace_id = format(ctx.trace_id, "032x")
        m = TRACEPARENT.fullmatch(out.get("traceparent", ""))
        if m is None or m.group(1) != trace_id:
            # A propagator without W3C trace context (OTEL_PROPAGATORS=b3):
            # the service reads traceparent, so it gets one too.
            out["traceparent"] = f"00-{trace_id}-{format(ctx.span_id, '016x')}-{int(ctx.trace_flags) & 0xFF:02x}"
        return Trace(trace_id, out)

    def _exit_span(self, exc_type, exc, tb):
        span_cm, self._span = self._span, None
        if span_cm is None:
            return
        try:
            span_cm.__exit__(exc_type, exc, tb)
        except Exception as e:
            if e is not exc:
                self._debug("OpenTelemetry's API failed to end the span", e)

    def _debug(self, what, err):
        self.spawner.log.debug(
            "spawnkit: the %s of %s: %s: %r", self.what, self.spawner._log_name, what, err
        )
