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

//go:embed versions.txt
var versionsTable string

// Versions are the versions of one set of control-plane binaries: a row of
// versions.txt, the table internal/tools/build.sh keys its cache on.
type Versions struct {
	Minor      string // "1.32"
	Kubernetes string // "v1.32.13"
	Etcd       string
	Kwok       string
}

// SupportedVersions returns every row of versions.txt, oldest minor first.
func SupportedVersions() []Versions {
	rows, err := parseVersions(versionsTable)
	if err != nil {
		// versions.txt is embedded at build time; a malformed one is a bug
		// caught by this package's own tests.
		panic(err)
	}
	return rows
}

// SelectedVersions returns the row $SPAWNKIT_K8S names ("1.34"; a leading
// "v" is allowed), or the newest row when it is unset. An unknown minor is
// an error that lists the supported ones.
func SelectedVersions() (Versions, error) {
	return selectVersions(SupportedVersions(), os.Getenv("SPAWNKIT_K8S"))
}

// PinnedVersions is SelectedVersions for callers that cannot go on without
// a row; it panics on an unknown $SPAWNKIT_K8S.
func PinnedVersions() Versions {
	v, err := SelectedVersions()
	if err != nil {
		panic(err)
	}
	return v
}

func selectVersions(rows []Versions, minor string) (Versions, error) {
	minor = strings.TrimPrefix(strings.TrimSpace(minor), "v")
	if minor == "" {
		return rows[len(rows)-1], nil
	}
	var have []string
	for _, r := range rows {
		if r.Minor == minor {
			return r, nil
		}
		have = append(have, r.Minor)
	}
	return Versions{}, fmt.Errorf("SPAWNKIT_K8S=%s is not a supported Kubernetes minor (internal/testcluster/versions.txt has %s)",
		minor, strings.Join(have, ", "))
}

func parseVersions(text string) ([]Versions, error) {
	var rows []Versions
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 4 {
			return nil, fmt.Errorf("versions.txt: line %q is not: minor kubernetes etcd kwok", line)
		}
		v := Versions{Minor: f[0], Kubernetes: f[1], Etcd: f[2], Kwok: f[3]}
		if !strings.HasPrefix(v.Kubernetes, "v"+v.Minor+".") {
			return nil, fmt.Errorf("versions.txt: Kubernetes %s is not a %s release", v.Kubernetes, v.Minor)
		}
		if len(rows) > 0 && compareMinor(rows[len(rows)-1].Minor, v.Minor) >= 0 {
			return nil, fmt.Errorf("versions.txt: minor %s after %s; rows go oldest first", v.Minor, rows[len(rows)-1].Minor)
		}
		rows = append(rows, v)
	}
	if len(rows) == 0 {
		return nil, errors.New("versions.txt: no rows")
	}
	return rows, nil
}

// compareMinor orders "1.9" before "1.10".
func compareMinor(a, b string) int {
	var am, an, bm, bn int
	fmt.Sscanf(a, "%d.%d", &am, &an)
	fmt.Sscanf(b, "%d.%d", &bm, &bn)
	if am != bm {
		return am - bm
	}
	return an - bn
}

// BinDirFor is where internal/tools/build.sh puts the binaries of v:
// $SPAWNKIT_TESTBIN_CACHE (default
// ${XDG_CACHE_HOME:-$HOME/.cache}/spawnkit/testbin) joined with a directory
// named after the versions. The two must agree; a test checks they do.
func BinDirFor(v Versions) (string, error) {
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
	return filepath.Join(root, fmt.Sprintf("k8s-%s-etcd-%s-kwok-%s", v.Kubernetes, v.Etcd, v.Kwok)), nil
}

// DefaultBinDir is BinDirFor the selected versions ($SPAWNKIT_K8S, else
// the newest).
func DefaultBinDir() (string, error) {
	v, err := SelectedVersions()
	if err != nil {
		return "", err
	}
	return BinDirFor(v)
}

// binaryNames are the executables a Lifecycle cluster runs; an API-level
// cluster needs only the first two.
var binaryNames = []string{"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kwok"}

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
