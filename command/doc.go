// Package command is rproxy's command table: for every Redis command, its
// arity, flags and key positions, and how the proxy handles it.
//
// The table comes from the upstream's own COMMAND reply when the server
// answers it (so flags and key positions match the exact server version), and
// from a built-in table generated from Redis 7.0 otherwise. One table drives
// classification, cluster routing, coalescing eligibility, tier
// invalidation and policy, so those stages never disagree about what a
// command is.
//
// Lookups match names case-insensitively without allocating.
package command
