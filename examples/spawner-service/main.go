// Command spawner-service runs a spawnkit Manager behind a small,
// versioned, token-authenticated HTTP API, so that hubs written in other
// languages (JupyterHub above all) start, watch and stop per-user server
// pods through it. The API is described in openapi.yaml; README.md shows
// how to run and call it.
//
//	SPAWNKIT_SERVICE_TOKEN=$(openssl rand -hex 32) \
//	  go run ./examples/spawner-service -config config.yaml -kubeconfig ~/.kube/config
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/spawnkit/spawnkit/spawner"
)

// tokenEnv holds the token when -token-file is not given.
const tokenEnv = "SPAWNKIT_SERVICE_TOKEN"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "spawner-service:", err)
		os.Exit(1)
	}
}

// flags are the command line.
type flags struct {
	kubeconfig, config, listen, tokenFile string
}

func parseFlags(args []string, stderr io.Writer) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("spawner-service", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, then in-cluster)")
	fs.StringVar(&f.config, "config", "", "KubeSpawner-style YAML configuration (spawner.LoadConfig)")
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8081", "address to serve the API on; keep it on loopback or a private network")
	fs.StringVar(&f.tokenFile, "token-file", "", "file holding the API token (surrounding whitespace trimmed); wins over $"+tokenEnv)
	if err := fs.Parse(args); err != nil {
		return flags{}, err
	}
	if fs.NArg() > 0 {
		return flags{}, fmt.Errorf("unexpected arguments %q (all settings are flags; see -h)", fs.Args())
	}
	return f, nil
}

// loadToken reads the token from file if given, else from the
// environment, trimmed; no token is an error, since the API creates pods
// for anyone who can call it.
func loadToken(file string, getenv func(string) string) (string, error) {
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("reading the token: %w", err)
		}
		if token := strings.TrimSpace(string(data)); token != "" {
			return token, nil
		}
		return "", fmt.Errorf("the token file %s is empty", file)
	}
	if token := strings.TrimSpace(getenv(tokenEnv)); token != "" {
		return token, nil
	}
	return "", fmt.Errorf("no API token: set -token-file or $%s (the API creates pods for anyone who can call it, so it refuses to run open)", tokenEnv)
}

func loadConfig(file string) (spawner.Config, error) {
	if file == "" {
		return spawner.Config{}, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return spawner.Config{}, fmt.Errorf("reading the configuration: %w", err)
	}
	cfg, err := spawner.LoadConfig(data)
	if err != nil {
		return spawner.Config{}, fmt.Errorf("configuration %s: %w", file, err)
	}
	return cfg, nil
}

func newClient(kubeconfig string) (kubernetes.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	rest, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("loading the cluster config: %w", err)
	}
	rest.QPS, rest.Burst = 50, 100 // client-go's 5/10 would throttle spawns
	return kubernetes.NewForConfig(rest)
}

func newLogger(w io.Writer) logr.Logger {
	return funcr.New(func(prefix, args string) {
		if prefix != "" {
			args = prefix + ": " + args
		}
		fmt.Fprintln(w, args)
	}, funcr.Options{LogTimestamp: true})
}

// run is the program: it serves until ctx ends.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	f, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	token, err := loadToken(f.tokenFile, getenv)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(f.config)
	if err != nil {
		return err
	}
	client, err := newClient(f.kubeconfig)
	if err != nil {
		return err
	}
	svc, err := newManagerBackend(client, cfg)
	if err != nil {
		return err
	}
	log := newLogger(stderr)
	ln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	if !isLoopback(ln.Addr()) {
		log.Info("WARNING: the API listens beyond loopback; anyone who can reach it and has the token creates pods", "address", ln.Addr().String())
	}
	log.Info("serving the spawner API", "url", "http://"+ln.Addr().String()+"/v1/")
	return serve(logr.NewContext(ctx, log), ln, svc, handlerOptions{Token: token, Log: log})
}

func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// service is a backend with a controller that runs until ctx ends.
type service interface {
	backend
	Start(ctx context.Context) error
}

// serve runs svc and the API on ln until ctx ends. Request contexts
// derive from ctx, so open progress streams end with it too.
func serve(ctx context.Context, ln net.Listener, svc service, opts handlerOptions) error {
	srv := &http.Server{
		Handler:           newHandler(svc, opts),
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return svc.Start(gctx) })
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(gctx), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shutdown)
	})
	return g.Wait()
}
