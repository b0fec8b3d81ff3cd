package service

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/spawner"
)

// maxBodyBytes bounds every request body; a larger one is refused (413).
const maxBodyBytes = 1 << 20

// handlerOptions configure newHandler: Options without the Manager.
type handlerOptions struct {
	Token      func() string
	Keepalive  time.Duration
	Log        logr.Logger
	Registerer prometheus.Registerer
}

// api serves the v1 API over a backend. It is safe for concurrent use:
// it holds no state of its own.
type api struct {
	b         backend
	keepalive time.Duration
}

// newHandler returns the v1 API: every path, known or not, needs the
// bearer token, and every error is a JSON {error, reason} body.
func newHandler(b backend, opts handlerOptions) (http.Handler, error) {
	if opts.Keepalive <= 0 {
		opts.Keepalive = 15 * time.Second
	}
	a := &api{b: b, keepalive: opts.Keepalive}
	mux := http.NewServeMux()
	// The default server, then named ones, as in JupyterHub's own API.
	for _, s := range []string{"/v1/users/{user}/server", "/v1/users/{user}/servers/{name}"} {
		mux.Handle("POST "+s, a.handle(a.spawn))
		mux.Handle("GET "+s, a.handle(a.poll))
		mux.Handle("DELETE "+s, a.handle(a.delete))
		mux.Handle("GET "+s+"/progress", a.handle(a.progress))
		mux.Handle("PUT "+s+"/state", a.handle(a.seed))
	}
	mux.Handle("GET /v1/servers", a.handle(a.list))
	mux.Handle("GET /v1/users/{user}/options-form", a.handle(a.optionsForm))
	mux.Handle("POST /v1/users/{user}/options-form", a.handle(a.optionsForm))
	mux.Handle("POST /v1/users/{user}/options-from-form", a.handle(a.optionsFromForm))
	mux.Handle("GET /v1/healthz", a.handle(func(w http.ResponseWriter, r *http.Request) error {
		if err := b.Ready(r.Context()); err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, map[string]bool{"ok": true})
		return nil
	}))
	m, err := newRequestMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	// Metrics outermost but for the log: a refused token is counted too.
	return traceContext(logRequests(opts.Log, m.instrument(mux, identify(requireToken(opts.Token, jsonFallback(mux)))))), nil
}

// ServiceHeader is on every answer of the API, 401s and 404s included,
// with the module's version: a hub tells the service from whatever else
// answers at a misconfigured URL (another server, a proxy's error page)
// by it, and can then fail a start at once, naming the URL and what
// answered, instead of retrying until its start timeout.
const ServiceHeader = "Spawnkit-Service"

func identify(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(ServiceHeader, spawner.Version)
		next.ServeHTTP(w, r)
	})
}

// handle turns a handler's error into the JSON error answer.
func (a *api) handle(h func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := checkPath(r); err != nil {
			writeError(w, err)
			return
		}
		if err := a.b.Ready(r.Context()); err != nil && r.Pattern != "GET /v1/healthz" {
			// A standby, or a replica still recovering, must not
			// answer: its state may be behind the leader's, and the hub
			// retries on the replica that is ready.
			writeError(w, err)
			return
		}
		if err := h(w, r); err != nil {
			var ae *apiError
			if !errors.As(err, &ae) {
				logr.FromContextOrDiscard(r.Context()).Error(err, "request failed", "method", r.Method, "path", r.URL.EscapedPath())
			}
			writeError(w, err)
		}
	})
}

// checkPath refuses user and server names in the path that no hub can
// have (NUL bytes, invalid UTF-8) before any handler sees them.
func checkPath(r *http.Request) error {
	if _, err := hubOf(r); err != nil {
		return err
	}
	if !strings.Contains(r.Pattern, "{user}") {
		return nil
	}
	if err := naming.ValidateServer(naming.Server{Username: r.PathValue("user"), Servername: r.PathValue("name")}); err != nil {
		return errBadRequest(reasonBadRequest, err)
	}
	return nil
}

// serverOf names the request's server and hub (checkPath has checked
// the hub's header).
func serverOf(r *http.Request) serverID {
	hub, _ := hubOf(r)
	return serverID{User: r.PathValue("user"), Name: r.PathValue("name"), Hub: hub}
}

func (a *api) spawn(w http.ResponseWriter, r *http.Request) error {
	var body struct {
		UserOptions map[string]json.RawMessage `json:"user_options"`
		Env         map[string]string          `json:"env"`
		Cmd         []string                   `json:"cmd"`
		Args        []string                   `json:"args"`
		UserID      int64                      `json:"user_id"`
		HubVersion  string                     `json:"hub_version"`
		Attributes  map[string]json.RawMessage `json:"attributes"`
		State       *spawner.State             `json:"state"`
		Config      json.RawMessage            `json:"config"`
	}
	if err := readJSON(w, r, &body); err != nil {
		return err
	}
	attrs, err := hubAttributes(body.Attributes)
	if err != nil {
		return err
	}
	opts, err := userOptions(body.UserOptions)
	if err != nil {
		return err
	}
	env, err := envVars(body.Env)
	if err != nil {
		return err
	}
	req := spawnRequest{UserOptions: opts, Env: env, Args: body.Args, UserID: body.UserID, HubVersion: body.HubVersion, Attributes: attrs, State: body.State}
	if c := bytes.TrimSpace(body.Config); len(c) > 0 && !bytes.Equal(c, []byte("null")) {
		req.Config = body.Config
	}
	if len(body.Cmd) > 0 {
		req.Cmd = body.Cmd
	}
	s := serverOf(r)
	if known, err := a.ownership(r, s); err != nil && (known == nil || (known.Phase != "stopped" && known.Phase != "failed")) {
		// Another hub's server may start for this hub only once it is
		// stopped (its pod gone): the server is then this hub's.
		if known != nil {
			return errConflict(fmt.Errorf("server %q of user %q is another hub's (%q), and %s: two hubs on one service need distinct user names", s.Name, s.User, ownerOf(*known), known.Phase))
		}
		return err
	}
	req.Hub = s.Hub
	st, started, err := a.b.Spawn(r.Context(), s, req)
	if err != nil {
		return err
	}
	if !visible(st, s.Hub) {
		// Another hub's start won the race.
		return errConflict(fmt.Errorf("server %q of user %q is another hub's (%q), and %s", s.Name, s.User, ownerOf(st), st.Phase))
	}
	code := http.StatusOK
	if started {
		code = http.StatusAccepted
	}
	writeJSON(w, code, st)
	return nil
}

// seed takes the state the hub saved for a server (PUT .../state, the
// body a ServerStatus's "state") and answers the server's status.
func (a *api) seed(w http.ResponseWriter, r *http.Request) error {
	var st spawner.State
	if err := readJSON(w, r, &st); err != nil {
		return err
	}
	s := serverOf(r)
	if _, err := a.ownership(r, s); err != nil {
		return err
	}
	status, err := a.b.Seed(r.Context(), s, st)
	if err != nil {
		return err
	}
	if !visible(status, s.Hub) {
		return notYours(s)
	}
	writeJSON(w, http.StatusOK, status)
	return nil
}

// hubAttributes checks the attributes a hub set on its Spawner: only
// kubespawner.HubAttributes, each a number or a string (JupyterHub's
// cpu_limit is a float, mem_limit an int or a string with a unit); the
// values themselves are checked as configuration values by the start.
func hubAttributes(raw map[string]json.RawMessage) (map[string]any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	out := make(map[string]any, len(raw))
	for k, v := range raw {
		if !slices.Contains(kubespawner.HubAttributes, k) {
			return nil, errBadRequest(reasonInvalidUserOptions,
				fmt.Errorf("attributes[%q]: not an attribute the service takes; it takes %s", k, strings.Join(kubespawner.HubAttributes, ", ")))
		}
		if bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			continue // unset, as JupyterHub's None
		}
		var num json.Number
		var str string
		trimmed := bytes.TrimSpace(v)
		switch {
		case len(trimmed) > 0 && trimmed[0] == '"' && json.Unmarshal(v, &str) == nil:
			out[k] = str // "4G" stays a string: a number in quotes is not a number
		case json.Unmarshal(v, &num) == nil:
			f, err := num.Float64()
			if err != nil {
				return nil, errBadRequest(reasonInvalidUserOptions, fmt.Errorf("attributes[%q] is %s: %w", k, v, err))
			}
			out[k] = f
		default:
			return nil, errBadRequest(reasonInvalidUserOptions, fmt.Errorf("attributes[%q] is %s: want a number or a string", k, v))
		}
	}
	return out, nil
}

// userOptions takes strings as they are and a one-element list of strings
// as its element (form data, as JupyterHub hands it on); anything else is
// refused, since a profile option is one string.
func userOptions(raw map[string]json.RawMessage) (map[string]string, error) {
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		var s string
		if err := json.Unmarshal(v, &s); err == nil && !bytes.Equal(bytes.TrimSpace(v), []byte("null")) {
			out[k] = s
			continue
		}
		var list []string
		if err := json.Unmarshal(v, &list); err == nil && len(list) == 1 {
			out[k] = list[0]
			continue
		}
		return nil, errBadRequest(reasonInvalidUserOptions,
			fmt.Errorf("user_options[%q] is %s: want a string or a list of one string", k, v))
	}
	return out, nil
}

// envVars sorts the environment by name: a map has no order, and a pod's
// env list does matter ($(VAR) references resolve only to variables
// listed earlier); sorting also makes the same request give the same pod.
func envVars(env map[string]string) ([]corev1.EnvVar, error) {
	out := make([]corev1.EnvVar, 0, len(env))
	for k, v := range env {
		if k == "" {
			return nil, errBadRequest(reasonBadRequest, errors.New("env has an empty variable name"))
		}
		if msgs := validation.IsRelaxedEnvVarName(k); len(msgs) > 0 {
			// The API server would refuse the pod after the claim exists:
			// ValidateEnv's rule from Kubernetes 1.32 on (any printable
			// ASCII but '=').
			return nil, errBadRequest(reasonBadRequest, fmt.Errorf("env[%q]: %s", k, strings.Join(msgs, "; ")))
		}
		out = append(out, corev1.EnvVar{Name: k, Value: v})
	}
	slices.SortFunc(out, func(a, b corev1.EnvVar) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (a *api) poll(w http.ResponseWriter, r *http.Request) error {
	s := serverOf(r)
	st, err := a.b.Poll(r.Context(), s)
	if err != nil {
		return err
	}
	if !visible(st, s.Hub) {
		return notYours(s)
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// delete is DELETE {S}: a stop, or with forever=true the hub deleting
// the server for good (JupyterHub's delete_forever), which is refused
// while the server runs.
func (a *api) delete(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	for k := range q {
		if k != "now" && k != "forever" {
			return errBadRequest(reasonBadRequest, fmt.Errorf("unknown query parameter %q (DELETE takes now and forever)", k))
		}
	}
	now, err := boolParam(q, "now")
	if err != nil {
		return err
	}
	forever, err := boolParam(q, "forever")
	if err != nil {
		return err
	}
	if _, err := a.ownership(r, serverOf(r)); err != nil {
		return err
	}
	if forever {
		if now {
			return errBadRequest(reasonBadRequest, errors.New("forever=true deletes a stopped server; now applies to a stop: stop first, then delete"))
		}
		if err := a.b.DeleteForever(r.Context(), serverOf(r)); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	st, err := a.b.Stop(r.Context(), serverOf(r), now)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// boolParam reads a query parameter given once as true or false (absent:
// false).
func boolParam(q url.Values, name string) (bool, error) {
	vs, ok := q[name]
	if !ok {
		return false, nil
	}
	if len(vs) != 1 {
		return false, errBadRequest(reasonBadRequest, fmt.Errorf("%s is given %d times: give it once", name, len(vs)))
	}
	b, err := strconv.ParseBool(vs[0])
	if err != nil {
		return false, errBadRequest(reasonBadRequest, fmt.Errorf("%s=%q: want true or false", name, vs[0]))
	}
	return b, nil
}

func (a *api) list(w http.ResponseWriter, r *http.Request) error {
	list, err := a.b.List(r.Context())
	if err != nil {
		return err
	}
	hub, _ := hubOf(r)
	list = slices.DeleteFunc(list, func(st serverStatus) bool { return !visible(st, hub) })
	if list == nil {
		list = []serverStatus{} // [] rather than null
	}
	writeJSON(w, http.StatusOK, list)
	return nil
}

// readJSON decodes the body into v, refusing unknown fields, trailing data
// and bodies over maxBodyBytes; an empty body leaves v as it is.
func readJSON(w http.ResponseWriter, r *http.Request, v any) error {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return &apiError{Status: http.StatusRequestEntityTooLarge, Reason: reasonTooLarge,
			Err: fmt.Errorf("the body is larger than %d bytes", tooLarge.Limit)}
	case err != nil:
		return errBadRequest(reasonBadRequest, fmt.Errorf("reading the body: %w", err))
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errBadRequest(reasonBadRequest, fmt.Errorf("the body is not the JSON expected: %w", err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errBadRequest(reasonBadRequest, errors.New("the body has data after its JSON value"))
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	// application/json is never rendered as HTML: messages keep their
	// < and > readable.
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// errorBody is every error answer.
type errorBody struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
}

func writeError(w http.ResponseWriter, err error) {
	code, reason := http.StatusInternalServerError, reasonInternal
	var ae *apiError
	if errors.As(err, &ae) {
		code, reason = ae.Status, ae.Reason
		if ae.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(ae.RetryAfter/time.Second)))
		}
	}
	writeJSON(w, code, errorBody{Error: err.Error(), Reason: reason})
}

// requireToken refuses any request without "Authorization: Bearer
// <token>". Both sides are hashed first so that the constant-time compare
// does not leak the token's length either.
//
// token is asked on every request, so a rotated token takes effect at
// once; while it is "" nothing is accepted.
func requireToken(token func() string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		current := token()
		want := sha256.Sum256([]byte(current))
		scheme, cred, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		got := sha256.Sum256([]byte(strings.TrimSpace(cred)))
		// The scheme is case-insensitive (RFC 9110 section 11.1).
		if current == "" || !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="spawnkit"`)
			writeError(w, &apiError{Status: http.StatusUnauthorized, Reason: reasonUnauthorized, Err: tokenError(current, r.Header.Get("Authorization"))})
			return
		}
		next.ServeHTTP(w, r)
	})
}

// tokenError says which token setting to look at on each side. It tells
// only what the caller sent (no header, another scheme, a wrong token) or
// that the service has none, never anything of the token itself.
func tokenError(current, header string) error {
	const sides = "the hub sends SpawnkitSpawner.service_token (default: $SPAWNKIT_SERVICE_TOKEN in the hub's environment) as Authorization: Bearer <token>; " +
		"the service's token is the file of -token-file, else $SPAWNKIT_SERVICE_TOKEN in its environment"
	scheme, _, _ := strings.Cut(header, " ")
	switch {
	case current == "":
		return errors.New("the service has no token, so it refuses every request: give it one (cmd/spawnkit-service: -token-file or $SPAWNKIT_SERVICE_TOKEN; the SDK: service.Options.Token)")
	case header == "":
		return errors.New("missing token: no Authorization header; " + sides)
	case !strings.EqualFold(scheme, "Bearer"):
		// The scheme is not printed: a header without one holds the
		// token itself, which a hub could then log.
		return errors.New("missing token: the Authorization header is not Bearer <token>; " + sides)
	}
	return errors.New("wrong token: the hub's token is not the service's; " + sides)
}

// jsonFallback answers what mux does not route (an unknown path, a method
// the path does not have) with a JSON error instead of ServeMux's text.
func jsonFallback(mux *http.ServeMux) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h, pattern := mux.Handler(r)
		if pattern != "" {
			mux.ServeHTTP(w, r)
			return
		}
		rec := &codeRecorder{header: http.Header{}, code: http.StatusOK}
		h.ServeHTTP(rec, r)
		for _, k := range []string{"Allow", "Location"} {
			if v := rec.header.Get(k); v != "" {
				w.Header().Set(k, v)
			}
		}
		switch rec.code {
		case http.StatusNotFound:
			writeError(w, errNotFound(fmt.Errorf("no such path: %s", r.URL.EscapedPath())))
		case http.StatusMethodNotAllowed:
			writeError(w, &apiError{Status: rec.code, Reason: reasonMethodNotAllowed,
				Err: fmt.Errorf("%s is not allowed on %s (allowed: %s)", r.Method, r.URL.EscapedPath(), rec.header.Get("Allow"))})
		default: // a redirect to the clean path
			writeJSON(w, rec.code, errorBody{Error: "see " + rec.header.Get("Location"), Reason: http.StatusText(rec.code)})
		}
	})
}

// codeRecorder keeps the status and headers ServeMux's own answer would
// have had, and drops its body.
type codeRecorder struct {
	header http.Header
	code   int
}

func (c *codeRecorder) Header() http.Header         { return c.header }
func (c *codeRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (c *codeRecorder) WriteHeader(code int)        { c.code = code }
