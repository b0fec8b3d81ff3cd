"""What SpawnkitSpawner sends the service for each spawn of a z2jh vector
file: the hub_config of each value set loaded as JupyterHub loads
jupyterhub_config.py's result (a traitlets Config with the KubeSpawner,
Spawner and JupyterHub sections), k8s model values revived as the
kubernetes client's own objects (z2jh builds V1Container objects), and
the start body the Spawner builds for the spawn's user, server and user
options. Prints {case name: [body per spawn]} as JSON.

Usage: /usr/bin/python3 z2jh_hub_config.py VECTORS.json (with the
package's directory, python/, on PYTHONPATH).
"""

import asyncio
import json
import sys
import types

import kubernetes.client
from jupyterhub import orm
from jupyterhub.objects import Hub, Server
from traitlets.config import Config

from spawnkit_jupyterhub import SpawnkitSpawner

_client = kubernetes.client.ApiClient()


def revive(value):
    if isinstance(value, dict):
        if "__k8s_model__" in value:
            # The client's own deserializer, as a hub's V1Container(...)
            # call would have built it.
            return _client._ApiClient__deserialize(value["value"], value["__k8s_model__"])
        if "__callable__" in value or "__lazy_config_value__" in value:
            raise SystemExit(f"cannot revive {value}: the vector names a callable or lazy value")
        return {k: revive(v) for k, v in value.items()}
    if isinstance(value, list):
        return [revive(v) for v in value]
    return value


def config_of(hub_config):
    cfg = Config()
    for section in ("KubeSpawner", "Spawner"):
        for key, value in (hub_config.get(section) or {}).items():
            cfg[section][key] = revive(value)
    return cfg


async def body_of(case, spawn):
    hub_object = case["hub_object"]
    user = spawn["user"]
    user_obj = types.SimpleNamespace(
        name=user["name"], id=user["id"], url=spawn["user_url"], escaped_name=user["name"]
    )
    orm_spawner = types.SimpleNamespace(
        name=spawn["server_name"], server=None, state=None, user_options=None
    )
    hub = Hub(base_url=hub_object["base_url"])
    hub.connect_url = hub_object["url"]
    spawner = SpawnkitSpawner(
        config=config_of(case["hub_config"]),
        user=user_obj,
        hub=hub,
        orm_spawner=orm_spawner,
        api_token="golden-api-token-0123456789abcdef",
        oauth_client_id=spawn["oauth_client_id"],
        service_url="http://127.0.0.1:1",
        service_token="unused",
    )
    # As JupyterHub's User.spawn: a Server over its database row (a Server
    # without one does not stick to the spawner).
    spawner.server = Server(orm_server=orm.Server(proto="http", ip="", port=0, base_url=spawn["server_base_url"], cookie_name="jupyterhub-user"))
    spawner.user_options = dict(spawn["user_options"] or {})
    return await spawner._start_body()


async def main(path):
    with open(path) as f:
        vectors = json.load(f)
    out = {}
    for case in vectors["cases"]:
        if not case.get("hub_config"):
            continue
        out[case["name"]] = [await body_of(case, spawn) for spawn in case["spawns"]]
    json.dump(out, sys.stdout)


asyncio.run(main(sys.argv[1]))
