package spawner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/spawnkit/spawnkit/internal/vectorrules"
)

// z2jhFile is the part of a z2jh vector file this test reads.
type z2jhFile struct {
	Source struct {
		JupyterHubVersion string `json:"jupyterhub_version"`
	} `json:"source"`
	Cases []struct {
		Name          string          `json:"name"`
		HubConfig     json.RawMessage `json:"hub_config"`
		ExpectedError json.RawMessage `json:"expected_error"`
		Release       struct {
			Namespace string `json:"namespace"`
		} `json:"helm_release"`
		Spawns []configCase `json:"spawns"`
	} `json:"cases"`
}

// startBody is what SpawnkitSpawner sends the service for one spawn.
type startBody struct {
	Config      json.RawMessage `json:"config"`
	Env         json.RawMessage `json:"env"`
	UserOptions map[string]any  `json:"user_options"`
	Cmd         json.RawMessage `json:"cmd"`
	Args        json.RawMessage `json:"args"`
	Attributes  json.RawMessage `json:"attributes"`
}

// chartRefuses is the rule for a value set the chart itself refuses: no
// hub configuration exists, so neither spawner sees one.
const chartRefuses = "chart-refuses"

// TestZ2JHVectors checks Zero to JupyterHub's hub configuration end to
// end: each value set's hub_config (what z2jh 4.4's jupyterhub_config.py
// made of the chart values) is loaded into the Python SpawnkitSpawner as
// JupyterHub loads it (a traitlets Config; testdata/z2jh_hub_config.py),
// and the start body it sends, for each spawn, is what the service
// builds from: its "config" over an empty service configuration (what
// Config.WithOptions gives over nothing is what kubespawner.Load gives), its
// env and user options. The objects are compared with what the real
// KubeSpawner 7.1 made, under the config vectors' rules. Z2JH_VECTORS
// names another file of the same format.
func TestZ2JHVectors(t *testing.T) {
	path := "testdata/z2jh-vectors.json"
	if p := os.Getenv("Z2JH_VECTORS"); p != "" {
		path = p
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(abs)
	if err != nil {
		t.Fatal(err)
	}
	var file z2jhFile
	if err := json.Unmarshal(data, &file); err != nil {
		t.Fatalf("decoding %s: %v", path, err)
	}
	bodies := z2jhBodies(t, abs)
	if err := vectorrules.Check(chartRefuses, "The chart refuses these values before any hub configuration exists, so no spawner sees them."); err != nil {
		t.Fatal(err)
	}
	tally := vectorrules.Tally{Neutral: []string{"spawnkit-identity"}}
	for _, c := range file.Cases {
		if len(c.HubConfig) == 0 || string(c.HubConfig) == "null" {
			ok := t.Run(c.Name, func(t *testing.T) {
				if len(c.ExpectedError) == 0 {
					t.Fatal("a value set with neither a hub configuration nor the chart's error")
				}
			})
			tally.Record([]string{chartRefuses}, ok)
			continue
		}
		var applied []string
		ok := t.Run(c.Name, func(t *testing.T) {
			sent := bodies[c.Name]
			if len(sent) != len(c.Spawns) {
				t.Fatalf("the Spawner made %d start bodies for %d spawns", len(sent), len(c.Spawns))
			}
			for i, spawn := range c.Spawns {
				body := sent[i]
				t.Run(fmt.Sprintf("%d-%s", i, spawn.User.Name), func(t *testing.T) {
					if len(body.Config) == 0 {
						t.Fatal("the Spawner sent no configuration")
					}
					for what, raw := range map[string]json.RawMessage{"cmd": body.Cmd, "args": body.Args, "attributes": body.Attributes} {
						if len(raw) > 0 {
							t.Errorf("the Spawner sent %s (%s) with its configuration", what, raw)
						}
					}
					sc := spawn
					sc.Name = c.Name
					sc.Config = body.Config
					sc.HubEnv = body.Env
					sc.UserOptions = body.UserOptions
					sc.HubNS = c.Release.Namespace
					for _, r := range runConfigCase(t, sc, file.Source.JupyterHubVersion) {
						if !containsString(applied, r) {
							applied = append(applied, r)
						}
					}
				})
			}
		})
		tally.Record(applied, ok)
	}
	t.Logf("%s", &tally)
}

func containsString(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// z2jhBodies runs the Python Spawner over the file: case name to the
// start body of each spawn.
func z2jhBodies(t *testing.T, vectors string) map[string][]startBody {
	t.Helper()
	const python = "/usr/bin/python3"
	probe := exec.Command(python, "-c", "import jupyterhub, kubernetes.client, traitlets")
	if out, err := probe.CombinedOutput(); err != nil {
		msg := fmt.Sprintf("Debian's python3 with jupyterhub and python3-kubernetes is needed (apt-get install jupyterhub python3-kubernetes): %v: %s", err, out)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg + " (required because CI=true)")
		}
		t.Skip(msg)
	}
	pkg, err := filepath.Abs("../python")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), python, "testdata/z2jh_hub_config.py", vectors)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+pkg, "PYTHONDONTWRITEBYTECODE=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("z2jh_hub_config.py: %v\n%s", err, stderr.String())
	}
	var bodies map[string][]startBody
	if err := json.Unmarshal(out, &bodies); err != nil {
		t.Fatalf("z2jh_hub_config.py printed no JSON: %v", err)
	}
	return bodies
}
