package keyhint_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"sigs.k8s.io/yaml"

	"github.com/spawnkit/spawnkit/internal/keyhint"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type policy struct {
	PrivilegedImages []string `json:"privileged_images"`
	HostPaths        []string `json:"host_paths,omitempty"`
	Refuse           bool     `json:"refuse"`
	ignored          int
	Skipped          string `json:"-"`
}

func TestJSONKeys(t *testing.T) {
	got := keyhint.JSONKeys(&policy{}, struct {
		Refuse bool   `json:"refuse"`
		Name   string `json:"name"`
	}{})
	if want := "host_paths,name,privileged_images,refuse"; strings.Join(got, ",") != want {
		t.Errorf("JSONKeys = %v, want %s", got, want)
	}
}

func TestClosest(t *testing.T) {
	known := []string{"cpu_limit", "image", "image_pull_policy", "mem_guarantee", "start_timeout"}
	for key, want := range map[string]string{
		"mem_gurantee":        "mem_guarantee",
		"memGuarantee":        "mem_guarantee",
		"c.KubeSpawner.image": "image",
		"c.Spawner.cpu_limit": "cpu_limit",
		"image-pull-policy":   "image_pull_policy",
		"IMAGE":               "image",
		"imgae":               "image",
		"start_timout":        "start_timeout",
		"xyz":                 "",
		"flux_capacitor":      "",
	} {
		if got := keyhint.Closest(key, known); got != want {
			t.Errorf("Closest(%q) = %q, want %q", key, got, want)
		}
	}
}

func TestExplain(t *testing.T) {
	data := []byte("privileged_images: [a]\nnested:\n  - hots_paths: [b]\n")
	var p policy
	err := yaml.UnmarshalStrict([]byte("hots_paths: [b]\n"), &p)
	got := keyhint.Explain(data, err, keyhint.JSONKeys(p))
	if want := `line 3: unknown key "hots_paths": did you mean "host_paths"?`; got == nil || got.Error() != want {
		t.Errorf("Explain = %v, want %s", got, want)
	}
	if !errors.Is(got, err) {
		t.Error("the explained error does not wrap the decoder's")
	}
	// None near: every known key is listed.
	dec := json.NewDecoder(strings.NewReader(`{"zzz": 1}`))
	dec.DisallowUnknownFields()
	err = dec.Decode(&struct{ A, B int }{})
	if got := keyhint.Explain([]byte(`{"zzz": 1}`), err, []string{"a", "b"}); got == nil || got.Error() != `line 1: unknown key "zzz" (known keys: a, b)` {
		t.Errorf("Explain(far) = %v", got)
	}
	// Other errors pass unchanged.
	other := errors.New("yaml: line 2: did not find expected key")
	if got := keyhint.Explain(data, other, nil); got != other {
		t.Errorf("Explain(other) = %v, want it unchanged", got)
	}
	if keyhint.Explain(data, nil, nil) != nil {
		t.Error("Explain(nil) is not nil")
	}
}

func ExampleExplain() {
	data := []byte("refuse: false\nprivileged_image: [quay.io/x]\n")
	var p policy
	err := yaml.UnmarshalStrict(data, &p)
	fmt.Println(keyhint.Explain(data, err, keyhint.JSONKeys(p)))
	// Output: line 2: unknown key "privileged_image": did you mean "privileged_images"?
}
