package manager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/spawnkit/spawnkit/kubespawner"
	"github.com/spawnkit/spawnkit/naming"
	"github.com/spawnkit/spawnkit/spawner"
)

// PlacementRequest is what Options.Placement decides a start's clusters
// from.
type PlacementRequest struct {
	Server  naming.Server
	Options SpawnOptions
	// Profile are the clusters the resolved profile names
	// (kubernetes_cluster), in order; empty when it names none.
	Profile []string
	// Previous is the cluster the server last ran in ("" when unknown):
	// its claim, and with it the user's files, is there.
	Previous string
	// Clusters are every cluster's health now, the default first.
	Clusters []ClusterHealth
}

// place picks the cluster of a start of s: from Placement, else the
// resolved profile's kubernetes_cluster, else the cluster it last ran in
// (prev, nil when unknown), else the default; the first of those that is
// available. Without several clusters (and without kubernetes_cluster)
// it is the one cluster, at no cost.
func (m *Manager) place(ctx context.Context, s naming.Server, opts SpawnOptions, prev *cell) (*cell, error) {
	var profile []string
	if m.multi || m.configNamesClusters() || opts.Config != nil {
		base := m.cfg
		switch {
		case opts.Config != nil:
			base = *opts.Config
		case prev != nil:
			base = prev.cfg
		}
		cfg, err := base.ResolveWith(ctx, opts.UserOptions, opts.Attributes)
		if err != nil {
			return nil, &spawner.StartError{Server: s, Step: spawner.StepPlan, Reason: spawner.ReasonInvalid, Err: err}
		}
		profile = cfg.KubernetesCluster
	}
	var names []string
	switch {
	case m.opts.Placement != nil:
		req := PlacementRequest{Server: s, Options: opts, Profile: slices.Clone(profile), Clusters: m.clusterHealth()}
		if prev != nil {
			req.Previous = prev.name
		}
		var err error
		if names, err = m.opts.Placement(ctx, req); err != nil {
			return nil, fmt.Errorf("manager: placing server %q of user %q: %w", s.Servername, s.Username, err)
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("manager: placing server %q of user %q: Placement named no cluster", s.Servername, s.Username)
		}
		if len(profile) > 0 {
			// The profile is the operator's rule; Placement picks within it.
			for _, n := range names {
				if !slices.Contains(profile, n) {
					return nil, &spawner.StartError{Server: s, Step: spawner.StepPlan, Reason: spawner.ReasonInvalid,
						Err: fmt.Errorf("manager: Placement put the server in cluster %q, but its profile allows only %s (kubernetes_cluster)", n, strings.Join(profile, ", "))}
				}
			}
		}
	case len(profile) > 0:
		names = profile
	case prev != nil && !prev.retired:
		names = []string{prev.name}
	default:
		names = []string{m.cells[0].name}
	}
	// Every name is checked before one is picked: a misspelt fallback
	// must not hide until the first cluster is down, the moment it was
	// written for.
	cells := make([]*cell, len(names))
	for i, n := range names {
		c, err := m.cellNamed(n)
		if err == nil && c.retired {
			err = fmt.Errorf("%w: cluster %q is retired: no start goes there", ErrNoSuchCluster, n)
		}
		if err != nil {
			return nil, &spawner.StartError{Server: s, Step: spawner.StepPlan, Reason: spawner.ReasonInvalid, Err: err}
		}
		cells[i] = c
	}
	var unavailable []error
	for _, c := range cells {
		if err := c.unavailableErr(); err != nil {
			unavailable = append(unavailable, err)
			continue
		}
		return c, nil
	}
	return nil, fmt.Errorf("manager: server %q of user %q cannot start: %w", s.Servername, s.Username, errors.Join(unavailable...))
}

// configNamesClusters reports whether a one-cluster Manager's
// configuration could name a cluster (kubernetes_cluster in its base or
// a profile): a start then resolves it, so that a name other than the
// one cluster's is an error rather than ignored.
func (m *Manager) configNamesClusters() bool {
	return len(m.cfg.KubernetesCluster) > 0 || len(m.cfg.ProfileList) > 0 && profilesName(m.cfg.ProfileList) || m.cfg.ProfileListFunc != nil
}

// profilesName reports whether any profile or choice overrides
// kubernetes_cluster.
func profilesName(ps []kubespawner.Profile) bool {
	named := false
	eachClusterOverride(ps, func(string, any) { named = true })
	return named
}

// eachClusterOverride calls f with each kubernetes_cluster override of a
// profile list (where, and its value).
func eachClusterOverride(ps []kubespawner.Profile, f func(where string, v any)) {
	for _, p := range ps {
		where := fmt.Sprintf("profile %q", p.Slug)
		if p.Slug == "" {
			where = fmt.Sprintf("profile %q", p.DisplayName)
		}
		if v, ok := p.KubeSpawnerOverride["kubernetes_cluster"]; ok {
			f(where, v)
		}
		for _, o := range p.ProfileOptions {
			for _, ch := range o.Choices {
				if v, ok := ch.KubeSpawnerOverride["kubernetes_cluster"]; ok {
					f(fmt.Sprintf("%s, option %q, choice %q", where, o.Name, ch.Key), v)
				}
			}
			if u := o.UnlistedChoice; u != nil {
				if v, ok := u.KubeSpawnerOverride["kubernetes_cluster"]; ok {
					f(fmt.Sprintf("%s, option %q, unlisted choice", where, o.Name), v)
				}
			}
		}
	}
}

// checkClusterNames refuses, at New, a configuration whose
// kubernetes_cluster (its base's, or a listed profile's or choice's)
// names a cluster the Manager does not have: every start of it would be
// refused, and a misspelt fallback would hide until the first choice is
// down. A value that is not a list of names is left to the start, which
// refuses it naming the option, as it does every override's value; so
// are the profiles of a ProfileListFunc, which exist only per start.
func (m *Manager) checkClusterNames() error {
	check := func(cluster, where string, names []string) error {
		for _, n := range names {
			if len(validation.IsDNS1123Label(n)) > 0 {
				continue // not a name: the start refuses the value
			}
			c, err := m.cellNamed(n)
			if err == nil && c.retired {
				err = fmt.Errorf("cluster %q is retired (no start goes there): name a cluster that takes starts", n)
			}
			if err != nil {
				if cluster != "" {
					where = fmt.Sprintf("cluster %q's configuration, %s", cluster, where)
				}
				return fmt.Errorf("manager: %s: kubernetes_cluster %q: %w", where, n, err)
			}
		}
		return nil
	}
	for _, c := range m.cells {
		if err := check(c.name, "base", c.cfg.KubernetesCluster); err != nil {
			return err
		}
		var err error
		eachClusterOverride(c.cfg.ProfileList, func(where string, v any) {
			if err != nil {
				return
			}
			raw, jerr := json.Marshal(v)
			var names kubespawner.ClusterNames
			if jerr != nil || names.UnmarshalJSON(raw) != nil {
				return
			}
			err = check(c.name, where, names)
		})
		if err != nil {
			return err
		}
		if !m.multi {
			break
		}
	}
	return nil
}
