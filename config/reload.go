package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"

	"go.yaml.in/yaml/v3"
)

// ErrNoSettings is returned by LoadNonEmpty for a file that sets nothing:
// empty, only comments or blank lines, an empty mapping, or truncated to
// nothing. Parse reads such a file as "all defaults", which at a reload
// would silently drop the operator's rules and limits.
var ErrNoSettings = errors.New("the file sets nothing (empty, only comments, or truncated); the running configuration is kept")

// LoadNonEmpty is Load for a reload: a file without a single setting is
// refused with ErrNoSettings, naming the file.
func LoadNonEmpty(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if noSettings(data) {
		return Config{}, fmt.Errorf("config: %s: %w", path, ErrNoSettings)
	}
	return Parse(data, path)
}

// noSettings reports whether data is a YAML stream whose first document
// holds nothing: no document at all, a null, or an empty mapping. Syntax
// errors are left to Parse, which names them.
func noSettings(data []byte) bool {
	var doc yaml.Node
	switch err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); {
	case err == io.EOF:
		return true
	case err != nil:
		return false
	}
	if len(doc.Content) == 0 {
		return true
	}
	root := doc.Content[0]
	switch root.Kind {
	case yaml.ScalarNode:
		return root.ShortTag() == "!!null"
	case yaml.MappingNode:
		return len(root.Content) == 0
	}
	return false
}

// Changes is what a reload changed, for its log line.
type Changes struct {
	// Keys are the changed settings other than policy.rules, as
	// "key: old -> new" in file order; auth.users values are never shown.
	Keys []string
	// RulesAdded, RulesRemoved and RulesChanged name policy rules by name.
	RulesAdded, RulesRemoved, RulesChanged []string
}

// Empty reports whether nothing changed.
func (c Changes) Empty() bool {
	return len(c.Keys) == 0 && len(c.RulesAdded) == 0 && len(c.RulesRemoved) == 0 && len(c.RulesChanged) == 0
}

// Diff returns what differs from old to next: every leaf key, and the
// policy rules by name.
func Diff(old, next Config) Changes {
	var ch Changes
	o, n := reflect.ValueOf(old), reflect.ValueOf(next)
	walkFields(o.Type(), "", func(path string, f reflect.StructField) {
		if f.Type.Kind() == reflect.Struct || path == "policy.rules" {
			return // its fields come next; rules are compared by name below
		}
		a, b := o.FieldByIndex(f.Index).Interface(), n.FieldByIndex(f.Index).Interface()
		if reflect.DeepEqual(a, b) {
			return
		}
		if path == "auth.users" { // password hashes
			ch.Keys = append(ch.Keys, path+": changed")
			return
		}
		ch.Keys = append(ch.Keys, fmt.Sprintf("%s: %v -> %v", path, a, b))
	})
	byName := func(rs []Rule) map[string]Rule {
		m := make(map[string]Rule, len(rs))
		for _, r := range rs {
			m[r.Name] = r
		}
		return m
	}
	was, now := byName(old.Policy.Rules), byName(next.Policy.Rules)
	for _, r := range next.Policy.Rules {
		if w, ok := was[r.Name]; !ok {
			ch.RulesAdded = append(ch.RulesAdded, r.Name)
		} else if !reflect.DeepEqual(w, r) {
			ch.RulesChanged = append(ch.RulesChanged, r.Name)
		}
	}
	for _, r := range old.Policy.Rules {
		if _, ok := now[r.Name]; !ok {
			ch.RulesRemoved = append(ch.RulesRemoved, r.Name)
		}
	}
	if len(ch.RulesAdded) == 0 && len(ch.RulesRemoved) == 0 && len(ch.RulesChanged) == 0 &&
		!slices.EqualFunc(old.Policy.Rules, next.Policy.Rules, func(a, b Rule) bool { return a.Name == b.Name }) {
		ch.Keys = append(ch.Keys, "policy.rules: reordered")
	}
	return ch
}
