package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// loadToken reads the token from file if given, else from the
// environment, trimmed; no token is an error, since the API creates pods
// for anyone who can call it.
func loadToken(file string, getenv func(string) string) (string, error) {
	if file != "" {
		return readToken(file)
	}
	if token := strings.TrimSpace(getenv(tokenEnv)); token != "" {
		return token, nil
	}
	return "", fmt.Errorf("no API token: set -token-file or $%s (the API creates pods for anyone who can call it, so it refuses to run open)", tokenEnv)
}

func readToken(file string) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("reading the token: %w", err)
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", fmt.Errorf("the token file %s is empty", file)
	}
	return token, nil
}

// tokenSource is the token requests must carry now (service.Options.Token).
type tokenSource struct{ v atomic.Pointer[string] }

func (t *tokenSource) get() string  { return *t.v.Load() }
func (t *tokenSource) set(s string) { t.v.Store(&s) }

// certSource serves the API's certificate (tls.Config.GetCertificate).
type certSource struct {
	certFile, keyFile string
	v                 atomic.Pointer[tls.Certificate]
}

// load reads and checks the pair; the certificate in use changes only if
// the new pair is good.
func (c *certSource) load() error {
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("TLS certificate %s with key %s: %w", c.certFile, c.keyFile, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return fmt.Errorf("TLS certificate %s: %w", c.certFile, err)
	}
	pair.Leaf = leaf
	c.v.Store(&pair)
	return nil
}

func (c *certSource) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.v.Load(), nil
}

// reloadable is a set of files loaded together: reload runs when any of
// their contents changes.
type reloadable struct {
	what   string
	files  []string
	reload func() error
	sums   [][sha256.Size]byte
}

// watchFiles checks every interval whether a file's content changed and
// reloads its set; a reload that fails keeps what was loaded before (a
// Secret mid-update, a half-written file) and is logged, and tried again
// at the next change. Contents, not modification times, are compared:
// a Kubernetes Secret volume swaps a symlink, and a copy may keep its
// mtime. It returns when ctx ends.
func watchFiles(ctx context.Context, interval time.Duration, log logr.Logger, sets ...*reloadable) error {
	for _, s := range sets {
		s.sums = sums(s.files)
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
		for _, s := range sets {
			now := sums(s.files)
			if equalSums(now, s.sums) {
				continue
			}
			s.sums = now
			if err := s.reload(); err != nil {
				log.Error(err, "reloading failed; still using the one loaded before", "what", s.what)
				continue
			}
			log.Info("reloaded", "what", s.what, "files", s.files)
		}
	}
}

func sums(files []string) [][sha256.Size]byte {
	out := make([][sha256.Size]byte, len(files))
	for i, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			// Unreadable for now: differs from any content, so the
			// reload is tried (and its error logged) once it changes.
			data = []byte("\x00unreadable: " + err.Error())
		}
		out[i] = sha256.Sum256(data)
	}
	return out
}

func equalSums(a, b [][sha256.Size]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i][:], b[i][:]) {
			return false
		}
	}
	return true
}
