package testutil

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"testing"
)

func TestNewCertServesItsHosts(t *testing.T) {
	c := NewCert(t, 7, "127.0.0.1", "spawnkit-service.test")
	block, _ := pem.Decode(c.CertPEM)
	if block == nil {
		t.Fatal("CertPEM holds no PEM block")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if leaf.SerialNumber.Int64() != 7 {
		t.Errorf("serial %s, want 7", leaf.SerialNumber)
	}
	for _, host := range []string{"127.0.0.1", "spawnkit-service.test"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: c.Roots()}); err != nil {
			t.Errorf("%s: %v", host, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "other.test", Roots: c.Roots()}); err == nil {
		t.Error("the certificate verifies for a host it was not made for")
	}
	if _, err := tls.X509KeyPair(c.CertPEM, c.KeyPEM); err != nil {
		t.Errorf("the certificate and key are no pair: %v", err)
	}
}
