package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/spawnkit/spawnkit/internal/keyhint"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manager"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// clustersFile is the -clusters file: the clusters the service runs
// servers in, the first the default (manager.Options.Clusters).
//
//	clusters:
//	- name: local
//	  in_cluster: true
//	- name: gpu-eu
//	  kubeconfig: /etc/spawnkit/clusters/gpu-eu.kubeconfig
//	  context: gpu-eu
//	  kube_api_qps: 20
//	  kubespawner_override:
//	    pod_connect_ip: "jupyter-{username}--{servername}.gpu-eu.example.org"
type clustersFile struct {
	Clusters []clusterEntry `json:"clusters"`
}

// clusterEntry is one cluster of the -clusters file.
type clusterEntry struct {
	// Name is the cluster's name in kubernetes_cluster, labels, State,
	// status and metrics: a DNS-1123 label.
	Name string `json:"name"`
	// Kubeconfig and Context pick the cluster's credentials; without
	// Kubeconfig, -kubeconfig's (or client-go's default loading rules).
	Kubeconfig string `json:"kubeconfig,omitempty"`
	Context    string `json:"context,omitempty"`
	// InCluster is the cluster the service runs in, with its service
	// account; it excludes Kubeconfig and Context.
	InCluster bool `json:"in_cluster,omitempty"`
	// KubeAPIQPS and KubeAPIBurst are the cluster's client rate limit
	// (default: -kube-api-qps and -kube-api-burst; -1, none): a cap is
	// each cluster's own, so that a busy cluster does not use up
	// another's.
	KubeAPIQPS   *float64 `json:"kube_api_qps,omitempty"`
	KubeAPIBurst *int     `json:"kube_api_burst,omitempty"`
	// KubespawnerOverride is applied over -config for this cluster's
	// servers (kubespawner.Config.Override), as a profile's
	// kubespawner_override is: the profile's own overrides win.
	KubespawnerOverride map[string]any `json:"kubespawner_override,omitempty"`
	// Retired keeps a cluster that takes no new start, for the servers
	// still running there (manager.Cluster.Retired): list it, retired,
	// instead of removing it while it holds servers. Not the first.
	Retired bool `json:"retired,omitempty"`
}

// clusterSetup is one cluster as the program uses it.
type clusterSetup struct {
	name    string
	retired bool
	rest    *rest.Config
	cfg     *kubespawner.Config // nil: -config as it is
}

// loadClusters reads and checks the -clusters file: every problem is
// named with the cluster's place and name. For -check, an in-cluster
// entry (which only works in a pod) gets a placeholder address; every
// kubeconfig is read either way.
func loadClusters(f flags, base kubespawner.Config) ([]clusterSetup, error) {
	data, err := os.ReadFile(f.clusters)
	if err != nil {
		return nil, fmt.Errorf("-clusters: %w", err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("-clusters %s: %w", f.clusters, err)
	}
	var file clustersFile
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&file); err != nil {
		err = keyhint.Explain(data, err, keyhint.JSONKeys(clustersFile{}, clusterEntry{}))
		return nil, fmt.Errorf("-clusters %s: %w (want a mapping with a list `clusters` of {name, kubeconfig, context, in_cluster, kube_api_qps, kube_api_burst, kubespawner_override})", f.clusters, err)
	}
	if len(file.Clusters) == 0 {
		return nil, fmt.Errorf("-clusters %s names no cluster: list at least one under `clusters` (the first is the default), or leave -clusters out for one cluster from -kubeconfig", f.clusters)
	}
	var errs []error
	seen := map[string]bool{}
	out := make([]clusterSetup, 0, len(file.Clusters))
	for i, c := range file.Clusters {
		where := fmt.Sprintf("-clusters %s: cluster %d (%q)", f.clusters, i+1, c.Name)
		if msgs := validation.IsDNS1123Label(c.Name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("%s: name: want a DNS-1123 label (what kubernetes_cluster names): %v", where, msgs))
			continue
		}
		if seen[c.Name] {
			errs = append(errs, fmt.Errorf("%s: the name is given twice", where))
			continue
		}
		seen[c.Name] = true
		if c.InCluster && (c.Kubeconfig != "" || c.Context != "") {
			errs = append(errs, fmt.Errorf("%s: in_cluster uses the pod's service account: it takes no kubeconfig or context", where))
			continue
		}
		qps, burst := f.kubeQPS, f.kubeBurst
		if c.KubeAPIQPS != nil {
			qps = *c.KubeAPIQPS
		}
		if c.KubeAPIBurst != nil {
			burst = *c.KubeAPIBurst
		}
		if err := checkClientLimit(qps, burst); err != nil {
			errs = append(errs, fmt.Errorf("%s: kube_api_qps %g and kube_api_burst %d: %w", where, qps, burst, err))
			continue
		}
		setup := clusterSetup{name: c.Name, retired: c.Retired}
		setup.rest, err = clusterRestConfig(f, c, qps, burst)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", where, err))
			continue
		}
		if c.KubespawnerOverride != nil {
			cfg, err := base.Override(c.KubespawnerOverride)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: kubespawner_override: %w", where, err))
				continue
			}
			setup.cfg = &cfg
		}
		out = append(out, setup)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

func clusterRestConfig(f flags, c clusterEntry, qps float64, burst int) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	switch {
	case c.InCluster && f.check:
		cfg = &rest.Config{Host: "https://kubernetes.default.svc"}
	case c.InCluster:
		if cfg, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("in_cluster: %w", err)
		}
	default:
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rules.ExplicitPath = f.kubeconfig
		if c.Kubeconfig != "" {
			rules.ExplicitPath = c.Kubeconfig
		}
		overrides := &clientcmd.ConfigOverrides{CurrentContext: c.Context}
		if cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides).ClientConfig(); err != nil {
			return nil, fmt.Errorf("loading its kubeconfig: %w", err)
		}
	}
	setClientLimit(cfg, qps, burst)
	cfg.UserAgent = "spawnkit-service/" + spawner.Version
	return reflector.DetectStalls(cfg)
}

// kubeCluster is one cluster's client and Registry, made by serve (or
// prepare's check).
type kubeCluster struct {
	name     string
	client   kubernetes.Interface
	registry *reflector.Registry
	cfg      *kubespawner.Config
	retired  bool
}

// newClusters makes every cluster's client and Registry; with reg, each
// Registry's metrics carry the label cluster=<name> (with several
// clusters). close releases the Registries.
func (p *program) newClusters(reg prometheus.Registerer) (cs []kubeCluster, close func(), err error) {
	close = func() {
		for _, c := range cs {
			c.registry.Close()
		}
	}
	for _, setup := range p.clusters {
		client, err := kubernetes.NewForConfig(setup.rest)
		if err != nil {
			close()
			return nil, nil, fmt.Errorf("cluster %q: %w", setup.name, err)
		}
		r := reg
		if r != nil && p.f.clusters != "" {
			r = prometheus.WrapRegistererWith(prometheus.Labels{"cluster": setup.name}, reg)
		}
		registry, err := p.newRegistry(client, r)
		if err != nil {
			close()
			return nil, nil, fmt.Errorf("cluster %q: %w", setup.name, err)
		}
		cs = append(cs, kubeCluster{name: setup.name, client: client, registry: registry, cfg: setup.cfg, retired: setup.retired})
	}
	return cs, close, nil
}

// managerClusters are cs as manager.Options.Clusters: nil without
// -clusters (the one cluster is unnamed, as before clusters).
func (p *program) managerClusters(cs []kubeCluster) []manager.Cluster {
	if p.f.clusters == "" {
		return nil
	}
	out := make([]manager.Cluster, len(cs))
	for i, c := range cs {
		out[i] = manager.Cluster{Name: c.name, Client: c.client, Registry: c.registry, Config: c.cfg, Retired: c.retired}
	}
	return out
}
