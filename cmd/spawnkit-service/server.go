package main

import (
	"net"
	"net/http"
	"time"
)

// httpBounds are how long a client may keep the service waiting: anyone
// who reaches a port, token or not, gets a connection and a goroutine,
// and these bounds give both back.
//
// read is http.Server.ReadTimeout, a deadline on reading the request,
// headers and body, from its first byte. It does not cut a request whose
// handler runs long after: net/http lifts the read deadline once the
// body is read (at once without one), for the background read that
// notices a client going away (Go issue 18447; net/http's
// TestServerCancelsReadTimeoutWhenIdle). So a progress stream or a
// DELETE waiting for its pod runs as long as it needs, while a body that
// does not arrive fails its Read at the deadline and the connection
// closes after the answer. A handler that answers without reading the
// body (a wrong token) returns at once; net/http reads what is left of
// the body, under the same deadline, before it answers.
//
// No WriteTimeout: it is a deadline on the whole answer, which a
// progress stream outlasts. Each write has a bound of its own instead
// (writeBoundConn), which a client that reads its answer never meets.
type httpBounds struct {
	// header bounds reading a request's headers (and a TLS handshake);
	// a connection that sends nothing is closed after it.
	header time.Duration
	// read bounds reading a request's headers and body.
	read time.Duration
	// write bounds each write to the client: one that takes longer (a
	// client that stopped reading) closes the connection.
	write time.Duration
	// idle bounds a keep-alive connection's wait for its next request.
	idle time.Duration
	// maxHeaderBytes bounds a request's headers.
	maxHeaderBytes int
}

// serviceBounds are the API's and the probes'. A hub sends small JSON
// bodies (at most 1 MiB, package service's limit) from nearby, but it
// may send them late: the header bound runs from the moment the service
// accepts the connection, and a hub's Python event loop writes the
// request only when it gets to it after the connect. With 1,000 users
// starting at once on two cores JupyterHub 3.0's loop ran about 20 s
// behind, and a header bound of 10 s closed 44 of its 1,000 progress
// streams before their requests came (issue 47). 60 s for the headers
// and for the whole request leaves room for that, and still gives back
// a connection that never sends anything. idle is above the 90 s after which
// Go's http.Transport drops an idle connection, so that a Go client
// closes first rather than reuse one the service is closing. The
// headers a hub sends (a bearer token, a few standard ones) fit 64 KiB
// many times over.
var serviceBounds = httpBounds{
	header:         60 * time.Second,
	read:           60 * time.Second,
	write:          30 * time.Second,
	idle:           120 * time.Second,
	maxHeaderBytes: 64 << 10,
}

// server is an http.Server for h within b. Serve it on a listener from
// b.listen.
func (b httpBounds) server(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: b.header,
		ReadTimeout:       b.read,
		IdleTimeout:       b.idle,
		MaxHeaderBytes:    b.maxHeaderBytes,
	}
}

// listen listens on addr with every write of every connection bounded
// by b.write. Put TLS over it, so that the TLS records are written
// within the bound too.
func (b httpBounds) listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return writeBoundListener{Listener: ln, bound: b.write}, nil
}

// writeBoundListener's connections bound each Write (writeBoundConn).
type writeBoundListener struct {
	net.Listener
	bound time.Duration
}

func (l writeBoundListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &writeBoundConn{Conn: c, bound: l.bound}, nil
}

// writeBoundConn gives each Write its own deadline, bound from its
// start: a stream may last for hours, but no write to it may stall for
// longer than bound. A write deadline set by anyone else is replaced at
// the next Write (net/http sets none without WriteTimeout, but for the
// TLS handshake, which the read deadline bounds too). net/http writes
// to a connection from one goroutine at a time.
type writeBoundConn struct {
	net.Conn
	bound time.Duration
}

func (c *writeBoundConn) Write(p []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.bound)); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

// CloseWrite keeps net/http's graceful close: after a last answer on a
// connection it will not read from again (a body left unread), it shuts
// its side down and lets the client read the answer before closing, so
// that the client gets the answer rather than a reset.
func (c *writeBoundConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
