package proxy_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/proxytest"
	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/proxy"
	"github.com/rproxy/rproxy/resp"
)

// FuzzClientInput sends arbitrary bytes as a client, through the whole client
// path (limits, the request parser, sessions, the upstream), to a proxy in front
// of a real Redis. Whatever the input, the proxy must answer or close within
// a bound, and keep serving other clients.
func FuzzClientInput(f *testing.F) {
	// Commands that could stop, block or reconfigure the server are renamed
	// away: the fuzzer must test the proxy, not find SHUTDOWN.
	var args []string
	for _, c := range []string{"SHUTDOWN", "DEBUG", "CONFIG", "SLAVEOF", "REPLICAOF", "CLIENT", "EVAL", "EVALSHA",
		"EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO", "FUNCTION", "SCRIPT", "MIGRATE", "FAILOVER", "SYNC", "PSYNC",
		"ACL", "MODULE", "SAVE", "BGSAVE", "BGREWRITEAOF", "CLUSTER", "MONITOR", "WAIT"} {
		args = append(args, "--rename-command", c, "")
	}
	args = append(args, "--proto-max-bulk-len", "1mb", "--maxmemory", "64mb")
	rs := redistest.Start(f, args...)
	p := proxytest.Start(f, rs.Addr, func(c *proxy.Config) {
		c.MaxBulkLen = 64 << 10
		c.MaxQueryBuffer = 256 << 10
	})

	for _, seed := range []string{
		"PING\r\n",
		"*1\r\n$4\r\nPING\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
		"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n",
		"set a \"b c\"\r\nget a\r\n",
		"set a 'unbalanced\r\n",
		"*-1\r\n*0\r\n",
		"*2\r\n$3\r\nGET\r\n$99999999999\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000\r\nxx",
		"*1\r\n$5\r\nMULTI\r\n*2\r\n$6\r\nSELECT\r\n$1\r\n1\r\n",
		"*2\r\n$5\r\nHELLO\r\n$1\r\n9\r\n",
		"*4\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$7\r\nSETNAME\r\n$1\r\nx\r\n",
		"*1\r\n$4\r\nQUIT\r\n*1\r\n$4\r\nPING\r\n",
		"*1\r\n$5\r\nRESET\r\n",
		"$3\r\nfoo\r\n",
		"\x00\x01\x02\xff",
	} {
		f.Add([]byte(seed))
	}

	f.Fuzz(func(t *testing.T, data []byte) {
		nc, err := net.DialTimeout("tcp", p.Addr, 2*time.Second)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(10 * time.Second))
		go func() {
			nc.Write(data)
			// End of input: the proxy must finish and close, never wait forever.
			nc.(*net.TCPConn).CloseWrite()
		}()
		if _, err := io.Copy(io.Discard, nc); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("no close within 10s after input %q", truncateFuzz(data))
			}
		}

		// The proxy still serves a well-behaved client.
		c, err := net.DialTimeout("tcp", p.Addr, 2*time.Second)
		if err != nil {
			t.Fatalf("dial after input %q: %v", truncateFuzz(data), err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		c.Write(resp.AppendCommandString(nil, "PING"))
		got := make([]byte, 7)
		if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, []byte("+PONG\r\n")) {
			rest, _ := bufio.NewReader(c).ReadString('\n')
			log, _ := os.ReadFile(rs.LogFile)
			if len(log) > 3000 {
				log = log[len(log)-3000:]
			}
			t.Fatalf("PING after input %q: %q%q %v\nRedis log tail:\n%s", truncateFuzz(data), got, rest, err, log)
		}
	})
}

func truncateFuzz(b []byte) []byte {
	if len(b) > 200 {
		return b[:200]
	}
	return b
}
