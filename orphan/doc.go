// Package orphan lists and safely deletes cluster resources that no
// server known to the hub owns.
//
// Not yet implemented: this package is a placeholder in the module layout.
package orphan
