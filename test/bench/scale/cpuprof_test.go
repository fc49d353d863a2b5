package main

import (
	"bytes"
	"compress/gzip"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// profileBytes encodes a CPU profile as runtime/pprof writes one: sample
// types samples/count and cpu/nanoseconds, then samples with their values
// (packed, or one varint field each) and labels.
func profileBytes(t *testing.T, packed bool, samples []struct {
	ns    int64
	label [2]int64
}) []byte {
	t.Helper()
	strs := []string{"", "samples", "count", "cpu", "nanoseconds", labelKey, labelEtcd, "other"}
	var b []byte
	for _, st := range [][2]uint64{{1, 2}, {3, 4}} {
		var vt []byte
		vt = protowire.AppendTag(vt, 1, protowire.VarintType)
		vt = protowire.AppendVarint(vt, st[0])
		vt = protowire.AppendTag(vt, 2, protowire.VarintType)
		vt = protowire.AppendVarint(vt, st[1])
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, vt)
	}
	for _, s := range samples {
		var sb []byte
		sb = protowire.AppendTag(sb, 1, protowire.BytesType) // a location id
		sb = protowire.AppendBytes(sb, protowire.AppendVarint(nil, 1))
		if packed {
			vals := protowire.AppendVarint(protowire.AppendVarint(nil, 1), uint64(s.ns))
			sb = protowire.AppendTag(sb, 2, protowire.BytesType)
			sb = protowire.AppendBytes(sb, vals)
		} else {
			for _, v := range []uint64{1, uint64(s.ns)} {
				sb = protowire.AppendTag(sb, 2, protowire.VarintType)
				sb = protowire.AppendVarint(sb, v)
			}
		}
		if s.label != [2]int64{} {
			var lb []byte
			lb = protowire.AppendTag(lb, 1, protowire.VarintType)
			lb = protowire.AppendVarint(lb, uint64(s.label[0]))
			lb = protowire.AppendTag(lb, 2, protowire.VarintType)
			lb = protowire.AppendVarint(lb, uint64(s.label[1]))
			sb = protowire.AppendTag(sb, 3, protowire.BytesType)
			sb = protowire.AppendBytes(sb, lb)
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, sb)
	}
	b = protowire.AppendTag(b, 9, protowire.VarintType) // time_nanos, skipped
	b = protowire.AppendVarint(b, 12345)
	for _, s := range strs {
		b = protowire.AppendTag(b, 6, protowire.BytesType)
		b = protowire.AppendString(b, s)
	}
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return gz.Bytes()
}

func TestLabelledCPU(t *testing.T) {
	samples := []struct {
		ns    int64
		label [2]int64
	}{
		{ns: 10e6, label: [2]int64{5, 6}}, // part=etcd
		{ns: 20e6},                        // no label
		{ns: 40e6, label: [2]int64{5, 7}}, // part=other
		{ns: 5e6, label: [2]int64{5, 6}},  // part=etcd
	}
	for _, packed := range []bool{true, false} {
		etcd, all, err := labelledCPU(profileBytes(t, packed, samples), labelKey, labelEtcd)
		if err != nil {
			t.Fatal(err)
		}
		if etcd != 15*time.Millisecond || all != 75*time.Millisecond {
			t.Errorf("packed %v: labelled %v of %v, want 15ms of 75ms", packed, etcd, all)
		}
	}
	if _, _, err := labelledCPU([]byte("not gzip"), labelKey, labelEtcd); err == nil {
		t.Error("a profile that is not gzip was read")
	}
}

// A real profile of this process parses, and its labelled part is at
// most the whole (no timing is asserted).
func TestLabelledCPURealProfile(t *testing.T) {
	p := startCPUProfile()
	if !p.on {
		t.Skip("another CPU profile runs")
	}
	withEtcdLabel(t.Context(), func() {
		x := 0
		for i := range 1_000_000 {
			x += i % 7
		}
		_ = x
	})
	etcd, all, err := p.stop(labelKey, labelEtcd)
	if err != nil {
		t.Fatal(err)
	}
	if etcd < 0 || etcd > all {
		t.Errorf("labelled %v of %v", etcd, all)
	}
}
