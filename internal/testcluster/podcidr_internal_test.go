package testcluster

import (
	"net/netip"
	"testing"
)

func TestParsePodCIDR(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     string // "" for an error
		nodeIP   string
	}{
		{"a /16", "127.42.0.0/16", "127.42.0.0/16", "127.42.255.254"},
		{"host bits are masked", "127.42.7.9/16", "127.42.0.0/16", "127.42.255.254"},
		{"a /24", "127.3.4.0/24", "127.3.4.0/24", "127.3.4.254"},
		{"all of loopback", "127.0.0.0/8", "127.0.0.0/8", "127.255.255.254"},
		{"private", "10.244.0.0/16", "", ""},
		{"wider than loopback", "126.0.0.0/7", "", ""},
		{"too small", "127.0.0.0/25", "", ""},
		{"IPv6", "::1/128", "", ""},
		{"garbage", "loopback", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parsePodCIDR(tc.in)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("parsePodCIDR(%q) = %s, want an error", tc.in, got)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("parsePodCIDR(%q) = %s, %v; want %s", tc.in, got, err, tc.want)
			}
			if ip := nodeIP(got); ip.String() != tc.nodeIP || !got.Contains(ip) {
				t.Errorf("nodeIP(%s) = %s, want %s", got, ip, tc.nodeIP)
			}
		})
	}
}

// TestLeasePodCIDR: a range held by one cluster is not given to another
// until released, and every default range is a loopback /16.
func TestLeasePodCIDR(t *testing.T) {
	a, err := leasePodCIDR()
	if err != nil {
		t.Fatal(err)
	}
	defer a.release()
	b, err := leasePodCIDR()
	if err != nil {
		t.Fatal(err)
	}
	defer b.release()
	if a.prefix == b.prefix {
		t.Errorf("two leases share %s", a.prefix)
	}
	for _, p := range []netip.Prefix{a.prefix, b.prefix} {
		if _, err := parsePodCIDR(p.String()); err != nil || p.Bits() != 16 {
			t.Errorf("default range %s: %v; want a loopback /16", p, err)
		}
	}
}
