package service

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	// kin-openapi is the maintained OpenAPI 3 validator for Go; the test
	// checks every request and response of the handler tests against
	// openapi.yaml with it, so the document cannot drift from the code.
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// spec is openapi.yaml, loaded once.
var spec = sync.OnceValues(func() (*specDoc, error) {
	doc, err := openapi3.NewLoader().LoadFromFile("openapi.yaml")
	if err != nil {
		return nil, err
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	textDecoder := func(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
		data, err := io.ReadAll(body)
		return string(data), err
	}
	openapi3filter.RegisterBodyDecoder("text/event-stream", textDecoder)
	openapi3filter.RegisterBodyDecoder("text/html", textDecoder)
	return &specDoc{doc: doc, router: router}, nil
})

type specDoc struct {
	doc    *openapi3.T
	router routers.Router
}

// covered records which documented answers the tests produced:
// "METHOD path status".
var covered sync.Map

// validateExchange checks one request and its response against the
// document. checkRequest is false for requests the test makes malformed on
// purpose (their response is still checked).
func validateExchange(t *testing.T, req *http.Request, reqBody []byte, resp *http.Response, respBody []byte, checkRequest bool) {
	t.Helper()
	s, err := spec()
	if err != nil {
		t.Fatal(err)
	}
	vreq := req.Clone(t.Context())
	vreq.Body = io.NopCloser(bytes.NewReader(reqBody))
	route, params, err := s.router.FindRoute(vreq)
	if err != nil {
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s %s: not in openapi.yaml (%v) but answered %d", req.Method, req.URL.Path, err, resp.StatusCode)
		}
		return
	}
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true, MultiError: true}}
	if checkRequest {
		if err := openapi3filter.ValidateRequest(t.Context(), in); err != nil {
			t.Errorf("%s %s: request does not match openapi.yaml: %v", req.Method, req.URL.Path, err)
		}
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode,
		Header: resp.Header, Body: io.NopCloser(bytes.NewReader(respBody)), Options: in.Options}
	if err := openapi3filter.ValidateResponse(t.Context(), out); err != nil {
		t.Errorf("%s %s: response %d does not match openapi.yaml: %v\n%s", req.Method, req.URL.Path, resp.StatusCode, err, respBody)
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		validateEvents(t, s.doc, respBody)
	}
	covered.Store(fmt.Sprintf("%s %s %d", route.Method, route.Path, resp.StatusCode), true)
}

// validateEvents checks each event's data against ProgressEvent.
func validateEvents(t *testing.T, doc *openapi3.T, stream []byte) {
	t.Helper()
	schema := doc.Components.Schemas["ProgressEvent"].Value
	sc := bufio.NewScanner(bytes.NewReader(stream))
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var v any
		if err := json.Unmarshal([]byte(data), &v); err != nil {
			t.Errorf("event data %s: %v", data, err)
			continue
		}
		if err := schema.VisitJSON(v); err != nil {
			t.Errorf("event data %s does not match ProgressEvent: %v", data, err)
		}
	}
}

// checkCoverage reports documented answers (other than 500s) that no test
// produced; TestMain calls it after a full run.
func checkCoverage() error {
	s, err := spec()
	if err != nil {
		return err
	}
	var missing []string
	for path, item := range s.doc.Paths.Map() {
		for method, op := range item.Operations() {
			for status := range op.Responses.Map() {
				key := fmt.Sprintf("%s %s %s", method, path, status)
				if _, ok := covered.Load(key); !ok && status != "default" && status != "500" {
					missing = append(missing, key)
				}
			}
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("openapi.yaml documents answers no test produced:\n  %s", strings.Join(missing, "\n  "))
	}
	return nil
}

func TestOpenAPIDocumentIsValid(t *testing.T) {
	if _, err := spec(); err != nil {
		t.Fatal(err)
	}
}
