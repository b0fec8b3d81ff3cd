package service_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/spawnkit/spawnkit/manager"
	"github.com/spawnkit/spawnkit/reflector"
	"github.com/spawnkit/spawnkit/service"
)

// A Go hub mounts the spawner API in its own server. The Manager is
// started elsewhere (m.Start(ctx)); here a request without the token is
// refused before anything else happens.
func Example() {
	client := fake.NewClientset() // a real hub: kubernetes.NewForConfig
	registry, err := reflector.New(reflector.Options{Client: client})
	if err != nil {
		log.Fatal(err)
	}
	defer registry.Close()
	m, err := manager.New(manager.Options{Client: client, Registry: registry})
	if err != nil {
		log.Fatal(err)
	}
	token := os.Getenv("SPAWNKIT_SERVICE_TOKEN")
	if token == "" {
		token = "example-token"
	}
	api, err := service.New(service.Options{Manager: m, Token: func() string { return token }})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", api)

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/servers", nil))
	fmt.Println(rec.Code, strings.TrimSpace(rec.Body.String()))
	// Output:
	// 401 {"error":"missing token: no Authorization header; the hub sends SpawnkitSpawner.service_token (default: $SPAWNKIT_SERVICE_TOKEN in the hub's environment) as Authorization: Bearer <token>; the service's token is the file of -token-file, else $SPAWNKIT_SERVICE_TOKEN in its environment","reason":"Unauthorized"}
}

// The OpenAPI document is embedded, for a hub's client generator or a
// gateway.
func ExampleOpenAPI() {
	doc := service.OpenAPI()
	fmt.Println(strings.SplitN(string(doc), "\n", 2)[0])
	// Output:
	// openapi: 3.0.3
}
