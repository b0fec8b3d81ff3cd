# JupyterHub with spawnkit instead of KubeSpawner.
#
# The Kubernetes options (image, profile_list, cpu_limit, storage_*,
# extra_*, namespace, ...) can live in either of two places. Here, as
# c.KubeSpawner.<option> (what Zero to JupyterHub writes): SpawnkitSpawner
# reads them and sends them with each start, and the service bounds them
# by its -hub-policy. Or, as this example does, in the spawner-service's
# YAML (spawner-service.yaml next to this file), under the same names,
# where only the operator of the service sets them. What stays here then
# is what JupyterHub itself uses: the hub, the authenticator, and the
# Spawner options of JupyterHub's own base class (start_timeout,
# http_timeout, poll_interval, cmd, args, pre_spawn_hook, ...).
#
#   pip install ./python    # from the repository root: spawnkit-jupyterhub, where JupyterHub runs
#   SPAWNKIT_SERVICE_TOKEN=$(cat token) jupyterhub -f jupyterhub_config.py
#
# See README.md for the whole switch.
import os

c = get_config()  # noqa: F821 (provided by JupyterHub)

# The spawnkit-jupyterhub package registers SpawnkitSpawner under this name.
c.JupyterHub.spawner_class = "spawnkit"

# Where the spawner-service listens (its -listen flag; 127.0.0.1:8765 by
# default) and the token it expects (its -token-file); the token defaults
# to $SPAWNKIT_SERVICE_TOKEN.
c.SpawnkitSpawner.service_url = os.environ.get("SPAWNKIT_SERVICE_URL", "http://127.0.0.1:8765")

# JupyterHub's own timeouts, as zero-to-jupyterhub sets them for
# KubeSpawner. Keep start_timeout at or above the service's start_timeout
# (its YAML; default 300): when JupyterHub gives up first it stops the
# server, which cancels the start and deletes the pod.
c.Spawner.start_timeout = 300
c.Spawner.http_timeout = 30

# A hub restart or upgrade must not stop anybody's server: the pods run on
# and JupyterHub finds them again through the service.
c.JupyterHub.cleanup_servers = False

c.JupyterHub.allow_named_servers = True
