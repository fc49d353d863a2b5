package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ipkeeper/ipkeeper/internal/allocator"
	"github.com/ipkeeper/ipkeeper/internal/ipam"
	"github.com/ipkeeper/ipkeeper/internal/leaks"
)

// Sticky addresses' lifecycle. A sticky handle whose pod is gone (its
// DEL never came) is parked, not released: the leak rules find it, the
// same two observations a grace period apart confirm it, and
// allocator.ParkObserved keeps its addresses for the identity. A parked
// reservation is freed when its identity ends — the StatefulSet is
// deleted or scaled below the pod's ordinal, or the VirtualMachine is
// deleted — or when it was parked longer than the TTL; again only on two
// observations a grace period apart, and guarded by the record as
// observed (allocator.ReleaseParked), so a reservation re-homed to a new
// pod in between is never freed.

// DefaultStickyTTL is how long a sticky reservation outlives its pod when
// its identity does not end first.
const DefaultStickyTTL = 24 * time.Hour

// Reasons a sticky reservation is freed (the ipkeeper_releases_total
// reason label).
const (
	StickyOwnerGone  leaks.Reason = "sticky-owner-gone"
	StickyScaledDown leaks.Reason = "sticky-scaled-down"
	StickyExpired    leaks.Reason = "sticky-expired"
)

// stickyState is what the sticky lifecycle keeps between passes; reset
// with the other trackers.
type stickyState struct {
	park, free leaks.Tracker
}

func (c *Controller) resetSticky() {
	c.sticky = stickyState{park: leaks.Tracker{Grace: c.cfg.LeakGrace}, free: leaks.Tracker{Grace: c.cfg.LeakGrace}}
}

// withoutSticky takes the leaks of sticky handles out of found: they are
// parked by stickyPass, not released.
func withoutSticky(found []leaks.Leak) (rest, sticky []leaks.Leak) {
	for _, l := range found {
		if l.Handle.Sticky != "" {
			sticky = append(sticky, l)
		} else {
			rest = append(rest, l)
		}
	}
	return rest, sticky
}

// stickyPass parks the confirmed sticky leaks and frees the confirmed
// ended reservations among the observed handles; it returns when a
// pending candidate is due (zero when none is).
func (c *Controller) stickyPass(ctx context.Context, a *allocator.Allocator, observed []allocator.Observed, stickyLeaks []leaks.Leak, now time.Time) time.Time {
	byKey := map[string]allocator.Observed{}
	for _, o := range observed {
		if o.Handle.Sticky != "" {
			byKey[leaks.Key(o.Handle)] = o
		}
	}
	var parkKeys []string
	for _, l := range stickyLeaks {
		parkKeys = append(parkKeys, leaks.Key(l.Handle))
	}
	toPark, next := c.sticky.park.Observe(now, parkKeys)

	ttl := c.cfg.StickyTTL
	if ttl <= 0 {
		ttl = DefaultStickyTTL
	}
	var freeKeys []string
	why := map[string]leaks.Reason{}
	for k, o := range byKey {
		if !o.Handle.IsParked() {
			continue
		}
		reason, err := c.stickyEnded(ctx, o.Handle, now, ttl)
		if err != nil {
			c.log.Warn("cannot tell whether a sticky identity ended; its reservation is kept", "identity", o.Handle.Sticky, "handle", o.Handle.ID, "err", err)
			continue
		}
		if reason != "" {
			freeKeys = append(freeKeys, k)
			why[k] = reason
		}
	}
	toFree, nextFree := c.sticky.free.Observe(now, freeKeys)
	next = earliest(next, nextFree)
	if len(toPark)+len(toFree) == 0 {
		return next
	}
	if reason := c.stale(ctx, now); reason != "" {
		c.log.Warn("not changing sticky reservations: the API view may be stale", "why", reason)
		return earliest(next, now.Add(max(time.Second, c.cfg.LeakGrace/4)))
	}
	for _, k := range toPark {
		o := byKey[k]
		if ctx.Err() != nil || c.paused() {
			return next
		}
		err := a.ParkObserved(ctx, o, now.UTC())
		attrs := []any{"identity", o.Handle.Sticky, "handle", o.Handle.ID, "node", o.Handle.Node, "address", addrList(o.Handle), "pod", podName(o.Handle)}
		switch {
		case errors.Is(err, allocator.ErrHandleChanged):
			c.log.Info("sticky allocation not parked: it changed since it was observed", append(attrs, "err", err)...)
		case err != nil:
			c.log.Error("parking a sticky allocation whose pod is gone failed", append(attrs, "err", err)...)
		default:
			c.log.Info("parked sticky allocation of a gone pod for its identity", attrs...)
		}
	}
	for _, k := range toFree {
		o := byKey[k]
		if ctx.Err() != nil || c.paused() {
			return next
		}
		freed, err := a.ReleaseParked(ctx, o)
		attrs := []any{"identity", o.Handle.Sticky, "handle", o.Handle.ID, "node", o.Handle.Node, "reason", string(why[k])}
		switch {
		case errors.Is(err, allocator.ErrHandleChanged):
			c.m.releaseSkips.WithLabelValues("changed").Inc()
			c.log.Info("sticky reservation not freed: it changed since it was observed (re-homed to a new pod)", append(attrs, "err", err)...)
		case err != nil:
			c.m.releaseSkips.WithLabelValues("error").Inc()
			c.log.Error("freeing a sticky reservation failed", append(attrs, "err", err)...)
		default:
			c.m.releases.WithLabelValues(string(why[k])).Inc()
			c.log.Info("freed sticky reservation", append(attrs, "address", joinAddrs(freed))...)
		}
	}
	return next
}

// stickyEnded says why parked handle h's reservation ends ("" when it
// stays): its identity's owner is gone or scaled below it, or it was
// parked longer than ttl.
func (c *Controller) stickyEnded(ctx context.Context, h ipam.Handle, now time.Time, ttl time.Duration) (leaks.Reason, error) {
	id, err := ipam.ParseStickyID(h.Sticky)
	if err != nil {
		return StickyExpired, nil // no identity can claim it again
	}
	if !now.Before(h.Parked.Add(ttl)) {
		return StickyExpired, nil
	}
	switch id.Kind {
	case ipam.StickyPod:
		set, ordinal, ok := statefulSetOf(id.Name)
		if !ok {
			return StickyOwnerGone, nil
		}
		sts, err := c.cfg.Client.AppsV1().StatefulSets(id.Namespace).Get(ctx, set, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return StickyOwnerGone, nil
		}
		if err != nil {
			return "", fmt.Errorf("statefulset %s/%s: %w", id.Namespace, set, err)
		}
		if sts.DeletionTimestamp != nil {
			return StickyOwnerGone, nil
		}
		replicas, start := int32(1), int32(0)
		if sts.Spec.Replicas != nil {
			replicas = *sts.Spec.Replicas
		}
		if o := sts.Spec.Ordinals; o != nil {
			start = o.Start
		}
		if ordinal < int(start) || ordinal >= int(start+replicas) {
			return StickyScaledDown, nil
		}
		return "", nil
	case ipam.StickyVM:
		return c.virtualMachineGone(ctx, id)
	}
	return StickyExpired, nil
}

// statefulSetOf splits a StatefulSet pod's name into the set's name and
// the ordinal.
func statefulSetOf(pod string) (string, int, bool) {
	i := strings.LastIndexByte(pod, '-')
	if i <= 0 {
		return "", 0, false
	}
	n, err := strconv.Atoi(pod[i+1:])
	if err != nil || n < 0 || strconv.Itoa(n) != pod[i+1:] {
		return "", 0, false
	}
	return pod[:i], n, true
}

// virtualMachineGone reads KubeVirt's VirtualMachine of the identity:
// StickyOwnerGone when it is not found (or being deleted). Without
// KubeVirt's API in the cluster it cannot tell, and only the TTL ends
// the reservation.
func (c *Controller) virtualMachineGone(ctx context.Context, id ipam.StickyID) (leaks.Reason, error) {
	rc := c.cfg.Client.Discovery().RESTClient()
	if rc == nil {
		return "", nil
	}
	if err := rc.Get().AbsPath("/apis/kubevirt.io/v1").Do(ctx).Error(); apierrors.IsNotFound(err) {
		return "", nil
	} else if err != nil {
		return "", fmt.Errorf("kubevirt.io/v1: %w", err)
	}
	raw, err := rc.Get().AbsPath("/apis/kubevirt.io/v1/namespaces", id.Namespace, "virtualmachines", id.Name).DoRaw(ctx)
	if apierrors.IsNotFound(err) {
		return StickyOwnerGone, nil
	}
	if err != nil {
		return "", fmt.Errorf("virtualmachine %s/%s: %w", id.Namespace, id.Name, err)
	}
	var vm metav1.PartialObjectMetadata
	if err := json.Unmarshal(raw, &vm); err != nil {
		return "", fmt.Errorf("virtualmachine %s/%s: %w", id.Namespace, id.Name, err)
	}
	if vm.DeletionTimestamp != nil {
		return StickyOwnerGone, nil
	}
	return "", nil
}
