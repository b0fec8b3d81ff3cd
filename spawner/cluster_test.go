package spawner

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// clusterFactory is a Factory of cluster on a fake clientset: Plan and
// the refusals need no API server.
func clusterFactory(t *testing.T, cluster string, cfg kubespawner.Config) (*Factory, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset()
	reg, err := reflector.New(reflector.Options{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(reg.Close)
	f, err := NewFactory(Options{Client: client, Registry: reg, Config: cfg, Cluster: cluster})
	if err != nil {
		t.Fatal(err)
	}
	return f, client
}

func mustLoad(t *testing.T, yaml string) kubespawner.Config {
	t.Helper()
	cfg, err := kubespawner.Load([]byte(yaml))
	if err != nil {
		t.Fatalf("%s: %v", yaml, err)
	}
	return cfg
}

// everyObjectYAML makes a start plan every kind of object: the user
// namespace with its NetworkPolicy and ResourceQuota, the claim, the pod,
// the service; the start options add the environment and internal-SSL
// Secrets.
const everyObjectYAML = `
namespace: jhub
enable_user_namespaces: true
network_policy: {enabled: true}
user_namespace_resource_quota: {limits.memory: 8Gi}
storage_pvc_ensure: true
storage_capacity: 1Gi
services_enabled: true
`

func everyObjectStart() StartOptions {
	opts := hubStart()
	opts.SSL = &SSL{Key: []byte("key"), Cert: []byte("cert"), CA: []byte("ca"), HubCA: []byte("hub-ca")}
	return opts
}

// plannedObjects are the objects of o by kind, each required.
func plannedObjects(t *testing.T, o *Objects) map[string]metav1.Object {
	t.Helper()
	objs := map[string]metav1.Object{}
	for kind, obj := range map[string]metav1.Object{
		"Namespace": o.Namespace, "NetworkPolicy": o.NetworkPolicy, "ResourceQuota": o.ResourceQuota,
		"PersistentVolumeClaim": o.PVC, "Pod": o.Pod, "env Secret": o.EnvSecret, "SSL Secret": o.Secret, "Service": o.Service,
	} {
		if reflect.ValueOf(obj).IsNil() {
			t.Fatalf("no %s planned", kind)
		}
		objs[kind] = obj
	}
	return objs
}

// With Options.Cluster, every object a start plans carries the cluster
// label (over a configured one), and the State (the Spawner's, the
// plan's, the pod's record) names the cluster; without it nothing names
// one, as before clusters.
func TestClusterLabelsAndState(t *testing.T) {
	srv := naming.Server{Username: "ada", Servername: "gpu", UserID: 7}
	for _, tc := range []struct {
		name, cluster, extra string
	}{
		{name: "with a cluster", cluster: "eu-1",
			extra: strings.ReplaceAll("extra_labels: F\ncommon_labels: F\nstorage_extra_labels: F\nuser_namespace_labels: F\n", "F", "{spawnkit.dev/cluster: forged, spawnkit.io/cluster: forged}")},
		{name: "without a cluster"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := clusterFactory(t, tc.cluster, mustLoad(t, everyObjectYAML+tc.extra))
			if f.Cluster() != tc.cluster {
				t.Errorf("Factory.Cluster() = %q, want %q", f.Cluster(), tc.cluster)
			}
			s, err := f.New(srv)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := s.State().Cluster; got != tc.cluster {
				t.Errorf("a new Spawner's State.Cluster = %q, want %q", got, tc.cluster)
			}
			o, err := s.Plan(t.Context(), everyObjectStart())
			if err != nil {
				t.Fatal(err)
			}
			for kind, obj := range plannedObjects(t, o) {
				got, ok := obj.GetLabels()[naming.LabelCluster]
				switch {
				case tc.cluster != "" && got != tc.cluster:
					t.Errorf("%s %s: label %s = %q, want %q", kind, obj.GetName(), naming.LabelCluster, got, tc.cluster)
				case tc.cluster == "" && ok:
					t.Errorf("%s %s: label %s = %q without a cluster, want none", kind, obj.GetName(), naming.LabelCluster, got)
				}
				if legacy, ok := obj.GetLabels()[naming.LegacyLabelCluster]; tc.cluster != "" && ok {
					t.Errorf("%s %s: a configured legacy label %s = %q names another cluster", kind, obj.GetName(), naming.LegacyLabelCluster, legacy)
				}
				if obj.GetLabels()[naming.LabelManagedBy] != naming.ManagedBySpawnkit {
					t.Errorf("%s %s lost the managed-by label: %v", kind, obj.GetName(), obj.GetLabels())
				}
			}
			if o.State.Cluster != tc.cluster {
				t.Errorf("the plan's State.Cluster = %q, want %q", o.State.Cluster, tc.cluster)
			}
			recorded, ok := StateFromPod(reflector.NewPod(o.Pod))
			if !ok || recorded.Cluster != tc.cluster {
				t.Errorf("StateFromPod = %+v, %v; want Cluster %q", recorded, ok, tc.cluster)
			}
			if raw := o.Pod.Annotations[naming.AnnotationState]; tc.cluster == "" && strings.Contains(raw, `"cluster"`) {
				t.Errorf("the state annotation names a cluster without one: %s", raw)
			}
		})
	}
}

// The package's Plan, a dry run without a Factory, names no cluster.
func TestDryRunNamesNoCluster(t *testing.T) {
	o := mustPlanYAML(t, everyObjectYAML, everyObjectStart())
	for kind, obj := range plannedObjects(t, o) {
		if v, ok := obj.GetLabels()[naming.LabelCluster]; ok {
			t.Errorf("%s: label %s = %q in a dry run", kind, naming.LabelCluster, v)
		}
	}
	if o.State.Cluster != "" {
		t.Errorf("a dry run's State.Cluster = %q", o.State.Cluster)
	}
}

// LoadState keeps the Factory's cluster, whatever the loaded state says.
func TestLoadStateKeepsTheFactorysCluster(t *testing.T) {
	for _, cluster := range []string{"eu-1", ""} {
		f, _ := clusterFactory(t, cluster, baseConfig("ns"))
		s, err := f.New(naming.Server{Username: "ada"})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for _, loaded := range []string{"us-2", "", cluster} {
			st := s.State()
			st.Cluster = loaded
			s.LoadState(st)
			if got := s.State().Cluster; got != cluster {
				t.Errorf("Factory of cluster %q, LoadState of cluster %q: State.Cluster = %q", cluster, loaded, got)
			}
		}
	}
}

// NewFactory takes a DNS-1123 label as Options.Cluster and refuses
// anything else, naming the field and the value.
func TestNewFactoryChecksTheCluster(t *testing.T) {
	client := fake.NewClientset()
	reg, err := reflector.New(reflector.Options{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close()
	for _, tc := range []struct {
		cluster string
		ok      bool
	}{
		{"", true}, {"eu-1", true}, {"a", true},
		{"EU-1", false}, {"eu_1", false}, {"eu.1", false}, {"-eu", false}, {strings.Repeat("x", 64), false},
	} {
		_, err := NewFactory(Options{Client: client, Registry: reg, Config: baseConfig("ns"), Cluster: tc.cluster})
		if tc.ok != (err == nil) {
			t.Errorf("Cluster %q: err = %v, want ok=%v", tc.cluster, err, tc.ok)
		}
		if err != nil && !(strings.Contains(err.Error(), "Options.Cluster") && strings.Contains(err.Error(), tc.cluster)) {
			t.Errorf("Cluster %q: %v does not name the field and the value", tc.cluster, err)
		}
	}
}

// A start updates an existing NetworkPolicy and ResourceQuota of
// spawnkit's to carry the cluster label, and leaves one that has it
// (and the spec) alone.
func TestNamespaceObjectsUpdatedToTheCluster(t *testing.T) {
	f, client := clusterFactory(t, "eu-1", mustLoad(t, everyObjectYAML))
	s, err := f.New(naming.Server{Username: "ada"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	o, err := s.Plan(t.Context(), everyObjectStart())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	// As made before the hub had several clusters.
	old := map[string]string{naming.LabelManagedBy: naming.ManagedBySpawnkit, "kept": "yes"}
	policy := o.NetworkPolicy.DeepCopy()
	policy.Labels = old
	quota := o.ResourceQuota.DeepCopy()
	quota.Labels = old
	quota.Status.Hard = quota.Spec.Hard // synced: no wait for the quota controller
	if _, err := client.NetworkingV1().NetworkPolicies(policy.Namespace).Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ResourceQuotas(quota.Namespace).Create(ctx, quota, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		client.ClearActions()
		if err := s.ensureNetworkPolicy(ctx, o.NetworkPolicy); err != nil {
			t.Fatal(err)
		}
		if _, err := s.ensureQuota(ctx, o.ResourceQuota); err != nil {
			t.Fatal(err)
		}
		gotPolicy, err := client.NetworkingV1().NetworkPolicies(policy.Namespace).Get(ctx, policy.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		gotQuota, err := client.CoreV1().ResourceQuotas(quota.Namespace).Get(ctx, quota.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for kind, labels := range map[string]map[string]string{"NetworkPolicy": gotPolicy.Labels, "ResourceQuota": gotQuota.Labels} {
			if labels[naming.LabelCluster] != "eu-1" || labels["kept"] != "yes" {
				t.Errorf("%s after a start: labels %v, want %s=eu-1 and the others kept", kind, labels, naming.LabelCluster)
			}
		}
	}
	// The second round found both up to date.
	for _, a := range client.Actions() {
		if a.GetVerb() == "update" {
			t.Errorf("an up-to-date %s was updated", a.GetResource().Resource)
		}
	}
}

// A Factory with a cluster refuses, at Plan and at Start's step plan, a
// start whose configuration (a profile's, or the base's) names other
// clusters only, with a *ProfileError wrapping ErrOtherCluster that names
// the server, the clusters and the Factory's; a configuration naming its
// cluster among others, or none, starts. Without a cluster the option is
// ignored.
func TestClusterMismatchRefused(t *testing.T) {
	const yaml = `
namespace: jhub
profile_list:
- display_name: Any
  slug: any
- display_name: GPU
  slug: gpu
  kubespawner_override: {kubernetes_cluster: [gpu-eu, gpu-us]}
- display_name: Here too
  slug: here
  kubespawner_override: {kubernetes_cluster: [gpu-eu, cpu-eu]}
- display_name: Chosen
  slug: chosen
  profile_options:
    where:
      display_name: Where
      choices:
        eu: {display_name: EU, kubespawner_override: {kubernetes_cluster: cpu-eu}}
        us: {display_name: US, kubespawner_override: {kubernetes_cluster: cpu-us}}
`
	srv := naming.Server{Username: "ada", Servername: "big"}
	for _, tc := range []struct {
		name, cluster, yaml string
		userOptions         map[string]string
		refused             []string // the clusters the error names
	}{
		{name: "a profile of other clusters", cluster: "cpu-eu", yaml: yaml,
			userOptions: map[string]string{"profile": "gpu"}, refused: []string{"gpu-eu", "gpu-us"}},
		{name: "a choice of another cluster", cluster: "cpu-eu", yaml: yaml,
			userOptions: map[string]string{"profile": "chosen", "where": "us"}, refused: []string{"cpu-us"}},
		{name: "the base configuration's", cluster: "cpu-eu", yaml: "kubernetes_cluster: gpu-eu\n",
			refused: []string{"gpu-eu"}},
		{name: "a profile naming this cluster among others", cluster: "cpu-eu", yaml: yaml,
			userOptions: map[string]string{"profile": "here"}},
		{name: "a choice of this cluster", cluster: "cpu-eu", yaml: yaml,
			userOptions: map[string]string{"profile": "chosen", "where": "eu"}},
		{name: "a profile naming no cluster", cluster: "cpu-eu", yaml: yaml,
			userOptions: map[string]string{"profile": "any"}},
		{name: "no cluster: ignored", yaml: yaml, userOptions: map[string]string{"profile": "gpu"}},
		{name: "no cluster, the base configuration's: ignored", yaml: "kubernetes_cluster: gpu-eu\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, client := clusterFactory(t, tc.cluster, mustLoad(t, tc.yaml))
			s, err := f.New(srv)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			opts := hubStart()
			opts.UserOptions = tc.userOptions
			_, err = s.Plan(t.Context(), opts)
			if tc.refused == nil {
				if err != nil {
					t.Fatalf("Plan: %v", err)
				}
				return
			}
			var pe *kubespawner.ProfileError
			if !errors.As(err, &pe) || !errors.Is(err, ErrOtherCluster) {
				t.Fatalf("Plan: %v; want a *ProfileError wrapping ErrOtherCluster", err)
			}
			for _, want := range append([]string{`"ada"`, `"big"`, `"` + tc.cluster + `"`}, tc.refused...) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Plan: %v does not name %s", err, want)
				}
			}
			_, err = s.Start(t.Context(), opts)
			var se *StartError
			if !errors.As(err, &se) || se.Step != StepPlan || se.Reason != ReasonInvalid || !errors.Is(err, ErrOtherCluster) {
				t.Fatalf("Start: %v; want a *StartError at step plan, reason Invalid, wrapping ErrOtherCluster", err)
			}
			for _, a := range client.Actions() {
				if a.GetVerb() == "create" {
					t.Errorf("a refused start made a %s", a.GetResource().Resource)
				}
			}
		})
	}
}

// kubernetes_cluster is one name or a list, loads as a list, marshals as
// one, and each name must be a DNS-1123 label, once, named by index.
func TestClusterNames(t *testing.T) {
	for _, tc := range []struct {
		yaml    string
		want    kubespawner.ClusterNames
		wantErr string
	}{
		{yaml: "kubernetes_cluster: gpu-eu", want: kubespawner.ClusterNames{"gpu-eu"}},
		{yaml: "kubernetes_cluster: [gpu-eu, cpu-eu]", want: kubespawner.ClusterNames{"gpu-eu", "cpu-eu"}},
		{yaml: "kubernetes_cluster: []", want: kubespawner.ClusterNames{}},
		{yaml: "kubernetes_cluster: null"},
		{yaml: "image: base:1"},
		{yaml: "kubernetes_cluster: GPU_EU", wantErr: "kubernetes_cluster[0]"},
		{yaml: `kubernetes_cluster: ""`, wantErr: "kubernetes_cluster[0]: Required"},
		{yaml: "kubernetes_cluster: [gpu-eu, cpu.eu]", wantErr: "kubernetes_cluster[1]"},
		{yaml: "kubernetes_cluster: [gpu-eu, cpu-eu, gpu-eu]", wantErr: "kubernetes_cluster[2]: Duplicate"},
		{yaml: "kubernetes_cluster: 42", wantErr: "kubernetes_cluster"},
		{yaml: "kubernetes_cluster: {gpu: eu}", wantErr: "kubernetes_cluster"},
		{yaml: "kubernetes_cluster: [gpu-eu, 7]", wantErr: "kubernetes_cluster"},
	} {
		cfg, err := kubespawner.Load([]byte(tc.yaml))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err = %v, want one naming %s", tc.yaml, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.yaml, err)
			continue
		}
		if !reflect.DeepEqual(cfg.KubernetesCluster, tc.want) {
			t.Errorf("%s: KubernetesCluster = %#v, want %#v", tc.yaml, cfg.KubernetesCluster, tc.want)
		}
	}
	for _, tc := range []struct {
		in   kubespawner.ClusterNames
		want string
	}{{kubespawner.ClusterNames{"gpu-eu"}, `["gpu-eu"]`}, {kubespawner.ClusterNames{"gpu-eu", "cpu-eu"}, `["gpu-eu","cpu-eu"]`}} {
		b, err := json.Marshal(tc.in)
		if err != nil || string(b) != tc.want {
			t.Errorf("json.Marshal(%#v) = %s, %v; want %s", tc.in, b, err, tc.want)
		}
	}
	// A Go-built Config is checked as a loaded one.
	for _, names := range []kubespawner.ClusterNames{{"Bad"}, {"a", "a"}} {
		f := kubespawner.Config{KubernetesCluster: names}.WithDefaults()
		f.Namespace = "ns"
		if err := f.Validate(); err == nil || !strings.Contains(err.Error(), "kubernetes_cluster[") {
			t.Errorf("Go-built %q: validate = %v, want an error naming kubernetes_cluster[i]", names, err)
		}
	}
}

// kubernetes_cluster round-trips through Resolve and ResolveWith: a
// profile's or a choice's override (a string, a list, a Go []string)
// replaces the base's, for a loaded and a Go-built Config alike, and a
// bad name from a profile fails naming it.
func TestClusterResolves(t *testing.T) {
	const yaml = `
namespace: jhub
kubernetes_cluster: [cpu-eu, cpu-us]
profile_list:
- display_name: Base
  slug: base
- display_name: GPU
  slug: gpu
  kubespawner_override: {kubernetes_cluster: gpu-eu}
  profile_options:
    where:
      display_name: Where
      choices:
        eu: {display_name: EU}
        us: {display_name: US, kubespawner_override: {kubernetes_cluster: [gpu-us, gpu-eu]}}
      unlisted_choice:
        enabled: true
        kubespawner_override: {kubernetes_cluster: "{value}"}
`
	loaded := mustLoad(t, yaml)
	goBuilt := kubespawner.Config{
		Namespace:         "jhub",
		KubernetesCluster: kubespawner.ClusterNames{"cpu-eu", "cpu-us"},
		ProfileList: []kubespawner.Profile{
			{DisplayName: "Base", Slug: "base"},
			{DisplayName: "GPU", Slug: "gpu", KubeSpawnerOverride: map[string]any{"kubernetes_cluster": "gpu-eu"},
				ProfileOptions: kubespawner.OrderedOptions{{Name: "where", ProfileOption: kubespawner.ProfileOption{DisplayName: "Where",
					Choices: kubespawner.OrderedChoices{
						{Key: "eu", Choice: kubespawner.Choice{DisplayName: "EU"}},
						{Key: "us", Choice: kubespawner.Choice{DisplayName: "US", KubeSpawnerOverride: map[string]any{"kubernetes_cluster": []string{"gpu-us", "gpu-eu"}}}},
					},
					UnlistedChoice: &kubespawner.UnlistedChoice{Enabled: true, KubeSpawnerOverride: map[string]any{"kubernetes_cluster": "{value}"}},
				}}}},
		},
	}
	noProfiles := kubespawner.Config{Namespace: "jhub", KubernetesCluster: kubespawner.ClusterNames{"cpu-eu", "cpu-us"}}
	for name, cfg := range map[string]kubespawner.Config{"loaded": loaded, "Go-built": goBuilt, "Go-built, defaulted": goBuilt.WithDefaults()} {
		for _, tc := range []struct {
			userOptions map[string]string
			want        kubespawner.ClusterNames
			wantErr     string
		}{
			{userOptions: map[string]string{"profile": "base"}, want: kubespawner.ClusterNames{"cpu-eu", "cpu-us"}},
			{userOptions: map[string]string{"profile": "gpu"}, want: kubespawner.ClusterNames{"gpu-eu"}},
			{userOptions: map[string]string{"profile": "gpu", "where": "us"}, want: kubespawner.ClusterNames{"gpu-us", "gpu-eu"}},
			{userOptions: map[string]string{"profile": "gpu", "where--unlisted-choice": "tpu-eu"}, want: kubespawner.ClusterNames{"tpu-eu"}},
			{userOptions: map[string]string{"profile": "gpu", "where--unlisted-choice": "TPU"}, wantErr: "kubernetes_cluster[0]"},
		} {
			got, err := cfg.Resolve(t.Context(), tc.userOptions)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("%s, %v: err = %v, want one naming %s", name, tc.userOptions, err, tc.wantErr)
				}
				continue
			}
			if err != nil {
				t.Errorf("%s, %v: %v", name, tc.userOptions, err)
				continue
			}
			if !reflect.DeepEqual(got.KubernetesCluster, tc.want) {
				t.Errorf("%s, %v: KubernetesCluster = %q, want %q", name, tc.userOptions, got.KubernetesCluster, tc.want)
			}
		}
	}
	// Through the option dictionary of a Go-built Config without
	// profiles (the hub's attributes rebuild it).
	got, err := noProfiles.ResolveWith(t.Context(), nil, map[string]any{"cpu_limit": 2})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.KubernetesCluster, noProfiles.KubernetesCluster) || got.Pod.CPULimit.String() != "2" {
		t.Errorf("ResolveWith attributes: KubernetesCluster %q, cpu_limit %s; want %q, 2", got.KubernetesCluster, &got.Pod.CPULimit, noProfiles.KubernetesCluster)
	}
}
