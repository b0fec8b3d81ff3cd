package main

// The HTTP bounds (server.go) on real loopback connections, with bounds
// of about a second so that each case takes seconds: what a client that
// sends nothing, trickles a body, stalls one nobody reads, idles, or
// stops reading its answer holds, and for how long; and what a client
// that behaves is never cut short of.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// testBounds are serviceBounds shortened. idle is well above read, so
// that an idle close tells IdleTimeout from net/http's fallback to
// ReadTimeout when it is not set.
var testBounds = func() httpBounds {
	b := serviceBounds
	b.header, b.read, b.write, b.idle = time.Second, 2*time.Second, time.Second, 4*time.Second
	return b
}()

// boundSlack is how much later than its bound a close may come on a
// loaded machine (a race-instrumented build on two cores).
const boundSlack = 10 * time.Second

// boundServer serves h within b on a free loopback port; the test's
// cleanup closes it.
func boundServer(t *testing.T, b httpBounds, h http.Handler) (addr string) {
	t.Helper()
	ln, err := b.listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := b.server(h)
	done := make(chan struct{})
	go func() { // owned by the test: its cleanup closes the server and waits
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String()
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

// handlerEnded fails the test unless done is closed within d.
func handlerEnded(t *testing.T, done <-chan struct{}, d time.Duration) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("the handler still runs after %s", d)
	}
}

// TestServerBounds: each way a client can hold a connection ends within
// its bound (and not before), and neither a handler that takes long
// after reading its body nor a stream that outlasts every bound is cut.
func TestServerBounds(t *testing.T) {
	b := testBounds
	const header = "POST /v1/x HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"

	t.Run("a connection that sends nothing closes at the header bound", func(t *testing.T) {
		t.Parallel()
		addr := boundServer(t, b, http.NotFoundHandler())
		c := dial(t, addr)
		_, took := untilClosed(t, c, time.Now(), b.header+boundSlack)
		if took < b.header/2 {
			t.Errorf("closed after %s, before the header bound %s", took, b.header)
		}
	})

	t.Run("a trickled body fails its read at the read bound and the connection closes", func(t *testing.T) {
		t.Parallel()
		done := make(chan struct{})
		readErr := make(chan error, 1)
		addr := boundServer(t, b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer close(done)
			_, err := io.ReadAll(r.Body)
			readErr <- err
			http.Error(w, "the body did not arrive", http.StatusBadRequest)
		}))
		c := dial(t, addr)
		start := time.Now()
		write(t, c, header)
		// One byte every 100 ms: always something arriving, never the
		// whole body.
		stop := make(chan struct{})
		trickled := make(chan struct{})
		go func() { // owned by the test: stopped and waited for below
			defer close(trickled)
			tick := time.NewTicker(100 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					if _, err := c.Write([]byte("x")); err != nil {
						return
					}
				}
			}
		}()
		defer func() { close(stop); <-trickled }()
		answer, took := untilClosed(t, c, start, b.read+boundSlack)
		handlerEnded(t, done, boundSlack)
		if err := <-readErr; !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("the handler's read of the body ended with %v, want a deadline exceeded", err)
		}
		if took < b.read/2 {
			t.Errorf("closed after %s, before the read bound %s", took, b.read)
		}
		if !strings.HasPrefix(answer, "HTTP/1.1 400") {
			t.Errorf("answer %q, want the handler's 400", answer)
		}
	})

	t.Run("a stalled body nobody reads (a refusal) closes at the read bound", func(t *testing.T) {
		t.Parallel()
		done := make(chan struct{})
		addr := boundServer(t, b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer close(done)
			http.Error(w, "missing or wrong token", http.StatusUnauthorized)
		}))
		c := dial(t, addr)
		start := time.Now()
		write(t, c, header+`{"env": {`)
		handlerEnded(t, done, boundSlack)
		// net/http reads what is left of the body before it answers.
		answer, took := untilClosed(t, c, start, b.read+boundSlack)
		if took < b.read/2 {
			t.Errorf("closed after %s, before the read bound %s", took, b.read)
		}
		if !strings.HasPrefix(answer, "HTTP/1.1 401") {
			t.Errorf("answer %q, want the handler's 401", answer)
		}
	})

	t.Run("a body read in time lifts the read deadline", func(t *testing.T) {
		t.Parallel()
		addr := boundServer(t, b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			// As a DELETE waits for its pod: longer than the read
			// bound, on the request's context.
			select {
			case <-r.Context().Done():
				http.Error(w, "the request's context ended", http.StatusInternalServerError)
			case <-time.After(b.read + b.read/2):
				fmt.Fprintf(w, "%d bytes", len(body))
			}
		}))
		c := dial(t, addr)
		br := bufio.NewReader(c)
		if err := c.SetDeadline(time.Now().Add(4*b.read + boundSlack)); err != nil {
			t.Fatal(err)
		}
		for i := range 2 { // the second on the same connection
			write(t, c, "POST /v1/x HTTP/1.1\r\nHost: test\r\nContent-Length: 2\r\n\r\n{}")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			data, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK || string(data) != "2 bytes" {
				t.Fatalf("request %d: %d %q %v, want 200 \"2 bytes\"", i, resp.StatusCode, data, err)
			}
		}
	})

	t.Run("a stream outlasts every bound", func(t *testing.T) {
		t.Parallel()
		longest := max(b.header, b.read, b.write, b.idle)
		const every = 100 * time.Millisecond
		n := int((longest + time.Second) / every)
		addr := boundServer(t, b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rc := http.NewResponseController(w)
			for i := range n {
				if _, err := fmt.Fprintf(w, "event %d\n", i); err != nil {
					return
				}
				if rc.Flush() != nil || r.Context().Err() != nil {
					return
				}
				// A stream paced slower than every bound is what this
				// case is about: the pause is the test's input.
				time.Sleep(every)
			}
			fmt.Fprintln(w, "end")
		}))
		client := &http.Client{Timeout: longest + boundSlack}
		resp, err := client.Get("http://" + addr + "/v1/users/u/server/progress")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if err != nil || len(lines) != n+1 || lines[n] != "end" {
			t.Errorf("the stream ended after %d of %d events (%v); last %q", len(lines), n, err, lines[len(lines)-1])
		}
	})

	t.Run("an idle keep-alive connection closes at the idle bound", func(t *testing.T) {
		t.Parallel()
		addr := boundServer(t, b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, "ok")
		}))
		c := dial(t, addr)
		if err := c.SetReadDeadline(time.Now().Add(boundSlack)); err != nil {
			t.Fatal(err)
		}
		write(t, c, "GET /v1/servers HTTP/1.1\r\nHost: test\r\n\r\n")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Close {
			t.Fatalf("answer %d (close %t), want 200 keeping the connection", resp.StatusCode, resp.Close)
		}
		start := time.Now()
		if err := c.SetReadDeadline(start.Add(b.idle + boundSlack)); err != nil {
			t.Fatal(err)
		}
		rest, err := io.ReadAll(br)
		took := time.Since(start)
		if err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("the idle connection is still open after %s: %v", took, err)
		}
		if len(rest) > 0 {
			t.Errorf("the idle connection got %q", rest)
		}
		if took < b.idle-b.header {
			t.Errorf("closed after %s, before the idle bound %s", took, b.idle)
		}
	})

	t.Run("a client that stops reading is dropped at the write bound", func(t *testing.T) {
		t.Parallel()
		done := make(chan struct{})
		writeErr := make(chan error, 1)
		addr := boundServer(t, b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			defer close(done)
			chunk := make([]byte, 1<<20)
			// Far more than any socket buffer holds: the writes block
			// once the client's window and the server's buffer are full.
			for range 1 << 10 {
				if _, err := w.Write(chunk); err != nil {
					writeErr <- err
					return
				}
			}
			writeErr <- nil
		}))
		c := dial(t, addr)
		write(t, c, "GET /v1/servers HTTP/1.1\r\nHost: test\r\n\r\n")
		handlerEnded(t, done, b.write+boundSlack)
		if err := <-writeErr; err == nil {
			t.Error("1 GiB written to a client that reads nothing")
		}
	})

	t.Run("headers over the bound are refused, headers within it served", func(t *testing.T) {
		t.Parallel()
		addr := boundServer(t, b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, "ok")
		}))
		for _, tc := range []struct {
			size int
			want string
		}{{b.maxHeaderBytes / 2, "HTTP/1.1 200"}, {2 * b.maxHeaderBytes, "HTTP/1.1 431"}} {
			c := dial(t, addr)
			start := time.Now()
			write(t, c, "GET /v1/servers HTTP/1.1\r\nHost: test\r\nConnection: close\r\nX-Big: "+strings.Repeat("a", tc.size)+"\r\n\r\n")
			answer, _ := untilClosed(t, c, start, boundSlack)
			if !strings.HasPrefix(answer, tc.want) {
				t.Errorf("a header of %d bytes: answer %.60q, want %s", tc.size, answer, tc.want)
			}
		}
	})
}
