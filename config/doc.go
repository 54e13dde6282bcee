// Package config defines the schema of rproxy's configuration file,
// rproxy.yaml, and loads it.
//
// Loading is strict: the file is overlaid on [Default], every key must be a
// known field (an unknown or misspelled key is an error naming the key and
// its line), a file may hold only one YAML document, and the result must pass
// [Config.Validate]. An empty file, or a key whose value is empty (null),
// keeps the default.
//
// The file-to-stage mapping lives here too, once (stages.go):
// [Config.ProxyConfig], [Config.HotKeyConfig], [Config.SaltConfig],
// [Config.ProxyLimits] and [Config.PolicyConfig] build each stage's own
// Config from the file's sections. Validate checks the file's keys, then
// has each stage validate what is built for it, its problems named by the
// section, so start, -check and a reload all apply every stage's rules.
//
// Durations are strings with a unit ("250ms", "5s", "1m"); a bare number is
// rejected because "timeout: 5" would otherwise silently mean 5ns. The only
// bare number accepted is 0. Byte sizes are integers (bytes) or strings with
// a 1024-based unit b, kb, mb or gb ("512mb", "1 GB", "64KB").
//
// rproxy.example.yaml in this directory lists every key with its default and
// is checked by the tests to be identical to [Default].
package config
