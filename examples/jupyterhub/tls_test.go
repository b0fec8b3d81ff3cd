package jupyterhub_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
)

// tlsServerName is the only name in the service's certificate: the hub
// reaches the service at 127.0.0.1 and verifies this name
// (service_server_name), as a hub reaching a Service by its cluster IP
// would.
const tlsServerName = "spawnkit-service.test"

// TestJupyterHubTLS (issue 45, item 2): the service serves its API with a
// certificate from a private CA (-tls-cert-file, -tls-key-file); the real
// JupyterHub 3.0, configured with c.SpawnkitSpawner.service_ca_file and
// service_server_name, starts and stops a user's server through it on
// each of tornado's HTTP clients: "simple" (pycurl hidden from the hub)
// and "curl" (JupyterHub's choice whenever pycurl is installed, as in
// zero-to-jupyterhub's hub image; libcurl ignores SSL_CERT_FILE). Then
// the hub restarts without service_ca_file, and again with another CA's:
// each time a start fails within seconds (start_timeout is 120 s),
// JupyterHub's log naming the service's URL and the setting, and no
// request reaches the service.
func TestJupyterHubTLS(t *testing.T) {
	tl := requireTools(t)
	c := testcluster.Require(t, cluster)
	for _, client := range []string{"simple", "curl"} {
		t.Run(client, func(t *testing.T) { testTLS(t, tl, c, client) })
	}
}

func testTLS(t *testing.T, tl tools, c *testcluster.Cluster, client string) {
	ctx := t.Context()
	class := httpClientClass(client)
	cert := newServiceCert(t, t.TempDir(), tlsServerName)
	serverName := fmt.Sprintf("c.SpawnkitSpawner.service_server_name = %q\n", tlsServerName)
	trusting := serverName + fmt.Sprintf("c.SpawnkitSpawner.service_ca_file = %q\n", cert.caFile)
	s := newStack(t, tl, c, stackOptions{tls: cert, hubConfig: trusting, httpClient: client})
	hubLog, serviceLog := s.logPath("jupyterhub"), s.logPath("spawner-service")

	// Start, progress, polls and stop, each through TLS.
	user := "tls-" + client
	s.createUser(ctx, t, user)
	begin := time.Now()
	s.startServer(ctx, t, user, "", nil)
	pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	events, err := s.progress(pctx, user, "")
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if last := events[len(events)-1]; !last.Ready {
		t.Fatalf("the progress stream ended with %+v, want ready", last)
	}
	s.waitServer(ctx, t, user, "", 30*time.Second, "ready", ready)
	took := time.Since(begin)
	s.onePod(ctx, t, user, "")
	s.waitPolls(t, [][2]string{{user, ""}}, 2)
	want := fmt.Sprintf("spawnkit: requests to the spawnkit service go through tornado's %s (TLS: CA %s, verifying %s at 127.0.0.1:%d)",
		class, cert.caFile, tlsServerName, s.servicePort)
	if !logContains(hubLog, want) {
		t.Errorf("JupyterHub's log does not say %q", want)
	}
	s.mustAPI(ctx, t, http.MethodDelete, serverPath(user, ""), nil, http.StatusNoContent, http.StatusAccepted)
	s.waitServer(ctx, t, user, "", 30*time.Second, "stopped", gone)
	waitNoPods(t, s, user, "", 10*time.Second)
	path := `"path"="/v1` + serverPath(user, "")
	for _, req := range []struct{ method, path string }{
		{"POST", path + `"`}, {"GET", path + `/progress"`}, {"GET", path + `"`}, {"DELETE", path + `"`},
	} {
		if logCount(serviceLog, `"msg"="request"`, `"method"="`+req.method+`"`, req.path) == 0 {
			t.Errorf("the service's log has no %s %s answered", req.method, req.path)
		}
	}
	t.Logf("%s client: ready in %s over TLS (private CA, server name %s), polled, stopped", client, took.Round(time.Millisecond), tlsServerName)

	// The same hub without the CA that signed the service's certificate:
	// a start fails at once, naming the problem, where a service that
	// cannot be reached would be tried again until start_timeout.
	other := newServiceCert(t, t.TempDir(), tlsServerName)
	for _, bad := range []struct {
		name, user, config string
		// fix is what the message tells the operator; trust what the
		// Spawner says it verifies against.
		fix, trust string
	}{
		{
			name: "no service_ca_file", user: user + "-no-ca", config: "",
			fix: "The hub verifies it against the system's CA store (c.SpawnkitSpawner.service_ca_file is not set; " +
				"tornado's curl client, which JupyterHub uses when pycurl is installed, ignores SSL_CERT_FILE): " +
				"set c.SpawnkitSpawner.service_ca_file to the PEM file of the CA that signed the service's certificate.",
			trust: "the system's CAs",
		},
		{
			name: "another CA's service_ca_file", user: user + "-wrong-ca",
			config: fmt.Sprintf("c.SpawnkitSpawner.service_ca_file = %q\n", other.caFile),
			fix: "The hub verifies it against c.SpawnkitSpawner.service_ca_file (" + other.caFile + "): " +
				"make that the PEM file of the CA that signed the service's certificate.",
			trust: "CA " + other.caFile,
		},
	} {
		s.writeHubConfig(t, serverName+bad.config+"c.Spawner.start_timeout = 120\n")
		s.restartHub(ctx, t)
		s.createUser(ctx, t, bad.user)
		begin = time.Now()
		s.startServer(ctx, t, bad.user, "", nil)
		s.waitServer(ctx, t, bad.user, "", 60*time.Second, "failed", gone)
		failed := time.Since(begin)
		if failed > 15*time.Second {
			t.Errorf("%s: the start failed after %s, want within 15 s (start_timeout is 120 s): it must not be retried", bad.name, failed.Round(time.Millisecond))
		}
		parts := []string{
			"Unhandled error starting " + bad.user + "'s server: spawnkit service at " + s.serviceURL() +
				": its TLS certificate could not be verified (POST /v1/users/" + bad.user + "/server)",
			bad.fix,
			"Not retried: this does not fix itself.",
		}
		if !logContains(hubLog, parts...) {
			t.Errorf("%s: JupyterHub's log has no line with all of %q", bad.name, parts)
		}
		want = fmt.Sprintf("spawnkit: requests to the spawnkit service go through tornado's %s (TLS: %s, verifying %s at 127.0.0.1:%d)",
			class, bad.trust, tlsServerName, s.servicePort)
		if !logContains(hubLog, want) {
			t.Errorf("%s: JupyterHub's log does not say %q", bad.name, want)
		}
		if n := logCount(serviceLog, `"path"="/v1`+serverPath(bad.user, "")); n != 0 {
			t.Errorf("%s: the service answered %d requests for %s, want none (the handshake fails)", bad.name, n, bad.user)
		}
		if n := logCount(hubLog, "trying again", bad.user); n != 0 {
			t.Errorf("%s: JupyterHub's log has %d retries of %s's requests, want none", bad.name, n, bad.user)
		}
		t.Logf("%s client, %s: the start failed in %s, naming the URL and the setting", client, bad.name, failed.Round(time.Millisecond))
	}
}

// newServiceCert makes a CA of its own and a serving certificate it
// signed for name alone, as files in dir.
func newServiceCert(t *testing.T, dir, name string) *serviceTLS {
	t.Helper()
	c := testutil.NewCert(t, 2, name)
	caFile, certFile, keyFile := c.WriteFiles(t, dir)
	return &serviceTLS{caFile: caFile, certFile: certFile, keyFile: keyFile, roots: c.Roots(), serverName: name}
}
