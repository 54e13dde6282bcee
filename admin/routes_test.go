package admin

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Every path in Paths is served with its method when every endpoint is
// set, so the help text built from Paths names only real endpoints.
func TestPathsAreServed(t *testing.T) {
	srv := httptest.NewServer(Handler(Endpoints{
		Ready:    func() error { return nil },
		Gatherer: prometheus.NewRegistry(),
		Reload:   func() (string, error) { return "", nil },
		HotKeys:  func() any { return []int{} },
		Config:   func() string { return "x\n" },
	}))
	defer srv.Close()
	for _, p := range Paths {
		method, path, ok := strings.Cut(p, " ")
		if !ok {
			t.Fatalf("path %q: want \"METHOD /path\"", p)
		}
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("%s = %d, want 200", p, resp.StatusCode)
		}
	}
}
