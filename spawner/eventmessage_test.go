package spawner

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
)

func TestEventRulesAreChecked(t *testing.T) {
	for _, c := range []struct{ yaml, want string }{
		{"event_message_rules: [{match: \"(\", replace: x}]", "event_message_rules[0].match"},
		{"event_message_rules: [{match: a, replace: x, drop: true}]", "event_message_rules[0]"},
		{"event_message_rules: [{reason: Scheduled}]", "event_message_rules[0].replace"},
		{"event_message_rules: [{reson: Scheduled, drop: true}]", "reson"},
	} {
		if _, err := kubespawner.Load([]byte(c.yaml)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("kubespawner.Load(%s) = %v, want an error naming %s", c.yaml, err, c.want)
		}
	}
}

// TestProgressMessagesOperatorsShape: on the simulated cluster, the
// scheduler's event reaches the progress rewritten by the rules and the
// EventMessage hook, and a ModifyPod hook's own message is in it; a rule
// that drops the event leaves no trace of it.
func TestProgressMessagesOperatorsShape(t *testing.T) {
	for _, drop := range []bool{false, true} {
		ns := newNamespace(t)
		cfg := baseConfig(ns)
		if drop {
			cfg.EventMessageRules = []kubespawner.EventMessageRule{{Reason: "Scheduled", Drop: true}}
		} else {
			cfg.EventMessageRules = []kubespawner.EventMessageRule{{Reason: "Scheduled", Match: `to (\S+)$`, Replace: "Your server was placed on $1"}}
		}
		reg := sharedRegistry(t)
		s, err := New(naming.Server{Username: "ada"}, Options{Client: cluster.Client, Registry: reg, Config: cfg, Hooks: Hooks{
			ModifyPod: func(ctx context.Context, _ *Spawner, _ *corev1.Pod) error {
				if !ReportProgress(ctx, "Preparing your project volume") {
					t.Error("ReportProgress found no start in ModifyPod's ctx")
				}
				return nil
			},
			// The scheduler's event and kwok's readiness race; the
			// start shows the events it sees before the pod is ready.
			// Wait (here, before the wait for readiness) until the shared
			// informer the start reads holds the Scheduled event, so that
			// the test is of the rules, not of that race.
			AfterPodCreated: func(ctx context.Context, _ *Spawner, pod *corev1.Pod) error {
				events, err := reg.Events(ctx, pod.Namespace)
				if err != nil {
					return err
				}
				defer events.Release()
				return wait.PollUntilContextCancel(ctx, 20*time.Millisecond, true, func(ctx context.Context) (bool, error) {
					evs, err := events.ForUID(ctx, pod.UID)
					return err == nil && slices.ContainsFunc(evs, func(ev *corev1.Event) bool { return ev.Reason == "Scheduled" }), nil
				})
			},
			EventMessage: func(_ *Spawner, ev *corev1.Event, message string) (string, bool) {
				return message + " (" + ev.Reason + ")", true
			},
		}})
		if err != nil {
			t.Fatal(err)
		}
		ctx := ctxTimeout(t, 60*time.Second)
		stream := NewStream()
		opts := hubStart()
		opts.OnProgress = stream.Publish
		if _, err := s.Start(ctx, opts); err != nil {
			t.Fatal(err)
		}
		var messages []string
		for e := range stream.Events(ctx, 0) {
			messages = append(messages, e.Message)
		}
		all := strings.Join(messages, "\n")
		if !strings.Contains(all, "Preparing your project volume") {
			t.Errorf("drop=%v: the hook's message is missing:\n%s", drop, all)
		}
		if strings.Contains(all, "Successfully assigned") {
			t.Errorf("drop=%v: the scheduler's own message reached the progress:\n%s", drop, all)
		}
		placed := strings.Contains(all, "Your server was placed on ") && strings.Contains(all, " (Scheduled)")
		if placed == drop {
			t.Errorf("drop=%v: rewritten Scheduled event shown: %v\n%s", drop, placed, all)
		}
		if err := s.Stop(ctx, StopOptions{Now: true}); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	if ReportProgress(context.Background(), "x") {
		t.Error("ReportProgress reported to a ctx of no start")
	}
}
