"""spawnkit-jupyterhub: JupyterHub's Spawner for spawnkit's spawner-service.

SpawnkitSpawner hands every server to the spawner-service
(cmd/spawnkit-service in the spawnkit repository), which creates the
Kubernetes objects from a KubeSpawner-style YAML configuration and the
hub's own c.KubeSpawner options, sent with each start. The
package registers it as the "spawnkit" entry point of the
jupyterhub.spawners group, so that

    c.JupyterHub.spawner_class = "spawnkit"

selects it. `python -m spawnkit_jupyterhub --version` prints the
package's version (spawnkit's, the Go module's) and JupyterHub's.

SpawnkitSpawner subclasses a class named KubeSpawner
(spawnkit_jupyterhub._kubespawner) that holds KubeSpawner's options as
traits: traitlets hands the c.KubeSpawner.<option> settings that
zero-to-jupyterhub writes only to classes with a class of that name in
their MRO. It is not KubeSpawner and is not exported here, so that no
configuration imports it for the real one.
"""

from ._version import __version__
from .errors import NotTheService, ServiceTLSError, ServiceUnavailable, SpawnkitError
from .spawner import SpawnkitSpawner

__all__ = ["SpawnkitSpawner", "SpawnkitError", "ServiceUnavailable", "ServiceTLSError", "NotTheService", "__version__"]
