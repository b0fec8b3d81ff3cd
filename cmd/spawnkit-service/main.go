// Command spawnkit-service runs a spawnkit Manager behind the spawner
// API of package service, so that hubs written in other languages
// (JupyterHub above all) start, watch and stop per-user server pods
// through it. It is the deployable form of that package: leader election
// for two or more replicas, probes and Prometheus metrics on an address
// of their own, TLS, and a token and certificate reloaded when their
// files change. deploy/ holds its manifests; service/README.md describes
// the API and every flag.
//
//	spawnkit-service -config config.yaml -token-file /etc/spawnkit/token \
//	  -leader-elect -probe-listen :8766
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

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
		fmt.Fprintln(os.Stderr, "spawnkit-service:", err)
		os.Exit(1)
	}
}

// version is printed by -version; spawner.Version is the module's.
func version() string { return "spawnkit-service " + spawner.Version }

// run is the program: it serves until ctx ends. -check and -version
// return at once.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	f, err := parseFlags(args, getenv, stderr)
	if err != nil {
		return err
	}
	if f.version {
		fmt.Fprintln(stderr, version())
		return nil
	}
	p, err := prepare(f, getenv, stderr)
	if err != nil {
		return err
	}
	if f.check {
		fmt.Fprintf(stderr, "%s: the flags and files are usable (the cluster was not contacted)\n", version())
		return nil
	}
	return p.serve(ctx)
}
