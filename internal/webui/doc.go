// Package webui is the address map: a read-only web page that draws a
// datastore's address space — every pool as a bar of its addresses and its
// blocks as a grid coloured by the node that claims them, filled by use,
// with borrowed addresses, reserved addresses and leak candidates marked —
// with a node table, search by IP, block, pod or node, the addresses of a
// clicked block, and live updates. The page (HTML, CSS and plain
// JavaScript, embedded in the binary) uses only the JSON API below.
//
// # Serving it
//
// New returns a *UI; it is an http.Handler, and Run keeps its view of the
// datastore current until its context ends (Serve does both on a
// listener). ipkeeper-controller serves it on a listener of its own
// (--map-addr) with its leak source and a TokenReview authenticator:
//
//	u, err := webui.New(webui.Options{Datastore: ds, Leaks: ml, Listen: addr, Token: tok, Authenticate: review})
//	err = u.Serve(ctx, listener)
//
// Every URL the page uses is relative, so it also works mounted under a
// prefix (mux.Handle("/map/", http.StripPrefix("/map", u)) with Run
// started beside it). Options.Leaks supplies leak candidates;
// ipkeeperctl ui passes none.
//
// # Access
//
// The map never writes: methods other than GET and HEAD get 405. When
// Options.Listen is not a loopback address (or "localhost"), every request
// must carry the bearer token (Options.Token, or one Options.Authenticate
// approves, e.g. by a Kubernetes TokenReview): "Authorization: Bearer T",
// or the cookie set by opening the page once as ".../?token=T" (browsers
// cannot add headers to an EventSource); New refuses such a Listen without
// a way to check tokens. On loopback no token is needed unless one is
// configured, and requests whose Host header is not a loopback name are
// refused (403), so a rebound DNS name cannot read the map.
//
// # Following the datastore
//
// The map keeps a mirror of the typed store (docs/STORAGE.md) — pools,
// block claims and node objects, opened with datastore.Open (without the node lock;
// a store of the first layout is migrated by that open) — with per-block
// counts, so requests never read the datastore. A handle's records in
// several node objects (an address borrowed from another node) are shown
// as one handle; a claim whose block no node object holds shows the block
// claimed and empty; blocks of store.UnaffineNode belong to no node. A node
// object at a version the mirror holds is not decoded again, and within a
// changed one only the blocks and records that differ are replaced.
//
// etcd and the Kubernetes datastore are followed by a storeview.View
// (listed once at one revision, then kept by its watch, resumed after a
// break, listed again only when its revision expired: compacted away on
// etcd, 410 Gone from the API server); each change of the view is diffed
// into the mirror by version. Served by the controller, the map shows the
// controller's own view (Options.View). The local store holds a file lock while
// open, so it is opened only to read it: when inotify reports a write to
// its file (at most once a second) or, polled every second, its
// modification time, size or inode changed; an unchanged revision ends
// the read at once. A store that does not exist is shown empty and is not
// created. A store without a watch (Options.Store of another kind) is
// listed every PollInterval, and at least three times the last listing's
// duration after it, so that a large store's lists do not keep it busy.
// Every change bumps a generation;
// the rendered overview and node table are cached per generation.
//
// # JSON API
//
//	GET /api/pools          every pool with per-block counts (the overview)
//	GET /api/nodes          per node: blocks, addresses, in use, borrowed, lent, pods
//	GET /api/blocks/{cidr}  one block's addresses; {cidr} may be 10.0.0.0/26,
//	                        10.0.0.0-26 or any address in it; ?pool= picks the pool
//	GET /api/search?q=      an IP, a block, or a pod, node, container or handle name
//	GET /api/events         server-sent "update" events: {revision, generation, loaded, error}
//
// /api/pools and /api/nodes carry an ETag (the generation) and are served
// gzip-compressed when asked. Errors are {"error": "..."} with 400 (a
// malformed reference, a prefix that is not a block), 404 (no pool holds
// it) or 401/403/405 as above. The fields are documented on the view
// types (overview, poolView, blockView, nodeView, blockDetail, addrView,
// searchView) and in the README's "Address map" section.
package webui
