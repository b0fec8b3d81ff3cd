package testutil

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
)

// Ports FreeAddr hands out: below Linux's ephemeral range (32768-60999 by
// default), from which the kernel picks the local port of every outgoing
// connection and of every listener on port 0. A port found free there
// and closed again can be taken by another test process's connection
// before the program under test binds it ("address already in use", seen
// in CI); here only another FreeAddr can, and each process starts at a
// random place and never hands out a port twice. internal/testcluster
// hands out the same (its FreeAddr is this one): one record per process.
const (
	firstPort = 10000
	lastPort  = 32000
)

var (
	portMu   sync.Mutex // guards nextPort and handed
	nextPort = firstPort + rand.IntN(lastPort-firstPort)
	handed   = map[int]bool{}
)

// FreeAddr returns a 127.0.0.1:port that was free a moment ago and that
// this process has not handed out before, for a program a test starts to
// listen on. Safe for concurrent use.
func FreeAddr() (string, error) {
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
