package proxy

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/rproxy/rproxy/command"
	"github.com/rproxy/rproxy/resp"
	"github.com/rproxy/rproxy/upstream"
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

// authenticating is the authentication stage: it answers AUTH, and -NOAUTH
// to a session that has not authenticated. Its configuration is the auth
// section as Config carries it (Users, or AuthPassthrough; Config.Validate
// refuses both), its metric the failure counter, its log the failed
// attempts, at most one line per authLogEvery. In passthrough mode it owns
// the shared pools of each upstream user clients logged in as: made with
// newPools from the upstream configuration; when one stops letting its
// user log in, the sessions on it (sessionsOn) are closed.
type authenticating struct {
	users       Users // nil: clients need no password (or passthrough)
	passthrough bool
	upstream    upstream.Config
	failures    prometheus.Counter
	log         *zap.Logger
	clock       func() time.Time
	failLog     logLimiter
	draining    *atomic.Bool
	checker     *authChecker // passthrough: where Redis checks credentials
	newPools    func(ps *poolSet, cfg upstream.Config) error
	sessionsOn  func(ps *poolSet) []*session
	flush       func(ss *session) // sends the batch so far (loginUpstream)

	// userPools are pools authenticated as the upstream users clients
	// AUTHed as, by user and password hash; closed: no more are made.
	mu        sync.Mutex
	userPools map[string]*poolSet
	closed    bool
}

func (a *authenticating) command(ss *session, c *call) bool {
	if isAuth(c.cmd.Args[0]) && !c.inExec { // inside MULTI: answered in EXEC's array
		a.auth(ss, c.cmd)
		return true
	}
	return !a.gate(ss, c.info)
}

func (*authenticating) replies(*session) {}

// gate answers for a session that has not authenticated yet: as on
// Redis, only AUTH, HELLO, QUIT and RESET run; the rest get -NOAUTH. It
// reports whether the command may go on.
func (a *authenticating) gate(ss *session, info *command.Info) bool {
	if ss.authed || info != nil && (info.Handling == command.Hello || info.Handling == command.Quit || info.Handling == command.Reset) {
		return true
	}
	ss.replyInMode(replyNoAuth)
	return false
}

// auth answers AUTH [user] password: against rproxy's users (proxy mode),
// or against Redis itself (passthrough mode).
func (a *authenticating) auth(ss *session, cmd resp.Command) {
	args := cmd.Args
	if a.users == nil && !a.passthrough {
		ss.replyInMode(authWithoutUsers(args))
		return
	}
	user, pass, ok := authCredentials(args)
	if !ok {
		ss.replyInMode(replySyntaxError)
		return
	}
	if a.passthrough {
		// Redis judges the command as the client sent it: AUTH <password>
		// without a password configured is an error there, while AUTH
		// default <anything> is not.
		if r, ok := a.loginUpstream(ss, args, user, pass); !ok {
			ss.replyInMode(r)
			return
		}
		if ss.pin != nil {
			// The pinned connection (a database, a watch) becomes the
			// user's too, and gives the reply; it is reset for the pool's
			// own user when it is released.
			ss.forward(cmd.Raw)
			return
		}
		ss.replyInMode([]byte("+OK\r\n"))
		return
	}
	if !a.login(ss, user, pass) {
		ss.replyInMode(replyWrongPass)
		return
	}
	ss.replyInMode([]byte("+OK\r\n"))
}

// login checks credentials and, if they match, authenticates the session.
func (a *authenticating) login(ss *session, user, pass []byte) bool {
	if !a.users.verify(user, pass) {
		a.failed(ss, user)
		return false
	}
	ss.authed, ss.user = true, string(user)
	return true
}

// helloAuth handles the AUTH option of HELLO: it reports whether the HELLO
// may go on (with AUTH removed); if not, it has replied. check (nil: no
// AUTH option) is HELLO with the AUTH option alone, which passthrough mode
// sends Redis to check the credentials, so that MONITOR shows the client's
// command, as without rproxy.
func (a *authenticating) helloAuth(ss *session, user, pass []byte, check [][]byte) bool {
	hasAuth := check != nil
	if hasAuth && a.passthrough {
		if r, ok := a.loginUpstream(ss, check, user, pass); !ok {
			ss.replyInMode(r)
			return false
		}
		return true
	}
	switch {
	case hasAuth && a.users == nil:
		if !bytes.Equal(user, []byte("default")) {
			a.failed(ss, user)
			ss.replyInMode(replyWrongPass)
			return false
		}
		return true // the default user, which needs no password here
	case hasAuth && !a.login(ss, user, pass):
		ss.replyInMode(replyWrongPass)
		return false
	case !ss.authed:
		ss.replyInMode(replyNoAuthHello)
		return false
	}
	return true
}

// failed counts a failed AUTH (or HELLO AUTH) and logs it at warn, at
// most one line per authLogEvery: a brute-force run is one line a second
// with the count of those not logged, not one line per guess.
func (a *authenticating) failed(ss *session, user []byte) {
	a.failures.Inc()
	ok, suppressed := a.failLog.allow(a.clock())
	if !ok {
		return
	}
	a.log.Warn("client authentication failed", zap.String("client", ss.conn.RemoteAddr()), zap.Int64("id", ss.id),
		zap.String("command", ss.lastCmd), zap.ByteString("user", user), zap.Int("not_logged_since_last", suppressed))
}

// authLogEvery is the shortest interval between two failed-AUTH lines.
const authLogEvery = time.Second

// logLimiter lets one event in per authLogEvery and counts the others.
// The zero value is ready.
type logLimiter struct {
	mu         sync.Mutex
	next       time.Time // no line before this
	suppressed int       // events not logged since the last line
}

// allow reports whether an event at now is logged and, if so, how many
// were not since the last one that was.
func (l *logLimiter) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Before(l.next) {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.next, l.suppressed = now.Add(authLogEvery), 0
	return true, n
}

// authWithoutUsers answers AUTH when rproxy does not authenticate clients
// (auth.mode none) as a Redis without passwords does: its default user
// takes any password, and there is no other user. Nothing changes upstream.
func authWithoutUsers(args [][]byte) []byte {
	switch {
	case len(args) == 2:
		return []byte("-ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?\r\n")
	case len(args) < 2:
		return []byte("-ERR wrong number of arguments for 'auth' command\r\n")
	case len(args) > 3:
		return replySyntaxError
	case bytes.Equal(args[1], []byte("default")):
		return []byte("+OK\r\n")
	}
	return replyWrongPass
}

// answerInExec answers an AUTH queued inside MULTI, in EXEC's array
// (txclient.go), as auth does outside it: in mode none as a Redis without
// passwords, in mode proxy against rproxy's users, the login taking effect
// then. (In passthrough mode it is refused inside MULTI.)
func (a *authenticating) answerInExec(ss *session, args [][]byte) []byte {
	if a.users == nil {
		return authWithoutUsers(args)
	}
	user, pass, ok := authCredentials(args)
	if !ok {
		return replySyntaxError
	}
	if !a.login(ss, user, pass) {
		return replyWrongPass
	}
	return []byte("+OK\r\n")
}

// replySyntaxError is Redis's reply to AUTH with more than two arguments.
var replySyntaxError = []byte("-ERR syntax error\r\n")

// authCredentials reads AUTH [user] password (user "default" when left
// out); ok is false with more arguments (fewer fail the arity check
// first).
func authCredentials(args [][]byte) (user, pass []byte, ok bool) {
	switch len(args) {
	case 2:
		return []byte("default"), args[1], true
	case 3:
		return args[1], args[2], true
	}
	return nil, nil, false
}

func isAuth(name []byte) bool { return bytes.EqualFold(name, []byte("auth")) }

// maxUserPools bounds the distinct upstream credentials that get pools of
// their own in passthrough mode.
const maxUserPools = 64

// loginUpstream checks credentials against Redis itself (passthrough mode)
// and, if Redis accepts them, moves the session to shared connections
// authenticated as that user, so ACL rules apply as on Redis. Otherwise it
// returns the reply to give the client: Redis's own, byte for byte. authArgs
// is the AUTH command as the client sent it (or HELLO with AUTH alone).
func (a *authenticating) loginUpstream(ss *session, authArgs [][]byte, user, pass []byte) ([]byte, bool) {
	if ss.pin != nil && (ss.inTransaction() || ss.stream) {
		return resp.AppendError(nil, "ERR rproxy: AUTH inside a transaction or in pub/sub mode is not supported"), false
	}
	r, err := a.checker.check(authArgs)
	if err != nil {
		return resp.AppendError(nil, "ERR upstream unavailable: "+err.Error()), false
	}
	if len(r) == 0 || r[0] == '-' || r[0] == '!' { // AUTH's +OK, or HELLO's map, is a success
		a.failed(ss, user)
		return r, false
	}
	ps, err := a.userPoolSet(string(user), string(pass))
	if err != nil {
		return resp.AppendError(nil, "ERR rproxy: "+err.Error()), false
	}
	if ss.pin == nil {
		// The commands before the AUTH run as the user they were sent
		// as: the batch so far goes on the pools it was queued for.
		a.flush(ss)
	}
	ss.setPools(ps)
	ss.user = string(user)
	return nil, true
}

// setPools moves the session to other shared connections, and publishes
// which, so that closeUserSessions can find it.
func (ss *session) setPools(ps *poolSet) {
	ss.pools = ps
	ss.poolsRef.Store(ps)
}

// userGone is called when a connection of a user's shared pools is lost:
// Redis closes a user's connections when the user is deleted (ACL DELUSER)
// or killed (CLIENT KILL USER). If the credentials no longer work, the
// sessions logged in with them are closed, as Redis closed its own, and the
// pools go: a later AUTH, once the user exists again, gets fresh ones.
func (a *authenticating) userGone(key, user, pass string, checking *atomic.Bool) {
	if !checking.CompareAndSwap(false, true) {
		return
	}
	defer checking.Store(false)
	r, err := a.checker.check([][]byte{[]byte("AUTH"), []byte(user), []byte(pass)})
	if err != nil || string(r) == "+OK\r\n" {
		return // Redis unreachable (its connections come back), or the user still logs in
	}
	a.mu.Lock()
	ps := a.userPools[key]
	delete(a.userPools, key)
	a.mu.Unlock()
	if ps == nil {
		return
	}
	gone := a.sessionsOn(ps)
	a.log.Warn("closing the sessions of an upstream user that no longer logs in", zap.String("user", user),
		zap.Int("sessions", len(gone)), zap.String("reply", strings.TrimSpace(string(r))))
	for _, ss := range gone {
		ss.conn.NetConn().Close()
	}
	for _, p := range ps {
		if p != nil {
			p.Close()
		}
	}
}

// userPoolSet returns the shared pools authenticated as user, creating them
// on first use and waiting (up to the dial timeout) for them to connect.
func (a *authenticating) userPoolSet(user, pass string) (*poolSet, error) {
	sum := sha256.Sum256([]byte(pass))
	key := user + "\x00" + hex.EncodeToString(sum[:])
	a.mu.Lock()
	ps, ok := a.userPools[key]
	if !ok {
		if a.closed {
			a.mu.Unlock()
			return nil, errors.New("proxy shutting down")
		}
		if len(a.userPools) >= maxUserPools {
			a.mu.Unlock()
			return nil, fmt.Errorf("too many distinct upstream credentials in use (%d)", maxUserPools)
		}
		ucfg := a.upstream
		ucfg.Username, ucfg.Password, ucfg.Credentials = user, pass, nil // the client's, not rproxy's own
		checking := new(atomic.Bool)
		ucfg.OnState = func(up bool) {
			if !up && !a.draining.Load() {
				go a.userGone(key, user, pass, checking)
			}
		}
		ps = new(poolSet)
		if err := a.newPools(ps, ucfg); err != nil {
			a.mu.Unlock()
			return nil, err
		}
		if a.userPools == nil {
			a.userPools = make(map[string]*poolSet)
		}
		a.userPools[key] = ps
	}
	a.mu.Unlock()
	deadline := time.Now().Add(a.upstream.DialTimeout)
	for !ps[2].Ready() || !ps[3].Ready() {
		if time.Now().After(deadline) {
			break // the first commands get the connection error
		}
		time.Sleep(time.Millisecond)
	}
	return ps, nil
}

// closeUserPools takes the user pools for closing (at shutdown); none is
// made after.
func (a *authenticating) closeUserPools() []*poolSet {
	a.mu.Lock()
	defer a.mu.Unlock()
	var sets []*poolSet
	for _, ps := range a.userPools {
		sets = append(sets, ps)
	}
	a.userPools, a.closed = nil, true
	return sets
}
