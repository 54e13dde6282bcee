// Package hotkey finds the keys read most often and keeps their replies in
// a small local tier. It imports nothing else from rproxy: the proxy
// decides what a key and a variant are, when to fill and what invalidates.
//
// # Detector
//
// A Detector counts every read in a count-min sketch (Depth rows of Width
// counters; one xxhash of the key gives every row's index) and calls a key
// hot while its estimated rate is at or above Threshold reads per second.
// Rates are over a sliding Window, approximated by two sub-windows of one
// Window each, the current and the previous: a key's count is
// cur + prev*(1-f), where f is how far into the current sub-window the
// clock is. Each sketch word holds both counts, so a read is one atomic add
// per row and no lock. When a sub-window ends, the older counts are zeroed
// and take the new sub-window's reads.
//
// The sketch never underestimates. It overestimates a key's count by at
// most e/Width*N with probability at least 1-e^-Depth, where N is the reads
// in the window (the defaults, 4096x4: N/1507 with probability 0.98). So a
// key is named hot only if its own count (its reads, weighed the same way)
// is at least Threshold*Window - e/Width*N, with that probability, and a key
// whose count reaches Threshold*Window is never missed unless the candidate
// table is full of keys with higher estimates. Size Width for the node's
// total read rate R: the bound stays below the threshold while
// Width >= e*R/Threshold (the defaults: R up to about 750k reads/s; the
// average collision load, R/Width per counter, is about a third of the
// bound).
// Beyond it, cold keys sharing counters with busy ones may be named hot;
// memory and the table's size stay bounded, and the table stops churning
// (see below).
//
// Only keys in the candidate table are named: at most TopK of them, entered
// by a read whose estimate reaches Threshold, the lowest estimate evicted
// for a higher newcomer when full. A newcomer at or below the lowest
// estimate last seen is turned away without the lock; that floor rises with
// each eviction and resets at each sub-window's start, when candidates
// below Threshold also leave. So memory is fixed whatever the keyspace:
// Width*Depth*8 bytes of sketch and at most TopK keys of at most MaxKeyLen
// bytes (MemoryBytes); a read of a cold key allocates nothing.
//
// A key becomes hot on the read that brings its estimate to Threshold:
// within one Window of starting to be read at 4/3 x Threshold or faster
// (the previous sub-window's weight costs at most a quarter of a Window's
// reads), within two at Threshold. Hotness is recomputed on every query,
// so a key stops being hot as soon as its estimate drops below Threshold:
// one Window after its last read if it was read at less than 4x Threshold,
// two Windows after in any case. Counters are 32 bits: a key would need
// 4e9 reads in one Window to wrap.
//
// Observe reads the clock once per call. Time only needs to be right to a
// small fraction of Window, so a coarse clock (a timestamp refreshed every
// millisecond) saves the cost of time.Now on the read path.
//
// SetConfig changes a running Detector's settings. Threshold and TopK
// change in place and keep the counts (a lowered TopK drops the candidates
// with the lowest estimates); a new Window or sketch shape starts counting
// afresh behind an atomic pointer, so Observe costs the same either way.
//
// # Tier
//
// A Tier holds reply bytes by key and variant: a small number the caller
// chooses (Get, Put: e.g. the protocol of a GET), or bytes (GetVariant,
// PutVariant: e.g. the protocol and a command's exact bytes), at most 16
// of them per key, the oldest dropped for a new one. A key's variants are
// stored, evicted and invalidated together, least recently used key first,
// within MaxBytes. Each key is charged its length plus 160 bytes, and each
// reply its length plus 64 bytes (plus its name's, for a variant named by
// bytes), estimates of the allocations around them. A
// reply is served for at most TTLCap, or its own shorter TTL. Get returns
// the stored bytes themselves; they are never changed afterwards (a new
// reply replaces the slice, it never overwrites it).
//
// SetConfig changes the budget (a lower one evicts down to it at once) and
// the TTL cap (a lower one shortens the replies held to at most the new
// cap from the change on).
//
// Fills race invalidations: a value read from Redis just before a write
// must not be stored after that write's invalidation. A fill therefore
// takes a Token with Begin before the read leaves, and Put stores the
// reply only if, since the token's generation, none of these happened:
//
//   - Invalidate of the key, or of another key sharing its slot (keys hash
//     to 4096 slots; a collision only costs a fill);
//   - Clear;
//   - serving stopped (SetServing(false)) or resumed (SetServing(true)
//     while off).
//
// A global generation counts invalidations and clears; each slot remembers
// the generation of its last invalidation, and the tier that of its last
// clear. A Put whose token is older than either is refused. Refusing too
// often is safe; this rule never accepts a stale value: an invalidation
// that starts after Begin either finds the reply stored and removes it, or
// refuses the Put that comes after it, and one that completed before Begin
// answered a write that the read, sent after Begin, already sees. Fills
// begun while the tier was not serving are refused after it serves again,
// since invalidations may have been lost meanwhile.
//
// # Miss gate
//
// A MissGate collapses cache-aside stampedes: of the readers that find a
// key missing, the first (Miss returns no channel) fills it; the others
// wait (Wait) until the caller reports a write (Written) or their own wait
// ends, and then read again. A key whose fill does not come within Wait of
// the first miss is learned absent for AbsentFor, or until written, and
// its readers pass. At most MaxKeys keys are gated.
//
// A Churn counts invalidations per key in fixed memory (two rows of
// counters per sub-window, as the detector's sketch, only overestimating):
// a key invalidated more than Limit times within Window is write-hot, and
// the tier does not store it (proxy: hotkeys.write_limit).
//
// # Metrics
//
// On the Registerer given to the constructors (nil: none), namespace
// rproxy, subsystem hotkey: hot_keys; tier_hits_total, tier_misses_total,
// tier_invalidations_total, tier_evictions_total, tier_entries and
// tier_bytes; miss_fillers_total, miss_waits_total,
// miss_wait_timeouts_total and miss_absent_keys_total. No metric is
// labelled by key.
package hotkey
