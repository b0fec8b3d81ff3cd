"""Timeouts and retries: every request is safe to repeat, so one that
could not reach the service (refused during a restart, "Timeout while
connecting" on a busy hub) is sent again until its time is up."""

import asyncio
from unittest import mock

from tornado.httpclient import HTTPClientError

from spawnkit_jupyterhub import ServiceUnavailable, _api
from tests.fakeservice import ServiceTestCase, free_port, make_spawner


class StartRetryTest(ServiceTestCase):
    async def test_connection_refused_during_a_service_restart(self):
        port = free_port()
        spawner = make_spawner(f"http://127.0.0.1:{port}")
        task = asyncio.ensure_future(spawner.start())
        await asyncio.sleep(0.5)
        await self.service.close()
        self.service.listen(port)
        self.assertEqual(await asyncio.wait_for(task, 10), "http://127.0.0.2:8888")
        self.assertEqual(len(self.service.calls("POST")), 1)

    async def test_timeout_while_connecting(self):
        spawner = make_spawner(self.service.url)
        client = _api.http_client()
        real_fetch = client.fetch
        timeouts = []

        async def fetch(request, **kwargs):
            if request.method == "POST" and len(timeouts) < 2:
                timeouts.append(request.url)
                raise HTTPClientError(599, "Timeout while connecting")
            return await real_fetch(request, **kwargs)

        with mock.patch.object(client, "fetch", fetch), self.assertLogs(spawner.log, "WARNING") as logs:
            self.assertEqual(await spawner.start(), "http://127.0.0.2:8888")
        self.assertEqual(len(timeouts), 2)
        self.assertEqual(len(self.service.calls("POST")), 1)
        self.assertIn("Timeout while connecting", "\n".join(logs.output))

    async def test_gives_up_at_start_timeout(self):
        spawner = make_spawner(f"http://127.0.0.1:{free_port()}", start_timeout=1)
        loop = asyncio.get_running_loop()
        begin = loop.time()
        with self.assertRaises(ServiceUnavailable):
            await spawner.start()
        self.assertLess(loop.time() - begin, 3)

    async def test_a_start_lost_after_202_is_posted_again(self):
        # The replica that accepted the start died before its pod existed:
        # the new one answers 404 for the server, and the start, being
        # idempotent, is asked for again instead of silently lost.
        self.service.lose_starts = 1
        spawner = make_spawner(self.service.url)
        with self.assertLogs(spawner.log, "WARNING") as logs:
            self.assertEqual(await asyncio.wait_for(spawner.start(), 10), "http://127.0.0.2:8888")
        self.assertEqual(len(self.service.calls("POST")), 2)
        self.assertIn("lost the start", "\n".join(logs.output))

    async def test_not_leader_is_asked_again(self):
        self.service.start_errors = [(503, "NotLeader", "this replica stands by")] * 2
        spawner = make_spawner(self.service.url)
        self.assertEqual(await asyncio.wait_for(spawner.start(), 10), "http://127.0.0.2:8888")
        self.assertEqual(len(self.service.calls("POST")), 3)

    async def test_an_unavailable_cluster_fails_the_start_at_once(self):
        # Every replica would say the same: not worth asking again.
        self.service.start_error = (503, "ClusterUnavailable", 'manager: cluster "gpu-eu" is unavailable')
        spawner = make_spawner(self.service.url)
        with self.assertRaises(ServiceUnavailable) as caught:
            await asyncio.wait_for(spawner.start(), 10)
        self.assertEqual(caught.exception.reason, "ClusterUnavailable")
        self.assertIn('"gpu-eu"', str(caught.exception))
        self.assertEqual(len(self.service.calls("POST")), 1)

    async def test_a_conflict_waits_for_the_stop_in_flight(self):
        self.service.start_errors = [(409, "Conflict", "still stopping")] * 2
        spawner = make_spawner(self.service.url)
        self.assertEqual(await asyncio.wait_for(spawner.start(), 10), "http://127.0.0.2:8888")
        self.assertEqual(len(self.service.calls("POST")), 3)


class StopRetryTest(ServiceTestCase):
    async def test_connection_refused_during_a_service_restart(self):
        spawner = make_spawner(self.service.url)
        await spawner.start()
        port = self.service.port
        servers = self.service.servers
        await self.service.close()
        stop = asyncio.ensure_future(spawner.stop())
        await asyncio.sleep(0.4)
        self.service.listen(port)
        self.service.servers = servers
        await asyncio.wait_for(stop, 10)
        self.assertEqual(len(self.service.calls("DELETE")), 1)
        self.assertEqual(self.service.servers, {})

    async def test_an_unavailable_cluster_is_waited_for(self):
        # The server's cluster does not answer for a moment: the stop is
        # asked again, as for an unreachable service, and succeeds.
        spawner = make_spawner(self.service.url)
        await spawner.start()
        self.service.stop_errors = [(503, "ClusterUnavailable", 'manager: cluster "b" is unavailable')] * 2
        with self.assertLogs(spawner.log, "WARNING"):
            await asyncio.wait_for(spawner.stop(), 10)
        self.assertEqual(len(self.service.calls("DELETE")), 3)
        self.assertEqual(self.service.servers, {})

    async def test_an_unavailable_cluster_fails_the_stop_after_service_request_timeout(self):
        spawner = make_spawner(self.service.url, service_request_timeout=1)
        await spawner.start()
        self.service.stop_errors = [(503, "ClusterUnavailable", 'manager: cluster "b" is unavailable')] * 100
        with self.assertRaises(ServiceUnavailable) as caught:
            await asyncio.wait_for(spawner.stop(), 10)
        self.assertEqual(caught.exception.reason, "ClusterUnavailable")
        self.assertGreater(len(self.service.calls("DELETE")), 1)

    async def test_gives_up_after_service_request_timeout(self):
        spawner = make_spawner(f"http://127.0.0.1:{free_port()}", service_request_timeout=1)
        spawner.load_state({"spawnkit_state": {"pod_name": "jupyter-alice"}})
        with self.assertRaises(ServiceUnavailable):
            await spawner.stop()


class PollClusterUnavailableTest(ServiceTestCase):
    # A service restarted while one of its clusters is away answers 503
    # ClusterUnavailable for a server it does not know yet (it may be in
    # that cluster), not 404.
    async def test_a_server_this_hub_knows_stays_running(self):
        spawner = make_spawner(self.service.url)
        spawner.load_state({"spawnkit_state": {"pod_name": "jupyter-alice", "cluster": "b"}})
        # The pod runs in b, which the service has not seen since it started.
        self.service.forgotten["/v1/users/alice/server"] = {"phase": "running", "ready": True, "exit_code": None}
        self.service.get_errors = [(503, "ClusterUnavailable", 'manager: cluster "b" is unavailable')]
        with self.assertLogs(spawner.log, "WARNING"):
            self.assertIsNone(await asyncio.wait_for(spawner.poll(), 10))
        # The loaded state went first, and its answer was the poll's.
        self.assertEqual([r.method for r in self.service.requests], ["PUT"])
        # b is back; the service may still not know the server: the next
        # poll sends the state again, and its answer is the poll's.
        self.assertIsNone(await asyncio.wait_for(spawner.poll(), 10))
        self.assertEqual([r.method for r in self.service.requests], ["PUT", "PUT"])
        self.assertIsNone(await asyncio.wait_for(spawner.poll(), 10))
        self.assertEqual([r.method for r in self.service.requests], ["PUT", "PUT", "GET"])

    async def test_a_server_never_started_here_is_not_running(self):
        spawner = make_spawner(self.service.url)
        self.service.get_errors = [(503, "ClusterUnavailable", 'manager: cluster "b" is unavailable')]
        with self.assertLogs(spawner.log, "WARNING"):
            self.assertEqual(await asyncio.wait_for(spawner.poll(), 10), 0)


class TraitsTest(ServiceTestCase):
    def test_every_timeout_is_a_trait(self):
        spawner = make_spawner(self.service.url)
        for name in (
            "service_connect_timeout",
            "service_request_timeout",
            "service_retry_interval",
            "service_retry_max_interval",
            "service_stream_idle_timeout",
            "service_busy_timeout",
        ):
            with self.subTest(name):
                self.assertTrue(spawner.trait_metadata(name, "config"), f"{name} is not configurable")

    def test_default_service_url_is_not_jupyterhubs_port(self):
        from spawnkit_jupyterhub import SpawnkitSpawner

        self.assertEqual(SpawnkitSpawner.class_traits()["service_url"].default_value, "http://127.0.0.1:8765")
