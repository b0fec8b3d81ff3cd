package spawner

// startStackFrame is sized so that growStack, called from a start's
// createAndWait (with 2 to 3 KB of stack in use there), leaves the
// goroutine with the 8 KB stack the create needs at its deepest
// (client-go's protobuf encoding of the pod, under the start's own
// frames), and not 16 KB. The frame is smaller than what the create
// needs below createAndWait, so whatever the caller's depth, growStack
// never makes a stack larger than the create would.
const startStackFrame = 4 << 10

// growStack grows the calling goroutine's stack to the size a pod create
// needs while the stack is still shallow. A goroutine's stack starts
// small and the runtime doubles it when a call needs more, copying the
// stack and adjusting a pointer in every frame on it; without this the
// copy happens inside client-go's encoding of the pod, some 20 frames
// deeper, where it costs several times more (in CPU profiles of 100
// concurrent Manager spawns, growing the stack at the top of the start
// halved the copying under the create). It is called right before the
// create: the pod's
// encoding happens before client-go's rate limiter, so no wait lies in
// between in which a GC could shrink the stack again. (The technique is
// CockroachDB's growstack.Grow.) It costs a 4 KB clear.
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
