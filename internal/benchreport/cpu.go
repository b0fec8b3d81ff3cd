package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"runtime/trace"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuTime is the user and system CPU time this process has used so far.
func cpuTime() (time.Duration, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// usage is the part of getrusage a spawn run reports beside its CPU
// time: system CPU (syscalls, futex wake-ups, page faults) and context
// switches. A side that wakes goroutines more often than the other shows
// it here before anywhere else.
type usage struct {
	SysCPU      time.Duration // kernel CPU time
	Voluntary   int64         // context switches because a thread blocked
	Involuntary int64         // context switches because the kernel preempted a thread
}

func rusage() usage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return usage{}
	}
	return usage{SysCPU: time.Duration(ru.Stime.Nano()), Voluntary: ru.Nvcsw, Involuntary: ru.Nivcsw}
}

// pageFaults is how many minor page faults this process has taken so far
// (memory the kernel maps on first touch: new heap, stacks, code).
func pageFaults() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Minflt
}

// startProfile starts a CPU profile into path, or does nothing when path
// is empty; the returned function stops it.
func startProfile(path string) (stop func() error, err error) {
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("creating the CPU profile: %w", err)
	}
	if hz, _ := strconv.Atoi(os.Getenv("BENCHREPORT_PROFILE_HZ")); hz > 0 {
		// Diagnostic: more samples than pprof's 100 Hz in a short window.
		// The runtime then warns that the rate is already set; the
		// profile records the rate set here.
		runtime.SetCPUProfileRate(hz)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("starting the CPU profile: %w", err)
	}
	stopTrace := func() error { return nil }
	if os.Getenv("BENCHREPORT_TRACE") != "" {
		// Diagnostic: an execution trace of the same window beside the
		// profile (go tool trace -pprof=sync counts where goroutines
		// blocked, hence what woke them how often).
		tf, err := os.Create(path + ".trace")
		if err != nil {
			return nil, fmt.Errorf("creating the trace: %w", err)
		}
		if err := trace.Start(tf); err != nil {
			_ = tf.Close()
			return nil, fmt.Errorf("starting the trace: %w", err)
		}
		stopTrace = func() error { trace.Stop(); return tf.Close() }
	}
	return func() error {
		pprof.StopCPUProfile()
		return errors.Join(stopTrace(), f.Close())
	}, nil
}

// writeHeapProfile writes the heap profile (allocations since the process
// began) to prefix-when.pprof, or does nothing when prefix is empty. Two
// of them around the measured window, compared with pprof's -diff_base,
// show what the window allocated.
func writeHeapProfile(prefix, when string) error {
	if prefix == "" {
		return nil
	}
	f, err := os.Create(prefix + "-" + when + ".pprof")
	if err != nil {
		return fmt.Errorf("creating the heap profile: %w", err)
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return fmt.Errorf("writing the heap profile: %w", err)
	}
	return f.Close()
}

// machineBusy reads the machine's busy and total CPU time so far, in
// clock ticks, from /proc/stat's first line (every CPU together).
func machineBusy() (busy, total uint64, err error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	// user nice system idle iowait irq softirq steal; guest and
	// guest_nice, after them, are already counted in user and nice.
	fields = fields[1:min(len(fields), 9)]
	for i, f := range fields {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: field %d of %q: %w", i+1, line, err)
		}
		total += v
		// idle (4th) and iowait (5th) are the machine waiting, not working.
		if i != 3 && i != 4 {
			busy += v
		}
	}
	return busy, total, nil
}

// quietness is a quiet machine: every CPU together less than maxBusy
// busy for quietFor in a row; a wait for it gives up after limit.
type quietness struct {
	maxBusy         float64
	quietFor, limit time.Duration
}

var (
	// quietForTiming comes before the rows that time CPU-bound code in
	// this process or a child (Poll, the orphan diff).
	quietForTiming = quietness{maxBusy: 0.10, quietFor: 5 * time.Second, limit: 3 * time.Minute}
	// quietBetweenRuns comes after a spawn run's namespace is gone and
	// its pause is over. An idle cluster stays well under 10%.
	quietBetweenRuns = quietness{maxBusy: 0.10, quietFor: 3 * time.Second, limit: 2 * time.Minute}
)

// awaitQuiet waits for a quiet machine (waitQuiet) before what, and says
// on stderr how long it waited, or that it went on with a busy machine.
func awaitQuiet(ctx context.Context, what string, q quietness) error {
	waited, quiet, err := waitQuiet(ctx, q)
	if err != nil {
		return fmt.Errorf("waiting for a quiet machine before %s: %w", what, err)
	}
	if quiet {
		fmt.Fprintf(os.Stderr, "%s: the machine was quiet after %v\n", what, waited.Round(100*time.Millisecond))
	} else {
		fmt.Fprintf(os.Stderr, "%s: the machine was still busy after %v; going on\n", what, waited.Round(time.Second))
	}
	return nil
}

// waitQuiet waits until the machine is quiet as q says, or until q.limit
// has passed, whichever is first; it reports how long it waited and
// whether the machine got quiet. A fixed pause guesses how long the
// simulated cluster takes to digest a large deletion (garbage
// collection, etcd compaction, kwok's clean-up); this waits for it to be
// done.
func waitQuiet(ctx context.Context, q quietness) (time.Duration, bool, error) {
	const tick = time.Second
	begin := time.Now()
	busy0, total0, err := machineBusy()
	if err != nil {
		// Not Linux, or no /proc: the report still runs, without the
		// wait, and says so.
		fmt.Fprintf(os.Stderr, "benchreport: cannot tell whether the machine is quiet (%v); not waiting\n", err)
		return 0, false, nil
	}
	quiet := time.Duration(0)
	t := time.NewTicker(tick)
	defer t.Stop()
	for quiet < q.quietFor {
		if time.Since(begin) >= q.limit {
			return time.Since(begin), false, nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return time.Since(begin), false, context.Cause(ctx)
		}
		busy, total, err := machineBusy()
		if err != nil {
			return time.Since(begin), false, err
		}
		if total > total0 && float64(busy-busy0)/float64(total-total0) < q.maxBusy {
			quiet += tick
		} else {
			quiet = 0
		}
		busy0, total0 = busy, total
	}
	return time.Since(begin), true, nil
}
