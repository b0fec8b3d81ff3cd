package main

import (
	"archive/tar"
	"bytes"
	"crypto/x509"
	"debug/elf"
	"encoding/json"
	"encoding/pem"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"go.uber.org/goleak"
	"golang.org/x/crypto/x509roots/fallback/bundle"

	"github.com/spawnkit/spawnkit/spawner"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// moduleRoot is the module's root from this package's directory.
const moduleRoot = "../.."

// testCreated stands for SOURCE_DATE_EPOCH in the tests.
var testCreated = time.Unix(1765000000, 0).UTC()

func testOptions(platforms ...v1.Platform) options {
	return options{
		dir:       moduleRoot,
		pkg:       defaultPackage,
		goCmd:     "go",
		platforms: platforms,
		repo:      defaultRepo,
		revision:  "0123456789abcdef0123456789abcdef01234567",
		created:   testCreated,
	}
}

// hostPlatform is the platform whose binary this machine can run.
func hostPlatform(t *testing.T) v1.Platform {
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		t.Skipf("the image's binary runs on linux/amd64 or linux/arm64, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	return v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
}

// output is one build written as make image writes it.
type output struct {
	layoutDir, tarPath string
	digest             v1.Hash // the layout's entry: what crane push pushes
	b                  *built
}

func buildAndWrite(t *testing.T, o options) output {
	t.Helper()
	start := time.Now()
	b, err := build(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	out := output{layoutDir: filepath.Join(dir, "spawnkit-service"), b: b}
	if out.digest, err = b.writeLayout(out.layoutDir); err != nil {
		t.Fatal(err)
	}
	if len(o.platforms) == 1 {
		out.tarPath = filepath.Join(dir, "spawnkit-service.tar")
		if err := b.writeTarball(out.tarPath, o.repo); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("built %v in %s: %s", o.platforms, time.Since(start).Round(time.Millisecond), out.digest)
	return out
}

// TestImage builds the host platform's image as `make image` does, twice,
// and checks what a registry and a kubelet would see: the same digests
// both times, the config the Deployment relies on, the files, and the
// binary, taken out of the layers and run.
func TestImage(t *testing.T) {
	p := hostPlatform(t)
	first := buildAndWrite(t, testOptions(p))
	img := first.b.images[0].image

	t.Run("reproducible", func(t *testing.T) {
		second := buildAndWrite(t, testOptions(p))
		if first.digest != second.digest {
			t.Errorf("digests differ: %s, then %s", first.digest, second.digest)
		}
		if a, b := treeDigest(t, first.layoutDir), treeDigest(t, second.layoutDir); !maps.Equal(a, b) {
			t.Errorf("layouts differ:\n%v\n%v", a, b)
		}
		if a, b := fileBytes(t, first.tarPath), fileBytes(t, second.tarPath); !bytes.Equal(a, b) {
			t.Errorf("tarballs differ (%d and %d bytes)", len(a), len(b))
		}
		size := 0
		for _, s := range treeDigest(t, first.layoutDir) {
			size += s.size
		}
		t.Logf("layout %d bytes, tarball %d bytes", size, len(fileBytes(t, first.tarPath)))
	})

	t.Run("config", func(t *testing.T) {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cf.Config
		if !slices.Equal(c.Entrypoint, []string{"/spawnkit-service"}) || len(c.Cmd) != 0 {
			t.Errorf("entrypoint %q, cmd %q: want [/spawnkit-service] and none", c.Entrypoint, c.Cmd)
		}
		// deploy/deployment.yaml: runAsNonRoot, runAsUser and runAsGroup 65532.
		if c.User != "65532:65532" {
			t.Errorf("user %q, want 65532:65532", c.User)
		}
		if !slices.Equal(c.Env, []string{"SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt"}) {
			t.Errorf("env %q", c.Env)
		}
		if cf.OS != p.OS || cf.Architecture != p.Architecture {
			t.Errorf("platform %s/%s, want %s", cf.OS, cf.Architecture, p)
		}
		want := map[string]string{
			"org.opencontainers.image.title":    "spawnkit-service",
			"org.opencontainers.image.source":   "https://github.com/spawnkit/spawnkit",
			"org.opencontainers.image.url":      "https://github.com/spawnkit/spawnkit",
			"org.opencontainers.image.version":  spawner.Version,
			"org.opencontainers.image.revision": "0123456789abcdef0123456789abcdef01234567",
			"org.opencontainers.image.licenses": "Apache-2.0",
			"org.opencontainers.image.created":  "2025-12-06T05:46:40Z",
		}
		if !maps.Equal(c.Labels, want) {
			t.Errorf("labels %v\nwant %v", c.Labels, want)
		}
		m, err := img.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		if !maps.Equal(m.Annotations, want) {
			t.Errorf("manifest annotations %v, want the labels", m.Annotations)
		}
		if m.MediaType != types.OCIManifestSchema1 || m.Config.MediaType != types.OCIConfigJSON {
			t.Errorf("media types %s, %s: want OCI's", m.MediaType, m.Config.MediaType)
		}
		if !cf.Created.Time.Equal(testCreated) || len(cf.History) != 2 {
			t.Errorf("created %s, %d history entries: want %s and one per layer", cf.Created, len(cf.History), testCreated)
		}
		for _, h := range cf.History {
			if !h.Created.Time.Equal(testCreated) {
				t.Errorf("history %q created %s, want %s", h.CreatedBy, h.Created, testCreated)
			}
		}
	})

	files := extract(t, img)

	t.Run("files", func(t *testing.T) {
		// Exactly these: no shell, no package manager, nothing else.
		want := []string{
			"etc", "etc/group", "etc/passwd", "etc/ssl", "etc/ssl/certs",
			"etc/ssl/certs/ca-certificates.crt", "home", "home/nonroot",
			"spawnkit-service", "tmp",
		}
		var names []string
		for n, f := range files {
			names = append(names, n)
			if !f.hdr.ModTime.Equal(testCreated) {
				t.Errorf("%s: mtime %s, want SOURCE_DATE_EPOCH %s", n, f.hdr.ModTime, testCreated)
			}
			owner := 0
			if n == "home/nonroot" {
				owner = 65532
			}
			if f.hdr.Uid != owner || f.hdr.Gid != owner || f.hdr.Uname != "" || f.hdr.Gname != "" {
				t.Errorf("%s: owner %d:%d (%q:%q), want %d:%d without names", n, f.hdr.Uid, f.hdr.Gid, f.hdr.Uname, f.hdr.Gname, owner, owner)
			}
		}
		slices.Sort(names)
		if !slices.Equal(names, want) {
			t.Errorf("files %q\nwant %q", names, want)
		}
		if !strings.Contains(string(files["etc/passwd"].data), "\nnonroot:x:65532:65532:") ||
			!strings.Contains(string(files["etc/group"].data), "\nnonroot:x:65532:") {
			t.Errorf("no nonroot 65532 in /etc/passwd or /etc/group:\n%s%s", files["etc/passwd"].data, files["etc/group"].data)
		}
		if m := files["tmp"].hdr.Mode; m != 0o1777 {
			t.Errorf("/tmp mode %o, want 1777", m)
		}
	})

	t.Run("CA certificates", func(t *testing.T) {
		f, ok := files["etc/ssl/certs/ca-certificates.crt"]
		if !ok {
			t.Fatal("no /etc/ssl/certs/ca-certificates.crt")
		}
		var got [][]byte
		for rest := f.data; ; {
			var block *pem.Block
			if block, rest = pem.Decode(rest); block == nil {
				break
			}
			if _, err := x509.ParseCertificate(block.Bytes); err != nil {
				t.Errorf("certificate %d: %v", len(got), err)
			}
			got = append(got, block.Bytes)
		}
		// Every root of the bundle go.mod pins, but those with a
		// constraint a PEM file cannot carry.
		var want, constrained int
		for r := range bundle.Roots() {
			if r.Constraint != nil {
				constrained++
				if slices.ContainsFunc(got, func(c []byte) bool { return bytes.Equal(c, r.Certificate) }) {
					t.Error("a constrained root is in the bundle, where its constraint is lost")
				}
				continue
			}
			want++
		}
		if len(got) != want || want < 100 {
			t.Errorf("%d certificates, want the bundle's %d unconstrained roots", len(got), want)
		}
		t.Logf("%d roots (%d constrained left out), %d bytes", len(got), constrained, len(f.data))
	})

	t.Run("binary runs", func(t *testing.T) {
		f := files["spawnkit-service"]
		if f.hdr.Mode != 0o755 {
			t.Errorf("mode %o, want 755", f.hdr.Mode)
		}
		path := filepath.Join(t.TempDir(), "spawnkit-service")
		if err := os.WriteFile(path, f.data, 0o755); err != nil {
			t.Fatal(err)
		}
		checkStatic(t, path, p)
		out, err := exec.CommandContext(t.Context(), path, "-version").CombinedOutput()
		if err != nil {
			t.Fatalf("spawnkit-service -version: %v\n%s", err, out)
		}
		if got, want := strings.TrimSpace(string(out)), "spawnkit-service "+spawner.Version; got != want {
			t.Errorf("-version printed %q, want %q", got, want)
		}
		// -help lists the flags the Deployment passes.
		out, _ = exec.CommandContext(t.Context(), path, "-help").CombinedOutput()
		for _, flag := range []string{"-leader-elect", "-token-file", "-probe-listen"} {
			if !strings.Contains(string(out), flag) {
				t.Errorf("-help does not mention %s:\n%s", flag, out)
			}
		}
	})

	// crane push DIR and skopeo copy oci:DIR:TAG read index.json's one
	// entry; crane push FILE and skopeo copy docker-archive:FILE read the
	// tarball's manifest.json. Both must give back this image.
	t.Run("what crane and skopeo read", func(t *testing.T) {
		idx, err := layout.ImageIndexFromPath(first.layoutDir)
		if err != nil {
			t.Fatal(err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(im.Manifests) != 1 {
			t.Fatalf("index.json has %d entries; crane push wants one", len(im.Manifests))
		}
		d := im.Manifests[0]
		if d.MediaType != types.OCIManifestSchema1 || d.Annotations[refNameAnnotation] != "v"+spawner.Version ||
			d.ArtifactType != "" || d.Platform == nil || !d.Platform.Equals(p) {
			t.Errorf("index.json entry %+v: want an OCI image manifest of %s tagged v%s, no artifactType", d, p, spawner.Version)
		}
		fromLayout, err := idx.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := fromLayout.Digest(); got != first.digest {
			t.Errorf("layout image %s, want %s", got, first.digest)
		}
		fromTar, err := tarball.ImageFromPath(first.tarPath, nil)
		if err != nil {
			t.Fatal(err)
		}
		sameImage(t, fromTar, img)
		raw, err := tarManifest(t, first.tarPath)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(raw, `"RepoTags":["ghcr.io/spawnkit/spawnkit-service:v`+spawner.Version+`"]`) {
			t.Errorf("tarball manifest.json %s: want the tag ghcr.io/spawnkit/spawnkit-service:v%s", raw, spawner.Version)
		}
	})
}

// TestPlatforms builds linux/amd64 and linux/arm64 into one image index
// (a cross build: minutes on a cold cache, so not under -short).
func TestPlatforms(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles the service for arm64")
	}
	amd64, arm64 := v1.Platform{OS: "linux", Architecture: "amd64"}, v1.Platform{OS: "linux", Architecture: "arm64"}
	out := buildAndWrite(t, testOptions(amd64, arm64))
	idx, err := layout.ImageIndexFromPath(out.layoutDir)
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 || im.Manifests[0].MediaType != types.OCIImageIndex || im.Manifests[0].Digest != out.digest {
		t.Fatalf("index.json %+v: want one OCI image index, %s", im.Manifests, out.digest)
	}
	inner, err := idx.ImageIndex(out.digest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := inner.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 2 {
		t.Fatalf("%d manifests, want 2", len(m.Manifests))
	}
	var bases []v1.Hash
	for i, want := range []v1.Platform{amd64, arm64} {
		d := m.Manifests[i]
		if d.Platform == nil || !d.Platform.Equals(want) {
			t.Errorf("manifest %d: platform %v, want %s", i, d.Platform, want)
			continue
		}
		img, err := inner.Image(d.Digest)
		if err != nil {
			t.Fatal(err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.Architecture != want.Architecture || cf.Config.User != "65532:65532" {
			t.Errorf("%s: config says %s, user %q", want, cf.Architecture, cf.Config.User)
		}
		layers, err := img.Layers()
		if err != nil {
			t.Fatal(err)
		}
		base, _ := layers[0].Digest()
		bases = append(bases, base)
		bin := extract(t, img)["spawnkit-service"]
		path := filepath.Join(t.TempDir(), "spawnkit-service")
		if err := os.WriteFile(path, bin.data, 0o755); err != nil {
			t.Fatal(err)
		}
		checkStatic(t, path, want)
	}
	// The base layer is the same blob for every platform: a registry
	// stores it once.
	if len(bases) == 2 && bases[0] != bases[1] {
		t.Errorf("base layers differ: %s, %s", bases[0], bases[1])
	}
	// -tar holds one platform.
	if err := out.b.writeTarball(filepath.Join(t.TempDir(), "x.tar"), defaultRepo); err == nil {
		t.Error("writeTarball of two platforms: no error")
	}
}

func TestParsePlatforms(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  bool
	}{
		{in: "linux/amd64", want: []string{"linux/amd64"}},
		{in: "linux/amd64, linux/arm64", want: []string{"linux/amd64", "linux/arm64"}},
		{in: "linux/arm", err: true},
		{in: "darwin/arm64", err: true},
		{in: "linux/arm64/v8", err: true},
		{in: "linux/amd64,linux/amd64", err: true},
		{in: "", err: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			ps, err := parsePlatforms(tc.in)
			if tc.err {
				if err == nil {
					t.Errorf("got %v, want an error", ps)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range ps {
				got = append(got, p.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSourceDateEpoch(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Time
		err  bool
	}{
		{in: "", want: time.Unix(0, 0)},
		{in: "1765000000", want: testCreated},
		{in: "-1", err: true},
		{in: "yesterday", err: true},
	} {
		got, err := sourceDateEpoch(tc.in)
		if (err != nil) != tc.err || (!tc.err && (!got.Equal(tc.want) || got.Location() != time.UTC)) {
			t.Errorf("sourceDateEpoch(%q) = %s, %v; want %s (UTC), error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

// A -layout that names a directory holding something else is never
// removed.
func TestLayoutRefusesOtherDirectories(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "keep.txt")
	if err := os.WriteFile(keep, []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := &built{tag: "v0"}
	if _, err := b.writeLayout(dir); err == nil || !strings.Contains(err.Error(), "not an OCI layout") {
		t.Errorf("writeLayout over a non-layout directory: %v", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("the directory's file is gone: %v", err)
	}
}

// file is one entry of an image's flattened filesystem.
type file struct {
	hdr  *tar.Header
	data []byte
}

// extract flattens img's layers as a runtime would; names lose their
// trailing "/".
func extract(t *testing.T, img v1.Image) map[string]file {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]file{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = file{hdr: h, data: data}
	}
	return files
}

// checkStatic: the image has no dynamic loader, so the binary must need
// none, and it must be built for p.
func checkStatic(t *testing.T, path string, p v1.Platform) {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	machine := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[p.Architecture]
	if f.Machine != machine {
		t.Errorf("%s binary is for %s, want %s", p, f.Machine, machine)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP || prog.Type == elf.PT_DYNAMIC {
			t.Errorf("%s binary is dynamically linked (%s)", p, prog.Type)
		}
	}
}

// sameImage: a and b have the same config and layers. A docker-archive
// keeps no manifest (a reader makes a Docker schema 2 one), so only these
// are comparable.
func sameImage(t *testing.T, a, b v1.Image) {
	t.Helper()
	ca, err := a.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := b.ConfigName()
	if ca != cb {
		t.Errorf("config %s, want %s", ca, cb)
	}
	la, err := a.Layers()
	if err != nil {
		t.Fatal(err)
	}
	lb, _ := b.Layers()
	if len(la) != len(lb) {
		t.Fatalf("%d layers, want %d", len(la), len(lb))
	}
	for i := range la {
		da, _ := la[i].Digest()
		db, _ := lb[i].Digest()
		if da != db {
			t.Errorf("layer %d: %s, want %s", i, da, db)
		}
	}
}

func tarManifest(t *testing.T, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			return "", err
		}
		if h.Name == "manifest.json" {
			var v any
			if err := json.NewDecoder(tr).Decode(&v); err != nil {
				return "", err
			}
			b, err := json.Marshal(v)
			return string(b), err
		}
	}
}

type sizedHash struct {
	hash string
	size int
}

// treeDigest maps each file under dir to its content hash and size.
func treeDigest(t *testing.T, dir string) map[string]sizedHash {
	t.Helper()
	m := map[string]sizedHash{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		h, _, err := v1.SHA256(bytes.NewReader(data))
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		m[rel] = sizedHash{hash: h.String(), size: len(data)}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func fileBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
