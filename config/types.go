package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration whose YAML form is a string with a unit, such
// as "250ms", "5s" or "1m". A bare number other than 0 is an error.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String renders d in the form accepted by ParseDuration, without redundant
// zero components: "5s", "250ms", "1m", "1h30m", "0s".
func (d Duration) String() string {
	s := time.Duration(d).String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// ParseDuration parses a duration with a unit, as accepted by
// time.ParseDuration ("250ms", "5s", "1m30s"). A bare number other than "0"
// is an error, since its unit would be ambiguous.
func ParseDuration(s string) (Duration, error) {
	t := strings.TrimSpace(s)
	if t == "0" {
		return 0, nil
	}
	if t != "" && strings.Trim(t, "+-.0123456789") == "" {
		return 0, fmt.Errorf("use a unit, e.g. 5s (got %s)", t)
	}
	d, err := time.ParseDuration(t)
	if err != nil {
		return 0, fmt.Errorf("invalid duration %q: want a number with a unit (ns, us, ms, s, m, h), e.g. 250ms, 5s, 1m", s)
	}
	return Duration(d), nil
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return typeError(n, "expected a duration such as 5s")
	}
	if tag := n.ShortTag(); (tag == "!!int" || tag == "!!float") && strings.TrimSpace(n.Value) != "0" {
		return typeError(n, fmt.Sprintf("use a unit, e.g. 5s (got %s)", n.Value))
	}
	v, err := ParseDuration(n.Value)
	if err != nil {
		return typeError(n, err.Error())
	}
	*d = v
	return nil
}

// MarshalYAML implements yaml.Marshaler; the result is the String form.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// ByteSize is a size in bytes. Its YAML form is an integer (bytes) or a string
// with a 1024-based unit b, kb, mb or gb, case-insensitive, optionally
// separated from the number by spaces: 1048576, "512mb", "1 GB", "64KB".
type ByteSize int64

// Size units (1024-based).
const (
	Byte     ByteSize = 1
	Kilobyte          = 1024 * Byte
	Megabyte          = 1024 * Kilobyte
	Gigabyte          = 1024 * Megabyte
)

// Bytes returns b as a number of bytes.
func (b ByteSize) Bytes() int64 { return int64(b) }

// String renders b with the largest unit that divides it exactly ("512mb",
// "64kb"), or as a plain number of bytes ("1000", "0").
func (b ByteSize) String() string {
	if b != 0 {
		for _, u := range []struct {
			size ByteSize
			name string
		}{{Gigabyte, "gb"}, {Megabyte, "mb"}, {Kilobyte, "kb"}} {
			if b%u.size == 0 {
				return strconv.FormatInt(int64(b/u.size), 10) + u.name
			}
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// ParseByteSize parses a non-negative whole number of bytes with an optional
// unit b, kb, mb or gb (1024-based, case-insensitive, optional space before
// the unit).
func ParseByteSize(s string) (ByteSize, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && t[i] >= '0' && t[i] <= '9' {
		i++
	}
	num, unit := t[:i], strings.ToLower(strings.TrimSpace(t[i:]))
	if num == "" {
		if strings.HasPrefix(t, "-") {
			return 0, fmt.Errorf("invalid size %q: must not be negative", s)
		}
		return 0, fmt.Errorf("invalid size %q: want a whole number of bytes or a number with unit b, kb, mb, gb, e.g. 512mb", s)
	}
	var mult ByteSize
	switch unit {
	case "", "b":
		mult = Byte
	case "kb":
		mult = Kilobyte
	case "mb":
		mult = Megabyte
	case "gb":
		mult = Gigabyte
	default:
		return 0, fmt.Errorf("invalid size %q: unknown unit %q, want b, kb, mb or gb", s, strings.TrimSpace(t[i:]))
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > math.MaxInt64/int64(mult) {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return ByteSize(n) * mult, nil
}

// UnmarshalYAML implements yaml.Unmarshaler.
func (b *ByteSize) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return typeError(n, "expected a size such as 512mb or a number of bytes")
	}
	v, err := ParseByteSize(n.Value)
	if err != nil {
		return typeError(n, err.Error())
	}
	*b = v
	return nil
}

// MarshalYAML implements yaml.Marshaler: a string with a unit when the size is
// an exact multiple of one ("512mb"), else an integer number of bytes.
func (b ByteSize) MarshalYAML() (any, error) {
	s := b.String()
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return n, nil
	}
	return s, nil
}

// typeError reports a problem with node n the way the YAML decoder reports
// its own type errors, so that they are collected together and carry a
// position (Parse replaces the column with the key's yaml path).
func typeError(n *yaml.Node, msg string) error {
	return &yaml.TypeError{Errors: []string{fmt.Sprintf("line %d, column %d: %s", n.Line, n.Column, msg)}}
}
