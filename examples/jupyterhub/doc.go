// Package jupyterhub holds SpawnkitSpawner (spawnkit_spawner.py), a
// JupyterHub Spawner that drives spawnkit through the spawner service
// (cmd/spawnkit-service), with an example jupyterhub_config.py and the
// service's KubeSpawner-style YAML. See README.md.
//
// Its Go test runs a real JupyterHub (Debian's) with configurable-http-proxy
// and the spawner-service on a simulated cluster, and drives them through
// JupyterHub's REST API and a headless Chromium. It skips when JupyterHub
// is not installed, except under CI=true, where it fails.
package jupyterhub
