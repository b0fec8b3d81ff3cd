package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
)

// maxVerbosity is the highest -v. The logger is client-go's too (it
// takes it from the context), and from V(8) client-go logs the body of
// every API request and answer (rest.Request's logBody), a Secret
// holding a hub's token among them: no -v may print a token.
const maxVerbosity = 7

// flags are the command line, validated as a whole by parseFlags.
type flags struct {
	kubeconfig, config  string
	hubPolicy           string
	clusters            string
	listen, probeListen string
	tokenFile           string
	tlsCertFile         string
	tlsKeyFile          string
	leaderElect         bool
	adoptKubeSpawner    bool
	traceHashNames      bool
	leaseNamespace      string
	leaseName           string
	leaseIdentity       string
	leaseDuration       time.Duration
	renewDeadline       time.Duration
	retryPeriod         time.Duration
	reloadInterval      time.Duration
	kubeQPS             float64
	kubeBurst           int
	spawnLimit          int
	verbosity           int
	check, version      bool
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("spawnkit-service", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)")
	fs.StringVar(&f.clusters, "clusters", "", "YAML file naming several clusters to run servers in (the first the default; see service/README.md, \"Several clusters\"); none: one cluster, from -kubeconfig")
	fs.StringVar(&f.config, "config", "", "KubeSpawner-style YAML configuration (kubespawner.Load); none: an empty configuration")
	fs.StringVar(&f.hubPolicy, "hub-policy", "", "YAML file bounding what a hub's own configuration may make (service.HubPolicy; see service/README.md, \"The hub's configuration\"); none: the strict default")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8765", "address of the API; beyond loopback, give -tls-cert-file and -tls-key-file")
	fs.StringVar(&f.probeListen, "probe-listen", "127.0.0.1:8766", "address of /livez, /readyz and /metrics (no token, no user data); \"\" turns them off")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding the API token (surrounding whitespace trimmed), re-read when it changes; wins over $"+tokenEnv)
	fs.StringVar(&f.tlsCertFile, "tls-cert-file", "", "PEM certificate chain for the API (with -tls-key-file), re-read when it changes")
	fs.StringVar(&f.tlsKeyFile, "tls-key-file", "", "PEM private key of -tls-cert-file")
	fs.BoolVar(&f.leaderElect, "leader-elect", false, "run as one of several replicas: only the holder of a Lease acts, the others stand by (503 NotLeader)")
	fs.BoolVar(&f.adoptKubeSpawner, "adopt-kubespawner", false, "also manage the user servers KubeSpawner started (pods labelled app.kubernetes.io/managed-by=kubespawner with the configuration's component label, in a namespace it trusts): reported running, polled, and deleted when the hub stops them, so a hub switched from KubeSpawner keeps them; only once no KubeSpawner hub runs on those pods (docs/z2jh.md, \"Switching over\")")
	fs.BoolVar(&f.traceHashNames, "trace-hash-names", false, "export the user's and server's names, and the pod, object and user-namespace names made from them, as hashes in spans (tracing is configured by the OTEL_* environment; docs/observability.md)")
	fs.StringVar(&f.leaseNamespace, "leader-elect-namespace", "", "namespace of the Lease (default: $POD_NAMESPACE, else the configuration's namespace)")
	fs.StringVar(&f.leaseName, "leader-elect-name", "spawnkit-service", "name of the Lease")
	fs.StringVar(&f.leaseIdentity, "leader-elect-identity", "", "this replica's name in the Lease (default: $POD_NAME, else host name and process id)")
	fs.DurationVar(&f.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "how long a standby waits after the leader last renewed before it takes over")
	fs.DurationVar(&f.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "how long the leader tries to renew before it stops acting")
	fs.DurationVar(&f.retryPeriod, "leader-elect-retry-period", 2*time.Second, "wait between tries to take or renew the Lease")
	fs.DurationVar(&f.reloadInterval, "reload-interval", 2*time.Second, "how often the token and certificate files are checked for changes")
	fs.Float64Var(&f.kubeQPS, "kube-api-qps", -1, "client-side cap on API server requests per second, or -1 for none: the API server's priority and fairness protects it, as SIG API Machinery advises (a cap of 50 made a burst of 1,000 starts wait 40 s in the client)")
	fs.IntVar(&f.kubeBurst, "kube-api-burst", 100, "burst of a positive -kube-api-qps")
	fs.IntVar(&f.spawnLimit, "concurrent-spawn-limit", 100, "starts in flight at once in each cluster, or -1 for no bound; more wait in order, their place in their progress (manager.Options.ConcurrentSpawnLimit): for a class starting at once, raise it with JupyterHub's concurrent_spawn_limit (docs/z2jh.md)")
	fs.IntVar(&f.verbosity, "v", 0, fmt.Sprintf("log verbosity, 0 to %d: 0 logs each request but a successful read, each reload and failure; 1 adds successful reads (a hub's polls) and details (the HTTP bounds, each API server's version), 2 to %d client-go's (informers, retries, the Lease); no level logs a token", maxVerbosity, maxVerbosity))
	fs.BoolVar(&f.check, "check", false, "check the flags, the token, the configuration and the certificate, then exit without contacting the cluster")
	fs.BoolVar(&f.version, "version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		return flags{}, err
	}
	if fs.NArg() > 0 {
		return flags{}, fmt.Errorf("unexpected arguments %q (all settings are flags; see -h)", fs.Args())
	}
	if f.version {
		return f, nil
	}
	if f.leaseNamespace == "" {
		f.leaseNamespace = getenv("POD_NAMESPACE")
	}
	if f.leaseIdentity == "" {
		f.leaseIdentity = getenv("POD_NAME")
	}
	return f, f.validate()
}

// validate checks what needs no file and no cluster, naming every flag
// that is wrong.
func (f flags) validate() error {
	var errs []error
	for _, a := range []struct{ name, value string }{{"-listen", f.listen}, {"-probe-listen", f.probeListen}} {
		if a.value == "" && a.name == "-probe-listen" {
			continue
		}
		_, port, err := net.SplitHostPort(a.value)
		if err == nil {
			// A port that is no number (a service name, a typo) would
			// fail only at Listen, which -check never reaches.
			if _, perr := strconv.ParseUint(port, 10, 16); perr != nil {
				err = fmt.Errorf("the port %q is not a number from 0 to 65535", port)
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s %q: want host:port (e.g. 127.0.0.1:8765, or :8765 for every interface): %v", a.name, a.value, err))
		}
	}
	if f.probeListen != "" && f.probeListen == f.listen {
		errs = append(errs, fmt.Errorf("-probe-listen %q is -listen's address: the probes have no token, so they need an address of their own", f.probeListen))
	}
	if (f.tlsCertFile == "") != (f.tlsKeyFile == "") {
		errs = append(errs, errors.New("-tls-cert-file and -tls-key-file go together: give both or neither"))
	}
	if f.leaderElect {
		if f.leaseName == "" {
			errs = append(errs, errors.New("-leader-elect-name is empty: the Lease needs a name"))
		}
		// The durations are checked by the Manager's LeaderElection
		// (client-go's rules), with the flag names added in prepare.
	}
	if f.reloadInterval <= 0 {
		errs = append(errs, fmt.Errorf("-reload-interval %s: want a positive duration", f.reloadInterval))
	}
	if err := checkClientLimit(f.kubeQPS, f.kubeBurst); err != nil {
		errs = append(errs, fmt.Errorf("-kube-api-qps %g and -kube-api-burst %d: %w", f.kubeQPS, f.kubeBurst, err))
	}
	if err := checkSpawnLimit(f.spawnLimit); err != nil {
		errs = append(errs, fmt.Errorf("-concurrent-spawn-limit %d: %w", f.spawnLimit, err))
	}
	if f.verbosity < 0 || f.verbosity > maxVerbosity {
		errs = append(errs, fmt.Errorf("-v %d: want 0 to %d (from 8, client-go logs the bodies of its API requests and answers, and with them the Secrets that hold the hub's tokens)", f.verbosity, maxVerbosity))
	}
	return errors.Join(errs...)
}

// checkClientLimit accepts a client-side rate limit: qps -1 (none) or a
// positive cap with a positive burst. 0 is refused rather than taken as
// client-go takes it (its default of 5 a second, which would hold a hub
// to about two starts a second), and so is any other negative number, a
// typo more likely than a choice.
func checkClientLimit(qps float64, burst int) error {
	switch {
	case qps == -1:
		return nil
	case qps <= 0:
		return errors.New("want a positive cap, or -1 for none (0 would be client-go's default of 5 a second)")
	case burst <= 0:
		return errors.New("a cap needs a positive burst")
	}
	return nil
}

// checkSpawnLimit accepts a bound on the Manager's starts in flight: a
// positive number, or -1 for none. 0 is refused rather than passed on,
// where the Manager would read it as its default of 100, and so is any
// other negative number, a typo more likely than a choice.
func checkSpawnLimit(n int) error {
	switch {
	case n == -1 || n > 0:
		return nil
	case n == 0:
		return errors.New("want a positive bound, or -1 for none (0 would be the Manager's default of 100, not \"no bound\")")
	}
	return errors.New("want a positive bound, or -1 for none")
}

// setClientLimit puts a limit checkClientLimit accepted on cfg: QPS -1
// makes client-go build no rate limiter at all.
func setClientLimit(cfg *rest.Config, qps float64, burst int) {
	cfg.QPS, cfg.Burst = float32(qps), burst
	if qps < 0 {
		cfg.Burst = 0
	}
}
