// Package examples holds spawnkit's reference programs, one directory
// each, with a README: quickstart spawns, polls and stops three servers
// on a simulated cluster (the README's main command); devcluster starts
// the simulated cluster alone; jupyterhub is the JupyterHub Spawner class
// that drives cmd/spawnkit-service (the spawner service, no longer an
// example), tested against a real JupyterHub; orphan-sweeper lists and
// deletes objects no known server owns.
package examples
