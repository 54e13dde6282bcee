package admin

// Paths are the endpoints Handler serves (with every Endpoints field set),
// for help texts and docs: `rproxy -h` lists them from here.
var Paths = []string{
	"GET /healthz",
	"GET /readyz",
	"GET /metrics",
	"GET /hotkeys",
	"GET /config",
	"POST /reload",
	"GET /debug/pprof/",
}
