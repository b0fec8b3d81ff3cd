// Package hubfail names why JupyterHub failed a server's start, as the
// hub itself saw it, for the hub bench (examples/jupyterhub,
// hubbench_test.go): a count of failed starts says nothing about what to
// fix.
//
// Classify reads, in this order, the answer to the start request (POST
// /hub/api/users/{name}/server), the failed event of the start's
// progress stream, and the hub's log lines that name the user (Lines),
// and returns the first cause it recognises, with the message it drew it
// from. The patterns are JupyterHub 3.0's own wording (jupyterhub/user.py,
// handlers/base.py, apihandlers/users.py and utils.py), KubeSpawner 7.1's
// and SpawnkitSpawner's; a message none of them matches is KindOther,
// with the message kept. Everything here is pure and safe for concurrent
// use.
package hubfail
