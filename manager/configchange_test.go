package manager

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/spawnkit/spawnkit/internal/testcluster"
	"github.com/spawnkit/spawnkit/internal/testutil"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/orphan"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/spawner"
)

// configChange is one configuration change an operator makes while
// servers run, across a restart of the Manager.
type configChange struct {
	name string
	// before and after are the configurations of the two Managers, for
	// a hub namespace of the test's.
	before, after func(hub string) kubespawner.Config
	// spawn are the options of the first starts (a profile, SSL).
	spawn SpawnOptions
	// restarted checks, after the next start under the new
	// configuration, what it changed (the new pod, or its objects).
	restarted func(t *testing.T, ctx context.Context, hub string, old, next Status)
}

// withStorage gives cfg a home claim named by tmpl.
func withStorage(cfg kubespawner.Config, tmpl string) kubespawner.Config {
	cfg.StoragePVCEnsure = true
	cfg.StorageCapacity = resource.MustParse("1Gi")
	cfg.PVCNameTemplate = tmpl
	cfg.Pod.Volumes = []corev1.Volume{{Name: "home", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "{pvc_name}"}}}}
	cfg.Pod.VolumeMounts = []corev1.VolumeMount{{Name: "home", MountPath: "/home/jovyan"}}
	return cfg
}

var configChanges = []configChange{{
	name:   "pod_name_template",
	before: baseConfig,
	after: func(hub string) kubespawner.Config {
		cfg := baseConfig(hub)
		cfg.PodNameTemplate = "nb-{user_server}"
		return cfg
	},
	restarted: func(t *testing.T, _ context.Context, _ string, old, next Status) {
		if !strings.HasPrefix(next.State.PodName, "nb-") || next.State.PodName == old.State.PodName {
			t.Errorf("the next start made pod %q, want one under the new template (nb-...)", next.State.PodName)
		}
	},
}, {
	name:   "namespace",
	before: baseConfig,
	after: func(hub string) kubespawner.Config {
		cfg := baseConfig(hub + "-moved")
		cfg.RetiredNamespaces = []string{hub}
		return cfg
	},
	restarted: func(t *testing.T, _ context.Context, hub string, old, next Status) {
		if next.State.Namespace != hub+"-moved" {
			t.Errorf("the next start is in namespace %q, want the new one %q", next.State.Namespace, hub+"-moved")
		}
	},
}, {
	name: "user_namespace_template",
	before: func(hub string) kubespawner.Config {
		cfg := baseConfig(hub)
		cfg.EnableUserNamespaces, cfg.UserNamespaceTemplate = true, "{hubnamespace}-a-{username}"
		return cfg
	},
	after: func(hub string) kubespawner.Config {
		cfg := baseConfig(hub)
		cfg.EnableUserNamespaces, cfg.UserNamespaceTemplate = true, "{hubnamespace}-b-{username}"
		cfg.RetiredNamespaces = []string{"{hubnamespace}-a-{username}"}
		return cfg
	},
	restarted: func(t *testing.T, _ context.Context, hub string, old, next Status) {
		if !strings.HasPrefix(next.State.Namespace, hub+"-b-") {
			t.Errorf("the next start is in namespace %q, want the new template's (%s-b-...)", next.State.Namespace, hub)
		}
	},
}, {
	name: "user namespaces turned off",
	before: func(hub string) kubespawner.Config {
		cfg := baseConfig(hub)
		cfg.EnableUserNamespaces = true
		return cfg
	},
	after: func(hub string) kubespawner.Config {
		cfg := baseConfig(hub)
		cfg.RetiredNamespaces = []string{"{hubnamespace}-{username}"}
		return cfg
	},
	restarted: func(t *testing.T, _ context.Context, hub string, old, next Status) {
		if next.State.Namespace != hub {
			t.Errorf("the next start is in namespace %q, want the hub's %q", next.State.Namespace, hub)
		}
	},
}, {
	name:   "pvc_name_template",
	before: func(hub string) kubespawner.Config { return withStorage(baseConfig(hub), "claim-{user_server}") },
	after:  func(hub string) kubespawner.Config { return withStorage(baseConfig(hub), "home-{user_server}") },
	restarted: func(t *testing.T, ctx context.Context, hub string, old, next Status) {
		// The home claim is the one the server had: the pod records it.
		if next.State.PVCName != old.State.PVCName || !strings.HasPrefix(old.State.PVCName, "claim-") {
			t.Errorf("the next start uses claim %q, want the server's own %q", next.State.PVCName, old.State.PVCName)
		}
		pod, err := cluster.Client.CoreV1().Pods(next.State.Namespace).Get(ctx, next.State.PodName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if claims := podClaims(pod); !slices.Equal(claims, []string{old.State.PVCName}) {
			t.Errorf("the next pod mounts claims %q, want the server's own %q", claims, old.State.PVCName)
		}
		if _, err := cluster.Client.CoreV1().PersistentVolumeClaims(hub).Get(ctx, strings.Replace(old.State.PVCName, "claim-", "home-", 1), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("a claim under the new template was made beside the server's own (%v)", err)
		}
	},
}, {
	name: "profile removed",
	before: func(hub string) kubespawner.Config {
		cfg := baseConfig(hub)
		cfg.ProfileList = []kubespawner.Profile{
			{DisplayName: "Small", Slug: "small", Default: true},
			{DisplayName: "Big", Slug: "big", KubeSpawnerOverride: map[string]any{"cpu_limit": 2.0}},
		}
		return cfg
	},
	after: func(hub string) kubespawner.Config {
		cfg := baseConfig(hub)
		cfg.ProfileList = []kubespawner.Profile{{DisplayName: "Medium", Slug: "medium", Default: true, KubeSpawnerOverride: map[string]any{"cpu_limit": 1.0}}}
		return cfg
	},
	spawn: SpawnOptions{UserOptions: map[string]string{"profile": "big"}},
	restarted: func(t *testing.T, ctx context.Context, _ string, old, next Status) {
		pod, err := cluster.Client.CoreV1().Pods(next.State.Namespace).Get(ctx, next.State.PodName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := pod.Spec.Containers[0].Resources.Limits.Cpu(); got.Cmp(resource.MustParse("1")) != 0 {
			t.Errorf("the next start's cpu limit is %s, want the new default profile's 1", got)
		}
	},
}, {
	name: "services_enabled turned off",
	before: func(hub string) kubespawner.Config {
		cfg := baseConfig(hub)
		cfg.ServicesEnabled = true
		return cfg
	},
	after: baseConfig,
	restarted: func(t *testing.T, ctx context.Context, hub string, old, next Status) {
		if next.State.Services {
			t.Errorf("the next start still has a Service: %+v", next.State)
		}
		if _, err := cluster.Client.CoreV1().Services(hub).Get(ctx, next.State.PodName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the next start made a Service (%v)", err)
		}
	},
}, {
	name:   "internal_ssl turned off, secret_name_template changed",
	before: baseConfig,
	after: func(hub string) kubespawner.Config {
		cfg := baseConfig(hub)
		cfg.SecretNameTemplate = "{pod_name}-tls"
		return cfg
	},
	spawn: SpawnOptions{SSL: &spawner.SSL{Key: []byte("key"), Cert: []byte("cert"), CA: []byte("ca"), HubCA: []byte("hubca")}},
	restarted: func(t *testing.T, _ context.Context, _ string, old, next Status) {
		if next.State.SSL || strings.HasPrefix(next.URL, "https://") {
			t.Errorf("the next start (without SSL) still has SSL: %+v", next)
		}
	},
}}

// podClaims are the claims a pod mounts.
func podClaims(pod *corev1.Pod) []string {
	var out []string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			out = append(out, v.PersistentVolumeClaim.ClaimName)
		}
	}
	return out
}

// TestConfigChangeNeverOrphans: for each configuration change an operator
// makes, with two servers running and the Manager restarted under the new
// configuration (and no hub state: the cluster's records alone): each
// server is running at its URL, Poll gives no exit code, Spawn starts
// nothing (one pod each, the same UID), orphan.List with the hub's
// running servers calls none of their objects an orphan, Stop deletes the
// server's pod and only its pod, and the next start uses the new
// configuration.
func TestConfigChangeNeverOrphans(t *testing.T) {
	for i, cc := range configChanges {
		t.Run(cc.name, func(t *testing.T) {
			ctx := ctxTimeout(t, 180*time.Second)
			hub := newNamespace(t)
			if _, err := cluster.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hub + "-moved"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			alice := naming.Server{Username: fmt.Sprintf("cc%d-alice", i)}
			bob := naming.Server{Username: fmt.Sprintf("cc%d-bob", i), Servername: "lab"}
			env := hubStart().Env
			opts := cc.spawn
			opts.Env = env

			m1, stop1 := runManager(t, Options{Config: cc.before(hub), Registry: newRegistry(t)})
			before := map[naming.Server]Status{}
			for _, s := range []naming.Server{alice, bob} {
				if _, _, err := m1.Spawn(ctx, s, opts); err != nil {
					t.Fatal(err)
				}
				before[s] = waitStatus(t, m1, s, "running", phaseIs(PhaseRunning))
			}
			uids := map[naming.Server]string{}
			for s := range before {
				pods := serverPods(t, cluster.Client, "", s.Username)
				if len(pods) != 1 {
					t.Fatalf("%v has %d pods before the change", s, len(pods))
				}
				uids[s] = string(pods[0].UID)
			}
			stop1() // a graceful shutdown: nothing deleted

			m2, _ := runManager(t, Options{Config: cc.after(hub), Registry: newRegistry(t)})
			known := orphan.NewKnown(2)
			for _, s := range []naming.Server{alice, bob} {
				st, err := m2.Status(s)
				if err != nil || st.Phase != PhaseRunning || st.URL != before[s].URL || st.URL == "" {
					t.Fatalf("after the change %v is %+v (%v); want running at %s", s, st, err, before[s].URL)
				}
				if st, err := m2.Poll(ctx, s); err != nil || st.ExitCode != nil {
					t.Fatalf("after the change Poll(%v) = %+v, %v; want no exit code", s, st, err)
				}
				if _, started, err := m2.Spawn(ctx, s, opts); err != nil || started {
					t.Fatalf("after the change Spawn(%v) started %v (%v); want nothing started", s, started, err)
				}
				if pods := serverPods(t, cluster.Client, "", s.Username); len(pods) != 1 || string(pods[0].UID) != uids[s] {
					t.Fatalf("after the change %v has pods %v; want its one pod %s", s, podNames(pods), uids[s])
				}
				known.Add(s.Username, s.Servername, true)
			}
			orphans, err := orphan.List(ctx, known, orphan.Options{Client: cluster.Client})
			if err != nil {
				t.Fatal(err)
			}
			for _, o := range orphans {
				if o.Server.User == alice.Username || o.Server.User == bob.Username {
					t.Errorf("orphan.List calls a running server's object an orphan: %v", o)
				}
			}

			// Stop deletes alice's pod, and only hers.
			if _, err := m2.Stop(ctx, alice, spawner.StopOptions{}); err != nil {
				t.Fatal(err)
			}
			if pods := serverPods(t, cluster.Client, "", alice.Username); len(pods) != 0 {
				t.Fatalf("after Stop alice has pods %v", podNames(pods))
			}
			if pods := serverPods(t, cluster.Client, "", bob.Username); len(pods) != 1 || string(pods[0].UID) != uids[bob] {
				t.Fatalf("alice's Stop touched bob's pod: %v", podNames(pods))
			}
			// What the old pod owned (its Service, Secrets) goes with it.
			testutil.Eventually(t, 60*time.Second, "alice's Services and Secrets to go with her pod", testutil.True(func() bool {
				return len(ownedObjects(t, ctx, before[alice].State.Namespace, alice)) == 0
			}))

			// The next start uses the new configuration.
			next := cc.spawn
			next.Env = env
			next.SSL = nil
			if cc.name == "profile removed" {
				next.UserOptions = nil
			}
			if _, started, err := m2.Spawn(ctx, alice, next); err != nil || !started {
				t.Fatalf("the start after the stop: started %v, %v", started, err)
			}
			after := waitStatus(t, m2, alice, "running", phaseIs(PhaseRunning))
			if pods := serverPods(t, cluster.Client, "", alice.Username); len(pods) != 1 {
				t.Fatalf("after the next start alice has pods %v", podNames(pods))
			}
			cc.restarted(t, ctx, hub, before[alice], after)
		})
	}
}

// ownedObjects are the Services and Secrets in ns that name s in their
// owner annotations.
func ownedObjects(t *testing.T, ctx context.Context, ns string, s naming.Server) []string {
	t.Helper()
	var out []string
	svcs, err := cluster.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range svcs.Items {
		if o.Annotations[naming.AnnotationUsername] == s.Username && o.Annotations[naming.AnnotationServername] == s.Servername {
			out = append(out, "service/"+o.Name)
		}
	}
	secrets, err := cluster.Client.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range secrets.Items {
		if o.Annotations[naming.AnnotationUsername] == s.Username && o.Annotations[naming.AnnotationServername] == s.Servername {
			out = append(out, "secret/"+o.Name)
		}
	}
	return out
}

func podNames(pods []corev1.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.Namespace + "/" + p.Name
	}
	return out
}

// TestRetiredNamespaceIsRequired: a namespace change without the old
// namespace in retired_namespaces does not make the old servers the
// Manager's (the place is not trusted): the pod is reported as ignored,
// naming the option; a hub's state naming that namespace is
// ErrStateRefused naming the option, never "not found" turned into a
// stop; the pod is untouched.
func TestRetiredNamespaceIsRequired(t *testing.T) {
	ctx := ctxTimeout(t, 120*time.Second)
	hub := newNamespace(t)
	moved := newNamespace(t)
	alice := naming.Server{Username: "unretired-alice"}
	m1, stop1 := runManager(t, Options{Config: baseConfig(hub), Registry: newRegistry(t)})
	if _, _, err := m1.Spawn(ctx, alice, SpawnOptions{Env: hubStart().Env}); err != nil {
		t.Fatal(err)
	}
	was := waitStatus(t, m1, alice, "running", phaseIs(PhaseRunning))
	stop1()

	logs := newLogLines()
	m2 := startManager(t, logs.ctx(ctx), Options{Config: baseConfig(moved), Registry: newRegistry(t)})
	if _, err := m2.Status(alice); !errors.Is(err, ErrNotFound) {
		t.Fatalf("alice in an untrusted namespace: %v, want not found (nothing of hers where the configuration looks)", err)
	}
	_, err := m2.Seed(ctx, Seed{Server: alice, State: was.State})
	if !errors.Is(err, ErrStateRefused) || !strings.Contains(err.Error(), "retired_namespaces") || !strings.Contains(err.Error(), hub) {
		t.Fatalf("a hub state in an untrusted namespace: %v, want ErrStateRefused naming %s and retired_namespaces", err, hub)
	}
	logs.waitLine(t, 10*time.Second, "refusing a hub's state", alice.Username)
	if pods := serverPods(t, cluster.Client, "", alice.Username); len(pods) != 1 || pods[0].DeletionTimestamp != nil {
		t.Fatalf("alice's pod was touched: %v", podNames(pods))
	}
}

// TestSeedAfterConfigChange: the hub's saved state (Seed) finds a server
// that the cluster's records alone would not: a KubeSpawner pod (no
// spawnkit record) under an earlier pod_name_template is adopted at the
// names the hub saved; a state naming another server's pod is refused
// and leaves that pod alone; a state with only a claim name gives a
// stopped server its claim for the next start; a hub with no state is
// answered as before.
func TestSeedAfterConfigChange(t *testing.T) {
	ctx := ctxTimeout(t, 120*time.Second)
	hub := newNamespace(t)
	cfg := baseConfig(hub)
	carol := naming.Server{Username: "seed-carol"}
	dave := naming.Server{Username: "seed-dave"}

	// carol's pod as KubeSpawner made it, under an old template.
	o, err := newSpawner(t, carol, cfg).Plan(ctx, hubStart())
	if err != nil {
		t.Fatal(err)
	}
	pod := o.Pod.DeepCopy()
	pod.Name = "old-carol"
	pod.Labels[naming.LabelManagedBy] = naming.ManagedByKubeSpawner
	delete(pod.Annotations, naming.AnnotationState)
	delete(pod.Annotations, naming.AnnotationStartID)
	pod.Spec.Containers[0].Env = nil
	pod.Spec.Containers[0].EnvFrom = nil
	ran := createRunning(t, ctx, pod)

	m := startManager(t, ctx, Options{Config: cfg, AdoptKubeSpawner: true})
	if _, err := m.Status(carol); !errors.Is(err, ErrNotFound) {
		t.Fatalf("carol before the hub's state: %v, want not found (her pod's name is not today's and it records nothing)", err)
	}
	st, err := m.Seed(ctx, Seed{Server: carol, State: spawner.State{PodName: "old-carol", Namespace: hub, Port: 8888}})
	if err != nil || st.Phase != PhaseRunning || st.URL != "http://"+ran.Status.PodIP+":8888" {
		t.Fatalf("carol seeded at her pod's names: %+v, %v; want running at her pod", st, err)
	}
	// dave's state names carol's pod: refused, carol's pod untouched.
	if _, err := m.Seed(ctx, Seed{Server: dave, State: spawner.State{PodName: "old-carol", Namespace: hub}}); !errors.Is(err, ErrStateRefused) || !strings.Contains(err.Error(), carol.Username) {
		t.Fatalf("a state naming another server's pod: %v, want ErrStateRefused naming its owner", err)
	}
	if _, err := m.Status(dave); !errors.Is(err, ErrNotFound) {
		t.Errorf("dave after a refused state: %v, want not found", err)
	}
	// A claim name only: dave is stopped with it.
	st, err = m.Seed(ctx, Seed{Server: dave, State: spawner.State{PVCName: "claim-from-the-hub"}})
	if err != nil || st.Phase != PhaseStopped || st.State.PVCName != "claim-from-the-hub" {
		t.Fatalf("dave seeded with a claim name: %+v, %v", st, err)
	}
	// A State whose pod is gone: stopped, exit status 1 (no pod), as a
	// poll of it says.
	ghost := naming.Server{Username: "seed-ghost"}
	st, err = m.Seed(ctx, Seed{Server: ghost, State: spawner.State{PodName: "jupyter-seed-ghost", Namespace: hub}})
	if err != nil || st.Phase != PhaseStopped || st.ExitCode == nil || *st.ExitCode != 1 {
		t.Fatalf("a seeded server whose pod is gone: %+v, %v; want stopped with exit code 1", st, err)
	}
	if st, err = m.Poll(ctx, ghost); err != nil || st.ExitCode == nil || *st.ExitCode != 1 {
		t.Fatalf("Poll of a seeded server whose pod is gone: %+v, %v; want exit code 1", st, err)
	}
	// No state: as Status.
	if _, err := m.Seed(ctx, Seed{Server: naming.Server{Username: "seed-nobody"}}); !errors.Is(err, ErrNotFound) {
		t.Errorf("a seed with no state of an unknown server: %v, want ErrNotFound", err)
	}
	// The next start of carol, after her stop, is under today's name.
	if _, err := m.Stop(ctx, carol, spawner.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Spawn(ctx, carol, SpawnOptions{Env: hubStart().Env}); err != nil {
		t.Fatal(err)
	}
	st = waitStatus(t, m, carol, "running", phaseIs(PhaseRunning))
	if st.State.PodName != newSpawner(t, carol, cfg).State().PodName {
		t.Errorf("carol's next start made pod %q, want today's name", st.State.PodName)
	}
	if pods := serverPods(t, cluster.Client, "", carol.Username); len(pods) != 1 {
		t.Errorf("carol has pods %v after her next start", podNames(pods))
	}
}

// TestClusterRetiredOrRenamed: with bob running in cluster b and alice
// in a, the Manager restarted (1) with b retired (its profiles removed)
// and (2) with b renamed: bob is running at his URL, Poll gives no exit
// code, Spawn starts nothing, nothing in b changed; orphan.List of b
// with the hub's servers calls none of bob's objects an orphan; Stop
// deletes his pod; with b retired his next start goes to a. A
// configuration naming a retired cluster, or retiring the default, is
// refused at New.
func TestClusterRetiredOrRenamed(t *testing.T) {
	tc := startSecondCluster(t)
	ctx := ctxTimeout(t, 4*time.Minute)
	alice, bob := naming.Server{Username: "retire-alice"}, naming.Server{Username: "retire-bob"}
	m1, stop1 := runManager(t, tc.options())
	spawnReady(t, m1, alice, "")
	was := spawnReady(t, m1, bob, "gpu")
	if was.Cluster != "b" {
		t.Fatalf("bob started in %q, want b", was.Cluster)
	}
	stop1()
	inB := uids(t, tc.b.Client, tc.ns)

	// Only profiles that do not name b: a profile naming a retired
	// cluster is refused.
	after := tc.base
	after.ProfileList = tc.base.ProfileList[:2]
	cfgB := tc.cfgB
	cfgB.ProfileList = after.ProfileList
	newRB := func() *reflector.Registry {
		r, err := reflector.New(reflector.Options{Config: tc.b.Config})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		return r
	}
	if _, err := New(Options{Config: tc.base, Clusters: []Cluster{
		{Name: "a", Client: cluster.Client, Registry: tc.ra},
		{Name: "b", Client: tc.b.Client, Registry: tc.rb, Config: &tc.cfgB, Retired: true},
	}}); err == nil || !strings.Contains(err.Error(), "retired") {
		t.Errorf("a profile naming a retired cluster: New = %v, want an error saying b is retired", err)
	}
	if _, err := New(Options{Config: after, Clusters: []Cluster{
		{Name: "a", Client: cluster.Client, Registry: tc.ra, Retired: true},
		{Name: "b", Client: tc.b.Client, Registry: tc.rb, Config: &cfgB},
	}}); err == nil || !strings.Contains(err.Error(), "default") {
		t.Errorf("the default cluster retired: New = %v, want an error", err)
	}

	check := func(m *Manager, name string) {
		t.Helper()
		st, err := m.Status(bob)
		if err != nil || st.Phase != PhaseRunning || st.URL != was.URL || st.Cluster != name {
			t.Fatalf("bob after the change: %+v (%v); want running at %s in %q", st, err, was.URL, name)
		}
		if st, err := m.Poll(ctx, bob); err != nil || st.ExitCode != nil {
			t.Fatalf("Poll(bob) = %+v, %v; want no exit code", st, err)
		}
		if _, started, err := m.Spawn(ctx, bob, SpawnOptions{Env: hubStart().Env}); err != nil || started {
			t.Fatalf("Spawn(bob) started %v, %v; want nothing started", started, err)
		}
		sameUIDs(t, "cluster b", inB, uids(t, tc.b.Client, tc.ns))
		known := orphan.NewKnown(2)
		known.AddIn(name, bob.Username, "", true)
		known.AddIn("a", alice.Username, "", true)
		orphans, err := orphan.List(ctx, known, orphan.Options{Client: tc.b.Client, Namespaces: []string{tc.ns}, Cluster: name})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range orphans {
			if o.Server.User == bob.Username {
				t.Errorf("orphan.List of %q calls bob's object an orphan: %v", name, o)
			}
		}
	}

	// (2) renamed: b is "gamma" now.
	m2, stop2 := runManager(t, Options{Config: after, Clusters: []Cluster{
		{Name: "a", Client: cluster.Client, Registry: tc.ra},
		{Name: "gamma", Client: tc.b.Client, Registry: newRB(), Config: &cfgB},
	}})
	check(m2, "gamma")
	stop2()

	// (1) retired.
	m3, _ := runManager(t, Options{Config: after, Clusters: []Cluster{
		{Name: "a", Client: cluster.Client, Registry: tc.ra},
		{Name: "b", Client: tc.b.Client, Registry: newRB(), Config: &cfgB, Retired: true},
	}})
	check(m3, "b")
	if h := m3.Health(); !slices.ContainsFunc(h.Clusters, func(c ClusterHealth) bool { return c.Name == "b" && c.Retired && c.Servers == 1 }) {
		t.Errorf("Health does not show b retired with its one server: %+v", h.Clusters)
	}
	if _, err := m3.Stop(ctx, bob, spawner.StopOptions{}); err != nil {
		t.Fatal(err)
	}
	if pods := serverPods(t, tc.b.Client, tc.ns, bob.Username); len(pods) != 0 {
		t.Fatalf("bob's pod in b after Stop: %v", podNames(pods))
	}
	next := spawnReady(t, m3, bob, "")
	if next.Cluster != "a" {
		t.Errorf("bob's next start went to %q, want a (b is retired)", next.Cluster)
	}
}

// TestConfigChangeMidStart: a Manager shut down while a start waits for
// its pod to be ready (the start is detached, its pod kept), and a new
// Manager under a new pod_name_template: the new one resumes the start
// at the pod's recorded name and the server runs there; no second pod.
func TestConfigChangeMidStart(t *testing.T) {
	ctx := ctxTimeout(t, 120*time.Second)
	hub := newNamespace(t)
	slow := func(tmpl string) kubespawner.Config {
		cfg := baseConfig(hub)
		cfg.PodNameTemplate = tmpl
		cfg.ExtraAnnotations = map[string]string{testcluster.ReadyAfterAnnotation: "3s"}
		return cfg
	}
	alice := naming.Server{Username: "midstart-alice"}
	m1, stop1 := runManager(t, Options{Config: slow("jupyter-{user_server}"), Registry: newRegistry(t)})
	if _, _, err := m1.Spawn(ctx, alice, SpawnOptions{Env: hubStart().Env}); err != nil {
		t.Fatal(err)
	}
	pods := serverPods(t, cluster.Client, hub, alice.Username)
	if len(pods) != 1 {
		t.Fatalf("Spawn returned with pods %v; want its pod made", podNames(pods))
	}
	stop1()

	m2, _ := runManager(t, Options{Config: slow("nb-{user_server}"), Registry: newRegistry(t)})
	st := waitStatus(t, m2, alice, "running", phaseIs(PhaseRunning))
	if st.State.PodName != pods[0].Name {
		t.Errorf("alice runs as %q, want her pod %q", st.State.PodName, pods[0].Name)
	}
	if after := serverPods(t, cluster.Client, hub, alice.Username); len(after) != 1 || after[0].UID != pods[0].UID {
		t.Errorf("alice's pods after the resume: %v, want only %s", podNames(after), pods[0].Name)
	}
}

// TestSeedRacesSpawn: a hub's Seed (its saved state, naming a stopped
// server's claim) and a Spawn of the same server at once, for many
// servers: every server ends running with exactly one pod, and a
// server's claim name is its State's either way.
func TestSeedRacesSpawn(t *testing.T) {
	ctx := ctxTimeout(t, 120*time.Second)
	hub := newNamespace(t)
	m, _ := runManager(t, Options{Config: baseConfig(hub), Registry: newRegistry(t)})
	const n = 12
	errs := make(chan error, 2*n)
	for i := range n {
		s := naming.Server{Username: fmt.Sprintf("race-%d", i)}
		go func() {
			_, err := m.Seed(ctx, Seed{Server: s, State: spawner.State{PodName: "old-" + s.Username, Namespace: hub, StartID: "x"}})
			if errors.Is(err, ErrNotFound) {
				err = nil
			}
			errs <- err
		}()
		go func() {
			_, _, err := m.Spawn(ctx, s, SpawnOptions{Env: hubStart().Env})
			errs <- err
		}()
	}
	for range 2 * n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	for i := range n {
		s := naming.Server{Username: fmt.Sprintf("race-%d", i)}
		st := waitStatus(t, m, s, "running", phaseIs(PhaseRunning))
		if pods := serverPods(t, cluster.Client, hub, s.Username); len(pods) != 1 || pods[0].Name != st.State.PodName {
			t.Errorf("%s: pods %v, status names %q", s.Username, podNames(pods), st.State.PodName)
		}
	}
}

// TestSeedNeverAdoptsAnUnmanagedPod: without AdoptKubeSpawner, a hub's
// State naming a KubeSpawner pod (the user's annotations, in the hub's
// namespace) is refused naming the option, and the pod is neither
// adopted nor touched: a State cannot widen what the Manager manages.
func TestSeedNeverAdoptsAnUnmanagedPod(t *testing.T) {
	ctx := ctxTimeout(t, 120*time.Second)
	hub := newNamespace(t)
	cfg := baseConfig(hub)
	erin := naming.Server{Username: "seed-erin"}
	o, err := newSpawner(t, erin, cfg).Plan(ctx, hubStart())
	if err != nil {
		t.Fatal(err)
	}
	pod := o.Pod.DeepCopy()
	pod.Name = "old-erin"
	pod.Labels[naming.LabelManagedBy] = naming.ManagedByKubeSpawner
	delete(pod.Annotations, naming.AnnotationState)
	delete(pod.Annotations, naming.AnnotationStartID)
	pod.Spec.Containers[0].Env = nil
	pod.Spec.Containers[0].EnvFrom = nil
	ran := createRunning(t, ctx, pod)

	m := startManager(t, ctx, Options{Config: cfg})
	_, err = m.Seed(ctx, Seed{Server: erin, State: spawner.State{PodName: "old-erin", Namespace: hub, Port: 8888}})
	if !errors.Is(err, ErrStateRefused) || !strings.Contains(err.Error(), "AdoptKubeSpawner") {
		t.Fatalf("a State naming a KubeSpawner pod without AdoptKubeSpawner: %v, want ErrStateRefused naming AdoptKubeSpawner", err)
	}
	if _, err := m.Status(erin); !errors.Is(err, ErrNotFound) {
		t.Errorf("erin after the refused State: %v, want not found", err)
	}
	if pods := serverPods(t, cluster.Client, hub, erin.Username); len(pods) != 1 || pods[0].UID != ran.UID || pods[0].DeletionTimestamp != nil {
		t.Errorf("the KubeSpawner pod was touched: %v", podNames(pods))
	}
}

// TestNamespaceChangeUnderTheShippedRole: the namespace change, run by
// an identity with only deploy/role.yaml's rules, bound in the new
// namespace and in the retired one: the old server is found, polled and
// stopped, and the next start runs in the new namespace.
func TestNamespaceChangeUnderTheShippedRole(t *testing.T) {
	ctx := ctxTimeout(t, 150*time.Second)
	old, moved := newNamespace(t), newNamespace(t)
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch", "create", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"persistentvolumeclaims"}, Verbs: []string{"get", "create", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"services", "secrets"}, Verbs: []string{"get", "create", "delete"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"list", "watch"}},
	}
	user := "spawnkit-role-" + moved
	for _, ns := range []string{old, moved} {
		if _, err := cluster.Client.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "spawnkit-service"}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cluster.Client.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "spawnkit-service"},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "spawnkit-service"},
			Subjects: []rbacv1.Subject{{Kind: "User", Name: user}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	restCfg, err := cluster.UserConfig(user)
	if err != nil {
		t.Fatal(err)
	}
	client := kubernetes.NewForConfigOrDie(restCfg)
	roleRegistry := func() *reflector.Registry {
		r, err := reflector.New(reflector.Options{Config: restCfg})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		return r
	}
	alice := naming.Server{Username: "role-alice"}
	m1, stop1 := runManager(t, Options{Config: baseConfig(old), Client: client, Registry: roleRegistry()})
	if _, _, err := m1.Spawn(ctx, alice, SpawnOptions{Env: hubStart().Env}); err != nil {
		t.Fatal(err)
	}
	was := waitStatus(t, m1, alice, "running", phaseIs(PhaseRunning))
	stop1()

	after := baseConfig(moved)
	after.RetiredNamespaces = []string{old}
	m2, _ := runManager(t, Options{Config: after, Client: client, Registry: roleRegistry()})
	if st, err := m2.Poll(ctx, alice); err != nil || st.Phase != PhaseRunning || st.URL != was.URL || st.ExitCode != nil {
		t.Fatalf("alice under the Role after the change: %+v, %v; want running at %s", st, err, was.URL)
	}
	if _, err := m2.Stop(ctx, alice, spawner.StopOptions{}); err != nil {
		t.Fatalf("Stop under the Role: %v", err)
	}
	if pods := serverPods(t, cluster.Client, old, alice.Username); len(pods) != 0 {
		t.Fatalf("alice's old pod after Stop: %v", podNames(pods))
	}
	if _, _, err := m2.Spawn(ctx, alice, SpawnOptions{Env: hubStart().Env}); err != nil {
		t.Fatal(err)
	}
	if st := waitStatus(t, m2, alice, "running", phaseIs(PhaseRunning)); st.State.Namespace != moved {
		t.Errorf("alice's next start under the Role is in %q, want %q", st.State.Namespace, moved)
	}
}
