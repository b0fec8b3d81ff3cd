package spawner

import (
	"context"
	"errors"
	"fmt"

	"github.com/spawnkit/spawnkit/internal/phase"
	"go.opentelemetry.io/otel/trace"
)

// operate runs a Start or Resume: registered so that Stop and Close can
// cancel it (while it waits for the operation slot too), in the slot,
// reporting progress, and ending with the final event.
func (s *Spawner) operate(ctx context.Context, name string, opts *StartOptions, do func(context.Context, *StartOptions, *emitter) (string, error)) (string, error) {
	ctx, span := s.opSpan(ctx, name)
	defer span.End()
	ctx, done := s.beginOp(ctx)
	defer done()
	em := newEmitter(opts.OnProgress, opts.Progress, s.b.clock)
	em.traceID = phase.TraceID(ctx)
	if err := s.acquire(ctx); err != nil {
		err = s.opError(ctx, err)
		em.finish("", err)
		s.failSpan(span, err)
		return "", err
	}
	defer s.release()
	url, err := do(ctx, opts, em)
	em.finish(url, err)
	s.failSpan(span, err)
	return url, err
}

// failSpan marks an operation's span failed, with the reason of a
// *StartError.
func (s *Spawner) failSpan(span trace.Span, err error) {
	if err == nil || !span.IsRecording() {
		return
	}
	var serr *StartError
	reason := ""
	if errors.As(err, &serr) {
		reason = string(serr.Reason)
	}
	s.b.tracer.Fail(span, reason, err)
}

// opError is the error of an operation that could not take the slot.
// Like any failed start it is a *StartError: Cancelled (wrapping the
// cause: ErrStartCancelled, ErrClosed or the ctx's own error), or
// Detached when the cause is ErrDetach; nothing was created.
func (s *Spawner) opError(ctx context.Context, err error) error {
	reason := ReasonCancelled
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		if errors.Is(cause, ErrDetach) {
			reason = ReasonDetached
		}
		if !errors.Is(err, cause) {
			err = fmt.Errorf("%w: %w", cause, err)
		}
	}
	return &StartError{Server: s.server, Step: StepPlan, Reason: reason, Err: err}
}

// beginOp registers a Start or Resume, so that Stop and Close can cancel
// it while it runs or waits for the slot.
func (s *Spawner) beginOp(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		cancel(ErrClosed)
		return ctx, func() {}
	}
	s.opSeq++
	id := s.opSeq
	if s.cancels == nil {
		s.cancels = map[uint64]context.CancelCauseFunc{}
	}
	s.cancels[id] = cancel
	return ctx, func() {
		s.mu.Lock()
		delete(s.cancels, id)
		s.mu.Unlock()
		cancel(nil)
	}
}

// cancelOpsLocked cancels every Start and Resume in flight or waiting.
// Called with s.mu held.
func (s *Spawner) cancelOpsLocked(cause error) {
	for _, c := range s.cancels {
		c(cause)
	}
}

// acquire takes the operation slot, waiting at most until ctx ends.
func (s *Spawner) acquire(ctx context.Context) error {
	select {
	case <-s.done:
		return ErrClosed
	default:
	}
	select {
	case s.op <- struct{}{}:
	case <-s.done:
		return ErrClosed
	case <-ctx.Done():
		return fmt.Errorf("spawner: waiting for the operation in flight on server %q of user %q: %w", s.server.Servername, s.server.Username, context.Cause(ctx))
	}
	select {
	case <-s.done:
		<-s.op
		return ErrClosed
	default:
	}
	return nil
}

func (s *Spawner) release() { <-s.op }
