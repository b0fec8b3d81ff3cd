package testcluster

import (
	"bufio"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

//go:embed versions.env
var versionsEnv string

// Versions are the pinned versions of the control-plane binaries, read from
// versions.env (the file internal/tools/build.sh keys its cache on).
type Versions struct {
	Kubernetes string
	Etcd       string
	Kwok       string
}

// PinnedVersions returns the versions this package was built to run.
func PinnedVersions() Versions {
	v, err := parseVersions(versionsEnv)
	if err != nil {
		// versions.env is embedded at build time; a malformed one is a bug
		// caught by this package's own tests.
		panic(err)
	}
	return v
}

func parseVersions(text string) (Versions, error) {
	vals := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			return Versions{}, fmt.Errorf("versions.env: line %q is not KEY=VALUE", line)
		}
		vals[k] = v
	}
	v := Versions{Kubernetes: vals["K8S_VERSION"], Etcd: vals["ETCD_VERSION"], Kwok: vals["KWOK_VERSION"]}
	if v.Kubernetes == "" || v.Etcd == "" || v.Kwok == "" {
		return Versions{}, fmt.Errorf("versions.env: K8S_VERSION, ETCD_VERSION and KWOK_VERSION must all be set, got %+v", v)
	}
	return v, nil
}

// binaryNames are the executables a Lifecycle cluster runs; an API-level
// cluster needs only the first two.
var binaryNames = []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok"}

// DefaultBinDir is where internal/tools/build.sh puts the binaries for the
// pinned versions: $SPAWNKIT_TESTBIN_CACHE (default
// ${XDG_CACHE_HOME:-$HOME/.cache}/spawnkit/testbin) joined with a directory
// named after the versions. The two must agree; a test checks they do.
func DefaultBinDir() (string, error) {
	root := os.Getenv("SPAWNKIT_TESTBIN_CACHE")
	if root == "" {
		cache := os.Getenv("XDG_CACHE_HOME")
		if cache == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("locating the testbin cache: %w", err)
			}
			cache = filepath.Join(home, ".cache")
		}
		root = filepath.Join(cache, "spawnkit", "testbin")
	}
	v := PinnedVersions()
	return filepath.Join(root, fmt.Sprintf("k8s-%s-etcd-%s-kwok-%s", v.Kubernetes, v.Etcd, v.Kwok)), nil
}

// ErrBinariesMissing is returned by Start when a control-plane binary is
// not in the binary directory.
var ErrBinariesMissing = errors.New("control-plane binaries missing")

// resolveBinDir picks the binary directory (Options.BinDir, then
// $SPAWNKIT_TESTBIN, then $KUBEBUILDER_ASSETS, then DefaultBinDir) and
// checks that the binaries the level needs are there.
func resolveBinDir(dir string, level Level) (string, error) {
	for _, candidate := range []string{dir, os.Getenv("SPAWNKIT_TESTBIN"), os.Getenv("KUBEBUILDER_ASSETS")} {
		if candidate != "" {
			dir = candidate
			break
		}
	}
	if dir == "" {
		var err error
		if dir, err = DefaultBinDir(); err != nil {
			return "", err
		}
	}
	need := binaryNames[:2]
	if level == Lifecycle {
		need = binaryNames
	}
	var missing []string
	for _, name := range need {
		if info, err := os.Stat(filepath.Join(dir, name)); err != nil || info.Mode()&0o111 == 0 {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("%w: %s not found in %s; run `make testbin` to build them from the Go module proxy",
			ErrBinariesMissing, strings.Join(missing, ", "), dir)
	}
	return dir, nil
}
