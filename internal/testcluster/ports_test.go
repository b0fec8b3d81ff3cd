package testcluster_test

import (
	"net"
	"strconv"
	"sync"
	"testing"

	"github.com/spawnkit/spawnkit/internal/testcluster"
)

// TestFreeAddr: concurrent callers never get the same port, every port is
// below the ephemeral range and can be listened on.
func TestFreeAddr(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]bool{}
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			addr, err := testcluster.FreeAddr()
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if seen[addr] {
				t.Errorf("FreeAddr handed out %s twice", addr)
			}
			seen[addr] = true
		})
	}
	wg.Wait()
	for addr := range seen {
		host, port, _ := net.SplitHostPort(addr)
		if p, _ := strconv.Atoi(port); host != "127.0.0.1" || p < 10000 || p > 32000 {
			t.Errorf("FreeAddr = %s, want 127.0.0.1 and a port in 10000-32000", addr)
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("cannot listen on %s: %v", addr, err)
			continue
		}
		ln.Close()
	}
}
