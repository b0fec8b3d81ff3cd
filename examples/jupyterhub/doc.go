// Package jupyterhub is the example of JupyterHub on spawnkit:
// SpawnkitSpawner, the JupyterHub Spawner of the spawnkit-jupyterhub
// package (python/ at the repository's root), drives spawnkit through the
// spawner service (cmd/spawnkit-service); here are an example
// jupyterhub_config.py and the service's KubeSpawner-style YAML. See
// README.md.
//
// Its Go tests install the package into a fresh venv over Debian's
// JupyterHub with pip, offline, run that JupyterHub with
// configurable-http-proxy and the spawner-service on a simulated cluster,
// and drive them through JupyterHub's REST API and a headless Chromium,
// a burst of users at once in one of them. They also run the package's
// Python unit tests. They skip when JupyterHub or what the install needs
// is missing, except under CI=true, where they fail; an install that
// fails always fails them.
package jupyterhub
