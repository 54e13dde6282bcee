package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"

	"github.com/rproxy/rproxy/config"
)

// checkEnv is what checkConfig reads besides the configuration: the files
// it names, the environment, and where it writes.
type checkEnv struct {
	readFile func(string) ([]byte, error)
	getenv   func(string) string
	out      io.Writer // the effective configuration
	errOut   io.Writer // warnings and the verdict
}

// checkConfig validates cfg (the file with the flags applied) as start-up
// does, without listening or dialling: the schema's rules, the logger, the
// policy, the hot-key and client-limit settings, and the files the config
// names (TLS certificates and keys, the password and admin token files).
// A named file that does not exist here is a warning, not a problem: a
// systemd credential (/run/credentials/...) exists only while the service
// runs, and start-up checks it again. A file that exists but is wrong is a
// problem. Valid, it writes the effective configuration (secrets redacted,
// as GET /config shows it) to out; else it returns every problem found.
func checkConfig(cfg config.Config, path string, env checkEnv) error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	var warnings []string
	// file keeps a missing file out of the problems.
	file := func(err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			warnings = append(warnings, err.Error()+" (not found here; read again at start)")
			return nil
		}
		return err
	}

	add(cfg.Validate()) // the file's keys and each stage's own rules
	if _, err := loggerConfig(cfg.Log); err != nil {
		add(err)
	}
	pcfg := cfg.ProxyConfig()
	var err error
	if u := cfg.Upstream; u.PasswordFile == "" && u.PasswordEnv != "" && env.getenv(u.PasswordEnv) == "" {
		warnings = append(warnings, fmt.Sprintf("upstream.password_env: $%s is empty or unset here (read again at start)", u.PasswordEnv))
	} else if _, err := cfg.Upstream.Password(env.readFile, env.getenv); err != nil {
		add(file(err))
	}
	if sc := cfg.Upstream.Sentinel; sc.PasswordFile == "" && sc.PasswordEnv != "" && env.getenv(sc.PasswordEnv) == "" {
		warnings = append(warnings, fmt.Sprintf("upstream.sentinel.password_env: $%s is empty or unset here (read again at start)", sc.PasswordEnv))
	} else if _, err := sc.Password(env.readFile, env.getenv); err != nil {
		add(file(err))
	}
	if _, err := cfg.AdminToken(env.readFile); err != nil {
		add(file(err))
	}
	if pcfg.TLS, err = cfg.TLS.ServerConfig(env.readFile); err != nil {
		add(file(err))
	}
	if pcfg.Upstream.TLS, err = cfg.Upstream.TLSConfig(env.readFile); err != nil {
		add(file(err))
	}
	if len(errs) == 0 {
		// What proxy.New checks before it starts anything.
		add(pcfg.Validate())
	}

	name := path
	if name == "" {
		name = "the built-in defaults (no -config)"
	}
	for _, w := range warnings {
		fmt.Fprintf(env.errOut, "rproxy: warning: %s\n", w)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: configuration invalid:\n%w", name, err)
	}
	fmt.Fprint(env.out, cfg.Redacted().String())
	fmt.Fprintf(env.errOut, "rproxy: %s: configuration OK\n", name)
	return nil
}
