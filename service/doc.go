// Package service is spawnkit's spawner API over HTTP: what a hub written
// in another language (JupyterHub above all) calls to start, watch and
// stop per-user servers that a manager.Manager runs. cmd/spawnkit-service
// serves it as a deployable service; a Go team mounts New's handler in
// its own server instead.
//
// The API is versioned under /v1/ and described by OpenAPI, whose
// document the package embeds. Its contracts, each tested:
//
//   - Every request, on every path, known or not, needs the bearer token
//     Options.Token returns at that moment; a rotated token is the only
//     one accepted from the next request on, and an empty one refuses
//     everything.
//   - Every error is a JSON {error, reason} body with a CamelCase reason.
//   - A start is idempotent (POST: 202 when it began, 200 when the server
//     already starts or runs), a stop waits until the pod is gone, and
//     DELETE ?forever=true is JupyterHub's delete_forever, refused (409)
//     unless the server is stopped.
//   - A replica that must not answer (a standby under leader election:
//     NotLeader; one shutting down: NotReady) answers every route 503
//     with Retry-After and passes nothing to the Manager.
//   - The request log carries the query string's keys, never its values,
//     and never the token; metric labels carry route patterns, never a
//     user's name. A successful read (a hub's poll, a list) is logged at
//     V(1), every change, progress stream and error at V(0).
//
// Probes serves /livez, /readyz and /metrics for an address of its own,
// without the token and without user data.
package service
