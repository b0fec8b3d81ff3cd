"""TLS to the service on both of tornado's HTTP clients: a private CA
(service_ca_file), a certificate for another name (service_server_name),
a client certificate, and a failed verification reported at once as what
it is, naming the setting.

Each test runs on the simple client (SimpleTLSTest) and on the curl client
(CurlTLSTest), which JupyterHub uses whenever pycurl is installed. The
curl variant is skipped when pycurl cannot be imported, unless CI=true
(Debian: apt-get install python3-pycurl).
"""

import asyncio
import importlib.util
import os
import ssl
import tempfile
import unittest

from tornado.httpclient import AsyncHTTPClient
from traitlets import TraitError

from spawnkit_jupyterhub import ServiceTLSError, ServiceUnavailable
from tests.fakeservice import FakeService, make_spawner

try:
    from tests.pki import PKI
except ImportError as e:  # cryptography: JupyterHub's dependency (certipy)
    PKI = None
    PKI_MISSING = e

IN_CI = os.environ.get("CI") == "true"
SIMPLE = "tornado.simple_httpclient.SimpleAsyncHTTPClient"
CURL = "tornado.curl_httpclient.CurlAsyncHTTPClient"
SERVER_NAME = "spawnkit-service.test"


def require_pki(test):
    if PKI is None:
        if IN_CI:
            test.fail(f"the cryptography package, required because CI=true: {PKI_MISSING}")
        test.skipTest(f"the cryptography package: {PKI_MISSING}")


class TLSCase:
    """The tests, run once per client (client: the class's dotted name)."""

    client = None

    async def asyncSetUp(self):
        if self.client == CURL and importlib.util.find_spec("pycurl") is None:
            if IN_CI:
                self.fail("pycurl, required because CI=true (apt-get install python3-pycurl)")
            self.skipTest("pycurl is not installed (apt-get install python3-pycurl)")
        require_pki(self)
        saved = AsyncHTTPClient._save_configuration()
        self.addCleanup(AsyncHTTPClient._restore_configuration, saved)
        # As JupyterHub's init_pycurl does, before any spawner exists.
        AsyncHTTPClient.configure(self.client)
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.pki = PKI(self.dir)
        self.services = []

    async def asyncTearDown(self):
        for service in self.services:
            await service.close()

    def serve(self, *names, client_ca=None):
        service = FakeService(ssl_options=self.pki.server_context(*names, client_ca=client_ca))
        service.listen()
        self.services.append(service)
        return service

    def assert_client_logged(self, logs):
        name = self.client.rsplit(".", 1)[1]
        self.assertIn(f"go through tornado's {name}", "\n".join(logs.output))

    async def test_private_ca_on_every_request(self):
        service = self.serve("127.0.0.1")
        spawner = make_spawner(service.url, service_ca_file=self.pki.ca_file)
        with self.assertLogs(spawner.log, "INFO") as logs:
            form = await spawner._service_options_form()
            self.assertEqual(form, service.form_html)
            self.assertEqual(await spawner._service_options_from_form({"profile": ["small"]}), {"profile": "small"})
            self.assertEqual(await asyncio.wait_for(spawner.start(), 10), "http://127.0.0.2:8888")
            events = [e async for e in spawner.progress()]
            self.assertIn("waiting for it to respond", events[-1]["message"])
            self.assertIsNone(await spawner.poll())
            # A hub restart: the state is sent (PUT .../state).
            state = spawner.get_state()
            again = make_spawner(service.url, service_ca_file=self.pki.ca_file)
            again.load_state(state)
            self.assertIsNone(await again.poll())
            await again.stop()
            await again.delete_forever()
        self.assert_client_logged(logs)
        seen = {(r.method, r.path.rsplit("/", 1)[1]) for r in service.requests}
        for want in [
            ("GET", "options-form"),
            ("POST", "options-from-form"),
            ("POST", "server"),
            ("GET", "progress"),
            ("GET", "server"),
            ("PUT", "state"),
            ("DELETE", "server"),
        ]:
            self.assertIn(want, seen)
        self.assertEqual({r.host for r in service.requests}, {f"127.0.0.1:{service.port}"})

    async def test_without_the_ca_the_start_fails_at_once(self):
        service = self.serve("127.0.0.1")
        # A start that could not reach the service would be sent again
        # for 30 s.
        spawner = make_spawner(service.url, start_timeout=30)
        loop = asyncio.get_running_loop()
        begin = loop.time()
        with self.assertRaises(ServiceTLSError) as caught:
            await asyncio.wait_for(spawner.start(), 30)
        took = loop.time() - begin
        self.assertLess(took, 5, "a certificate that cannot be verified is not retried")
        message = str(caught.exception)
        for want in [
            f"spawnkit service at {service.url}: its TLS certificate could not be verified (POST /v1/users/alice/server)",
            "The hub verifies it against the system's CA store (c.SpawnkitSpawner.service_ca_file is not set; "
            "tornado's curl client, which JupyterHub uses when pycurl is installed, ignores SSL_CERT_FILE): "
            "set c.SpawnkitSpawner.service_ca_file to the PEM file of the CA that signed the service's certificate.",
            "Not retried: this does not fix itself.",
        ]:
            self.assertIn(want, message)
        self.assertEqual(caught.exception.reason, "TLSVerificationFailed")
        # JupyterHub counts it as an error (a ServiceUnavailable), not a
        # refusal of the user's spawn.
        self.assertIsInstance(caught.exception, ServiceUnavailable)
        # JupyterHub's progress stream ends (start() has failed).
        with self.assertLogs(spawner.log, "WARNING") as logs:
            self.assertEqual([e async for e in spawner.progress()], [])
        self.assertIn("no progress of alice: spawnkit service at", "\n".join(logs.output))
        self.assertEqual(service.requests, [])

    async def test_a_tls_file_gone_later_fails_at_once(self):
        # Checked when the spawner was made, then gone or replaced.
        service = self.serve("127.0.0.1")
        for broken in ("missing", "garbage"):
            ca = self.pki.write(f"ca-{broken}.pem", open(self.pki.ca_file, "rb").read())
            spawner = make_spawner(service.url, service_ca_file=ca, start_timeout=30)
            if broken == "missing":
                os.remove(ca)
            else:
                with open(ca, "w") as f:
                    f.write("not a certificate\n")
            loop = asyncio.get_running_loop()
            begin = loop.time()
            with self.assertRaises(ServiceTLSError) as caught:
                await asyncio.wait_for(spawner.start(), 30)
            self.assertLess(loop.time() - begin, 5)
            message = str(caught.exception)
            if broken == "garbage" and self.client == CURL and caught.exception.reason == "TLSVerificationFailed":
                # libcurl with GnuTLS loads no CA from it, then fails
                # the verification.
                self.assertIn(f"service_ca_file ({ca}): make that the PEM file of the CA", message)
                continue
            self.assertEqual(caught.exception.reason, "TLSFilesUnusable")
            self.assertIn(
                f"spawnkit service at {service.url}: the hub's TLS files could not be used (POST /v1/users/alice/server)",
                message,
            )
            self.assertIn(f"Check c.SpawnkitSpawner's service_ca_file = {ca!r} (readable PEM files).", message)
        self.assertEqual(service.requests, [])

    async def test_another_ca_names_the_file(self):
        service = self.serve("127.0.0.1")
        other = PKI(self.dir, name="another CA")
        spawner = make_spawner(service.url, service_ca_file=other.ca_file, service_request_timeout=30)
        with self.assertRaises(ServiceTLSError) as caught:
            await asyncio.wait_for(spawner.start(), 10)
        self.assertIn(
            f"The hub verifies it against c.SpawnkitSpawner.service_ca_file ({other.ca_file}): make that the PEM "
            "file of the CA that signed the service's certificate.",
            str(caught.exception),
        )
        # A stop is not sent again for service_request_timeout either, and a
        # poll keeps the server (only the service's answer ends one).
        spawner.load_state({"spawnkit_state": {"pod_name": "jupyter-alice", "namespace": "default"}})
        with self.assertLogs(spawner.log, "WARNING") as logs:
            self.assertIsNone(await spawner.poll())
        self.assertIn("could not be verified", "\n".join(logs.output))
        loop = asyncio.get_running_loop()
        begin = loop.time()
        with self.assertRaises(ServiceTLSError):
            await spawner.stop()
        self.assertLess(loop.time() - begin, 5)
        self.assertEqual(service.requests, [])

    async def test_server_name(self):
        # The certificate names the service's DNS name alone; the hub
        # reaches it by IP address.
        service = self.serve(SERVER_NAME)
        spawner = make_spawner(service.url, service_ca_file=self.pki.ca_file)
        with self.assertRaises(ServiceTLSError) as caught:
            await asyncio.wait_for(spawner.start(), 10)
        self.assertIn(
            "The certificate does not name service_url's host (127.0.0.1): set "
            "c.SpawnkitSpawner.service_server_name to a name it holds (connections still go to 127.0.0.1), "
            "or use that name in service_url.",
            str(caught.exception),
        )
        # A name the certificate does not hold either.
        spawner = make_spawner(service.url, service_ca_file=self.pki.ca_file, service_server_name="other.test")
        with self.assertRaises(ServiceTLSError) as caught:
            await asyncio.wait_for(spawner.start(), 10)
        self.assertIn(
            "The certificate does not name c.SpawnkitSpawner.service_server_name ('other.test'): "
            "set it to a name the certificate holds.",
            str(caught.exception),
        )
        spawner = make_spawner(service.url, service_ca_file=self.pki.ca_file, service_server_name=SERVER_NAME)
        with self.assertLogs(spawner.log, "INFO") as logs:
            self.assertEqual(await asyncio.wait_for(spawner.start(), 10), "http://127.0.0.2:8888")
            self.assertIsNone(await spawner.poll())
            await spawner.stop()
        self.assertIn(f"verifying {SERVER_NAME} at 127.0.0.1:{service.port}", "\n".join(logs.output))
        self.assertIn(("GET", "/v1/users/alice/server/progress"), {(r.method, r.path) for r in service.requests})
        # The name is the requests' host, as the certificate says.
        self.assertEqual({r.host for r in service.requests}, {f"{SERVER_NAME}:{service.port}"})

    async def test_client_certificate(self):
        # A mutual-TLS proxy in front of the service (the service itself
        # never asks for a client certificate).
        service = self.serve("127.0.0.1", client_ca=self.pki)
        for combined in (False, True):
            cert, key = self.pki.client(cn=f"hub-{combined}", combined=combined)
            traits = dict(service_ca_file=self.pki.ca_file, service_client_cert_file=cert)
            if key:
                traits["service_client_key_file"] = key
            spawner = make_spawner(service.url, **traits)
            self.assertEqual(await asyncio.wait_for(spawner.start(), 10), "http://127.0.0.2:8888")
            await spawner.stop()
            self.assertEqual({r.client_cn for r in service.requests[-3:]}, {f"hub-{combined}"})

    async def test_jupyterhub_internal_ssl_defaults_do_not_apply(self):
        # JupyterHub's internal_ssl configures every client's default
        # ssl_options (its own CA); the service's requests keep theirs.
        internal = ssl.create_default_context(cafile=PKI(self.dir, name="internal CA").ca_file)
        AsyncHTTPClient.configure(self.client, defaults={"ssl_options": internal})
        service = self.serve("127.0.0.1")
        spawner = make_spawner(service.url, service_ca_file=self.pki.ca_file)
        self.assertEqual(await asyncio.wait_for(spawner.start(), 10), "http://127.0.0.2:8888")


class SimpleTLSTest(TLSCase, unittest.IsolatedAsyncioTestCase):
    client = SIMPLE


class CurlTLSTest(TLSCase, unittest.IsolatedAsyncioTestCase):
    client = CURL


class SettingsTest(unittest.TestCase):
    """A file that does not exist or does not parse fails when JupyterHub
    makes the spawner, naming the setting."""

    def setUp(self):
        require_pki(self)
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.pki = PKI(self.dir)

    def refused(self, **traits):
        with self.assertRaises(TraitError) as caught:
            make_spawner("https://127.0.0.1:8765", **traits)
        return str(caught.exception)

    def file(self, name, data):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(data)
        return path

    def test_ca_file(self):
        missing = os.path.join(self.dir, "nope.pem")
        message = self.refused(service_ca_file=missing)
        self.assertIn(f"c.SpawnkitSpawner.service_ca_file {missing!r}: No such file or directory", message)
        garbage = self.file("garbage.pem", "not a certificate\n")
        message = self.refused(service_ca_file=garbage)
        self.assertIn(f"c.SpawnkitSpawner.service_ca_file {garbage!r}: no PEM certificate could be read", message)
        make_spawner("https://127.0.0.1:8765", service_ca_file=self.pki.ca_file)

    def test_client_certificate(self):
        cert, key = self.pki.client()
        other_cert, other_key = self.pki.client(cn="other")
        self.assertIn(
            "c.SpawnkitSpawner.service_client_key_file is set without service_client_cert_file",
            self.refused(service_client_key_file=key),
        )
        self.assertIn(
            f"c.SpawnkitSpawner.service_client_cert_file {cert!r} and service_client_key_file {other_key!r}: "
            "not a certificate and its matching private key",
            self.refused(service_client_cert_file=cert, service_client_key_file=other_key),
        )
        self.assertIn(
            f"service_client_cert_file {cert!r} (no service_client_key_file: its key must be in the same file)",
            self.refused(service_client_cert_file=cert),
        )
        self.assertIn(
            f"c.SpawnkitSpawner.service_client_cert_file {key!r}: no PEM certificate in it",
            self.refused(service_client_cert_file=key, service_client_key_file=key),
        )
        missing = os.path.join(self.dir, "nope.key")
        self.assertIn(
            f"c.SpawnkitSpawner.service_client_key_file {missing!r}: No such file or directory",
            self.refused(service_client_cert_file=cert, service_client_key_file=missing),
        )
        _, encrypted = self.pki.client(cn="locked", password=b"secret")
        self.assertIn("the key is encrypted", self.refused(service_client_cert_file=cert, service_client_key_file=encrypted))
        combined, _ = self.pki.client(cn="locked-combined", combined=True, password=b"secret")
        self.assertIn("its key is encrypted", self.refused(service_client_cert_file=combined))
        make_spawner("https://127.0.0.1:8765", service_client_cert_file=cert, service_client_key_file=key)
        combined, _ = self.pki.client(cn="combined", combined=True)
        make_spawner("https://127.0.0.1:8765", service_client_cert_file=combined)

    def test_server_name(self):
        for bad in ("https://spawnkit-service", "spawnkit-service:8765", "a b", "-x.example"):
            self.assertIn(f"c.SpawnkitSpawner.service_server_name {bad!r}: want the DNS name", self.refused(service_server_name=bad))
        for good in ("spawnkit-service.jupyterhub.svc", "10.0.0.12", "fd00::1"):
            make_spawner("https://127.0.0.1:8765", service_server_name=good)

    def test_http_url_takes_no_tls_settings(self):
        from spawnkit_jupyterhub import _tls

        spawner = make_spawner(
            "http://127.0.0.1:8765", service_ca_file=self.pki.ca_file, service_server_name=SERVER_NAME
        )
        self.assertEqual(_tls.settings_of(spawner), _tls.TLSSettings())
