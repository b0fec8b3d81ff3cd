package phase_test

import (
	"fmt"
	"time"

	"github.com/spawnkit/spawnkit/internal/phase"
	"github.com/spawnkit/spawnkit/reflector"
)

// A start's timeline says what the start waits for, and for how long,
// from what the start's subscription and events have shown it.
func ExampleTimeline_Now() {
	now := time.Unix(0, 0)
	tl := phase.NewTimeline(func() time.Time { return now })
	tl.Created("uid-1", "quay.io/x:1")
	now = now.Add(3 * time.Second)
	tl.Pod(&reflector.Pod{UID: "uid-1", NodeName: "n-3", Scheduled: reflector.PodCondition{Status: "True"}})
	now = now.Add(4 * time.Second)
	fmt.Println(tl.Now())
	// Output: Starting the containers on node n-3 for 4 s
}
