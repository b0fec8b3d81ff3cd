package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/spawnkit/spawnkit/internal/keyhint"
	"github.com/spawnkit/spawnkit/internal/otelenv"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manager"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/service"
	"github.com/spawnkit/spawnkit/spawner"
)

// program is everything run checked before it serves: nothing in it has
// contacted the cluster yet.
type program struct {
	f     flags
	log   logr.Logger
	token *tokenSource
	cert  *certSource // nil without TLS
	cfg   kubespawner.Config
	// policy bounds the hubs' own configurations (-hub-policy).
	policy service.HubPolicy
	// clusters are the clusters to run servers in: -clusters', or one
	// unnamed from -kubeconfig.
	clusters []clusterSetup
}

// prepare reads and checks every file the flags name, and the
// configuration as the Manager will use it, so that -check and a real
// start fail alike and before anything runs.
func prepare(f flags, getenv func(string) string, stderr io.Writer) (*program, error) {
	p := &program{f: f, log: newLogger(stderr, f.verbosity), token: &tokenSource{}}
	token, err := loadToken(f.tokenFile, getenv)
	if err != nil {
		return nil, err
	}
	p.token.set(token)
	if p.cfg, err = loadConfig(f.config); err != nil {
		return nil, err
	}
	if p.policy, err = loadHubPolicy(f.hubPolicy); err != nil {
		return nil, err
	}
	// The namespaces the policy gives hubs are trusted and watched as
	// retired ones are: a server a hub put there is found after a
	// restart, whatever the hub's configuration says by then.
	// (Set as an option, so that the clusters' overrides and the hubs'
	// configurations, made from the options, keep them.)
	if len(p.policy.Namespaces) > 0 {
		retired := slices.Clone(p.cfg.RetiredNamespaces)
		for _, ns := range p.policy.Namespaces {
			if !slices.Contains(retired, ns) {
				retired = append(retired, ns)
			}
		}
		raw, _ := json.Marshal(retired)
		if p.cfg, err = p.cfg.WithOptions(map[string]json.RawMessage{"retired_namespaces": raw}); err != nil {
			return nil, fmt.Errorf("hub policy %s: namespaces: %w", f.hubPolicy, err)
		}
	}
	if f.tlsCertFile != "" {
		p.cert = &certSource{certFile: f.tlsCertFile, keyFile: f.tlsKeyFile}
		if err := p.cert.load(); err != nil {
			return nil, err
		}
	}
	switch {
	case f.clusters != "":
		if p.clusters, err = loadClusters(f, p.cfg); err != nil {
			return nil, err
		}
	case f.check && f.kubeconfig == "":
		// -check runs where the pod's args are written (a laptop, CI),
		// not in the cluster: the cluster is not part of the check. Any
		// address does for the Manager's own checks, which make no call.
		p.clusters = []clusterSetup{{rest: &rest.Config{Host: "https://kubernetes.default.svc"}}}
	default:
		rc, err := restConfig(f)
		if err != nil {
			return nil, err
		}
		p.clusters = []clusterSetup{{rest: rc}}
	}
	// The configuration and the election settings, checked as the
	// Manager checks them (no API call is made before Start).
	cs, release, err := p.newClusters(nil)
	if err != nil {
		return nil, fmt.Errorf("the cluster config: %w", err)
	}
	defer release()
	if _, err := p.newManager(cs, nil, nil); err != nil {
		return nil, err
	}
	return p, nil
}

func loadConfig(file string) (kubespawner.Config, error) {
	if file == "" {
		return kubespawner.Config{}, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return kubespawner.Config{}, fmt.Errorf("reading the configuration: %w", err)
	}
	cfg, err := kubespawner.Load(data)
	if err != nil {
		return kubespawner.Config{}, fmt.Errorf("configuration %s: %w", file, err)
	}
	return cfg, nil
}

// loadHubPolicy reads -hub-policy: YAML or JSON, every key known.
func loadHubPolicy(file string) (service.HubPolicy, error) {
	var p service.HubPolicy
	if file == "" {
		return p, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return p, fmt.Errorf("reading the hub policy: %w", err)
	}
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return p, fmt.Errorf("hub policy %s: %w", file, keyhint.Explain(data, err, keyhint.JSONKeys(p)))
	}
	if err := p.Check(); err != nil {
		return p, fmt.Errorf("hub policy %s: %w", file, err)
	}
	return p, nil
}

func restConfig(f flags) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the cluster config: %w", err)
	}
	setClientLimit(cfg, f.kubeQPS, f.kubeBurst)
	cfg.UserAgent = "spawnkit-service/" + spawner.Version
	// A connection that stops forwarding is found within 10 s, not
	// client-go's 45 s: the informers' watches share it.
	return reflector.DetectStalls(cfg)
}

// newManager makes the Manager the flags describe over cs (newClusters).
func (p *program) newManager(cs []kubeCluster, reg prometheus.Registerer, tp trace.TracerProvider) (*manager.Manager, error) {
	opts := manager.Options{Config: p.cfg, Registerer: reg, Clusters: p.managerClusters(cs), AdoptKubeSpawner: p.f.adoptKubeSpawner,
		TracerProvider: tp, HashNames: p.f.traceHashNames, ConcurrentSpawnLimit: p.f.spawnLimit}
	if opts.Clusters == nil {
		opts.Client, opts.Registry = cs[0].client, cs[0].registry
	}
	if p.f.leaderElect {
		opts.LeaderElection = &manager.LeaderElection{
			Namespace: p.f.leaseNamespace, Name: p.f.leaseName, Identity: p.f.leaseIdentity,
			LeaseDuration: p.f.leaseDuration, RenewDeadline: p.f.renewDeadline, RetryPeriod: p.f.retryPeriod,
		}
	}
	m, err := manager.New(opts)
	if err != nil && p.f.leaderElect && strings.Contains(err.Error(), "LeaderElection") {
		return nil, fmt.Errorf("%w (flags -leader-elect-lease-duration, -leader-elect-renew-deadline, -leader-elect-retry-period)", err)
	}
	return m, err
}

// newRegistry makes the shared informers' Registry: its pod informers
// select the configuration's component_label (a Spawner refuses a
// Registry that caches other pods), and with reg its health is exported
// (spawnkit_reflector_*).
func (p *program) newRegistry(client kubernetes.Interface, reg prometheus.Registerer) (*reflector.Registry, error) {
	component := p.cfg.ComponentLabel
	if component == "" {
		component = naming.DefaultComponent
	}
	return reflector.New(reflector.Options{Client: client, PodLabelSelector: naming.LabelComponent + "=" + component, Registerer: reg})
}

// newLogger logs to w what is at verbosity or below (-v).
func newLogger(w io.Writer, verbosity int) logr.Logger {
	return funcr.New(func(prefix, args string) {
		if prefix != "" {
			args = prefix + ": " + args
		}
		fmt.Fprintln(w, args)
	}, funcr.Options{LogTimestamp: true, Verbosity: verbosity})
}

// serve runs the Manager, the API, the probes and the file watcher until
// ctx ends or one of them fails. On ctx's end the Manager stops acting
// (its starts are detached, never deleted) and gives its Lease back; the
// API then closes (open progress streams end with ctx too).
func (p *program) serve(ctx context.Context) error {
	log := p.log
	ctx = logr.NewContext(ctx, log)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cs, release, err := p.newClusters(reg)
	if err != nil {
		return err
	}
	defer release()
	// The Lease, and the probes' ping, are the default cluster's.
	client := cs[0].client
	tp, stopTracing, err := otelenv.Setup(ctx, "spawnkit-service", spawner.Version, nil)
	if err != nil {
		return err
	}
	defer func() {
		// Flush the spans not yet exported, for a bounded while.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := stopTracing(sctx); err != nil {
			log.Error(err, "flushing the last spans")
		}
	}()
	if tp != nil {
		log.Info("exporting traces over OTLP (OTEL_* environment)", "hashNames", p.f.traceHashNames)
	}
	m, err := p.newManager(cs, reg, tp)
	if err != nil {
		return err
	}
	api, err := service.New(service.Options{Manager: m, Token: p.token.get, Log: log, Registerer: reg, HubPolicy: p.policy})
	if err != nil {
		return err
	}
	bounds := serviceBounds
	ln, err := bounds.listen(p.f.listen)
	if err != nil {
		return fmt.Errorf("-listen: %w", err)
	}
	var probeLn net.Listener
	if p.f.probeListen != "" {
		if probeLn, err = bounds.listen(p.f.probeListen); err != nil {
			ln.Close()
			return fmt.Errorf("-probe-listen: %w", err)
		}
	}
	scheme := "http"
	srv := bounds.server(api)
	srv.BaseContext = func(net.Listener) context.Context { return ctx }
	if p.cert != nil {
		scheme = "https"
		srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: p.cert.getCertificate}
		ln = tls.NewListener(ln, srv.TLSConfig)
	} else if !isLoopback(ln.Addr()) {
		log.Info("WARNING: the API listens beyond loopback without TLS; anyone who can reach it sees the token, and with it creates pods (give -tls-cert-file and -tls-key-file)", "address", ln.Addr().String())
	}
	servers := []*http.Server{srv}
	listeners := []net.Listener{ln}
	if probeLn != nil {
		probes, err := service.Probes(service.ProbeOptions{Manager: m, Gatherer: reg, Ping: func(ctx context.Context) error {
			return client.Discovery().RESTClient().Get().AbsPath("/version").Do(ctx).Error()
		}, Namespaces: namespaceCheck(cs, m, p.f.clusters != "")})
		if err != nil {
			return err
		}
		servers = append(servers, bounds.server(probes))
		listeners = append(listeners, probeLn)
		log.Info("serving the probes and metrics", "url", "http://"+probeLn.Addr().String()+"/readyz")
	}
	log.Info("serving the spawner API", "url", scheme+"://"+ln.Addr().String()+"/v1/", "leaderElect", p.f.leaderElect, "adoptKubeSpawner", p.f.adoptKubeSpawner, "version", spawner.Version)
	log.V(1).Info("HTTP bounds of the API and the probes", "header", bounds.header.String(), "read", bounds.read.String(),
		"write", bounds.write.String(), "idle", bounds.idle.String(), "maxHeaderBytes", bounds.maxHeaderBytes)
	if len(cs) > 1 || p.f.clusters != "" {
		names := make([]string, len(cs))
		for i, c := range cs {
			names[i] = c.name
		}
		log.Info("running servers in several clusters", "clusters", names, "default", names[0])
	}

	g, gctx := errgroup.WithContext(ctx)
	managerDone := make(chan struct{})
	g.Go(func() error {
		defer close(managerDone)
		return m.Start(gctx)
	})
	var watched []*reloadable
	if p.f.tokenFile != "" {
		watched = append(watched, &reloadable{what: "API token", files: []string{p.f.tokenFile}, reload: func() error {
			token, err := readToken(p.f.tokenFile)
			if err == nil {
				p.token.set(token)
			}
			return err
		}})
	}
	if p.cert != nil {
		watched = append(watched, &reloadable{what: "TLS certificate", files: []string{p.f.tlsCertFile, p.f.tlsKeyFile}, reload: p.cert.load})
	}
	if len(watched) > 0 {
		g.Go(func() error { return watchFiles(gctx, p.f.reloadInterval, log, watched...) })
	}
	for i, s := range servers {
		g.Go(func() error {
			if err := s.Serve(listeners[i]); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	g.Go(func() error {
		<-gctx.Done()
		// The API closes once the Manager has stopped acting: a request
		// meanwhile gets 503 NotLeader or NotReady, not a dropped
		// connection. The probes close last, so a kubelet sees the
		// replica go unready rather than vanish.
		<-managerDone
		var errs []error
		for _, s := range servers {
			shutdown, cancel := context.WithTimeout(context.WithoutCancel(gctx), 5*time.Second)
			errs = append(errs, s.Shutdown(shutdown))
			cancel()
		}
		return errors.Join(errs...)
	})
	return g.Wait()
}

func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
