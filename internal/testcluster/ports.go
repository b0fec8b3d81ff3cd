package testcluster

import "github.com/spawnkit/spawnkit/internal/testutil"

// FreeAddr returns a 127.0.0.1:port that was free a moment ago, for a
// program a test starts to listen on: testutil.FreeAddr, which says how
// it avoids the ports the kernel hands out. Safe for concurrent use.
func FreeAddr() (string, error) { return testutil.FreeAddr() }
