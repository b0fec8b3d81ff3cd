# The version of spawnkit this package belongs to: spawner.Version in the
# Go module (spawner/spawner.go). examples/jupyterhub's TestPythonVersion
# fails when the two differ.
__version__ = "0.2.0"
