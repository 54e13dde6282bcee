package admin

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "rproxy_test_total", Help: "t"})
	reg.MustRegister(c)
	c.Add(3)
	var ready, reload error
	var note string
	srv := httptest.NewServer(Handler(Endpoints{
		Ready:    func() error { return ready },
		Gatherer: reg,
		Reload:   func() (string, error) { return note, reload },
		HotKeys:  func() any { return []map[string]any{{"key": "k", "rate": 12.5}} },
		Config:   func() string { return "listen: x\n" },
	}))
	defer srv.Close()
	get := func(method, path string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	cases := []struct {
		method, path string
		code         int
		body         string
	}{
		{"GET", "/healthz", 200, "ok"},
		{"GET", "/readyz", 200, "ready"},
		{"GET", "/metrics", 200, "rproxy_test_total 3"},
		{"POST", "/reload", 200, "reloaded"},
		{"GET", "/reload", 405, ""},
		{"GET", "/hotkeys", 200, `[{"key":"k","rate":12.5}]`},
		{"GET", "/config", 200, "listen: x"},
	}
	for _, tc := range cases {
		if code, body := get(tc.method, tc.path); code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("%s %s = %d %q, want %d containing %q", tc.method, tc.path, code, body, tc.code, tc.body)
		}
	}
	note = "not applied until restart: listen"
	if code, body := get("POST", "/reload"); code != 200 || body != "reloaded\nnot applied until restart: listen\n" {
		t.Errorf("reload with keys needing a restart = %d %q", code, body)
	}
	ready = errors.New("upstream down")
	reload = errors.New("line 3: bad rule")
	if code, body := get("GET", "/readyz"); code != 503 || !strings.Contains(body, "upstream down") {
		t.Errorf("readyz when not ready = %d %q", code, body)
	}
	if code, body := get("POST", "/reload"); code != 400 || !strings.Contains(body, "line 3: bad rule") || !strings.Contains(body, "unchanged") {
		t.Errorf("failed reload = %d %q", code, body)
	}
}

func TestToken(t *testing.T) {
	srv := httptest.NewServer(Handler(Endpoints{
		Ready:    func() error { return nil },
		Gatherer: prometheus.NewRegistry(),
		Config:   func() string { return "x\n" },
		Token:    "s3cret",
	}))
	defer srv.Close()
	status := func(path, auth string) int {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, tc := range []struct {
		path, auth string
		want       int
	}{
		{"/healthz", "", 200}, {"/readyz", "", 200},
		{"/config", "", 401}, {"/metrics", "Bearer wrong", 401}, {"/debug/pprof/", "", 401},
		{"/config", "Bearer s3cret", 200}, {"/metrics", "Bearer s3cret", 200},
	} {
		if got := status(tc.path, tc.auth); got != tc.want {
			t.Errorf("GET %s (auth %q) = %d, want %d", tc.path, tc.auth, got, tc.want)
		}
	}
}
