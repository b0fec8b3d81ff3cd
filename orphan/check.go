package orphan

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// ErrInvalidOptions is wrapped by the errors of List, Cleanup and
// NewSweeper for options that cannot be meant: an unknown kind, a
// negative minimum age other than NoMinAge.
var ErrInvalidOptions = errors.New("orphan: invalid options")

// ErrEmptyKnown is wrapped by a sweep's error when the hub knows no
// servers at all and SweeperOptions.AllowEmptyKnown is not set: more
// likely a broken hub than an empty one, and every object would go.
var ErrEmptyKnown = errors.New("orphan: the known set is empty")

// ParseKind returns the Kind named s ("Pod", "PersistentVolumeClaim",
// ...; the lower-case forms "pod", "pvc", "secret", "service" and
// "namespace" are accepted too) or an error wrapping ErrInvalidOptions.
func ParseKind(s string) (Kind, error) {
	for _, k := range AllKinds {
		if s == string(k) {
			return k, nil
		}
	}
	switch s {
	case "pod", "pods":
		return KindPod, nil
	case "pvc", "pvcs", "persistentvolumeclaim", "persistentvolumeclaims":
		return KindPVC, nil
	case "secret", "secrets":
		return KindSecret, nil
	case "service", "services":
		return KindService, nil
	case "namespace", "namespaces":
		return KindNamespace, nil
	}
	return "", fmt.Errorf("%w: unknown kind %q; kinds: %v", ErrInvalidOptions, s, AllKinds)
}

func checkKinds(field string, kinds []Kind) error {
	for _, k := range kinds {
		if !slices.Contains(AllKinds, k) {
			return fmt.Errorf("%w: %s: unknown kind %q; kinds: %v", ErrInvalidOptions, field, k, AllKinds)
		}
	}
	return nil
}

func checkMinAge(d time.Duration) error {
	if d < 0 && d != NoMinAge {
		return fmt.Errorf("%w: CleanupOptions.MinAge %s is negative; use NoMinAge to turn the age check off", ErrInvalidOptions, d)
	}
	return nil
}
