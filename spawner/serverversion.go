package spawner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"
)

// MinServerMinor is the oldest Kubernetes minor (1.MinServerMinor) spawnkit
// supports (internal/testcluster/versions.txt). spawnkit is not tested on
// older servers, and they differ in what it relies on: before 1.32, env
// var names outside C identifiers are refused unless the alpha
// RelaxedEnvironmentVariableValidation gate is turned on.
const MinServerMinor = 32

// ErrServerTooOld is wrapped by CheckServerVersion's error for a server
// older than 1.MinServerMinor.
var ErrServerTooOld = errors.New("Kubernetes API server older than spawnkit supports")

// CheckServerVersion asks the API server its version (discovery, GET
// /version) and returns it, or an error wrapping ErrServerTooOld that
// names the version and the minimum when it is older than
// 1.MinServerMinor. A version it cannot parse (a distribution's "1.33+")
// is read by its leading digits; one with no digits at all, or an
// unstamped v0.0.0 build, is accepted, since refusing a server spawnkit
// cannot date would be worse than trying it. The Manager calls this once in Start.
func CheckServerVersion(ctx context.Context, client kubernetes.Interface) (*version.Info, error) {
	info, err := serverVersion(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("reading the Kubernetes API server's version: %w", err)
	}
	major, minor, ok := parseMajorMinor(info)
	if ok && (major < 1 || major == 1 && minor < MinServerMinor) {
		return info, fmt.Errorf("%w: the API server is %s, spawnkit needs Kubernetes 1.%d or newer",
			ErrServerTooOld, describeVersion(info), MinServerMinor)
	}
	return info, nil
}

func serverVersion(ctx context.Context, client kubernetes.Interface) (*version.Info, error) {
	d := client.Discovery()
	// discovery's ServerVersion takes no context; its REST client does.
	// A fake clientset has none and answers ServerVersion from memory.
	if rc := d.RESTClient(); rc != nil {
		body, err := rc.Get().AbsPath("/version").Do(ctx).Raw()
		if err != nil {
			return nil, err
		}
		var info version.Info
		if err := json.Unmarshal(body, &info); err != nil {
			return nil, fmt.Errorf("decoding /version: %w", err)
		}
		return &info, nil
	}
	return d.ServerVersion()
}

func describeVersion(info *version.Info) string {
	if info.GitVersion != "" {
		return info.GitVersion
	}
	return info.Major + "." + info.Minor
}

// parseMajorMinor reads Major and Minor ("1", "33+"), falling back to
// GitVersion ("v1.33.2-gke.100").
func parseMajorMinor(info *version.Info) (major, minor int, ok bool) {
	if ma, okMa := leadingInt(info.Major); okMa {
		if mi, okMi := leadingInt(info.Minor); okMi {
			return ma, mi, true
		}
	}
	parts := strings.SplitN(strings.TrimPrefix(info.GitVersion, "v"), ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	ma, okMa := leadingInt(parts[0])
	mi, okMi := leadingInt(parts[1])
	// v0.0.0 is a binary built without version stamps (client-go's fake
	// discovery reports its own): undated, not old.
	return ma, mi, okMa && okMi && (ma != 0 || mi != 0)
}

func leadingInt(s string) (int, bool) {
	end := 0
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	n, err := strconv.Atoi(s[:end])
	return n, err == nil
}
