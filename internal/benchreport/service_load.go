package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// svcClient talks to the service's API as a hub does: a bearer token,
// keep-alive connections, one per request in flight.
type svcClient struct {
	base string
	http *http.Client
}

func newSvcClient(p *svcProc, inFlight int) *svcClient {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = inFlight, inFlight
	return &svcClient{base: "http://" + p.listen, http: &http.Client{Transport: tr}}
}

func (c *svcClient) close() { c.http.CloseIdleConnections() }

func (c *svcClient) do(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+serviceToken)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return c.http.Do(req)
}

// call makes one request and decodes a 2xx answer into out (when not
// nil); any other answer is an error naming it.
func (c *svcClient) call(ctx context.Context, method, path string, body []byte, out any) error {
	resp, err := c.do(ctx, method, path, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, bytes.TrimSpace(data))
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(data, out)
}

// svcStatus is the part of the API's server status the report reads.
type svcStatus struct {
	User  string `json:"user"`
	Phase string `json:"phase"`
	URL   string `json:"url"`
	Ready bool   `json:"ready"`
}

func svcUser(i int) string { return fmt.Sprintf("svc%05d", i) }

// spawnBody is the start a JupyterHub sends for user i (the Python
// spawner's body without a hub configuration: user options, the
// environment JupyterHub sets, the user id, the hub's version).
func spawnBody(i int) []byte {
	env := map[string]string{}
	for _, e := range hubEnv(svcUser(i)) {
		env[e.Name] = e.Value
	}
	body, _ := json.Marshal(map[string]any{"user_options": map[string]any{}, "env": env, "args": []string{},
		"user_id": i + 1, "hub_version": "5.3.0"})
	return body
}

// startOne starts server i as the Python spawner's start does: POST the
// start, follow the progress stream to its final event, then GET the
// status (its state and URL).
func (c *svcClient) startOne(ctx context.Context, i int) error {
	path := "/v1/users/" + svcUser(i) + "/server"
	if err := c.call(ctx, http.MethodPost, path, spawnBody(i), nil); err != nil {
		return err
	}
	resp, err := c.do(ctx, http.MethodGet, path+"/progress", nil)
	if err != nil {
		return err
	}
	final := ""
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if kind, ok := strings.CutPrefix(sc.Text(), "event: "); ok && kind != "progress" {
			final = kind
		}
	}
	_ = resp.Body.Close()
	if final != "ready" {
		return fmt.Errorf("%s: the progress stream ended with %q, not ready", svcUser(i), final)
	}
	var st svcStatus
	if err := c.call(ctx, http.MethodGet, path, nil, &st); err != nil {
		return err
	}
	if st.Phase != "running" || st.URL == "" {
		return fmt.Errorf("%s: %s without a URL after its ready event", svcUser(i), st.Phase)
	}
	return nil
}

// burst starts servers 0..n-1 with at most inFlight starts at once and
// returns when every one is ready, or at the first failure.
func (c *svcClient) burst(ctx context.Context, n, inFlight int) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(inFlight)
	var done atomic.Int64
	stopReport := reportEvery(ctx, 10*time.Second, func() string { return fmt.Sprintf("%d/%d ready", done.Load(), n) })
	defer stopReport()
	for i := range n {
		g.Go(func() error {
			if err := c.startOne(gctx, i); err != nil {
				return err
			}
			done.Add(1)
			return nil
		})
	}
	return g.Wait()
}

// reportEvery writes what() to stderr every period until the returned
// stop.
func reportEvery(ctx context.Context, period time.Duration, what func() string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				fmt.Fprintln(os.Stderr, "  ", what())
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}

// countRunning lists every server and counts those running with a URL.
func (c *svcClient) countRunning(ctx context.Context) (int, error) {
	var list []svcStatus
	if err := c.call(ctx, http.MethodGet, "/v1/servers", nil, &list); err != nil {
		return 0, err
	}
	n := 0
	for _, st := range list {
		if st.Phase == "running" && st.Ready && st.URL != "" {
			n++
		}
	}
	return n, nil
}

// pollResult is what a polling window observed on the client.
type pollResult struct {
	Sent, Failed int
	// Late is how many requests could not be sent on time because
	// maxPollsInFlight were already waiting.
	Late     int
	P50, P99 time.Duration
}

// maxPollsInFlight bounds the polls waiting for an answer: far more than
// a service answering within its goal ever has.
const maxPollsInFlight = 256

// pollLoad sends rate GET-status requests per second for window, spread
// evenly in time and over servers 0..n-1 (each server in turn, in an
// order shuffled once, as a hub's poll timers are), and reports their
// latency as the client sees it.
func (c *svcClient) pollLoad(ctx context.Context, n int, rate float64, window time.Duration) (pollResult, error) {
	order := rand.Perm(n)
	paths := make([]string, n)
	for i, u := range order {
		paths[i] = "/v1/users/" + svcUser(u) + "/server"
	}
	var (
		mu        sync.Mutex
		latencies []time.Duration
		failed    int
		firstErr  error
		wg        sync.WaitGroup
	)
	slots := make(chan struct{}, maxPollsInFlight)
	res := pollResult{}
	begin := time.Now()
	interval := time.Duration(float64(time.Second) / rate)
	for next := begin; next.Before(begin.Add(window)); next = next.Add(interval) {
		if d := time.Until(next); d > 0 {
			select {
			case <-ctx.Done():
				wg.Wait()
				return res, context.Cause(ctx)
			case <-time.After(d):
			}
		}
		select {
		case slots <- struct{}{}:
		default:
			res.Late++
			continue
		}
		path := paths[res.Sent%n]
		res.Sent++
		wg.Go(func() {
			defer func() { <-slots }()
			t0 := time.Now()
			var st svcStatus
			err := c.call(ctx, http.MethodGet, path, nil, &st)
			if err == nil && st.Phase != "running" {
				err = fmt.Errorf("GET %s: phase %s, want running", path, st.Phase)
			}
			d := time.Since(t0)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				if firstErr == nil {
					firstErr = err
				}
				return
			}
			latencies = append(latencies, d)
		})
	}
	wg.Wait()
	res.Failed = failed
	slices.Sort(latencies)
	if len(latencies) > 0 {
		res.P50, res.P99 = latencies[len(latencies)/2], latencies[len(latencies)*99/100]
	}
	if firstErr != nil {
		return res, fmt.Errorf("%d of %d polls failed, the first: %w", failed, res.Sent, firstErr)
	}
	return res, nil
}
