// Package reflector hands out shared, reference-counted pod and event
// informers built on client-go.
//
// Not yet implemented: this package is a placeholder in the module layout.
package reflector
