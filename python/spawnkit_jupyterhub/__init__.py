"""spawnkit-jupyterhub: JupyterHub's Spawner for spawnkit's spawner-service.

SpawnkitSpawner hands every server to the spawner-service
(cmd/spawnkit-service in the spawnkit repository), which creates the
Kubernetes objects from a KubeSpawner-style YAML configuration. The
package registers it as the "spawnkit" entry point of the
jupyterhub.spawners group, so that

    c.JupyterHub.spawner_class = "spawnkit"

selects it. `python -m spawnkit_jupyterhub --version` prints the
package's version (spawnkit's, the Go module's) and JupyterHub's.
"""

from ._version import __version__
from .errors import ServiceUnavailable, SpawnkitError
from .spawner import SpawnkitSpawner

__all__ = ["SpawnkitSpawner", "SpawnkitError", "ServiceUnavailable", "__version__"]
