package kubespawner

import "fmt"

// Bounds on what a start takes from its caller. A start is planned
// (Plan, and the manager's Spawn before it accepts the start) against
// them, so input that could never make a valid pod, or that would make
// the server's state record (naming.AnnotationState, which holds every user
// option) too big for the pod, is refused before anything is created.
const (
	// MaxUserOptions is the most user options a start takes.
	MaxUserOptions = 64
	// MaxUserOptionKeyBytes and MaxUserOptionValueBytes bound one user
	// option (a profile slug, a choice, an unlisted value).
	MaxUserOptionKeyBytes   = 256
	MaxUserOptionValueBytes = 4096
	// MaxEnv is the most environment variables a start's caller gives
	// (StartOptions.Env); JupyterHub gives about twenty.
	MaxEnv = 512
	// MaxEnvValueBytes bounds one such value.
	MaxEnvValueBytes = 128 << 10
	// MaxStateBytes bounds the state record a pod carries.
	MaxStateBytes = 64 << 10
)

// LimitError is input beyond one of the bounds above, refused before the
// start creates anything.
type LimitError struct {
	// Limit names the bound (the constant's name), Field the input.
	Limit, Field string
	Got, Max     int
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("kubespawner: %s is %d, over the limit of %d (%s)", e.Field, e.Got, e.Max, e.Limit)
}
