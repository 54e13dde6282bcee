// Command txload measures transactions and queue operations per second
// through one address: each of -c connections, in a closed loop, sends
//
//	multi: MULTI, INCR k, EXPIRE k 100, EXEC in one write (as go-redis's
//	       TxPipelined and redis-py's default pipeline do)
//	watch: WATCH k, GET k, then MULTI, SET k, EXEC in one write (an
//	       optimistic update)
//	queue: LPUSH q job, then BRPOP q 1 (a job queue's producer and worker)
//
// and reads every reply before the next round. It prints one line: the
// mode and operations (transactions, updates, jobs) per second.
//
//	go run ./bench/cmd/txload -addr 127.0.0.1:6380 -mode multi -c 50 -n 50000
//
// With -cluster, -addr is a node of a Redis Cluster, and each connection
// goes to the master of its key, found from the MOVED the node answers:
// the cluster's direct figure, beside a proxy's.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rproxy/rproxy/resp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "server or proxy address")
	mode := flag.String("mode", "multi", "multi, watch or queue")
	conns := flag.Int("c", 10, "connections")
	n := flag.Int("n", 20000, "operations in all")
	cluster := flag.Bool("cluster", false, "-addr is a Redis Cluster node: each connection goes to its key's master")
	flag.Parse()
	if *conns < 1 || *n < *conns || (*mode != "multi" && *mode != "watch" && *mode != "queue") {
		fmt.Fprintln(os.Stderr, "txload: -mode multi|watch|queue, -c >= 1, -n >= -c")
		os.Exit(2)
	}
	per := *n / *conns
	var wg sync.WaitGroup
	errs := make(chan error, *conns)
	start := time.Now()
	for w := range *conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(*addr, *mode, w, per, *cluster); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	for err := range errs {
		fmt.Fprintln(os.Stderr, "txload:", err)
		os.Exit(1)
	}
	fmt.Printf("%s %.0f\n", *mode, float64(per**conns)/elapsed.Seconds())
}

// run is one connection's loop.
func run(addr, mode string, w, rounds int, cluster bool) error {
	key, queue := "txload:k:"+strconv.Itoa(w), "txload:q:"+strconv.Itoa(w)
	if cluster {
		used := key
		if mode == "queue" {
			used = queue
		}
		var err error
		if addr, err = masterOf(addr, used); err != nil {
			return err
		}
	}
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	r := bufio.NewReaderSize(nc, 16<<10)
	var fr resp.Framer
	do := func(out []byte, replies int) error {
		if _, err := nc.Write(out); err != nil {
			return err
		}
		for range replies {
			if err := readReply(r, &fr); err != nil {
				return err
			}
		}
		return nil
	}
	var out []byte
	for i := range rounds {
		switch mode {
		case "multi":
			out = resp.AppendCommandString(out[:0], "MULTI")
			out = resp.AppendCommandString(out, "INCR", key)
			out = resp.AppendCommandString(out, "EXPIRE", key, "100")
			out = resp.AppendCommandString(out, "EXEC")
			err = do(out, 4)
		case "watch":
			if err = do(resp.AppendCommandString(out[:0], "WATCH", key), 1); err == nil {
				if err = do(resp.AppendCommandString(out[:0], "GET", key), 1); err == nil {
					out = resp.AppendCommandString(out[:0], "MULTI")
					out = resp.AppendCommandString(out, "SET", key, strconv.Itoa(i))
					out = resp.AppendCommandString(out, "EXEC")
					err = do(out, 3)
				}
			}
		case "queue":
			if err = do(resp.AppendCommandString(out[:0], "LPUSH", queue, "job"), 1); err == nil {
				err = do(resp.AppendCommandString(out[:0], "BRPOP", queue, "1"), 1)
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// masterOf returns the address of the master of key's slot: addr, or
// the node a MOVED from addr names.
func masterOf(addr, key string) (string, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	if _, err := nc.Write(resp.AppendCommandString(nil, "EXISTS", key)); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(nc).ReadString('\n')
	if err != nil {
		return "", err
	}
	if f := strings.Fields(line); len(f) == 3 && f[0] == "-MOVED" {
		return f[2], nil
	}
	if line[0] == '-' {
		return "", fmt.Errorf("EXISTS %s: %q", key, line)
	}
	return addr, nil
}

// readReply reads one whole reply, failing on an error reply.
func readReply(r *bufio.Reader, fr *resp.Framer) error {
	for {
		if _, err := r.Peek(1); err != nil {
			return err
		}
		buf, _ := r.Peek(r.Buffered())
		k, done, err := fr.Next(buf)
		if err != nil {
			return err
		}
		if done && fr.Kind() == '-' {
			return fmt.Errorf("an error reply, ending %q", buf[:k])
		}
		if _, err := r.Discard(k); err != nil {
			return err
		}
		if done {
			return nil
		}
	}
}
