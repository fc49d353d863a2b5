package importer

import (
	"net/netip"
	"slices"
)

// Statuses of the objects of a Result.
const (
	// StatusCreated: ApplyStore wrote it.
	StatusCreated = "created"
	// StatusPresent: ipkeeper already holds it as the import has it (an
	// earlier run of the same import); nothing was written.
	StatusPresent = "present"
	// StatusWouldCreate: a dry run found it missing.
	StatusWouldCreate = "would-create"
)

// Change is what ApplyStore did with one object.
type Change struct {
	// Kind is "pool", "block" or "handle".
	Kind   string `json:"kind"`
	Name   string `json:"name"`
	Status string `json:"status"`
}

// Result is what ApplyStore did.
type Result struct {
	Source  string   `json:"source"`
	DryRun  bool     `json:"dryRun"`
	Changes []Change `json:"changes"`
	// Addresses are every address the import holds taken.
	Addresses []netip.Addr `json:"addresses"`
	Warnings  []string     `json:"warnings"`
}

// newResult is the Result an apply of plan starts from: no changes yet,
// the plan's addresses and its warnings (never nil, for JSON output).
func newResult(plan *Plan, dryRun bool) Result {
	res := Result{Source: plan.Source, DryRun: dryRun, Changes: []Change{}, Addresses: plan.Addresses(), Warnings: slices.Clone(plan.Warnings)}
	if res.Warnings == nil {
		res.Warnings = []string{}
	}
	return res
}

// changeStatus says what an apply did with an object: found it present,
// would create it (dry run), or created it.
func changeStatus(present, dryRun bool) string {
	switch {
	case present:
		return StatusPresent
	case dryRun:
		return StatusWouldCreate
	}
	return StatusCreated
}
