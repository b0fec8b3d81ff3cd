package service

import (
	_ "embed"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/spawnkit/spawnkit/manager"
)

//go:embed openapi.yaml
var openAPI []byte

// OpenAPI returns the API's OpenAPI 3 document (openapi.yaml): every path,
// request, response and error reason New's handler serves. It is a copy;
// changing it changes nothing.
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }

// Options configure New. Manager and Token are required.
type Options struct {
	// Manager runs the servers. The caller starts it (Manager.Start) and
	// stops it; until it has recovered the cluster's servers the API
	// answers 503 NotReady, and while another replica leads, 503
	// NotLeader.
	Manager *manager.Manager
	// Token returns the bearer token every request must carry. It is
	// called on every request, so a token rotated at its source is the
	// only one accepted from the next request on. While it returns ""
	// every request is refused (401): an API that creates pods never
	// runs open.
	Token func() string
	// Keepalive is how often a progress stream sends a comment so that
	// proxies keep an idle stream open. Default: 15 s.
	Keepalive time.Duration
	// Log receives one line per request, a successful read (GET or HEAD
	// answered below 400, a progress stream aside: a hub's polls) at V(1)
	// and every other at V(0) (the query string without its
	// values, so that a token sent there is never logged) and every
	// failure that is the service's own (500). Default: discard.
	Log logr.Logger
	// Registerer, when set, receives the API's request metrics:
	//
	//	spawnkit_service_http_requests_total{route,method,code}
	//	spawnkit_service_http_request_duration_seconds{route,method}
	//
	// route is the path pattern (/v1/users/{user}/server, ...), never a
	// user's name; unrouted paths count as route "other".
	Registerer prometheus.Registerer
	// HubPolicy bounds what a hub's own configuration (a start's
	// "config": its c.KubeSpawner options, set over the Manager's
	// Config) may make. The zero policy takes hub configurations but
	// allows none of the pod features HubPolicy lists.
	HubPolicy HubPolicy
}

// New returns the v1 API over opts.Manager as an http.Handler, to serve
// alone (cmd/spawnkit-service) or mounted in a Go team's own server
// under "/v1/". Every path, known or not, needs the bearer token, and
// every error is a JSON {error, reason} body. The handler is safe for
// concurrent use.
func New(opts Options) (http.Handler, error) {
	if opts.Manager == nil {
		return nil, errors.New("service: Options.Manager is required")
	}
	if opts.Token == nil {
		return nil, errors.New("service: Options.Token is required")
	}
	if err := opts.HubPolicy.Check(); err != nil {
		return nil, fmt.Errorf("service: %w", err)
	}
	hub := &hubConfigs{base: opts.Manager.Config(), policy: opts.HubPolicy}
	return newHandler(&managerBackend{m: opts.Manager, hub: hub}, handlerOptions{
		Token: opts.Token, Keepalive: opts.Keepalive, Log: opts.Log, Registerer: opts.Registerer,
	})
}
