// Command hub is a small hub: an HTTP API over spawner.Manager that starts,
// watches and stops user servers, the way JupyterHub drives KubeSpawner.
// It shows how a Go hub embeds spawnkit; it does no authentication.
//
//	go run ./examples/hub -config config.yaml -kubeconfig ~/.kube/config
//
// API (server "" is the user's default server, at /users/{user}/server):
//
//	POST   /users/{user}/servers/{server}            start; body: {"profile": "...", ...} user options
//	GET    /users/{user}/servers/{server}            status as JSON
//	GET    /users/{user}/servers/{server}/progress   progress as server-sent events, ending with ready or failed
//	DELETE /users/{user}/servers/{server}            stop
//	GET    /servers                                  every server the hub knows
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

func main() {
	flags := flag.NewFlagSet("hub", flag.ExitOnError)
	kubeconfig := flags.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig (default: in-cluster)")
	configFile := flags.String("config", "", "KubeSpawner-style YAML configuration")
	addr := flags.String("listen", "127.0.0.1:8081", "address to serve the API on")
	_ = flags.Parse(os.Args[1:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig, *configFile, *addr); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, kubeconfig, configFile, addr string) error {
	cfg := spawner.Config{}
	if configFile != "" {
		data, err := os.ReadFile(configFile)
		if err != nil {
			return err
		}
		if cfg, err = spawner.LoadConfig(data); err != nil {
			return err
		}
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	rest, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("loading the cluster config: %w", err)
	}
	rest.QPS, rest.Burst = 50, 100 // client-go's 5/10 would throttle spawns
	client, err := kubernetes.NewForConfig(rest)
	if err != nil {
		return err
	}
	registry, err := reflector.New(reflector.Options{Client: client})
	if err != nil {
		return err
	}
	manager, err := spawner.NewManager(spawner.ManagerOptions{Client: client, Registry: registry, Config: cfg})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	log.Printf("hub API on http://%s", ln.Addr())
	return serve(ctx, ln, manager)
}

// serve runs the manager and the API until ctx ends.
func serve(ctx context.Context, ln net.Listener, manager *spawner.Manager) error {
	srv := &http.Server{Handler: newAPI(manager), ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return manager.Start(gctx) })
	g.Go(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shutdown)
	})
	return g.Wait()
}

func newAPI(m *spawner.Manager) http.Handler {
	mux := http.NewServeMux()
	for _, prefix := range []string{"/users/{user}/server", "/users/{user}/servers/{server}"} {
		mux.HandleFunc("POST "+prefix, func(w http.ResponseWriter, r *http.Request) {
			var userOptions map[string]string
			if r.ContentLength != 0 {
				if err := json.NewDecoder(r.Body).Decode(&userOptions); err != nil {
					http.Error(w, "user options must be a JSON object of strings: "+err.Error(), http.StatusBadRequest)
					return
				}
			}
			err := m.Spawn(r.Context(), serverOf(r), spawner.SpawnOptions{UserOptions: userOptions})
			var pe *spawner.ProfileError
			switch {
			case errors.As(err, &pe):
				http.Error(w, err.Error(), http.StatusBadRequest)
			case errors.Is(err, spawner.ErrBusy):
				http.Error(w, err.Error(), http.StatusConflict)
			case err != nil:
				http.Error(w, err.Error(), http.StatusInternalServerError)
			default:
				w.WriteHeader(http.StatusAccepted)
			}
		})
		mux.HandleFunc("GET "+prefix, func(w http.ResponseWriter, r *http.Request) {
			st, ok := m.Status(serverOf(r))
			if !ok {
				http.Error(w, "no such server", http.StatusNotFound)
				return
			}
			writeJSON(w, statusJSON(st))
		})
		mux.HandleFunc("GET "+prefix+"/progress", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Cache-Control", "no-cache")
			flusher, _ := w.(http.Flusher)
			for e := range m.Events(r.Context(), serverOf(r)) {
				data, _ := json.Marshal(map[string]any{"progress": e.Progress, "message": e.Message,
					"ready": e.Ready, "failed": e.Failed, "url": e.URL})
				fmt.Fprintf(w, "data: %s\n\n", data)
				if flusher != nil {
					flusher.Flush()
				}
			}
		})
		mux.HandleFunc("DELETE "+prefix, func(w http.ResponseWriter, r *http.Request) {
			if err := m.Stop(r.Context(), serverOf(r)); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
	}
	mux.HandleFunc("GET /servers", func(w http.ResponseWriter, r *http.Request) {
		var out []map[string]any
		for _, st := range m.List() {
			out = append(out, statusJSON(st))
		}
		writeJSON(w, out)
	})
	return mux
}

func serverOf(r *http.Request) naming.Server {
	return naming.Server{Username: r.PathValue("user"), Servername: r.PathValue("server")}
}

func statusJSON(st spawner.ServerStatus) map[string]any {
	out := map[string]any{"user": st.Server.Username, "server": st.Server.Servername, "phase": st.Phase,
		"url": st.URL, "pod": st.State.PodName, "namespace": st.State.Namespace}
	if st.Err != nil {
		out["error"] = st.Err.Error()
	}
	return out
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
