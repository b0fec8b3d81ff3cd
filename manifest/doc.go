// Package manifest builds the pod, PVC, secret, service and namespace of
// a user server as client-go objects, as pure functions of a typed spec.
//
// Not yet implemented: this package is a placeholder in the module layout.
package manifest
