package naming

import "testing"

// BenchmarkNames renders every name of a server (namespace, pod, DNS,
// secret, PVC and the legacy PVC name) under the default templates.
func BenchmarkNames(b *testing.B) {
	for _, bc := range []struct {
		name string
		s    Server
	}{
		{"ascii", Server{Username: "alice", Servername: "gpu"}},
		{"hashed", Server{Username: "Alice.Smith@example.com", Servername: "GPU Server 1"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := defaultNamer.Names(bc.s); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPodName expands only the default pod name template: the fields
// of the server, then "jupyter-{user_server}".
func BenchmarkPodName(b *testing.B) {
	for _, bc := range []struct {
		name string
		s    Server
	}{
		{"ascii", Server{Username: "alice"}},
		{"hashed", Server{Username: "Alice.Smith@example.com"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				f, err := NewFields(bc.s, SchemeSafe, "default")
				if err != nil {
					b.Fatal(err)
				}
				if _, err := defaultNamer.pod.Execute(f); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
