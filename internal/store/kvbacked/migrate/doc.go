// Package migrate converts a kv.Store an earlier storage layout wrote
// into package kvbacked's typed objects: the first layout (pools/,
// blocks/, affinity/, handles/; Run), and the layout that kept each node
// object whole under nodes/<node> (meta/layout "2"; Split, split.go,
// which says how processes of that version are fenced). The datastore's
// open path calls EnsureRead once per store, and only when
// kvbacked.ReadLayoutWarm found no layout marker or the earlier one: a
// store marked with this layout's value never reaches this package.
//
// # The first layout and the upgrade fence
//
// The first layout's keys are only read and written here. Its blocks/,
// affinity/ and handles/ keys are converted and then deleted. Its
// pools/<pool> keys are never deleted: Run copies each to the typed pool
// key and marks it Deleting in one transaction (fence.go), before it reads
// what it converts. A plugin of the earlier version still running on a
// node not yet upgraded guards every allocation by its pools' versions and
// allocates from no pool marked Deleting, so it fails its ADD (the kubelet
// retries until the new plugin is there) and cannot add first-layout state
// the conversion would miss; its DELs keep working on what is left of the
// first layout and never touch the typed keys. Keeping the marked keys
// also keeps such a plugin from re-creating a pool its config defines.
//
// The tests migrate the first-layout stores checked in under testdata
// (README.md there says how they were made); where a test needs a plugin
// of the earlier version running meanwhile, firstlayoutplugin_test.go plays it
// with the first layout's keys and guards.
package migrate
