// Package salt spreads a hot key's GETs over copies of it kept on other
// cluster masters (hotkeys.salt): the engine behind salted fan-out. It
// needs no client session, so it lives apart from package proxy, which
// queues its reads and writes in a session's batch.
//
// Each salted key has up to Config.Copies names, the key itself (the
// origin) and copies whose names hash to other masters (chosen from the
// live slot map, the same on every rproxy). A read picks one at random
// (Pick); a copy that misses is read from the origin and filled (Fill),
// for at most Config.TTL and never beyond the origin's own expiry; the
// fill is followed in the background (Settle), one per copy at a time, and
// the read that sent it does not wait for it. A write
// through rproxy marks the key before it is sent (BeginWrite) and deletes
// its copies once acknowledged (EndWrites); a fill is sent only if no
// write began since it read the origin, on the same ordered connection as
// any later deletion (see Engine). A write of a key not salted yet is
// counted in a bucket of keys (by hash): a key salted meanwhile is not
// filled until it ends. A transaction's queued writes are held from when
// they are queued until its EXEC is answered (Hold, Held). A flush stops
// fills while under way and deletes again the copies of keys whose fills
// were unanswered when it began (BeginFlush). With the tier's
// tracking on a cluster, writes made elsewhere delete the copies too
// (OriginWritten), and a flush reported there deletes every copy
// (FlushSeen).
//
// Metrics, on the Registerer given to New, namespace rproxy, subsystem
// hotkey: salt_reads_total{outcome}, salt_missing_keys_total,
// salt_copy_fills_total, salt_copy_deletes_total and salt_keys.
package salt
