package service

// The binary's HTTP bounds (cmd/spawnkit-service/server.go) on real
// loopback connections. The bounds are the ones the binary logs at -v 1,
// so that the test follows the command's values without reading its
// internals; cmd/spawnkit-service's TestServerBounds covers each bound
// with shortened values.

import (
	"errors"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

// boundSlack is how much later than its bound a close may come on a
// loaded machine (a race-instrumented build on two cores).
const boundSlack = 10 * time.Second

// loggedBounds are the bounds a process started with -v 1 logged.
type loggedBounds struct {
	header, read   time.Duration
	maxHeaderBytes int
}

// boundsLine matches the values of the V(1) line of the HTTP bounds.
var boundsLine = regexp.MustCompile(`"header"="([^"]+)" "read"="([^"]+)" .*"maxHeaderBytes"=(\d+)`)

// bounds reads the HTTP bounds s logged at start (s runs with -v 1).
func (s *binService) bounds(t *testing.T) loggedBounds {
	t.Helper()
	lines := s.waitLines(t, 0, "the HTTP bounds", `"level"=1`, "HTTP bounds")
	m := boundsLine.FindStringSubmatch(lines[0])
	if m == nil {
		t.Fatalf("the HTTP bounds' line does not give header, read and maxHeaderBytes: %s", lines[0])
	}
	var b loggedBounds
	var errs [3]error
	b.header, errs[0] = time.ParseDuration(m[1])
	b.read, errs[1] = time.ParseDuration(m[2])
	b.maxHeaderBytes, errs[2] = strconv.Atoi(m[3])
	if err := errors.Join(errs[:]...); err != nil {
		t.Fatalf("the HTTP bounds' line %s: %v", lines[0], err)
	}
	return b
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func write(t *testing.T, c net.Conn, s string) {
	t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		t.Fatal(err)
	}
}

// untilClosed reads c until the server closes it (EOF, or a reset: a
// server closing with input unread resets), at most within; it returns
// what was read and how long the close took from since. A connection
// still open after within fails the test.
func untilClosed(t *testing.T, c net.Conn, since time.Time, within time.Duration) (string, time.Duration) {
	t.Helper()
	if err := c.SetReadDeadline(since.Add(within)); err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(c)
	took := time.Since(since)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the connection is still open after %s (read: %v); got %q", took.Round(time.Millisecond), err, data)
	}
	return string(data), took
}

// TestBinaryHTTPBounds: the binary's API and probes are served within
// the bounds it logs (its serviceBounds): headers over the bound are refused on both, a
// connection that sends nothing is closed at the header bound, and a
// client without the token that stalls a body is closed at the read
// bound (before, it held its connection and a goroutine for ever).
func TestBinaryHTTPBounds(t *testing.T) {
	c := testcluster.Require(t, cluster)
	e := newBinEnv(t, c, "bounds-test-token")
	s := e.start(t, "spawnkit-service bounds", "-v", "1")
	s.waitReady(t)
	b := s.bounds(t)
	for _, addr := range []string{s.listen, s.probes} {
		conn := dial(t, addr)
		write(t, conn, "GET /readyz HTTP/1.1\r\nHost: test\r\nX-Big: "+strings.Repeat("a", 2*b.maxHeaderBytes)+"\r\n\r\n")
		if answer, _ := untilClosed(t, conn, time.Now(), boundSlack); !strings.HasPrefix(answer, "HTTP/1.1 431") {
			t.Errorf("%s: headers of %d bytes answered %.60q, want 431", addr, 2*b.maxHeaderBytes, answer)
		}
	}
	for name, addr := range map[string]string{"API": s.listen, "probes": s.probes} {
		t.Run("a connection that sends nothing to the "+name, func(t *testing.T) {
			t.Parallel()
			_, took := untilClosed(t, dial(t, addr), time.Now(), b.header+boundSlack)
			if took < b.header/2 {
				t.Errorf("closed after %s, before the header bound %s", took, b.header)
			}
		})
	}
	t.Run("a request sent long after the connect", func(t *testing.T) {
		t.Parallel()
		// A hub's event loop under a burst writes its request only when
		// it gets to it: JupyterHub 3.0's ran about 20 s behind with 1,000
		// users starting at once, and a 10 s header bound closed its
		// progress streams unanswered. The connection must still be
		// served, with the answer, after a lag that long.
		const lag = 20 * time.Second
		if b.header <= lag || b.read <= lag {
			t.Fatalf("the header bound %s and read bound %s close a hub's connection that lags %s", b.header, b.read, lag)
		}
		conn := dial(t, s.listen)
		time.Sleep(lag) // the hub's event loop, busy elsewhere
		write(t, conn, "GET /v1/healthz HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer bounds-test-token\r\nConnection: close\r\n\r\n")
		if answer, _ := untilClosed(t, conn, time.Now(), boundSlack); !strings.HasPrefix(answer, "HTTP/1.1 200") {
			t.Errorf("a request %s after the connect was answered %.80q, want 200", lag, answer)
		}
	})
	t.Run("a stalled body without the token", func(t *testing.T) {
		t.Parallel()
		conn := dial(t, s.listen)
		start := time.Now()
		write(t, conn, "POST "+serverPath("stalled")+" HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{")
		answer, took := untilClosed(t, conn, start, b.read+boundSlack)
		if took < b.read/2 {
			t.Errorf("closed after %s, before the read bound %s", took, b.read)
		}
		if !strings.HasPrefix(answer, "HTTP/1.1 401") {
			t.Errorf("answer %.60q, want 401", answer)
		}
	})
}
