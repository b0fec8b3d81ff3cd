// Package examples holds spawnkit's reference programs, one directory
// each, with a README: devcluster starts the simulated cluster the tests
// use. The quickstart, hub, spawner-service and orphan-sweeper programs
// follow as their packages land.
package examples
