package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rproxy/rproxy/admin"
	"github.com/rproxy/rproxy/config"
	"github.com/rproxy/rproxy/policy"
)

// docPages are the README and the docs/ pages, relative to this package.
func docPages(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(pages) == 0 {
		t.Fatalf("no docs/*.md pages: %v", err)
	}
	return append([]string{"../../README.md"}, pages...)
}

// codeBlock is one fenced block of a page.
type codeBlock struct {
	page, lang, body string
}

var fence = regexp.MustCompile("(?ms)^```([a-z]*)\n(.*?)^```")

func codeBlocks(t *testing.T) []codeBlock {
	t.Helper()
	var blocks []codeBlock
	for _, page := range docPages(t) {
		b, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range fence.FindAllStringSubmatch(string(b), -1) {
			blocks = append(blocks, codeBlock{page: page, lang: m[1], body: m[2]})
		}
	}
	return blocks
}

// Every YAML example in the README and docs/ is a valid configuration (as
// config.Load reads a file) whose policy compiles.
func TestDocsYAMLExamplesParse(t *testing.T) {
	n := 0
	for _, b := range codeBlocks(t) {
		if b.lang != "yaml" {
			continue
		}
		n++
		cfg, err := config.Parse([]byte(b.body), b.page)
		if err != nil {
			t.Errorf("%s: a YAML example does not parse:\n%s\n%v", b.page, b.body, err)
			continue
		}
		if _, err := policy.New(cfg.PolicyConfig(), nil, nil); err != nil {
			t.Errorf("%s: a YAML example's policy: %v", b.page, err)
		}
	}
	if n == 0 {
		t.Fatal("no YAML example found in the docs")
	}
}

// The docs' rproxy -check commands run from the repository root and exit
// 0, and the error example of docs/operations.md is what -check prints for
// the file it describes.
func TestDocsCheckExamples(t *testing.T) {
	bin := buildBinary(t)
	n := 0
	for _, b := range codeBlocks(t) {
		for _, line := range strings.Split(b.body, "\n") {
			args, ok := strings.CutPrefix(line, "rproxy -check")
			if !ok {
				continue
			}
			n++
			cmd := exec.Command(bin, append([]string{"-check"}, strings.Fields(args)...)...)
			cmd.Dir = "../.."
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("%s: `%s`: %v\n%s", b.page, line, err, out)
			}
		}
	}
	if n == 0 {
		t.Fatal("no `rproxy -check` example found in the docs")
	}

	// line 7: a misspelt key; line 9: a duration without a unit.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "rproxy.yaml"), []byte("listen: 127.0.0.1:6380\nadmin: \"\"\nprocs: 1\n\nupstream:\n  address: 127.0.0.1:6379\n  adress: x\n  connections: 1\n  timeout: 5\n"), 0o644)
	cmd := exec.Command(bin, "-check", "-config", "rproxy.yaml")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("-check accepted the example's bad file:\n%s", out)
	}
	found := false
	for _, b := range codeBlocks(t) {
		if !strings.HasSuffix(b.page, "operations.md") || !strings.Contains(b.body, "unknown field") {
			continue
		}
		found = true
		for _, line := range strings.Split(strings.TrimSpace(b.body), "\n") {
			want, _, _ := strings.Cut(line, "...") // the example shortens the list of known fields
			if !strings.Contains(string(out), want) {
				t.Errorf("docs/operations.md shows %q; -check prints:\n%s", line, out)
			}
		}
	}
	if !found {
		t.Error("docs/operations.md has no -check error example")
	}
}

// docs/operations.md documents every flag of `rproxy -h`, every admin
// endpoint, and every setting of `make run` (the variables scripts/run.sh
// reads); relative links in the docs lead to files that exist.
func TestDocsCoverFlagsAndMakeRun(t *testing.T) {
	ops, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	page := string(ops)
	bin := buildBinary(t)
	help, _ := exec.Command(bin, "-h").CombinedOutput()
	flags := regexp.MustCompile(`(?m)^  (-[a-z-]+)`).FindAllStringSubmatch(string(help), -1)
	if len(flags) < 5 {
		t.Fatalf("-h lists %d flags:\n%s", len(flags), help)
	}
	for _, f := range flags {
		if !strings.Contains(page, "`"+f[1]) {
			t.Errorf("docs/operations.md does not document the flag %s", f[1])
		}
	}
	for _, p := range admin.Paths {
		_, path, _ := strings.Cut(p, " ")
		if !strings.Contains(page, path) {
			t.Errorf("docs/operations.md does not mention the admin endpoint %s", path)
		}
	}
	script, err := os.ReadFile("../../scripts/run.sh")
	if err != nil {
		t.Fatal(err)
	}
	vars := regexp.MustCompile(`(?m)^([A-Z]+)=\$\{[A-Z]+:-`).FindAllStringSubmatch(string(script), -1)
	if len(vars) < 4 {
		t.Fatalf("scripts/run.sh: found %d settings", len(vars))
	}
	for _, v := range vars {
		if v[1] == "VERSION" {
			continue
		}
		if !strings.Contains(page, "| `"+v[1]+"` |") {
			t.Errorf("docs/operations.md's make run table lacks %s (read by scripts/run.sh)", v[1])
		}
	}

	link := regexp.MustCompile(`\]\(([^)#:]+)(#[^)]*)?\)`)
	for _, pg := range docPages(t) {
		b, err := os.ReadFile(pg)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := filepath.Join(filepath.Dir(pg), m[1])
			if _, err := os.Stat(target); err != nil {
				t.Errorf("%s links to %s, which does not exist (%s)", pg, m[1], target)
			}
		}
	}
}
