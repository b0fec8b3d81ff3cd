// Package phase times the phases of a server's start and stop and turns
// them into OpenTelemetry spans, metric observations and progress
// messages. It is spawnkit's own (internal): the spawner and the Manager
// feed it, and nothing in it talks to the API server.
//
// A Timeline learns of a start's pod from what the start already follows
// (the shared informer's pod updates, through the start's subscription
// predicate, and the pod's events): it adds no request, no watch and no
// wake-up of its own. Each phase boundary is the time spawnkit saw it,
// by the start's clock, so children never begin before their parent and
// the spans of one start never overlap out of order.
//
// A Tracer with a nil TracerProvider is off: every method is then a
// no-op that allocates nothing.
package phase
