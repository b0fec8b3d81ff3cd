//go:build hubbench

package jupyterhub_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spawnkit/spawnkit/internal/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// benchHub is one side's running hub: its stack (proxy, JupyterHub and,
// for spawnkit, the service) and the processes whose CPU and memory the
// bench reports.
type benchHub struct {
	side    string
	s       *stack
	service *process // spawnkit's service; nil for KubeSpawner
}

// sideResult is what one burst through one hub measured.
type sideResult struct {
	side          string
	users, failed int
	// allReady is from the first start request until the last server
	// was ready; start50/99 the same per user, from its own request.
	allReady, start50, start99 time.Duration
	// progress50/99 is from the test's own watch seeing a pod event, or
	// from the user's progress stream opening if that was later, until
	// the stream showed it, over progressN events; brokenStreams ended
	// without a ready or failed event.
	progress50, progress99   time.Duration
	progressN, brokenStreams int
	// causes is why each failed start failed, as the hub saw it, in
	// the users' order.
	causes []failedStart
	// stopAll is from the first stop request until every pod was gone;
	// podsLeft, when not 0, is how many pods were still there after
	// stopAllBound (stopAll is not a time then: the side did not stop).
	stopAll  time.Duration
	podsLeft int
	// startCalls, idleCalls and stopCalls are the measured client's API
	// requests in each window, by "VERB resource".
	startCalls, idleCalls, stopCalls map[string]int
	// idle is the window with every server running and nothing asked of
	// the hub but JupyterHub's own polls; hubCPUIdle and svcCPUIdle the
	// CPU in it.
	idle, hubCPUIdle, svcCPUIdle time.Duration
	// hub and service: CPU in each window, resident memory at its peak
	// (VmHWM, since the process started) and once all were ready.
	hubCPUStart, hubCPUStop, svcCPUStart, svcCPUStop time.Duration
	hubPeak, hubReady, svcPeak, svcReady             uint64
}

// procUsage is a process's CPU time so far and its resident memory now
// and at its peak, from /proc.
type procUsage struct {
	cpu       time.Duration
	rss, peak uint64 // bytes
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times (100 on
// every Linux this runs on).
const clockTicks = 100

func readUsage(p *process) (procUsage, error) {
	var u procUsage
	if p == nil {
		return u, nil
	}
	pid := p.cmd.Process.Pid
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	// The fields after the command's name, which may hold spaces:
	// state is the first, utime the 12th and stime the 13th.
	i := strings.LastIndexByte(string(stat), ')')
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return u, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	u.cpu = time.Duration(utime+stime) * time.Second / clockTicks
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(line, ":")
		kb, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			u.rss = kb << 10
		case "VmHWM":
			u.peak = kb << 10
		}
	}
	return u, nil
}

func mustUsage(t *testing.T, p *process) procUsage {
	t.Helper()
	u, err := readUsage(p)
	if err != nil {
		t.Fatalf("reading the usage of %s: %v", p.name, err)
	}
	return u
}

// serverStates is every user's default server as JupyterHub's API lists
// it: "ready", "pending" or "" (none: never started, stopped or failed).
func (s *stack) serverStates(ctx context.Context) (map[string]string, error) {
	const page = 200 // JupyterHub's api_page_max_limit
	out := map[string]string{}
	for offset := 0; ; offset += page {
		path := fmt.Sprintf("/users?offset=%d&limit=%d", offset, page)
		code, data, err := s.api(ctx, http.MethodGet, path, nil)
		if err != nil {
			return nil, err
		}
		if code != http.StatusOK {
			return nil, fmt.Errorf("GET %s = %d %.300s", path, code, data)
		}
		var users []struct {
			Name    string               `json:"name"`
			Servers map[string]hubServer `json:"servers"`
		}
		if err := json.Unmarshal(data, &users); err != nil {
			return nil, fmt.Errorf("GET %s: %w", path, err)
		}
		for _, u := range users {
			switch hs, ok := u.Servers[""]; {
			case ok && hs.Ready:
				out[u.Name] = "ready"
			case ok && hs.Pending != nil:
				out[u.Name] = "pending"
			default:
				out[u.Name] = ""
			}
		}
		if len(users) < page {
			return out, nil
		}
	}
}

// warmUp starts and stops one server before the clock: a hub in use has
// spawned before (KubeSpawner starts its reflectors on the first spawn).
func warmUp(ctx context.Context, t *testing.T, h benchHub, cw *clusterWatch) {
	t.Helper()
	const u = "bench-warmup"
	h.s.createUser(ctx, t, u)
	h.s.startServer(ctx, t, u, "", nil)
	h.s.waitServer(ctx, t, u, "", 2*time.Minute, "ready", ready)
	h.s.mustAPI(ctx, t, http.MethodDelete, serverPath(u, ""), nil, http.StatusNoContent, http.StatusAccepted)
	h.s.waitServer(ctx, t, u, "", 2*time.Minute, "stopped", func(hs *hubServer) bool { return hs == nil })
	if _, err := cw.waitNoPods(ctx, 2*time.Minute); err != nil {
		t.Fatalf("after the warm-up: %v", err)
	}
}

// userRun is one user's start as the bench saw it.
type userRun struct {
	// ready and failed are set once known, from the progress stream or
	// the API, whichever says so first.
	ready    time.Duration
	failed   bool
	accepted bool // JupyterHub answered the start request
	// acceptedAt is when that answer came: only a listing asked for
	// after it can show the start dropped.
	acceptedAt time.Time
	// postStatus and postBody are the answer to the start request (0
	// when none came); startErr is set when it was not 201 or 202.
	postStatus int
	postBody   string
	startErr   error
	streamErr  error
	// failedMsg is the message of the progress stream's failed event.
	failedMsg string
	// messages are the progress messages with when they arrived.
	messages []timedMessage
}

type timedMessage struct {
	at  time.Time
	msg string
}

// runBurst starts every user's server at once through JupyterHub's REST
// API (startAll), waits o.idle with every server running, then stops
// them all at once (stopAll), reading the hub's and the service's usage
// and the client's API requests between the phases.
func runBurst(t *testing.T, h benchHub, cw *clusterWatch, ac *apiCounter, users []string, o benchOptions) sideResult {
	ctx := t.Context()
	s := h.s
	s.mustAPI(ctx, t, http.MethodPost, "/users", map[string][]string{"usernames": users}, http.StatusCreated)
	warmUp(ctx, t, h, cw)
	res := sideResult{side: h.side, users: len(users)}

	hub0, svc0, calls0 := mustUsage(t, s.hub), mustUsage(t, h.service), ac.byKey()
	runs := startAll(ctx, t, h, users, o)
	hub1, svc1, calls1 := mustUsage(t, s.hub), mustUsage(t, h.service), ac.byKey()
	res.startCalls = diffCalls(calls0, calls1)
	res.hubCPUStart, res.svcCPUStart = hub1.cpu-hub0.cpu, svc1.cpu-svc0.cpu
	res.hubReady, res.svcReady = hub1.rss, svc1.rss
	summarize(t, &res, runs, users, cw)
	res.causes = failureCauses(t, s, runs, users)
	if f := hubFailures(s); f != "" {
		t.Logf("%s: JupyterHub logged failed starts:\n%s", h.side, f)
	}

	if o.idle > 0 {
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(o.idle):
		}
		hubIdle, svcIdle, callsIdle := mustUsage(t, s.hub), mustUsage(t, h.service), ac.byKey()
		res.idle, res.idleCalls = o.idle, diffCalls(calls1, callsIdle)
		res.hubCPUIdle, res.svcCPUIdle = hubIdle.cpu-hub1.cpu, svcIdle.cpu-svc1.cpu
		hub1, svc1, calls1 = hubIdle, svcIdle, callsIdle
	}

	res.stopAll, res.podsLeft = stopAll(ctx, t, h, cw, users)
	hub2, svc2, calls2 := mustUsage(t, s.hub), mustUsage(t, h.service), ac.byKey()
	res.stopCalls = diffCalls(calls1, calls2)
	res.hubCPUStop, res.svcCPUStop = hub2.cpu-hub1.cpu, svc2.cpu-svc1.cpu
	res.hubPeak, res.svcPeak = hub2.peak, svc2.peak
	t.Logf("%s: JupyterHub's warnings and errors:\n%s", h.side, hubComplaints(s.logPath("jupyterhub")))
	return res
}

// hubComplaints counts the warning and error lines of a JupyterHub log by
// what they say (time stamps, users and numbers masked), at most 15 kinds.
func hubComplaints(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	counts := map[string]int{}
	var kinds []string
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "[W ") && !strings.HasPrefix(line, "[E ") && !strings.HasPrefix(line, "[C ") {
			continue
		}
		// "[W 2006-01-02 15:04:05.000 JupyterHub file:line] message"
		_, msg, _ := strings.Cut(line, "] ")
		kind := line[:2] + "] " + complaintMask.ReplaceAllString(msg, "N")
		if len(kind) > 160 {
			kind = kind[:160]
		}
		if counts[kind] == 0 {
			kinds = append(kinds, kind)
		}
		counts[kind]++
	}
	if len(kinds) == 0 {
		return "none"
	}
	var b strings.Builder
	for i, k := range kinds {
		if i == 15 {
			fmt.Fprintf(&b, "... %d kinds more\n", len(kinds)-i)
			break
		}
		fmt.Fprintf(&b, "%6d× %s\n", counts[k], k)
	}
	return b.String()
}

// complaintMask matches what differs between lines of one kind: users,
// pods, addresses, numbers.
var complaintMask = regexp.MustCompile(`bench-\d+|jupyter-bench-\d+|[0-9][0-9a-f.:/-]*`)

// startAll starts every user's server at once, each user then following
// its progress stream (as the spawn page of a user's browser does) when
// o.progress, and returns once every start is ready or failed and every
// stream has ended.
func startAll(ctx context.Context, t *testing.T, h benchHub, users []string, o benchOptions) []userRun {
	t.Helper()
	s := h.s
	runs := make([]userRun, len(users))
	var mu sync.Mutex // guards runs, which the poller reads and sets too
	var wg sync.WaitGroup
	begin := time.Now()
	for i, u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &runs[i]
			code, data, err := s.api(ctx, http.MethodPost, serverPath(u, ""), nil)
			if err == nil && code != http.StatusCreated && code != http.StatusAccepted {
				err = fmt.Errorf("starting %s = %d %.300s", u, code, data)
			}
			mu.Lock()
			r.postStatus, r.postBody = code, string(data)
			r.startErr, r.failed, r.accepted, r.acceptedAt = err, err != nil, err == nil, time.Now()
			mu.Unlock()
			if err != nil || !o.progress {
				return
			}
			var msgs []timedMessage
			_, err = s.progressEach(ctx, u, "", func(ev progressEvent) {
				now := time.Now()
				msgs = append(msgs, timedMessage{now, ev.Message})
				mu.Lock()
				if ev.Ready && r.ready == 0 {
					r.ready = now.Sub(begin)
				}
				if ev.Failed {
					r.failed, r.failedMsg = true, ev.Message
				}
				mu.Unlock()
			})
			mu.Lock()
			r.messages, r.streamErr = msgs, err
			mu.Unlock()
		}()
	}
	// The API says how each start stands, for the users whose stream does
	// not (broken, or not followed); checked every second, as a hub's
	// admin page would.
	deadline := o.startTimeout + o.httpTimeout + 2*time.Minute
	settled := func() bool {
		// A busy hub answers late: a listing it made before a start
		// was accepted may arrive after the start's answer, and does not
		// have the start in it yet.
		asked := time.Now()
		states, err := s.serverStates(ctx)
		if err != nil {
			t.Logf("polling JupyterHub: %v", err)
			return false
		}
		now := time.Since(begin)
		mu.Lock()
		defer mu.Unlock()
		done := true
		for i, u := range users {
			r := &runs[i]
			switch st := states[u]; {
			case r.failed || r.ready > 0:
			case st == "ready":
				r.ready = now
			case st == "pending":
				done = false
			case r.accepted && r.acceptedAt.Before(asked):
				// Neither ready nor pending in a listing asked for once
				// its start was accepted (JupyterHub answers a start while
				// it is pending): JupyterHub dropped it.
				r.failed = true
			default:
				done = false
			}
		}
		return done
	}
	for !settled() {
		if time.Since(begin) > deadline {
			t.Fatalf("%s: starts still pending %s after the first start request", h.side, deadline)
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(time.Second):
		}
	}
	// Every stream has ended or is about to (its ready or failed event
	// came, or the API said so). On t.Fatal above they end with ctx
	// instead, which the testing package cancels after this returns.
	wg.Wait()
	return runs
}

// summarize fills res's start rows from the users' runs.
func summarize(t *testing.T, res *sideResult, runs []userRun, users []string, cw *clusterWatch) {
	var startTimes, lat []time.Duration
	eventSeen := cw.eventSeen()
	for i, r := range runs {
		if r.failed || r.ready == 0 {
			res.failed++
			if r.startErr != nil {
				t.Logf("%s: %v", res.side, r.startErr)
			}
			continue
		}
		startTimes = append(startTimes, r.ready)
		res.allReady = max(res.allReady, r.ready)
		if r.streamErr != nil {
			res.brokenStreams++
		}
		for _, m := range r.messages {
			// The first message is JupyterHub's own, sent as the stream
			// opens: an event from before then could not be shown sooner.
			if at, ok := eventSeen(users[i], m.msg); ok {
				lat = append(lat, m.at.Sub(later(at, r.messages[0].at)))
			}
		}
	}
	res.start50, res.start99 = quantile(startTimes, 0.5), quantile(startTimes, 0.99)
	res.progress50, res.progress99, res.progressN = quantile(lat, 0.5), quantile(lat, 0.99), len(lat)
}

// stopAll stops every user's server at once and returns the time from
// the first stop request until every pod was gone. It returns once
// JupyterHub lists no server: the hub is torn down after, with nothing
// left for cleanup_servers to decide.
func stopAll(ctx context.Context, t *testing.T, h benchHub, cw *clusterWatch, users []string) (time.Duration, int) {
	t.Helper()
	s := h.s
	var wg sync.WaitGroup
	begin := time.Now()
	for _, u := range users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, data, err := s.api(ctx, http.MethodDelete, serverPath(u, ""), nil)
			if err == nil && code != http.StatusNoContent && code != http.StatusAccepted {
				err = fmt.Errorf("stopping %s = %d %.300s", u, code, data)
			}
			if err != nil {
				t.Errorf("%s: %v", h.side, err)
			}
		}()
	}
	gone, err := cw.waitNoPods(ctx, stopAllBound)
	if err != nil {
		// A side that leaves pods behind is a result, not the end of
		// the bench: the table says so, and the pods are deleted (grace
		// 0) so that the next run starts from an empty namespace.
		left := cw.podCount()
		t.Logf("%s: stop-all did not finish: %v; deleting the %d pods left", h.side, err, left)
		zero := int64(0)
		if err := h.s.cluster.Client.CoreV1().Pods(namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{}); err != nil {
			t.Fatalf("%s: deleting the pods left: %v", h.side, err)
		}
		if _, err := cw.waitNoPods(ctx, time.Minute); err != nil {
			t.Fatalf("%s: %v after deleting them", h.side, err)
		}
		wg.Wait()
		return 0, left
	}
	wg.Wait()
	testutil.EventuallyEvery(t, time.Second, 2*time.Minute, h.side+": JupyterHub lists no server after the stops", func() error {
		states, err := s.serverStates(ctx)
		if err != nil {
			return err
		}
		left := 0
		for _, st := range states {
			if st != "" {
				left++
			}
		}
		if left > 0 {
			return fmt.Errorf("JupyterHub still lists %d servers", left)
		}
		return nil
	})
	return gone.Sub(begin), 0
}

// stopAllBound is how long stopAll waits for every pod to be gone.
const stopAllBound = 5 * time.Minute

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func diffCalls(before, after map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

func sumCalls(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// quantile is the q-quantile of ds (nearest rank), 0 for none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
