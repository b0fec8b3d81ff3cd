package otelenv_test

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/spawnkit/spawnkit/internal/otelenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// TestSetup: off unless the environment asks for OTLP; each protocol;
// what it refuses says why.
func TestSetup(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		env  []string
		on   bool
		err  string
	}{
		{name: "nothing set: off", env: nil},
		{name: "endpoint set", env: []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"}, on: true},
		{name: "traces endpoint, grpc", env: []string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"}, on: true},
		{name: "exporter otlp without endpoint", env: []string{"OTEL_TRACES_EXPORTER", "otlp"}, on: true},
		{name: "exporter none wins", env: []string{"OTEL_TRACES_EXPORTER", "none", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318"}},
		{name: "SDK disabled wins", env: []string{"OTEL_SDK_DISABLED", "true", "OTEL_TRACES_EXPORTER", "otlp"}},
		{name: "another exporter", env: []string{"OTEL_TRACES_EXPORTER", "zipkin"}, err: `OTEL_TRACES_EXPORTER="zipkin"`},
		{name: "http/json", env: []string{"OTEL_TRACES_EXPORTER", "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"}, err: `protocol "http/json"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			tp, shutdown, err := otelenv.Setup(ctx, "spawnkit-service", "test", env(c.env...))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want one naming %s", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (tp != nil) != c.on {
				t.Errorf("on = %v, want %v", tp != nil, c.on)
			}
			if err := shutdown(ctx); err != nil {
				t.Errorf("shutdown: %v", err)
			}
		})
	}
}
