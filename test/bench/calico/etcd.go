package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ipkeeper/ipkeeper/internal/store/etcd/etcdtest"
)

// quota is the embedded etcd's backend quota: a store that rewrites a large
// object on every ADD writes gigabytes of history in one workload, more
// than etcd's 2 GiB default allows before compaction.
const quota = 8 << 30

// server is the one embedded etcd both sides write to.
type server struct {
	es  *etcdtest.Server
	ep  string
	cli *clientv3.Client
}

func startEtcd() (*server, error) {
	es, err := etcdtest.StartWith("", etcdtest.Options{QuotaBackendBytes: quota})
	if err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{es.Endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		es.Close()
		return nil, err
	}
	return &server{es: es, ep: es.Endpoint, cli: cli}, nil
}

func (s *server) close() {
	_ = s.cli.Close()
	s.es.Close()
}

// version is the etcd server's version.
func (s *server) version(ctx context.Context) string {
	st, err := s.cli.Status(ctx, s.ep)
	if err != nil {
		return "unknown"
	}
	return st.Version
}

// mark is the store's revision and database size at one moment.
type mark struct {
	rev, dbSize int64
}

func (s *server) mark(ctx context.Context) (mark, error) {
	st, err := s.cli.Status(ctx, s.ep)
	if err != nil {
		return mark{}, fmt.Errorf("etcd status: %w", err)
	}
	return mark{rev: st.Header.Revision, dbSize: st.DbSize}, nil
}

// written sums the value sizes of the puts under prefix with a revision in
// (from.rev, to.rev], replaying etcd's history with a watch (call it before
// compacting past from.rev). The replay ends at a put of the driver's own
// to the key just past the prefix's range (outside every side's keys),
// made after to.
func (s *server) written(ctx context.Context, prefix string, from, to mark) (bytes, puts int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	end := clientv3.GetPrefixRangeEnd(prefix)
	r, err := s.cli.Put(ctx, end, "end of replay")
	if err != nil {
		return 0, 0, fmt.Errorf("replay of %s: %w", prefix, err)
	}
	last := r.Header.Revision
	wc := s.cli.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithRange(end+"\x00"), clientv3.WithRev(from.rev+1))
	for {
		wr, ok := <-wc
		if !ok {
			return 0, 0, fmt.Errorf("replay of %s: watch closed: %w", prefix, ctx.Err())
		}
		if err := wr.Err(); err != nil {
			return 0, 0, fmt.Errorf("replay of %s: %w", prefix, err)
		}
		for _, ev := range wr.Events {
			if ev.Kv.ModRevision >= last {
				return bytes, puts, nil
			}
			if ev.Type == clientv3.EventTypePut && ev.Kv.ModRevision <= to.rev && string(ev.Kv.Key) != end {
				bytes += int64(len(ev.Kv.Value))
				puts++
			}
		}
	}
}

// compact drops history up to now and defragments, so the next workload
// starts from a database holding current values only.
func (s *server) compact(ctx context.Context) error {
	m, err := s.mark(ctx)
	if err != nil {
		return err
	}
	if _, err := s.cli.Compact(ctx, m.rev, clientv3.WithCompactPhysical()); err != nil && !strings.Contains(err.Error(), "compacted") {
		return fmt.Errorf("etcd compact: %w", err)
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if _, err := s.cli.Defragment(dctx, s.ep); err != nil {
		return fmt.Errorf("etcd defragment: %w", err)
	}
	return nil
}
