package kubespawner

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"slices"
	"strings"
	"testing"
)

var updatePyOptions = flag.Bool("update-python-options", false, "rewrite python/spawnkit_jupyterhub/kubespawner_options.json")

// pyOption is one row of the option list the Python Spawner reads.
type pyOption struct {
	Name string `json:"name"`
	// Status is docs/kubespawner-options.md's: the Python Spawner refuses
	// a "not applicable" option at hub start, with Note as the reason.
	Status string `json:"status"`
	Note   string `json:"note,omitempty"`
	// Default is the value the option has when unset (spawnkit's, which
	// is KubeSpawner's), or null where it depends on the cluster or on
	// other options.
	Default any `json:"default"`
}

const pyOptionsFile = "../python/spawnkit_jupyterhub/kubespawner_options.json"

// TestPythonOptionList keeps the Python Spawner's option list (the
// traits SpawnkitSpawner accepts as c.KubeSpawner.<option>) equal to what
// Load accepts and to the options table: one source of truth, so a
// name the two sides disagree on fails here. Rewrite the file with
// go test ./spawner -run TestPythonOptionList -update-python-options.
func TestPythonOptionList(t *testing.T) {
	rows := optionsTableRows(t)
	defaults := Config{}.WithDefaults()
	typed, errs := defaults.typedOptions()
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	var list []pyOption
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range rows {
			if !yield(k) {
				return
			}
		}
	})
	for _, name := range names {
		row := rows[name]
		if row.status != "not applicable" && !isOptionKey(name) {
			t.Errorf("option %s is %s in the table but Load does not take it", name, row.status)
		}
		o := pyOption{Name: name, Status: row.status, Default: typed[name]}
		if row.status == "not applicable" || row.status == "deviates" {
			o.Note = row.note
		}
		list = append(list, o)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", " ")
	if err := enc.Encode(list); err != nil {
		t.Fatal(err)
	}
	if *updatePyOptions {
		if err := os.WriteFile(pyOptionsFile, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	have, err := os.ReadFile(pyOptionsFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, buf.Bytes()) {
		t.Errorf("%s is not what the Go options give: run go test ./kubespawner -run TestPythonOptionList -update-python-options", pyOptionsFile)
	}
}

type tableRow struct{ status, note string }

// optionsTableRows reads docs/kubespawner-options.md's table with notes.
func optionsTableRows(t *testing.T) map[string]tableRow {
	t.Helper()
	data, err := os.ReadFile("../docs/kubespawner-options.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]tableRow{}
	for line := range strings.SplitSeq(string(data), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 5 {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		rows[name] = tableRow{strings.TrimSpace(cells[2]), strings.TrimSpace(strings.Join(cells[3:len(cells)-1], "|"))}
	}
	return rows
}
