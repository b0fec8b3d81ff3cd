package kubespawner

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/spawnkit/spawnkit/naming"
)

// unavailablePVCName is what {pvc_name} renders as in
// secret_name_template: KubeSpawner computes the secret's name before the
// claim's, and _expand_user_properties fills a name not computed yet with
// "<name>_unavailable!".
const unavailablePVCName = "pvc_name_unavailable!"

// SecretUsesPVCName reports whether secret_name_template uses {pvc_name}.
// naming refuses such a template (the claim's name comes after the
// secret's); KubeSpawner renders it, and uses the secret only with
// internal SSL. So namingOptions hands naming the default secret template
// in its place, and Plan renders this one itself (secretName). A template
// that does not parse is left to naming to report.
func (c *Config) SecretUsesPVCName() bool {
	syntax := naming.KubeSpawner
	if c.TemplateSyntax == "go" {
		syntax = naming.Go
	}
	t, err := naming.Parse(c.SecretNameTemplate, syntax)
	return err == nil && slices.Contains(t.References(), "pvc_name")
}

// SecretName is the internal-SSL secret's name of a configuration whose
// secret_name_template uses {pvc_name}, as KubeSpawner renders it, from
// the fields at the secret's turn (f, the base names' fields), and its
// error where the API server would refuse it as a secret's name.
func (c *Config) SecretName(f naming.Fields) (string, error) {
	syntax := naming.KubeSpawner
	if c.TemplateSyntax == "go" {
		syntax = naming.Go
	}
	t, err := naming.Parse(c.SecretNameTemplate, syntax)
	if err != nil {
		return "", err
	}
	f.PVCName = unavailablePVCName
	name, err := t.Execute(f)
	if err != nil {
		return "", err
	}
	if reasons := validation.IsDNS1123Subdomain(name); len(reasons) > 0 {
		reasons = append(reasons, fmt.Sprintf("secret_name_template uses {pvc_name}, which KubeSpawner renders as %q there (it names the secret before the claim): internal SSL needs a secret_name_template without it", unavailablePVCName))
		return "", &naming.InvalidNameError{Field: "secret_name", Template: c.SecretNameTemplate, Value: name, Reasons: reasons}
	}
	return name, nil
}
