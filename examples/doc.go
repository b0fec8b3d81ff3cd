// Package examples holds spawnkit's reference programs, one directory
// each, with a README: quickstart spawns, polls and stops three servers
// on a simulated cluster (the README's main command); devcluster starts
// the simulated cluster alone; hub is a small HTTP hub over
// spawner.Manager; orphan-sweeper lists and deletes objects no known server
// owns.
package examples
