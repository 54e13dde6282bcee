package proxy

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/rproxy/rproxy/proxy/command"
	"github.com/rproxy/rproxy/proxy/resp"
	"github.com/rproxy/rproxy/proxy/upstream"
)

// Users are rproxy's own client credentials (auth mode "proxy"): user name
// to the SHA-256 of the password. nil means clients do not authenticate.
type Users map[string][sha256.Size]byte

// verify reports whether password is user's, comparing in constant time; an
// unknown user costs the same as a wrong password.
func (u Users) verify(user, password []byte) bool {
	sum := sha256.Sum256(password)
	want, ok := u[string(user)]
	match := subtle.ConstantTimeCompare(sum[:], want[:]) == 1
	return ok && match
}

var (
	replyNoAuth      = []byte("-NOAUTH Authentication required.\r\n")
	replyNoAuthHello = []byte("-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time\r\n")
	replyWrongPass   = []byte("-WRONGPASS invalid username-password pair or user is disabled.\r\n")
)

// gateAuth answers for a session that has not authenticated yet: as on
// Redis, only AUTH, HELLO, QUIT and RESET run; the rest get -NOAUTH. It
// reports whether the command may go on.
func (s *Server) gateAuth(ss *session, info *command.Info) bool {
	if ss.authed || info != nil && (info.Handling == command.Hello || info.Handling == command.Quit || info.Handling == command.Reset) {
		return true
	}
	s.reply(ss, replyNoAuth)
	return false
}

// auth answers AUTH [user] password: against rproxy's users (proxy mode),
// or against Redis itself (passthrough mode).
func (s *Server) auth(ss *session, cmd resp.Command) {
	args := cmd.Args
	if s.cfg.Users == nil && !s.cfg.AuthPassthrough {
		s.refuseMsg(ss, "AUTH is disabled: rproxy does not authenticate clients (auth.mode is none)")
		return
	}
	var user, pass []byte
	switch len(args) {
	case 2:
		user, pass = []byte("default"), args[1]
	case 3:
		user, pass = args[1], args[2]
	default:
		s.reply(ss, []byte("-ERR wrong number of arguments for 'auth' command\r\n"))
		return
	}
	if s.cfg.AuthPassthrough {
		if r, ok := s.loginUpstream(ss, user, pass); !ok {
			s.reply(ss, r)
			return
		}
		s.reply(ss, []byte("+OK\r\n"))
		return
	}
	if !s.login(ss, user, pass) {
		s.reply(ss, replyWrongPass)
		return
	}
	s.reply(ss, []byte("+OK\r\n"))
}

// login checks credentials and, if they match, authenticates the session.
func (s *Server) login(ss *session, user, pass []byte) bool {
	if !s.cfg.Users.verify(user, pass) {
		s.log.Info("client authentication failed", zap.String("client", ss.conn.RemoteAddr()), zap.Int64("id", ss.id),
			zap.String("command", ss.lastCmd), zap.ByteString("user", user))
		return false
	}
	ss.authed, ss.user = true, string(user)
	return true
}

// helloAuth handles the AUTH option of HELLO in proxy auth mode: it reports
// whether the HELLO may go on (with AUTH removed); if not, it has replied.
func (s *Server) helloAuth(ss *session, user, pass []byte, hasAuth bool) bool {
	if hasAuth && s.cfg.AuthPassthrough {
		if r, ok := s.loginUpstream(ss, user, pass); !ok {
			s.reply(ss, r)
			return false
		}
		return true
	}
	switch {
	case hasAuth && s.cfg.Users == nil:
		s.refuseMsg(ss, "HELLO AUTH is disabled: rproxy does not authenticate clients (auth.mode is none)")
		return false
	case hasAuth && !s.login(ss, user, pass):
		s.reply(ss, replyWrongPass)
		return false
	case !ss.authed:
		s.reply(ss, replyNoAuthHello)
		return false
	}
	return true
}

func isAuth(name []byte) bool { return bytes.EqualFold(name, []byte("auth")) }

// maxUserPools bounds the distinct upstream credentials that get pools of
// their own in passthrough mode.
const maxUserPools = 64

// loginUpstream checks credentials against Redis itself (passthrough mode)
// and, if Redis accepts them, moves the session to shared connections
// authenticated as that user, so ACL rules apply as on Redis. Otherwise it
// returns the reply to give the client: Redis's own, byte for byte.
func (s *Server) loginUpstream(ss *session, user, pass []byte) ([]byte, bool) {
	if ss.pin != nil {
		return resp.AppendError(nil, "ERR rproxy: AUTH inside a transaction, WATCH or SELECT of another database is not supported"), false
	}
	r, err := s.checkUpstreamAuth(user, pass)
	if err != nil {
		return resp.AppendError(nil, "ERR upstream unavailable: "+err.Error()), false
	}
	if string(r) != "+OK\r\n" {
		s.log.Info("client authentication failed", zap.String("client", ss.conn.RemoteAddr()), zap.Int64("id", ss.id),
			zap.String("command", ss.lastCmd), zap.ByteString("user", user))
		return r, false
	}
	ps, err := s.userPoolSet(string(user), string(pass))
	if err != nil {
		return resp.AppendError(nil, "ERR rproxy: "+err.Error()), false
	}
	ss.pools, ss.user = ps, string(user)
	return nil, true
}

// checkUpstreamAuth sends AUTH user pass on a fresh connection and returns
// Redis's reply.
func (s *Server) checkUpstreamAuth(user, pass []byte) ([]byte, error) {
	up := s.cfg.Upstream
	nc, err := upstream.Dial(context.Background(), up) // TLS too, when configured
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(up.Timeout))
	if _, err := nc.Write(resp.AppendCommand(nil, []byte("AUTH"), user, pass)); err != nil {
		return nil, err
	}
	return resp.ReadReply(bufio.NewReader(nc), nil)
}

// userPoolSet returns the shared pools authenticated as user, creating them
// on first use and waiting (up to the dial timeout) for them to connect.
func (s *Server) userPoolSet(user, pass string) (*poolSet, error) {
	sum := sha256.Sum256([]byte(pass))
	key := user + "\x00" + hex.EncodeToString(sum[:])
	s.umu.Lock()
	ps, ok := s.userPools[key]
	if !ok {
		if s.userPools == nil && s.draining.Load() {
			s.umu.Unlock()
			return nil, errors.New("proxy shutting down")
		}
		if len(s.userPools) >= maxUserPools {
			s.umu.Unlock()
			return nil, fmt.Errorf("too many distinct upstream credentials in use (%d)", maxUserPools)
		}
		ucfg := s.cfg.Upstream
		ucfg.Username, ucfg.Password = user, pass
		ps = new(poolSet)
		if err := s.newPoolSet(ps, ucfg); err != nil {
			s.umu.Unlock()
			return nil, err
		}
		if s.userPools == nil {
			s.userPools = make(map[string]*poolSet)
		}
		s.userPools[key] = ps
	}
	s.umu.Unlock()
	deadline := time.Now().Add(s.cfg.Upstream.DialTimeout)
	for !ps[2].Ready() || !ps[3].Ready() {
		if time.Now().After(deadline) {
			break // the first commands get the connection error
		}
		time.Sleep(time.Millisecond)
	}
	return ps, nil
}
