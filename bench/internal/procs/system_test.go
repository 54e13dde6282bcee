package procs

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseStatTicks(t *testing.T) {
	// Fields 14 and 15 are utime and stime; the command name may hold
	// spaces and parentheses, so fields count from the last ')'.
	for stat, want := range map[string]int64{
		"4242 (redis server)) S 1 4242 4242 0 -1 4194560 553 0 0 0 150 25 0 0 20 0 5 0 1234 0 0\n": 175,
		"1234 (redis-server (x) 1) S 1 1234 1234 0 -1 4194560 1 0 0 0 250 75 0 0 20 0 5 0 100 0 0": 325,
	} {
		if got, err := ParseStatTicks(stat); err != nil || got != want {
			t.Errorf("ParseStatTicks(%q) = %d, %v; want %d", stat, got, err, want)
		}
	}
	for _, bad := range []string{"4242 (x) S 1 2", "1234 (x) S 1", "no parenthesis",
		"1 (x) S 1 1 1 0 -1 0 0 0 0 0 x 25 0"} {
		if _, err := ParseStatTicks(bad); err == nil {
			t.Errorf("ParseStatTicks(%q): want an error", bad)
		}
	}
	// Our own process must have a readable CPU time.
	if _, err := CPUTicks(os.Getpid()); err != nil {
		t.Error(err)
	}
}

func TestParseOpenFilesLimit(t *testing.T) {
	limits := "Limit                     Soft Limit           Hard Limit           Units\n" +
		"Max processes             63417                63417                processes\n" +
		"Max open files            20000                1048576              files\n"
	if got, err := ParseOpenFilesLimit(limits); err != nil || got != 20000 {
		t.Errorf("ParseOpenFilesLimit = %d, %v; want 20000", got, err)
	}
	if got, _ := ParseOpenFilesLimit("Max open files            unlimited            unlimited            files\n"); got != ^uint64(0) {
		t.Errorf("unlimited = %d", got)
	}
	if _, err := ParseOpenFilesLimit("Max processes 1 1 processes\n"); err == nil {
		t.Error("no open files line: want an error")
	}
	if n, err := OpenFilesLimit(os.Getpid()); err != nil || n == 0 {
		t.Errorf("OpenFilesLimit(self) = %d, %v", n, err)
	}
}

func TestStatusField(t *testing.T) {
	status := "Name:\tredis-server\nVmPeak:\t  300000 kB\nVmRSS:\t   12345 kB\n"
	if got, err := StatusField(status, "VmRSS"); err != nil || got != 12345 {
		t.Errorf("VmRSS = %d, %v; want 12345", got, err)
	}
	if _, err := StatusField(status, "VmSwap"); err == nil {
		t.Error("missing field: want an error")
	}
	if kb, err := RSSKB(os.Getpid()); err != nil || kb <= 0 {
		t.Errorf("RSSKB(self) = %d, %v", kb, err)
	}
}

func TestTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(path, []byte("a\nb\nc\nd\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := Tail(path, 2); got != "c\nd" {
		t.Errorf("Tail 2 = %q", got)
	}
	if got := Tail(path, 10); got != "a\nb\nc\nd" {
		t.Errorf("Tail 10 = %q", got)
	}
	if got := Tail(filepath.Join(t.TempDir(), "missing"), 2); got == "" || got[0] != '(' {
		t.Errorf("Tail of a missing file = %q", got)
	}
}

func TestFirstLine(t *testing.T) {
	if got := FirstLine("printf", `\n  one\ntwo\n`); got != "one" {
		t.Errorf("FirstLine = %q, want one", got)
	}
	if got := FirstLine("/nonexistent/binary"); got == "" {
		t.Error("FirstLine of a missing binary is empty")
	}
}

func TestModuleRoot(t *testing.T) {
	root, err := ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "bench", "internal", "procs", "doc.go")); err != nil {
		t.Errorf("ModuleRoot = %s: %v", root, err)
	}
}
