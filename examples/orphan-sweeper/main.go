// Command orphan-sweeper lists the pods, claims, secrets, services and
// user namespaces that no server of a hub owns, and deletes them when
// told to (--apply). The hub's servers come from a JSON file or from a
// JupyterHub-compatible REST API.
//
//	orphan-sweeper --known servers.json
//	orphan-sweeper --hub-url http://hub:8081 --apply      # token in JUPYTERHUB_API_TOKEN
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/spawnkit/spawnkit/orphan"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "orphan-sweeper:", err)
		os.Exit(1)
	}
}

// knownServer is one entry of the --known file.
type knownServer struct {
	User    string `json:"user"`
	Server  string `json:"server"`
	Running bool   `json:"running"`
}

func run(ctx context.Context, args []string, out io.Writer) error {
	flags := flag.NewFlagSet("orphan-sweeper", flag.ContinueOnError)
	kubeconfig := flags.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig (default: in-cluster or $KUBECONFIG)")
	knownFile := flags.String("known", "", `JSON file of the hub's servers: [{"user": "alice", "server": "", "running": true}, ...]`)
	hubURL := flags.String("hub-url", "", "JupyterHub base URL; the token comes from $JUPYTERHUB_API_TOKEN")
	namespaces := flags.String("namespaces", "", "comma-separated namespaces (default: all)")
	kinds := flags.String("kinds", "", "comma-separated kinds to delete (default: Pod,Secret,Service)")
	minAge := flags.Duration("min-age", orphan.DefaultMinAge, "delete nothing younger")
	apply := flags.Bool("apply", false, "delete the orphans (default: only list them)")
	asJSON := flags.Bool("json", false, "print JSON instead of a table")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if (*knownFile == "") == (*hubURL == "") {
		return errors.New("give exactly one of --known and --hub-url")
	}
	var known *orphan.Known
	var err error
	if *knownFile != "" {
		known, err = knownFromFile(*knownFile)
	} else {
		known, err = knownFromHub(ctx, *hubURL, os.Getenv("JUPYTERHUB_API_TOKEN"))
	}
	if err != nil {
		return err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return fmt.Errorf("loading the cluster config: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	orphans, err := orphan.List(ctx, known, orphan.Options{Client: client, Namespaces: split(*namespaces)})
	if err != nil {
		return err
	}
	cleanup := orphan.CleanupOptions{Client: client, DryRun: !*apply, MinAge: *minAge}
	if *minAge == 0 {
		cleanup.MinAge = orphan.NoMinAge
	}
	for _, k := range split(*kinds) {
		cleanup.Kinds = append(cleanup.Kinds, orphan.Kind(k))
	}
	report, err := orphan.Cleanup(ctx, orphans, cleanup)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Orphans []orphan.Orphan
			Report  orphan.Report
		}{orphans, report})
	}
	printTable(out, orphans, report, time.Now())
	return nil
}

func printTable(out io.Writer, orphans []orphan.Orphan, report orphan.Report, now time.Time) {
	outcome := map[string]string{}
	key := func(o orphan.Orphan) string { return string(o.Kind) + "/" + o.Namespace + "/" + o.Name }
	for _, o := range report.Deleted {
		outcome[key(o)] = "deleted"
	}
	for _, s := range report.Skipped {
		outcome[key(s.Orphan)] = "kept: " + s.Reason
	}
	for _, f := range report.Failed {
		outcome[key(f.Orphan)] = "FAILED: " + f.Err.Error()
	}
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "KIND\tNAMESPACE\tNAME\tSERVER\tREASON\tAGE\tOUTCOME")
	for _, o := range orphans {
		server := o.Server.String()
		if !o.Attributed {
			server = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", o.Kind, o.Namespace, o.Name, server, o.Reason,
			o.Age(now).Round(time.Second), outcome[key(o)])
	}
	w.Flush()
	fmt.Fprintf(out, "%d orphans: %d deleted, %d kept, %d failed\n", len(orphans), len(report.Deleted), len(report.Skipped), len(report.Failed))
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func knownFromFile(path string) (*orphan.Known, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var servers []knownServer
	if err := json.Unmarshal(data, &servers); err != nil {
		return nil, fmt.Errorf("%s: want a JSON list of {user, server, running}: %w", path, err)
	}
	known := orphan.NewKnown(len(servers))
	for _, s := range servers {
		if s.User == "" {
			return nil, fmt.Errorf("%s: a server without a user", path)
		}
		known.Add(s.User, s.Server, s.Running)
	}
	return known, nil
}

// knownFromHub reads the servers from JupyterHub's REST API
// (GET /hub/api/users?include_stopped_servers, paginated): a server is
// running unless the hub reports it stopped.
func knownFromHub(ctx context.Context, base, token string) (*orphan.Known, error) {
	if token == "" {
		return nil, errors.New("set JUPYTERHUB_API_TOKEN to a token with the read:users and read:servers scopes")
	}
	known := orphan.NewKnown(0)
	client := &http.Client{Timeout: 30 * time.Second}
	for offset := 0; ; {
		u := strings.TrimRight(base, "/") + "/hub/api/users?" + url.Values{
			"include_stopped_servers": {"1"}, "offset": {fmt.Sprint(offset)}, "limit": {"200"},
		}.Encode()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "token "+token)
		req.Header.Set("Accept", "application/jupyterhub-pagination+json")
		resp, err := client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("asking the hub for its users: %w", err)
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("the hub answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
		}
		var page struct {
			Items []struct {
				Name    string `json:"name"`
				Servers map[string]struct {
					Stopped bool `json:"stopped"`
				} `json:"servers"`
			} `json:"items"`
			Pagination struct {
				Next *struct {
					Offset int `json:"offset"`
				} `json:"next"`
			} `json:"_pagination"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return nil, fmt.Errorf("reading the hub's user list: %w", err)
		}
		for _, user := range page.Items {
			if len(user.Servers) == 0 {
				known.Add(user.Name, "", false) // a known user with no server: keeps their claims
			}
			for name, srv := range user.Servers {
				known.Add(user.Name, name, !srv.Stopped)
			}
		}
		if page.Pagination.Next == nil || len(page.Items) == 0 {
			return known, nil
		}
		offset = page.Pagination.Next.Offset
	}
}
