package jupyterhub_test

import (
	"os"
	"testing"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

// The hub's HTTP client: JupyterHub uses tornado's curl client
// (CurlAsyncHTTPClient) whenever pycurl can be imported, as in
// zero-to-jupyterhub's hub image, else the simple one. The tests choose
// with stackOptions.httpClient, or for the whole package with
// SPAWNKIT_TEST_HTTP_CLIENT (the variable python/tests reads too):
//
//	""        JupyterHub's own choice: curl where pycurl is installed
//	"simple"  pycurl hidden from the hub (tornado's simple client)
//	"curl"    pycurl required: the test fails without it under CI=true,
//	          else skips
const httpClientEnv = "SPAWNKIT_TEST_HTTP_CLIENT"

// hidePycurl, at the top of jupyterhub_config.py, makes `import pycurl`
// raise ImportError: JupyterHub's init_pycurl, which runs after the
// config file is loaded, then keeps tornado's simple client.
const hidePycurl = `import sys
# spawnkit test: no pycurl, so JupyterHub keeps tornado's simple client.
sys.modules["pycurl"] = None
`

// httpClientClass is tornado's class for a choice of client; "" for
// JupyterHub's own choice.
func httpClientClass(client string) string {
	switch client {
	case "simple":
		return "SimpleAsyncHTTPClient"
	case "curl":
		return "CurlAsyncHTTPClient"
	}
	return ""
}

// chooseHTTPClient resolves opts.httpClient (default: $SPAWNKIT_TEST_HTTP_CLIENT)
// and requires pycurl for "curl".
func chooseHTTPClient(t *testing.T, client string) string {
	t.Helper()
	if client == "" {
		client = os.Getenv(httpClientEnv)
	}
	switch client {
	case "", "simple":
	case "curl":
		requirePycurl(t)
	default:
		t.Fatalf("HTTP client %q (%s): want simple or curl", client, httpClientEnv)
	}
	return client
}

// requirePycurl fails (CI=true) or skips the test unless the hub's Python
// can import pycurl (Debian: python3-pycurl).
func requirePycurl(t *testing.T) {
	t.Helper()
	v := requirePackage(t)
	if _, err := v.run(t.Context(), "-c", "import pycurl"); err != nil {
		if testcluster.InCI() {
			t.Fatalf("pycurl, required because CI=true (apt-get install python3-pycurl): %v", err)
		}
		t.Skipf("pycurl is not installed (apt-get install python3-pycurl): %v", err)
	}
}

// checkHTTPClient fails the test when the hub's log says its requests
// to the service went through another client than the one chosen: the
// Spawner logs its client's class once per event loop, at its first
// request.
func (s *stack) checkHTTPClient(t *testing.T) {
	class := httpClientClass(s.opts.httpClient)
	const said = "spawnkit: requests to the spawnkit service go through tornado's "
	if class == "" || !logContains(s.logPath("jupyterhub"), said) {
		return
	}
	if n, all := logCount(s.logPath("jupyterhub"), said+class), logCount(s.logPath("jupyterhub"), said); n != all {
		t.Errorf("JupyterHub's log names another HTTP client than %s in %d of %d lines saying %q", class, all-n, all, said)
		return
	}
	t.Logf("the hub's requests to the service went through tornado's %s", class)
}
