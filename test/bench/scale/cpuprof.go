package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/pprof"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// The pprof label on the goroutines of the API server's etcd: it runs in
// this process, started by internal/kubetest inside pprof.Do, and the
// goroutines it starts (its gRPC server's per-connection ones included)
// inherit the label. A CPU profile of the window then splits this
// process's CPU into the etcd's and the rest (churn, proxies, runtime).
const (
	labelKey  = "part"
	labelEtcd = "etcd"
)

// withEtcdLabel runs f with the etcd label on its goroutine.
func withEtcdLabel(ctx context.Context, f func()) {
	pprof.Do(ctx, pprof.Labels(labelKey, labelEtcd), func(context.Context) { f() })
}

// cpuProfile is a CPU profile of this process being taken.
type cpuProfile struct {
	buf bytes.Buffer
	on  bool
}

// startCPUProfile starts profiling this process (nothing when another
// profile runs).
func startCPUProfile() *cpuProfile {
	p := &cpuProfile{}
	p.on = pprof.StartCPUProfile(&p.buf) == nil
	return p
}

// stop ends the profile and returns the CPU time of the samples labelled
// value for key, and of all samples.
func (p *cpuProfile) stop(key, value string) (labelled, all time.Duration, err error) {
	if !p.on {
		return 0, 0, errors.New("no CPU profile was taken")
	}
	pprof.StopCPUProfile()
	return labelledCPU(p.buf.Bytes(), key, value)
}

// labelledCPU reads a CPU profile (pprof's gzipped protocol buffer) and
// sums the cpu/nanoseconds values of the samples carrying label
// key=value, and of every sample.
func labelledCPU(gz []byte, key, value string) (labelled, all time.Duration, err error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return 0, 0, fmt.Errorf("profile: %w", err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		return 0, 0, fmt.Errorf("profile: %w", err)
	}
	// Profile: 1 sample_type (ValueType), 2 sample, 6 string_table.
	type sample struct {
		values []int64
		labels [][2]int64 // key, str as string indexes
	}
	var (
		types   [][2]int64 // type, unit
		samples []sample
		strs    []string
	)
	err = fields(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch {
		case num == 1 && typ == protowire.BytesType:
			var t [2]int64
			err := fields(v, func(n protowire.Number, _ protowire.Type, _ []byte, x uint64) error {
				if n == 1 || n == 2 {
					t[n-1] = int64(x)
				}
				return nil
			})
			types = append(types, t)
			return err
		case num == 2 && typ == protowire.BytesType:
			var s sample
			err := fields(v, func(n protowire.Number, t protowire.Type, sv []byte, x uint64) error {
				switch {
				case n == 2 && t == protowire.BytesType: // packed values
					for len(sv) > 0 {
						u, k := protowire.ConsumeVarint(sv)
						if k < 0 {
							return protowire.ParseError(k)
						}
						s.values = append(s.values, int64(u))
						sv = sv[k:]
					}
				case n == 2 && t == protowire.VarintType:
					s.values = append(s.values, int64(x))
				case n == 3 && t == protowire.BytesType:
					var l [2]int64
					err := fields(sv, func(ln protowire.Number, _ protowire.Type, _ []byte, lx uint64) error {
						if ln == 1 || ln == 2 {
							l[ln-1] = int64(lx)
						}
						return nil
					})
					s.labels = append(s.labels, l)
					return err
				}
				return nil
			})
			samples = append(samples, s)
			return err
		case num == 6 && typ == protowire.BytesType:
			strs = append(strs, string(v))
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("profile: %w", err)
	}
	str := func(i int64) string {
		if i < 0 || int(i) >= len(strs) {
			return ""
		}
		return strs[i]
	}
	cpu := -1
	for i, t := range types {
		if str(t[0]) == "cpu" && str(t[1]) == "nanoseconds" {
			cpu = i
		}
	}
	if cpu < 0 {
		return 0, 0, errors.New("profile: no cpu/nanoseconds sample type")
	}
	for _, s := range samples {
		if cpu >= len(s.values) {
			continue
		}
		d := time.Duration(s.values[cpu])
		all += d
		for _, l := range s.labels {
			if str(l[0]) == key && str(l[1]) == value {
				labelled += d
				break
			}
		}
	}
	return labelled, all, nil
}

// fields calls f for each field of a protocol buffer message: its number,
// wire type, and its bytes (length-delimited) or value (varint, fixed).
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.Fixed64Type:
			x, n = protowire.ConsumeFixed64(b)
		case protowire.Fixed32Type:
			var y uint32
			y, n = protowire.ConsumeFixed32(b)
			x = uint64(y)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}
