package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
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
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
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
