package hubfail_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/spawnkit/spawnkit/examples/jupyterhub/internal/hubfail"
)

// A JupyterHub 3.0 log around the failed starts of several users, lines
// as the hub writes them (user.py, handlers/base.py, apihandlers/users.py)
// with the lines of the users around them.
const hubLog = `[I 2026-12-07 23:40:01.101 JupyterHub log:186] 202 POST /hub/api/users/bench-0001/server (spawnkit-test@127.0.0.1) 12.31ms
[I 2026-12-07 23:40:01.102 JupyterHub log:186] 202 POST /hub/api/users/bench-0010/server (spawnkit-test@127.0.0.1) 11.02ms
[W 2026-12-07 23:45:01.200 JupyterHub user:824] bench-0001's server failed to start in 300 seconds, giving up.
    
    Common causes of this timeout, and debugging tips:
    
    1. Everything is working, but it took too long.
[W 2026-12-07 23:41:02.300 JupyterHub user:881] bench-0002's server never showed up at http://127.0.0.1:41234/user/bench-0002/ after 30 seconds. Giving up.
[E 2026-12-07 23:41:02.400 JupyterHub user:832] Unhandled error starting bench-0003's server: spawnkit service at http://127.0.0.1:8765 unreachable (POST /v1/users/bench-0003/server): HTTP 599: Timeout in request queue
    Traceback (most recent call last):
[E 2026-12-07 23:41:02.500 JupyterHub user:890] Unhandled error waiting for bench-0004's server to show up at http://127.0.0.1:8888/user/bench-0004/: HTTP 500: Internal Server Error
[E 2026-12-07 23:41:02.600 JupyterHub base:985] Failed to add bench-0005 to proxy!
[E 2026-12-07 23:41:02.601 JupyterHub base:986] Stopping bench-0005 to avoid inconsistent state
[W 2026-12-07 23:41:02.700 JupyterHub users:763] Server bench-0005 didn't start for unknown reason
[E 2026-12-07 23:41:02.800 JupyterHub user:832] Unhandled error starting bench-0006's server: the start was refused by a webhook
[E 2026-12-07 23:41:02.900 JupyterHub user:832] Unhandled error starting bench-0007's server: ErrImagePull: image quay.io/x:1 cannot be pulled
[E 2026-12-07 23:41:03.000 JupyterHub user:842] Failed to cleanup bench-0001's server that failed to start
`

func TestLines(t *testing.T) {
	tests := []struct {
		name, user string
		want       []string // the lines' last words
	}{
		// Only the first line of a multi-line message names the user.
		{"a name that another continues", "bench-0001", []string{"12.31ms", "up.", "start"}},
		{"a name in a URL and a possessive", "bench-0002", []string{"up."}},
		{"a name as a prefix only", "bench-001", nil},
		{"a name followed by a space", "bench-0005", []string{"proxy!", "state", "reason"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, l := range hubfail.Lines(hubLog, tt.user) {
				f := strings.Fields(l)
				got = append(got, f[len(f)-1])
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Lines(%q) ends %q, want %q", tt.user, got, tt.want)
			}
		})
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name       string
		user       string
		o          hubfail.Observation
		kind, from string
		message    string // a part of Cause.Message
	}{
		// From the start request's answer.
		{"no answer", "bench-0100", noAnswer(`Post "http://127.0.0.1:8000/hub/api/users/bench-0100/server": read tcp 127.0.0.1:5000->127.0.0.1:8000: read: connection reset by peer`), hubfail.KindNoAnswer, "POST", "connection reset"},
		{"concurrent_spawn_limit", "bench-0101", answered(429, `{"status": 429, "message": "Too many users trying to log in right now. Try again in 60 seconds."}`), hubfail.KindSpawnLimit, "POST", "Too many users"},
		{"active_server_limit", "bench-0102", answered(429, `{"status": 429, "message": "Active user limit exceeded. Try again in a few minutes."}`), hubfail.KindActiveLimit, "POST", "Active user limit"},
		{"JupyterHub refuses", "bench-0103", answered(400, `{"status": 400, "message": "bench-0103 is pending stop"}`), hubfail.PostKind(400, true), "POST", "pending stop"},
		{"spawner died during slow_spawn_timeout", "bench-0104", answered(500, `{"status": 500, "message": "Spawner failed to start [status=1]. The logs for bench-0104 may contain details."}`), hubfail.PostKind(500, true), "POST", "Spawner failed to start"},
		{"proxy's own page", "bench-0105", answered(503, "Service Unavailable"), hubfail.PostKind(503, false), "POST", "Service Unavailable"},
		{"proxy with the hub's error page", "bench-0106", answered(503, "<!DOCTYPE HTML>\n<html>\n<head>\n<title>JupyterHub</title>"), hubfail.PostKind(503, false), "POST", "<!DOCTYPE HTML> <html>"},
		// From the progress stream's failed event.
		{"start_timeout", "bench-0200", failedEvent("Spawn failed: Timeout"), hubfail.KindStartTimeout, "progress", "Timeout"},
		{"http_timeout", "bench-0201", failedEvent("Spawn failed: Server at http://127.0.0.1:41234/user/bench-0201/ didn't respond in 30 seconds"), hubfail.KindHTTPTimeout, "progress", "didn't respond in 30 seconds"},
		{"KubeSpawner's own start timeout", "bench-0202", failedEvent("Spawn failed: pod default/jupyter-bench-0202 did not start in 300 seconds!"), hubfail.KindPodNotStarted, "progress", "did not start"},
		{"KubeSpawner cannot create the pod", "bench-0203", failedEvent("Spawn failed: Could not create pod default/jupyter-bench-0203"), hubfail.KindPodNotCreated, "progress", "Could not create pod"},
		{"service unreachable", "bench-0204", failedEvent("Spawn failed: spawnkit service at http://127.0.0.1:8765 unreachable (POST /v1/users/bench-0204/server): HTTP 599: Connection refused"), hubfail.KindUnreachable, "progress", "Connection refused"},
		{"service slow", "bench-0205", failedEvent("Spawn failed: bench-0205: no answer from the spawnkit service in time"), hubfail.KindServiceSlow, "progress", "in time"},
		{"service's verdict", "bench-0206", failedEvent("Spawn failed: ErrImagePull: image quay.io/x:1 cannot be pulled"), hubfail.KindServicePrefix + "ErrImagePull", "progress", "cannot be pulled"},
		// The log, when the stream says no more than "Spawn failed".
		{"bare Spawn failed, proxy add in the log", "bench-0005", failedEvent("Spawn failed"), hubfail.KindProxyAdd, "hub log", "Failed to add bench-0005 to proxy!"},
		{"bare Spawn failed, nothing in the log", "bench-0300", failedEvent("Spawn failed"), hubfail.KindUnknownFailure, "progress", "Spawn failed"},
		{"unknown message, nothing in the log", "bench-0301", failedEvent("Spawn failed: something else"), hubfail.KindOther, "progress", "something else"},
		// The log alone (the stream broken or not followed).
		{"log: start_timeout", "bench-0001", brokenStream("unexpected EOF"), hubfail.KindStartTimeout, "hub log", "failed to start in 300 seconds"},
		{"log: http_timeout", "bench-0002", accepted, hubfail.KindHTTPTimeout, "hub log", "never showed up"},
		{"log: spawner error", "bench-0003", accepted, hubfail.KindUnreachable, "hub log", "Timeout in request queue"},
		{"log: error waiting", "bench-0004", accepted, hubfail.KindWaitUpError, "hub log", "HTTP 500"},
		{"log: an error no pattern knows", "bench-0006", accepted, hubfail.KindOther, "hub log", "refused by a webhook"},
		{"log: the service's verdict", "bench-0007", accepted, hubfail.KindServicePrefix + "ErrImagePull", "hub log", "ErrImagePull"},
		// Nothing but the stream's end, or nothing at all.
		{"broken stream", "bench-0400", brokenStream("unexpected EOF"), hubfail.KindOther, "", "unexpected EOF"},
		{"dropped", "bench-0401", accepted, hubfail.KindDropped, "", "listed no server"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.o.HubLog = hubfail.Lines(hubLog, tt.user)
			c := hubfail.Classify(tt.user, tt.o)
			if c.Kind != tt.kind || c.Source != tt.from || !strings.Contains(c.Message, tt.message) {
				t.Errorf("Classify(%s) = %+v, want kind %q from %q, message with %q", tt.user, c, tt.kind, tt.from, tt.message)
			}
		})
	}
}

// accepted is a start JupyterHub accepted (202) and nothing else said.
var accepted = hubfail.Observation{PostStatus: 202}

func noAnswer(err string) hubfail.Observation { return hubfail.Observation{PostErr: err} }

func answered(status int, body string) hubfail.Observation {
	return hubfail.Observation{PostStatus: status, PostBody: body}
}

func failedEvent(msg string) hubfail.Observation {
	return hubfail.Observation{PostStatus: 202, Failed: msg}
}

func brokenStream(err string) hubfail.Observation {
	return hubfail.Observation{PostStatus: 202, StreamErr: err}
}
