// Package examples holds spawnkit's reference programs, one directory
// each, with a README: quickstart spawns, polls and stops three servers
// on a simulated cluster (the README's main command); devcluster starts
// the simulated cluster alone. The hub, spawner-service and
// orphan-sweeper programs follow as their packages land.
package examples
