package spawner

// startStackFrame is sized so that growStack leaves a goroutine with the
// 8 KB stack a start needs at its deepest (client-go's protobuf encoding
// of the pod, under the start's own frames).
const startStackFrame = 5 << 10

// growStack grows the calling goroutine's stack to the size a start
// needs while the stack is still shallow. A goroutine's stack starts
// small and the runtime doubles it when a call needs more, copying the
// stack and adjusting a pointer in every frame on it; a start reaches its
// deepest point with some 30 frames on the stack, where the copy costs
// several times what it costs here, at the top of the start. (The
// technique is CockroachDB's growstack.Grow.) It costs a 5 KB clear.
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
