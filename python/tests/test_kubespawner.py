"""The hub's KubeSpawner configuration (issue 43): c.KubeSpawner.<option>
and c.SpawnkitSpawner.<option> are read, callables are called as
KubeSpawner calls them, and each start sends the result to the service as
"config", with JupyterHub's own environment alone as "env"; a hub that sets
no KubeSpawner option sends the body it always did.
"""

import datetime
import json
import os
import unittest

import jupyterhub
from jupyterhub.spawner import Spawner
from traitlets import TraitError
from traitlets.config import Config

import spawnkit_jupyterhub
from spawnkit_jupyterhub import SpawnkitError, SpawnkitSpawner
from spawnkit_jupyterhub._kubespawner import OPTIONS, slugify, to_json
from tests.fakeservice import ServiceTestCase, make_spawner

try:
    from kubernetes.client import (
        ApiClient,
        V1Container,
        V1EnvVar,
        V1ObjectMeta,
        V1SecurityContext,
        V1VolumeMount,
    )
except ImportError:  # Debian: apt-get install python3-kubernetes
    V1Container = None

PATH = "/v1/users/alice/server"
SECRET_ENV = {"valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}


def profiles():
    """Two profiles, callables at every level KubeSpawner calls them."""
    return [
        {
            "display_name": "CPU only",
            "description": "the default: no profile says default",
            "kubespawner_override": {"cpu_limit": 1, "mem_limit": lambda s: f"{s.user.id}G"},
            "profile_options": {
                "image": {
                    "display_name": "Image",
                    "choices": {
                        "base": {
                            "display_name": "Base",
                            "kubespawner_override": {"image": "base", "extra_labels": lambda s: {"who": s.user.name}},
                        },
                        "scipy": {
                            "display_name": "SciPy",
                            "default": True,
                            "kubespawner_override": {"image": "scipy", "gid": lambda s: 100},
                        },
                    },
                    "unlisted_choice": {
                        "enabled": True,
                        "display_name": "Other image",
                        "kubespawner_override": {"image": "{value}", "fs_gid": lambda s: 1},
                    },
                },
            },
        },
        {
            "display_name": "GPU Server (A100)",
            "kubespawner_override": {
                "extra_resource_limits": {"nvidia.com/gpu": "1"},
                "node_selector": lambda s: {"gpu": "a100", "user": s.user.name},
            },
        },
    ]


def sent_profiles(first_override, choices, unlisted_override, gpu_override):
    """profiles() as sent, with the given kubespawner_overrides."""
    return [
        {
            "display_name": "CPU only",
            "description": "the default: no profile says default",
            "kubespawner_override": first_override,
            "profile_options": {
                "image": {
                    "display_name": "Image",
                    "choices": {
                        "base": {"display_name": "Base", "kubespawner_override": choices[0]},
                        "scipy": {"display_name": "SciPy", "default": True, "kubespawner_override": choices[1]},
                    },
                    "unlisted_choice": {
                        "enabled": True,
                        "display_name": "Other image",
                        "kubespawner_override": unlisted_override,
                    },
                },
            },
        },
        {"display_name": "GPU Server (A100)", "kubespawner_override": gpu_override},
    ]


def hub_env(spawner, **traits):
    """JupyterHub's own variables for the spawner (get_env without
    `environment`), as strings, with traits set as a chosen profile's
    kubespawner_override sets them in KubeSpawner's load_user_options."""
    saved = {"environment": spawner.environment}
    spawner.environment = {}
    try:
        for name, value in traits.items():
            saved[name] = getattr(spawner, name)
            setattr(spawner, name, value)
        return {k: "" if v is None else str(v) for k, v in Spawner.get_env(spawner).items()}
    finally:
        for name, value in saved.items():
            setattr(spawner, name, value)


class KubeSpawnerConfigTest(ServiceTestCase):
    def config(self):
        c = Config()
        c.KubeSpawner.image = "quay.io/jupyter/base-notebook:2024-05-27"
        c.SpawnkitSpawner.image = "quay.io/jupyter/scipy-notebook:2024-05-27"
        c.KubeSpawner.uid = lambda spawner: 1000 + spawner.user.id
        c.KubeSpawner.environment = {"PLAIN": "1", "WHO": lambda spawner: f"user-{spawner.user.name}", "DB_PASSWORD": SECRET_ENV}
        c.KubeSpawner.profile_list = profiles()
        c.KubeSpawner.default_url = "/lab"
        c.KubeSpawner.singleuser_image_pull_policy = "Always"  # deprecated: sent as it is
        c.Spawner.pre_spawn_hook = lambda spawner: None  # acts in the hub: never sent
        if V1Container is not None:
            c.KubeSpawner.init_containers = [
                V1Container(
                    name="init-home",
                    image="busybox:1.36",
                    command=["sh", "-c", "chown 1000 /home/jovyan"],
                    security_context=V1SecurityContext(run_as_user=0),
                    volume_mounts=[V1VolumeMount(name="home", mount_path="/home/jovyan")],
                )
            ]
        return c

    def expected_init_containers(self):
        if V1Container is None:
            return {}
        return {
            "init_containers": [
                {
                    "command": ["sh", "-c", "chown 1000 /home/jovyan"],
                    "image": "busybox:1.36",
                    "name": "init-home",
                    "securityContext": {"runAsUser": 0},
                    "volumeMounts": [{"mountPath": "/home/jovyan", "name": "home"}],
                }
            ]
        }

    async def test_start_sends_the_configuration(self):
        spawner = make_spawner(self.service.url, config=self.config())
        # traitlets' subclass precedence: c.SpawnkitSpawner wins.
        self.assertEqual(spawner.image, "quay.io/jupyter/scipy-notebook:2024-05-27")
        await spawner.start()
        (post,) = self.service.calls("POST")
        self.assertEqual(post.path, PATH)
        self.assertEqual(
            set(post.body), {"user_options", "env", "user_id", "hub_version", "config"}, "no cmd, args nor attributes"
        )
        self.assertEqual(
            post.body["config"],
            {
                "default_url": "/lab",
                "environment": {"PLAIN": "1", "WHO": "user-alice", "DB_PASSWORD": SECRET_ENV},
                "image": "quay.io/jupyter/scipy-notebook:2024-05-27",
                **self.expected_init_containers(),
                # The default profile (the first: none says default) and
                # its default choice (scipy) have their callables called;
                # every other entry's are left out.
                "profile_list": sent_profiles(
                    {"cpu_limit": 1, "mem_limit": "7G"},
                    [{"image": "base"}, {"image": "scipy", "gid": 100}],
                    {"image": "{value}"},
                    {"extra_resource_limits": {"nvidia.com/gpu": "1"}},
                ),
                "singleuser_image_pull_policy": "Always",
                "start_timeout": 10,  # make_spawner's: JupyterHub's own options go too
                "uid": 1007,
            },
        )
        # JupyterHub's variables alone: `environment` is in the
        # configuration. The default profile's limits are in them, as
        # KubeSpawner sets its override on the spawner before get_env.
        self.assertEqual(post.body["env"], hub_env(spawner, cpu_limit=1, mem_limit="7G"))
        self.assertEqual(post.body["env"]["MEM_LIMIT"], str(7 * 1024**3))
        self.assertEqual(spawner.mem_limit, None, "the profile's limits are set for get_env only")
        for name in ("PLAIN", "WHO", "DB_PASSWORD"):
            self.assertNotIn(name, post.body["env"])
        self.assertEqual(post.body["env"]["JUPYTERHUB_API_TOKEN"], "hub-api-token")
        # As KubeSpawner's load_user_options: the default profile's slug.
        self.assertEqual(spawner.user_options, {"profile": "cpu-only"})
        self.assertEqual(post.body["user_options"], {"profile": "cpu-only"})
        # The body is JSON as it is.
        json.dumps(post.body, allow_nan=False)

    async def test_a_chosen_profile_has_its_callables_called(self):
        spawner = make_spawner(self.service.url, config=self.config())
        spawner.user_options = {"profile": "gpu-server-a100"}
        await spawner.start()
        (post,) = self.service.calls("POST")
        self.assertEqual(
            post.body["config"]["profile_list"],
            sent_profiles(
                {"cpu_limit": 1},
                [{"image": "base"}, {"image": "scipy"}],
                {"image": "{value}"},
                {"extra_resource_limits": {"nvidia.com/gpu": "1"}, "node_selector": {"gpu": "a100", "user": "alice"}},
            ),
        )
        self.assertEqual(post.body["user_options"], {"profile": "gpu-server-a100"})

    async def test_a_chosen_choice_and_an_unlisted_one(self):
        for options, choices, unlisted in (
            ({"profile": "cpu-only", "image": "base"}, [{"image": "base", "extra_labels": {"who": "alice"}}, {"image": "scipy"}], {"image": "{value}"}),
            ({"image--unlisted-choice": ["quay.io/x:1"]}, [{"image": "base"}, {"image": "scipy"}], {"image": "{value}", "fs_gid": 1}),
        ):
            with self.subTest(options=options):
                self.service.requests.clear()
                spawner = make_spawner(self.service.url, config=self.config())
                spawner.user_options = dict(options)
                await spawner.start()
                (post,) = self.service.calls("POST")
                self.assertEqual(
                    post.body["config"]["profile_list"],
                    sent_profiles({"cpu_limit": 1, "mem_limit": "7G"}, choices, unlisted, {"extra_resource_limits": {"nvidia.com/gpu": "1"}}),
                )
                self.assertEqual(post.body["user_options"]["profile"], "cpu-only")
                await spawner.stop()

    async def test_an_unknown_profile_is_left_to_the_service(self):
        spawner = make_spawner(self.service.url, config=self.config())
        spawner.user_options = {"profile": "huge"}
        await spawner.start()
        (post,) = self.service.calls("POST")
        self.assertEqual(post.body["user_options"], {"profile": "huge"})
        # No profile is this start's: no override callable is called.
        self.assertEqual(
            post.body["config"]["profile_list"],
            sent_profiles({"cpu_limit": 1}, [{"image": "base"}, {"image": "scipy"}], {"image": "{value}"}, {"extra_resource_limits": {"nvidia.com/gpu": "1"}}),
        )

    async def test_a_callable_profile_list_is_called_per_start(self):
        calls = []

        async def profile_list(spawner):
            calls.append(spawner.user.name)
            return [
                {"display_name": "Small", "slug": "small", "kubespawner_override": {"mem_limit": "1G"}},
                {
                    "display_name": "Big",
                    "default": True,
                    "kubespawner_override": {"mem_limit": lambda s: "8G", "supplemental_gids": lambda s: [s.user.id]},
                },
            ]

        c = Config()
        c.KubeSpawner.profile_list = profile_list
        spawner = make_spawner(self.service.url, config=c)
        await spawner.start()
        (post,) = self.service.calls("POST")
        self.assertEqual(
            post.body["config"]["profile_list"],
            [
                {"display_name": "Small", "slug": "small", "kubespawner_override": {"mem_limit": "1G"}},
                {"display_name": "Big", "default": True, "kubespawner_override": {"mem_limit": "8G", "supplemental_gids": [7]}},
            ],
        )
        self.assertEqual(post.body["user_options"], {"profile": "big"})
        self.assertEqual(calls, ["alice"])

    async def test_a_pre_spawn_hook_that_sets_an_option(self):
        # No KubeSpawner option in the configuration: the hook's is sent.
        def hook(spawner):
            spawner.image = "quay.io/jupyter/r-notebook:2024-05-27"

        spawner = make_spawner(self.service.url, pre_spawn_hook=hook)
        spawner.run_pre_spawn_hook()
        await spawner.start()
        (post,) = self.service.calls("POST")
        self.assertEqual(post.body["config"], {"image": "quay.io/jupyter/r-notebook:2024-05-27", "start_timeout": 10})
        self.assertEqual(post.body["user_options"], {})

    async def test_apply_user_options_resources_go_in_the_configuration(self):
        c = Config()
        c.KubeSpawner.image = "quay.io/jupyter/base-notebook:2024-05-27"
        c.Spawner.cmd = ["jupyterhub-singleuser"]
        c.Spawner.args = ["--debug"]
        spawner = make_spawner(self.service.url, config=c)
        spawner.cpu_limit = 1.5  # as apply_user_options or a pre_spawn_hook
        spawner.mem_limit = "2G"
        await spawner.start()
        (post,) = self.service.calls("POST")
        self.assertNotIn("attributes", post.body)
        self.assertEqual(
            post.body["config"],
            {
                "args": ["--debug"],
                "cmd": ["jupyterhub-singleuser"],
                "cpu_limit": 1.5,
                "image": "quay.io/jupyter/base-notebook:2024-05-27",
                "mem_limit": 2 << 30,
                "start_timeout": 10,
            },
        )

    async def test_without_kubespawner_options_the_body_is_unchanged(self):
        # An old-style hub: the KubeSpawner options are in the service's
        # YAML, the hub sets JupyterHub's own only.
        c = Config()
        c.Spawner.cmd = ["start-notebook.py"]
        c.Spawner.environment = {"EXTRA": "x", "WHO": lambda s: s.user.name}
        c.Spawner.start_timeout = 300
        c.Spawner.mem_limit = "1G"
        spawner = make_spawner(self.service.url, config=c)
        spawner.user_options = {"profile": "gpu"}
        await spawner.start()
        (post,) = self.service.calls("POST")
        self.assertEqual(
            post.body,
            {
                "user_options": {"profile": "gpu"},
                "env": {k: str(v) for k, v in spawner.get_env().items()},
                "args": [],
                "user_id": 7,
                "hub_version": jupyterhub.__version__,
                "attributes": {"mem_limit": 1 << 30},
                "cmd": ["start-notebook.py"],
            },
        )
        self.assertEqual(post.body["env"]["WHO"], "alice")
        self.assertEqual(spawner.user_options, {"profile": "gpu"})
        self.assertEqual(await spawner._hub_config(), {})

    async def test_a_value_that_is_not_json_fails_the_start_naming_it(self):
        for name, value, where in (
            ("extra_pod_config", {"hostNetwork": object()}, "c.KubeSpawner.extra_pod_config['hostNetwork']"),
            ("extra_labels", {"team": lambda s: "a"}, "c.KubeSpawner.extra_labels['team']"),
            ("storage_capacity", float("nan"), "c.KubeSpawner.storage_capacity"),
        ):
            with self.subTest(name=name):
                self.service.requests.clear()
                spawner = make_spawner(self.service.url, config=Config({"KubeSpawner": {name: value}}))
                with self.assertRaises(SpawnkitError) as cm:
                    await spawner.start()
                self.assertIn(where, str(cm.exception))
                self.assertEqual((cm.exception.status, cm.exception.reason), (400, "InvalidConfig"))
                self.assertEqual(self.service.calls("POST"), [])

    async def test_an_option_the_service_cannot_honour_fails_at_hub_start(self):
        for section, name, value, reason in (
            ("KubeSpawner", "singleuser_lifecycle_hooks", {"postStart": {}}, OPTIONS["singleuser_lifecycle_hooks"]["note"]),
            ("KubeSpawner", "singleuser_allow_privilege_escalation", False, OPTIONS["singleuser_allow_privilege_escalation"]["note"]),
            ("KubeSpawner", "modify_pod_hook", lambda spawner, pod: pod, "extra_pod_config"),
            ("SpawnkitSpawner", "after_pod_created_hook", lambda spawner, pod: None, "Go hook"),
            ("KubeSpawner", "profile_form_template", "<form>{{ profile_list }}</form>", "options_form"),
            ("KubeSpawner", "additional_profile_form_template_paths", ["/etc/jupyterhub/templates"], "options_form"),
        ):
            with self.subTest(name=name):
                # JupyterHub makes a spawner for every server it knows at
                # hub start (init_spawners): that fails.
                with self.assertRaises(TraitError) as cm:
                    make_spawner(self.service.url, config=Config({section: {name: value}}))
                self.assertIn(f"c.{section}.{name}", str(cm.exception))
                self.assertIn(reason, str(cm.exception))
        # KubeSpawner's own empty defaults, as a chart may write them, are fine.
        make_spawner(self.service.url, config=Config({"KubeSpawner": {"profile_form_template": "", "additional_profile_form_template_paths": []}}))

    async def test_a_hook_set_later_fails_the_start(self):
        spawner = make_spawner(self.service.url)
        spawner.modify_pod_hook = lambda spawner, pod: pod
        with self.assertRaises(TraitError) as cm:
            await spawner.start()
        self.assertIn("modify_pod_hook", str(cm.exception))
        self.assertEqual(self.service.calls("POST"), [])


class OptionsFormTest(ServiceTestCase):
    async def test_a_hub_profile_list_is_posted_with_the_configuration(self):
        c = Config()
        c.KubeSpawner.profile_list = lambda spawner: profiles()
        c.KubeSpawner.uid = lambda spawner: 1000  # called at the start, not for the form
        spawner = make_spawner(self.service.url, config=c)
        form = await spawner.get_options_form()
        self.assertEqual(form, "<div>profiles</div>")
        (post,) = self.service.calls("POST")
        self.assertEqual(post.path, "/v1/users/alice/options-form")
        self.assertEqual(
            post.body,
            {
                "config": {
                    # No profile is chosen yet: no override callable is called.
                    "profile_list": sent_profiles(
                        {"cpu_limit": 1},
                        [{"image": "base"}, {"image": "scipy"}],
                        {"image": "{value}"},
                        {"extra_resource_limits": {"nvidia.com/gpu": "1"}},
                    ),
                    "start_timeout": 10,
                }
            },
        )

        options = await spawner.run_options_from_form({"profile": ["gpu-server-a100"], "other": ["x"]})
        self.assertEqual(options, {"profile": "gpu-server-a100"})
        post = self.service.calls("POST")[-1]
        self.assertEqual(post.path, "/v1/users/alice/options-from-form")
        self.assertEqual(post.body["form_data"], {"profile": ["gpu-server-a100"], "other": ["x"]})
        self.assertEqual(post.body["config"]["profile_list"][1]["display_name"], "GPU Server (A100)")

    async def test_without_a_hub_profile_list_the_service_form(self):
        for config in (Config(), Config({"KubeSpawner": {"image": "x"}})):
            with self.subTest(config=config):
                self.service.requests.clear()
                spawner = make_spawner(self.service.url, config=config)
                self.assertEqual(await spawner.get_options_form(), "<div>profiles</div>")
                await spawner.run_options_from_form({"profile": ["gpu"]})
                self.assertEqual([(r.method, r.path, r.body) for r in self.service.requests], [
                    ("GET", "/v1/users/alice/options-form", None),
                    ("POST", "/v1/users/alice/options-from-form", {"profile": ["gpu"]}),
                ])

    async def test_a_hub_options_form_is_the_hubs(self):
        c = Config()
        c.KubeSpawner.profile_list = profiles()
        c.Spawner.options_form = "<input name='x'>"
        spawner = make_spawner(self.service.url, config=c)
        self.assertEqual(await spawner.get_options_form(), "<input name='x'>")
        self.assertEqual(self.service.requests, [])


class OptionTraitsTest(unittest.TestCase):
    def test_every_option_is_configurable_as_c_kubespawner(self):
        refused = {"modify_pod_hook", "after_pod_created_hook", "profile_form_template", "additional_profile_form_template_paths"}
        traits = SpawnkitSpawner.class_traits(config=True)
        for name, entry in OPTIONS.items():
            if hasattr(Spawner, name):
                # JupyterHub's own (cmd, environment, start_timeout, ...):
                # see test_base_options_stay_jupyterhubs.
                continue
            with self.subTest(name=name):
                self.assertIn(name, traits)
                self.assertEqual(traits[name].this_class.__name__, "KubeSpawner")
                self.assertTrue(traits[name].help)
                value = f"probe-{name}"
                config = Config({"KubeSpawner": {name: value}})
                if entry["status"] == "not applicable" or name in refused:
                    with self.assertRaises(TraitError):
                        make_spawner("http://127.0.0.1:1", config=config)
                    continue
                spawner = make_spawner("http://127.0.0.1:1", config=config)
                self.assertEqual(getattr(spawner, name), value)
                self.assertEqual(make_spawner("http://127.0.0.1:1").trait_defaults(name), entry["default"])

    def test_base_options_stay_jupyterhubs(self):
        for name in ("cmd", "args", "environment", "cpu_limit", "mem_guarantee", "start_timeout", "default_url", "notebook_dir", "ip", "port", "env_keep"):
            with self.subTest(name=name):
                trait = SpawnkitSpawner.class_traits()[name]
                self.assertNotEqual(trait.this_class.__name__, "KubeSpawner")
        self.assertEqual(make_spawner("http://127.0.0.1:1", config=Config({"KubeSpawner": {"mem_limit": "1G"}})).mem_limit, 1 << 30)

    def test_options_changed_in_place_by_the_config(self):
        # z2jh's extraConfig: c.KubeSpawner.<option>.update / .append on
        # options whose default here is None (KubeSpawner's is {} or []).
        c = Config()
        c.KubeSpawner.extra_labels.update({"team": "a"})
        c.KubeSpawner.volumes.append({"name": "shared", "emptyDir": {}})
        c.SpawnkitSpawner.volumes.append({"name": "scratch", "emptyDir": {}})
        for _ in range(2):
            spawner = make_spawner("http://127.0.0.1:1", config=c)
            self.assertEqual(spawner.extra_labels, {"team": "a"})
            self.assertEqual(spawner.volumes, [{"name": "shared", "emptyDir": {}}, {"name": "scratch", "emptyDir": {}}])

    def test_mutable_defaults_are_per_spawner(self):
        a = make_spawner("http://127.0.0.1:1")
        b = make_spawner("http://127.0.0.1:1")
        a.common_labels["x"] = "y"
        self.assertNotIn("x", b.common_labels)
        self.assertNotIn("x", OPTIONS["common_labels"]["default"])

    def test_the_package_does_not_export_kubespawner(self):
        self.assertFalse(hasattr(spawnkit_jupyterhub, "KubeSpawner"))
        self.assertNotIn("KubeSpawner", spawnkit_jupyterhub.__all__)
        self.assertIn("KubeSpawner", [c.__name__ for c in SpawnkitSpawner.__mro__])

    def test_slugs_as_the_service_makes_them(self):
        for text, want in {
            "Data Science – GPU": "data-science-gpu",
            "Éléphant 2": "elephant-2",
            "  --x--  ": "x",
            "GPU Server (A100)": "gpu-server-a100",
            "Small (1 CPU, 1G)": "small-1-cpu-1g",
        }.items():
            self.assertEqual(slugify(text), want)


class SerializationTest(unittest.TestCase):
    def test_plain_values(self):
        when = datetime.datetime(2024, 5, 27, 12, 0, tzinfo=datetime.timezone.utc)
        self.assertEqual(
            to_json({"a": (1, 2.5, None, True), "b": {"c": None}, "t": when}),
            {"a": [1, 2.5, None, True], "b": {"c": None}, "t": "2024-05-27T12:00:00+00:00"},
        )

    # Skipped only off CI: CI installs the client (.ci/run), so that a
    # missing one fails rather than passes unseen.
    @unittest.skipIf(
        V1Container is None and os.environ.get("CI") != "true",
        "the kubernetes client is not installed (Debian: python3-kubernetes)",
    )
    def test_kubernetes_models_as_the_client_serializes_them(self):
        self.assertIsNotNone(V1Container, "the kubernetes client is not installed (Debian: python3-kubernetes), required because CI=true")
        objects = [
            V1Container(
                name="sidecar",
                image="busybox",
                args=["sleep", "infinity"],
                env=[V1EnvVar(name="A", value="1"), {"name": "B", "value": None}],
                security_context=V1SecurityContext(run_as_user=1000, allow_privilege_escalation=False),
            ),
            {"meta": V1ObjectMeta(name="x", labels={"a": "b"}, creation_timestamp=datetime.datetime(2024, 1, 2, 3, 4, 5))},
        ]
        self.assertEqual(to_json(objects), ApiClient().sanitize_for_serialization(objects))
        self.assertEqual(
            to_json(objects[0]),
            {
                "args": ["sleep", "infinity"],
                "env": [{"name": "A", "value": "1"}, {"name": "B", "value": None}],
                "image": "busybox",
                "name": "sidecar",
                "securityContext": {"allowPrivilegeEscalation": False, "runAsUser": 1000},
            },
        )


if __name__ == "__main__":
    unittest.main()


class HubIdTest(ServiceTestCase):
    """hub_id names this hub at a service several hubs share."""

    async def test_every_request_names_the_hub(self):
        spawner = make_spawner(self.service.url, hub_id="hub-a")
        await spawner.start()
        await spawner.poll()
        await spawner.stop()
        self.assertTrue(self.service.requests)
        for r in self.service.requests:
            self.assertEqual(r.hub, "hub-a", r)

    async def test_no_hub_id_sends_no_header(self):
        spawner = make_spawner(self.service.url)
        await spawner.start()
        self.assertTrue(self.service.requests)
        self.assertEqual({r.hub for r in self.service.requests}, {None})

    def test_a_malformed_hub_id_fails_naming_it(self):
        for bad in ("Hub_A", "-a", "a" * 64, "hub a"):
            with self.assertRaises(TraitError) as cm:
                make_spawner("http://127.0.0.1:1", hub_id=bad)
            self.assertIn("hub_id", str(cm.exception))
