"""JupyterHub 5 and 6's spawner contract (start, poll, stop, get_env,
user options, delete_forever) against a fake spawner-service.

Where a point depends on a JupyterHub newer than 3.0, the call sequence
of that version comes from hubstubs and the test's name says so.
"""

import asyncio
import json

from tests import hubstubs
from tests.fakeservice import ServiceTestCase, free_port, make_spawner


class StartTest(ServiceTestCase):
    async def test_start_returns_the_url(self):
        spawner = make_spawner(self.service.url)
        url = await spawner.start()
        # A URL string, which JupyterHub takes as it is (a tuple would get
        # http or https from internal_ssl).
        self.assertEqual(url, "http://127.0.0.2:8888")
        self.assertEqual(spawner.get_state()["spawnkit_url"], url)

    async def test_get_env_passed_through_unchanged(self):
        spawner = make_spawner(
            self.service.url,
            oauth_access_scopes=["access:servers!server=alice/", "read:users:name!user=alice"],
            environment={"EXTRA": "x", "CALLABLE": lambda s: f"for {s.user.name}"},
        )
        want = spawner.get_env()
        await spawner.start()
        (post,) = self.service.calls("POST")
        self.assertEqual(post.body["env"], want)
        self.assertEqual(
            json.loads(post.body["env"]["JUPYTERHUB_OAUTH_ACCESS_SCOPES"]),
            ["access:servers!server=alice/", "read:users:name!user=alice"],
        )
        self.assertEqual(post.body["env"]["CALLABLE"], "for alice")

    async def test_user_options_as_jupyterhub_5_3_apply_user_options_leaves_them(self):
        spawner = make_spawner(self.service.url)
        options = {
            "profile": "gpu",
            "default_url": "/lab/tree/probe.ipynb",
            "cpu_limit": "1.5",
            "mem_limit": 1 << 30,
            "args": ["--ServerApp.probe=1"],
            "notes": {"free": "form"},
        }
        spawner.user_options = options
        hubstubs.apply_user_options_dict(
            spawner,
            {"default_url": "default_url", "cpu_limit": "cpu_limit", "mem_limit": "mem_limit", "args": "args"},
            options,
        )
        with self.assertLogs(spawner.log, "WARNING") as logs:
            await spawner.start()
        (post,) = self.service.calls("POST")
        env = post.body["env"]
        self.assertEqual(env["JUPYTERHUB_DEFAULT_URL"], "/lab/tree/probe.ipynb")
        self.assertEqual(env["CPU_LIMIT"], "1.5")
        self.assertEqual(env["MEM_LIMIT"], str(1 << 30))
        self.assertEqual(post.body["args"], ["--ServerApp.probe=1"])
        # The resource attributes, for the container's resources (as
        # KubeSpawner makes them of the same attributes).
        self.assertEqual(post.body["attributes"], {"cpu_limit": 1.5, "mem_limit": 1 << 30})
        # Strings and one-string lists go to the service, which picks the
        # profile by them; values only hooks can read stay in the hub.
        self.assertEqual(
            post.body["user_options"],
            {
                "profile": "gpu",
                "default_url": "/lab/tree/probe.ipynb",
                "cpu_limit": "1.5",
                "args": ["--ServerApp.probe=1"],
            },
        )
        self.assertIn("mem_limit, notes", "\n".join(logs.output))

    async def test_a_profile_that_is_not_a_string_is_still_sent(self):
        spawner = make_spawner(self.service.url)
        spawner.user_options = {"profile": 3, "image--unlisted-choice": 4}
        await spawner.start()
        (post,) = self.service.calls("POST")
        self.assertEqual(post.body["user_options"], {"profile": 3, "image--unlisted-choice": 4})

    async def test_attributes_set_by_pre_spawn_hook_reach_the_service(self):
        def hook(spawner):
            spawner.environment = {"FROM_HOOK": "1"}
            spawner.cmd = ["start-notebook.py"]

        spawner = make_spawner(self.service.url, pre_spawn_hook=hook)
        spawner.run_pre_spawn_hook()
        await spawner.start()
        (post,) = self.service.calls("POST")
        self.assertEqual(post.body["env"]["FROM_HOOK"], "1")
        self.assertEqual(post.body["cmd"], ["start-notebook.py"])


class PollTest(ServiceTestCase):
    async def test_before_any_start_is_0(self):
        spawner = make_spawner(self.service.url)
        self.assertEqual(await spawner.poll(), 0)

    async def test_before_any_start_with_the_service_away_is_0(self):
        spawner = make_spawner(f"http://127.0.0.1:{free_port()}")
        self.assertEqual(await spawner.poll(), 0)

    async def test_before_any_start_of_a_server_the_service_runs_is_none(self):
        # A hub that stopped during a start has the server in its database
        # but no state: the pod is there, so the server runs.
        self.service.servers["/v1/users/alice/server"] = {"phase": "running", "ready": True, "exit_code": None}
        spawner = make_spawner(self.service.url)
        self.assertIsNone(await spawner.poll())

    async def test_loaded_state_of_a_server_the_service_lost_is_1(self):
        # Given the state, the service finds no pod where it says.
        spawner = make_spawner(self.service.url)
        spawner.load_state({"spawnkit_state": {"pod_name": "jupyter-alice"}, "spawnkit_url": "http://127.0.0.2:8888"})
        self.assertEqual(await spawner.poll(), 1)
        self.assertEqual([r.method for r in self.service.requests], ["PUT"])

    async def test_loaded_state_with_the_service_away_is_none(self):
        spawner = make_spawner(f"http://127.0.0.1:{free_port()}")
        spawner.load_state({"spawnkit_state": {"pod_name": "jupyter-alice"}})
        self.assertIsNone(await spawner.poll())

    async def test_while_starting_is_none_without_asking(self):
        self.service.start_delay = 0.5
        spawner = make_spawner(self.service.url)
        task = asyncio.ensure_future(spawner.start())
        await asyncio.sleep(0.1)
        self.assertIsNone(await spawner.poll())
        status_requests = [r for r in self.service.calls("GET") if not r.path.endswith("/progress")]
        self.assertEqual(status_requests, [])
        await task

    async def test_unknown_while_its_cluster_is_away_is_none(self):
        # The service cannot see the server's cluster: it keeps the
        # server (exit_code null), and so does the hub; its state keeps
        # the cluster, for a hub restored from a backup.
        spawner = make_spawner(self.service.url)
        await spawner.start()
        self.service.servers["/v1/users/alice/server"].update(
            phase="unknown", ready=False, exit_code=None, reason="ClusterUnavailable", cluster="b",
            state={"pod_name": "jupyter-alice", "cluster": "b"},
        )
        self.assertIsNone(await spawner.poll())
        self.assertEqual(spawner.get_state()["spawnkit_state"]["cluster"], "b")

    async def test_exit_code(self):
        spawner = make_spawner(self.service.url)
        await spawner.start()
        self.service.servers["/v1/users/alice/server"].update(phase="stopped", exit_code=3)
        self.assertEqual(await spawner.poll(), 3)

    async def test_after_stop_and_clear_state_is_0(self):
        spawner = make_spawner(self.service.url)
        await spawner.start()
        await spawner.stop()
        spawner.clear_state()
        self.assertEqual(await spawner.poll(), 0)


class StopWhileStartingTest(ServiceTestCase):
    async def test_jupyterhub_5_1_cancel_then_stop(self):
        # The start request is on the wire when JupyterHub 5.1 cancels the
        # spawn: the DELETE must not reach the service before it, or the
        # start would land after the stop and leave a pod nobody owns.
        self.service.start_delay = 0.6
        spawner = make_spawner(self.service.url)
        task = asyncio.ensure_future(spawner.start())
        await asyncio.sleep(0.1)
        status = await hubstubs.stop_pending_spawn(spawner, task, settle=0.1)
        self.assertIsNone(status, "poll during the cancelled start")
        self.assertTrue(task.cancelled())
        (post,) = self.service.calls("POST")
        (delete,) = self.service.calls("DELETE")
        self.assertIsNotNone(post.answered, "the DELETE was sent before the start request was answered")
        self.assertLessEqual(post.answered, delete.received)
        self.assertEqual(self.service.servers, {})

    async def test_jupyterhub_5_1_cancel_while_waiting_for_ready(self):
        self.service.final_event = ("progress", {"progress": 50, "message": "still pulling"})
        spawner = make_spawner(self.service.url)
        task = asyncio.ensure_future(spawner.start())
        while not self.service.calls("POST"):
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
        await hubstubs.stop_pending_spawn(spawner, task, settle=0.1)
        self.assertEqual(len(self.service.calls("DELETE")), 1)
        self.assertEqual(self.service.servers, {})

    async def test_start_timeout_stop_while_start_runs(self):
        # JupyterHub 3 (and later) after start_timeout: start() is not
        # cancelled; user.stop polls and stops while it still runs.
        self.service.final_event = ("progress", {"progress": 50, "message": "still pulling"})
        spawner = make_spawner(self.service.url)
        task = asyncio.ensure_future(spawner.start())
        while not self.service.calls("POST"):
            await asyncio.sleep(0.02)
        self.assertIsNone(await spawner.poll())
        await spawner.stop()
        with self.assertRaises(asyncio.CancelledError):
            await task
        self.assertEqual(self.service.servers, {})

    async def test_a_lost_cancellation_still_ends_the_start(self):
        # Before Python 3.12, asyncio.wait_for can drop a cancellation that
        # arrives as the awaited call completes. The start must end at its
        # next step all the same, and above all not start the stopped
        # server again when the service says it does not know it.
        self.service.final_event = ("progress", {"progress": 50, "message": "still pulling"})
        spawner = make_spawner(self.service.url)
        task = asyncio.ensure_future(spawner.start())
        while not self.service.calls("POST"):
            await asyncio.sleep(0.02)
        spawner._cancelled_start = task  # as stop() marks it, minus task.cancel()
        self.service.servers.clear()  # as the stop's DELETE leaves it
        with self.assertRaises(asyncio.CancelledError):
            await asyncio.wait_for(task, 5)
        self.assertEqual(len(self.service.calls("POST")), 1)

    async def test_a_cancelled_start_is_not_sent_again(self):
        # The service is away: the start is being retried when it is
        # stopped; once the service is back, nothing starts.
        port = free_port()
        spawner = make_spawner(f"http://127.0.0.1:{port}", service_request_timeout=3)
        task = asyncio.ensure_future(spawner.start())
        await asyncio.sleep(0.3)
        stop = asyncio.ensure_future(spawner.stop())
        await asyncio.sleep(0.3)
        await self.service.close()
        self.service.listen(port)
        await stop
        await asyncio.sleep(0.5)
        self.assertTrue(task.cancelled())
        self.assertEqual(self.service.calls("POST"), [])
        self.assertEqual([r.method for r in self.service.requests], ["DELETE"])


class DeleteForeverTest(ServiceTestCase):
    async def test_asks_the_service_to_delete_for_good(self):
        spawner = make_spawner(self.service.url, name="data")
        await spawner.delete_forever()
        (delete,) = self.service.calls("DELETE")
        self.assertEqual((delete.path, delete.query), ("/v1/users/alice/servers/data", "forever=true"))
