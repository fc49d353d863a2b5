// Package ipam is ipkeeper's pure allocation core: pools cut into blocks,
// blocks that hand out and take back addresses, and the handles that own
// them. Nothing here does I/O or blocks; every operation takes state in and
// returns new state (or an error) without changing its input, so the
// datastore layer can compare-and-swap the result.
package ipam
