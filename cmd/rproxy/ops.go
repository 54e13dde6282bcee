package main

import (
	"strings"

	"github.com/rproxy/rproxy/admin"
	"github.com/rproxy/rproxy/hotkey"
)

// adminFlagHelp is the -admin flag's help: every endpoint it serves.
func adminFlagHelp() string {
	return "admin HTTP address (config: admin; default off), serving " + strings.Join(admin.Paths, ", ")
}

// hotKeysView is what GET /hotkeys encodes: [] rather than null when
// there are none (or detection is off).
func hotKeysView(hot []hotkey.HotKey) []hotkey.HotKey {
	if hot == nil {
		return []hotkey.HotKey{}
	}
	return hot
}
