// Package vectorrules is what the reference-vector tests of naming,
// manifest and spawner share to state where spawnkit deliberately
// differs from KubeSpawner: a rule has a name and a one-sentence reason,
// and selects the cases it excuses by a predicate over the case's input
// (each test owns its predicates), never by case name, so a new case of
// a listed kind is handled and a case of another kind is not excused.
//
// A Tally counts how the cases of one vector file matched (exactly, or
// through which rules, or not at all) and gives the log line every vector
// test ends with. A Tally is not safe for concurrent use.
package vectorrules
