package manifest

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/spawnkit/spawnkit/internal/vectorrules"
)

// The reference vectors were produced by the real kubespawner 7.1
// objects.py (see testdata/README.md). MANIFEST_VECTORS names another file
// of the same schema to check instead.
//
// Comparison: the expected JSON is decoded, strictly, into the same
// client-go type the API server would decode it into, and compared with
// the built object by apimachinery's semantic equality (quantities by
// value, so 2.0 CPUs equal "2"; empty and absent lists and maps equal, as
// in the API). A field the Go type does not know fails the decode, so
// nothing the API server would drop passes unnoticed.

type vectorCase struct {
	Name          string          `json:"name"`
	Function      string          `json:"function"`
	Kwargs        json.RawMessage `json:"kwargs"`
	Expected      json.RawMessage `json:"expected"`
	ExpectedError *struct {
		Type, Message string
	} `json:"expected_error"`
}

// rule is a place where spawnkit deliberately differs from KubeSpawner
// 7.1's output, stated over the case's input (applies), so that any case
// of its kind is handled, and no other.
type rule struct {
	name, reason string
	applies      func(c vectorCase) bool
	// fix rewrites KubeSpawner's expected JSON into what spawnkit builds;
	// everything else must still match.
	fix func(c vectorCase, expected string) string
	// wantErr, when set, means spawnkit rejects the input with an error
	// containing what it returns, where KubeSpawner built an object.
	wantErr func(c vectorCase) string
	// fixKwargs, with wantErr, mends the input; the mended input must
	// then build fix(expected), so the rest of the case is still checked.
	fixKwargs func(c vectorCase) json.RawMessage
}

// kwargs decodes a case's arguments.
func kwargs(c vectorCase) map[string]any {
	var m map[string]any
	_ = json.Unmarshal(c.Kwargs, &m)
	return m
}

var rules = []rule{
	{
		name:   "empty-service-account",
		reason: "make_pod with service_account \"\" (not None) sets no serviceAccountName and no automountServiceAccountToken, so the namespace's default service account token is mounted into the user's pod; spawnkit treats \"\" as no service account and keeps the token out (automountServiceAccountToken: false), as make_pod does for None",
		applies: func(c vectorCase) bool {
			kw := kwargs(c)
			sa, isString := kw["service_account"].(string)
			return c.Function == "make_pod" && isString && sa == "" && kw["automount_service_account_token"] == nil
		},
		fix: func(c vectorCase, s string) string {
			var pod map[string]any
			_ = json.Unmarshal([]byte(s), &pod)
			pod["spec"].(map[string]any)["automountServiceAccountToken"] = false
			b, _ := json.Marshal(pod)
			return string(b)
		},
	},
	{
		name:   "ssl-path-join",
		reason: "KubeSpawner joins ssl_secret_mount_path and the file names without a '/' ('/certs' + 'ssl.key' = '/certsssl.key'), pointing the notebook at files that do not exist; spawnkit joins paths",
		applies: func(c vectorCase) bool {
			p, _ := kwargs(c)["ssl_secret_mount_path"].(string)
			return c.Function == "make_pod" && p != "" && !strings.HasSuffix(p, "/")
		},
		fix: func(c vectorCase, s string) string {
			p := kwargs(c)["ssl_secret_mount_path"].(string)
			return strings.NewReplacer(`"`+p+`ssl.`, `"`+p+`/ssl.`, `"`+p+`notebooks-`, `"`+p+`/notebooks-`).Replace(s)
		},
	},
	{
		name:    "nested-snake-key",
		reason:  "KubeSpawner passes nested snake_case keys of extra_container_config or extra_pod_config (security_context.run_as_user) on verbatim, and the API server silently drops them, so the setting never applies; spawnkit rejects the unknown nested key, naming it",
		applies: func(c vectorCase) bool { return nestedSnakeKey(c) != "" },
		wantErr: nestedSnakeKey,
	},
	{
		name:    "init-container-mount-without-volume",
		reason:  "an init container that mounts a volume the pod does not have is rejected by the API server at create time; spawnkit rejects it at build time, naming the mount",
		applies: func(c vectorCase) bool { _, _, ok := missingInitVolume(c); return ok },
		wantErr: func(c vectorCase) string {
			i, name, _ := missingInitVolume(c)
			return fmt.Sprintf("init_containers[%d].volumeMounts[%d].name: Not found: %q", i[0], i[1], name)
		},
		fixKwargs: func(c vectorCase) json.RawMessage {
			_, name, _ := missingInitVolume(c)
			kw := kwargs(c)
			vols, _ := kw["volumes"].([]any)
			kw["volumes"] = append(vols, map[string]any{"name": name, "emptyDir": map[string]any{}})
			b, _ := json.Marshal(kw)
			return b
		},
		fix: func(c vectorCase, s string) string {
			_, name, _ := missingInitVolume(c)
			var pod map[string]any
			_ = json.Unmarshal([]byte(s), &pod)
			spec := pod["spec"].(map[string]any)
			vols, _ := spec["volumes"].([]any)
			spec["volumes"] = append(vols, map[string]any{"name": name, "emptyDir": map[string]any{}})
			b, _ := json.Marshal(pod)
			return string(b)
		},
	},
	{
		name:   "complete-type-meta",
		reason: "KubeSpawner leaves kind or apiVersion out of some objects (the client fills them in when sending); spawnkit builds complete objects",
		applies: func(c vectorCase) bool {
			var tm metav1.TypeMeta
			_ = json.Unmarshal(c.Expected, &tm)
			return len(c.Expected) > 0 && string(c.Expected) != "null" && c.Function != "make_owner_reference" && (tm.Kind == "" || tm.APIVersion == "")
		},
		fix: func(c vectorCase, s string) string {
			var m map[string]any
			_ = json.Unmarshal([]byte(s), &m)
			m["apiVersion"] = "v1"
			m["kind"] = map[string]string{"make_pod": "Pod", "make_pvc": "PersistentVolumeClaim", "make_secret": "Secret", "make_service": "Service", "make_namespace": "Namespace"}[c.Function]
			b, _ := json.Marshal(m)
			return string(b)
		},
	},
}

// nestedSnakeKey is the first snake_case key below the top level of
// extra_container_config or extra_pod_config, which the API server would
// drop; "" if none.
func nestedSnakeKey(c vectorCase) string {
	if c.Function != "make_pod" {
		return ""
	}
	var find func(v any, depth int) string
	find = func(v any, depth int) string {
		switch v := v.(type) {
		case map[string]any:
			for _, k := range slices.Sorted(maps.Keys(v)) {
				if depth > 0 && strings.Contains(k, "_") {
					return k
				}
				if got := find(v[k], depth+1); got != "" {
					return got
				}
			}
		case []any:
			for _, e := range v {
				if got := find(e, depth+1); got != "" {
					return got
				}
			}
		}
		return ""
	}
	kw := kwargs(c)
	for _, opt := range []string{"extra_container_config", "extra_pod_config"} {
		if got := find(kw[opt], 0); got != "" {
			return got
		}
	}
	return ""
}

// missingInitVolume finds an init container's mount of a volume the pod
// does not have: the container and mount index and the volume name.
func missingInitVolume(c vectorCase) ([2]int, string, bool) {
	if c.Function != "make_pod" {
		return [2]int{}, "", false
	}
	kw := kwargs(c)
	have := map[string]bool{}
	vols, _ := kw["volumes"].([]any)
	for _, v := range vols {
		if m, ok := v.(map[string]any); ok {
			name, _ := m["name"].(string)
			have[name] = true
		}
	}
	inits, _ := kw["init_containers"].([]any)
	for i, ic := range inits {
		m, _ := ic.(map[string]any)
		mounts, _ := m["volume_mounts"].([]any)
		if mounts == nil {
			mounts, _ = m["volumeMounts"].([]any)
		}
		for j, mt := range mounts {
			mm, _ := mt.(map[string]any)
			if name, _ := mm["name"].(string); name != "" && !have[name] {
				return [2]int{i, j}, name, true
			}
		}
	}
	return [2]int{}, "", false
}

func TestVectors(t *testing.T) {
	path := os.Getenv("MANIFEST_VECTORS")
	if path == "" {
		path = "testdata/manifest-vectors.json"
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases  []vectorCase `json:"cases"`
		Counts struct {
			Total int `json:"total"`
		} `json:"counts"`
	}
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatalf("decoding %s: %v", path, err)
	}
	for _, r := range rules {
		if err := vectorrules.Check(r.name, r.reason); err != nil {
			t.Error(err)
		}
	}
	tally := vectorrules.Tally{}
	for _, c := range file.Cases {
		var applied []rule
		for _, r := range rules {
			if r.applies(c) {
				applied = append(applied, r)
			}
		}
		ok := t.Run(c.Name, func(t *testing.T) {
			got, err := buildVector(c)
			if c.ExpectedError != nil {
				if err == nil {
					t.Fatalf("built an object, want KubeSpawner's error %s: %s", c.ExpectedError.Type, c.ExpectedError.Message)
				}
				// The error must name what KubeSpawner's names.
				if key := quoted(c.ExpectedError.Message); key != "" && !strings.Contains(err.Error(), key) {
					t.Errorf("error %q does not name %q (KubeSpawner: %s)", err, key, c.ExpectedError.Message)
				}
				return
			}
			expected := string(c.Expected)
			for _, r := range applied {
				if r.wantErr == nil {
					continue
				}
				if want := r.wantErr(c); err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("rule %s (%s): want an error naming %q, got %v", r.name, r.reason, want, err)
				}
				if r.fixKwargs == nil {
					return
				}
				mended := c
				mended.Kwargs = r.fixKwargs(c)
				if got, err = buildVector(mended); err != nil {
					t.Fatalf("rule %s: mended input: %v", r.name, err)
				}
			}
			if err != nil {
				t.Fatalf("build: %v", err)
			}
			for _, r := range applied {
				if r.fix == nil {
					continue
				}
				fixed := r.fix(c, expected)
				if fixed == expected {
					t.Fatalf("rule %s changed nothing; is the deviation (%s) still there?", r.name, r.reason)
				}
				expected = fixed
			}
			compareVector(t, c.Function, got, []byte(expected))
		})
		var names []string
		for _, r := range applied {
			names = append(names, r.name)
		}
		tally.Record(names, ok)
	}
	if len(file.Cases) == 0 || (file.Counts.Total != 0 && file.Counts.Total != len(file.Cases)) {
		t.Errorf("the file holds %d cases and says %d", len(file.Cases), file.Counts.Total)
	}
	t.Log(&tally)
}

// quoted returns the first '...'-quoted word of a Python error message.
func quoted(msg string) string {
	_, rest, ok := strings.Cut(msg, "'")
	if !ok {
		return ""
	}
	word, _, _ := strings.Cut(rest, "'")
	if word == "V1PodSpec" { // "'V1PodSpec' did not have an attribute matching 'notAField'"
		return quoted(strings.SplitN(msg, "matching", 2)[1])
	}
	return word
}

func buildVector(c vectorCase) (any, error) {
	switch c.Function {
	case "make_pod":
		spec, err := DecodePodSpec(c.Kwargs)
		if err != nil {
			return nil, err
		}
		return Pod(&spec)
	case "make_pvc":
		spec, err := DecodePVCSpec(c.Kwargs)
		if err != nil {
			return nil, err
		}
		return PVC(spec)
	case "make_secret":
		var kw struct {
			Name  string `json:"name"`
			Files struct {
				Key  string `json:"keyfile"`
				Cert string `json:"certfile"`
				CA   string `json:"cafile"`
			} `json:"cert_file_contents"`
			HubCA       string            `json:"hub_ca_file_content"`
			Owners      []ownerArg        `json:"owner_references"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
			Username    string            `json:"username"`
		}
		if err := strictDecode(c.Kwargs, &kw); err != nil {
			return nil, err
		}
		return Secret(SecretSpec{
			Name: kw.Name, Key: []byte(kw.Files.Key), Cert: []byte(kw.Files.Cert), CA: []byte(kw.Files.CA),
			HubCA: []byte(kw.HubCA), OwnerReferences: owners(kw.Owners), Labels: kw.Labels, Annotations: kw.Annotations,
		})
	case "make_service":
		var kw struct {
			Name        string            `json:"name"`
			Port        int32             `json:"port"`
			Selector    map[string]string `json:"selector"`
			Owners      []ownerArg        `json:"owner_references"`
			Labels      map[string]string `json:"labels"`
			Annotations map[string]string `json:"annotations"`
		}
		if err := strictDecode(c.Kwargs, &kw); err != nil {
			return nil, err
		}
		return Service(ServiceSpec{Name: kw.Name, Port: kw.Port, Selector: kw.Selector, OwnerReferences: owners(kw.Owners), Labels: kw.Labels, Annotations: kw.Annotations})
	case "make_namespace":
		var kw NamespaceSpec
		if err := json.Unmarshal(c.Kwargs, &kw); err != nil {
			return nil, err
		}
		return Namespace(kw)
	case "make_owner_reference":
		var kw ownerArg
		if err := strictDecode(c.Kwargs, &kw); err != nil {
			return nil, err
		}
		ref := OwnerReference(kw.Name, types.UID(kw.UID))
		return &ref, nil
	}
	return nil, fmt.Errorf("unknown function %q", c.Function)
}

type ownerArg struct {
	Name string `json:"name"`
	UID  string `json:"uid"`
}

func owners(args []ownerArg) []metav1.OwnerReference {
	var out []metav1.OwnerReference
	for _, a := range args {
		out = append(out, OwnerReference(a.Name, types.UID(a.UID)))
	}
	return out
}

func compareVector(t *testing.T, function string, got any, expected []byte) {
	t.Helper()
	var want any
	switch function {
	case "make_pod":
		want = &corev1.Pod{}
	case "make_pvc":
		want = &corev1.PersistentVolumeClaim{}
	case "make_secret":
		want = &corev1.Secret{}
	case "make_service":
		want = &corev1.Service{}
	case "make_namespace":
		want = &corev1.Namespace{}
	case "make_owner_reference":
		want = &metav1.OwnerReference{}
	}
	if err := strictDecode(expected, want); err != nil {
		t.Fatalf("KubeSpawner's output has fields the API would not keep: %v\n%s", err, expected)
	}
	if !apiequality.Semantic.DeepEqual(got, want) {
		gotJSON, _ := json.MarshalIndent(got, "", "  ")
		wantJSON, _ := json.MarshalIndent(want, "", "  ")
		t.Errorf("built object differs from KubeSpawner's\n--- spawnkit:\n%s\n--- kubespawner:\n%s", gotJSON, wantJSON)
	}
	// The comparison above is on typed values; make sure the JSON we would
	// send round-trips to the same value too.
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	var generic any
	if err := json.Unmarshal(b, &generic); err != nil {
		t.Fatal(err)
	}
	if k := snakeKey(generic, false); k != "" {
		t.Errorf("serialized object has a snake_case key %q: %s", k, b)
	}
}

// freeFormMaps hold user data as keys (label keys, env-like data,
// resource names), which may contain '_'.
var freeFormMaps = []string{"labels", "annotations", "nodeSelector", "selector", "matchLabels", "data", "stringData", "limits", "requests"}

// snakeKey returns a field name of the serialized object holding '_' (a
// Python name that slipped through), looking at keys only: values such
// as an env variable named "_x" are data.
func snakeKey(v any, freeForm bool) string {
	switch v := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(v)) {
			if !freeForm && strings.Contains(k, "_") {
				return k
			}
			if got := snakeKey(v[k], !freeForm && slices.Contains(freeFormMaps, k)); got != "" {
				return got
			}
		}
	case []any:
		for _, e := range v {
			if got := snakeKey(e, false); got != "" {
				return got
			}
		}
	}
	return ""
}

func TestSnakeKey(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"spec":{"containers":[{"env":[{"name":"_x","value":"_y"}]}]}}`, ""},
		{`{"metadata":{"labels":{"a_b":"c"},"annotations":{"x_y":"z"}}}`, ""},
		{`{"spec":{"securityContext":{"run_as_user":5}}}`, "run_as_user"},
		{`{"spec":{"containers":[{"security_context":{}}]}}`, "security_context"},
	} {
		var v any
		if err := json.Unmarshal([]byte(tc.json), &v); err != nil {
			t.Fatal(err)
		}
		if got := snakeKey(v, false); got != tc.want {
			t.Errorf("snakeKey(%s) = %q, want %q", tc.json, got, tc.want)
		}
	}
}
