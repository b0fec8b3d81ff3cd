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

    async def test_gives_up_after_service_request_timeout(self):
        spawner = make_spawner(f"http://127.0.0.1:{free_port()}", service_request_timeout=1)
        spawner.load_state({"spawnkit_state": {"pod_name": "jupyter-alice"}})
        with self.assertRaises(ServiceUnavailable):
            await spawner.stop()


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
