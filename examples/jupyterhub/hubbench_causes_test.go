//go:build hubbench

package jupyterhub_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/spawnkit/spawnkit/examples/jupyterhub/internal/hubfail"
)

// failedStart is one failed start and why it failed.
type failedStart struct {
	user  string
	cause hubfail.Cause
}

// failureCauses says why each failed start of runs failed: from the
// answer to its start request, its progress stream's failed event, or
// the hub's log lines about the user (internal/hubfail). A start that
// never became ready counts as failed, as summarize counts it.
func failureCauses(t *testing.T, s *stack, runs []userRun, users []string) []failedStart {
	t.Helper()
	data, err := os.ReadFile(s.logPath("jupyterhub"))
	if err != nil {
		t.Logf("reading JupyterHub's log for the causes of failed starts: %v", err)
	}
	log := string(data)
	var out []failedStart
	for i, r := range runs {
		if !r.failed && r.ready > 0 {
			continue
		}
		o := hubfail.Observation{PostStatus: r.postStatus, PostBody: r.postBody, Failed: r.failedMsg,
			HubLog: hubfail.Lines(log, users[i])}
		if r.postStatus == 0 && r.startErr != nil {
			o.PostErr = r.startErr.Error()
		}
		if r.streamErr != nil {
			o.StreamErr = r.streamErr.Error()
		}
		out = append(out, failedStart{users[i], hubfail.Classify(users[i], o)})
	}
	return out
}

// causeExamples is how many users printCauses names for each cause.
const causeExamples = 5

// printCauses prints, after a side-by-side table, how many starts failed
// for each cause on each side over results, then up to causeExamples
// users for each, with where the cause was read and what it said.
func printCauses(title string, results []sideResult) {
	sides := []string{"spawnkit", "KubeSpawner"}
	counts := map[string]map[string]int{} // side, kind
	examples := map[string]map[string][]failedStart{}
	var kinds []string
	seen := map[string]bool{}
	for _, side := range sides {
		counts[side], examples[side] = map[string]int{}, map[string][]failedStart{}
	}
	for _, r := range results {
		for _, f := range r.causes {
			k := f.cause.Kind
			if !seen[k] {
				seen[k] = true
				kinds = append(kinds, k)
			}
			counts[r.side][k]++
			if len(examples[r.side][k]) < causeExamples {
				examples[r.side][k] = append(examples[r.side][k], f)
			}
		}
	}
	fmt.Printf("\n### Why starts failed, as JupyterHub saw it (%s)\n\n", title)
	if len(kinds) == 0 {
		fmt.Println("No start failed on either side.")
		return
	}
	var b strings.Builder
	fmt.Fprintln(&b, "| cause | spawnkit | KubeSpawner 7.1 |")
	fmt.Fprintln(&b, "|---|---|---|")
	for _, k := range kinds {
		fmt.Fprintf(&b, "| %s | %d | %d |\n", k, counts["spawnkit"][k], counts["KubeSpawner"][k])
	}
	for _, side := range sides {
		for _, k := range kinds {
			ex := examples[side][k]
			if len(ex) == 0 {
				continue
			}
			fmt.Fprintf(&b, "\n%s, %s (%d):\n", side, k, counts[side][k])
			for _, f := range ex {
				from := f.cause.Source
				if from == "" {
					from = "nowhere"
				}
				fmt.Fprintf(&b, "  %s (from %s): %s\n", f.user, from, clipLine(f.cause.Message, 200))
			}
		}
	}
	fmt.Print(b.String())
}

// clipLine is s on one line, at most n bytes.
func clipLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
