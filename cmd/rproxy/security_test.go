package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rproxy/rproxy/config"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/internal/tlstest"
	"github.com/rproxy/rproxy/policy"
	"github.com/rproxy/rproxy/upstream"
)

const deployACL = "../../deploy/redis-acl.conf"

// gathered returns the value of each series of the family name in reg, by
// its labels rendered as `k="v",...` ("" for none).
func gathered(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			out[strings.Join(labels, ",")] = metricOf(m)
		}
	}
	return out
}

func metricOf(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	}
	return 0
}

// deployACLRules returns the rules of deploy/redis-acl.conf's rproxy user,
// with the placeholder password replaced by password, as ACL SETUSER
// arguments.
func deployACLRules(t *testing.T, password string) []string {
	t.Helper()
	b, err := os.ReadFile(deployACL)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 2 && f[0] == "user" && f[1] == "rproxy" {
			args := []string{"ACL", "SETUSER", "rproxy"}
			for _, r := range f[2:] {
				if strings.HasPrefix(r, ">") {
					r = ">" + password
				}
				args = append(args, r)
			}
			return args
		}
	}
	t.Fatalf("%s has no `user rproxy ...` line", deployACL)
	return nil
}

func userDial(addr, user, pass string) func(context.Context) (func(args ...string) ([]byte, error), func(), error) {
	return dialUpstreamUser(upstream.Config{Address: addr, Username: user, Password: pass,
		DialTimeout: 5 * time.Second, Timeout: 5 * time.Second})
}

func mustPolicy(t *testing.T, cfg policy.Config) *policy.Policy {
	t.Helper()
	p, err := policy.New(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// checkUpstreamUser tells, with ACL DRYRUN against a real Redis, which
// commands the policy denies the upstream user can run: all of them for a
// user with every right, none for deploy/redis-acl.conf's user, unknown for
// a user without ACL DRYRUN; commands the policy allows are not asked.
func TestCheckUpstreamUser(t *testing.T) {
	rs := redistest.Start(t)
	if r := string(rs.Do(t, deployACLRules(t, "rproxypw")...)); r != "+OK\r\n" {
		t.Fatalf("the deploy ACL line: %q", r)
	}
	rs.Do(t, "ACL", "SETUSER", "blind", "on", ">blindpw", "~*", "+@all", "-acl|dryrun")
	pol := mustPolicy(t, policy.DefaultConfig())
	check := func(user, pass string, pol *policy.Policy) (userCheck, error) {
		t.Helper()
		do, closeConn, err := userDial(rs.Addr, user, pass)(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer closeConn()
		return checkUpstreamUser(do, pol)
	}

	all, err := check("", "", pol)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"flushall", "flushdb", "keys", "swapdb", "script|flush", "function|flush",
		"config|get", "config|set", "acl|setuser", "acl|list", "debug", "shutdown", "monitor", "save",
		"bgsave", "client|pause", "module|load"} {
		if !slices.Contains(all.canRun, want) {
			t.Errorf("the default user: %s not reported as runnable (got %v)", want, all.canRun)
		}
	}
	if all.user != "default" {
		t.Errorf("user = %q, want default", all.user)
	}

	least, err := check("rproxy", "rproxypw", pol)
	if err != nil {
		t.Fatal(err)
	}
	if least.user != "rproxy" || len(least.canRun) != 0 || len(least.probed) < 15 {
		t.Errorf("deploy/redis-acl.conf's user: %+v, want nothing the policy denies runnable", least)
	}

	if _, err := check("blind", "blindpw", pol); !errors.Is(err, errUnknown) {
		t.Errorf("a user without ACL DRYRUN: %v, want errUnknown", err)
	}

	// An operator rule that allows FLUSHALL: clients may run it, so the
	// upstream user may too; it is not asked.
	allowing := policy.DefaultConfig()
	allowing.Rules = []policy.Rule{{Name: "ops-flush", Commands: []string{"flushall"}, Action: policy.Allow}}
	got, err := check("", "", mustPolicy(t, allowing))
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(got.probed, "flushall") || !slices.Contains(got.probed, "flushdb") {
		t.Errorf("with FLUSHALL allowed: probed %v", got.probed)
	}
}

// A check's answer reaches the log (warn), the metrics and INFO's fields;
// an unknown answer says so.
func TestSecurityUserCheckReports(t *testing.T) {
	rs := redistest.Start(t)
	rs.Do(t, "ACL", "SETUSER", "blind", "on", ">blindpw", "~*", "+@all", "-acl|dryrun")
	core, logs := observer.New(zapcore.DebugLevel)
	reg := prometheus.NewRegistry()
	s := newSecurity(reg, zap.New(core), time.Now)
	s.setPolicy(mustPolicy(t, policy.DefaultConfig()))

	s.checkUser(context.Background(), userDial(rs.Addr, "", ""))
	if v := gathered(t, reg, "rproxy_policy_upstream_user_can_run")[`command="flushall"`]; v != 1 {
		t.Errorf("rproxy_policy_upstream_user_can_run{command=flushall} = %v, want 1", v)
	}
	if v := gathered(t, reg, "rproxy_policy_upstream_user_checked")[""]; v != 1 {
		t.Errorf("upstream_user_checked = %v, want 1", v)
	}
	warned := logs.FilterMessageSnippet("may run commands the policy denies").All()
	if len(warned) != 1 || warned[0].Level != zapcore.WarnLevel {
		t.Fatalf("warning: %v", logs.All())
	}
	if cmds, _ := warned[0].ContextMap()["commands"].([]any); !slices.Contains(cmds, any("flushall")) {
		t.Errorf("the warning does not name FLUSHALL: %v", warned[0].ContextMap())
	}
	info := strings.Join(s.infoFields(), "\n")
	if !strings.Contains(info, "upstream_user:default") || !strings.Contains(info, "upstream_user_can_run_denied:flushall,") {
		t.Errorf("INFO fields:\n%s", info)
	}

	s.checkUser(context.Background(), userDial(rs.Addr, "blind", "blindpw"))
	if v := gathered(t, reg, "rproxy_policy_upstream_user_checked")[""]; v != 0 {
		t.Errorf("upstream_user_checked after an unknown answer = %v, want 0", v)
	}
	if n := len(gathered(t, reg, "rproxy_policy_upstream_user_can_run")); n != 0 {
		t.Errorf("%d can_run series kept after an unknown answer", n)
	}
	if len(logs.FilterMessageSnippet("cannot check what rproxy's upstream user may run").All()) != 1 {
		t.Errorf("no warning for the unknown answer: %v", logs.All())
	}
	if info := strings.Join(s.infoFields(), "\n"); !strings.Contains(info, "upstream_user_can_run_denied:unknown") {
		t.Errorf("INFO fields after an unknown answer:\n%s", info)
	}
	if v := gathered(t, reg, "rproxy_policy_upstream_user_checks_total")[""]; v != 2 {
		t.Errorf("upstream_user_checks_total = %v, want 2", v)
	}
}

// Certificates are checked at start and reload: expired and near expiry
// are warned about, later ones not, and the gauge gives the seconds left.
func TestCertExpiry(t *testing.T) {
	now := time.Now().Truncate(time.Second) // certificates carry whole seconds
	expired := tlstest.NewValid(t, now.Add(-48*time.Hour), now.Add(-time.Hour))
	soon := tlstest.NewValid(t, now.Add(-time.Hour), now.Add(3*24*time.Hour))
	later := tlstest.NewValid(t, now.Add(-time.Hour), now.Add(60*24*time.Hour))
	core, logs := observer.New(zapcore.InfoLevel)
	reg := prometheus.NewRegistry()
	s := newSecurity(reg, zap.New(core), func() time.Time { return now })
	for _, c := range []struct {
		key   string
		certs *tlstest.Certs
	}{{"tls.cert_file", expired}, {"upstream.tls.cert_file", soon}, {"later", later}} {
		tc, err := config.TLS{CertFile: c.certs.ServerCert, KeyFile: c.certs.ServerKey, MinVersion: "1.2"}.ServerConfig(os.ReadFile)
		if err != nil {
			t.Fatal(err) // an expired certificate still loads: it is a warning, not an error
		}
		nc, err := leafOf(c.key, c.certs.ServerCert, tc)
		if err != nil {
			t.Fatal(err)
		}
		s.setCerts(append(s.loadCerts(), *nc))
	}
	// A CA file: its first CA to expire counts (tlstest's CAs run a day
	// past their certificates).
	nc, err := firstCA("tls.client_ca_file", soon.CA, os.ReadFile)
	if err != nil {
		t.Fatal(err)
	}
	s.setCerts(append(s.loadCerts(), *nc))
	if _, err := firstCA("upstream.tls.ca_file", filepath.Join(t.TempDir(), "missing.pem"), os.ReadFile); err == nil {
		t.Error("a missing CA file was accepted")
	}
	s.checkCerts()
	if got := logs.FilterMessageSnippet("expires soon").FilterField(zap.String("key", "tls.client_ca_file")).Len(); got != 1 {
		t.Errorf("CA expiring in 4 days: %d warnings: %v", got, logs.All())
	}
	if got := logs.FilterMessageSnippet("has expired").FilterField(zap.String("key", "tls.cert_file")).Len(); got != 1 {
		t.Errorf("expired certificate: %d warnings: %v", got, logs.All())
	}
	if got := logs.FilterMessageSnippet("expires soon").FilterField(zap.String("key", "upstream.tls.cert_file")).Len(); got != 1 {
		t.Errorf("certificate expiring in 3 days: %d warnings: %v", got, logs.All())
	}
	if got := logs.FilterField(zap.String("key", "later")).Len(); got != 0 {
		t.Errorf("a certificate valid 60 more days was warned about: %v", logs.All())
	}
	got := gathered(t, reg, "rproxy_tls_certificate_expiry_seconds")
	want := map[string]float64{`key="tls.cert_file"`: -3600, `key="upstream.tls.cert_file"`: 3 * 24 * 3600, `key="later"`: 60 * 24 * 3600,
		`key="tls.client_ca_file"`: 4 * 24 * 3600}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("rproxy_tls_certificate_expiry_seconds = %v, want %v", got, want)
	}
	if info := strings.Join(s.infoFields(), "\n"); !strings.Contains(info, "tls_cert_expiry_seconds:-3600") ||
		!strings.Contains(info, "upstream_tls_cert_expiry_seconds:259200") || !strings.Contains(info, "tls_client_ca_cert_expiry_seconds:345600") {
		t.Errorf("INFO fields:\n%s", info)
	}
}

// Protected admin: an admin address off loopback without a token stops
// start-up, whether it comes from the flag or the file.
func TestAdminOffLoopbackNeedsToken(t *testing.T) {
	err := run([]string{"-listen", "127.0.0.1:0", "-admin", "0.0.0.0:0"})
	if err == nil || !strings.Contains(err.Error(), "admin_token_file") || !strings.Contains(err.Error(), "admin_allow_unauthenticated") {
		t.Fatalf("run with -admin 0.0.0.0:0 = %v, want a refusal naming admin_token_file and admin_allow_unauthenticated", err)
	}
}

// The image's default command follows the protected-admin rule and its
// HEALTHCHECK asks the admin address the command serves.
func TestDockerfileAdmin(t *testing.T) {
	b, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	var cmd, health []string
	lines := strings.Split(strings.ReplaceAll(string(b), "\\\n", " "), "\n")
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if rest, ok := strings.CutPrefix(l, "CMD "); ok {
			if err := json.Unmarshal([]byte(rest), &cmd); err != nil {
				t.Fatalf("CMD %s: %v", rest, err)
			}
		}
		if strings.HasPrefix(l, "HEALTHCHECK ") {
			_, rest, _ := strings.Cut(l, " CMD ")
			if err := json.Unmarshal([]byte(rest), &health); err != nil {
				t.Fatalf("HEALTHCHECK CMD %s: %v", rest, err)
			}
		}
	}
	c := config.Default()
	for i := 0; i+1 < len(cmd); i += 2 {
		switch cmd[i] {
		case "-admin":
			c.Admin = cmd[i+1]
		case "-listen":
			c.Listen = cmd[i+1]
		case "-upstream":
			c.Upstream.Address = cmd[i+1]
		}
	}
	if err := c.Validate(); err != nil {
		t.Errorf("the image's default command %v does not start: %v", cmd, err)
	}
	if len(health) != 3 || health[1] != "-healthcheck" || health[2] != c.Admin {
		t.Errorf("HEALTHCHECK %v does not ask the admin address %q", health, c.Admin)
	}
}

// A reload of an empty, comment-only or truncated file is refused (SIGHUP
// and POST /reload), the running rules and limits stay; a real change is
// logged at warn with what changed.
func TestReloadRefusesEmptyFile(t *testing.T) {
	bin := buildBinary(t)
	rs := redistest.Start(t)
	listen, admin := freeAddr(t), freeAddr(t)
	path := filepath.Join(t.TempDir(), "rproxy.yaml")
	write := func(body string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	first := "log:\n  format: json\nlimits:\n  max_clients: 100\npolicy:\n  rules:\n    - {name: no-secrets, commands: [get], keys: [\"secret:*\"], action: deny}\n"
	write(first)
	cmd, logs := startBinary(t, bin, admin, "-config", path, "-listen", listen, "-upstream", rs.Addr, "-admin", admin)
	do := dialDo(t, listen)
	if r := do("GET", "secret:1"); !strings.HasPrefix(r, "-DENIED") {
		t.Fatalf("GET secret:1 = %q, want the operator's rule to refuse it", r)
	}
	metrics := "http://" + admin + "/metrics"
	failures := func() float64 {
		return metricValue(httpBody(t, metrics), `rproxy_config_reloads_total{result="failure"}`)
	}

	write("") // truncated to nothing
	cmd.Process.Signal(syscall.SIGHUP)
	deadline := time.Now().Add(10 * time.Second)
	for failures() != 1 {
		if time.Now().After(deadline) {
			t.Fatal("SIGHUP with an empty file was not counted as a failed reload")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if r := do("GET", "secret:1"); !strings.HasPrefix(r, "-DENIED") {
		t.Fatalf("after SIGHUP with an empty file, GET secret:1 = %q: the operator's rule is gone", r)
	}
	if v := metricValue(httpBody(t, metrics), "rproxy_config_last_reload_successful"); v != 0 {
		t.Errorf("rproxy_config_last_reload_successful = %v, want 0", v)
	}

	write("# policy:\n#   rules: []\n\n")
	if code, body := postReload(t, admin); code != 400 || !strings.Contains(body, path) || !strings.Contains(body, "sets nothing") {
		t.Fatalf("POST /reload of a comment-only file = %d %q, want 400 naming the file", code, body)
	}
	if r := do("GET", "secret:1"); !strings.HasPrefix(r, "-DENIED") {
		t.Fatalf("after a comment-only reload, GET secret:1 = %q", r)
	}
	if !strings.Contains(httpBody(t, "http://"+admin+"/config"), "max_clients: 100") {
		t.Error("max_clients changed by a rejected reload")
	}

	write("log:\n  format: json\nlimits:\n  max_clients: 200\npolicy:\n  rules:\n    - {name: no-keys-here, commands: [keys], action: deny}\n")
	if code, body := postReload(t, admin); code != 200 {
		t.Fatalf("POST /reload = %d %q", code, body)
	}
	if r := do("GET", "secret:1"); r != "$-1\r\n" {
		t.Fatalf("after the reload removed the rule, GET secret:1 = %q", r)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	out := <-logs
	cmd.Wait()
	var reloaded map[string]any
	for _, l := range strings.Split(out, "\n") {
		if strings.Contains(l, `"msg":"configuration reloaded"`) {
			if err := json.Unmarshal([]byte(l), &reloaded); err != nil {
				t.Fatal(err)
			}
		}
	}
	if reloaded == nil || reloaded["level"] != "warn" {
		t.Fatalf("no warn line for the reload:\n%s", out)
	}
	line, _ := json.Marshal(reloaded)
	for _, want := range []string{`"limits.max_clients: 100 -\u003e 200"`, `"rules_added":["no-keys-here"]`, `"rules_removed":["no-secrets"]`} {
		if !strings.Contains(string(line), want) {
			t.Errorf("the reload line lacks %s: %s", want, line)
		}
	}
	if n := strings.Count(out, `"msg":"reload rejected"`); n != 2 {
		t.Errorf("%d reload rejected lines, want 2:\n%s", n, out)
	}
}

// rproxy runs against Redis as deploy/redis-acl.conf's least-privilege
// user: clients are served (INFO, scripts included), the policy then also
// holds inside EVAL because Redis refuses, INFO says the user can run
// nothing the policy denies, and a reconnect of the shared connection
// checks again: a right granted meanwhile is reported.
func TestLeastPrivilegeACLUser(t *testing.T) {
	bin := buildBinary(t)
	rs := redistest.Start(t)
	if r := string(rs.Do(t, deployACLRules(t, "rproxypw")...)); r != "+OK\r\n" {
		t.Fatalf("the deploy ACL line: %q", r)
	}
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "pw")
	os.WriteFile(pwFile, []byte("rproxypw\n"), 0o600)
	path := filepath.Join(dir, "rproxy.yaml")
	os.WriteFile(path, []byte("log:\n  format: json\nupstream:\n  username: rproxy\n  password_file: "+pwFile+"\n"), 0o644)
	listen, admin := freeAddr(t), freeAddr(t)
	cmd, logs := startBinary(t, bin, admin, "-config", path, "-listen", listen, "-upstream", rs.Addr, "-admin", admin)
	metrics := "http://" + admin + "/metrics"
	waitMetric := func(name string, want float64) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for metricValue(httpBody(t, metrics), name) != want {
			if time.Now().After(deadline) {
				t.Fatalf("%s never reached %v:\n%s", name, want, httpBody(t, metrics))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitMetric("rproxy_policy_upstream_user_checked", 1)

	do := dialDo(t, listen)
	for _, tc := range []struct{ args []string }{{[]string{"SET", "k", "v"}}, {[]string{"GET", "k"}}, {[]string{"EVAL", "return redis.call('get', KEYS[1])", "1", "k"}}} {
		if r := do(tc.args...); strings.HasPrefix(r, "-") {
			t.Errorf("%v as the least-privilege user: %q", tc.args, r)
		}
	}
	if r := do("EVAL", "return redis.call('flushall')", "0"); !strings.Contains(r, "NOPERM") && !strings.Contains(r, "can't run this command") {
		t.Errorf("FLUSHALL inside EVAL = %q, want Redis's ACL refusal", r)
	}
	info := do("INFO", "proxy")
	if !strings.Contains(info, "upstream_user:rproxy\r\n") || !strings.Contains(info, "upstream_user_can_run_denied:\r\n") {
		t.Errorf("INFO proxy:\n%s", info)
	}

	// Grant FLUSHALL, then cut rproxy's connections: the reconnect checks again.
	checks := metricValue(httpBody(t, metrics), "rproxy_policy_upstream_user_checks_total")
	rs.Do(t, "ACL", "SETUSER", "rproxy", "+flushall")
	rs.Do(t, "CLIENT", "KILL", "USER", "rproxy")
	waitMetric(`rproxy_policy_upstream_user_can_run{command="flushall"}`, 1)
	if after := metricValue(httpBody(t, metrics), "rproxy_policy_upstream_user_checks_total"); after <= checks {
		t.Errorf("checks_total %v -> %v across a reconnect", checks, after)
	}
	if info := do("INFO", "proxy"); !strings.Contains(info, "upstream_user_can_run_denied:flushall\r\n") {
		t.Errorf("INFO proxy after the grant:\n%s", info)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	out := <-logs
	cmd.Wait()
	if !strings.Contains(out, "may run commands the policy denies") {
		t.Errorf("no warning after the grant:\n%s", out)
	}
}
