package testutil

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
)

// Ports freeAddr hands out: below Linux's ephemeral range, for the reason
// internal/testcluster's FreeAddr gives (a port the kernel picked for a
// listener on port 0 and closed again can be taken by any outgoing
// connection before the program under test binds it). The range is
// disjoint from testcluster's (20000-32000) so that the two, each with
// its own record of what it handed out, never hand out the same port in
// one test process. testutil does not import testcluster: that would
// pull the simulated cluster's dependencies into every package's tests.
const (
	firstPort = 10000
	lastPort  = 19999
)

var (
	portMu   sync.Mutex // guards nextPort and handed
	nextPort = firstPort + rand.IntN(lastPort-firstPort)
	handed   = map[int]bool{}
)

// freeAddr returns a 127.0.0.1:port that was free a moment ago and that
// this process has not handed out before. Safe for concurrent use.
func freeAddr() (string, error) {
	portMu.Lock()
	defer portMu.Unlock()
	for range lastPort - firstPort {
		p := nextPort
		if nextPort++; nextPort > lastPort {
			nextPort = firstPort
		}
		if handed[p] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		addr := ln.Addr().String()
		if err := ln.Close(); err != nil {
			return "", err
		}
		handed[p] = true
		return addr, nil
	}
	return "", fmt.Errorf("testutil: no free port on 127.0.0.1 in %d-%d", firstPort, lastPort)
}
