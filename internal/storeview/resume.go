package storeview

// Resumer is a Source whose watch, once the datastore has accepted it
// from a revision, reports every change made after that revision, and
// which says so by a Batch with Current set at that revision (the
// Kubernetes API: a WATCH from a resourceVersion). A view of such a source
// resumes a broken watch from its revision instead of listing again, and
// is synced again from that Batch on: it then holds the datastore's state
// as of its revision, and the watch brings it the changes made since, as
// after a list. Unlike a Progresser it cannot be asked to catch up, so
// Sync does not wait: the view trails the datastore by what its watch has
// not delivered yet.
type Resumer interface {
	Resumes()
}
