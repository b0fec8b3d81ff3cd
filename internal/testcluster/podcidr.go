package testcluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
)

// Pods get their IPs from a range in 127.0.0.0/8 so that whatever connects
// to a pod (a responder's client, a hub under test) stays on this machine:
// Linux routes all of 127/8 to lo, so any address in it can be bound and
// dialled without configuration, while a private range (10.x) would leave
// the machine.
var loopback = netip.MustParsePrefix("127.0.0.0/8")

// The default ranges are 127.X.0.0/16 for X in [defaultOctetMin,
// defaultOctetMax]; 127.0.x.x is left alone because resolvers and local
// services live there (127.0.0.1, 127.0.0.53, 127.0.1.1).
const (
	defaultOctetMin = 16
	defaultOctetMax = 254
)

// parsePodCIDR checks an Options.PodCIDR: an IPv4 range inside 127.0.0.0/8,
// with at least 254 addresses because kwok hands out addresses upwards from
// the first without checking the end of the range.
func parsePodCIDR(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("invalid Options.PodCIDR %q: %w", s, err)
	}
	p = p.Masked()
	if !p.Addr().Is4() || p.Bits() < loopback.Bits() || !loopback.Contains(p.Addr()) {
		return netip.Prefix{}, fmt.Errorf("invalid Options.PodCIDR %q: must lie within %s (pods must only ever be reached on this machine)", s, loopback)
	}
	if p.Bits() > 24 {
		return netip.Prefix{}, fmt.Errorf("invalid Options.PodCIDR %q: must be a /24 or larger", s)
	}
	return p, nil
}

// nodeIP is the InternalIP every fake node reports (and so every pod's
// hostIP): the range's last host address, which kwok, counting up from the
// first, hands to a pod only when the whole range is in use.
func nodeIP(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	n := binary.BigEndian.Uint32(a[:]) | (1<<(32-p.Bits()) - 1) // broadcast
	binary.BigEndian.PutUint32(a[:], n-1)
	return netip.AddrFrom4(a)
}

// cidrLease holds a default pod range for one cluster. The range is taken
// by an exclusive flock on a file in the temporary directory, so two
// clusters on one machine, in one process or in several, never share one;
// the kernel drops the lock when the process dies, so a killed test binary
// frees its range. The lock files stay behind (empty): removing a lock
// file races with another process opening it.
type cidrLease struct {
	prefix netip.Prefix
	lock   *os.File
}

// ErrNoFreePodCIDR is returned by Start when every default pod range is
// taken by another cluster on this machine.
var ErrNoFreePodCIDR = errors.New("no free default pod CIDR")

// leasePodCIDR takes a free 127.X.0.0/16, trying them from a random start
// so that concurrent starts rarely contend for the same lock.
func leasePodCIDR() (*cidrLease, error) {
	n := defaultOctetMax - defaultOctetMin + 1
	start := rand.IntN(n)
	var lastErr error
	for i := range n {
		x := defaultOctetMin + (start+i)%n
		path := filepath.Join(os.TempDir(), fmt.Sprintf("spawnkit-testcluster-podcidr-127.%d.lock", x))
		// Read-only is enough for flock and lets one user take a range
		// whose lock file another user created.
		f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE, 0o644)
		if err != nil {
			// For example another user's file in a sticky /tmp with
			// fs.protected_regular: treat the range as taken.
			lastErr = err
			continue
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			if !errors.Is(err, syscall.EWOULDBLOCK) {
				lastErr = fmt.Errorf("locking %s: %w", path, err)
			}
			continue
		}
		return &cidrLease{prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{127, byte(x), 0, 0}), 16), lock: f}, nil
	}
	err := fmt.Errorf("%w: every 127.X.0.0/16 for X in %d..%d is held by another cluster on this machine (lock files spawnkit-testcluster-podcidr-* in %s); set Options.PodCIDR",
		ErrNoFreePodCIDR, defaultOctetMin, defaultOctetMax, os.TempDir())
	if lastErr != nil {
		err = fmt.Errorf("%w (last error: %w)", err, lastErr)
	}
	return nil, err
}

// release frees the range for another cluster. Closing the file drops the
// flock.
func (l *cidrLease) release() error {
	if l == nil {
		return nil
	}
	return l.lock.Close()
}
