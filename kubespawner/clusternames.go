package kubespawner

import (
	"encoding/json"
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// ClusterNames are cluster names in order of preference: the option
// kubernetes_cluster, written as one name ("gpu-eu") or a list of them
// (["gpu-eu", "cpu-eu"]), and marshalled as a list.
type ClusterNames []string

// UnmarshalJSON takes a string or a list of strings; null leaves the
// names as they are, as for any option.
func (c *ClusterNames) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		return nil
	}
	var one string
	if err := json.Unmarshal(data, &one); err == nil {
		*c = ClusterNames{one}
		return nil
	}
	var list []string
	if err := json.Unmarshal(data, &list); err != nil {
		return fmt.Errorf("kubernetes_cluster: want a cluster name or a list of them, not %s", data)
	}
	*c = list
	return nil
}

// check checks the names as the option's: each a DNS-1123 label (what
// Options.Cluster takes), none twice.
func (c ClusterNames) check() field.ErrorList {
	var errs field.ErrorList
	for i, name := range c {
		p := field.NewPath("kubernetes_cluster").Index(i)
		if name == "" {
			errs = append(errs, field.Required(p, "a cluster name"))
			continue
		}
		for _, msg := range validation.IsDNS1123Label(name) {
			errs = append(errs, field.Invalid(p, name, msg))
		}
		if slices.Contains(c[:i], name) {
			errs = append(errs, field.Duplicate(p, name))
		}
	}
	return errs
}
