package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Cert is a CA of its own and a serving certificate it signed.
type Cert struct {
	// CA is the CA's certificate, CAPEM its PEM form (a hub's
	// service_ca_file).
	CA    *x509.Certificate
	CAPEM []byte
	// CertPEM and KeyPEM are the serving certificate and its private key
	// (-tls-cert-file and -tls-key-file).
	CertPEM, KeyPEM []byte
	// Serial is the serving certificate's serial number.
	Serial int64
}

// NewCert makes a CA and a serving certificate it signed for hosts, each
// an IP address or a DNS name (the first is also the subject's common
// name), valid from an hour ago for a day. serial is the serving
// certificate's serial number, so that a test can tell two certificates
// apart on the wire; the CA's is 1000 times it.
func NewCert(t testing.TB, serial int64, hosts ...string) Cert {
	t.Helper()
	if len(hosts) == 0 {
		t.Fatal("testutil.NewCert: no host")
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(serial * 1000), Subject: pkix.Name{CommonName: fmt.Sprintf("spawnkit test CA %d", serial)},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: hosts[0]},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return Cert{
		CA:      ca,
		CAPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}),
		Serial:  serial,
	}
}

// Roots is a pool of the CA alone, to verify the serving certificate.
func (c Cert) Roots() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.CA)
	return p
}

// WriteFiles writes the CA's certificate, the serving certificate and its
// key into dir as ca.crt, tls.crt and tls.key, and returns their paths.
func (c Cert) WriteFiles(t testing.TB, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caFile, certFile, keyFile = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for file, data := range map[string][]byte{caFile: c.CAPEM, certFile: c.CertPEM, keyFile: c.KeyPEM} {
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caFile, certFile, keyFile
}
