"""A client for one server-sent event stream: the service's progress.

tornado's client cannot abort a streaming request that falls silent, so
this one speaks HTTP/1.1 over a plain asyncio connection and closes it
when nothing (not even the service's keepalive comment) arrives for
idle_timeout seconds.
"""

import asyncio
import json
import ssl
from urllib.parse import urlsplit

__all__ = ["SSEConnection", "closing", "wait_for"]


async def wait_for(aw, timeout):
    """asyncio.wait_for, through asyncio.timeout where Python has it
    (3.11): before 3.12 wait_for loses a cancellation that arrives as
    the awaited operation completes, and a stop must be able to cancel a
    start at any point."""
    if hasattr(asyncio, "timeout"):
        async with asyncio.timeout(timeout):
            return await aw
    return await asyncio.wait_for(aw, timeout)


class closing:
    """contextlib.aclosing, which Python 3.8 and 3.9 lack."""

    def __init__(self, agen):
        self.agen = agen

    async def __aenter__(self):
        return self.agen

    async def __aexit__(self, *exc):
        await self.agen.aclose()


class SSEConnection:
    """One GET of a server-sent event stream.

    Used as an async context manager: entering connects (within
    connect_timeout), sends the request and reads the status line and
    headers (each line within idle_timeout); status is then the HTTP
    status. Raises OSError, asyncio.TimeoutError, ssl.SSLError, EOFError
    or ValueError when the connection fails, falls silent or is not HTTP.

    For https, ssl_context (a callable returning an SSLContext; default:
    the system's CAs) verifies the server as the URL's host, and the
    connection goes to address when given (the server-name case: the
    URL names the certificate's name, address where the service is).
    """

    def __init__(self, url, headers, connect_timeout, idle_timeout, ssl_context=None, address=""):
        self.url = url
        self.headers = headers
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self.ssl_context = ssl_context or ssl.create_default_context
        self.address = address
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
        self._reader, self._writer = await wait_for(
            asyncio.open_connection(
                self.address or parts.hostname,
                port,
                ssl=self.ssl_context() if tls else None,
                server_hostname=parts.hostname if tls else None,
            ),
            timeout=self.connect_timeout,
        )
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        host = parts.netloc.rpartition("@")[2]
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
        data = await wait_for(self._reader.readline(), self.idle_timeout)
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
                data = await wait_for(self._reader.readexactly(size + 2), self.idle_timeout)
                yield data[:-2]
            elif self._remaining is not None:
                if self._remaining <= 0:
                    return
                data = await wait_for(
                    self._reader.read(min(self._remaining, 65536)), self.idle_timeout
                )
                if not data:
                    raise EOFError("connection closed")
                self._remaining -= len(data)
                yield data
            else:
                data = await wait_for(self._reader.read(65536), self.idle_timeout)
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
