package main

import (
	"errors"
	"flag"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestHelpListsOnlyRealFlags: -h lists exactly the flags run uses, none
// that a dependency registered on the global flag set.
func TestHelpListsOnlyRealFlags(t *testing.T) {
	var out strings.Builder
	_, err := parseFlags([]string{"-h"}, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parseFlags(-h) = %v, want flag.ErrHelp", err)
	}
	var listed []string
	for _, m := range regexp.MustCompile(`(?m)^  -(\S+)`).FindAllStringSubmatch(out.String(), -1) {
		listed = append(listed, m[1])
	}
	want := []string{"nodes", "once", "pod-cidr", "responders", "workloads"}
	if !slices.Equal(listed, want) {
		t.Errorf("-h lists %v, want %v:\n%s", listed, want, out.String())
	}
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want config
	}{
		{"defaults", nil, config{nodes: 2, responders: true, workloads: true}},
		{"everything", []string{"-nodes", "4", "-once", "-responders=false", "-workloads=false", "-pod-cidr", "127.9.0.0/16"},
			config{nodes: 4, once: true, responders: false, workloads: false, podCIDR: "127.9.0.0/16"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseFlags(tc.args, &strings.Builder{})
			if err != nil || got != tc.want {
				t.Errorf("parseFlags(%q) = %+v, %v; want %+v", tc.args, got, err, tc.want)
			}
		})
	}
	if _, err := parseFlags([]string{"-kubeconfig", "x"}, &strings.Builder{}); err == nil {
		t.Error("parseFlags accepted -kubeconfig, a flag that does nothing here")
	}
	if _, err := parseFlags([]string{"extra"}, &strings.Builder{}); err == nil {
		t.Error("parseFlags accepted a positional argument")
	}
}
