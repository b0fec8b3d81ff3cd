// Package spawner starts, polls and stops one user server (Spawner) or
// the many servers of a hub (Manager).
//
// Not yet implemented: this package is a placeholder in the module layout.
package spawner
