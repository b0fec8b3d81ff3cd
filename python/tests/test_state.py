"""The state JupyterHub keeps for a server reaches the service whenever
the service may not know the server: a service restarted (under a changed
pod_name_template, namespace or cluster list) finds the running servers
where their state says, and never makes a poll end one (issue 42).

FakeService.restart() stands for such a service: it forgets its servers,
whose pods run on; PUT .../state (manager.Seed) finds them again.
"""

import asyncio
import json
import os

from spawnkit_jupyterhub import SpawnkitError
from spawnkit_jupyterhub.spawner import kubespawner_state
from tests.fakeservice import ServiceTestCase, make_spawner

PATH = "/v1/users/alice/server"
REFUSAL = (
    409,
    "StateRefused",
    'manager: state refused: server "" of user "alice" is recorded in namespace "old", which the configuration '
    "does not trust for it (a namespace that held servers before a configuration change belongs in retired_namespaces)",
)


def methods(service):
    return [r.method for r in service.requests if not r.path.endswith("/progress")]


class ServiceRestartTest(ServiceTestCase):
    async def _running(self, **traits):
        spawner = make_spawner(self.service.url, **traits)
        await spawner.start()
        self.service.requests.clear()
        return spawner

    async def test_a_restarted_service_is_given_the_state_and_the_server_runs(self):
        self.service.claims = True
        spawner = await self._running()
        state = spawner.get_state()["spawnkit_state"]
        self.service.restart()
        # The GET says 404 (never read as an exit status): the state goes,
        # and the service's answer to it is the poll's.
        self.assertIsNone(await spawner.poll())
        self.assertEqual(methods(self.service), ["GET", "PUT"])
        put = self.service.calls("PUT")[0]
        self.assertEqual((put.path, put.body), (PATH + "/state", state))
        self.assertTrue(self.service.started(PATH))
        # Known again: the next polls ask only.
        self.assertIsNone(await spawner.poll())
        self.assertEqual(methods(self.service), ["GET", "PUT", "GET"])

    async def test_after_a_hub_restart_the_loaded_state_goes_first(self):
        first = await self._running()
        saved = first.get_state()
        self.service.restart()
        # JupyterHub restarted too: a new spawner from its database.
        spawner = make_spawner(self.service.url)
        spawner.load_state(saved)
        self.assertIsNone(await spawner.poll())
        self.assertEqual(methods(self.service), ["PUT"])  # one request, not two
        self.assertEqual(self.service.calls("PUT")[0].body, saved["spawnkit_state"])
        self.assertTrue((await spawner.get_url()).startswith("http://127.0.0.2:8888"))
        self.assertIsNone(await spawner.poll())
        self.assertEqual(methods(self.service), ["PUT", "GET", "GET"])

    async def test_gone_only_when_the_state_finds_nothing_either(self):
        spawner = await self._running()
        self.service.servers.clear()  # the pod is gone
        self.assertEqual(await spawner.poll(), 1)
        self.assertEqual(methods(self.service), ["GET", "PUT"])

    async def test_404_to_the_state_too_is_1(self):
        spawner = await self._running()
        self.service.get_errors = [(404, "NotFound", "no server"), (404, "NotFound", "no server")]
        self.assertEqual(await spawner.poll(), 1)
        self.assertEqual(methods(self.service), ["GET", "PUT"])

    async def test_the_service_away_then_restarted(self):
        # Unreachable for a while (it restarted meanwhile): the next poll
        # sends the state first.
        spawner = await self._running()
        port = self.service.port
        await self.service.close()
        with self.assertLogs(spawner.log, "WARNING"):
            self.assertIsNone(await spawner.poll())
        self.service.restart()
        self.service.listen(port)
        self.assertIsNone(await spawner.poll())
        self.assertEqual(methods(self.service), ["PUT"])
        self.assertTrue(self.service.started(PATH))

    async def test_stop_after_a_restart_deletes_the_pod(self):
        spawner = await self._running()
        self.service.restart()
        await spawner.stop()
        # The DELETE's 404 made the state go, then the DELETE again.
        self.assertEqual(methods(self.service), ["DELETE", "PUT", "DELETE"])
        self.assertEqual(self.service.servers, {})
        self.assertEqual(self.service.forgotten, {})

    async def test_stop_after_both_restarted_sends_the_state_first(self):
        first = await self._running()
        saved = first.get_state()
        self.service.restart()
        spawner = make_spawner(self.service.url)
        spawner.load_state(saved)
        await spawner.stop()
        self.assertEqual(methods(self.service), ["PUT", "DELETE"])
        self.assertEqual(self.service.servers, {})
        self.assertEqual(self.service.forgotten, {})

    async def test_a_start_carries_the_state(self):
        # A hub whose stop never reached the service (its state still names
        # the pod): the service finds the server running, starts nothing.
        first = await self._running()
        saved = first.get_state()
        self.service.restart()
        spawner = make_spawner(self.service.url)
        spawner.load_state(saved)
        self.assertEqual(await spawner.start(), "http://127.0.0.2:8888")
        (post,) = self.service.calls("POST")
        self.assertEqual(post.body["state"], saved["spawnkit_state"])
        self.assertEqual(self.service.forgotten, {})


class StateRefusedTest(ServiceTestCase):
    def _loaded(self):
        spawner = make_spawner(self.service.url)
        spawner.load_state({"spawnkit_state": {"pod_name": "jupyter-alice", "namespace": "old"}})
        self.service.state_error = REFUSAL
        return spawner

    async def test_poll_keeps_the_server_and_logs_an_error_once(self):
        spawner = self._loaded()
        with self.assertLogs(spawner.log, "DEBUG") as logs:
            for _ in range(3):
                self.assertIsNone(await spawner.poll())
        errors = [r for r in logs.records if r.levelname == "ERROR"]
        self.assertEqual(len(errors), 1, logs.output)
        self.assertIn("retired_namespaces", errors[0].getMessage())
        self.assertIn("alice", errors[0].getMessage())
        # Each poll is one request: the state, until the service takes it.
        self.assertEqual(methods(self.service), ["PUT"] * 3)
        self.service.state_error = None
        self.service.forgotten[PATH] = {"phase": "running", "ready": True, "exit_code": None}
        self.assertIsNone(await spawner.poll())
        self.assertTrue(self.service.started(PATH))

    async def test_poll_after_a_404_keeps_the_server(self):
        spawner = make_spawner(self.service.url)
        await spawner.start()
        self.service.restart()
        self.service.state_error = REFUSAL
        with self.assertLogs(spawner.log, "ERROR"):
            self.assertIsNone(await spawner.poll())
        self.assertEqual(methods(self.service)[-2:], ["GET", "PUT"])

    async def test_stop_raises_the_services_message(self):
        spawner = self._loaded()
        with self.assertLogs(spawner.log, "ERROR"), self.assertRaises(SpawnkitError) as caught:
            await spawner.stop()
        self.assertEqual(caught.exception.reason, "StateRefused")
        self.assertIn("retired_namespaces", str(caught.exception))
        self.assertEqual(methods(self.service), ["PUT"])  # no DELETE of what the state does not name


class ClaimAcrossStopsTest(ServiceTestCase):
    async def test_clear_state_keeps_the_claim_and_the_next_start_sends_it(self):
        self.service.claims = True
        spawner = make_spawner(self.service.url)
        await spawner.start()
        await spawner.stop()
        spawner.clear_state()
        saved = spawner.get_state()
        self.assertEqual(saved["spawnkit_state"], {"pvc_name": "claim-x"})
        self.assertNotIn("spawnkit_url", saved)
        # A claim's name alone is no server that could run.
        self.service.requests.clear()
        self.assertEqual(await spawner.poll(), 0)
        # The hub restarts with it in its database.
        spawner = make_spawner(self.service.url)
        spawner.load_state(saved)
        self.assertEqual(await spawner.poll(), 0)
        self.assertEqual(methods(self.service), ["GET", "GET"])  # never PUT
        await spawner.start()
        (post,) = self.service.calls("POST")
        self.assertEqual(post.body["state"], {"pvc_name": "claim-x"})

    async def test_the_state_saved_after_start_names_the_claim(self):
        # JupyterHub saves get_state() once start() returns; the claim is
        # made after the start's answer, so the state is read again.
        self.service.claims = True
        spawner = make_spawner(self.service.url)
        await spawner.start()
        self.assertEqual(self.service.calls("POST")[0].body.get("state"), None)
        self.assertEqual(spawner.get_state()["spawnkit_state"]["pvc_name"], "claim-x")

    async def test_without_a_claim_nothing_is_kept(self):
        spawner = make_spawner(self.service.url)
        await spawner.start()
        await spawner.stop()
        spawner.clear_state()
        self.assertNotIn("spawnkit_state", spawner.get_state())


class NoStateTest(ServiceTestCase):
    async def test_a_spawner_without_state_never_sends_one(self):
        spawner = make_spawner(self.service.url)
        spawner.load_state({})
        self.assertEqual(await spawner.poll(), 0)
        await spawner.start()
        self.assertNotIn("state", self.service.calls("POST")[0].body)
        self.assertIsNone(await spawner.poll())
        await spawner.stop()
        self.assertEqual(methods(self.service), ["GET", "POST", "GET", "GET", "DELETE"])

    async def test_a_stop_of_a_server_the_service_lost_without_state(self):
        spawner = make_spawner(self.service.url)
        await asyncio.wait_for(spawner.stop(), 5)
        self.assertEqual(methods(self.service), ["DELETE"])


def kubespawner_states():
    """The states KubeSpawner 7.1's get_state saved in the config vectors
    (spawner/testdata/config-vectors.json, expected.state), by case name."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "spawner", "testdata", "config-vectors.json")
    with open(path) as f:
        cases = json.load(f)["cases"]
    return {c["name"]: c["expected"]["state"] for c in cases if (c.get("expected") or {}).get("state")}


class KubeSpawnerStateTest(ServiceTestCase):
    """A hub switched from KubeSpawner: its database holds KubeSpawner's
    state for the servers KubeSpawner started. The service's state of the
    same names is sent before the first poll or stop, so that a service
    run with -adopt-kubespawner finds KubeSpawner's pod (issue 45)."""

    def _loaded(self, case="storage_full", user="Jill", name="data"):
        state = kubespawner_states()[case]
        self.assertIn("kubespawner_version", state)  # KubeSpawner's, not spawnkit's
        spawner = make_spawner(self.service.url, user=user, name=name)
        spawner.load_state(state)
        return spawner, state

    def _adopted(self, path):
        # What the service makes of KubeSpawner's pod with -adopt-kubespawner.
        self.service.forgotten[path] = {
            "phase": "running",
            "ready": True,
            "exit_code": None,
            "url": "http://127.0.0.2:8888",
            "state": {"pod_name": "jupyter-jill---c649a389--data", "namespace": "default"},
        }

    def test_every_vector_state_translates_to_its_names(self):
        states = kubespawner_states()
        self.assertGreater(len(states), 10)
        for case, state in states.items():
            with self.subTest(case):
                want = {k: state[k] for k in ("pod_name", "namespace", "dns_name", "pvc_name") if k in state}
                self.assertEqual(kubespawner_state(state), want)
                self.assertNotIn("kubespawner_version", kubespawner_state(state))

    def test_nothing_to_translate(self):
        for state in ({}, {"kubespawner_version": "7.1.1"}, {"pod_name": ""}, {"pod_name": 3}, None, {"pid": 42}):
            with self.subTest(state):
                self.assertIsNone(kubespawner_state(state))

    async def test_the_first_poll_sends_kubespawners_names(self):
        spawner, state = self._loaded()
        path = "/v1/users/Jill/servers/data"
        self._adopted(path)
        self.assertIsNone(await spawner.poll())
        self.assertEqual(methods(self.service), ["PUT"])
        put = self.service.calls("PUT")[0]
        self.assertEqual(put.path, path + "/state")
        self.assertEqual(
            put.body,
            {
                "pod_name": "jupyter-jill---c649a389--data",
                "namespace": "default",
                "dns_name": "jupyter-jill---c649a389--data.default.svc.cluster.local",
                "pvc_name": "claim-jill---c649a389--data",
            },
        )
        self.assertTrue((await spawner.get_url()).startswith("http://127.0.0.2:8888"))
        # From now on JupyterHub saves spawnkit's state.
        saved = spawner.get_state()
        self.assertEqual(saved["spawnkit_state"]["pod_name"], state["pod_name"])
        self.assertNotIn("kubespawner_version", saved)

    async def test_a_stop_sends_kubespawners_names_first(self):
        spawner, _ = self._loaded()
        self._adopted("/v1/users/Jill/servers/data")
        await spawner.stop()
        self.assertEqual(methods(self.service), ["PUT", "DELETE"])
        self.assertEqual(self.service.servers, {})

    async def test_a_service_without_adoption_refuses_and_the_server_is_kept(self):
        # A service run without -adopt-kubespawner refuses the state
        # (manager.Seed: not a pod it manages): poll keeps the server,
        # logging the service's message; a stop raises it.
        spawner, _ = self._loaded()
        self.service.state_error = (
            409,
            "StateRefused",
            'manager: state refused: the hub records server "data" of user "Jill" as pod '
            "default/jupyter-jill---c649a389--data, which is not a pod the Manager manages "
            "(KubeSpawner's are adopted only with AdoptKubeSpawner: the spawner-service's -adopt-kubespawner)",
        )
        with self.assertLogs(spawner.log, "ERROR") as logs:
            self.assertIsNone(await spawner.poll())
        self.assertIn("-adopt-kubespawner", "\n".join(logs.output))
        with self.assertLogs(spawner.log, "ERROR"), self.assertRaises(SpawnkitError) as caught:
            await spawner.stop()
        self.assertEqual(caught.exception.reason, "StateRefused")
        self.assertNotIn("DELETE", methods(self.service))

    async def test_a_start_after_the_switch_carries_the_claim(self):
        # A server KubeSpawner had stopped: its state still names the
        # pod (KubeSpawner's clear_state keeps its names) and the claim;
        # the start sends them, and the service starts under today's names
        # with that claim.
        spawner, _ = self._loaded()
        await spawner.start()
        (post,) = self.service.calls("POST")
        self.assertEqual(post.body["state"]["pvc_name"], "claim-jill---c649a389--data")

    async def test_spawnkits_own_state_wins(self):
        spawner = make_spawner(self.service.url)
        spawner.load_state({"spawnkit_state": {"pod_name": "jupyter-alice", "namespace": "default"}, "pod_name": "other"})
        self.service.forgotten[PATH] = {"phase": "running", "ready": True, "exit_code": None}
        self.assertIsNone(await spawner.poll())
        self.assertEqual(self.service.calls("PUT")[0].body, {"pod_name": "jupyter-alice", "namespace": "default"})
