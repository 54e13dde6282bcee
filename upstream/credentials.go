package upstream

import "sync/atomic"

// Credentials are a user name and password that can change while
// connections use them: each handshake reads the value in force then, so
// a change (a reload after the password was rotated) reaches every
// connection dialled after it, and those already logged in stay logged
// in, as Redis keeps them. Copies of a Config share one Credentials.
type Credentials struct {
	v atomic.Pointer[login]
}

type login struct{ user, password string }

// NewCredentials returns Credentials holding user and password.
func NewCredentials(user, password string) *Credentials {
	c := new(Credentials)
	c.Set(user, password)
	return c
}

// Set replaces the user and password and reports whether they changed.
func (c *Credentials) Set(user, password string) bool {
	old := c.v.Swap(&login{user, password})
	return old == nil || old.user != user || old.password != password
}

// Get returns the user and password in force.
func (c *Credentials) Get() (user, password string) {
	if l := c.v.Load(); l != nil {
		return l.user, l.password
	}
	return "", ""
}

// AuthArgs returns the AUTH command a new connection logs in with (nil:
// none): with the password when one is set, and for a user other than
// default even without one (a nopass user accepts any; without AUTH the
// connection would run as default).
func (c Config) AuthArgs() []string {
	user, password := c.Login()
	if user == "" {
		user = "default"
	}
	if password == "" && user == "default" {
		return nil
	}
	return []string{"AUTH", user, password}
}

// Login returns the user and password a new connection logs in with:
// Credentials' when set, else Username and Password.
func (c Config) Login() (user, password string) {
	if c.Credentials != nil {
		return c.Credentials.Get()
	}
	return c.Username, c.Password
}
