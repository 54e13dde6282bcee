package proxy

import "github.com/rproxy/rproxy/resp"

// arityCheck is the chain's first check, as it is Redis's (processCommand
// checks a command's argument count before authentication, ACLs or
// anything else): a command, or a known subcommand of a container, whose
// count its table entry does not allow gets Redis's own error. Redis runs
// nothing of such a command (inside MULTI it aborts the transaction, as
// deny does), so answering it here is what Redis answers, and keeps the
// commands rproxy answers or acts on itself (RESET, HELLO, CLIENT ...,
// the policy's refusals) from acting on what Redis would refuse.
type arityCheck struct{ s *Server }

func (st arityCheck) command(ss *session, c *call) bool {
	info, args := c.info, c.cmd.Args
	if info != nil && info.Name == "exec" {
		return false // Redis ends the transaction with EXECABORT: its own answer
	}
	if info == nil || arityAllows(info.Arity, len(args)) {
		if info == nil || info.Subcommands == nil || len(args) < 2 {
			return false
		}
		if info = info.Subcommand(args[1]); info == nil || arityAllows(info.Arity, len(args)) {
			return false // an unknown subcommand: Redis's error, as sent
		}
	}
	st.s.deny(ss, arityError(info.Name))
	return true
}

func (arityCheck) replies(*session) {}

// arityAllows reports whether n arguments (the name included) fit arity,
// COMMAND's: exactly arity when positive, at least -arity when negative.
func arityAllows(arity, n int) bool {
	if arity >= 0 {
		return n == arity
	}
	return n >= -arity
}

// arityError is Redis 7.0's error for a wrong argument count; name is the
// table's (a subcommand's is "parent|sub").
func arityError(name string) []byte {
	return resp.AppendError(nil, "ERR wrong number of arguments for '"+name+"' command")
}
