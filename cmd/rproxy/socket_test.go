package main

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rproxy/rproxy/internal/redistest"
	"github.com/rproxy/rproxy/resp"
)

// TestSocketActivationRestartRefusesNoClient: given the listening socket
// by systemd (socket activation), rproxy serves on it, not on its listen
// address; across a restart (stopped, then started again on the same
// socket, as systemctl restart does with rproxy.socket), a client that
// connects while no rproxy runs is not refused: it waits in the socket's
// backlog and the next rproxy answers it.
func TestSocketActivationRestartRefusesNoClient(t *testing.T) {
	bin := buildBinary(t)
	rs := redistest.Start(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0") // systemd's socket
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f, err := ln.(*net.TCPListener).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	start := func() (*exec.Cmd, <-chan string) {
		t.Helper()
		admin := freeAddr(t)
		// systemd sets LISTEN_PID to the service's pid: sh's, kept by exec.
		cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" "$@"`,
			bin, "-listen", freeAddr(t), "-upstream", rs.Addr, "-admin", admin)
		cmd.ExtraFiles = []*os.File{f} // descriptor 3
		return startCmd(t, cmd, admin)
	}
	first, logs := start()
	before, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	if r := clientDo(t, before)("PING"); r != "+PONG\r\n" {
		t.Fatalf("PING on the activated socket = %q", r)
	}
	first.Process.Signal(syscall.SIGTERM)
	out := <-logs
	first.Wait()
	if !strings.Contains(out, "socket activation") {
		t.Errorf("the log does not say the socket came from systemd:\n%s", out)
	}

	// No rproxy runs now: a client connects all the same, and waits.
	during, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("a client connecting while rproxy restarts was refused: %v", err)
	}
	defer during.Close()
	during.Write(resp.AppendCommandString(nil, "PING"))
	start()
	during.SetDeadline(time.Now().Add(10 * time.Second))
	if r, err := resp.ReadReply(bufio.NewReader(during), nil); string(r) != "+PONG\r\n" {
		t.Fatalf("PING sent while rproxy restarted = %q, %v", r, err)
	}
}

// TestActivatedListenerEnvironment: no socket when systemd passed none or
// passed it to another process; a LISTEN_FDS without a socket is an
// error; the variables are cleared either way.
func TestActivatedListenerEnvironment(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		wantErr string
	}{
		{"none", map[string]string{}, ""},
		{"another process's", map[string]string{"LISTEN_PID": "1", "LISTEN_FDS": "1"}, ""},
		{"no socket", map[string]string{"LISTEN_PID": "4242", "LISTEN_FDS": "0"}, "LISTEN_FDS"},
		{"not a number", map[string]string{"LISTEN_PID": "4242", "LISTEN_FDS": "x"}, "LISTEN_FDS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range tc.env {
				env[k] = v
			}
			ln, err := activatedListener(func(k string) string { return env[k] }, func(k string) error { delete(env, k); return nil }, 4242)
			if ln != nil {
				ln.Close()
				t.Fatal("a listener where none was passed")
			}
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("error %v, want one naming %q", err, tc.wantErr)
			}
			if len(tc.env) > 0 && len(env) != 0 {
				t.Errorf("variables left: %v", env)
			}
		})
	}
}
