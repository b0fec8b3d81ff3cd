package service

// The built binary as an operator runs it, against the package's
// simulated cluster: TLS and its rotation, token rotation, the refusals
// at start, the probes of two replicas on one Lease, and the metrics of
// spawns. Every process runs with a short -reload-interval so that
// rotations show within a fraction of a second.

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/spawner"
)

// secretVolume lays files out as the kubelet lays out a Secret volume
// (AtomicWriter): each file is a symlink through ..data to a directory
// of one version, so that an update swaps every file at once, with one
// rename of the ..data symlink. cert-manager's rotations reach a pod so.
type secretVolume struct {
	dir string
	gen int
}

func (v *secretVolume) path(name string) string { return filepath.Join(v.dir, name) }

func (v *secretVolume) write(t *testing.T, files map[string][]byte) {
	t.Helper()
	v.gen++
	version := fmt.Sprintf("..version-%d", v.gen)
	if err := os.Mkdir(filepath.Join(v.dir, version), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(v.dir, version, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(v.dir, "..data_tmp")
	if err := os.Symlink(version, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(v.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		if _, err := os.Lstat(v.path(name)); errors.Is(err, os.ErrNotExist) {
			if err := os.Symlink(filepath.Join("..data", name), v.path(name)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// certFiles are c's serving certificate and key by their keys in a
// kubernetes.io/tls Secret, as its volume holds them.
func certFiles(c testutil.Cert) map[string][]byte {
	return map[string][]byte{corev1.TLSCertKey: c.CertPEM, corev1.TLSPrivateKeyKey: c.KeyPEM}
}

func certPool(cas ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, ca := range cas {
		p.AddCert(ca)
	}
	return p
}

// trusting is an HTTPS client that trusts only cas.
func trusting(cas ...*x509.Certificate) *http.Client {
	return httpClient(&tls.Config{RootCAs: certPool(cas...), MinVersion: tls.VersionTLS12})
}

// peerSerial is the serial of the certificate a new connection to addr
// gets, verified against roots; 0 and the error when the handshake
// fails.
func peerSerial(addr string, roots *x509.CertPool) (int64, error) {
	d := &tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}
	conn, err := d.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	return conn.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber.Int64(), nil
}

// TestBinaryTLS serves the API over TLS from a Secret volume's files and
// rotates them as the kubelet does: the new certificate is served to new
// connections within reloadBound, and a broken one is refused, logged
// with its file's name, while the one before it goes on serving.
func TestBinaryTLS(t *testing.T) {
	c := testcluster.Require(t, cluster)
	const token = "tls-test-token"
	e := newBinEnv(t, c, token)
	vol := &secretVolume{dir: t.TempDir()}
	first, second := testutil.NewCert(t, 101, "127.0.0.1"), testutil.NewCert(t, 202, "127.0.0.1")
	vol.write(t, certFiles(first))
	certFile, keyFile := vol.path(corev1.TLSCertKey), vol.path(corev1.TLSPrivateKeyKey)
	s := e.start(t, "spawnkit-service TLS", "-tls-cert-file", certFile, "-tls-key-file", keyFile)
	s.waitReady(t)
	base := "https://" + s.listen

	if r := binDo(t, trusting(first.CA), http.MethodGet, base+"/v1/servers", token); r.code != http.StatusOK {
		t.Fatalf("GET /v1/servers over TLS, trusting the first CA: %d %s", r.code, r.body)
	}
	if r := binDo(t, trusting(second.CA), http.MethodGet, base+"/v1/servers", token); r.code != 0 {
		t.Errorf("a client trusting only another CA got %d %s, want a failed handshake", r.code, r.body)
	}
	if r := binDo(t, httpClient(nil), http.MethodGet, "http://"+s.listen+"/v1/servers", token); r.code == http.StatusOK {
		t.Errorf("the API answered plain HTTP: %s", r.body)
	}
	both := certPool(first.CA, second.CA)
	if serial, err := peerSerial(s.listen, both); serial != first.Serial {
		t.Fatalf("serving serial %d (%v), want the first certificate's %d", serial, err, first.Serial)
	}

	reloaded := len(s.lines("reloaded", "TLS certificate"))
	vol.write(t, certFiles(second))
	testutil.EventuallyEvery(t, poll, reloadBound, "new connections to get the rotated certificate", func() error {
		serial, err := peerSerial(s.listen, both)
		return pending(serial == second.Serial, fmt.Sprintf("serial %d (%v)", serial, err))
	})
	s.waitLines(t, reloaded, "the certificate's reload", "reloaded", "TLS certificate")
	if r := binDo(t, trusting(second.CA), http.MethodGet, base+"/v1/servers", token); r.code != http.StatusOK {
		t.Errorf("GET /v1/servers trusting the second CA after the rotation: %d %s", r.code, r.body)
	}

	failed := len(s.lines("reloading failed", certFile))
	vol.write(t, map[string][]byte{corev1.TLSCertKey: []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydA==\n-----END CERTIFICATE-----\n"), corev1.TLSPrivateKeyKey: second.KeyPEM})
	s.waitLines(t, failed, "the broken certificate's reload failing, naming "+certFile, "reloading failed", certFile)
	if serial, err := peerSerial(s.listen, both); serial != second.Serial {
		t.Errorf("after a broken certificate: serving serial %d (%v), want the previous one, %d", serial, err, second.Serial)
	}
	if r := binDo(t, trusting(second.CA), http.MethodGet, base+"/v1/servers", token); r.code != http.StatusOK {
		t.Errorf("GET /v1/servers after a broken certificate: %d %s", r.code, r.body)
	}
	s.mustRun(t)
}

// TestBinaryTokenRotation rewrites the token file under a running
// process: from the next check only the new token is accepted; an empty
// file is refused, logged, and the token before it stays; a token in the
// query string is no credential; and no token is ever in the output.
func TestBinaryTokenRotation(t *testing.T) {
	c := testcluster.Require(t, cluster)
	a, b := "alpha-"+randomHex(t), "bravo-"+randomHex(t)
	e := newBinEnv(t, c, a)
	s := e.start(t, "spawnkit-service token")
	s.waitReady(t)
	client := httpClient(nil)
	servers := "http://" + s.listen + "/v1/servers"
	if r := binDo(t, client, http.MethodGet, servers, a); r.code != http.StatusOK {
		t.Fatalf("GET /v1/servers with token A: %d %s", r.code, r.body)
	}
	if r := binDo(t, client, http.MethodGet, servers, b); r.code != http.StatusUnauthorized {
		t.Errorf("GET /v1/servers with token B before the rotation: %d, want 401", r.code)
	}

	replaceFile(t, e.tokenFile, b+"\n")
	testutil.EventuallyEvery(t, poll, reloadBound, "token B accepted", func() error {
		r := binDo(t, client, http.MethodGet, servers, b)
		return pending(r.code == http.StatusOK, fmt.Sprintf("%d %s", r.code, r.body))
	})
	for range 5 {
		if r := binDo(t, client, http.MethodGet, servers, a); r.code != http.StatusUnauthorized {
			t.Fatalf("GET /v1/servers with token A after the rotation: %d %s, want 401", r.code, r.body)
		}
	}

	failed := len(s.lines("reloading failed", "API token"))
	writeTestFile(t, e.tokenFile, " \n")
	lines := s.waitLines(t, failed, "the empty token file refused", "reloading failed", "API token")
	if l := lines[len(lines)-1]; !strings.Contains(l, e.tokenFile) || !strings.Contains(l, "empty") {
		t.Errorf("the log line of the empty token file does not name the file and the cause: %s", l)
	}
	if r := binDo(t, client, http.MethodGet, servers, b); r.code != http.StatusOK {
		t.Errorf("GET /v1/servers with token B after an empty token file: %d %s, want 200", r.code, r.body)
	}
	if r := binDo(t, client, http.MethodGet, servers, a); r.code != http.StatusUnauthorized {
		t.Errorf("GET /v1/servers with token A after an empty token file: %d, want 401", r.code)
	}

	if r := binDo(t, client, http.MethodGet, servers+"?token="+b, ""); r.code != http.StatusUnauthorized {
		t.Errorf("GET /v1/servers?token=B: %d %s, want 401", r.code, r.body)
	}
	s.waitLines(t, 0, "the query's request line", "request", "token=...")
	out := s.out.String()
	for name, tok := range map[string]string{"A": a, "B": b} {
		if strings.Contains(out, tok) {
			t.Errorf("token %s is in the process's output", name)
		}
	}
	s.mustRun(t)
}

// TestBinaryRefusesToStart: every bad flag or file ends the process
// within exitBound, non-zero, with an error naming the flag or the file
// (and, for a Lease namespace that does not exist, the namespace: a
// replica that could never lead must not stand by forever); -check
// accepts a good setup without the cluster, and -version prints the
// module's version.
func TestBinaryRefusesToStart(t *testing.T) {
	c := testcluster.Require(t, cluster)
	e := newBinEnv(t, c, "refusal-token")
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		writeTestFile(t, p, content)
		return p
	}
	emptyToken := file("empty-token", "\n\t \n")
	badConfig := file("bad-config.yaml", "namespace: x\nno_such_option_xyz: 1\n")
	misspelt := file("misspelt.yaml", "namespace: x\nmem_gurantee: 1G\n")
	z2jhValues := file("values.yaml", "singleuser:\n  image:\n    name: quay.io/jupyter/base-notebook\n")
	badPolicy := file("bad-policy.yaml", "privileged_image: [x]\n")
	badPattern := file("bad-pattern.yaml", "privileged_images: [\"[x\"]\n")
	good := testutil.NewCert(t, 7, "127.0.0.1")
	certFile, keyFile := file("tls.crt", string(good.CertPEM)), file("tls.key", string(good.KeyPEM))
	garbageCert := file("garbage.crt", "not a certificate\n")
	missing := filepath.Join(dir, "missing")
	same := freeAddr(t)
	absent := "no-such-namespace-" + randomHex(t)[:8]

	cases := []struct {
		name string
		args []string
		want []string // each in the output
	}{
		{"empty token file", []string{"-token-file", emptyToken}, []string{emptyToken, "is empty"}},
		{"missing token file", []string{"-token-file", missing}, []string{missing}},
		{"probe address is the API's", []string{"-listen", same, "-probe-listen", same}, []string{"-probe-listen", "-listen", same}},
		{"bad listen", []string{"-listen", "nonsense:xx"}, []string{"-listen", "nonsense:xx"}},
		{"bad listen with -check", []string{"-check", "-listen", "nonsense:xx"}, []string{"-listen", "nonsense:xx"}},
		{"bad probe listen", []string{"-probe-listen", "127.0.0.1"}, []string{"-probe-listen", "127.0.0.1"}},
		{"lease duration equal to the renew deadline", []string{"-leader-elect", "-leader-elect-lease-duration", "5s", "-leader-elect-renew-deadline", "5s"},
			[]string{"-leader-elect-lease-duration", "-leader-elect-renew-deadline"}},
		{"lease duration below the renew deadline", []string{"-leader-elect", "-leader-elect-lease-duration", "3s", "-leader-elect-renew-deadline", "5s"},
			[]string{"-leader-elect-lease-duration", "-leader-elect-renew-deadline"}},
		{"Lease namespace does not exist", []string{"-leader-elect", "-leader-elect-namespace", absent}, []string{`"` + absent + `"`, "leases"}},
		{"bad config file with -check", []string{"-check", "-config", badConfig}, []string{badConfig, "no_such_option_xyz"}},
		{"misspelt option", []string{"-check", "-config", misspelt}, []string{misspelt, "line 2", `did you mean "mem_guarantee"?`}},
		{"z2jh values as the config", []string{"-check", "-config", z2jhValues}, []string{z2jhValues, "line 1", "singleuser", "docs/z2jh.md"}},
		{"misspelt hub policy key", []string{"-check", "-hub-policy", badPolicy}, []string{badPolicy, "line 1", `unknown key "privileged_image": did you mean "privileged_images"?`}},
		{"bad hub policy pattern", []string{"-check", "-hub-policy", badPattern}, []string{badPattern, "privileged_images[0]"}},
		{"missing hub policy", []string{"-check", "-hub-policy", missing}, []string{missing}},
		{"missing certificate", []string{"-tls-cert-file", missing, "-tls-key-file", keyFile}, []string{missing}},
		{"unreadable certificate", []string{"-tls-cert-file", dir, "-tls-key-file", keyFile}, []string{dir, "is a directory"}},
		{"garbage certificate", []string{"-tls-cert-file", garbageCert, "-tls-key-file", keyFile}, []string{garbageCert}},
		{"certificate without key", []string{"-tls-cert-file", certFile}, []string{"-tls-cert-file", "-tls-key-file"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args, _, _ := e.args(t)
			p := startProc(t, "spawnkit-service "+tc.name, nil, append(args, tc.args...)...)
			msg := p.wantFailure(t)
			for _, w := range tc.want {
				if !strings.Contains(msg[len(msg)-1], w) {
					t.Errorf("the error does not name %q: %s", w, msg[len(msg)-1])
				}
			}
		})
	}

	t.Run("check accepts a good setup", func(t *testing.T) {
		args, _, _ := e.args(t)
		p := startProc(t, "spawnkit-service -check", nil, append(args, "-check", "-tls-cert-file", certFile, "-tls-key-file", keyFile, "-leader-elect", "-adopt-kubespawner")...)
		if err := p.wait(t, exitBound); err != nil {
			t.Fatalf("-check of a good setup: %v\n%s", err, p.out.String())
		}
		if len(p.lines("usable")) != 1 {
			t.Errorf("-check does not say the setup is usable:\n%s", p.out.String())
		}
	})
	t.Run("version", func(t *testing.T) {
		p := startProc(t, "spawnkit-service -version", nil, "-version")
		if err := p.wait(t, exitBound); err != nil {
			t.Fatalf("-version: %v\n%s", err, p.out.String())
		}
		if got, want := strings.TrimSpace(p.out.String()), "spawnkit-service "+spawner.Version; got != want {
			t.Errorf("-version printed %q, want %q", got, want)
		}
	})
}

// TestBinaryProbes runs two replicas on one Lease: the leader is ready,
// the standby's /readyz is 503 with a failed leader check and its API
// 503 NotLeader with Retry-After; both are live. A server started on the
// leader (and asked for on both) leaves no trace of its user's name in
// either's probes or metrics.
func TestBinaryProbes(t *testing.T) {
	c := testcluster.Require(t, cluster)
	const token = "probe-test-token"
	const user = "zebra-unicorn"
	e := newBinEnv(t, c, token)
	election := []string{"-leader-elect", "-leader-elect-namespace", e.ns, "-leader-elect-name", "binary-probes",
		"-leader-elect-lease-duration", leaseDuration.String(), "-leader-elect-renew-deadline", renewDeadline.String(),
		"-leader-elect-retry-period", retryPeriod.String()}
	replicas := map[string]*binService{}
	for _, id := range []string{"probe-a", "probe-b"} {
		replicas[id] = e.start(t, id, append(election, "-leader-elect-identity", id)...)
	}
	var leader, standby *binService
	var standbyBody string
	testutil.EventuallyEvery(t, poll, binTimeout, "one leader and one warm standby", func() error {
		leader, standby = nil, nil
		var state []string
		for id, s := range replicas {
			s.mustRun(t)
			code, body := s.readyz(t)
			state = append(state, fmt.Sprintf("%s: %d %q", id, code, body))
			switch {
			case code == http.StatusOK:
				leader = s
			case code == http.StatusServiceUnavailable && strings.Contains(body, "[+]manager ok"):
				standby, standbyBody = s, body
			}
		}
		return pending(leader != nil && standby != nil, strings.Join(state, "; "))
	})
	lease, err := c.Client.CoordinationV1().Leases(e.ns).Get(t.Context(), "binary-probes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := lease.Spec.HolderIdentity; h == nil || *h != leader.name {
		t.Errorf("the Lease's holder is %v, but %s is the ready one", h, leader.name)
	}
	if !slices.ContainsFunc(strings.Split(standbyBody, "\n"), func(l string) bool { return strings.HasPrefix(l, "[-]leader") }) {
		t.Errorf("the standby's /readyz has no line starting [-]leader:\n%s", standbyBody)
	}
	client := httpClient(nil)
	r := binDo(t, client, http.MethodGet, "http://"+standby.listen+"/v1/servers", token)
	if r.code != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" || r.reason() != "NotLeader" {
		t.Errorf("the standby's GET /v1/servers: %d, Retry-After %q, %s; want 503 NotLeader with Retry-After", r.code, r.header.Get("Retry-After"), r.body)
	}
	for _, s := range []*binService{leader, standby} {
		if code, body := get(t.Context(), client, "http://"+s.probes+"/livez", ""); code != http.StatusOK {
			t.Errorf("%s /livez: %d %q", s.name, code, body)
		}
	}

	if r := binDo(t, client, http.MethodPost, "http://"+leader.listen+serverPath(user), token); r.code != http.StatusAccepted {
		t.Fatalf("POST %s on the leader: %d %s", serverPath(user), r.code, r.body)
	}
	waitRunning(t, leader, token, user)
	for _, s := range []*binService{leader, standby} {
		binDo(t, client, http.MethodGet, "http://"+s.listen+serverPath(user), token)
		binDo(t, client, http.MethodGet, "http://"+s.listen+"/v1/users/"+user+"/no-such-route", token)
		for _, path := range []string{"/readyz", "/metrics"} {
			code, body := get(t.Context(), client, "http://"+s.probes+path, "")
			if code == 0 || strings.Contains(body, user) {
				t.Errorf("%s %s (%d) names the user %s:\n%s", s.name, path, code, user, body)
			}
		}
	}
}

// binMetrics is one scrape of /metrics, parsed.
type binMetrics struct {
	families map[string]*dto.MetricFamily
	text     string
}

func scrape(t *testing.T, s *binService) binMetrics {
	t.Helper()
	code, body := get(t.Context(), httpClient(nil), "http://"+s.probes+"/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("%s /metrics: %d %s", s.name, code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("%s /metrics does not parse: %v", s.name, err)
	}
	return binMetrics{families: families, text: body}
}

// value is a counter's value, or a histogram's sample count, of the one
// series of name with exactly labels (name=value pairs, empty values
// left out); 0 when there is
// none yet (a labelled metric appears at its first observation).
func (m binMetrics) value(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	f := m.families[name]
	if f == nil {
		return 0
	}
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	for _, series := range f.GetMetric() {
		got := map[string]string{}
		for _, l := range series.GetLabel() {
			// An empty value is no label, as Prometheus reads it (the
			// Manager's cluster label without several clusters).
			if l.GetValue() != "" {
				got[l.GetName()] = l.GetValue()
			}
		}
		if !maps.Equal(got, want) {
			continue
		}
		switch f.GetType() {
		case dto.MetricType_COUNTER:
			return series.GetCounter().GetValue()
		case dto.MetricType_HISTOGRAM:
			return float64(series.GetHistogram().GetSampleCount())
		case dto.MetricType_GAUGE:
			return series.GetGauge().GetValue()
		}
		t.Fatalf("metric %s has type %s", name, f.GetType())
	}
	return 0
}

// samples are the lines of the scrape for metrics named prefix*.
func (m binMetrics) samples(prefix string) []string {
	var out []string
	for _, l := range strings.Split(m.text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

// TestBinaryMetrics scrapes the leader's /metrics before and after 10
// spawns through the API: the starts counter, the start-to-ready
// histogram and the API's request counter for the accepted POSTs each
// rise by exactly 10, and the Go and process collectors are there.
func TestBinaryMetrics(t *testing.T) {
	c := testcluster.Require(t, cluster)
	const token = "metrics-test-token"
	const spawns = 10
	e := newBinEnv(t, c, token)
	s := e.start(t, "spawnkit-service metrics", "-leader-elect", "-leader-elect-namespace", e.ns, "-leader-elect-identity", "metrics-leader")
	s.waitReady(t)

	counters := []struct {
		what   string
		name   string
		labels []string
	}{
		{"starts", "spawnkit_manager_starts_total", []string{"kind", "start"}},
		{"starts ready", "spawnkit_manager_spawn_duration_seconds", []string{"kind", "start", "outcome", "ready"}},
		{"accepted POSTs", "spawnkit_service_http_requests_total", []string{"route", "/v1/users/{user}/server", "method", "POST", "code", "202"}},
	}
	before := scrape(t, s)
	client := httpClient(nil)
	users := make([]string, spawns)
	for i := range users {
		users[i] = fmt.Sprintf("metrics-u%02d", i)
		if r := binDo(t, client, http.MethodPost, "http://"+s.listen+serverPath(users[i]), token); r.code != http.StatusAccepted {
			t.Fatalf("POST %s: %d %s, want 202", serverPath(users[i]), r.code, r.body)
		}
	}
	for _, u := range users {
		waitRunning(t, s, token, u)
	}
	// The histogram is observed as each start ends, which its status may
	// show a moment before.
	var after binMetrics
	testutil.EventuallyEvery(t, poll, reloadBound, "every counter to count the spawns", func() error {
		after = scrape(t, s)
		var state []string
		ok := true
		for _, m := range counters {
			d := after.value(t, m.name, m.labels...) - before.value(t, m.name, m.labels...)
			ok = ok && d >= spawns
			state = append(state, fmt.Sprintf("%s +%g", m.what, d))
		}
		return pending(ok, strings.Join(state, ", "))
	})
	for _, m := range counters {
		if d := after.value(t, m.name, m.labels...) - before.value(t, m.name, m.labels...); d != spawns {
			t.Errorf("%s (%s%q) rose by %g over %d spawns, want %d", m.what, m.name, m.labels, d, spawns, spawns)
		}
	}
	if got := after.value(t, "spawnkit_manager_servers", "phase", "running"); got != spawns {
		t.Errorf("spawnkit_manager_servers{phase=running} = %g, want %d", got, spawns)
	}
	// The informers' health (the Registry's own collector).
	for _, name := range []string{"spawnkit_reflector_healthy", "spawnkit_reflector_objects", "spawnkit_reflector_watch_errors_total"} {
		if after.families[name] == nil {
			t.Errorf("metric %s missing: the Registry's metrics are not served", name)
		}
	}
	for _, name := range []string{"go_goroutines", "process_cpu_seconds_total", "process_resident_memory_bytes", "process_start_time_seconds", "process_open_fds"} {
		if after.families[name] == nil {
			t.Errorf("metric %s missing", name)
		}
	}
	var b bytes.Buffer
	for _, l := range after.samples("spawnkit_") {
		fmt.Fprintln(&b, l)
	}
	t.Logf("spawnkit_* samples after %d spawns:\n%s", spawns, b.String())
}
