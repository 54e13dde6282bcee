package proxy

import (
	"strconv"
	"strings"
	"testing"

	"github.com/rproxy/rproxy/resp"
)

func TestJoinInfo(t *testing.T) {
	a := "# Server\r\nredis_version:7.0.15\r\nuptime_in_seconds:10\r\n\r\n" +
		"# Clients\r\nmaxclients:10000\r\nclient_recent_max_input_buffer:20\r\nblocked_clients:1\r\n\r\n" +
		"# Stats\r\ntotal_commands_processed:5\r\ninstantaneous_input_kbps:0.25\r\ntracking_total_keys:2\r\ntracking_total_prefixes:1\r\n\r\n" +
		"# Commandstats\r\ncmdstat_get:calls=3,usec=30,usec_per_call=10.00,rejected_calls=0,failed_calls=1\r\n\r\n" +
		"# Keyspace\r\ndb0:keys=2,expires=1,avg_ttl=1000\r\n"
	b := "# Server\r\nredis_version:7.0.15\r\nuptime_in_seconds:99\r\n\r\n" +
		"# Clients\r\nmaxclients:4000\r\nclient_recent_max_input_buffer:40\r\nblocked_clients:2\r\n\r\n" +
		"# Stats\r\ntotal_commands_processed:7\r\ninstantaneous_input_kbps:1.50\r\ntracking_total_keys:3\r\ntracking_total_prefixes:1\r\n\r\n" +
		"# Commandstats\r\ncmdstat_set:calls=2,usec=8,usec_per_call=4.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_get:calls=1,usec=2,usec_per_call=2.00,rejected_calls=1,failed_calls=0\r\n\r\n" +
		"# Keyspace\r\ndb0:keys=4,expires=3,avg_ttl=2000\r\n\r\n" +
		"# Errorstats\r\nerrorstat_ERR:count=2\r\n"
	want := "# Server\r\nredis_version:7.0.15\r\nuptime_in_seconds:10\r\n\r\n" +
		"# Clients\r\nmaxclients:10000\r\nclient_recent_max_input_buffer:40\r\nblocked_clients:3\r\n\r\n" +
		"# Stats\r\ntotal_commands_processed:12\r\ninstantaneous_input_kbps:1.75\r\ntracking_total_keys:5\r\ntracking_total_prefixes:1\r\n\r\n" +
		"# Commandstats\r\ncmdstat_get:calls=4,usec=32,usec_per_call=8.00,rejected_calls=1,failed_calls=1\r\n" +
		"cmdstat_set:calls=2,usec=8,usec_per_call=4.00,rejected_calls=0,failed_calls=0\r\n\r\n" +
		"# Keyspace\r\ndb0:keys=6,expires=4,avg_ttl=1750\r\n\r\n" +
		"# Errorstats\r\nerrorstat_ERR:count=2\r\n"
	for _, proto := range []int{2, 3} {
		wrap := func(text string) []byte {
			if proto == 3 {
				return []byte("=" + strconv.Itoa(len(text)+4) + "\r\ntxt:" + text + "\r\n")
			}
			return resp.AppendBulk(nil, []byte(text))
		}
		if got := string(joinInfo([][]byte{wrap(a), wrap(b)})); got != string(wrap(want)) {
			t.Errorf("RESP%d:\n got %q\nwant %q", proto, got, wrap(want))
		}
	}
	// An error or a reply of another shape is the first master's.
	for _, replies := range [][][]byte{
		{[]byte("-ERR x\r\n"), resp.AppendBulk(nil, []byte(b))},
		{resp.AppendBulk(nil, []byte(a)), []byte("$3\r\nab\r\n")},
	} {
		if got := joinInfo(replies); string(got) != string(replies[0]) {
			t.Errorf("joinInfo(%q) = %q, want the first", replies, got)
		}
	}
	// Persistence: a save in progress on any master is in progress; the
	// whole data was last saved, and saved as often, as its least saved
	// part; a failed status anywhere is the status.
	pa := "# Persistence\r\nloading:0\r\nrdb_changes_since_last_save:3\r\nrdb_bgsave_in_progress:0\r\nrdb_last_save_time:200\r\n" +
		"rdb_last_bgsave_status:ok\r\nrdb_saves:4\r\naof_rewrite_in_progress:0\r\naof_last_bgrewrite_status:err\r\ncurrent_cow_size:7\r\n"
	pb := "# Persistence\r\nloading:0\r\nrdb_changes_since_last_save:5\r\nrdb_bgsave_in_progress:1\r\nrdb_last_save_time:100\r\n" +
		"rdb_last_bgsave_status:err\r\nrdb_saves:2\r\naof_rewrite_in_progress:0\r\naof_last_bgrewrite_status:ok\r\ncurrent_cow_size:9\r\n"
	pwant := "# Persistence\r\nloading:0\r\nrdb_changes_since_last_save:8\r\nrdb_bgsave_in_progress:1\r\nrdb_last_save_time:100\r\n" +
		"rdb_last_bgsave_status:err\r\nrdb_saves:2\r\naof_rewrite_in_progress:0\r\naof_last_bgrewrite_status:err\r\ncurrent_cow_size:7\r\n"
	if got := string(joinInfo([][]byte{resp.AppendBulk(nil, []byte(pa)), resp.AppendBulk(nil, []byte(pb))})); got != string(resp.AppendBulk(nil, []byte(pwant))) {
		t.Errorf("Persistence:\n got %q\nwant %q", got, resp.AppendBulk(nil, []byte(pwant)))
	}
	// Memory: the bytes of every master's part added, the _human fields
	// written again; settings and ratios the first master's, the scripts
	// every master holds counted once.
	ma := "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\nmaxmemory:0\r\nmaxmemory_human:0B\r\n" +
		"mem_fragmentation_ratio:3.51\r\nnumber_of_cached_scripts:2\r\nlazyfreed_objects:1\r\nmaxmemory_policy:noeviction\r\n"
	mb := "# Memory\r\nused_memory:524288\r\nused_memory_human:512.00K\r\nmaxmemory:0\r\nmaxmemory_human:0B\r\n" +
		"mem_fragmentation_ratio:2.00\r\nnumber_of_cached_scripts:2\r\nlazyfreed_objects:0\r\nmaxmemory_policy:noeviction\r\n"
	mwant := "# Memory\r\nused_memory:1572864\r\nused_memory_human:1.50M\r\nmaxmemory:0\r\nmaxmemory_human:0B\r\n" +
		"mem_fragmentation_ratio:3.51\r\nnumber_of_cached_scripts:2\r\nlazyfreed_objects:1\r\nmaxmemory_policy:noeviction\r\n"
	if got := string(joinInfo([][]byte{resp.AppendBulk(nil, []byte(ma)), resp.AppendBulk(nil, []byte(mb))})); got != string(resp.AppendBulk(nil, []byte(mwant))) {
		t.Errorf("Memory:\n got %q\nwant %q", got, resp.AppendBulk(nil, []byte(mwant)))
	}
	for n, want := range map[int64]string{0: "0B", 1023: "1023B", 1024: "1.00K", 1536: "1.50K", 1 << 20: "1.00M", 5 << 30: "5.00G", 3 << 40: "3.00T", 1 << 50: "1.00P"} {
		if got := humanBytes(n); got != want {
			t.Errorf("humanBytes(%d) = %q, want %q", n, got, want)
		}
	}
	// A command rproxy sends to every master ran once for the client.
	fa := "# Commandstats\r\ncmdstat_flushall:calls=1,usec=30,usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\n"
	fb := "# Commandstats\r\ncmdstat_flushall:calls=1,usec=40,usec_per_call=40.00,rejected_calls=0,failed_calls=0\r\n"
	if got := string(joinInfo([][]byte{resp.AppendBulk(nil, []byte(fa)), resp.AppendBulk(nil, []byte(fb))})); got != string(resp.AppendBulk(nil, []byte(fa))) {
		t.Errorf("FLUSHALL on every master: %q, want one call", got)
	}
	// Sections only INFO keyspace asked for; an empty Keyspace.
	if got := string(joinInfo([][]byte{resp.AppendBulk(nil, []byte("# Keyspace\r\n")), resp.AppendBulk(nil, []byte("# Keyspace\r\ndb0:keys=1,expires=0,avg_ttl=0\r\n"))})); !strings.Contains(got, "db0:keys=1,expires=0,avg_ttl=0\r\n") {
		t.Errorf("keyspace of an empty and a one-key master: %q", got)
	}
}

// FuzzJoinInfo: any two masters' replies, well-formed or not, join without
// a panic, and two INFO texts join into one.
func FuzzJoinInfo(f *testing.F) {
	f.Add("# Stats\r\ntotal_commands_processed:5\r\n", "# Stats\r\ntotal_commands_processed:7\r\n")
	f.Add("# Commandstats\r\ncmdstat_get:calls=3,usec=30,usec_per_call=10.00\r\n", "# Commandstats\r\ncmdstat_get:calls=,usec=x,usec_per_call\r\n")
	f.Add("# Keyspace\r\ndb0:keys=2,expires=1,avg_ttl=1000\r\n", "# Keyspace\r\ndb0:keys=2,expires=-1,avg_ttl=1000,,=\r\n# \r\n:")
	f.Add("# CPU\r\nused_cpu_sys:1.5\r\n", "# CPU\r\nused_cpu_sys:1e308\r\nused_cpu_sys:1e308\r\n")
	f.Fuzz(func(t *testing.T, a, b string) {
		got := joinInfo([][]byte{resp.AppendBulk(nil, []byte(a)), resp.AppendBulk(nil, []byte(b))})
		if _, ok := resp.Payload(got, '$'); !ok {
			t.Fatalf("joinInfo(%q, %q) = %q: not a bulk string", a, b, got)
		}
		joinInfo([][]byte{[]byte(a), []byte(b)})
		joinInfo([][]byte{resp.AppendBulk(nil, []byte(a)), []byte(b)})
	})
}
