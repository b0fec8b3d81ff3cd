package hubfail

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
)

// Observation is what the bench saw of one user's failed start.
type Observation struct {
	// PostStatus and PostBody are the answer to the start request; 0
	// when none came, PostErr then says why (the client's error).
	PostStatus int
	PostBody   string
	PostErr    string
	// Failed is the message of the progress stream's failed event
	// ("Spawn failed: ..."), "" when the stream sent none.
	Failed string
	// StreamErr is why the progress stream ended without a final event,
	// "" when it did not (or was not followed).
	StreamErr string
	// HubLog are the hub's log lines about the user (Lines), in order.
	HubLog []string
}

// Cause is why one start failed.
type Cause struct {
	// Kind is one of the Kind constants, or a kind that carries the one
	// word that varies (KindRefusedPrefix, KindServicePrefix).
	Kind string
	// Source is where the cause was read: "POST", "progress", "hub log"
	// or "" (nowhere).
	Source string
	// Message is the message the kind was drawn from, as it was.
	Message string
}

// The kinds of failure. Each is matched by a pattern of JupyterHub's,
// KubeSpawner's or SpawnkitSpawner's wording; the package's test feeds
// each one a message as the hub writes it.
const (
	KindStartTimeout   = "start_timeout (Spawner.start did not return in time)"
	KindHTTPTimeout    = "http_timeout (the server did not answer the hub in time)"
	KindWaitUpError    = "error while the hub waited for the server to answer"
	KindPodNotStarted  = "KubeSpawner: pod did not start in time"
	KindPodNotCreated  = "KubeSpawner: could not create the pod"
	KindUnreachable    = "spawnkit service unreachable"
	KindServiceSlow    = "spawnkit service: no answer in time"
	KindProxyAdd       = "adding the route to configurable-http-proxy failed"
	KindSpawnLimit     = "POST answered 429: concurrent_spawn_limit"
	KindActiveLimit    = "POST answered 429: active_server_limit"
	KindUnknownFailure = "Spawn failed, no reason given by the hub"
	KindDropped        = "dropped: no error anywhere, yet no server"
	KindOther          = "other"
	// KindServicePrefix + the service's reason (ErrImagePull, Timeout,
	// ...): the spawnkit service failed the start and said why.
	KindServicePrefix = "spawnkit service failed the start: "
)

// PostKind is the kind of a start request answered with an error status:
// by JupyterHub (a JSON body with a message) or by the proxy in front of
// it (anything else: configurable-http-proxy's own text, or the hub's
// HTML error page it fetches).
func PostKind(status int, byHub bool) string {
	if byHub {
		return fmt.Sprintf("POST answered %d by JupyterHub", status)
	}
	return fmt.Sprintf("POST answered %d by the proxy", status)
}

// KindNoAnswer is a start request that got no answer at all.
const KindNoAnswer = "POST got no answer"

// messagePatterns match what a failed start says, in the failed event
// (after "Spawn failed: ") or in an "Unhandled error starting" log line
// (after the user's name): the exception the spawner raised.
var messagePatterns = []struct {
	re   *regexp.Regexp
	kind string
}{
	// tornado.gen.with_timeout around Spawner.start (user.py).
	{regexp.MustCompile(`^Timeout$`), KindStartTimeout},
	// utils.wait_for_http_server, bounded by http_timeout.
	{regexp.MustCompile(`^Server at \S+ didn't respond in \d+ seconds`), KindHTTPTimeout},
	// KubeSpawner._start, its own wait bounded by start_timeout.
	{regexp.MustCompile(`^pod \S+ did not start in \d+ seconds`), KindPodNotStarted},
	{regexp.MustCompile(`^Could not create pod `), KindPodNotCreated},
	// SpawnkitSpawner (python/spawnkit_jupyterhub/_api.py, spawner.py).
	{regexp.MustCompile(`^spawnkit service at \S+ unreachable`), KindUnreachable},
	{regexp.MustCompile(`no answer from the spawnkit service in time`), KindServiceSlow},
}

// serviceReason is a SpawnkitSpawner failure that carries the service's
// reason: "Reason: message" (spawner.py's _fail).
var serviceReason = regexp.MustCompile(`^([A-Z][A-Za-z]+): `)

// logPatterns match the hub's log lines about a start; %s is the user's
// name (quoted). First match in this order wins, so that a line written
// while cleaning up after a failure never hides the failure.
var logPatterns = []struct {
	format string
	kind   string // "" : the kind of the message after the match
}{
	{`%s's server failed to start in \d+ seconds, giving up`, KindStartTimeout},
	{`%s's server never showed up at \S+ after \d+ seconds`, KindHTTPTimeout},
	{`Unhandled error waiting for %s's server to show up at \S+: `, KindWaitUpError},
	{`Unhandled error starting %s's server: `, ""},
	{`Failed to add %s to proxy!`, KindProxyAdd},
}

// Classify returns why a start failed: from the answer to its request,
// else its progress stream's failed event, else the hub's log; user is
// whose start it was, as the log names it.
func Classify(user string, o Observation) Cause {
	if o.PostStatus == 0 && o.PostErr != "" {
		return Cause{KindNoAnswer, "POST", o.PostErr}
	}
	if o.PostStatus >= 300 {
		return postCause(o.PostStatus, o.PostBody)
	}
	if msg, ok := strings.CutPrefix(o.Failed, "Spawn failed: "); ok {
		if c := messageCause(msg); c.Kind != KindOther {
			c.Source = "progress"
			return c
		}
	}
	if c, ok := logCause(user, o.HubLog); ok {
		return c
	}
	switch {
	case o.Failed == "Spawn failed":
		return Cause{KindUnknownFailure, "progress", o.Failed}
	case o.Failed != "":
		return Cause{KindOther, "progress", o.Failed}
	case o.StreamErr != "":
		return Cause{KindOther, "", "progress stream: " + o.StreamErr}
	}
	return Cause{KindDropped, "", "JupyterHub accepted the start, then listed no server for it"}
}

func postCause(status int, body string) Cause {
	var e struct {
		Message *string `json:"message"`
	}
	if json.Unmarshal([]byte(body), &e) != nil || e.Message == nil {
		return Cause{PostKind(status, false), "POST", clip(body)}
	}
	msg := *e.Message
	switch {
	case status == 429 && strings.HasPrefix(msg, "Too many users trying to log in right now"):
		return Cause{KindSpawnLimit, "POST", msg}
	case status == 429 && strings.HasPrefix(msg, "Active user limit exceeded"):
		return Cause{KindActiveLimit, "POST", msg}
	}
	return Cause{PostKind(status, true), "POST", msg}
}

// messageCause classifies the message of the exception a start raised.
func messageCause(msg string) Cause {
	for _, p := range messagePatterns {
		if p.re.MatchString(msg) {
			return Cause{Kind: p.kind, Message: msg}
		}
	}
	if m := serviceReason.FindStringSubmatch(msg); m != nil {
		return Cause{Kind: KindServicePrefix + m[1], Message: msg}
	}
	return Cause{Kind: KindOther, Message: msg}
}

func logCause(user string, lines []string) (Cause, bool) {
	for _, p := range logPatterns {
		re := regexp.MustCompile(fmt.Sprintf(p.format, regexp.QuoteMeta(user)))
		for _, line := range lines {
			loc := re.FindStringIndex(line)
			if loc == nil {
				continue
			}
			msg := line
			if _, m, ok := strings.Cut(line, "] "); ok {
				msg = m // without "[W 2006-01-02 ... JupyterHub user:123] "
			}
			c := Cause{Kind: p.kind, Message: msg}
			if p.kind == "" {
				c.Kind = messageCause(line[loc[1]:]).Kind
			}
			c.Source = "hub log"
			return c, true
		}
	}
	return Cause{}, false
}

// Lines returns the lines of a JupyterHub log that name user: as a whole
// name, so that "bench-1" does not take bench-10's lines.
func Lines(log, user string) []string {
	var out []string
	for _, line := range strings.Split(log, "\n") {
		for i := 0; ; {
			j := strings.Index(line[i:], user)
			if j < 0 {
				break
			}
			j += i
			end := j + len(user)
			if !nameByte(line, j-1) && !nameByte(line, end) {
				out = append(out, line)
				break
			}
			i = j + 1
		}
	}
	return out
}

// nameByte reports whether line[i] could continue a JupyterHub user
// name; outside the line, it cannot.
func nameByte(line string, i int) bool {
	if i < 0 || i >= len(line) {
		return false
	}
	c := line[i]
	return c == '-' || c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func clip(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
