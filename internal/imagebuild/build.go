package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/spawnkit/spawnkit/spawner"
)

const (
	defaultPackage = "./cmd/spawnkit-service"
	// defaultRepo is the name deploy/deployment.yaml and docs/z2jh.md use;
	// test/e2e/service/deploy_test.go holds them to it.
	defaultRepo = "ghcr.io/spawnkit/spawnkit-service"
	sourceURL   = "https://github.com/spawnkit/spawnkit"
	license     = "Apache-2.0" // LICENSE

	// binaryPath is the entrypoint, at the root as in the distroless image
	// this replaces.
	binaryPath = "/spawnkit-service"
	// caPath is where Go's crypto/x509 looks first on Linux; SSL_CERT_FILE
	// names it too, for anything that does not.
	caPath = "/etc/ssl/certs/ca-certificates.crt"
	// nonroot is distroless' non-root user and group, which the
	// Deployment's securityContext names.
	nonroot = 65532

	// refNameAnnotation names the layout's one entry; skopeo's oci:DIR:TAG
	// looks it up.
	refNameAnnotation = "org.opencontainers.image.ref.name"
)

// options is one build; main fills it from flags.
type options struct {
	dir       string // module root: where `go build` runs
	pkg       string // the command to build
	goCmd     string // the go command
	platforms []v1.Platform
	repo      string    // the tarball's repository
	revision  string    // org.opencontainers.image.revision; omitted when ""
	created   time.Time // every timestamp in the image
	stderr    io.Writer // go build's output; nil discards it
}

// built is one build's images, in the order of options.platforms.
type built struct {
	tag    string // "v" + spawner.Version
	labels map[string]string
	images []platformImage
}

type platformImage struct {
	platform v1.Platform
	image    v1.Image
}

// parsePlatforms reads -platforms. Only linux on amd64 and arm64: the
// architectures whose micro-architecture level build pins.
func parsePlatforms(s string) ([]v1.Platform, error) {
	var ps []v1.Platform
	for _, f := range strings.Split(s, ",") {
		p, err := v1.ParsePlatform(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("platform %q: %w", f, err)
		}
		if p.OS != "linux" || (p.Architecture != "amd64" && p.Architecture != "arm64") || p.Variant != "" {
			return nil, fmt.Errorf("platform %q: want linux/amd64 or linux/arm64", f)
		}
		if slices.ContainsFunc(ps, func(q v1.Platform) bool { return q.Equals(*p) }) {
			return nil, fmt.Errorf("platform %q given twice", f)
		}
		ps = append(ps, *p)
	}
	return ps, nil
}

// build compiles the binary for each platform and assembles its image in
// memory; nothing is written but go build's cache.
func build(ctx context.Context, o options) (*built, error) {
	if len(o.platforms) == 0 {
		return nil, errors.New("no platform")
	}
	b := &built{tag: "v" + spawner.Version, labels: labels(o)}
	base, err := baseLayer(o.created)
	if err != nil {
		return nil, fmt.Errorf("base layer: %w", err)
	}
	goVersion, err := goEnv(ctx, o, "GOVERSION")
	if err != nil {
		return nil, err
	}
	for _, p := range o.platforms {
		bin, buildCmd, err := goBuild(ctx, o, p)
		if err != nil {
			return nil, err
		}
		binary, err := binaryLayer(bin, o.created)
		if err != nil {
			return nil, fmt.Errorf("binary layer (%s): %w", p, err)
		}
		img, err := assemble(o, p, b.labels, []mutate.Addendum{
			{Layer: base, MediaType: types.OCILayer, History: v1.History{
				Created:   v1.Time{Time: o.created},
				CreatedBy: "imagebuild: /etc/passwd, /etc/group (nonroot 65532), /home/nonroot, /tmp, " + caPath,
				Comment:   "CA bundle: golang.org/x/crypto/x509roots/fallback " + moduleVersion("golang.org/x/crypto/x509roots/fallback"),
			}},
			{Layer: binary, MediaType: types.OCILayer, History: v1.History{
				Created:   v1.Time{Time: o.created},
				CreatedBy: goVersion + " " + buildCmd,
			}},
		})
		if err != nil {
			return nil, fmt.Errorf("image (%s): %w", p, err)
		}
		b.images = append(b.images, platformImage{platform: p, image: img})
	}
	return b, nil
}

// labels are the image's OCI labels, also its manifest's annotations
// (which registries such as GHCR show).
func labels(o options) map[string]string {
	l := map[string]string{
		"org.opencontainers.image.title":    "spawnkit-service",
		"org.opencontainers.image.source":   sourceURL,
		"org.opencontainers.image.url":      sourceURL,
		"org.opencontainers.image.version":  spawner.Version,
		"org.opencontainers.image.licenses": license,
		"org.opencontainers.image.created":  o.created.Format(time.RFC3339),
	}
	if o.revision != "" {
		l["org.opencontainers.image.revision"] = o.revision
	}
	return l
}

func assemble(o options, p v1.Platform, labels map[string]string, layers []mutate.Addendum) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.ConfigFile(img, &v1.ConfigFile{
		Architecture: p.Architecture,
		OS:           p.OS,
		Created:      v1.Time{Time: o.created},
		Config: v1.Config{
			Entrypoint: []string{binaryPath},
			User:       fmt.Sprintf("%d:%d", nonroot, nonroot),
			Env:        []string{"SSL_CERT_FILE=" + caPath},
			WorkingDir: "/",
			Labels:     labels,
		},
		RootFS: v1.RootFS{Type: "layers"},
	})
	if err != nil {
		return nil, err
	}
	if img, err = mutate.Append(img, layers...); err != nil {
		return nil, err
	}
	return mutate.Annotations(img, labels).(v1.Image), nil
}

// goBuild builds the static binary for p and returns it with the command
// line, for the layer's history.
func goBuild(ctx context.Context, o options, p v1.Platform) ([]byte, string, error) {
	tmp, err := os.MkdirTemp("", "imagebuild-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(tmp)
	out := filepath.Join(tmp, "spawnkit-service")
	args := []string{"build", "-trimpath", "-buildvcs=false", "-mod=readonly", "-ldflags=-s -w", "-o", out, o.pkg}
	cmd := exec.CommandContext(ctx, o.goCmd, args...)
	cmd.Dir = o.dir
	cmd.Env = goBuildEnv(p)
	var msg bytes.Buffer
	cmd.Stdout, cmd.Stderr = &msg, &msg
	if err := cmd.Run(); err != nil {
		return nil, "", fmt.Errorf("go build %s for %s: %w\n%s", o.pkg, p, err, msg.String())
	}
	if o.stderr != nil {
		io.Copy(o.stderr, &msg)
	}
	bin, err := os.ReadFile(out)
	if err != nil {
		return nil, "", err
	}
	// The history shows the command without its temporary -o.
	line := strings.Join(pinned(p), " ") + " go " + strings.Join(slices.Delete(slices.Clone(args), 5, 7), " ")
	return bin, line, nil
}

// pinned are the variables build sets for every platform's go build, so
// the caller's environment cannot change the binary: a cgo build or a
// higher GOAMD64 would not run everywhere the platform promises, and
// GOFLAGS could add -race or a build tag.
func pinned(p v1.Platform) []string {
	env := []string{"CGO_ENABLED=0", "GOOS=" + p.OS, "GOARCH=" + p.Architecture, "GOFLAGS="}
	switch p.Architecture {
	case "amd64":
		env = append(env, "GOAMD64=v1")
	case "arm64":
		env = append(env, "GOARM64=v8.0")
	}
	return env
}

// goBuildEnv is the caller's environment (GOPROXY, GOCACHE, HOME) without
// what pinned sets, then pinned.
func goBuildEnv(p v1.Platform) []string {
	pin := pinned(p)
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.ContainsFunc(pin, func(pv string) bool { return strings.HasPrefix(pv, k+"=") }) ||
			k == "GOAMD64" || k == "GOARM64"
	})
	return append(env, pin...)
}

// goEnv is one `go env` value under the same go command.
func goEnv(ctx context.Context, o options, key string) (string, error) {
	cmd := exec.CommandContext(ctx, o.goCmd, "env", key)
	cmd.Dir = o.dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", key, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// moduleVersion is the version of a module linked into this program, as
// go.mod chose it.
func moduleVersion(path string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, d := range info.Deps {
			if d.Path == path {
				if d.Replace != nil {
					return d.Replace.Version
				}
				return d.Version
			}
		}
	}
	return "(unknown version)"
}

// index is the image of a single platform, or an OCI image index of every
// platform's image.
func (b *built) index() (mutate.Appendable, error) {
	if len(b.images) == 1 {
		return b.images[0].image, nil
	}
	var adds []mutate.IndexAddendum
	for _, p := range b.images {
		adds = append(adds, mutate.IndexAddendum{Add: p.image, Descriptor: v1.Descriptor{Platform: &p.platform}})
	}
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), adds...)
	return mutate.Annotations(idx, b.labels).(v1.ImageIndex), nil
}

// writeLayout replaces dir with an OCI image layout holding the image (or
// index) under the tag, and returns its digest: what `crane push` pushes.
// A dir that exists but is not an OCI layout is refused, never removed.
func (b *built) writeLayout(dir string) (v1.Hash, error) {
	if err := replaceable(dir); err != nil {
		return v1.Hash{}, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return v1.Hash{}, err
	}
	l, err := layout.Write(dir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	a, err := b.index()
	if err != nil {
		return v1.Hash{}, err
	}
	// The entry is written by hand: AppendImage would give it an
	// artifactType (the config's media type), which marks an artifact,
	// not an image.
	desc := v1.Descriptor{Annotations: map[string]string{refNameAnnotation: b.tag}}
	switch a := a.(type) {
	case v1.Image:
		err = l.WriteImage(a)
		desc.Platform = &b.images[0].platform
	case v1.ImageIndex:
		err = l.WriteIndex(a)
	}
	if err != nil {
		return v1.Hash{}, fmt.Errorf("write %s: %w", dir, err)
	}
	if desc.MediaType, err = a.MediaType(); err != nil {
		return v1.Hash{}, err
	}
	if desc.Size, err = a.Size(); err != nil {
		return v1.Hash{}, err
	}
	if desc.Digest, err = a.Digest(); err != nil {
		return v1.Hash{}, err
	}
	if err := l.AppendDescriptor(desc); err != nil {
		return v1.Hash{}, fmt.Errorf("write %s: %w", dir, err)
	}
	return desc.Digest, nil
}

// replaceable is nil when dir is absent, empty or an OCI layout.
func replaceable(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(entries) == 0) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return fmt.Errorf("%s exists and is not an OCI layout (no oci-layout file): remove it or choose another -layout", dir)
	}
	return nil
}

// writeTarball writes the single platform's image as a docker-archive
// tagged repo:tag, through a temporary file so a failed write leaves no
// partial tarball under the name.
func (b *built) writeTarball(path, repo string) error {
	if len(b.images) != 1 {
		return fmt.Errorf("-tar holds one platform, %d were built: use -layout for several", len(b.images))
	}
	tag, err := name.NewTag(repo + ":" + b.tag)
	if err != nil {
		return fmt.Errorf("-repo %q: %w", repo, err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, b.images[0].image); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}
