package manifest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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

// deviation is a place where spawnkit deliberately differs from
// KubeSpawner 7.1's output.
type deviation struct {
	reason string
	// fix rewrites KubeSpawner's expected JSON into what spawnkit builds;
	// everything else must still match.
	fix func(expected string) string
	// wantErr, when set, means spawnkit rejects the input with an error
	// containing it, where KubeSpawner built an object.
	wantErr string
	// fixKwargs, with wantErr, mends the input; the mended input must
	// then build fix(expected), so the rest of the case is still checked.
	fixKwargs func(kwargs string) string
}

var deviations = map[string]deviation{
	"pod_ssl_mount_path_without_trailing_slash": {
		reason: "KubeSpawner joins ssl_secret_mount_path and the file names without a '/' ('/certs' + 'ssl.key' = '/certsssl.key'), pointing the notebook at files that do not exist; spawnkit joins paths",
		fix: func(s string) string {
			return strings.NewReplacer(`"/certsssl.`, `"/certs/ssl.`, `"/certsnotebooks-`, `"/certs/notebooks-`).Replace(s)
		},
	},
	"pod_extra_container_config_camel_and_snake_replaces": {
		reason:  "KubeSpawner passes the nested key security_context.run_as_user on verbatim, and the API server silently drops it, so the pod runs with the image's user instead of uid 5; spawnkit rejects the unknown nested key, naming it",
		wantErr: "run_as_user",
	},
	"pod_lifecycle_and_init_containers": {
		reason:  "the init container mounts volume \"home\", which the pod does not have; the API server rejects such a pod at create time, spawnkit at build time, naming the mount",
		wantErr: `init_containers[0].volumeMounts[0].name: Not found: "home"`,
		fixKwargs: func(s string) string {
			return `{"volumes": [{"name": "home", "emptyDir": {}}], ` + strings.TrimPrefix(s, "{")
		},
		fix: func(s string) string {
			return strings.Replace(s, `"volumes": []`, `"volumes": [{"name": "home", "emptyDir": {}}]`, 1)
		},
	},
	"service_basic": {
		reason: "KubeSpawner leaves apiVersion out of the Service (the client fills it in when sending); spawnkit builds complete objects",
		fix:    func(s string) string { return `{"apiVersion":"v1",` + strings.TrimPrefix(s, "{") },
	},
	"namespace_labels": {
		reason: "KubeSpawner leaves kind and apiVersion out of the Namespace (the client fills them in when sending); spawnkit builds complete objects",
		fix:    func(s string) string { return `{"apiVersion":"v1","kind":"Namespace",` + strings.TrimPrefix(s, "{") },
	},
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
	checked, deviated := 0, 0
	for _, c := range file.Cases {
		t.Run(c.Name, func(t *testing.T) {
			dev, isDev := deviations[c.Name]
			got, err := buildVector(c)
			switch {
			case c.ExpectedError != nil:
				if err == nil {
					t.Fatalf("built an object, want KubeSpawner's error %s: %s", c.ExpectedError.Type, c.ExpectedError.Message)
				}
				// The error must name what KubeSpawner's names.
				if key := quoted(c.ExpectedError.Message); key != "" && !strings.Contains(err.Error(), key) {
					t.Errorf("error %q does not name %q (KubeSpawner: %s)", err, key, c.ExpectedError.Message)
				}
			case isDev && dev.wantErr != "":
				deviated++
				if err == nil || !strings.Contains(err.Error(), dev.wantErr) {
					t.Fatalf("deviation (%s): want an error naming %q, got %v", dev.reason, dev.wantErr, err)
				}
				if dev.fixKwargs != nil {
					mended := c
					mended.Kwargs = json.RawMessage(dev.fixKwargs(string(c.Kwargs)))
					got, err := buildVector(mended)
					if err != nil {
						t.Fatalf("mended input: %v", err)
					}
					compareVector(t, c.Function, got, []byte(dev.fix(string(c.Expected))))
				}
			case err != nil:
				t.Fatalf("build: %v", err)
			default:
				expected := string(c.Expected)
				if isDev {
					deviated++
					fixed := dev.fix(expected)
					if fixed == expected {
						t.Fatalf("deviation fix changed nothing; is the deviation (%s) still there?", dev.reason)
					}
					expected = fixed
				}
				compareVector(t, c.Function, got, []byte(expected))
			}
		})
		checked++
	}
	if checked != len(file.Cases) || checked == 0 || (file.Counts.Total != 0 && file.Counts.Total != checked) {
		t.Errorf("checked %d cases; the file holds %d and says %d", checked, len(file.Cases), file.Counts.Total)
	}
	t.Logf("checked %d cases; %d are listed deviations", checked, deviated)
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
		return Pod(spec)
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
	if bytes.Contains(b, []byte(`"_`)) {
		t.Errorf("serialized object has a snake_case key: %s", b)
	}
}
