package proxy

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"

	"github.com/tidwall/redcon"
	"go.uber.org/zap"

	"github.com/rproxy/rproxy/proxy/command"
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

// auth answers AUTH [user] password against rproxy's users.
func (s *Server) auth(ss *session, cmd redcon.Command) {
	args := cmd.Args
	if s.cfg.Users == nil {
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
	if !s.login(ss, user, pass) {
		s.reply(ss, replyWrongPass)
		return
	}
	s.reply(ss, []byte("+OK\r\n"))
}

// login checks credentials and, if they match, authenticates the session.
func (s *Server) login(ss *session, user, pass []byte) bool {
	if !s.cfg.Users.verify(user, pass) {
		s.log.Info("client authentication failed", zap.String("client", ss.conn.RemoteAddr()), zap.Int64("id", ss.id), zap.ByteString("user", user))
		return false
	}
	ss.authed, ss.user = true, string(user)
	return true
}

// helloAuth handles the AUTH option of HELLO in proxy auth mode: it reports
// whether the HELLO may go on (with AUTH removed); if not, it has replied.
func (s *Server) helloAuth(ss *session, user, pass []byte, hasAuth bool) bool {
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
