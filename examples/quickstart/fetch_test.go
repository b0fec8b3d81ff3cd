package main

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestFetch(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "{\"path\":%q}\n", r.URL.Path)
	}))
	defer srv.Close()
	got, err := fetch(t.Context(), srv.URL+"/user/alice/")
	if want := `{"path":"/user/alice/"}`; err != nil || got != want {
		t.Errorf("fetch(loopback server) = %q, %v; want %q", got, err, want)
	}
}

// TestFetchDialsOnlyLoopback: addresses off this machine are refused
// before any connection is attempted.
func TestFetchDialsOnlyLoopback(t *testing.T) {
	for _, url := range []string{"http://10.244.0.2:8888/", "http://192.168.1.1/", "http://[2001:db8::1]:8888/"} {
		if _, err := fetch(t.Context(), url); !errors.Is(err, errNotLoopback) {
			t.Errorf("fetch(%s): err = %v, want errNotLoopback", url, err)
		}
	}
}
