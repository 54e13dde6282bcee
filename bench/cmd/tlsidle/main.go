// Command tlsidle opens n TLS client connections to a Redis-protocol
// server, sends a PING on each and reads its reply, prints "ready", and
// holds them idle for -hold before it exits: bench/tls-idle.sh measures
// the server's memory meanwhile.
//
//	go run ./bench/cmd/tlsidle -addr 127.0.0.1:6380 -ca ca.crt -cert client.crt -key client.key -n 2000
package main

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "tlsidle:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("tlsidle", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:6380", "server address host:port")
	n := fs.Int("n", 2000, "connections")
	caFile := fs.String("ca", "", "PEM CA that signed the server's certificate")
	certFile := fs.String("cert", "", "client certificate (PEM), for servers that want one")
	keyFile := fs.String("key", "", "client key (PEM)")
	hold := fs.Duration("hold", 10*time.Second, "how long to hold the connections idle")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ca, err := os.ReadFile(*caFile)
	if err != nil {
		return err
	}
	cfg := &tls.Config{RootCAs: x509.NewCertPool(), MinVersion: tls.VersionTLS12}
	if !cfg.RootCAs.AppendCertsFromPEM(ca) {
		return errors.New("no certificate in " + *caFile)
	}
	if *certFile != "" {
		cert, err := tls.LoadX509KeyPair(*certFile, *keyFile)
		if err != nil {
			return err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	conns := make([]*tls.Conn, 0, *n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range *n {
		c, err := tls.Dial("tcp", *addr, cfg)
		if err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		conns = append(conns, c)
		if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
			return fmt.Errorf("connection %d: %w", i, err)
		}
		if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || line != "+PONG\r\n" {
			return fmt.Errorf("connection %d: PING got %q, %v", i, line, err)
		}
	}
	fmt.Println("ready")
	time.Sleep(*hold)
	return nil
}
