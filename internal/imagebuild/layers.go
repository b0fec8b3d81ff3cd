package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/pem"
	"io"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// entry is one file or directory of a layer.
type entry struct {
	name     string // relative, no leading "/"; directories end in "/"
	mode     int64
	uid, gid int
	data     []byte // files only
}

const passwd = `root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
`

const group = `root:x:0:
nobody:x:65534:
nonroot:x:65532:
`

// baseLayer is what the distroless base gave the binary: the users, the
// CA bundle, a home and /tmp. Every parent directory comes before its
// children, as a runtime extracting it expects.
func baseLayer(created time.Time) (v1.Layer, error) {
	return layer(created, []entry{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "etc/ssl/", mode: 0o755},
		{name: "etc/ssl/certs/", mode: 0o755},
		{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: caBundle()},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: nonroot, gid: nonroot},
		{name: "tmp/", mode: 0o1777},
	})
}

// binaryLayer holds the binary alone, so a new version changes only this
// layer and the base layer stays shared (and cached) across versions.
func binaryLayer(bin []byte, created time.Time) (v1.Layer, error) {
	return layer(created, []entry{{name: binaryPath[1:], mode: 0o755, data: bin}})
}

// caBundle is the PEM of every unconstrained root of the bundle, in the
// bundle's order. A constrained root (one distrusted for certificates
// issued after a date) is left out: a PEM file cannot carry the
// constraint, and trusting the root without it would trust what Mozilla
// no longer does.
func caBundle() []byte {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})
	}
	return b.Bytes()
}

// layer is a gzip-compressed OCI layer of entries, in the given order,
// every one stamped with created and no user or group name, so that equal
// entries give an equal digest.
func layer(created time.Time, entries []entry) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: created,
			Format:  tar.FormatUSTAR, // no PAX records: nothing here needs one
		}
		if e.name[len(e.name)-1] == '/' {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	raw := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestCompression),
		// The layout and the tarball each read the compressed layer: compress
		// the 50 MB binary once.
		tarball.WithCompressedCaching)
}
