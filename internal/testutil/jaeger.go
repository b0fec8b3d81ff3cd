package testutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// JaegerVersion is the Jaeger release internal/tools/jaeger.sh builds and
// StartJaeger looks for in the cache (its module tag; the binary is
// Jaeger v2).
const JaegerVersion = "v1.75.0"

// Jaeger is a Jaeger v2 process a test started: an OTLP receiver (gRPC and
// HTTP) that keeps traces in memory, and its query API to read them back.
// Everything it listens on is on 127.0.0.1. Its methods are safe for
// concurrent use.
type Jaeger struct {
	otlpGRPC, otlpHTTP, query string // host:port each
	logPath                   string
	client                    *http.Client
}

// StartJaeger starts Jaeger and returns once its query API answers and both
// OTLP ports accept connections; a cleanup of t stops it (SIGTERM, then
// SIGKILL after 10 s) and waits for it. Its output goes to a file that is
// copied into the test's log when the test fails.
//
// The binary is $SPAWNKIT_JAEGER, else internal/tools/jaeger.sh's cache
// path. When it is missing the test is skipped, or fails when CI=true.
func StartJaeger(t testing.TB) *Jaeger {
	t.Helper()
	bin := jaegerBinary(t)
	start := time.Now()
	j, stop, err := LaunchJaeger(t.Context(), bin, t.TempDir())
	dump := func() {
		if out, err := os.ReadFile(j.logPath); err == nil {
			t.Logf("jaeger output (%s):\n%s", j.logPath, out)
		}
	}
	if err != nil {
		if j != nil {
			dump()
		}
		t.Fatalf("%v (after %s)", err, time.Since(start).Round(time.Millisecond))
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
		if t.Failed() {
			dump()
		}
	})
	t.Logf("jaeger %s ready in %s: OTLP gRPC %s, OTLP HTTP %s, query http://%s", JaegerVersion, time.Since(start).Round(time.Millisecond), j.otlpGRPC, j.otlpHTTP, j.query)
	return j
}

// LaunchJaeger is StartJaeger for a program (internal/benchreport): it
// starts bin with its configuration and output (jaeger.log) in dir, and
// returns once it is ready, or ctx ends, or a minute has passed. stop
// stops it (SIGTERM, then SIGKILL after 10 s), waits for it, and says
// when it had to kill it; the caller must call it. The process is killed
// with the caller's process too. On an error the process is already
// stopped, and j, when not nil, only says where its output is (LogPath).
func LaunchJaeger(ctx context.Context, bin, dir string) (j *Jaeger, stop func() error, err error) {
	addrs := make([]string, 4) // OTLP gRPC, OTLP HTTP, query HTTP, query gRPC
	for i := range addrs {
		a, err := FreeAddr()
		if err != nil {
			return nil, nil, err
		}
		addrs[i] = a
	}
	cfg := filepath.Join(dir, "jaeger.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(jaegerConfig, addrs[0], addrs[1], addrs[2], addrs[3])), 0o600); err != nil {
		return nil, nil, err
	}
	logPath := filepath.Join(dir, "jaeger.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(bin, "--config", cfg)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Killed with the test binary too (a go test timeout runs no cleanup).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	// The process is owned by stop: it is the one that stops it and
	// waits for this goroutine to deliver the exit.
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	j = &Jaeger{otlpGRPC: addrs[0], otlpHTTP: addrs[1], query: addrs[2], logPath: logPath, client: &http.Client{
		// Its own transport: no proxy, and idle connections stop closes
		// (their goroutines would outlive the test).
		Transport: &http.Transport{},
		Timeout:   5 * time.Second,
	}}
	stop = func() error {
		j.client.CloseIdleConnections()
		var err error
		select {
		case <-exited:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				err = errors.New("jaeger did not stop within 10s of SIGTERM; killed it")
				_ = cmd.Process.Kill()
				<-exited
			}
		}
		_ = logFile.Close()
		return err
	}

	var last error
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case <-exited:
			return false, fmt.Errorf("jaeger exited while starting: %w", waitErr)
		default:
		}
		last = j.ready(ctx)
		return last == nil, nil
	})
	if err != nil {
		if last != nil {
			err = fmt.Errorf("%w; last saw: %w", err, last)
		}
		_ = stop()
		return j, nil, fmt.Errorf("jaeger not ready: %w (its output is in %s)", err, logPath)
	}
	return j, stop, nil
}

// jaegerConfig is Jaeger v2's configuration (an OpenTelemetry Collector
// one): memory storage, the OTLP receiver and the query extension, each on
// the 127.0.0.1 address given, and nothing else. Jaeger's defaults listen
// on every interface (the query extension's two ports, the collector's
// own metrics on :8888); each is set or left out here, and the
// collector's own metrics are off.
const jaegerConfig = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: info

extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    enable_tracing: false
    storage:
      traces: memstore
    http:
      endpoint: %[3]s
    grpc:
      endpoint: %[4]s

receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %[1]s
      http:
        endpoint: %[2]s

exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`

// jaegerBinary is JaegerBinary, or skips the test (fails it when
// CI=true) when there is none.
func jaegerBinary(t testing.TB) string {
	t.Helper()
	bin, err := JaegerBinary()
	if err != nil {
		missing(t, err.Error())
	}
	return bin
}

// JaegerBinary is $SPAWNKIT_JAEGER, else the path internal/tools/jaeger.sh
// builds into; an error when no binary is there.
func JaegerBinary() (string, error) {
	bin := os.Getenv("SPAWNKIT_JAEGER")
	if bin == "" {
		root := os.Getenv("SPAWNKIT_TOOLS_CACHE")
		if root == "" {
			cache, err := os.UserCacheDir()
			if err != nil {
				return "", fmt.Errorf("no cache directory to find jaeger in (%w) and SPAWNKIT_JAEGER is unset", err)
			}
			root = filepath.Join(cache, "spawnkit", "tools")
		}
		bin = filepath.Join(root, "jaeger-"+JaegerVersion, "jaeger")
	}
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("no jaeger binary: %w", err)
	}
	return bin, nil
}

// missing skips the test, or fails it when CI=true: there every part must
// start.
func missing(t testing.TB, why string) {
	t.Helper()
	msg := why + "; build it with internal/tools/jaeger.sh (make test does) or set SPAWNKIT_JAEGER"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
		return
	}
	t.Skip(msg)
}

// ready is nil once the query API answers and both OTLP ports accept.
func (j *Jaeger) ready(ctx context.Context) error {
	var d net.Dialer
	for _, addr := range []string{j.otlpGRPC, j.otlpHTTP} {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return err
		}
		_ = c.Close()
	}
	_, err := j.Services(ctx)
	return err
}

// OTLPGRPCEndpoint is the OTLP/gRPC receiver's host:port.
func (j *Jaeger) OTLPGRPCEndpoint() string { return j.otlpGRPC }

// OTLPHTTPEndpoint is the OTLP/HTTP receiver's base URL,
// http://127.0.0.1:port (traces go to /v1/traces under it).
func (j *Jaeger) OTLPHTTPEndpoint() string { return "http://" + j.otlpHTTP }

// LogPath is the file Jaeger's output goes to.
func (j *Jaeger) LogPath() string { return j.logPath }

// QueryURL is the query API's base URL (and the UI's), http://127.0.0.1:port.
func (j *Jaeger) QueryURL() string { return "http://" + j.query }

// Env is the environment, as KEY=value, that makes a process using an
// OpenTelemetry SDK export its traces to this Jaeger with protocol "grpc"
// or "http/protobuf" (OTEL_EXPORTER_OTLP_PROTOCOL's values), and nothing
// else: Jaeger takes no metrics or logs, so those exporters are off. The
// batch span processor exports every 100 ms instead of every 5 s, so
// spans reach Jaeger soon after they end. Any other protocol panics.
func (j *Jaeger) Env(protocol string) []string {
	env := []string{
		"OTEL_TRACES_EXPORTER=otlp",
		"OTEL_METRICS_EXPORTER=none",
		"OTEL_LOGS_EXPORTER=none",
		"OTEL_EXPORTER_OTLP_PROTOCOL=" + protocol,
		"OTEL_BSP_SCHEDULE_DELAY=100",
	}
	switch protocol {
	case "grpc":
		// An http:// endpoint already means plaintext to the Go SDK; the
		// Python SDK's gRPC exporter also reads OTEL_EXPORTER_OTLP_INSECURE.
		return append(env, "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+j.otlpGRPC, "OTEL_EXPORTER_OTLP_INSECURE=true")
	case "http/protobuf":
		return append(env, "OTEL_EXPORTER_OTLP_ENDPOINT="+j.OTLPHTTPEndpoint())
	default:
		panic(fmt.Sprintf("testutil: Jaeger.Env: protocol %q is neither grpc nor http/protobuf", protocol))
	}
}

// ErrTraceNotFound is what Trace returns (wrapped) for a trace Jaeger does
// not have (yet).
var ErrTraceNotFound = errors.New("trace not found")

// Trace reads one trace, by its hex ID, from the query API
// (GET /api/traces/<id>). A trace Jaeger does not have is ErrTraceNotFound.
// Spans arrive in batches: a trace read early can lack some; WaitTrace
// waits for a complete one.
func (j *Jaeger) Trace(ctx context.Context, traceID string) (*Trace, error) {
	var traces []*Trace
	status, err := j.get(ctx, "/api/traces/"+url.PathEscape(traceID), &traces)
	if status == http.StatusNotFound || err == nil && len(traces) == 0 {
		return nil, fmt.Errorf("jaeger: trace %s: %w", traceID, ErrTraceNotFound)
	}
	if err != nil {
		return nil, err
	}
	return traces[0], nil
}

// Traces reads up to limit of the traces that have a span of service
// from the last hour (GET /api/traces?service=...).
func (j *Jaeger) Traces(ctx context.Context, service string, limit int) ([]*Trace, error) {
	q := url.Values{"service": {service}, "limit": {strconv.Itoa(limit)}, "lookback": {"1h"}}
	var traces []*Trace
	if _, err := j.get(ctx, "/api/traces?"+q.Encode(), &traces); err != nil {
		return nil, err
	}
	return traces, nil
}

// Services lists the service names Jaeger has spans of (GET /api/services).
func (j *Jaeger) Services(ctx context.Context) ([]string, error) {
	var names []string
	_, err := j.get(ctx, "/api/services", &names)
	return names, err
}

// WaitTrace waits up to d for the trace to exist and pred to hold for it,
// and returns it; the test fails with what the trace last held otherwise.
// A nil pred waits for the trace alone.
func (j *Jaeger) WaitTrace(t testing.TB, d time.Duration, traceID string, pred func(*Trace) bool) *Trace {
	t.Helper()
	var tr *Trace
	EventuallyEvery(t, 100*time.Millisecond, d, "trace "+traceID+" in jaeger", func() error {
		got, err := j.Trace(t.Context(), traceID)
		if err != nil {
			return err
		}
		if pred != nil && !pred(got) {
			return fmt.Errorf("the predicate does not hold yet for the trace's %d spans: %s", len(got.Spans), got.names())
		}
		tr = got
		return nil
	})
	return tr
}

// get decodes the "data" of the query API's answer to path into data, and
// returns the HTTP status.
func (j *Jaeger) get(ctx context.Context, path string, data any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.QueryURL()+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := j.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("jaeger: GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, fmt.Errorf("jaeger: GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, fmt.Errorf("jaeger: GET %s: %s: %s", path, resp.Status, bytes.TrimSpace(body))
	}
	if err := decodeData(body, data); err != nil {
		return resp.StatusCode, fmt.Errorf("jaeger: GET %s: %w", path, err)
	}
	return resp.StatusCode, nil
}
