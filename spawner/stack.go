package spawner

// startStackFrame is the frame growStack adds: enough that a start's
// goroutine has the stack its pod create needs at its deepest
// (client-go's encoding of the pod), and less than that create needs
// below createAndWait, so growStack never makes a stack larger than the
// create would.
const startStackFrame = 4 << 10

// growStack grows the calling goroutine's stack to the size a pod create
// needs while the stack is still shallow, so that the runtime's copy of
// a growing stack happens here, over a few frames, and not some 20
// frames deeper inside client-go (bench row: client CPU per spawn,
// Manager.Spawn). It is called right before the create, with no wait in
// between in which a GC could shrink the stack again. (The technique is
// CockroachDB's growstack.Grow.)
//
//go:noinline
func growStack() {
	var buf [startStackFrame]byte
	stackSink(buf[:])
}

// stackSink keeps growStack's frame from being optimised away.
//
//go:noinline
func stackSink([]byte) {}
