"""Errors that say what to do: a wrong token names the setting on the
hub's side (the service's 401 names both); a service_url that reaches
something else fails the start at once, naming the URL and what answered;
one that nothing answers fails a first start in seconds
(service_first_contact_timeout), not after start_timeout."""

import asyncio
import socket
import types
import unittest

from tornado import web
from tornado.httpserver import HTTPServer

from spawnkit_jupyterhub import NotTheService, ServiceUnavailable, SpawnkitError, _api
from tests.fakeservice import ServiceTestCase, free_port, make_spawner


class _Other(web.RequestHandler):
    """Another HTTP server: Go's default 404, or a proxy's 502 page; a body
    with {auth} in it echoes the request's Authorization header."""

    def initialize(self, code, ctype, body):
        self.code, self.ctype, self.body = code, ctype, body

    def _answer(self, *args):
        self.set_status(self.code)
        self.set_header("Content-Type", self.ctype)
        self.set_header("Server", "other/1.0")
        self.finish(self.body.replace("{auth}", self.request.headers.get("Authorization", "")))

    get = post = put = delete = _answer

    def check_xsrf_cookie(self):
        pass


def serve_other(code, ctype, body):
    app = web.Application([(r"/.*", _Other, dict(code=code, ctype=ctype, body=body))])
    server = HTTPServer(app)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    sock.setblocking(False)
    server.add_sockets([sock])
    return server, f"http://127.0.0.1:{sock.getsockname()[1]}"


class NotTheServiceTest(ServiceTestCase):
    async def test_another_server_fails_the_start_at_once(self):
        server, url = serve_other(404, "text/plain; charset=utf-8", "404 page not found\n")
        self.addCleanup(server.stop)
        spawner = make_spawner(url, start_timeout=300)
        loop = asyncio.get_running_loop()
        begin = loop.time()
        with self.assertRaises(NotTheService) as caught:
            await asyncio.wait_for(spawner.start(), 10)
        self.assertLess(loop.time() - begin, 2)
        msg = str(caught.exception)
        for want in (url, "POST /v1/users/alice/server", "HTTP 404", "404 page not found", "Server: other/1.0",
                     "not the spawnkit service", "c.SpawnkitSpawner.service_url"):
            self.assertIn(want, msg)

    async def test_a_jupyterhub_like_json_404_is_not_the_service(self):
        # JSON, but no reason and no header: JupyterHub's own API at a
        # wrong port answers like this.
        server, url = serve_other(404, "application/json", '{"status": 404, "message": "Not Found"}')
        self.addCleanup(server.stop)
        with self.assertRaises(NotTheService):
            await asyncio.wait_for(make_spawner(url, start_timeout=300).start(), 10)

    async def test_a_gateway_error_is_asked_again(self):
        # A proxy in front of a restarting service: retried as unreachable,
        # until the first-contact bound for a URL never reached.
        server, url = serve_other(502, "text/html", "<html><body>502 Bad Gateway</body></html>")
        self.addCleanup(server.stop)
        spawner = make_spawner(url, start_timeout=300, service_first_contact_timeout=1)
        with self.assertLogs(spawner.log, "WARNING"), self.assertRaises(ServiceUnavailable) as caught:
            await asyncio.wait_for(spawner.start(), 10)
        self.assertNotIsInstance(caught.exception, NotTheService)
        self.assertIn("HTTP 502", str(caught.exception))
        self.assertIn("502 Bad Gateway", str(caught.exception))


    async def test_a_catch_all_200_is_not_the_service(self):
        server, url = serve_other(200, "text/html", "<html>welcome</html>")
        self.addCleanup(server.stop)
        with self.assertRaises(NotTheService) as caught:
            await asyncio.wait_for(make_spawner(url, start_timeout=300).start(), 10)
        self.assertIn("HTTP 200", str(caught.exception))

    async def test_an_echoed_token_is_redacted(self):
        server, url = serve_other(404, "text/plain", "no route; you sent Authorization: {auth}")
        self.addCleanup(server.stop)
        spawner = make_spawner(url, start_timeout=300, service_token="tok-very-secret")
        with self.assertRaises(NotTheService) as caught:
            await asyncio.wait_for(spawner.start(), 10)
        self.assertNotIn("tok-very-secret", str(caught.exception))
        self.assertIn("<redacted>", str(caught.exception))

    async def test_http_to_the_tls_port_says_https(self):
        # Go's answer to plain HTTP on a TLS listener.
        server, url = serve_other(400, "text/plain; charset=utf-8", "Client sent an HTTP request to an HTTPS server.\n")
        self.addCleanup(server.stop)
        with self.assertRaises(NotTheService) as caught:
            await asyncio.wait_for(make_spawner(url, start_timeout=300).start(), 10)
        self.assertIn("use an https:// service_url", str(caught.exception))
        self.assertIn("service_ca_file", str(caught.exception))


class IsServiceAnswerTest(unittest.TestCase):
    def answer(self, code, body, headers=None):
        return types.SimpleNamespace(code=code, body=body.encode(), headers=headers or {})

    def test_what_counts_as_the_service(self):
        cases = [
            (self.answer(404, "404 page not found", {"Spawnkit-Service": "0.2.0"}), True),
            # A service from before the header: its JSON.
            (self.answer(404, '{"error": "no such server", "reason": "NotFound"}'), True),
            (self.answer(200, '{"phase": "running"}'), True),
            (self.answer(204, ""), True),
            # Others.
            (self.answer(404, '{"kind": "Status", "reason": "NotFound", "message": "the server could not find"}'), False),
            (self.answer(404, '{"status": 404, "message": "Not Found"}'), False),
            (self.answer(404, "404 page not found"), False),
            (self.answer(200, "<html>welcome</html>"), False),
        ]
        for resp, want in cases:
            with self.subTest(body=resp.body):
                self.assertEqual(_api.is_service_answer(resp), want)


class FirstContactTest(ServiceTestCase):
    async def test_a_wrong_port_fails_in_seconds(self):
        url = f"http://127.0.0.1:{free_port()}"
        spawner = make_spawner(url, start_timeout=300, service_first_contact_timeout=1)
        loop = asyncio.get_running_loop()
        begin = loop.time()
        with self.assertLogs(spawner.log, "WARNING"), self.assertRaises(ServiceUnavailable) as caught:
            await asyncio.wait_for(spawner.start(), 10)
        elapsed = loop.time() - begin
        self.assertGreater(elapsed, 0.5)
        self.assertLess(elapsed, 3)
        msg = str(caught.exception)
        for want in (url, "has not reached the spawnkit service", "service_first_contact_timeout", "c.SpawnkitSpawner.service_url"):
            self.assertIn(want, msg)

    async def test_a_service_reached_before_is_waited_for(self):
        # Reached once: a restart longer than the first-contact bound is
        # ridden out (until start_timeout).
        spawner = make_spawner(self.service.url, service_first_contact_timeout=0.2)
        await spawner.start()
        await spawner.stop()
        port = self.service.port
        await self.service.close()
        second = make_spawner(self.service.url, user="bob", service_first_contact_timeout=0.2)
        task = asyncio.ensure_future(second.start())
        await asyncio.sleep(1)
        self.assertFalse(task.done(), "the start gave up on a service this hub has reached")
        self.service.listen(port)
        self.assertEqual(await asyncio.wait_for(task, 10), "http://127.0.0.2:8888")


class TokenTest(ServiceTestCase):
    async def test_a_wrong_token_names_the_url(self):
        spawner = make_spawner(self.service.url, service_token="not-it")
        with self.assertRaises(SpawnkitError) as caught:
            await asyncio.wait_for(spawner.start(), 10)
        self.assertEqual(caught.exception.status, 401)
        self.assertEqual(caught.exception.reason, "Unauthorized")
        self.assertIn(self.service.url, str(caught.exception))
        self.assertIn("refused the hub's token", str(caught.exception))
        self.assertNotIn("not-it", str(caught.exception))
        self.assertEqual(len(self.service.calls("POST")), 0)

    async def test_no_token_names_the_settings(self):
        spawner = make_spawner(self.service.url, service_token="")
        with self.assertRaises(SpawnkitError) as caught:
            await asyncio.wait_for(spawner.start(), 10)
        for want in ("c.SpawnkitSpawner.service_token is empty", "SPAWNKIT_SERVICE_TOKEN"):
            self.assertIn(want, str(caught.exception))
