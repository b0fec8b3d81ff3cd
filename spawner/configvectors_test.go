package spawner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/spawnkit/spawnkit/internal/vectorrules"
	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/manifest"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/reflector"
)

// configCase is one case of testdata/config-vectors.json: a KubeSpawner
// configuration and what the real KubeSpawner 7.1 class made of it.
type configCase struct {
	Name   string          `json:"name"`
	Config json.RawMessage `json:"config"`
	User   struct {
		Name string
		ID   int64
	} `json:"user"`
	ServerName  string              `json:"server_name"`
	UserOptions map[string]any      `json:"user_options"`
	FormData    map[string][]string `json:"form_data"`
	HubNS       string              `json:"hub_namespace_detected"`
	HubEnv      json.RawMessage     `json:"hub_env"`
	Expected    *struct {
		Names               map[string]string `json:"names"`
		NamespaceManifest   json.RawMessage   `json:"namespace_manifest"`
		PVC                 json.RawMessage   `json:"pvc"`
		Pod                 json.RawMessage   `json:"pod"`
		Env                 json.RawMessage   `json:"env"`
		Service             json.RawMessage   `json:"service"`
		PodURL              string            `json:"pod_url"`
		UserOptionsFromForm map[string]any    `json:"user_options_from_form"`
	} `json:"expected"`
	ExpectedError *struct{ Type, Message, Stage string } `json:"expected_error"`
}

// TestConfigVectors runs each KubeSpawner configuration of the reference
// vectors through kubespawner.Load, Resolve and Plan and compares the names,
// objects, env and URL with what the real KubeSpawner made. Deliberate
// differences are the rules of kubespawnerRules (configrules_test.go).
func TestConfigVectors(t *testing.T) {
	// The hand-picked cases and 300 seeded random combinations from the
	// same generator (testdata/README.md); CONFIG_VECTORS runs another
	// file of the same schema instead.
	paths := []string{"testdata/config-vectors.json", "testdata/config-vectors-random.json"}
	if p := os.Getenv("CONFIG_VECTORS"); p != "" {
		paths = []string{p}
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) { testConfigVectorFile(t, path) })
	}
}

// testConfigVectorFile checks every case of one vector file and logs its
// tally.
func testConfigVectorFile(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Source struct {
			JupyterHubVersion string `json:"jupyterhub_version"`
		} `json:"source"`
		Cases []configCase `json:"cases"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatalf("decoding %s: %v", path, err)
	}
	for _, r := range kubespawnerRules {
		if err := vectorrules.Check(r.name, r.reason); err != nil {
			t.Error(err)
		}
	}
	tally := vectorrules.Tally{Neutral: []string{"spawnkit-identity"}}
	for _, c := range file.Cases {
		var applied []string
		ok := t.Run(c.Name, func(t *testing.T) {
			applied = runConfigCase(t, c, file.Source.JupyterHubVersion)
		})
		tally.Record(applied, ok)
	}
	t.Logf("%s", &tally)
}

// runConfigCase checks one case and returns the rules it needed.
func runConfigCase(t *testing.T, c configCase, hubVersion string) []string {
	t.Helper()
	in := &caseInput{config: orderedMap(t, c.Config), c: &c}
	var applied []string
	for _, r := range kubespawnerRules {
		if r.applies != nil && r.applies(in) {
			applied = append(applied, r.name)
			if r.rewriteInput != nil {
				r.rewriteInput(t, in)
			}
		}
	}
	cfgJSON, err := json.Marshal(in.config)
	if err != nil {
		t.Fatal(err)
	}
	stage := "init"
	cfg, err := kubespawner.Load(cfgJSON)
	var objs *Objects
	if err == nil {
		server := naming.Server{Username: c.User.Name, Servername: c.ServerName, UserID: c.User.ID}
		opts := StartOptions{Env: orderedEnv(t, c.HubEnv), HubNamespace: c.HubNS, HubVersion: hubVersion}
		uo := c.UserOptions
		if c.FormData != nil {
			var fuo map[string]string
			fuo, err = kubespawner.OptionsFromForm(cfg, c.FormData)
			uo = map[string]any{}
			for k, v := range fuo {
				uo[k] = v
			}
			if err == nil && c.Expected != nil && !equalJSON(uo, c.Expected.UserOptionsFromForm) {
				t.Errorf("options from form = %v, want %v", uo, c.Expected.UserOptionsFromForm)
			}
		}
		if err == nil {
			opts.UserOptions = map[string]string{}
			for k, v := range uo {
				opts.UserOptions[k] = fmt.Sprint(v)
			}
			stage = "plan"
			objs, err = Plan(t.Context(), server, cfg, opts)
		}
	}
	for _, r := range kubespawnerRules {
		if r.wantErr != nil && slices.Contains(applied, r.name) {
			if err == nil {
				t.Fatalf("rule %s (%s): want an error, got none", r.name, r.reason)
			}
			if !r.wantErr(in, err) {
				t.Fatalf("rule %s (%s): the error does not name the option: %v", r.name, r.reason, err)
			}
			return applied
		}
	}
	if c.Expected == nil {
		if err == nil {
			t.Fatalf("KubeSpawner raised %s at %s (%s), spawnkit planned the server", c.ExpectedError.Type, c.ExpectedError.Stage, c.ExpectedError.Message)
		}
		if c.ExpectedError.Stage == "init" && stage != "init" && !naming.IsInvalidName(err) && !strings.Contains(err.Error(), "template") {
			t.Errorf("KubeSpawner fails at init, spawnkit only at %s: %v", stage, err)
		}
		for _, want := range errorMustName(&c) {
			if !strings.Contains(err.Error(), want) && !strings.Contains(err.Error(), strings.ReplaceAll(want, "_template", " template")) {
				t.Errorf("error %q does not name %q (KubeSpawner: %s: %s)", err, want, c.ExpectedError.Type, c.ExpectedError.Message)
			}
		}
		return applied
	}
	if err != nil {
		t.Fatalf("%s: %v", stage, err)
	}
	exp := *c.Expected
	got := map[string]any{}
	want := map[string]any{}
	// Names.
	got["names"] = map[string]string{"pod_name": objs.Names.Pod, "pvc_name": objs.Names.PVC, "secret_name": objs.Names.Secret,
		"dns_name": objs.Names.DNS, "namespace": objs.Names.Namespace}
	want["names"] = exp.Names
	got["pod_url"] = objs.State.urlFor(&reflector.Pod{PodIP: "10.244.1.17"})
	want["pod_url"] = exp.PodURL
	got["env"] = objs.Env
	want["env"] = orderedEnvJSON(t, exp.Env)
	wantPod, wantPVC, wantNS, wantSvc := &corev1.Pod{}, &corev1.PersistentVolumeClaim{}, &corev1.Namespace{}, &corev1.Service{}
	for _, o := range []struct {
		raw    json.RawMessage
		target any
		ptr    *any
	}{{exp.Pod, wantPod, nil}, {exp.PVC, wantPVC, nil}, {exp.NamespaceManifest, wantNS, nil}, {exp.Service, wantSvc, nil}} {
		if len(o.raw) == 0 || string(o.raw) == "null" {
			continue
		}
		if err := json.Unmarshal(o.raw, o.target); err != nil {
			t.Fatalf("expected object: %v", err)
		}
	}
	if string(exp.PVC) == "null" {
		wantPVC = nil
	}
	if string(exp.NamespaceManifest) == "null" {
		wantNS = nil
	}
	if string(exp.Service) == "null" {
		wantSvc = nil
	}
	w := &wantObjects{Pod: wantPod, PVC: wantPVC, Namespace: wantNS, Service: wantSvc, Values: want}
	g := &wantObjects{Pod: objs.Pod.DeepCopy(), PVC: objs.PVC.DeepCopy(), Namespace: objs.Namespace.DeepCopy(), Service: objs.Service.DeepCopy(), Values: got}
	normalize(g, w)
	if g.Service != nil && w.Service != nil && len(w.Service.OwnerReferences) == 1 && w.Service.OwnerReferences[0].Kind == "Pod" {
		// Start makes the pod it created the service's owner, as
		// KubeSpawner does; the pod's UID is the cluster's.
		g.Service.OwnerReferences = []metav1.OwnerReference{manifest.OwnerReference(objs.Pod.Name, w.Service.OwnerReferences[0].UID)}
	}
	for _, r := range kubespawnerRules {
		if r.rewriteOutput == nil {
			continue
		}
		if r.applies == nil || slices.Contains(applied, r.name) {
			if r.rewriteOutput(in, g, w) && r.applies == nil {
				applied = append(applied, r.name)
			}
		}
	}
	compareObject(t, "pod", g.Pod, w.Pod)
	compareObject(t, "pvc", g.PVC, w.PVC)
	compareObject(t, "namespace", g.Namespace, w.Namespace)
	compareObject(t, "service", g.Service, w.Service)
	for _, k := range []string{"names", "pod_url", "env"} {
		gj, _ := json.MarshalIndent(g.Values[k], "", "  ")
		wj, _ := json.MarshalIndent(w.Values[k], "", "  ")
		if !bytes.Equal(gj, wj) {
			t.Errorf("%s differs\n--- spawnkit:\n%s\n--- kubespawner:\n%s", k, gj, wj)
		}
	}
	return applied
}

// wantObjects are one side of a comparison, for rules to rewrite.
type wantObjects struct {
	Pod       *corev1.Pod
	PVC       *corev1.PersistentVolumeClaim
	Namespace *corev1.Namespace
	Service   *corev1.Service
	Values    map[string]any
}

// normalize removes what is not behaviour: KubeSpawner passes the
// namespace to the API call instead of writing it into the object, and
// the Python client leaves kind and apiVersion out of some objects.
func normalize(sides ...*wantObjects) {
	for _, s := range sides {
		if s.Pod != nil {
			for i := range s.Pod.Spec.Containers {
				if l := s.Pod.Spec.Containers[i].Lifecycle; l != nil && *l == (corev1.Lifecycle{}) {
					s.Pod.Spec.Containers[i].Lifecycle = nil // `lifecycle: {}` is no lifecycle
				}
			}
			s.Pod.Namespace = ""
			s.Pod.TypeMeta.Kind, s.Pod.TypeMeta.APIVersion = "", ""
		}
		if s.PVC != nil {
			s.PVC.Namespace = ""
			s.PVC.TypeMeta.Kind, s.PVC.TypeMeta.APIVersion = "", ""
		}
		if s.Service != nil {
			s.Service.Namespace = ""
			s.Service.TypeMeta.Kind, s.Service.TypeMeta.APIVersion = "", ""
		}
		if s.Namespace != nil {
			s.Namespace.TypeMeta.Kind, s.Namespace.TypeMeta.APIVersion = "", ""
		}
	}
}

func compareObject[T any](t *testing.T, what string, got, want *T) {
	t.Helper()
	if got == nil && want == nil {
		return
	}
	if !apiequality.Semantic.DeepEqual(got, want) {
		gj, _ := json.MarshalIndent(got, "", "  ")
		wj, _ := json.MarshalIndent(want, "", "  ")
		t.Errorf("%s differs from KubeSpawner's\n--- spawnkit:\n%s\n--- kubespawner:\n%s", what, gj, wj)
	}
}

// errorMustName is what a spawnkit error must mention for an error case:
// the quoted name in KubeSpawner's message and the option it came from.
func errorMustName(c *configCase) []string {
	var out []string
	msg := c.ExpectedError.Message
	if m := regexp.MustCompile(`^'"?([^'"]+)"?'$`).FindStringSubmatch(msg); m != nil {
		out = append(out, m[1])
	}
	var cfg map[string]json.RawMessage
	_ = json.Unmarshal(c.Config, &cfg)
	if len(cfg) == 1 {
		for k := range cfg {
			if k != "profile_list" {
				out = append(out, k)
			}
		}
	}
	if strings.HasPrefix(msg, "No such profile: ") {
		out = append(out, strings.TrimSuffix(strings.Fields(msg)[3], "."))
	}
	return out
}

// kv is one entry of an ordered JSON object.
type kv struct {
	Key   string
	Value json.RawMessage
}

// orderedMap decodes a JSON object keeping its key order.
func orderedMap(t *testing.T, raw json.RawMessage) *ordered {
	t.Helper()
	o := &ordered{}
	if err := json.Unmarshal(raw, o); err != nil {
		t.Fatal(err)
	}
	return o
}

// ordered is a JSON object with its key order.
type ordered struct{ kvs []kv }

func (o *ordered) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil {
		return err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return err
		}
		o.kvs = append(o.kvs, kv{tok.(string), v})
	}
	return nil
}

func (o *ordered) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, e := range o.kvs {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(e.Key)
		b.Write(k)
		b.WriteByte(':')
		b.Write(e.Value)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func (o *ordered) get(key string) (json.RawMessage, bool) {
	for _, e := range o.kvs {
		if e.Key == key {
			return e.Value, true
		}
	}
	return nil, false
}

func (o *ordered) set(key string, v json.RawMessage) {
	for i, e := range o.kvs {
		if e.Key == key {
			o.kvs[i].Value = v
			return
		}
	}
	o.kvs = append(o.kvs, kv{key, v})
}

func (o *ordered) del(key string) {
	o.kvs = slices.DeleteFunc(o.kvs, func(e kv) bool { return e.Key == key })
}

// orderedEnv turns hub_env into the hub's env, in order.
func orderedEnv(t *testing.T, raw json.RawMessage) []corev1.EnvVar {
	t.Helper()
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	var env []corev1.EnvVar
	for _, e := range orderedMap(t, raw).kvs {
		var s string
		if err := json.Unmarshal(e.Value, &s); err != nil {
			t.Fatalf("hub_env %s: %v", e.Key, err)
		}
		env = append(env, corev1.EnvVar{Name: e.Key, Value: s})
	}
	return env
}

// orderedEnvJSON is the expected get_env() dict as (name, JSON value)
// pairs in order; Objects.Env is compared in the same form.
func orderedEnvJSON(t *testing.T, raw json.RawMessage) []kubespawner.EnvEntry {
	t.Helper()
	var out []kubespawner.EnvEntry
	for _, e := range orderedMap(t, raw).kvs {
		var v any
		_ = json.Unmarshal(e.Value, &v)
		out = append(out, kubespawner.EnvEntry{Name: e.Key, Value: v})
	}
	return out
}

func equalJSON(a, b any) bool {
	aj, _ := json.Marshal(a)
	bj, _ := json.Marshal(b)
	return bytes.Equal(aj, bj)
}

var _ = sort.Strings
