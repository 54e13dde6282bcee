package proxy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/rproxy/rproxy/config"
	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/policy"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/salt"
)

// Files under deploy/, relative to this package.
const (
	deployConfig    = "../deploy/rproxy.yaml"
	deployUnit      = "../deploy/rproxy.service"
	deployDashboard = "../deploy/grafana/rproxy-dashboard.json"
)

// lintSecret is in every key the traffic of lintTraffic uses, so a label
// value carrying a key is easy to spot.
const lintSecret = "SECRETKEY"

// metricLabels are the only label names rproxy's metrics may carry. Each has
// a small, fixed set of values (or operator-chosen rule names), never keys or
// other client data. A new label goes here only if that holds for it.
var metricLabels = map[string]bool{
	"outcome":  true, // rproxy_proxy_commands_total: forwarded, local, refused
	"reason":   true, // rproxy_proxy_client_closed_by_proxy_total: max_clients, input_limit, idle, write_timeout, tls_handshake, upstream_lost
	"command":  true, // rproxy_proxy_command_calls_total: command table names, "unknown" for others
	"stage":    true, // rproxy_proxy_batch_duration_seconds: client, upstream
	"family":   true, // rproxy_proxy_command_duration_seconds: command families from the command table's flags (read, write, ...)
	"protocol": true, // rproxy_upstream_*: 2, 3
	"node":     true, // rproxy_upstream_cluster_master_up: the masters' addresses
	"kind":     true, // rproxy_upstream_errors_total: dial, read, write, timeout
	"rule":     true, // rproxy_policy_decisions_total: rule names from the config and built-ins
	"action":   true, // rproxy_policy_decisions_total: allow, deny, rewrite, log_*
}

// maxSeriesPerFamily bounds the series of one metric after lintTraffic,
// which uses hundreds of distinct keys: a label on keys would exceed it.
const maxSeriesPerFamily = 64

// lintTraffic starts Redis and a proxy with the default policy, drives
// traffic through every stage (forwarding, pipelining, RESP3, a pinned
// transaction, coalescing, the hot-key tier and its invalidation, policy
// denials, jitter, an input-limit close, an unknown command, and finally an
// upstream crash), and returns the proxy's gathered metric families and
// the keys it used.
func lintTraffic(t *testing.T) ([]*dto.MetricFamily, []string) {
	t.Helper()
	rs := redistest.Start(t)
	p := proxytest.Start(t, rs.Addr, func(c *proxy.Config) {
		pc := policy.DefaultConfig()
		c.Policy = &pc
	})
	c := dialClient(t, p.Addr)

	var keys []string
	for i := 0; i < 200; i++ {
		keys = append(keys, fmt.Sprintf("user:%s:%d", lintSecret, i))
	}
	var batch [][]string
	for _, k := range keys {
		batch = append(batch, []string{"SET", k, "v", "EX", "100"}) // jittered
	}
	lintPipeline(c, batch)
	batch = batch[:0]
	for _, k := range keys {
		batch = append(batch, []string{"GET", k})
	}
	lintPipeline(c, batch)

	// A hot key: read well over hotkeys.threshold (500/s) until the tier
	// serves it, then changed, so Redis sends an invalidation.
	hot := "hot:" + lintSecret
	keys = append(keys, hot)
	c.do("SET", hot, "v1")
	hotGets := make([][]string, 1000)
	for i := range hotGets {
		hotGets[i] = []string{"GET", hot}
	}
	waitFor(t, "a tier hit on "+hot, func() bool {
		lintPipeline(c, hotGets)
		return counterValue(t, p.Registry, "rproxy_hotkey_tier_hits_total", nil) > 0
	})
	c.do("SET", hot, "v2")
	waitFor(t, "an invalidation of "+hot, func() bool {
		return counterValue(t, p.Registry, "rproxy_hotkey_tracking_invalidations_total", nil) > 0
	})

	// Concurrent identical reads from several clients (coalescing).
	done := make(chan string)
	for i := 0; i < 4; i++ {
		cc := dialClient(t, p.Addr)
		go func() {
			r := ""
			for j := 0; j < 50 && r == ""; j++ {
				if got := cc.doErr("GET", keys[0]); !strings.HasPrefix(got, "$1\r\n") {
					r = fmt.Sprintf("GET %s = %q", keys[0], got)
				}
			}
			done <- r
		}()
	}
	for i := 0; i < 4; i++ {
		if r := <-done; r != "" {
			t.Fatal(r)
		}
	}

	if r := c.do("KEYS", lintSecret+"*"); !strings.HasPrefix(r, "-DENIED") {
		t.Fatalf("KEYS = %q, want -DENIED", r)
	}
	c.do("DEL", keys[1]) // big-key probe
	if r := c.do(lintSecret+"_NOSUCHCOMMAND", keys[2]); !strings.HasPrefix(r, "-ERR") {
		t.Fatalf("unknown command = %q", r)
	}
	c.do("MULTI")
	c.do("SET", keys[3], "w")
	if r := c.do("EXEC"); !strings.HasPrefix(r, "*1") {
		t.Fatalf("EXEC = %q", r)
	}
	c3 := dialClient(t, p.Addr)
	c3.do("HELLO", "3")
	c3.do("GET", keys[4])

	// A declared bulk over limits.max_bulk_len closes the client.
	bad := dialClient(t, p.Addr)
	bad.send([]byte("*2\r\n$3\r\nGET\r\n$99999999999\r\n"))
	bad.expectClosed()

	// The upstream crashes: connection errors are counted.
	rs.Kill()
	waitFor(t, "an upstream error", func() bool {
		return counterValue(t, p.Registry, "rproxy_upstream_errors_total", nil) > 0
	})
	c.doErr("GET", keys[5])
	cfams, ckeys := lintClusterTraffic(t)
	return append(lintGather(t, p.Registry), cfams...), append(keys, ckeys...)
}

// lintClusterTraffic drives a cluster-mode rproxy with salted fan-out:
// split commands, a redirect, salted reads, fills and deletes. Its
// salt stage's families and the per-master gauge are returned (the
// others, cluster metrics included, are in lintTraffic's too).
func lintClusterTraffic(t *testing.T) ([]*dto.MetricFamily, []string) {
	t.Helper()
	cl := redistest.StartCluster(t, 3, 0)
	p := startClusterProxy(t, cl, func(c *proxy.Config) {
		c.Salt = &salt.Config{Copies: 3, TTL: 5 * time.Second, Prefixes: []string{"salted:"}}
	})
	c := dialClient(t, p.Addr)
	hot := "salted:" + lintSecret
	keys := []string{hot, "a:" + lintSecret, "b:" + lintSecret}
	c.do("MSET", keys[1], "1", keys[2], "2")
	c.do("SET", hot, "v")
	for range 30 {
		c.do("GET", hot)
	}
	c.do("SET", hot, "w")
	var fams []*dto.MetricFamily
	for _, mf := range lintGather(t, p.Registry) {
		// The rest are in lintTraffic's too.
		if strings.HasPrefix(mf.GetName(), "rproxy_hotkey_salt_") || mf.GetName() == "rproxy_upstream_cluster_master_up" {
			fams = append(fams, mf)
		}
	}
	return fams, keys
}

// lintPipeline sends cmds in one write and reads every reply.
func lintPipeline(c *rawClient, cmds [][]string) {
	c.t.Helper()
	var b []byte
	for _, args := range cmds {
		b = resp.AppendCommandString(b, args...)
	}
	c.send(b)
	for range cmds {
		c.read()
	}
}

func lintGather(t *testing.T, g prometheus.Gatherer) []*dto.MetricFamily {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	return mfs
}

// Every metric rproxy registers follows the Prometheus naming conventions
// (promlint: _total on counters only, base units, help text, snake case).
func TestMetricsLint(t *testing.T) {
	mfs, _ := lintTraffic(t)
	subsystems := map[string]bool{}
	for _, mf := range mfs {
		if parts := strings.SplitN(mf.GetName(), "_", 3); len(parts) == 3 && parts[0] == "rproxy" {
			subsystems[parts[1]] = true
		}
	}
	for _, s := range []string{"proxy", "upstream", "coalesce", "hotkey", "policy"} {
		if !subsystems[s] {
			t.Errorf("no rproxy_%s_* metric gathered: the lint below would not cover it", s)
		}
	}
	problems, err := promlint.NewWithMetricFamilies(mfs).Lint()
	if err != nil {
		t.Fatalf("promlint: %v", err)
	}
	for _, p := range problems {
		t.Errorf("metric name problem in the code (fix the metric, not this test): %s: %s", p.Metric, p.Text)
	}
}

// No label value is ever a key, and every label name is one of a known few,
// each with a small fixed set of values: a label carrying keys (or another
// unbounded value) would fail here.
func TestNoKeyNamesInLabels(t *testing.T) {
	mfs, keys := lintTraffic(t)
	for _, mf := range mfs {
		if n := len(mf.GetMetric()); n > maxSeriesPerFamily {
			t.Errorf("%s has %d series after traffic on %d keys: is a label unbounded?", mf.GetName(), n, len(keys))
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				name, value := l.GetName(), l.GetValue()
				if !metricLabels[name] {
					t.Errorf("%s has label %q, which is not in metricLabels: labels must have a small fixed set of values, never keys (add it there if that holds)", mf.GetName(), name)
				}
				if strings.Contains(strings.ToUpper(value), lintSecret) {
					t.Errorf("%s{%s=%q}: a label value holds a key or command the client sent", mf.GetName(), name, value)
					continue
				}
				for _, k := range keys {
					if strings.Contains(value, k) {
						t.Errorf("%s{%s=%q}: a label value holds the key %q", mf.GetName(), name, value, k)
					}
				}
			}
		}
	}
}

// goRuntimeFamilies are what cmd/rproxy's standard collectors export.
func goRuntimeFamilies(t *testing.T) []*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return lintGather(t, reg)
}

// grafanaDashboard is the part of a Grafana dashboard the tests read.
type grafanaDashboard struct {
	SchemaVersion int            `json:"schemaVersion"`
	UID           string         `json:"uid"`
	Panels        []grafanaPanel `json:"panels"`
	Templating    struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Definition string          `json:"definition"`
			Datasource json.RawMessage `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

type grafanaPanel struct {
	ID         int            `json:"id"`
	Type       string         `json:"type"`
	Title      string         `json:"title"`
	Panels     []grafanaPanel `json:"panels"` // collapsed rows
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos struct {
		X, Y, W, H int
	} `json:"gridPos"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		Expr       string `json:"expr"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
	} `json:"targets"`
}

func loadDashboard(t *testing.T) grafanaDashboard {
	t.Helper()
	b, err := os.ReadFile(deployDashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", deployDashboard, err)
	}
	return d
}

// flatPanels lists every panel, rows' nested panels included.
func flatPanels(ps []grafanaPanel) []grafanaPanel {
	var out []grafanaPanel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flatPanels(p.Panels)...)
	}
	return out
}

var (
	// metricRef finds a metric name of rproxy or of the standard collectors
	// in a PromQL expression, and what follows it.
	metricRef = regexp.MustCompile(`\b((?:rproxy|go|process)_[a-zA-Z0-9_]+)\b(\{[^}]*\})?`)
	// rangeRef finds the range of every range vector.
	rangeRef = regexp.MustCompile(`\[([^\]]+)\]`)
)

// resolveMetric maps a name used in PromQL to its gathered family:
// histograms and summaries are used as name_bucket, name_sum, name_count.
func resolveMetric(byName map[string]*dto.MetricFamily, name string) *dto.MetricFamily {
	if mf := byName[name]; mf != nil {
		return mf
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		if mf := byName[base]; mf != nil {
			switch t := mf.GetType(); {
			case t == dto.MetricType_HISTOGRAM, t == dto.MetricType_SUMMARY && suffix != "_bucket":
				return mf
			}
		}
	}
	return nil
}

// Every metric the Grafana dashboard queries exists in a running rproxy
// (or in the Go and process collectors cmd/rproxy registers), every
// rproxy metric has a panel, and every query follows the instance picker.
func TestDashboardMetricsExist(t *testing.T) {
	d := loadDashboard(t)
	proxyFams, _ := lintTraffic(t)
	byName := map[string]*dto.MetricFamily{}
	for _, mf := range append(proxyFams, goRuntimeFamilies(t)...) {
		byName[mf.GetName()] = mf
	}

	if d.SchemaVersion < 36 || d.UID == "" {
		t.Errorf("schemaVersion %d, uid %q: want a current schema and a fixed uid", d.SchemaVersion, d.UID)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type
		if v.Definition != "" {
			for _, m := range metricRef.FindAllStringSubmatch(v.Definition, -1) {
				if resolveMetric(byName, m[1]) == nil {
					t.Errorf("variable %s queries %s, which rproxy does not export", v.Name, m[1])
				}
			}
		}
	}
	if vars["DS_PROMETHEUS"] != "datasource" || vars["instance"] != "query" {
		t.Errorf("template variables %v: want DS_PROMETHEUS (datasource) and instance (query)", vars)
	}

	used := map[string]bool{}
	ids := map[int]string{}
	exprs := 0
	for _, p := range flatPanels(d.Panels) {
		if prev, dup := ids[p.ID]; dup || p.ID == 0 {
			t.Errorf("panel %q: id %d missing or also used by %q", p.Title, p.ID, prev)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, g)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != "${DS_PROMETHEUS}" {
			t.Errorf("panel %q: datasource uid %q, want ${DS_PROMETHEUS}", p.Title, p.Datasource.UID)
		}
		if p.FieldConfig.Defaults.Unit == "" {
			t.Errorf("panel %q: no unit", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no queries", p.Title)
		}
		for _, tg := range p.Targets {
			exprs++
			if tg.Datasource.UID != "${DS_PROMETHEUS}" {
				t.Errorf("panel %q: query datasource uid %q, want ${DS_PROMETHEUS}", p.Title, tg.Datasource.UID)
			}
			refs := metricRef.FindAllStringSubmatch(tg.Expr, -1)
			if len(refs) == 0 {
				t.Errorf("panel %q: query %q names no rproxy_, go_ or process_ metric", p.Title, tg.Expr)
			}
			for _, m := range refs {
				name, selector := m[1], m[2]
				mf := resolveMetric(byName, name)
				if mf == nil {
					t.Errorf("panel %q queries %s, which rproxy does not export (query %q)", p.Title, name, tg.Expr)
					continue
				}
				used[mf.GetName()] = true
				if !strings.Contains(selector, `instance=~"$instance"`) {
					t.Errorf("panel %q: %s is not filtered by the instance variable (query %q)", p.Title, name, tg.Expr)
				}
			}
			for _, r := range rangeRef.FindAllStringSubmatch(tg.Expr, -1) {
				// Grafana's $__rate_interval is at least four scrape
				// intervals and follows the zoom; a fixed range is empty
				// when the scrape interval is longer, and jagged zoomed out.
				if r[1] != "$__rate_interval" {
					t.Errorf("panel %q: range [%s], want [$__rate_interval] (query %q)", p.Title, r[1], tg.Expr)
				}
			}
		}
	}
	if exprs == 0 {
		t.Fatal("the dashboard has no queries")
	}
	var missing []string
	for _, mf := range proxyFams {
		if name := mf.GetName(); strings.HasPrefix(name, "rproxy_") && !used[name] {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		t.Errorf("rproxy exports metrics no dashboard panel shows; add them to %s: %s", deployDashboard, strings.Join(missing, ", "))
	}
}

// unitSettings reads the Key=Value lines of a systemd unit (the last
// assignment of a key wins, as for the settings used here).
func unitSettings(t *testing.T, path string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	kv := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' || line[0] == '[' {
			continue
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			kv[k] = v
		}
	}
	return kv
}

// enableOptional turns the optional settings of an example config on: a
// line "#key: value" (a "#" directly followed by text) is uncommented, with
// the "# ..." lines of its block if it opens one ("#key:"), and the live
// line with the same key and indentation nearest to it, which it replaces,
// is dropped.
func enableOptional(src string) string {
	lines := strings.Split(src, "\n")
	keyOf := func(l string) string {
		k, _, ok := strings.Cut(l, ":")
		if !ok || strings.TrimSpace(k) == "" || strings.HasPrefix(strings.TrimSpace(k), "-") {
			return ""
		}
		return k // with its indentation
	}
	enabled := map[int]bool{} // uncommented lines
	var starts []int          // uncommented "#key:" lines
	block := ""               // indentation of the block being uncommented, if any
	for i, l := range lines {
		trimmed := strings.TrimLeft(l, " ")
		indent := l[:len(l)-len(trimmed)]
		switch {
		case block != "" && strings.HasPrefix(l, block+"# "):
			lines[i] = indent + trimmed[1:]
			enabled[i] = true
			continue
		case len(trimmed) > 1 && trimmed[0] == '#' && trimmed[1] != ' ' && trimmed[1] != '#':
			lines[i] = indent + trimmed[1:]
			enabled[i] = true
			starts = append(starts, i)
			block = ""
			if strings.HasSuffix(lines[i], ":") {
				block = indent
			}
			continue
		}
		block = ""
	}
	drop := map[int]bool{}
	for _, i := range starts {
		k := keyOf(lines[i])
		best := -1
		for j, l := range lines {
			if k == "" || enabled[j] || keyOf(l) != k {
				continue
			}
			if best < 0 || max(j-i, i-j) < max(best-i, i-best) {
				best = j
			}
		}
		if best >= 0 {
			drop[best] = true
		}
	}
	var out []string
	for i, l := range lines {
		if !drop[i] {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// deploy/rproxy.yaml loads as rproxy loads it, with its optional settings
// off and on, and its policy compiles.
func TestDeployConfigParses(t *testing.T) {
	cfg, err := config.Load(deployConfig)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Admin == "" || !cfg.Policy.Defaults || len(cfg.Policy.Rules) != 0 {
		t.Errorf("admin %q, policy defaults %v, rules %d: want the admin port and the default policy only",
			cfg.Admin, cfg.Policy.Defaults, len(cfg.Policy.Rules))
	}
	if _, err := policy.New(cfg.PolicyConfig(), nil, nil); err != nil {
		t.Errorf("policy: %v", err)
	}

	b, err := os.ReadFile(deployConfig)
	if err != nil {
		t.Fatal(err)
	}
	all, err := config.Parse([]byte(enableOptional(string(b))), deployConfig+" (optional settings on)")
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Policy.Rules) != 1 || all.Listen == cfg.Listen || all.Upstream.Username == "" {
		t.Errorf("optional settings on: rules %+v, listen %q, username %q: the commented examples were not applied",
			all.Policy.Rules, all.Listen, all.Upstream.Username)
	}
	if _, err := policy.New(all.PolicyConfig(), nil, nil); err != nil {
		t.Errorf("policy with the example rule: %v", err)
	}
}

// deploy/rproxy.service and deploy/rproxy.yaml agree: the unit runs that
// config, waits longer than the drain on stop, allows more descriptors
// than clients, and hands the password to the file the config names.
func TestDeployConfigMatchesUnit(t *testing.T) {
	cfg, err := config.Load(deployConfig)
	if err != nil {
		t.Fatal(err)
	}
	u := unitSettings(t, deployUnit)
	if !strings.HasSuffix(u["ExecStart"], " -config /etc/rproxy/rproxy.yaml") {
		t.Errorf("ExecStart=%s: want -config /etc/rproxy/rproxy.yaml", u["ExecStart"])
	}
	if !strings.Contains(u["ExecReload"], "-HUP $MAINPID") {
		t.Errorf("ExecReload=%s: want SIGHUP to the main process", u["ExecReload"])
	}
	stop, err := time.ParseDuration(u["TimeoutStopSec"])
	if err != nil || stop <= cfg.Limits.ShutdownDrain.D() {
		t.Errorf("TimeoutStopSec=%s: want a duration above limits.shutdown_drain (%s)", u["TimeoutStopSec"], cfg.Limits.ShutdownDrain)
	}
	nofile, err := strconv.Atoi(u["LimitNOFILE"])
	if err != nil || nofile <= cfg.Limits.MaxClients {
		t.Errorf("LimitNOFILE=%s: want more than limits.max_clients (%d)", u["LimitNOFILE"], cfg.Limits.MaxClients)
	}
	name, _, ok := strings.Cut(u["LoadCredential"], ":")
	if want := "/run/credentials/rproxy.service/" + name; !ok || cfg.Upstream.PasswordFile != want {
		t.Errorf("LoadCredential=%s but upstream.password_file is %q (want %q)", u["LoadCredential"], cfg.Upstream.PasswordFile, want)
	}
	for _, k := range []string{"NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices",
		"CapabilityBoundingSet", "RestrictAddressFamilies", "MemoryDenyWriteExecute", "SystemCallArchitectures"} {
		if _, ok := u[k]; !ok {
			t.Errorf("%s: %s is not set", deployUnit, k)
		}
	}
	if !slices.Contains(strings.Fields(u["RestrictAddressFamilies"]), "AF_INET6") {
		t.Errorf("RestrictAddressFamilies=%s: want AF_INET AF_INET6 AF_UNIX", u["RestrictAddressFamilies"])
	}
}
