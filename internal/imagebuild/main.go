// Command imagebuild builds the OCI image of cmd/spawnkit-service without a
// container runtime or a registry: `make image` runs it. Everything it
// reads comes from this module and the Go module proxy.
//
// The image is empty.Image plus two layers:
//
//   - base: /etc/passwd and /etc/group (root, nobody, and nonroot, uid and
//     gid 65532), /home/nonroot, /tmp (1777), and
//     /etc/ssl/certs/ca-certificates.crt, the Mozilla roots of
//     golang.org/x/crypto/x509roots/fallback/bundle at the version go.mod
//     pins (so the bundle is the same on every machine, and updating it is a
//     go.mod change a review sees), less roots whose trust carries a
//     constraint PEM cannot express (a distrust-after date);
//   - the binary, /spawnkit-service, built with CGO_ENABLED=0, -trimpath,
//     -buildvcs=false, -ldflags=-s -w, GOAMD64=v1 or GOARM64=v8.0 and an
//     empty GOFLAGS, so nothing in the caller's environment changes it.
//
// The config: entrypoint ["/spawnkit-service"], user 65532:65532 (the
// Deployment's runAsUser and runAsGroup), SSL_CERT_FILE naming the bundle,
// and the org.opencontainers.image labels (source, version, revision,
// licenses, created, title, url), which are also the manifest's annotations.
// There is no shell and no package manager.
//
// Reproducible: the same source, go.sum, Go toolchain, -revision and
// SOURCE_DATE_EPOCH give byte-identical outputs and digests. Every
// timestamp (the config's created, the history, each file's mtime) is
// SOURCE_DATE_EPOCH, or the Unix epoch when it is unset; tar entries are
// written in a fixed order, owned by root (nonroot's home by nonroot),
// without user or group names.
//
// Outputs, both optional:
//
//   - -layout DIR: an OCI image layout whose index.json has exactly one
//     entry, annotated org.opencontainers.image.ref.name=v<version>: the
//     image, or an image index when -platforms names several. `crane push
//     DIR REF` and `skopeo copy --all oci:DIR:v<version> docker://REF`
//     publish it.
//   - -tar FILE: a docker-archive tarball (docker save's format, tagged
//     -repo:v<version>) of a single platform, for `crane push FILE REF`,
//     `skopeo copy docker-archive:FILE docker://REF`, `docker load` or
//     `kind load image-archive`. Refused with several platforms. It has
//     the config and layers but no manifest: a push of it makes a Docker
//     schema 2 manifest of the same blobs, under another digest and without
//     the annotations, so the layout is what to publish.
//
// It prints each platform's image digest and the layout's pushed digest.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"
)

func main() {
	var o options
	var platforms string
	flag.StringVar(&o.dir, "dir", ".", "the module's root, where `go build` runs")
	flag.StringVar(&o.pkg, "package", defaultPackage, "the package to build")
	flag.StringVar(&o.goCmd, "go", "go", "the go command")
	flag.StringVar(&platforms, "platforms", "linux/amd64", "comma-separated os/arch pairs (linux/amd64, linux/arm64)")
	flag.StringVar(&o.repo, "repo", defaultRepo, "the repository the tarball's tag names (the layout names only the tag)")
	flag.StringVar(&o.revision, "revision", "", "the source revision, for the org.opencontainers.image.revision label (omitted when empty)")
	layoutDir := flag.String("layout", "", "write an OCI image layout to this directory (replaced)")
	tarPath := flag.String("tar", "", "write a docker-archive tarball of the single platform to this file")
	flag.Parse()

	var err error
	if o.platforms, err = parsePlatforms(platforms); err != nil {
		fail(err)
	}
	if o.created, err = sourceDateEpoch(os.Getenv("SOURCE_DATE_EPOCH")); err != nil {
		fail(err)
	}
	if *layoutDir == "" && *tarPath == "" {
		fail(fmt.Errorf("nothing to write: give -layout, -tar or both"))
	}
	o.stderr = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	b, err := build(ctx, o)
	if err != nil {
		fail(err)
	}
	for _, p := range b.images {
		d, err := p.image.Digest()
		if err != nil {
			fail(err)
		}
		fmt.Printf("%s %s\n", p.platform, d)
	}
	if *layoutDir != "" {
		d, err := b.writeLayout(*layoutDir)
		if err != nil {
			fail(err)
		}
		fmt.Printf("wrote %s (OCI layout, tag %s, digest %s)\n", *layoutDir, b.tag, d)
	}
	if *tarPath != "" {
		if err := b.writeTarball(*tarPath, o.repo); err != nil {
			fail(err)
		}
		fmt.Printf("wrote %s (docker-archive, %s:%s)\n", *tarPath, o.repo, b.tag)
	}
	fmt.Printf("built in %s\n", time.Since(start).Round(100*time.Millisecond))
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "imagebuild:", err)
	os.Exit(1)
}

// sourceDateEpoch reads SOURCE_DATE_EPOCH
// (https://reproducible-builds.org/specs/source-date-epoch/): seconds since
// the Unix epoch; "" is the epoch itself.
func sourceDateEpoch(v string) (time.Time, error) {
	if v == "" {
		return time.Unix(0, 0).UTC(), nil
	}
	s, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || s < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want a non-negative number of seconds", v)
	}
	return time.Unix(s, 0).UTC(), nil
}
