package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// A reload must not read a file that sets nothing as "all defaults": that
// would drop the operator's rules and limits with one info line.
func TestLoadNonEmptyRefusesEmptyFiles(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"empty": "", "blank": "\n  \n", "comments": "# policy:\n#   rules: []\n", "null": "~\n",
		"empty-mapping": "{}\n", "document-marker": "---\n", "document-comment": "---\n# nothing\n",
	} {
		path := filepath.Join(dir, name+".yaml")
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadNonEmpty(path)
		if !errors.Is(err, ErrNoSettings) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: %v, want ErrNoSettings naming the file", name, err)
		}
		if _, err := Load(path); err != nil { // at start, an empty file still means the defaults
			t.Errorf("%s: Load: %v", name, err)
		}
	}
	path := filepath.Join(dir, "ok.yaml")
	os.WriteFile(path, []byte("limits:\n  max_clients: 100\n"), 0o644)
	if c, err := LoadNonEmpty(path); err != nil || c.Limits.MaxClients != 100 {
		t.Errorf("a file with a setting: %v, %+v", err, c.Limits)
	}
	os.WriteFile(path, []byte("limits: [\n"), 0o644)
	if _, err := LoadNonEmpty(path); err == nil || errors.Is(err, ErrNoSettings) {
		t.Errorf("a syntax error: %v, want Parse's error", err)
	}
}

func TestDiff(t *testing.T) {
	old := Default()
	old.Limits.MaxClients = 100
	old.Policy.Rules = []Rule{{Name: "keep"}, {Name: "gone"}, {Name: "edit", Action: "deny"}}
	old.Auth.Users = map[string]string{"a": "x"}
	next := Default()
	next.Policy.Rules = []Rule{{Name: "keep"}, {Name: "edit", Action: "allow"}, {Name: "new"}}
	next.Auth.Users = map[string]string{"a": "y"}
	next.HotKeys.Window = Duration(2e9)
	ch := Diff(old, next)
	want := Changes{
		Keys:         []string{"auth.users: changed", "hotkeys.window: 1s -> 2s", "limits.max_clients: 100 -> 10000"},
		RulesAdded:   []string{"new"},
		RulesRemoved: []string{"gone"},
		RulesChanged: []string{"edit"},
	}
	if !reflect.DeepEqual(ch, want) {
		t.Errorf("Diff = %+v\nwant %+v", ch, want)
	}
	if !Diff(old, old).Empty() {
		t.Errorf("Diff of a config with itself = %+v", Diff(old, old))
	}
	swapped := old
	swapped.Policy.Rules = []Rule{old.Policy.Rules[1], old.Policy.Rules[0], old.Policy.Rules[2]}
	if ch := Diff(old, swapped); !reflect.DeepEqual(ch.Keys, []string{"policy.rules: reordered"}) {
		t.Errorf("reordered rules: %+v", ch)
	}
}
