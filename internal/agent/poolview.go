package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/ipkeeper/ipkeeper/internal/store"
	"github.com/ipkeeper/ipkeeper/internal/store/kube"
)

// poolView holds one partition's pools and reservations in memory, kept
// by a watch of its IPAMPools and IPAMReservations (client-go informers:
// one LIST each, then the watch), so that an ADD reads its pools without
// a request and a reservation applies from the first ADD after its watch
// event. It answers only while both informers have listed and no watch
// has failed since their last list; otherwise the caller reads the API.
type poolView struct {
	st      *kube.Store
	log     *slog.Logger
	factory dynamicinformer.DynamicSharedInformerFactory
	infs    []cache.SharedIndexInformer
	regs    []cache.ResourceEventHandlerRegistration
	stop    chan struct{}
	once    sync.Once

	mu    sync.Mutex
	pools map[string]store.Pool                // by pool name, without reservations
	byObj map[string]string                    // IPAMPool name -> pool name
	res   map[string]store.Reservation         // by object name
	bad   map[string]bool                      // objects that did not decode
	fails map[cache.SharedIndexInformer]string // resourceVersion listed when its watch last failed
}

var (
	gvrPools        = schema.GroupVersionResource{Group: kube.Group, Version: kube.Version, Resource: kube.ResourcePools}
	gvrReservations = schema.GroupVersionResource{Group: kube.Group, Version: kube.Version, Resource: kube.ResourceReservations}
)

// newPoolView sets up the watch of st's partition through client; start
// starts it.
func newPoolView(client dynamic.Interface, st *kube.Store, log *slog.Logger) (*poolView, error) {
	v := &poolView{st: st, log: log, stop: make(chan struct{}), pools: map[string]store.Pool{},
		byObj: map[string]string{}, res: map[string]store.Reservation{}, bad: map[string]bool{}, fails: map[cache.SharedIndexInformer]string{}}
	sel := st.Selector()
	v.factory = dynamicinformer.NewFilteredDynamicSharedInformerFactory(client, 0, "", func(o *metav1.ListOptions) { o.LabelSelector = sel })
	for _, r := range []struct {
		gvr schema.GroupVersionResource
		set func(name string, raw []byte, del bool)
	}{{gvrPools, v.setPool}, {gvrReservations, v.setReservation}} {
		inf := v.factory.ForResource(r.gvr).Informer()
		if err := inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, rf *cache.Reflector, err error) {
			v.mu.Lock()
			v.fails[inf] = inf.LastSyncResourceVersion()
			v.mu.Unlock()
			cache.DefaultWatchErrorHandler(ctx, rf, err)
		}); err != nil {
			return nil, err
		}
		reg, err := inf.AddEventHandler(handler(r.set))
		if err != nil {
			return nil, err
		}
		v.infs = append(v.infs, inf)
		v.regs = append(v.regs, reg)
	}
	return v, nil
}

// handler calls set with each object's name and JSON as it is added,
// updated or deleted.
func handler(set func(name string, raw []byte, del bool)) cache.ResourceEventHandlerFuncs {
	apply := func(obj any, del bool) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		raw, err := json.Marshal(u.Object)
		if err != nil {
			raw = nil
		}
		set(u.GetName(), raw, del)
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { apply(obj, false) },
		UpdateFunc: func(_, obj any) { apply(obj, false) },
		DeleteFunc: func(obj any) { apply(obj, true) },
	}
}

func (v *poolView) setPool(name string, raw []byte, del bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.bad, "pool/"+name)
	if n, ok := v.byObj[name]; ok {
		delete(v.pools, n)
		delete(v.byObj, name)
	}
	if del {
		return
	}
	p, err := v.st.DecodePool(raw)
	if err != nil {
		// The API read reports it when an ADD asks for it.
		v.bad["pool/"+name] = true
		v.log.Warn("a pool of the watch does not decode; ADDs read it from the API", "object", name, "err", err)
		return
	}
	v.pools[p.Spec.Name] = p
	v.byObj[name] = p.Spec.Name
}

func (v *poolView) setReservation(name string, raw []byte, del bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.res, name)
	delete(v.bad, "reservation/"+name)
	if del {
		return
	}
	r, err := v.st.DecodeReservation(raw)
	if err != nil {
		v.bad["reservation/"+name] = true
		v.log.Warn("a reservation of the watch does not decode; ADDs read pools from the API", "object", name, "err", err)
		return
	}
	v.res[name] = r
}

// start starts the informers; they run until shutdown.
func (v *poolView) start() { v.factory.Start(v.stop) }

// shutdown stops the informers and waits for them.
func (v *poolView) shutdown() {
	v.once.Do(func() { close(v.stop) })
	v.factory.Shutdown()
}

// current reports whether the view may answer: both informers listed,
// their handlers told of every object, and no watch failed since the
// list it holds (a failed watch lists again, at a new resourceVersion).
// The caller holds mu.
func (v *poolView) current() bool {
	for i, inf := range v.infs {
		if !inf.HasSynced() || !v.regs[i].HasSynced() {
			return false
		}
		if rv, failed := v.fails[inf]; failed {
			if rv == inf.LastSyncResourceVersion() {
				return false
			}
			delete(v.fails, inf)
		}
	}
	return len(v.bad) == 0
}

// answers reports whether the view is current (see current).
func (v *poolView) answers() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.current()
}

// errNotInView is pool's answer when the view cannot answer: the caller
// reads the API.
var errNotInView = errors.New("not in the agent's view of the pools")

// pool returns pool name with its reservations, as kube.Store.GetPool
// would; errNotInView when the view is not current or does not hold it
// (created a moment ago, or absent: the API answers which).
func (v *poolView) pool(name string) (store.Pool, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.current() {
		return store.Pool{}, errNotInView
	}
	p, ok := v.pools[name]
	if !ok {
		return store.Pool{}, fmt.Errorf("%w: pool %q", errNotInView, name)
	}
	var rs []store.Reservation
	for _, r := range v.res {
		if r.Pool == name {
			rs = append(rs, r)
		}
	}
	p.Spec.Reserved = store.ReservedPrefixes(name, rs)
	return p, nil
}
