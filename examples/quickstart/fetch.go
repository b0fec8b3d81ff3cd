package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"time"
)

// fetchTimeout bounds fetch as a whole, retries included.
const fetchTimeout = 2 * time.Second

// fetch GETs a server's URL and returns the body it answered with. It
// dials loopback addresses only: the simulated cluster's pods have
// loopback IPs, and the quickstart must never reach into a network (a
// real cluster's pod IPs are not fetched; see README). A refused
// connection is retried until fetchTimeout, because a server's listener
// may come up a moment after the pod is reported ready.
func fetch(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	dialer := &net.Dialer{
		// Control runs after name resolution and before connect(2), so
		// no packet leaves for an address that is not loopback.
		Control: func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			if ip, err := netip.ParseAddr(host); err != nil || !ip.IsLoopback() {
				return fmt.Errorf("%w: %s", errNotLoopback, host)
			}
			return nil
		},
	}
	// No Proxy: an http_proxy from the environment must not carry the
	// request off this machine. No keep-alive: one request per server.
	transport := &http.Transport{DialContext: dialer.DialContext, DisableKeepAlives: true}
	defer transport.CloseIdleConnections()
	client := &http.Client{Transport: transport}
	for {
		body, err := get(ctx, client, url)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
			return body, err
		}
		select {
		case <-ctx.Done():
			return "", err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// errNotLoopback is why fetch refuses a URL.
var errNotLoopback = errors.New("not fetched: only loopback addresses are dialled, and this is not one")

func get(ctx context.Context, client *http.Client, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if err != nil {
		return "", fmt.Errorf("reading the answer of %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return strings.TrimSpace(string(body)), nil
}
