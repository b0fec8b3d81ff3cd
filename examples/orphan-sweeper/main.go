// Command orphan-sweeper lists the pods, claims, secrets, services and
// user namespaces that no server of a hub owns, and deletes them when
// told to (--apply). The hub's servers come from a JSON file or from a
// JupyterHub-compatible REST API.
//
//	orphan-sweeper --known servers.json
//	orphan-sweeper --hub-url http://hub:8081 --apply      # token in JUPYTERHUB_API_TOKEN
//	orphan-sweeper --kubeconfig gpu-eu.kubeconfig --cluster gpu-eu --known servers.json
//
// With several clusters it runs once per cluster, --cluster naming the
// one its kubeconfig reaches: a server the hub records in another
// cluster ("cluster" in the --known file, or the cluster in the spawnkit
// state the hub keeps) leaves orphans here, its claims excepted.
package main

import (
	"bytes"
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

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
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

// knownServer is one entry of the --known file; user and running are
// required (a missing "running" would read as stopped, and a stopped
// server's pod is deleted).
type knownServer struct {
	User    *string `json:"user"`
	Server  string  `json:"server"`
	Running *bool   `json:"running"`
	// Cluster is where the server lives, with several clusters ("":
	// unknown, as if in every cluster).
	Cluster string `json:"cluster"`
}

// defaultMaxDelete is --max-delete's default: a routine sweep deletes a
// few objects; more asks for a deliberate, larger limit.
const defaultMaxDelete = 20

func run(ctx context.Context, args []string, out io.Writer) error {
	flags := flag.NewFlagSet("orphan-sweeper", flag.ContinueOnError)
	kubeconfig := flags.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig (default: in-cluster or $KUBECONFIG)")
	knownFile := flags.String("known", "", `JSON file of the hub's servers: [{"user": "alice", "server": "", "running": true}, ...]`)
	hubURL := flags.String("hub-url", "", "JupyterHub base URL; the token comes from $JUPYTERHUB_API_TOKEN")
	namespaces := flags.String("namespaces", "", "comma-separated namespaces (default: all)")
	kinds := flags.String("kinds", "", "comma-separated kinds to delete: Pod, PersistentVolumeClaim, Secret, Service, Namespace (default: Pod,Secret,Service)")
	minAge := flags.Duration("min-age", orphan.DefaultMinAge, "delete nothing younger (0: any age)")
	apply := flags.Bool("apply", false, "delete the orphans (default: only list them)")
	maxDelete := flags.Int("max-delete", defaultMaxDelete, "with --apply, delete nothing if more than this many objects would be deleted")
	allowEmpty := flags.Bool("allow-empty-known", false, "allow a hub that knows no servers at all (every object is then an orphan)")
	asJSON := flags.Bool("json", false, "print JSON instead of a table")
	clusterName := flags.String("cluster", "", "with several clusters: the name of the cluster --kubeconfig reaches (as the hub's spawnkit service names it); servers the hub records elsewhere leave orphans here")
	selector := flags.String("selector", orphan.DefaultSelector,
		"label selector of the objects to look at; a hub migrating from KubeSpawner uses 'app.kubernetes.io/managed-by in (spawnkit,kubespawner)'")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (flags take the form --name=value)", flags.Args())
	}
	if (*knownFile == "") == (*hubURL == "") {
		return errors.New("give exactly one of --known and --hub-url")
	}
	if *minAge < 0 {
		return fmt.Errorf("--min-age %s is negative; 0 means any age", *minAge)
	}
	if *maxDelete < 0 {
		return fmt.Errorf("--max-delete %d is negative", *maxDelete)
	}
	if *clusterName != "" {
		if msgs := validation.IsDNS1123Label(*clusterName); len(msgs) > 0 {
			return fmt.Errorf("--cluster %q: want a cluster name (a DNS-1123 label): %s", *clusterName, strings.Join(msgs, "; "))
		}
	}
	if sel, err := labels.Parse(*selector); err != nil {
		return fmt.Errorf("--selector %q: %w", *selector, err)
	} else if sel.Empty() {
		return fmt.Errorf("--selector %q selects every object; name the managed-by label, e.g. %q", *selector, orphan.DefaultSelector)
	}
	var cleanupKinds []orphan.Kind
	for _, k := range split(*kinds) {
		kind, err := orphan.ParseKind(k)
		if err != nil {
			return fmt.Errorf("--kinds: %w", err)
		}
		cleanupKinds = append(cleanupKinds, kind)
	}
	if *kinds != "" && len(cleanupKinds) == 0 {
		return fmt.Errorf("--kinds %q names no kind", *kinds)
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
	if known.Len() == 0 && !*allowEmpty {
		return errors.New("the hub knows no servers at all, which would make every object an orphan; " +
			"if that is really so, pass --allow-empty-known")
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
	orphans, err := orphan.List(ctx, known, orphan.Options{Client: client, Namespaces: split(*namespaces), LabelSelector: *selector, Cluster: *clusterName})
	if err != nil {
		return err
	}
	cleanup := orphan.CleanupOptions{Client: client, DryRun: true, MinAge: *minAge, Kinds: cleanupKinds, Cluster: *clusterName}
	if *minAge == 0 {
		cleanup.MinAge = orphan.NoMinAge
	}
	// A dry run first: it decides what --apply would delete.
	report, err := orphan.Cleanup(ctx, orphans, cleanup)
	if err != nil {
		return err
	}
	if *apply {
		var doomed []orphan.Orphan
		var kept []orphan.Skipped
		for _, s := range report.Skipped {
			if s.Reason == "dry run" {
				doomed = append(doomed, s.Orphan)
			} else {
				kept = append(kept, s)
			}
		}
		if len(doomed) > *maxDelete {
			printPlan(errOut(out, *asJSON), doomed)
			return fmt.Errorf("%d objects would be deleted, more than --max-delete %d: nothing deleted", len(doomed), *maxDelete)
		}
		printPlan(errOut(out, *asJSON), doomed)
		cleanup.DryRun = false
		if report, err = orphan.Cleanup(ctx, doomed, cleanup); err != nil {
			return err
		}
		report.Skipped = append(report.Skipped, kept...)
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
		reason := string(o.Reason)
		if o.ServerCluster != "" {
			reason += " (lives in " + o.ServerCluster + ")"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", o.Kind, o.Namespace, o.Name, server, reason,
			o.Age(now).Round(time.Second), outcome[key(o)])
	}
	w.Flush()
	fmt.Fprintf(out, "%d orphans: %d deleted, %d kept, %d failed\n", len(orphans), len(report.Deleted), len(report.Skipped), len(report.Failed))
}

// printPlan says what --apply is about to delete, with the counts by
// kind, before anything is deleted.
func printPlan(w io.Writer, doomed []orphan.Orphan) {
	counts := map[orphan.Kind]int{}
	for _, o := range doomed {
		counts[o.Kind]++
		fmt.Fprintf(w, "will delete %s\n", o)
	}
	var parts []string
	for _, k := range orphan.AllKinds {
		if counts[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
		}
	}
	if len(parts) == 0 {
		parts = []string{"nothing"}
	}
	fmt.Fprintf(w, "will delete %d objects: %s\n", len(doomed), strings.Join(parts, ", "))
}

// errOut is where the plan goes: stdout, unless stdout carries JSON.
func errOut(out io.Writer, asJSON bool) io.Writer {
	if asJSON {
		return os.Stderr
	}
	return out
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
	return parseKnown(path, data)
}

// parseKnown decodes the --known file strictly: a JSON list of objects
// with "user" and "running" (and "server"); null, an unknown or misspelt
// key, a duplicate server or trailing data is an error, never a guess.
func parseKnown(name string, data []byte) (*orphan.Known, error) {
	const want = `want a JSON list of {"user": ..., "server": ..., "running": true|false}`
	dec := json.NewDecoder(bytes.NewReader(data))
	var raw []json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%s: %s: %w", name, want, err)
	}
	if raw == nil {
		return nil, fmt.Errorf("%s: %s, not null", name, want)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: trailing data after the list", name)
	}
	known := orphan.NewKnown(len(raw))
	seen := map[orphan.ServerKey]bool{}
	for i, r := range raw {
		var s knownServer
		ed := json.NewDecoder(bytes.NewReader(r))
		ed.DisallowUnknownFields()
		if bytes.Equal(bytes.TrimSpace(r), []byte("null")) {
			return nil, fmt.Errorf("%s: entry %d is null; %s", name, i, want)
		}
		if err := ed.Decode(&s); err != nil {
			return nil, fmt.Errorf("%s: entry %d: %s: %w", name, i, want, err)
		}
		switch {
		case s.User == nil || *s.User == "":
			return nil, fmt.Errorf("%s: entry %d has no \"user\"", name, i)
		case s.Running == nil:
			return nil, fmt.Errorf("%s: entry %d (%s) has no \"running\" (a server read as stopped loses its pod)", name, i, *s.User)
		}
		key := orphan.ServerKey{User: *s.User, Server: s.Server}
		if seen[key] {
			return nil, fmt.Errorf("%s: entry %d: server %s is listed twice", name, i, key)
		}
		seen[key] = true
		if s.Cluster != "" {
			if msgs := validation.IsDNS1123Label(s.Cluster); len(msgs) > 0 {
				return nil, fmt.Errorf("%s: entry %d (%s): cluster %q is no cluster name: %s", name, i, key, s.Cluster, strings.Join(msgs, "; "))
			}
		}
		known.AddIn(s.Cluster, *s.User, s.Server, *s.Running)
	}
	return known, nil
}

// knownFromHub reads the servers from JupyterHub's REST API
// (GET /hub/api/users?include_stopped_servers, paginated): a server is
// running unless the hub reports it stopped. With the admin:server_state
// scope the hub includes each server's state, whose spawnkit state names
// its cluster (with several clusters); without it every server counts as
// living in every cluster.
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
			Items *[]struct {
				Name    string `json:"name"`
				Servers *map[string]*struct {
					Stopped bool `json:"stopped"`
					State   *struct {
						Spawnkit *struct {
							Cluster string `json:"cluster"`
						} `json:"spawnkit_state"`
					} `json:"state"`
				} `json:"servers"`
			} `json:"items"`
			Pagination *struct {
				Total *int `json:"total"`
				Next  *struct {
					Offset int `json:"offset"`
				} `json:"next"`
			} `json:"_pagination"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return nil, fmt.Errorf("reading the hub's user list: %w", err)
		}
		// An answer that is not a page of users is an error, never "no
		// servers": that would make every object an orphan.
		if page.Items == nil || page.Pagination == nil {
			return nil, errors.New("the hub's answer is not a paginated user list (no items or _pagination); is --hub-url the hub's base URL?")
		}
		if len(*page.Items) == 0 && page.Pagination.Total != nil && *page.Pagination.Total > offset {
			return nil, fmt.Errorf("the hub reports %d users but returned none at offset %d", *page.Pagination.Total, offset)
		}
		for _, user := range *page.Items {
			if user.Name == "" {
				return nil, errors.New("the hub returned a user without a name")
			}
			if user.Servers == nil {
				// Without the read:servers scope the hub leaves servers
				// out: every server would look unknown.
				return nil, fmt.Errorf("the hub returned user %q without servers; the token needs the read:servers scope", user.Name)
			}
			if len(*user.Servers) == 0 {
				known.Add(user.Name, "", false) // a known user with no server: keeps their claims
			}
			for name, srv := range *user.Servers {
				if srv == nil {
					return nil, fmt.Errorf("the hub returned server %q of user %q as null", name, user.Name)
				}
				cluster := ""
				if srv.State != nil && srv.State.Spawnkit != nil {
					cluster = srv.State.Spawnkit.Cluster
				}
				known.AddIn(cluster, user.Name, name, !srv.Stopped)
			}
		}
		if page.Pagination.Next == nil || len(*page.Items) == 0 {
			return known, nil
		}
		if page.Pagination.Next.Offset <= offset {
			return nil, fmt.Errorf("the hub's pagination does not advance (next offset %d after %d)", page.Pagination.Next.Offset, offset)
		}
		offset = page.Pagination.Next.Offset
	}
}
