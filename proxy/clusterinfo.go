package proxy

import (
	"bytes"
	"strconv"
	"strings"

	"github.com/rproxy/rproxy/resp"
)

// summedInfoSections are the INFO sections whose figures a cluster's
// masters add up to one server's: clients (blocked_clients: a client
// blocked on any master's key; rproxy puts its own connected_clients in),
// counters, per-command and per-error counts, the keyspace and CPU time.
// Of the other sections, Persistence is joined by persistenceInfoFields;
// the rest (Server, Memory, Replication, Latencystats...) is the first
// master's.
var summedInfoSections = map[string]bool{
	"Clients": true, "Stats": true, "Commandstats": true, "Errorstats": true, "Keyspace": true, "CPU": true,
}

// unsummedInfoFields are fields of summedInfoSections that are not counts:
// a limit each master has (the first master's), or a high-water mark (the
// highest).
var unsummedInfoFields = map[string]string{
	"maxclients":                      "first",
	"client_recent_max_input_buffer":  "max",
	"client_recent_max_output_buffer": "max",
	"latest_fork_usec":                "max",
	// A BCAST prefix is registered on every master (bcastEverywhere).
	"tracking_total_prefixes": "max",
}

// persistenceInfoFields join the Persistence section as one server's
// whole data: a save or rewrite is in progress while any master's is (a
// client waiting for rdb_bgsave_in_progress:0 after BGSAVE, which went to
// every master, waits for all), the data was last saved when its oldest
// part was (as LASTSAVE), a status is err when any master's is, and the
// whole data was saved as often as its least saved part. Fields not here
// are the first master's.
var persistenceInfoFields = map[string]string{
	"loading":                           "max",
	"async_loading":                     "max",
	"rdb_bgsave_in_progress":            "max",
	"aof_rewrite_in_progress":           "max",
	"aof_rewrite_scheduled":             "max",
	"module_fork_in_progress":           "max",
	"rdb_current_bgsave_time_sec":       "max",
	"aof_current_rewrite_time_sec":      "max",
	"rdb_last_bgsave_time_sec":          "max",
	"aof_last_rewrite_time_sec":         "max",
	"aof_rewrites_consecutive_failures": "max",
	"rdb_changes_since_last_save":       "sum",
	"rdb_last_save_time":                "min",
	"rdb_saves":                         "min",
	"aof_rewrites":                      "min",
	"rdb_last_bgsave_status":            "err",
	"aof_last_bgrewrite_status":         "err",
	"aof_last_write_status":             "err",
}

// memoryInfoFields are the Memory section's fields that are not added
// over the masters: limits and settings each has (the first master's),
// ratios and shares (the first master's), and what every master holds
// alike, the scripts and functions rproxy loads on all (the highest).
// Every other integer, the bytes each master uses for its part of the
// data, is added; the _human fields are written again from the joined
// bytes (humanBytes).
var memoryInfoFields = map[string]string{
	"maxmemory":                "first",
	"maxmemory_policy":         "first",
	"mem_allocator":            "first",
	"total_system_memory":      "first",
	"used_memory_peak_perc":    "first",
	"used_memory_dataset_perc": "first",
	"allocator_frag_ratio":     "first",
	"allocator_rss_ratio":      "first",
	"rss_overhead_ratio":       "first",
	"mem_fragmentation_ratio":  "first",
	"active_defrag_running":    "max",
	"used_memory_lua":          "max",
	"used_memory_vm_eval":      "max",
	"used_memory_scripts_eval": "max",
	"number_of_cached_scripts": "max",
	"number_of_functions":      "max",
	"number_of_libraries":      "max",
	"used_memory_vm_functions": "max",
	"used_memory_vm_total":     "max",
	"used_memory_functions":    "max",
	"used_memory_scripts":      "max",
}

// infoFieldRule is how the masters' values of a field of section join:
// "sum", "max", "min", "err" (err if any master's is not ok) or "first".
func infoFieldRule(section, field string) string {
	if summedInfoSections[section] {
		if r, ok := unsummedInfoFields[field]; ok {
			return r
		}
		return "sum"
	}
	switch section {
	case "Persistence":
		if r, ok := persistenceInfoFields[field]; ok {
			return r
		}
	case "Memory":
		if r, ok := memoryInfoFields[field]; ok {
			return r
		}
		if strings.HasSuffix(field, "_human") {
			return "first" // written again once joined (humanBytes)
		}
		return "sum"
	}
	return "first"
}

// infoSection is one "# Name" section of INFO's text, its fields in order.
type infoSection struct {
	name   string
	fields []string          // field names, in the order first seen
	values map[string]string // field name: value
}

// joinInfo joins the masters' INFO replies into one server's: the first
// master's sections and fields, each field's values joined over the
// masters by infoFieldRule, and the fields or sections some masters have and
// the first lacks (a command only they ran, a database only they hold)
// appended. A reply that is not INFO's text (an error) is returned as is.
func joinInfo(replies [][]byte) []byte {
	first := replies[0]
	if len(first) == 0 || (first[0] != '$' && first[0] != '=') {
		return first
	}
	var sections []*infoSection
	byName := map[string]*infoSection{}
	for _, r := range replies {
		if len(r) == 0 || r[0] != first[0] {
			return first
		}
		body, ok := resp.Payload(r, r[0])
		if !ok {
			return first
		}
		if r[0] == '=' {
			body = bytes.TrimPrefix(body, []byte("txt:"))
		}
		var sec *infoSection
		for _, line := range strings.Split(string(body), "\r\n") {
			if name, ok := strings.CutPrefix(line, "# "); ok {
				if sec = byName[name]; sec == nil {
					sec = &infoSection{name: name, values: map[string]string{}}
					byName[name] = sec
					sections = append(sections, sec)
				}
				continue
			}
			if line == "" || sec == nil {
				continue
			}
			field, value, _ := strings.Cut(line, ":")
			old, seen := sec.values[field]
			if !seen {
				sec.fields = append(sec.fields, field)
				sec.values[field] = value
				continue
			}
			switch rule := infoFieldRule(sec.name, field); rule {
			case "max", "min":
				if x, err := strconv.ParseInt(value, 10, 64); err == nil {
					if y, err := strconv.ParseInt(old, 10, 64); err == nil && (x > y) == (rule == "max") && x != y {
						sec.values[field] = value
					}
				}
			case "err":
				if value != "ok" {
					sec.values[field] = value
				}
			case "sum":
				if sec.name == "Commandstats" && ranOnEveryMaster(strings.TrimPrefix(field, "cmdstat_")) {
					// One call through rproxy, one on each master.
					if callsOf(value) > callsOf(old) {
						sec.values[field] = value
					}
					continue
				}
				sec.values[field] = addInfoValues(old, value)
			}
		}
	}
	if mem := byName["Memory"]; mem != nil {
		for _, f := range mem.fields {
			base, human := strings.CutSuffix(f, "_human")
			if n, err := strconv.ParseInt(mem.values[base], 10, 64); human && err == nil {
				mem.values[f] = humanBytes(n)
			}
		}
	}
	var text strings.Builder
	if first[0] == '=' {
		text.WriteString("txt:")
	}
	for i, sec := range sections {
		if i > 0 {
			text.WriteString("\r\n")
		}
		text.WriteString("# " + sec.name + "\r\n")
		for _, f := range sec.fields {
			text.WriteString(f + ":" + sec.values[f] + "\r\n")
		}
	}
	out := []byte{first[0]}
	out = strconv.AppendInt(out, int64(text.Len()), 10)
	out = append(out, "\r\n"...)
	out = append(out, text.String()...)
	return append(out, "\r\n"...)
}

// humanBytes writes n bytes as Redis's INFO does in its _human fields.
func humanBytes(n int64) string {
	units := []string{"K", "M", "G", "T", "P"}
	if n >= 1024 {
		scale := 1024.0
		for _, u := range units {
			if float64(n) < scale*1024 {
				return strconv.FormatFloat(float64(n)/scale, 'f', 2, 64) + u
			}
			scale *= 1024
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}

// ranOnEveryMaster reports whether rproxy sends the command (a
// "name|subcommand" for container commands) to every master: each master
// counts every call, where one server would count it once.
func ranOnEveryMaster(name string) bool {
	_, ok := fanOutCommands[name]
	return ok
}

// callsOf is a Commandstats value's calls.
func callsOf(value string) int64 {
	for _, p := range strings.Split(value, ",") {
		if v, ok := strings.CutPrefix(p, "calls="); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// addInfoValues adds two masters' values of one INFO field: integers and
// decimals ("1.25", keeping a's decimals), or lists of name=number pairs
// (commandstats' calls=3,usec=40,usec_per_call=13.33,..., keyspace's
// keys=2,expires=1,avg_ttl=500) pair by pair, where usec_per_call is
// worked out again and avg_ttl is the average weighted by expires. A value
// that is neither is the first master's.
func addInfoValues(a, b string) string {
	if strings.Contains(a, "=") {
		return addInfoPairs(a, b)
	}
	if x, err := strconv.ParseInt(a, 10, 64); err == nil {
		if y, err := strconv.ParseInt(b, 10, 64); err == nil {
			return strconv.FormatInt(x+y, 10)
		}
		return a
	}
	dot := strings.IndexByte(a, '.')
	if dot < 0 {
		return a
	}
	x, errA := strconv.ParseFloat(a, 64)
	y, errB := strconv.ParseFloat(b, 64)
	if errA != nil || errB != nil {
		return a
	}
	return strconv.FormatFloat(x+y, 'f', len(a)-dot-1, 64)
}

// addInfoPairs adds two name=number lists (addInfoValues).
func addInfoPairs(a, b string) string {
	other := map[string]string{}
	for _, p := range strings.Split(b, ",") {
		k, v, _ := strings.Cut(p, "=")
		other[k] = v
	}
	num := func(s string) float64 {
		f, _ := strconv.ParseFloat(s, 64)
		return f
	}
	mine := map[string]string{}
	pairs := strings.Split(a, ",")
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		mine[k] = v
	}
	for i, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		w, ok := other[k]
		if !ok {
			continue
		}
		switch k {
		case "usec_per_call":
			if calls := num(mine["calls"]) + num(other["calls"]); calls > 0 {
				v = strconv.FormatFloat((num(mine["usec"])+num(other["usec"]))/calls, 'f', 2, 64)
			}
		case "avg_ttl":
			if exp := num(mine["expires"]) + num(other["expires"]); exp > 0 {
				v = strconv.FormatInt(int64((num(v)*num(mine["expires"])+num(w)*num(other["expires"]))/exp), 10)
			}
		default:
			v = addInfoValues(v, w)
		}
		pairs[i] = k + "=" + v
	}
	return strings.Join(pairs, ",")
}
