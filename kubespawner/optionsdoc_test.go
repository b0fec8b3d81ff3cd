package kubespawner

import (
	"bufio"
	"encoding/json"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
)

// optionStatuses are the statuses the options table may give.
var optionStatuses = map[string]bool{
	"supported":      true, // loaded, with KubeSpawner's meaning
	"deviates":       true, // loaded; spawnkit differs, the note says why
	"hub":            true, // loaded and kept (HubOptions): acts in the hub
	"deprecated":     true, // loaded with a warning, as KubeSpawner
	"spawnkit":       true, // spawnkit's own option
	"not applicable": true, // refused by Load; the note says why
}

// loadedOptions are the option names Load accepts.
func loadedOptions() []string {
	return slices.Sorted(maps.Keys(optionKeys))
}

// optionsTable reads the options table of docs/kubespawner-options.md:
// option name to status.
func optionsTable(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open("../docs/kubespawner-options.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 5 {
			t.Fatalf("table row needs option, status and note: %s", line)
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		status := strings.TrimSpace(cells[2])
		if _, dup := rows[name]; dup {
			t.Errorf("option %s is listed twice", name)
		}
		rows[name] = status
		if !optionStatuses[status] {
			t.Errorf("option %s: unknown status %q", name, status)
		}
		if (status == "deviates" || status == "not applicable") && strings.TrimSpace(cells[3]) == "" {
			t.Errorf("option %s is %s without a reason", name, status)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestOptionsTable keeps docs/kubespawner-options.md true: it lists every
// KubeSpawner 7.1 and JupyterHub 3.0 Spawner option
// (testdata/kubespawner-options.txt) and every option Load accepts,
// and an option is marked loaded exactly when Load accepts it.
func TestOptionsTable(t *testing.T) {
	rows := optionsTable(t)
	data, err := os.ReadFile("testdata/kubespawner-options.txt")
	if err != nil {
		t.Fatal(err)
	}
	var upstream []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			upstream = append(upstream, l)
		}
	}
	for _, k := range upstream {
		if _, ok := rows[k]; !ok {
			t.Errorf("KubeSpawner option %s is missing from docs/kubespawner-options.md", k)
		}
	}
	loaded := loadedOptions()
	// optionKeys, which refuses unknown override keys, is what the
	// decoder accepts: no key of it is an unknown field, and a key
	// outside it is.
	for _, k := range append(slices.Clone(loaded), "no_such_option") {
		one, _ := json.Marshal(map[string]any{k: nil})
		_, err := Load(one)
		unknown := err != nil && strings.Contains(err.Error(), `unknown option "`+k+`"`)
		if unknown == isOptionKey(k) {
			t.Errorf("option %s: isOptionKey=%v, but Load says %v", k, isOptionKey(k), err)
		}
	}
	for _, k := range loaded {
		if _, ok := rows[k]; !ok {
			t.Errorf("option %s, which Load accepts, is missing from docs/kubespawner-options.md", k)
		}
	}
	for k, status := range rows {
		accepted := slices.Contains(loaded, k)
		if accepted == (status == "not applicable") {
			t.Errorf("option %s is %q in the table, but Load accepted=%v", k, status, accepted)
		}
		if status == "spawnkit" && slices.Contains(upstream, k) {
			t.Errorf("option %s is KubeSpawner's, not spawnkit's own", k)
		}
	}
	t.Logf("%d options in the table, %d from KubeSpawner and JupyterHub", len(rows), len(upstream))
}
