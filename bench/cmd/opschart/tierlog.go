package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// A tier outage after a lost tracking connection lasts about one reconnect
// backoff (50 ms by default): far shorter than the scrape interval, so
// rproxy_hotkey_tier_serving rarely reads 0. rproxy logs every change of
// the tier's state, and those lines give its exact times.
const (
	msgTierServing = "local tier serving"
	msgTierStopped = "local tier emptied and stopped"
)

// outage is a stretch, in seconds from the scenario's start, during which
// rproxy's log says the tier did not serve.
type outage struct {
	from, to float64
	why      string // the stop line's fields, e.g. "tracking_up=false"
}

// parseTierLog reads rproxy's JSON log (zap: "ts" in seconds since the
// epoch, "msg") and returns the tier's outages after start; one still
// open at the end of the log lasts until end. Lines that do not start with
// '{' are skipped; a line that does but is not valid JSON is an error.
func parseTierLog(log string, start time.Time, end float64) ([]outage, error) {
	var out []outage
	open := false
	for _, l := range strings.Split(log, "\n") {
		if !strings.HasPrefix(l, "{") {
			continue
		}
		var e struct {
			TS         float64 `json:"ts"`
			Msg        string  `json:"msg"`
			TrackingUp *bool   `json:"tracking_up"`
			WithinLag  *bool   `json:"within_lag"`
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			return nil, fmt.Errorf("rproxy log line %q: %w", l, err)
		}
		at := e.TS - float64(start.UnixNano())/1e9
		if at < 0 {
			continue
		}
		switch {
		case e.Msg == msgTierStopped && !open:
			var why []string
			if e.TrackingUp != nil {
				why = append(why, fmt.Sprintf("tracking_up=%v", *e.TrackingUp))
			}
			if e.WithinLag != nil {
				why = append(why, fmt.Sprintf("within_lag=%v", *e.WithinLag))
			}
			out = append(out, outage{from: at, to: end, why: strings.Join(why, " ")})
			open = true
		case e.Msg == msgTierServing && open:
			out[len(out)-1].to = at
			open = false
		}
	}
	return out, nil
}
