// Package naming renders the names of a user server's Kubernetes objects
// from templates, with KubeSpawner 7.1's slug schemes reproduced to the
// byte.
//
// Not yet implemented: this package is a placeholder in the module layout.
package naming
