package store

// Hooks into unexported paths for the external test package.

// IdempotencyWinner is the re-read after a lost insert, for the "winner gone" branch.
var IdempotencyWinner = (*DB).idempotencyWinner
