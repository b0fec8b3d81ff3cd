package leader_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/spawnkit/spawnkit/internal/leader"
	"github.com/spawnkit/spawnkit/internal/testcluster"
)

// TestUnusableLease: a Lease that cannot be used is an error from Check
// and from Run (not a standby), naming the verb, the Lease and what to
// do; a user granted exactly get, create and update leads.
func TestUnusableLease(t *testing.T) {
	testcluster.Require(t, cluster)
	t.Parallel()
	ns := newNamespace(t)
	grant(t, ns, "lease-get", rbacv1.Subject{Kind: rbacv1.GroupKind, Name: "lease-readers"}, "get")
	grant(t, ns, "lease-elect", rbacv1.Subject{Kind: rbacv1.UserKind, Name: "leader-elector"}, "get", "create", "update")
	waitAccess(t, ns, "leader-reader", []string{"lease-readers"}, "get", true)
	for _, verb := range []string{"get", "create", "update"} {
		waitAccess(t, ns, "leader-elector", nil, verb, true)
	}
	now := metav1.NewMicroTime(time.Now())
	if _, err := cluster.Client.CoordinationV1().Leases(ns).Create(t.Context(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: "held"},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("other"), LeaseDurationSeconds: ptr.To[int32](3600), RenewTime: &now},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nobody := userClient(t, "leader-nobody", "tenants")
	reader := userClient(t, "leader-reader", "tenants", "lease-readers")
	elector := userClient(t, "leader-elector", "tenants")

	for _, tc := range []struct {
		name      string
		client    kubernetes.Interface
		ns, lease string
		verb      string
		hint      string
		is        func(error) bool
	}{
		{"namespace does not exist", cluster.Client, "leader-no-such-namespace", "l", "create", `create namespace "leader-no-such-namespace"`, apierrors.IsNotFound},
		{"nothing granted", nobody, ns, "fresh", "get", "grant this replica's user get, create and update", apierrors.IsForbidden},
		{"get only, no Lease", reader, ns, "fresh", "create", "grant this replica's user get, create and update", apierrors.IsForbidden},
		{"get only, Lease exists", reader, ns, "held", "update", "grant this replica's user get, create and update", apierrors.IsForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := fast(tc.client, tc.ns, tc.lease, "a")
			check := func(what string, err error) {
				t.Helper()
				if err == nil {
					t.Fatalf("%s: no error", what)
				}
				for _, want := range []string{"cannot " + tc.verb + " ", "leases.coordination.k8s.io", fmt.Sprintf("%q", tc.lease), fmt.Sprintf("namespace %q", tc.ns), tc.hint} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("%s: error %q does not say %q", what, err, want)
					}
				}
				if !tc.is(err) {
					t.Errorf("%s: error %q does not wrap the API error", what, err)
				}
			}
			check("Check", leader.Check(t.Context(), cfg))
			// A Run that stood by would return nil when this ends.
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			check("Run", leader.Run(ctx, cfg, func(context.Context) { t.Error("lead called") }))
		})
	}

	t.Run("get, create and update granted", func(t *testing.T) {
		cfg := fast(elector, ns, "elected", "a")
		if err := leader.Check(t.Context(), cfg); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		led := make(chan struct{})
		r := startRun(t, ctx, cfg, func(ctx context.Context) {
			close(led)
			<-ctx.Done()
		})
		receive(t, "the elector to lead", led, 20*time.Second)
		cancel()
		if err := r.wait(t); err != nil {
			t.Fatal(err)
		}
		lease, err := cluster.Client.CoordinationV1().Leases(ns).Get(t.Context(), "elected", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if h := ptr.Deref(lease.Spec.HolderIdentity, ""); h != "" {
			t.Errorf("holder after shutdown = %q, want the Lease given back", h)
		}
	})
}

// TestInvalidConfig: a Config that cannot work is an error naming the
// field, from Check and from Run, before any API call (the client's
// server does not exist).
func TestInvalidConfig(t *testing.T) {
	client, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	valid := leader.Config{Client: client, Namespace: "ns", Name: "l", Identity: "a"}
	for _, tc := range []struct {
		name   string
		change func(*leader.Config)
		want   string
	}{
		{"nil Client", func(c *leader.Config) { c.Client = nil }, "Client is required"},
		{"no Namespace", func(c *leader.Config) { c.Namespace = "" }, "Namespace is required"},
		{"no Name", func(c *leader.Config) { c.Name = "" }, "Name is required"},
		{"no Identity", func(c *leader.Config) { c.Identity = "" }, "Identity is required"},
		{"LeaseDuration not above RenewDeadline", func(c *leader.Config) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 2*time.Second, 2*time.Second, 250*time.Millisecond
		}, "LeaseDuration (2s) must be greater than RenewDeadline (2s)"},
		{"LeaseDuration below the default RenewDeadline", func(c *leader.Config) { c.LeaseDuration = 5 * time.Second },
			"LeaseDuration (5s) must be greater than RenewDeadline (10s)"},
		{"RenewDeadline within RetryPeriod's jitter", func(c *leader.Config) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 2*time.Second, time.Second, time.Second
		}, "RenewDeadline (1s) must be greater than RetryPeriod × 1.2 (1.2s)"},
		{"LeaseDuration under a second", func(c *leader.Config) {
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod = 900*time.Millisecond, 600*time.Millisecond, 100*time.Millisecond
		}, "LeaseDuration is 900ms, must be at least 1s"},
		{"negative RetryPeriod", func(c *leader.Config) { c.RetryPeriod = -time.Second }, "RetryPeriod is -1s, must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := valid
			tc.change(&cfg)
			for what, err := range map[string]error{
				"Check": leader.Check(t.Context(), cfg),
				"Run":   leader.Run(t.Context(), cfg, func(context.Context) { t.Error("lead called") }),
			} {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("%s: error %v, want one saying %q", what, err, tc.want)
				}
			}
		})
	}
	t.Run("nil lead", func(t *testing.T) {
		if err := leader.Run(t.Context(), valid, nil); err == nil || !strings.Contains(err.Error(), "lead function") {
			t.Errorf("error %v, want one about the lead function", err)
		}
	})
	t.Run("defaults", func(t *testing.T) {
		// Valid: Check gets as far as the API call, which fails.
		err := leader.Check(t.Context(), valid)
		if err == nil || strings.Contains(err.Error(), "invalid Config") || !strings.Contains(err.Error(), "cannot get ") {
			t.Errorf("error %v, want a failed get", err)
		}
	})
}
