package config

import (
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/rproxy/rproxy/internal/tlstest"
)

const exampleFile = "rproxy.example.yaml"

func mustParse(t *testing.T, src string) Config {
	t.Helper()
	c, err := Parse([]byte(src), "test.yaml")
	if err != nil {
		t.Fatalf("Parse(%q): %v", src, err)
	}
	return c
}

// parseErr parses src, requires an error and requires it to contain every
// one of want.
func parseErr(t *testing.T, src string, want ...string) error {
	t.Helper()
	_, err := Parse([]byte(src), "rproxy.yaml")
	if err == nil {
		t.Fatalf("Parse(%q): no error, want one containing %q", src, want)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Parse(%q) error:\n%v\nwant it to contain %q", src, err, w)
		}
	}
	return err
}

func TestDefaultIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestExampleEqualsDefault(t *testing.T) {
	c, err := Load(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Errorf("%s differs from Default():\nexample:\n%s\ndefault:\n%s", exampleFile, c, Default())
	}
}

// yamlPaths lists every yaml key of Config with its dotted path, in
// declaration order.
func yamlPaths() []string {
	var paths []string
	walkFields(reflect.TypeFor[Config](), "", func(path string, _ reflect.StructField) {
		paths = append(paths, path)
	})
	return paths
}

// filePaths lists the dotted key paths of a YAML file in file order.
func filePaths(t *testing.T, data []byte) []string {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var paths []string
	var walk func(n *yaml.Node, prefix string)
	walk = func(n *yaml.Node, prefix string) {
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(c, prefix)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				p := join(prefix, n.Content[i].Value)
				paths = append(paths, p)
				walk(n.Content[i+1], p)
			}
		}
	}
	walk(&doc, "")
	return paths
}

func TestExampleHasEveryKeyInOrder(t *testing.T) {
	data, err := os.ReadFile(exampleFile)
	if err != nil {
		t.Fatal(err)
	}
	want := yamlPaths()
	if len(want) != 103 {
		t.Errorf("Config has %d yaml keys, test expects 103: %v", len(want), want)
	}
	got := filePaths(t, data)
	for _, p := range want {
		if !slices.Contains(got, p) {
			t.Errorf("%s lacks key %s", exampleFile, p)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s keys (or their order) differ from Config:\n got %v\nwant %v", exampleFile, got, want)
	}
	// Every key line carries a one-line comment.
	for i, line := range strings.Split(string(data), "\n") {
		trim := strings.TrimSpace(line)
		if trim == "" || strings.HasPrefix(trim, "#") || strings.HasSuffix(trim, ":") {
			continue
		}
		if !strings.Contains(line, " # ") {
			t.Errorf("%s:%d: key without a comment: %s", exampleFile, i+1, line)
		}
	}
}

func TestREADMEHasEveryKey(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range yamlPaths() {
		if !strings.Contains(string(data), "`"+p+"`") {
			t.Errorf("README.md lacks key `%s`", p)
		}
	}
}

// TestDocumentedDefaults parses each key's documented default, as a file
// setting only that key, and expects Default(): a default changed in code
// and not in the tables (or the other way round) fails here.
func TestDocumentedDefaults(t *testing.T) {
	for _, doc := range []struct {
		file string
		col  int // the default's column
		min  int // rows with one key each
	}{{"README.md", 2, 87}, {"../docs/configuration.md", 1, 54}} {
		data, err := os.ReadFile(doc.file)
		if err != nil {
			t.Fatal(err)
		}
		checked := 0
		for _, line := range strings.Split(string(data), "\n") {
			cells := strings.Split(line, "|")
			if !strings.HasPrefix(line, "| `") || len(cells) < doc.col+3 {
				continue
			}
			key := strings.Trim(strings.TrimSpace(cells[1]), "`")
			value, ok := firstCode(cells[doc.col+1])
			if !ok || strings.ContainsAny(key, " *") || !slices.Contains(yamlPaths(), key) {
				continue // a section, or a row naming several keys
			}
			parts := strings.Split(key, ".")
			var src strings.Builder
			for i, part := range parts {
				src.WriteString(strings.Repeat("  ", i) + part + ":")
				if i < len(parts)-1 {
					src.WriteString("\n")
				}
			}
			src.WriteString(" " + value + "\n")
			c, err := Parse([]byte(src.String()), doc.file)
			if err != nil {
				t.Errorf("%s: %s's default %s does not parse: %v", doc.file, key, value, err)
				continue
			}
			if !reflect.DeepEqual(c, Default()) {
				t.Errorf("%s: %s's documented default %s is not Default()'s", doc.file, key, value)
			}
			checked++
		}
		if checked < doc.min {
			t.Errorf("%s: only %d defaults checked; the table's format changed?", doc.file, checked)
		}
	}
}

// firstCode returns the first `code span` of a table cell.
func firstCode(cell string) (string, bool) {
	_, rest, ok := strings.Cut(cell, "`")
	if !ok {
		return "", false
	}
	code, _, ok := strings.Cut(rest, "`")
	return code, ok && code != ""
}

func TestEmpty(t *testing.T) {
	for _, src := range []string{"", "\n\n", "# only a comment\n", "---\n", "---\n...\n", "~\n"} {
		if c := mustParse(t, src); !reflect.DeepEqual(c, Default()) {
			t.Errorf("Parse(%q) = %+v, want Default()", src, c)
		}
	}
}

func TestNullSectionKeepsDefaults(t *testing.T) {
	c := mustParse(t, "upstream:\n  # address: x\nlimits: ~\nlisten:\n")
	if !reflect.DeepEqual(c, Default()) {
		t.Errorf("got %+v, want Default()", c)
	}
}

func TestOverlay(t *testing.T) {
	c := mustParse(t, `
listen: ":7000"
admin: "127.0.0.1:9121"
upstream:
  address: redis:6379
  timeout: 250ms
limits:
  max_bulk_len: 1 MB
  max_query_buffer: 4096
  idle_timeout: 5m
log:
  format: json
`)
	want := Default()
	want.Listen = ":7000"
	want.Admin = "127.0.0.1:9121"
	want.Upstream.Address = "redis:6379"
	want.Upstream.Timeout = Duration(250 * time.Millisecond)
	want.Limits.MaxBulkLen = Megabyte
	want.Limits.MaxQueryBuffer = 4 * Kilobyte
	want.Limits.IdleTimeout = Duration(5 * time.Minute)
	want.Log.Format = "json"
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got\n%s\nwant\n%s", c, want)
	}
}

func TestMultipleDocuments(t *testing.T) {
	parseErr(t, "listen: \":1\"\n---\nadmin: \":2\"\n", "config: rproxy.yaml: line 2:", "multiple YAML documents")
	parseErr(t, "listen: \":1\"\n---\n", "multiple YAML documents")
	parseErr(t, "---\n---\nlisten: \":1\"\n", "multiple YAML documents")
}

func TestUnknownKey(t *testing.T) {
	t.Run("top level", func(t *testing.T) {
		parseErr(t, "listen: \":1\"\n\nupstrem:\n  address: x:1\n",
			"config: rproxy.yaml: line 3:", "upstrem", "unknown field")
	})
	t.Run("nested", func(t *testing.T) {
		parseErr(t, "upstream:\n  address: x:1\n  adress: y:1\n",
			"config: rproxy.yaml: line 3:", `"upstream.adress"`, "known fields in upstream: address,")
	})
	t.Run("nested flow", func(t *testing.T) {
		parseErr(t, "log: {level: info, colour: true}\n", "line 1:", "log.colour")
	})
	t.Run("deeper", func(t *testing.T) {
		parseErr(t, "limits:\n  max_clients: 5\n  idle:\n    timeout: 1s\n", "line 3:", "limits.idle")
	})
	t.Run("all reported", func(t *testing.T) {
		parseErr(t, "foo: 1\nlog:\n  lvl: debug\nbar: 2\n",
			"line 1: unknown field \"foo\"", "line 3: unknown field \"log.lvl\"", "line 4: unknown field \"bar\"")
	})
}

func TestDuplicateKey(t *testing.T) {
	parseErr(t, "listen: \":1\"\nlisten: \":2\"\n", "line 2:", "listen")
	parseErr(t, "log:\n  level: info\n  level: warn\n", "line 3:", "level")
}

func TestWrongTypes(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want []string
	}{
		{"upstream:\n  connections: two\n", []string{"line 2:", "upstream.connections", "two"}},
		{"upstream: 5\n", []string{"line 1:", "upstream"}},
		{"upstream: [a, b]\n", []string{"line 1:", "upstream"}},
		{"listen: [a]\n", []string{"line 1:", "listen"}},
		{"log:\n  level: {a: b}\n", []string{"line 2:", "log.level"}},
		{"upstream: {timeout: 1s, connections: abc}\n", []string{"line 1:", "cannot unmarshal !!str `abc` into int"}},
		{"limits:\n  max_clients: 1.5\n", []string{"line 2:", "limits.max_clients must be a whole number, got 1.5"}},
		{"limits:\n  max_clients: 1e3\n", []string{"line 2:", "limits.max_clients must be a whole number"}},
		{"limits:\n  max_clients: 99999999999999999999\n", []string{"line 2:", "limits.max_clients"}},
		{"upstream:\n  timeout: 5\n", []string{"line 2:", "upstream.timeout: use a unit, e.g. 5s"}},
		{"upstream:\n  timeout: 1.5\n", []string{"line 2:", "upstream.timeout: use a unit"}},
		{"upstream:\n  timeout: \"5\"\n", []string{"line 2:", "upstream.timeout: use a unit"}},
		{"upstream: {dial_timeout: 3}\n", []string{"line 1:", "upstream.dial_timeout: use a unit"}},
		{"upstream:\n  timeout: soon\n", []string{"line 2:", "upstream.timeout: invalid duration \"soon\""}},
		{"upstream:\n  timeout: [1s]\n", []string{"line 2:", "upstream.timeout: expected a duration"}},
		{"limits:\n  max_bulk_len: lots\n", []string{"line 2:", "limits.max_bulk_len: invalid size"}},
		{"limits:\n  max_bulk_len: -1\n", []string{"line 2:", "limits.max_bulk_len", "negative"}},
		{"limits:\n  max_bulk_len: 1tb\n", []string{"line 2:", "limits.max_bulk_len", "unknown unit"}},
		{"limits:\n  max_query_buffer: {a: 1}\n", []string{"line 2:", "limits.max_query_buffer: expected a size"}},
		{"just a string\n", []string{"line 1:", "config.Config"}},
		{"listen: \"unterminated\n", []string{"config: rproxy.yaml:"}},
	} {
		parseErr(t, tc.src, tc.want...)
	}
}

func TestSeveralTypeErrorsAllReportedInLineOrder(t *testing.T) {
	err := parseErr(t, "limits: {max_bulk_len: x, max_clients: 2.5}\nupstream:\n  timeout: 5\n  connections: x\n",
		"limits.max_bulk_len", "limits.max_clients", "upstream.timeout", "upstream.connections")
	lines := strings.Split(err.Error(), "\n")
	if len(lines) != 4 {
		t.Fatalf("want 4 error lines, got %d:\n%v", len(lines), err)
	}
	for i, l := range lines {
		if !strings.HasPrefix(l, "config: rproxy.yaml: line ") {
			t.Errorf("line %d %q lacks the config: file: line prefix", i, l)
		}
	}
	if !strings.Contains(lines[3], "line 4") {
		t.Errorf("errors not in line order:\n%v", err)
	}
}

func TestValidateRules(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		want   string // "" = valid
	}{
		{"listen empty", func(c *Config) { c.Listen = "" }, `listen must be host:port, got ""`},
		{"listen no port", func(c *Config) { c.Listen = "localhost" }, "listen must be host:port"},
		{"listen bad port", func(c *Config) { c.Listen = "localhost:http" }, "listen must have a port between 0 and 65535"},
		{"listen port 0", func(c *Config) { c.Listen = "127.0.0.1:0" }, ""},
		{"listen all interfaces", func(c *Config) { c.Listen = ":6380" }, ""},
		{"listen ipv6", func(c *Config) { c.Listen = "[::1]:6380" }, ""},
		{"admin on", func(c *Config) { c.Admin = "127.0.0.1:9121" }, ""},
		{"admin bad", func(c *Config) { c.Admin = "9121" }, "admin must be host:port"},
		// Protected admin: off loopback it needs a token, or an explicit opt-out.
		{"admin all interfaces", func(c *Config) { c.Admin = ":9121" }, "admin :9121 is not a loopback address and admin_token_file is not set"},
		{"admin 0.0.0.0", func(c *Config) { c.Admin = "0.0.0.0:9121" }, "set admin_token_file, bind admin to 127.0.0.1, or set admin_allow_unauthenticated: true"},
		{"admin private", func(c *Config) { c.Admin = "10.0.0.12:9121" }, "admin 10.0.0.12:9121 is not a loopback address"},
		{"admin host name", func(c *Config) { c.Admin = "node1:9121" }, "is not a loopback address"},
		{"admin ipv6 loopback", func(c *Config) { c.Admin = "[::1]:9121" }, ""},
		{"admin localhost", func(c *Config) { c.Admin = "localhost:9121" }, ""},
		{"admin 127.0.0.2", func(c *Config) { c.Admin = "127.0.0.2:9121" }, ""},
		{"admin with token", func(c *Config) { c.Admin, c.AdminTokenFile = "0.0.0.0:9121", "/run/secrets/token" }, ""},
		{"admin explicitly open", func(c *Config) { c.Admin, c.AdminAllowUnauthenticated = "0.0.0.0:9121", true }, ""},
		{"address empty", func(c *Config) { c.Upstream.Address = "" }, "upstream.address must be host:port"},
		{"address port 0", func(c *Config) { c.Upstream.Address = "redis:0" }, "upstream.address must have a port between 1 and 65535"},
		{"address port big", func(c *Config) { c.Upstream.Address = "redis:65536" }, "upstream.address must have a port"},
		{"sentinel no name", func(c *Config) {
			c.Upstream.Mode = "sentinel"
			c.Upstream.Sentinel.Addresses = []string{"127.0.0.1:26379"}
		}, "upstream.sentinel.master_name must be set"},
		{"sentinel no addresses", func(c *Config) { c.Upstream.Mode = "sentinel"; c.Upstream.Sentinel.MasterName = "m" }, "upstream.sentinel.addresses must name at least one Sentinel"},
		{"sentinel bad address", func(c *Config) {
			c.Upstream.Mode = "sentinel"
			c.Upstream.Sentinel.MasterName = "m"
			c.Upstream.Sentinel.Addresses = []string{"nope"}
		}, "upstream.sentinel.addresses[0] must be host:port"},
		{"sentinel tls without upstream tls", func(c *Config) {
			c.Upstream.Mode = "sentinel"
			c.Upstream.Sentinel.MasterName = "m"
			c.Upstream.Sentinel.Addresses = []string{"127.0.0.1:26379"}
			c.Upstream.Sentinel.TLS = true
		}, "upstream.sentinel.tls needs upstream.tls.enabled"},
		{"sentinel replica reads in standalone", func(c *Config) { c.Upstream.Sentinel.ReplicaReadPrefixes = []string{"ro:"} }, "upstream.sentinel needs upstream.mode sentinel"},
		{"sentinel keys in standalone", func(c *Config) { c.Upstream.Sentinel.MasterName = "m" }, "upstream.sentinel needs upstream.mode sentinel"},
		{"mode bad", func(c *Config) { c.Upstream.Mode = "replica" }, `upstream.mode must be standalone, cluster or sentinel, got "replica"`},
		{"announce bad", func(c *Config) { c.Upstream.Mode = "cluster"; c.Upstream.Cluster.Announce = "10.0.0.1" }, "upstream.cluster.announce must be host:port"},
		{"announce standalone", func(c *Config) { c.Upstream.Cluster.Announce = "10.0.0.1:6380" }, "upstream.cluster.announce needs upstream.mode cluster"},
		{"connections 0", func(c *Config) { c.Upstream.Connections = 0 }, "upstream.connections must be between 1 and 64, got 0"},
		{"connections 65", func(c *Config) { c.Upstream.Connections = 65 }, "upstream.connections must be between 1 and 64, got 65"},
		{"connections 1", func(c *Config) { c.Upstream.Connections = 1 }, ""},
		{"backlog_divert 0", func(c *Config) { c.Upstream.BacklogDivert = 0 }, ""},
		{"backlog_divert 64kb", func(c *Config) { c.Upstream.BacklogDivert = 64 * Kilobyte }, ""},
		{"backlog_divert 1kb", func(c *Config) { c.Upstream.BacklogDivert = Kilobyte }, "upstream.backlog_divert must be 0 (off) or at least 64kb, got 1kb"},
		{"stall_divert -1s", func(c *Config) { c.Upstream.StallDivert = Duration(-time.Second) }, "upstream.stall_divert must be 0 (off) or more, got -1s"},
		{"connections 64", func(c *Config) { c.Upstream.Connections = 64 }, ""},
		{"dial_timeout 0", func(c *Config) { c.Upstream.DialTimeout = 0 }, "upstream.dial_timeout must be greater than 0, got 0s"},
		{"timeout 0", func(c *Config) { c.Upstream.Timeout = 0 }, "upstream.timeout must be greater than 0, got 0s"},
		{"timeout negative", func(c *Config) { c.Upstream.Timeout = Duration(-time.Second) }, "upstream.timeout must be greater than 0, got -1s"},
		{"backoff_min 0", func(c *Config) { c.Upstream.BackoffMin = 0 }, "upstream.reconnect_backoff_min must be greater than 0"},
		{"backoff_max < min", func(c *Config) { c.Upstream.BackoffMax = Duration(10 * time.Millisecond) },
			"upstream.reconnect_backoff_max must be at least upstream.reconnect_backoff_min (50ms), got 10ms"},
		{"backoff_max = min", func(c *Config) { c.Upstream.BackoffMax = c.Upstream.BackoffMin }, ""},
		{"max_clients 0", func(c *Config) { c.Limits.MaxClients = 0 }, "limits.max_clients must be at least 1, got 0"},
		{"max_clients 1", func(c *Config) { c.Limits.MaxClients = 1 }, ""},
		{"max_bulk_len small", func(c *Config) { c.Limits.MaxBulkLen = 1023 }, "limits.max_bulk_len must be at least 1kb, got 1023"},
		{"max_bulk_len 1kb", func(c *Config) { c.Limits.MaxBulkLen = Kilobyte }, ""},
		{"max_query_buffer small", func(c *Config) { c.Limits.MaxQueryBuffer = 0 }, "limits.max_query_buffer must be at least 1kb, got 0"},
		{"max_query_buffer < max_bulk_len", func(c *Config) { c.Limits.MaxQueryBuffer = Kilobyte }, ""},
		{"idle_timeout negative", func(c *Config) { c.Limits.IdleTimeout = Duration(-time.Second) }, "limits.idle_timeout must not be negative"},
		{"idle_timeout set", func(c *Config) { c.Limits.IdleTimeout = Duration(time.Minute) }, ""},
		{"shutdown_drain negative", func(c *Config) { c.Limits.ShutdownDrain = -1 }, "limits.shutdown_drain must not be negative"},
		{"shutdown_drain 0", func(c *Config) { c.Limits.ShutdownDrain = 0 }, ""},
		{"level bad", func(c *Config) { c.Log.Level = "INFO" }, `log.level must be one of debug, info, warn, error, got "INFO"`},
		{"level empty", func(c *Config) { c.Log.Level = "" }, "log.level must be one of"},
		{"format bad", func(c *Config) { c.Log.Format = "text" }, `log.format must be one of auto, json, console, got "text"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mutate(&c)
			err := c.Validate()
			if tc.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want error containing %q", err, tc.want)
			}
			if strings.Count(err.Error(), "\n") != 0 {
				t.Errorf("want exactly one problem, got:\n%v", err)
			}
		})
	}
}

func TestValidateCollectsAll(t *testing.T) {
	c := Default()
	c.Upstream.Connections = 0
	c.Limits.MaxClients = 0
	c.Log.Format = "xml"
	err := c.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, w := range []string{"upstream.connections", "limits.max_clients", "log.format"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error lacks %s:\n%v", w, err)
		}
	}
	if j, ok := err.(interface{ Unwrap() []error }); !ok || len(j.Unwrap()) != 3 {
		t.Errorf("want 3 joined errors, got %#v", err)
	}
}

func TestParseRunsValidate(t *testing.T) {
	parseErr(t, "upstream:\n  connections: 0\n  reconnect_backoff_max: 1ms\nlog:\n  level: loud\n",
		"config: rproxy.yaml: upstream.connections must be between 1 and 64, got 0",
		"config: rproxy.yaml: upstream.reconnect_backoff_max must be at least",
		"config: rproxy.yaml: log.level must be one of")
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rproxy.yaml")
	if err := os.WriteFile(path, []byte("upstream:\n  connections: 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Upstream.Connections != 4 {
		t.Errorf("connections = %d, want 4", c.Upstream.Connections)
	}

	if err := os.WriteFile(path, []byte("\n\nupstream:\n  connectons: 4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Load(path)
	if err == nil || !strings.Contains(err.Error(), "config: "+path+": line 4: ") || !strings.Contains(err.Error(), "connectons") {
		t.Errorf("Load error = %v, want it to name the file, line 4 and connectons", err)
	}

	_, err = Load(filepath.Join(dir, "missing.yaml"))
	if !errors.Is(err, os.ErrNotExist) || !strings.HasPrefix(err.Error(), "config: ") {
		t.Errorf("Load(missing) = %v, want a wrapped os.ErrNotExist", err)
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	c := Default()
	c.Admin = "[::1]:9121"
	c.Limits.MaxBulkLen = 1025
	c.Limits.IdleTimeout = Duration(90 * time.Minute)
	c.Upstream.Timeout = Duration(1500 * time.Microsecond)
	data, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"max_bulk_len: 1025\n", "idle_timeout: 1h30m\n", "timeout: 1.5ms\n", "max_query_buffer: 1gb\n"} {
		if !strings.Contains(string(data), w) {
			t.Errorf("Marshal output lacks %q:\n%s", w, data)
		}
	}
	got, err := Parse(data, "marshalled")
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if !reflect.DeepEqual(got, c) {
		t.Errorf("round trip: got\n%s\nwant\n%s", got, c)
	}
	if c.String() != string(data) {
		t.Errorf("String() != Marshal()")
	}
	if !slices.Equal(filePaths(t, data), yamlPaths()) {
		t.Errorf("Marshal keys differ from Config:\n%s", data)
	}
}

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  string // substring; "" = ok
	}{
		{"250ms", 250 * time.Millisecond, ""},
		{"5s", 5 * time.Second, ""},
		{"1m", time.Minute, ""},
		{"1h30m", 90 * time.Minute, ""},
		{"1.5s", 1500 * time.Millisecond, ""},
		{"100us", 100 * time.Microsecond, ""},
		{" 2s ", 2 * time.Second, ""},
		{"-1s", -time.Second, ""},
		{"0", 0, ""},
		{"0s", 0, ""},
		{"5", 0, "use a unit, e.g. 5s"},
		{"1.5", 0, "use a unit"},
		{"-3", 0, "use a unit"},
		{"", 0, "invalid duration"},
		{"5 s", 0, "invalid duration"},
		{"5sec", 0, "invalid duration"},
		{"forever", 0, "invalid duration"},
		{"9999999h", 0, "invalid duration"},
	} {
		got, err := ParseDuration(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseDuration(%q) = %v, %v; want error containing %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got.D() != tc.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestDurationYAML(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want time.Duration
		err  string
	}{
		{"d: 5s", 5 * time.Second, ""},
		{"d: \"250ms\"", 250 * time.Millisecond, ""},
		{"d: 0", 0, ""},
		{"d: 5", 0, "line 1, column 4: use a unit, e.g. 5s"},
		{"d: 0x10", 0, "use a unit"},
		{"d: true", 0, "invalid duration"},
		{"d: [1s]", 0, "expected a duration"},
	} {
		var v struct{ D Duration }
		err := yaml.Unmarshal([]byte(tc.src), &v)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err = %v, want %q", tc.src, err, tc.err)
			}
			continue
		}
		if err != nil || v.D.D() != tc.want {
			t.Errorf("%q: got %v, %v; want %v", tc.src, v.D, err, tc.want)
		}
	}
	for d, want := range map[time.Duration]string{
		0:                         "0s",
		5 * time.Second:           "5s",
		50 * time.Millisecond:     "50ms",
		time.Minute:               "1m",
		90 * time.Second:          "1m30s",
		2 * time.Hour:             "2h",
		2*time.Hour + time.Minute: "2h1m",
		time.Hour + time.Second:   "1h0m1s",
	} {
		out, err := yaml.Marshal(Duration(d))
		if err != nil || string(out) != want+"\n" {
			t.Errorf("Marshal(%v) = %q, %v; want %q", d, out, err, want)
		}
		back, err := ParseDuration(want)
		if err != nil || back.D() != d {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", want, back, err, d)
		}
	}
}

func TestParseByteSize(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		err  string
	}{
		{"0", 0, ""},
		{"1024", 1024, ""},
		{"10b", 10, ""},
		{"10B", 10, ""},
		{"64KB", 64 << 10, ""},
		{"64kb", 64 << 10, ""},
		{"64Kb", 64 << 10, ""},
		{"512mb", 512 << 20, ""},
		{"1 GB", 1 << 30, ""},
		{"1   gb", 1 << 30, ""},
		{" 2gb ", 2 << 30, ""},
		{"8589934591gb", 8589934591 << 30, ""},
		{"9223372036854775807", 9223372036854775807, ""},
		{"9223372036854775808", 0, "too large"},
		{"8589934592gb", 0, "too large"},
		{"99999999999999999999999kb", 0, "too large"},
		{"-1", 0, "negative"},
		{"-1kb", 0, "negative"},
		{"", 0, "invalid size"},
		{"kb", 0, "invalid size"},
		{"1.5mb", 0, "unknown unit"},
		{"1k", 0, "unknown unit"},
		{"1tb", 0, "unknown unit \"tb\""},
		{"1 kb extra", 0, "unknown unit"},
		{"0x10", 0, "unknown unit"},
	} {
		got, err := ParseByteSize(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseByteSize(%q) = %v, %v; want error containing %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got.Bytes() != tc.want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestByteSizeYAML(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want int64
		err  string
	}{
		{"s: 4096", 4096, ""},
		{"s: 512mb", 512 << 20, ""},
		{"s: \"1 GB\"", 1 << 30, ""},
		{"s: 64KB", 64 << 10, ""},
		{"s: -5", 0, "line 1, column 4: invalid size \"-5\": must not be negative"},
		{"s: 1.5", 0, "invalid size"},
		{"s: {a: 1}", 0, "expected a size"},
	} {
		var v struct{ S ByteSize }
		err := yaml.Unmarshal([]byte(tc.src), &v)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err = %v, want %q", tc.src, err, tc.err)
			}
			continue
		}
		if err != nil || v.S.Bytes() != tc.want {
			t.Errorf("%q: got %d, %v; want %d", tc.src, v.S, err, tc.want)
		}
	}
	for b, want := range map[ByteSize]string{
		0:               "0",
		1000:            "1000",
		1024:            "1kb",
		1536:            "1536",
		512 * Megabyte:  "512mb",
		Gigabyte:        "1gb",
		3 * Gigabyte:    "3gb",
		Gigabyte + 1024: "1048577kb",
	} {
		out, err := yaml.Marshal(b)
		if err != nil || string(out) != want+"\n" {
			t.Errorf("Marshal(%d) = %q, %v; want %q", b, out, err, want)
		}
		back, err := ParseByteSize(want)
		if err != nil || back != b {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", want, back, err, b)
		}
	}
}

func TestUpstreamPassword(t *testing.T) {
	files := map[string]string{"/run/pw": "s3cret\n", "/run/empty": "\n"}
	readFile := func(p string) ([]byte, error) {
		if v, ok := files[p]; ok {
			return []byte(v), nil
		}
		return nil, os.ErrNotExist
	}
	env := map[string]string{"RP_PW": "fromenv"}
	getenv := func(k string) string { return env[k] }
	cases := []struct {
		u       Upstream
		want    string
		wantErr string
	}{
		{Upstream{}, "", ""},
		{Upstream{PasswordFile: "/run/pw"}, "s3cret", ""},
		{Upstream{PasswordEnv: "RP_PW"}, "fromenv", ""},
		{Upstream{PasswordFile: "/run/empty"}, "", "is empty"},
		{Upstream{PasswordFile: "/nope"}, "", "password_file"},
		{Upstream{PasswordEnv: "UNSET"}, "", "empty or unset"},
	}
	for _, c := range cases {
		got, err := c.u.Password(readFile, getenv)
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%+v: err %v, want %q", c.u, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%+v: got %q, %v; want %q", c.u, got, err, c.want)
		}
	}
	if _, err := Parse([]byte("upstream:\n  password_file: /a\n  password_env: B\n"), "x.yaml"); err == nil || !strings.Contains(err.Error(), "both set") {
		t.Errorf("file and env both set: %v", err)
	}
}

func TestAuthValidation(t *testing.T) {
	good := "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8" // sha256("password")
	if c, err := Parse([]byte("auth:\n  mode: proxy\n  users:\n    alice: "+good+"\n"), "x.yaml"); err != nil || c.Auth.Users["alice"] != good {
		t.Fatalf("valid proxy auth: %+v, %v", c.Auth, err)
	}
	for src, want := range map[string]string{
		"auth:\n  mode: proxy\n":                                      "needs at least one user",
		"auth:\n  mode: proxy\n  users:\n    bob: abc\n":              "auth.users.bob must be the SHA-256",
		"auth:\n  mode: none\n  users:\n    bob: " + good + "\n":      "auth.mode is none",
		"auth:\n  mode: sideways\n":                                   "auth.mode must be none, proxy or passthrough",
		"auth:\n  mode: passthrough\n  users:\n    b: " + good + "\n": "Redis checks the passwords",
	} {
		if _, err := Parse([]byte(src), "x.yaml"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want %q", src, err, want)
		}
	}
}

func TestCoalesceCommandsEmptyValue(t *testing.T) {
	c := mustParse(t, "coalesce:\n  commands:\n")
	if !reflect.DeepEqual(c.Coalesce.Commands, []string{"get"}) {
		t.Fatalf("empty value: %q, want the default [get]", c.Coalesce.Commands)
	}
	c = mustParse(t, "coalesce:\n  commands: []\n")
	if c.Coalesce.Commands == nil || len(c.Coalesce.Commands) != 0 {
		t.Fatalf("[]: %q, want empty (coalescing off)", c.Coalesce.Commands)
	}
}

func TestPolicySection(t *testing.T) {
	c, err := Parse([]byte(`
policy:
  rules:
    - name: admins-flush
      commands: [flushall]
      args: [async]
      users: [admin]
      action: allow
    - name: no-big-del
      commands: [del]
      keys: ["big:*"]
      action: rewrite
      rewrite_to: unlink
jitter:
  max_fraction: 0.05
  exclude: ["lock:*"]
`), "t.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pc := c.PolicyConfig()
	if len(pc.Rules) != 2 || pc.Rules[1].RewriteTo != "unlink" || pc.Rules[0].Users[0] != "admin" || pc.NoDefaults {
		t.Fatalf("policy config %+v", pc)
	}
	if pc.Jitter.MaxFraction != 0.05 || pc.Jitter.Exclude[0] != "lock:*" || pc.Jitter.Disabled {
		t.Fatalf("jitter config %+v", pc.Jitter)
	}
	if c.Auth.Mode = "passthrough"; !c.PolicyConfig().Passthrough {
		t.Error("auth.mode passthrough does not reach the policy (its credential rules then cover unauthenticated clients only)")
	}
	_, err = Parse([]byte("policy:\n  rules:\n    - name: x\n      commands: [get]\n      action: explode\n"), "t.yaml")
	if err == nil || !strings.Contains(err.Error(), "config: t.yaml: policy: rules[0] (x)") {
		t.Fatalf("bad action: %v", err)
	}
	_, err = Parse([]byte("jitter:\n  max_fraction: 0\n"), "t.yaml")
	if err == nil || !strings.Contains(err.Error(), "jitter.max_fraction") {
		t.Fatalf("zero fraction: %v", err)
	}
	// EXPIRE is never jittered any more: an old file asking for it is told,
	// not silently ignored; an empty list (the old example) still loads.
	_, err = Parse([]byte("jitter:\n  expire_keys: [\"cache:*\"]\n"), "t.yaml")
	if err == nil || !strings.Contains(err.Error(), "jitter.expire_keys is no longer supported") {
		t.Fatalf("expire_keys set: %v", err)
	}
	if _, err = Parse([]byte("jitter:\n  expire_keys: []\n"), "t.yaml"); err != nil {
		t.Fatalf("expire_keys empty: %v", err)
	}
}

func TestRedacted(t *testing.T) {
	c := Default()
	c.Auth.Mode = "proxy"
	c.Auth.Users = map[string]string{"app": "5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"}
	out := c.Redacted().String()
	if strings.Contains(out, "5e884898") || !strings.Contains(out, "app: <redacted>") {
		t.Fatalf("redacted config:\n%s", out)
	}
	if c.Auth.Users["app"] == "<redacted>" {
		t.Fatal("Redacted changed the original")
	}
}

func TestTLSValidation(t *testing.T) {
	c := mustParse(t, "tls:\n  cert_file: /c.pem\n  key_file: /k.pem\n  client_ca_file: /ca.pem\n  min_version: 1.3\n"+
		"upstream:\n  tls:\n    enabled: true\n    ca_file: /ca.pem\n    cert_file: /uc.pem\n    key_file: /uk.pem\n    server_name: redis.internal\n")
	if c.TLS.MinVersion != "1.3" || c.TLS.ClientCAFile != "/ca.pem" || !c.Upstream.TLS.Enabled || c.Upstream.TLS.ServerName != "redis.internal" {
		t.Fatalf("parsed %+v %+v", c.TLS, c.Upstream.TLS)
	}
	mustParse(t, "upstream:\n  tls:\n    enabled: true\n    insecure_skip_verify: true\n")
	for src, want := range map[string]string{
		"tls:\n  cert_file: /c.pem\n":                                                  "tls.cert_file is set without tls.key_file",
		"tls:\n  key_file: /k.pem\n":                                                   "tls.key_file is set without tls.cert_file",
		"tls:\n  client_ca_file: /ca.pem\n":                                            "tls.client_ca_file needs tls.cert_file and tls.key_file",
		"tls:\n  min_version: 1.1\n":                                                   `tls.min_version must be 1.2 or 1.3, got "1.1"`,
		"upstream:\n  tls:\n    ca_file: /ca.pem\n":                                    "upstream.tls.ca_file is set but upstream.tls.enabled is false",
		"upstream:\n  tls:\n    insecure_skip_verify: true\n":                          "upstream.tls.insecure_skip_verify is set but upstream.tls.enabled is false",
		"upstream:\n  tls:\n    enabled: true\n    cert_file: /c\n":                    "upstream.tls.cert_file is set without upstream.tls.key_file",
		"upstream:\n  tls: {enabled: true, ca_file: /c, insecure_skip_verify: true}\n": "upstream.tls.ca_file would be ignored",
	} {
		parseErr(t, src, want)
	}
}

// TestTLSLoad reads real certificates: errors name the key and the file,
// and never quote a file.
func TestTLSLoad(t *testing.T) {
	certs := tlstest.New(t)
	other := tlstest.New(t)
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600)
	missing := filepath.Join(dir, "missing.pem")

	srv := TLS{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, ClientCAFile: certs.CA, MinVersion: "1.3"}
	sc, err := srv.ServerConfig(os.ReadFile)
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Certificates) != 1 || sc.MinVersion != tls.VersionTLS13 || sc.ClientAuth != tls.RequireAndVerifyClientCert || sc.ClientCAs == nil {
		t.Fatalf("server config %+v", sc)
	}
	if sc, err := (TLS{MinVersion: "1.2"}).ServerConfig(os.ReadFile); sc != nil || err != nil {
		t.Fatalf("no tls section: %v, %v; want nil, nil", sc, err)
	}

	up := Default().Upstream
	up.Address = "redis.internal:6380"
	up.TLS = UpstreamTLS{Enabled: true, CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}
	uc, err := up.TLSConfig(os.ReadFile)
	if err != nil {
		t.Fatal(err)
	}
	if uc.ServerName != "redis.internal" || uc.RootCAs == nil || len(uc.Certificates) != 1 || uc.InsecureSkipVerify {
		t.Fatalf("upstream config %+v", uc)
	}
	sentinel := up
	sentinel.Mode = "sentinel" // upstream.address unused: each server by the host it is dialled at
	if uc, _ := sentinel.TLSConfig(os.ReadFile); uc.ServerName != "" {
		t.Fatalf("mode sentinel without server_name: ServerName %q, want none", uc.ServerName)
	}
	if other := sentinel.TLSOtherName(); other != "" {
		t.Fatalf("mode sentinel: other name %q, want none", other)
	}
	cluster := up
	cluster.Mode = "cluster" // each node by the host it is dialled at, or the seed's
	if uc, _ := cluster.TLSConfig(os.ReadFile); uc.ServerName != "" || cluster.TLSOtherName() != "redis.internal" {
		t.Fatalf("mode cluster without server_name: ServerName %q, other name %q; want none, redis.internal",
			uc.ServerName, cluster.TLSOtherName())
	}
	if other := up.TLSOtherName(); other != "" {
		t.Fatalf("mode standalone: other name %q, want none", other)
	}
	up.TLS.ServerName = "other.name"
	if uc, _ := up.TLSConfig(os.ReadFile); uc.ServerName != "other.name" {
		t.Fatalf("server_name %q", uc.ServerName)
	}
	cluster.TLS.ServerName = "other.name"
	if uc, _ := cluster.TLSConfig(os.ReadFile); uc.ServerName != "other.name" || cluster.TLSOtherName() != "" {
		t.Fatalf("mode cluster with server_name: ServerName %q, other name %q", uc.ServerName, cluster.TLSOtherName())
	}
	if uc, err := Default().Upstream.TLSConfig(os.ReadFile); uc != nil || err != nil {
		t.Fatalf("upstream.tls off: %v, %v; want nil, nil", uc, err)
	}

	for _, tc := range []struct {
		name string
		load func() error
		want []string
	}{
		{"missing cert", func() error {
			_, err := TLS{CertFile: missing, KeyFile: certs.ServerKey, MinVersion: "1.2"}.ServerConfig(os.ReadFile)
			return err
		}, []string{"tls.cert_file:", missing, "no such file"}},
		{"missing key", func() error {
			_, err := TLS{CertFile: certs.ServerCert, KeyFile: missing, MinVersion: "1.2"}.ServerConfig(os.ReadFile)
			return err
		}, []string{"tls.key_file:", missing}},
		{"key of another certificate", func() error {
			_, err := TLS{CertFile: certs.ServerCert, KeyFile: other.ServerKey, MinVersion: "1.2"}.ServerConfig(os.ReadFile)
			return err
		}, []string{"tls.cert_file " + certs.ServerCert, "tls.key_file " + other.ServerKey, "private key does not match public key"}},
		{"cert not PEM", func() error {
			_, err := TLS{CertFile: notPEM, KeyFile: certs.ServerKey, MinVersion: "1.2"}.ServerConfig(os.ReadFile)
			return err
		}, []string{"tls.cert_file " + notPEM, "PEM"}},
		{"client CA not PEM", func() error {
			_, err := TLS{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, ClientCAFile: notPEM, MinVersion: "1.2"}.ServerConfig(os.ReadFile)
			return err
		}, []string{"tls.client_ca_file " + notPEM + ": no PEM certificate found"}},
		{"upstream CA missing", func() error {
			u := Default().Upstream
			u.TLS = UpstreamTLS{Enabled: true, CAFile: missing}
			_, err := u.TLSConfig(os.ReadFile)
			return err
		}, []string{"upstream.tls.ca_file:", missing}},
		{"upstream key swapped with cert", func() error {
			u := Default().Upstream
			u.TLS = UpstreamTLS{Enabled: true, CertFile: certs.ClientKey, KeyFile: certs.ClientCert}
			_, err := u.TLSConfig(os.ReadFile)
			return err
		}, []string{"upstream.tls.cert_file " + certs.ClientKey, "upstream.tls.key_file " + certs.ClientCert}},
	} {
		err := tc.load()
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", tc.name, err, w)
			}
		}
		for _, f := range []string{certs.ServerKey, certs.ClientKey, other.ServerKey} {
			if key, _ := os.ReadFile(f); strings.Contains(err.Error(), pemBody(key)) {
				t.Errorf("%s: error quotes the key in %s", tc.name, f)
			}
		}
	}
}

// pemBody returns the first base64 line of a PEM file.
func pemBody(pem []byte) string {
	lines := strings.Split(string(pem), "\n")
	if len(lines) < 2 {
		return string(pem)
	}
	return lines[1]
}

// TestRedactedTLS: the TLS keys hold file names only; Redacted shows them
// and nothing of the files.
func TestRedactedTLS(t *testing.T) {
	certs := tlstest.New(t)
	c := Default()
	c.TLS = TLS{CertFile: certs.ServerCert, KeyFile: certs.ServerKey, ClientCAFile: certs.CA, MinVersion: "1.2"}
	c.Upstream.TLS = UpstreamTLS{Enabled: true, CAFile: certs.CA, CertFile: certs.ClientCert, KeyFile: certs.ClientKey}
	out := c.Redacted().String()
	for _, f := range []string{certs.ServerKey, certs.ClientKey} {
		key, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out, pemBody(key)) || strings.Contains(out, "PRIVATE KEY") {
			t.Fatalf("redacted config shows the key in %s:\n%s", f, out)
		}
		if !strings.Contains(out, f) {
			t.Fatalf("redacted config lacks the key's file name %s:\n%s", f, out)
		}
	}
}

// TestMerge: reloadable keys take the new value; the others keep the
// running one and are listed when they differ, in file order.
func TestMerge(t *testing.T) {
	running := Default()
	next := Default()
	next.Listen = "127.0.0.1:7000"                // not reloadable
	next.Upstream.Timeout = Duration(time.Minute) // not reloadable, in a section
	next.HotKeys.Threshold = 7                    // reloadable
	next.Jitter.Exclude = []string{"x:*"}         // reloadable list
	next.Auth.Users = map[string]string{"a": strings.Repeat("0", 64)}
	next.Log.Format = "json" // not reloadable
	reloadable := func(key string) bool {
		return strings.HasPrefix(key, "hotkeys.") || strings.HasPrefix(key, "jitter.") || key == "log.level"
	}
	merged, pending := Merge(running, next, reloadable)
	if want := []string{"listen", "upstream.timeout", "auth.users", "log.format"}; !slices.Equal(pending, want) {
		t.Fatalf("pending = %v, want %v", pending, want)
	}
	if merged.Listen != running.Listen || merged.Upstream.Timeout != running.Upstream.Timeout ||
		merged.Auth.Users != nil || merged.Log.Format != running.Log.Format {
		t.Fatalf("a key needing a restart took the new value: %+v", merged)
	}
	if merged.HotKeys.Threshold != 7 || !slices.Equal(merged.Jitter.Exclude, []string{"x:*"}) {
		t.Fatalf("a reloadable key kept the old value: %+v", merged)
	}
	if _, pending := Merge(running, running, reloadable); len(pending) != 0 {
		t.Fatalf("no change, pending %v", pending)
	}
}

func TestSentinelModeParses(t *testing.T) {
	c, err := Parse([]byte("upstream:\n  mode: sentinel\n  sentinel:\n    master_name: mymaster\n    addresses: [\"10.0.0.1:26379\", \"10.0.0.2:26379\"]\n    password_env: SENTINEL_PW\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	if c.Upstream.Sentinel.MasterName != "mymaster" || len(c.Upstream.Sentinel.Addresses) != 2 {
		t.Fatalf("parsed %+v", c.Upstream.Sentinel)
	}
	pw, err := c.Upstream.Sentinel.Password(nil, func(k string) string { return map[string]string{"SENTINEL_PW": "s3cret"}[k] })
	if err != nil || pw != "s3cret" {
		t.Fatalf("Sentinel password %q, %v", pw, err)
	}
}

// TestValidateRunsStageRules: Validate has each stage check the Config
// built for it (stages.go), so a value only a stage refuses fails the file
// (and -check, and a reload) rather than the start. The detector refuses
// an infinite threshold; the file's own check (> 0) lets it through.
func TestValidateRunsStageRules(t *testing.T) {
	_, err := Parse([]byte("hotkeys:\n  threshold: .inf\n"), "f.yaml")
	if err == nil || !strings.Contains(err.Error(), "config: f.yaml: hotkeys: hotkey: detector: threshold must be a positive number") {
		t.Fatalf("Parse(threshold .inf) = %v, want the detector's own refusal under hotkeys", err)
	}
	// The stage's check in the key's terms is not repeated by the stage.
	c := Default()
	c.Limits.MaxClients = 0
	err = c.Validate()
	if err == nil || strings.Count(err.Error(), "\n") != 0 || !strings.Contains(err.Error(), "limits.max_clients must be at least 1") {
		t.Fatalf("Validate(max_clients 0) = %v, want the one file-level problem", err)
	}
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	// The coalescing stage refuses a write; the file has no check of its
	// own for it (before, only the proxy's start did).
	_, err = Parse([]byte("coalesce:\n  commands: [get, SET]\n"), "f.yaml")
	if err == nil || !strings.Contains(err.Error(), `config: f.yaml: coalesce: coalesce: "set" cannot be coalesced`) {
		t.Fatalf("Parse(coalesce.commands [get, SET]) = %v, want the coalescing stage's refusal", err)
	}
}

// limits.idle_park_after: 250ms by default, 0 turns parking off (the proxy's
// negative), a negative value is refused.
func TestIdleParkAfter(t *testing.T) {
	if got := Default().ProxyConfig().IdleParkAfter; got != 250*time.Millisecond {
		t.Errorf("default IdleParkAfter = %v, want 250ms", got)
	}
	c, err := Parse([]byte("limits:\n  idle_park_after: 0s\n"), "f.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := c.ProxyConfig().IdleParkAfter; got >= 0 {
		t.Errorf("idle_park_after 0s maps to %v, want a negative value (never)", got)
	}
	c, err = Parse([]byte("limits:\n  idle_park_after: 250ms\n"), "f.yaml")
	if err != nil || c.ProxyConfig().IdleParkAfter != 250*time.Millisecond {
		t.Errorf("idle_park_after 250ms: %v, %v", c.ProxyConfig().IdleParkAfter, err)
	}
	if _, err := Parse([]byte("limits:\n  idle_park_after: -1s\n"), "f.yaml"); err == nil || !strings.Contains(err.Error(), "limits.idle_park_after must not be negative") {
		t.Errorf("idle_park_after -1s: %v", err)
	}
}
