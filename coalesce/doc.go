// Package coalesce lets concurrent identical reads share one upstream call.
//
// A Group holds the flights in progress, by key (the caller's identity of a
// read: protocol, upstream user and the command's bytes). The first reader
// of a key leads a flight and sends the command upstream; a reader that
// arrives while the flight is still open joins it instead, and gets the
// leader's reply bytes. Which flights are open is the Window: with Unsent
// (the default) only flights whose command has not been written to the
// upstream socket yet (the leader's batch says when, through Sent), so Redis
// executes the shared read after every joiner arrived and the value a joiner
// gets was current at some moment during its own call; with InFlight also
// flights awaiting their reply that were sent after the joiner's last
// acknowledged write.
//
// When a flight that others joined is on the wire, the key's next flight is held
// (Flight.AwaitTurn) until that reply is in, and keeps taking joiners
// meanwhile. It still reads after every joiner arrived, so the Unsent
// window's promise holds; what it costs is up to one round trip of extra
// wait for the held flight's readers, and what it buys is that joiners
// gather for a whole round trip instead of only while a write is queued.
// A flight whose batch waits behind a stalled upstream connection (a paused
// write; Sender.Stalled) holds no one and, in the InFlight window, takes no
// joiner: the key's next reads go around the stall, as they would on Redis.
//
// Flights live in a fixed table of slots by key hash, and a flight nobody
// joined is recycled. With the filter on, a key not read since the owner's
// last Forget (every 5 ms in the proxy) starts no flight at all: on a spread
// keyspace nobody would join.
//
// The package knows nothing about sessions or connections; the proxy decides
// which commands are eligible and when a session may join at all (never when
// pinned, in a transaction, or after its own write in the same batch).
package coalesce
