package service

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"

	"github.com/spawnkit/spawnkit/spawner"
)

// HubHeader names the hub a request comes from, when several hubs share
// one service: a DNS label (the Python Spawner's hub_id). A server
// records the hub that started it (spawner.State.Hub, on its pod), and a
// hub is answered only about servers of its own or of none: another
// hub's server is unknown to it (404), and its start is refused (409)
// while that server is not stopped. A request without the header is the
// single hub's of a service that serves one, and sees every server. Hubs
// share the service's token, so the header separates hubs that make
// mistakes (the same user names), not hubs that attack each other.
const HubHeader = "Spawnkit-Hub"

var hubID = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// hubOf reads HubHeader ("" when absent).
func hubOf(r *http.Request) (string, error) {
	vs := r.Header.Values(HubHeader)
	switch {
	case len(vs) == 0:
		return "", nil
	case len(vs) > 1:
		return "", errBadRequest(reasonBadRequest, fmt.Errorf("%s is given %d times: give it once", HubHeader, len(vs)))
	case !hubID.MatchString(vs[0]):
		return "", errBadRequest(reasonBadRequest, fmt.Errorf("%s %q: want a DNS label (lower case letters, digits and '-', at most 63)", HubHeader, vs[0]))
	}
	return vs[0], nil
}

// ownerOf is the hub a status's server was started by ("" for none).
func ownerOf(st serverStatus) string {
	switch s := st.State.(type) {
	case spawner.State:
		return s.Hub
	case *spawner.State:
		if s != nil {
			return s.Hub
		}
	}
	return ""
}

// visible reports whether hub may see the server of st.
func visible(st serverStatus, hub string) bool {
	owner := ownerOf(st)
	return hub == "" || owner == "" || owner == hub
}

// notYours is the 404 a hub gets for another hub's server.
func notYours(s serverID) error {
	return errNotFound(fmt.Errorf("no server %q of user %q of hub %q (the server is another hub's)", s.Name, s.User, s.Hub))
}

// ownership checks that s's hub may act on the server, by its status:
// nil when the request names no hub, or the server is unknown or
// visible, else notYours (with the status found).
func (a *api) ownership(r *http.Request, s serverID) (*serverStatus, error) {
	if s.Hub == "" {
		return nil, nil // the single hub's request sees every server
	}
	st, err := a.b.Poll(r.Context(), s)
	var ae *apiError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !visible(st, s.Hub) {
		return &st, notYours(s)
	}
	return &st, nil
}
