"""JupyterHub 6.0's additions to the spawner contract, behind feature
detection: SpawnException(reason=...) for a start the service refused or
failed, and rename. JupyterHub 6.0 is not installed here: hubstubs stands
in for its SpawnException and its rename call."""

import unittest

import jupyterhub.spawner

from spawnkit_jupyterhub import ServiceUnavailable, SpawnkitError
from tests import hubstubs
from tests.fakeservice import ServiceTestCase, make_spawner


class SpawnExceptionTest(ServiceTestCase):
    async def start_error(self, spawner):
        try:
            await spawner.start()
        except Exception as e:
            return e
        self.fail("start() succeeded")

    async def test_a_failed_pod_is_a_spawn_exception_on_6(self):
        self.service.final_event = ("failed", {"failed": True, "reason": "ErrImagePull", "message": "image not found"})
        with hubstubs.jupyterhub6():
            err = await self.start_error(make_spawner(self.service.url))
            self.assertIsInstance(err, jupyterhub.spawner.SpawnException)
            self.assertEqual(hubstubs.spawn_metrics_status(err), ("failure", "ErrImagePull"))
        self.assertIsInstance(err, SpawnkitError)
        self.assertEqual(err.status_code, 500)
        self.assertEqual(err.jupyterhub_message, "ErrImagePull: image not found")
        # Nothing left behind.
        self.assertEqual([r.method for r in self.service.requests][-1], "DELETE")

    async def test_a_refusal_keeps_its_status(self):
        self.service.start_error = (400, "InvalidUserOptions", 'unknown profile "gpu"')
        with hubstubs.jupyterhub6():
            err = await self.start_error(make_spawner(self.service.url))
            self.assertEqual(hubstubs.spawn_metrics_status(err), ("failure", "InvalidUserOptions"))
        self.assertEqual(err.status_code, 400)
        self.assertEqual(err.status, 400)
        self.assertEqual(err.jupyterhub_message, 'unknown profile "gpu"')

    async def test_a_service_failure_stays_an_error(self):
        self.service.start_error = (500, "InternalError", "etcd is gone")
        with hubstubs.jupyterhub6():
            err = await self.start_error(make_spawner(self.service.url))
            self.assertNotIsInstance(err, jupyterhub.spawner.SpawnException)
            self.assertEqual(hubstubs.spawn_metrics_status(err), ("error", ""))
        self.assertIsInstance(err, ServiceUnavailable)

    @unittest.skipIf(hasattr(jupyterhub.spawner, "SpawnException"), "this JupyterHub has SpawnException")
    async def test_before_6_a_plain_spawnkit_error(self):
        self.service.final_event = ("failed", {"failed": True, "reason": "ErrImagePull", "message": "image not found"})
        err = await self.start_error(make_spawner(self.service.url))
        self.assertIs(type(err), SpawnkitError)
        self.assertEqual(err.reason, "ErrImagePull")


class RenameTest(ServiceTestCase):
    async def test_refused_by_default(self):
        spawner = make_spawner(self.service.url, name="lab")
        with hubstubs.jupyterhub6():
            with self.assertRaises(jupyterhub.spawner.SpawnException) as cm:
                await hubstubs.rename_server(spawner, "lab-2")
        self.assertEqual(cm.exception.status_code, 409)
        self.assertEqual(cm.exception.reason, "RenameNotAllowed")
        self.assertIn("allow_rename", cm.exception.message)
        self.assertEqual(self.service.requests, [])

    async def test_allowed_for_a_server_the_service_does_not_run(self):
        spawner = make_spawner(self.service.url, name="lab", allow_rename=True)
        spawner.load_state({"spawnkit_url": "http://127.0.0.2:8888"})
        with hubstubs.jupyterhub6():
            await hubstubs.rename_server(spawner, "lab-2")
        (get,) = self.service.requests
        self.assertEqual(get.path, "/v1/users/alice/servers/lab")
        self.assertNotIn("spawnkit_url", spawner.get_state())
        # JupyterHub then makes a spawner under the new name; its start
        # goes to the new name.
        renamed = make_spawner(self.service.url, name="lab-2", allow_rename=True)
        await renamed.start()
        self.assertEqual(self.service.calls("POST")[0].path, "/v1/users/alice/servers/lab-2")

    async def test_refused_while_the_service_runs_it(self):
        self.service.servers["/v1/users/alice/servers/lab"] = {"phase": "running", "ready": True, "exit_code": None}
        spawner = make_spawner(self.service.url, name="lab", allow_rename=True)
        with hubstubs.jupyterhub6():
            with self.assertRaises(jupyterhub.spawner.SpawnException) as cm:
                await hubstubs.rename_server(spawner, "lab-2")
        self.assertEqual((cm.exception.status_code, cm.exception.reason), (409, "ServerActive"))
